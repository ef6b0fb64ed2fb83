"""Scenarios, plans and the simulator from Python, against the hgsim command line."""
import json
import subprocess

import pytest

import hgsim


def test_load_scenario_gives_the_canonical_form(examples):
    s = hgsim.load_scenario(examples / "two-clusters.yaml")
    assert s["name"] and s["clusters"] and "training" in s
    # The canonical form loads back to itself, from a dict.
    assert hgsim.load_scenario(s) == s
    assert hgsim.load_scenario(str(examples / "two-clusters.yaml")) == s


def test_dicts_may_hold_numpy_scalars_and_paths(examples):
    import numpy as np
    s = hgsim.load_scenario(examples / "explicit-plan.yaml")
    edited = json.loads(json.dumps(s))
    edited["training"]["global_batch"] = np.int64(s["training"]["global_batch"])
    edited["clusters"][0]["nodes"] = np.int32(s["clusters"][0]["nodes"])
    assert hgsim.load_scenario(edited) == s
    with pytest.raises(TypeError, match="object"):
        hgsim.load_scenario({"name": object()})


def test_bad_scenarios_raise_errors_naming_the_file_and_the_key(examples, tmp_path):
    with pytest.raises(hgsim.Error, match="no-such-file.yaml"):
        hgsim.load_scenario(tmp_path / "no-such-file.yaml")
    s = hgsim.load_scenario(examples / "explicit-plan.yaml")
    s["clusters"][0]["gpu"] = "H1000"
    with pytest.raises(hgsim.Error, match=r"clusters\[0\]\.gpu"):
        hgsim.load_scenario(s)
    bad = tmp_path / "bad.yaml"
    bad.write_text((examples / "explicit-plan.yaml").read_text().replace("global_batch", "global_bach"))
    with pytest.raises(hgsim.Error, match=r"bad\.yaml:\d+:\d+"):
        hgsim.load_scenario(bad)
    with pytest.raises(TypeError):
        hgsim.load_scenario(42)


def test_resolve_explicit_plan(examples):
    r = hgsim.resolve(examples / "explicit-plan.yaml")
    s = hgsim.load_scenario(examples / "explicit-plan.yaml")
    assert r["plan"] == hgsim.load_plan(s["strategy"], s)
    assert set(r["model"]) == {"name", "layers", "hidden", "heads", "kv_heads", "vocab",
                               "ffn_hidden", "activation", "norm", "max_positions",
                               "tied_embeddings", "bias", "dropout"}
    assert sum(st["layers"] for st in r["plan"]["pipelines"][0]["stages"]) == r["model"]["layers"]
    for traffic in ("wan_activations", "wan_gradients"):
        codec = r["compression"][traffic]
        assert "codec" in codec
        hgsim.encoded_bytes(codec, (16,))  # a valid codec argument


def test_resolve_two_clusters_and_a_given_plan(examples):
    r = hgsim.resolve(examples / "two-clusters.yaml")
    assert r["plan"]["pipelines"]
    again = hgsim.resolve(examples / "two-clusters.yaml", r["plan"])
    assert again["plan"] == r["plan"]
    broken = json.loads(json.dumps(r["plan"]))
    broken["pipelines"][0]["stages"][0]["cluster"] = "atlantis"
    with pytest.raises(hgsim.Error, match="atlantis"):
        hgsim.load_plan(broken, examples / "two-clusters.yaml")


def test_simulate_equals_hgsim_run_json(examples, hgsim_binary):
    scenario = examples / "inline-model.yaml"
    ours = hgsim.simulate(scenario)
    cli = json.loads(subprocess.run([hgsim_binary, "run", str(scenario), "--json"], check=True,
                                    capture_output=True, text=True).stdout)
    assert ours["iteration_time_s"] == pytest.approx(cli["iteration_time_s"], rel=1e-9)
    assert set(ours) == set(cli)
    assert len(ours["devices"]) == len(cli["devices"])


def assert_breakdown_adds_up(r):
    T = r["iteration_time_s"]
    for d in r["devices"]:
        parts = d["breakdown"]
        assert sum(parts.values()) == pytest.approx(T, rel=1e-9)
        assert parts["bubble_s"] == pytest.approx(d["bubble_s"] + d["idle_s"], rel=1e-9, abs=1e-12)
        assert parts["gemm_s"] > 0
    for s in r["stages"]:
        assert sum(s["breakdown"].values()) == pytest.approx(T, rel=1e-9)


def test_simulate_breaks_each_stage_into_parts_that_add_up(examples):
    r = hgsim.simulate(examples / "two-clusters.yaml")
    assert_breakdown_adds_up(r)
    assert {s["stage"] for s in r["stages"]} == {d["stage"] for d in r["devices"]}


def test_simulate_with_a_layer_profile(examples, tmp_path):
    profile = {"format": "hgsim-layer-profile/1", "device": {"kind": "cpu", "name": "test"},
               "entries": [
                   {"what": "layer", "sequences": 2, "seq_len": 2048, "tp": 2,
                    "forward_s": 0.004, "backward_s": 0.008},
                   {"what": "logits", "sequences": 2, "seq_len": 2048, "tp": 2,
                    "forward_s": 0.002, "backward_s": 0.003},
                   {"what": "optimizer", "parameters": 1e8, "seconds": 0.01}]}
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(profile))
    r = hgsim.simulate(examples / "inline-model.yaml", layer_profile=path)
    assert "measured:layers.json" in json.dumps(r["provenance"])
    # A measured layer is split in the estimate's proportions: still adds up.
    assert_breakdown_adds_up(r)
    profile["entries"][0]["forward_s"] = -1
    path.write_text(json.dumps(profile))
    with pytest.raises(hgsim.Error, match=r"layers\.json: entries\[0\]\.forward_s"):
        hgsim.simulate(examples / "inline-model.yaml", layer_profile=path)


def test_plan_a_small_scenario(examples):
    s = hgsim.load_scenario(examples / "explicit-plan.yaml")
    s["strategy"] = "auto"
    result = hgsim.plan(s, time_budget_s=5, verify=1)
    best = result["best"]
    assert best["iteration_time_s"] > 0
    # The plan it found runs as it says.
    sim = hgsim.simulate(s, best["plan"])
    assert sim["iteration_time_s"] == pytest.approx(best["simulated_time_s"], rel=1e-9)


def test_plan_reports_a_diloco_winner_beside_the_best_synchronous_plan(examples):
    s = hgsim.load_scenario(examples.parent / "diloco" / "two-regions-planned.yaml")
    s["simulation"]["iterations"] = 200
    s["planner"].update({"inner_steps": [200], "fragments": [1]})
    result = hgsim.plan(s, time_budget_s=5, verify=1)
    best = result["best"]
    assert best["plan"]["outer_sync"]["method"] == "diloco"
    assert best["token_efficiency"] == 0.9
    assert "planner.diloco_token_efficiency" in best["token_efficiency_source"]
    assert best["effective_time_s"] == pytest.approx(best["simulated_time_s"] / 0.9, rel=1e-12)
    sync = result["best_synchronous"]
    assert "outer_sync" not in sync["plan"]
    assert sync["simulated_time_s"] > best["effective_time_s"]


def test_parse_quantity_is_the_scenario_loaders_parser():
    assert hgsim.parse_quantity("10Gbps", "bandwidth") == 1.25e9
    assert hgsim.parse_quantity("25MB", "bytes") == 25e6
    assert hgsim.parse_quantity("15ms", "duration") == pytest.approx(0.015)
    with pytest.raises(hgsim.Error, match="'10 furlongs'"):
        hgsim.parse_quantity("10 furlongs", "bandwidth")
    with pytest.raises(hgsim.Error, match="kind 'speed'"):
        hgsim.parse_quantity("10Gbps", "speed")
