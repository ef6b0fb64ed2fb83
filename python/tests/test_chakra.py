"""Chakra execution traces from Python: export_chakra writes one file per GPU, and
simulate(chakra=...) plays them back on the same scenario in the same iteration time."""
import pytest

import hgsim


def test_export_then_simulate_the_trace_keeps_the_iteration_time(examples, tmp_path):
    scenario = examples / "inline-model.yaml"
    prefix = tmp_path / "gpt"
    result = hgsim.export_chakra(scenario, prefix)
    files = sorted(tmp_path.glob("gpt.*.et"))
    assert len(files) == result["gpus_used"]
    played = hgsim.simulate(scenario, chakra=prefix)
    assert played["ranks"] == len(files)
    assert played["iteration_time_s"] == pytest.approx(result["iteration_time_s"], rel=1e-6)


def test_a_damaged_trace_raises_an_error_naming_the_file(examples, tmp_path):
    (tmp_path / "t.0.et").write_bytes(b"\x07\x0a\x05\x30")
    with pytest.raises(hgsim.Error, match=r"t\.0\.et: byte 0: truncated"):
        hgsim.simulate(examples / "inline-model.yaml", chakra=tmp_path / "t")


def test_the_exported_collectives_are_coll_nodes_with_their_groups(examples, tmp_path):
    prefix = tmp_path / "gpt"
    hgsim.export_chakra(examples / "inline-model.yaml", prefix)
    import json
    groups = json.loads((tmp_path / "gpt.comm_groups.json").read_text())
    # tp 2 x pp 2 x dp 4 on 16 GPUs: tensor-parallel pairs and data-parallel groups of 4.
    assert sorted({len(ranks) for ranks in groups.values()}) == [2, 4]
