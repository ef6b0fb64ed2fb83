"""The live runner: schedules, placement, faithful execution of plans, codecs, failures.

The strongest property here: the same model, data and seed give the same loss, step by step,
under every plan (pipeline splits, GPipe or 1F1B, tensor and data parallelism, replicas,
several pipelines, ring or hierarchical sync) — a plan changes where and when the arithmetic
happens, never what it computes. A worker that reshards, reduces or orders anything wrong
breaks it. Sequence parallelism likewise: the same losses and weights as the plan without it,
and the same bytes sent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hgsim
from hgsim_runtime import live, validate
from hgsim_runtime import plan as planning
from hgsim_runtime.plan import LiveError
from hgsim_runtime.wan import PROBE_STEPS, list_namespaces, shaping_probe, stale_namespaces
from hgsim_runtime.worker import schedule_ops

ROOT = Path(__file__).resolve().parents[2]
LIVE_SCENARIOS = ROOT / "scenarios" / "live"

TINY = {"name": "tiny", "layers": 4, "hidden": 32, "heads": 2, "ffn_hidden": 128, "vocab": 256}


def scenario(plan, compression=None, model=TINY):
    """Two clusters of four CPU-sized GPUs joined by a WAN link, the tiny model, `plan`."""
    cluster = {"gpu": "A100-80GB-SXM", "nodes": 1, "gpus_per_node": 4,
               "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
               "nic": {"bandwidth": "200Gbps", "latency": "2us"}}
    full = json.loads(json.dumps(plan))
    for p in full["pipelines"]:
        p.setdefault("replicas", 1)
    return {"name": "tiny-test", "model": model,
            "training": {"seq_len": 16, "precision": "fp32", "recompute": "none",
                         "global_batch": planning.global_batch(full)},
            "clusters": [dict(cluster, name="a"), dict(cluster, name="b")],
            "wan": [{"between": ["a", "b"], "bandwidth": "10Gbps", "latency": "1ms"}],
            "strategy": plan, "compression": compression or {}}


def job_of(plan, compression=None, model=TINY, **options):
    return live.job_from(hgsim.resolve(scenario(plan, compression, model)), **options)


def stage(cluster, layers, tp=1, dp=1):
    return {"cluster": cluster, "layers": layers, "tp": tp, "dp": dp}


def run_plan(tmp_path, name, plan, compression=None, steps=2, model=TINY, dump_weights=False):
    job = job_of(plan, compression, model, steps=steps, seed=7, timeout_s=120)
    job["dump_weights"] = dump_weights
    summary = live.execute(job, str(tmp_path / name), shape=False, timeout_s=180, stall_s=120,
                           echo=lambda *a: None)
    records = {}
    for rank in range(len(job["ranks"])):
        with open(tmp_path / name / f"rank{rank}.steps.jsonl") as f:
            records[rank] = [json.loads(line) for line in f]
    losses = [float(row.split(",")[1]) for row in
              (tmp_path / name / "loss.csv").read_text().splitlines()[1:]]
    return job, summary, records, losses


# ---- schedules and placement ---------------------------------------------------------------

def schedule_oracle(schedule, p, s, m):
    """GPipe runs every forward, then every backward; 1F1B (PipeDream-Flush, Megatron-LM)
    warms up with p - s - 1 forwards, then alternates, then cools down. Written here from the
    papers, independently of the schedule the worker plays (_hgsim.schedule)."""
    if schedule == "gpipe":
        return [("F", k) for k in range(m)] + [("B", k) for k in range(m)]
    warmup = min(p - s - 1, m)
    ops = [("F", k) for k in range(warmup)]
    for k in range(m - warmup):
        ops += [("F", warmup + k), ("B", k)]
    return ops + [("B", k) for k in range(m - warmup, m)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(4, 8), (3, 2), (1, 3)])
def test_schedules_run_every_pass_once_and_backward_after_forward(schedule, p, m):
    for s in range(p):
        ops = schedule_ops(schedule, p, s, m)
        assert ops == schedule_oracle(schedule, p, s, m)
        assert sorted(ops) == sorted([("F", k) for k in range(m)] + [("B", k) for k in range(m)])
        for k in range(m):
            assert ops.index(("F", k)) < ops.index(("B", k))
        if schedule == "1f1b":
            # PipeDream-Flush: at most p - s micro-batches in flight on stage s.
            in_flight = peak = 0
            for op, _ in ops:
                in_flight += 1 if op == "F" else -1
                peak = max(peak, in_flight)
            assert peak == min(p - s, m)


def test_interleaved_schedule_with_as_many_micro_batches_as_stages_warms_up_on_everything():
    # Megatron-LM's all_warmup_microbatches: p = m = 4, v = 2, every stage runs its 8 chunk
    # forwards before its first backward.
    for s in range(4):
        ops = hgsim._hgsim.schedule("interleaved", 4, s, 4, 2)
        assert [kind for kind, _, _ in ops] == ["F"] * 8 + ["B"] * 8
    with pytest.raises(hgsim.Error, match="not gpipe, 1f1b or interleaved"):
        hgsim._hgsim.schedule("zigzag", 4, 0, 4)


def test_segments_follow_the_pipelines_splits():
    plan = {"micro_batch": 1, "pipelines": [
        {"micro_batches": 1, "stages": [stage("a", 1), stage("b", 3)]},
        {"micro_batches": 1, "stages": [stage("b", 2), stage("a", 2)]}]}
    job = job_of(plan)
    assert [(s["first_layer"], s["layers"], s["holders"]) for s in job["segments"]] == [
        (0, 1, [0, 0]), (1, 1, [1, 0]), (2, 2, [1, 1])]
    # Every segment is held by two groups: each is synced, in buckets numbered from the last
    # layers back, consecutively.
    numbers = [(s["first_bucket"], s["buckets"]) for s in reversed(job["segments"])]
    assert numbers[0][0] == 0 and all(b > 0 for _, b in numbers)
    assert all(numbers[k + 1][0] == numbers[k][0] + numbers[k][1]
               for k in range(len(numbers) - 1))


def test_placement_names_devices_as_the_simulator_does():
    path = str(LIVE_SCENARIOS / "wan-bound-1f1b.yaml")
    resolved = hgsim.resolve(path)
    plan = {"schedule": "1f1b", "micro_batch": 4,
            "pipelines": [{"micro_batches": 4, "replicas": 1,
                           "stages": [{"cluster": "east", "tp": 2, "layers": 2},
                                      {"cluster": "west", "dp": 2, "layers": 2}]}]}
    s = dict(resolved["scenario"], strategy=plan)
    s["clusters"] = [dict(c, nodes=2, gpus_per_node=2) for c in s["clusters"]]
    sim = hgsim.simulate(s)
    roles = hgsim.resolve(s)["ranks"]
    assert [r["device"] for r in roles] == [d["id"] for d in sim["devices"]]
    assert [(r["pipeline"], r["stage"], r["dp"], r["tp"]) for r in roles] == [
        (0, 0, 0, 0), (0, 0, 0, 1), (0, 1, 0, 0), (0, 1, 1, 0)]


def test_hierarchical_lanes_are_one_per_member_of_the_largest_cluster():
    """The live runner lays the lanes out as the simulator does (sim::hierarchical_lanes):
    clusters of 2 and 4 members give 4 lanes, the 2-member cluster's members carrying two
    consecutive lanes each (floor(j x 2 / 4)), the 4-member cluster's one each."""
    from hgsim_runtime import comm
    lanes, across, mine, carried = comm.lane_plan([[0, 1], [2, 3, 4, 5]], 1)
    assert lanes == 4
    assert across == [[0, 2], [0, 3], [1, 4], [1, 5]]
    assert mine == [0, 1] and carried == [[0, 1], [2, 3]]
    _, _, mine, carried = comm.lane_plan([[0, 1], [2, 3, 4, 5]], 4)
    assert mine == [2, 3, 4, 5] and carried == [[0], [1], [2], [3]]


# ---- faithful execution --------------------------------------------------------------------

PLANS = {
    "one GPU": {"micro_batch": 4, "pipelines": [{"micro_batches": 2, "stages": [stage("a", 4)]}]},
    "two stages 1f1b": {"micro_batch": 4, "schedule": "1f1b",
                        "pipelines": [{"micro_batches": 2,
                                       "stages": [stage("a", 2), stage("b", 2)]}]},
    "uneven gpipe": {"micro_batch": 4, "schedule": "gpipe",
                     "pipelines": [{"micro_batches": 2,
                                    "stages": [stage("a", 1), stage("b", 3)]}]},
    "dp2 -> tp2 resharded": {"micro_batch": 4,
                             "pipelines": [{"micro_batches": 2,
                                            "stages": [stage("a", 2, dp=2),
                                                       stage("b", 2, tp=2)]}]},
    "replicas, hierarchical": {"micro_batch": 2,
                               "grad_sync": {"algorithm": "hierarchical", "bucket": "100kB"},
                               "pipelines": [{"replicas": 2, "micro_batches": 2,
                                              "stages": [stage("a", 2), stage("b", 2)]}]},
    # One member in a, three in b: the lanes are b's three, all carried by a's one member
    # (sim::hierarchical_lanes), and the shares of the batch are unequal.
    "unequal clusters, hierarchical": {
        "micro_batch": 2, "grad_sync": {"algorithm": "hierarchical", "bucket": "100kB"},
        "pipelines": [{"replicas": 1, "micro_batches": 1, "stages": [stage("a", 4)]},
                      {"replicas": 3, "micro_batches": 1, "stages": [stage("b", 4)]}]},
    "two pipelines split differently, ring": {
        "micro_batch": 4, "grad_sync": {"algorithm": "ring", "bucket": "100kB"},
        "pipelines": [{"micro_batches": 1, "stages": [stage("a", 1), stage("b", 3)]},
                      {"micro_batches": 1, "stages": [stage("b", 2), stage("a", 2)]}]},
}


def test_every_plan_computes_the_same_losses(tmp_path):
    losses = {name: run_plan(tmp_path, f"p{i}", plan)[3]
              for i, (name, plan) in enumerate(PLANS.items())}
    reference = losses["one GPU"]
    assert len(reference) == 2
    assert abs(reference[0] - 5.545) < 0.05  # ln 256: an untrained byte model
    for name, values in losses.items():
        assert values == pytest.approx(reference, rel=1e-5), name


def test_compressed_gradients_keep_replicas_identical(tmp_path):
    plan = {"micro_batch": 2, "grad_sync": {"algorithm": "hierarchical", "bucket": "100kB"},
            "pipelines": [{"replicas": 2, "micro_batches": 1, "stages": [stage("a", 4)]},
                          {"replicas": 2, "micro_batches": 1, "stages": [stage("b", 4)]}]}
    _, _, plain, plain_losses = run_plan(tmp_path, "plain", plan, steps=3)
    _, _, coded, coded_losses = run_plan(tmp_path, "coded", plan, {"wan_gradients": "int8"},
                                         steps=3)
    for records in (plain, coded):
        sums = {r: rec[-1]["weights_checksum"] for r, rec in records.items()}
        assert len(set(sums.values())) == 1, sums  # four copies of one shard, bit for bit
    # The codec really ran (the weights moved differently), and int8 hardly moved the loss.
    assert plain[0][-1]["weights_checksum"] != coded[0][-1]["weights_checksum"]
    assert coded_losses == pytest.approx(plain_losses, rel=0.01)
    assert coded[0][-1]["wan_wire_bytes"] < 0.3 * coded[0][-1]["wan_raw_bytes"]


def test_activation_codec_sends_exactly_the_encoded_size(tmp_path):
    plan = PLANS["two stages 1f1b"]
    job, summary, records, _ = run_plan(tmp_path, "int8", plan, {"wan_activations": "int8"})
    values = job["micro_batch"] * job["seq_len"] * TINY["hidden"]
    encoded = hgsim.encoded_bytes("int8", [values // TINY["hidden"], TINY["hidden"]])
    passes = 2 * job["pipelines"][0]["micro_batches"] * job["steps"]  # forward + backward
    assert summary["wan_bytes"]["sent_by_workers_wire"] == passes * encoded
    assert summary["wan_bytes"]["sent_by_workers_raw"] == passes * values * 4


def test_powersgd_codes_an_odd_sized_chunk_as_the_simulator_does():
    # A gradient chunk of 10 rows of the hidden size and 7 values more: the simulator codes it
    # as an 11 x 32 matrix (compress::wan_codec_shape); live, the wire pads the last row and
    # PowerSGD compresses it too (it used to see a flat vector and send raw fp32).
    from hgsim_runtime.comm import Wire, codec_shape
    from hgsim_runtime.trace import Recorder
    hidden, elements = TINY["hidden"], 10 * TINY["hidden"] + 7
    assert codec_shape(elements, hidden) == [11, hidden]
    codec = {"codec": "powersgd", "rank": 2}
    wire = Wire(0, ["a", "b"], codec, hidden, Recorder())
    flat = torch.randn(elements, generator=torch.Generator().manual_seed(3))
    encoded = wire.encode("chunk", flat, "gradients")
    assert encoded.numel() == hgsim.encoded_bytes(codec, [11, hidden]) < elements * 4
    out = torch.empty(elements)
    wire.decode(encoded, out, "gradients")
    # The same as coding the zero-padded matrix by hand, cut back to the chunk's values.
    matrix = torch.zeros(11 * hidden)
    matrix[:elements] = flat
    by_hand = hgsim.decode(hgsim.TensorCodec(codec, [11, hidden]).encode(matrix.numpy()))
    assert torch.equal(out, torch.from_numpy(by_hand[:elements]))


# ---- sequence parallelism -----------------------------------------------------------------

# Four heads, so that tp 4 splits whole heads (TINY has two).
TINY4 = dict(TINY, name="tiny4", heads=4)

SEQUENCE_PARALLEL_PLANS = {
    # tp 1 -> tp 2: the last stage receives each tp rank's tokens from the two dp ranks and
    # gathers them before the head.
    "dp2 -> tp2 resharded": (PLANS["dp2 -> tp2 resharded"], TINY),
    # tp 2 -> dp 2: the embedding's output scattered to the tp ranks, whose tokens are then
    # resharded onto the next stage's dp slices.
    "tp2 -> dp2 1f1b": ({"micro_batch": 4, "schedule": "1f1b",
                         "pipelines": [{"micro_batches": 2,
                                        "stages": [stage("a", 2, tp=2), stage("b", 2, dp=2)]}]},
                        TINY),
    # dp 2 x tp 2 -> tp 4, one sequence per rank of the first stage: half sequences resharded
    # onto quarters of two sequences.
    "dp2 x tp2 -> tp4 gpipe": ({"micro_batch": 2, "schedule": "gpipe",
                                "pipelines": [{"micro_batches": 2,
                                               "stages": [stage("a", 2, tp=2, dp=2),
                                                          stage("b", 2, tp=4)]}]},
                               TINY4),
}


def bytes_sent(spans, category, prefix=""):
    """Bytes of a rank's spans of `category` whose name starts with `prefix`."""
    return sum(args["bytes"] for name, cat, _, _, _, args in spans
               if cat == category and name.startswith(prefix) and args and "bytes" in args)


def without_key_bias(name, value):
    """The weight, less the key bias of a QKV bias shard ([q | k | v]). The key bias's gradient
    is zero in exact arithmetic (softmax ignores what it adds to every score of a query): it
    gets rounding noise, which Adam divides by that noise's own size, so it moves by about
    1e-7 here whatever the plan, not by 1e-5 of its value."""
    if not name.endswith("qkv_b"):
        return value
    third = value.numel() // 3
    return torch.cat([value[:third], value[2 * third:]])


@pytest.mark.parametrize("name", list(SEQUENCE_PARALLEL_PLANS))
def test_sequence_parallelism_computes_and_sends_what_the_plan_without_it_does(tmp_path, name):
    """Sequence parallelism moves the norms, residual adds and row-parallel biases onto 1/tp
    of the tokens and turns each all-reduce into a reduce-scatter and an all-gather: the
    losses and every rank's weights equal the plan's without it to float rounding, and each
    rank sends the same bytes in the blocks' collectives and between the stages (the same
    reshard pieces), where the receivers no longer gather across tp."""
    plan, model = SEQUENCE_PARALLEL_PLANS[name]
    runs = {sp: run_plan(tmp_path, f"sp{int(sp)}", dict(plan, sequence_parallel=sp), steps=3,
                         model=model, dump_weights=True) for sp in (False, True)}
    job = runs[True][0]
    assert job["sequence_parallel"] is True and runs[False][0]["sequence_parallel"] is False
    assert runs[True][3] == pytest.approx(runs[False][3], rel=1e-5)
    for role in job["ranks"]:
        rank = role["rank"]
        out = {sp: tmp_path / f"sp{int(sp)}" for sp in runs}
        weights = {sp: torch.load(out[sp] / f"rank{rank}.weights.pt") for sp in runs}
        assert weights[True].keys() == weights[False].keys()
        for key in weights[True]:
            torch.testing.assert_close(without_key_bias(key, weights[True][key]),
                                       without_key_bias(key, weights[False][key]), rtol=1e-5,
                                       atol=1e-7, msg=lambda m: f"rank {rank} {key}: {m}")
            assert torch.allclose(weights[True][key], weights[False][key], rtol=0, atol=1e-5)
        spans = {sp: json.loads((out[sp] / f"rank{rank}.spans.json").read_text()) for sp in runs}
        tp = job["pipelines"][role["pipeline"]]["stages"][role["stage"]]["tp"]
        blocks = bytes_sent(spans[False], "tp_comm", "tp ")
        assert (blocks > 0) == (tp > 1), rank
        assert bytes_sent(spans[True], "tp_comm", "tp ") == blocks, rank
        assert bytes_sent(spans[True], "pp_comm") == bytes_sent(spans[False], "pp_comm"), rank
        assert not any(s[0] == "gather activations across tp" for s in spans[True])
        # What sequence parallelism adds, none of it simulated (sim/workload.cpp): the norms'
        # and biases' gradients all-reduced across tp, the embedding's gradient gathered on
        # the first stage, the tokens gathered before the head on the last.
        extras = {s[0] for s in spans[True] if s[0].startswith("sp ")}
        expected = {"sp all-reduce (norm and bias gradients)"} if tp > 1 else set()
        if tp > 1 and role["stage"] == 0:
            expected.add("sp all-gather (backward, embedding)")
        if tp > 1 and role["stage"] == len(job["pipelines"][role["pipeline"]]["stages"]) - 1:
            expected.add("sp all-gather (before the head)")
        assert extras == expected, rank
        assert not any(s[0].startswith("sp ") for s in spans[False])


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("change,message", [
    ({"schedule": "interleaved"}, "not executed live"),
])
def test_plans_that_cannot_run_live_are_refused_with_the_reason(change, message):
    plan = dict(PLANS["dp2 -> tp2 resharded"], **change)
    with pytest.raises(LiveError, match=message):
        job_of(plan)


def test_context_parallelism_is_simulated_only_and_refused_live_with_the_reason():
    """The simulator plays cp (ring attention); the live runner's attention sees whole
    sequences, so it names the stage and the reason instead of running something else."""
    plan = {"micro_batch": 1,
            "pipelines": [{"micro_batches": 2, "stages": [dict(stage("a", 4), cp=2)]}]}
    assert hgsim.resolve(scenario(plan))["plan"]["pipelines"][0]["stages"][0]["cp"] == 2
    with pytest.raises(LiveError, match=r"pipelines\[0\]\.stages\[0\]: cp=2: context parallelism"):
        job_of(plan)


def test_sequence_parallelism_needs_tp_to_divide_seq_len_the_simulators_check():
    """No check of its own: the scenario's check (models/zoo.cpp) refuses a tp that does not
    divide seq_len, for the scenario and again for the live run's scaled sequence."""
    plan = dict(PLANS["dp2 -> tp2 resharded"], sequence_parallel=True)
    uneven = scenario(plan)
    uneven["training"]["seq_len"] = 15
    message = "with sequence_parallel, tp 2 must divide training.seq_len 15"
    with pytest.raises(hgsim.Error, match=message):
        live.job_from(hgsim.resolve(uneven))
    with pytest.raises(LiveError, match="the scenario of the live run .*--scale-model seq_len=15"
                       rf"[^\n]*is refused:\n.*{message}"):
        job_of(plan, scale={"seq_len": 15})


def test_plans_the_simulator_refuses_are_refused_by_the_same_check():
    plan = dict(PLANS["dp2 -> tp2 resharded"], micro_batch=3)
    with pytest.raises(hgsim.Error, match="dp 2 does not divide micro_batch 3"):
        job_of(plan)


def test_too_many_workers_and_bad_scale_are_refused():
    with pytest.raises(LiveError, match="more than --max-workers 2"):
        job_of(PLANS["dp2 -> tp2 resharded"], max_workers=2)
    with pytest.raises(LiveError, match="KEY=VALUE"):
        planning.parse_scale("hidden:64")
    with pytest.raises(LiveError, match="positive integer"):
        planning.parse_scale("hidden=-3")


def test_big_models_are_scaled_down_and_say_so():
    big = dict(TINY, name="big", hidden=4096, heads=32, ffn_hidden=16384, vocab=32000)
    model, seq_len, notes = planning.scaled_model(big, 4096, {})
    assert (model["hidden"], model["heads"], seq_len, model["vocab"]) == (128, 4, 64, 256)
    assert model["layers"] == big["layers"]
    assert any("scaled down" in n for n in notes) and any("byte-level" in n for n in notes)


# ---- the command, over shaped links --------------------------------------------------------

def hgsim_live(*args, timeout=240):
    """Runs the live runner; the result also has `pid`, the runner's process id, which
    names its namespaces ("hg<pid>-...")."""
    proc = subprocess.Popen([sys.executable, "-m", "hgsim_runtime.live", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    result.pid = proc.pid
    return result


# Only this test's own runner and workers are looked for: other suites (or another checkout's
# test run) may run live workers and namespaces on the same machine at the same time.
def namespaces_of(pid: int) -> list[str]:
    return [n for n in list_namespaces() if n.startswith(f"hg{pid}-")]


def worker_processes(root) -> list[str]:
    """Live worker processes whose job lies under `root` (their command line names it)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if "hgsim_runtime.worker" in line and str(root) in line]


def test_live_run_over_a_shaped_link_writes_loss_trace_and_counts_wan_bytes(tmp_path):
    """Where links cannot be shaped, the same run falls back to unshaped loopback with a
    warning that names the probe's failed step and its remedy, and leaves nothing behind."""
    trace = tmp_path / "live.json"
    out = tmp_path / "out"
    result = hgsim_live(LIVE_SCENARIOS / "wan-bound-1f1b.yaml", "--steps", 3, "--trace", trace,
                        "--out", out, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    rows = (out / "loss.csv").read_text().splitlines()
    assert rows[0] == "step,loss,iteration_time_s,tokens" and len(rows) == 4
    # Track names are the simulator's: the same devices, threads and WAN directions.
    sim_trace = tmp_path / "sim.json"
    hgsim.simulate(str(LIVE_SCENARIOS / "wan-bound-1f1b.yaml"), trace=str(sim_trace))

    def names(path):
        # The tracks both traces have (the simulator adds lanes for slices that overlap).
        events = json.loads(Path(path).read_text())["traceEvents"]
        return {(e["pid"], e["tid"], e["args"]["name"]) for e in events
                if e["ph"] == "M" and "(lane " not in e["args"]["name"]}

    assert names(trace) == names(sim_trace)
    live_events = json.loads(trace.read_text())["traceEvents"]
    assert {e["cat"] for e in live_events if e["ph"] == "X"} >= {"forward", "backward",
                                                                  "optimizer", "pp_comm"}
    wan = summary["wan_bytes"]
    verdict = shaping_probe()
    if not verdict.usable:
        # The runner probed in its own process: the same step and remedy (the probe's
        # namespace name in the detail holds that process's pid).
        why_not = summary["wan"]["why_not"]
        assert summary["wan"]["shaped"] is False and wan["shaped_interfaces"] == {}
        assert PROBE_STEPS[verdict.step] in why_not and verdict.remedy in why_not, why_not
        assert "warning: the workers talk over unshaped loopback" in result.stderr
        assert why_not in result.stderr and any(why_not in n for n in summary["notes"])
        # No delay line without the namespaces, and the run says so.
        assert summary["wan"]["latency"]["applied_by"] == "none"
        assert "WAN latency not applied: links are not shaped" in "\n".join(summary["notes"])
        # Not compared with the namespaces before: the tests that shape run meanwhile.
        assert stale_namespaces() == []  # the runner's probe removed its namespace
        return
    assert summary["wan"]["shaped"] is True
    # The scenario's 15 ms, each way, held by the delay line; the run's notes say so.
    latency = summary["wan"]["latency"]
    assert latency["applied_by"] == "delay line" and latency["why_not"] is None
    assert set(latency["one_way_s"].values()) == {0.015}
    assert any(n.startswith("WAN latency applied by a userspace delay line")
               for n in summary["notes"])
    # tc counts every byte that crossed, headers and gloo's own messages included.
    counted = sum(wan["shaped_interfaces"].values())
    assert wan["sent_by_workers_wire"] <= counted <= 1.15 * wan["sent_by_workers_wire"] + 2e5
    assert namespaces_of(result.pid) == []


@pytest.mark.parametrize("mode,reason", [("crash", "exit status 3"), ("hang", "no progress")])
def test_a_failing_worker_stops_the_run_and_leaves_nothing_behind(tmp_path, mode, reason):
    result = hgsim_live(LIVE_SCENARIOS / "wan-bound-1f1b.yaml", "--steps", 3, "--out",
                        tmp_path, "--inject-failure", f"1:1:{mode}", "--stall", 6)
    assert result.returncode == 1, result.stderr
    assert "rank 1" in result.stderr and reason in result.stderr
    assert f"injected failure: {mode} at step 1" in result.stderr  # the worker's last lines
    assert namespaces_of(result.pid) == []
    assert worker_processes(tmp_path) == []


def test_across_machines_from_the_usual_environment(tmp_path):
    """--prepare-only writes the job; workers started by hand with MASTER_ADDR, MASTER_PORT,
    RANK and WORLD_SIZE (here all on this machine) train; --summarise gathers the result."""
    out = tmp_path / "job"
    prepared = hgsim_live(LIVE_SCENARIOS / "compute-bound-1f1b.yaml", "--steps", 2, "--out", out,
                          "--prepare-only")
    assert prepared.returncode == 0, prepared.stderr
    assert "RANK=1 WORLD_SIZE=2" in prepared.stdout
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29631", WORLD_SIZE="2")
    workers = [subprocess.Popen([sys.executable, "-m", "hgsim_runtime.worker", "--job",
                                 str(out / "job.json")], env=dict(env, RANK=str(rank)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for rank in range(2)]
    assert all(w.wait(timeout=120) == 0 for w in workers)
    summary = hgsim_live(out, "--summarise", "--json")
    assert summary.returncode == 0, summary.stderr
    assert json.loads(summary.stdout)["steps"] == 2
    wrong = subprocess.run([sys.executable, "-m", "hgsim_runtime.worker", "--job",
                            str(out / "job.json")], env=dict(env, RANK="0", WORLD_SIZE="3"),
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "WORLD_SIZE=3 but the job has 2 ranks" in wrong.stderr


def test_bad_input_is_exit_status_one_with_the_reason(tmp_path):
    missing = hgsim_live(tmp_path / "missing.yaml")
    assert missing.returncode == 1 and "missing.yaml" in missing.stderr
    interleaved = hgsim_live(ROOT / "scenarios" / "examples" / "inline-model.yaml")
    assert interleaved.returncode == 1
    assert "schedule 'interleaved' is simulated but not executed live" in interleaved.stderr
    bad_scale = hgsim_live(LIVE_SCENARIOS / "wan-bound-1f1b.yaml", "--scale-model", "hidden=x")
    assert bad_scale.returncode == 1 and "--scale-model: hidden=x" in bad_scale.stderr


# ---- validation where the links are not shaped ---------------------------------------------

def test_a_wan_bound_plan_is_refused_where_links_are_not_shaped(tmp_path):
    """Over unshaped loopback a WAN-bound plan would compare nothing about its WAN: `hgsim
    validate live` refuses it before measuring or running anything live, giving the WAN's
    simulated share and why the links are not shaped (--no-shape where they could be, the
    probe's verdict where they cannot)."""
    verdict = shaping_probe()
    yaml_text = (LIVE_SCENARIOS / "wan-bound-1f1b.yaml").read_text()
    # At 2 Mbit/s a micro-batch's 128 KiB of activations take 0.5 s each way: the WAN is most
    # of the iteration however slow this machine's cores are today.
    assert "bandwidth: 20Mbps" in yaml_text
    scenario_path = tmp_path / "wan-bound-2mbps.yaml"
    scenario_path.write_text(yaml_text.replace("bandwidth: 20Mbps", "bandwidth: 2Mbps"))
    args = validate.build_parser().parse_args(
        [str(scenario_path), "--out", str(tmp_path / "out"), "--repeats", "1"]
        + (["--no-shape"] if verdict.usable else []))
    with pytest.raises(LiveError) as refused:
        validate.run(args, echo=lambda *a: None)
    message = str(refused.value)
    assert "this plan's time depends on its WAN links" in message
    assert ("--no-shape was given" if verdict.usable else verdict.reason) in message
    share = re.search(r"(\d+)% of the iteration", message)
    assert share and int(share.group(1)) > 50, message
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["layer-profile-isolated.json"]


# ---- hostile input: refused before any worker starts ---------------------------------------
#
# Every bad value is one line naming the option and the value, exit status 1, no traceback,
# nothing created (checks.py). These run the command in this process (no worker starts).

COMPUTE_BOUND = LIVE_SCENARIOS / "compute-bound-1f1b.yaml"


def refused(capsys, *args, command=live.main):
    """Runs the command, which must refuse its input; returns its stderr, checked to be one
    line (the usage line of argparse aside) without a traceback."""
    try:
        status = command([str(a) for a in args])
    except SystemExit as e:  # argparse's usage errors
        status = e.code
    out, err = capsys.readouterr()
    assert status == 1, (out, err)
    assert "Traceback" not in err and "Warning" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith((" ", "usage:"))]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("flag,value,expected", [
    ("--timeout", "nan", "a positive finite number of seconds"),
    ("--timeout", "inf", "a positive finite number of seconds"),
    ("--timeout", "-1", "a positive finite number of seconds"),
    ("--timeout", "0", "a positive finite number of seconds"),
    ("--stall", "-5", "a positive finite number of seconds"),
    ("--stall", "nan", "a positive finite number of seconds"),
    ("--lr", "nan", "a positive finite learning rate"),
    ("--lr", "inf", "a positive finite learning rate"),
    ("--lr", "-1", "a positive finite learning rate"),
    ("--seed", "99999999999999999999999", "an integer from 0 to 9223372036854775807"),
    ("--seed", "-1", "an integer from 0 to"),
    ("--steps", "0", "an integer of at least 1"),
    ("--steps", "abc", "an integer of at least 1"),
    ("--max-workers", "0", "an integer of at least 1"),
])
def test_bad_numbers_are_refused_naming_the_option_and_the_value(capsys, tmp_path, flag, value,
                                                                  expected):
    out = tmp_path / "out"
    line = refused(capsys, COMPUTE_BOUND, flag, value, "--out", out)
    assert line == f"hgsim live: error: {flag}: expected {expected}" + line.split(expected)[1]
    assert line.endswith(f"found '{value}'")
    assert not out.exists()


def test_the_largest_seed_is_a_seed_every_generator_takes():
    from hgsim_runtime import checks
    from hgsim_runtime.model import _generator
    from hgsim_runtime.worker import data_seed
    assert data_seed(1234, 3) == 1234 * 7919 + 3  # the runs before draw what they drew
    torch.Generator().manual_seed(data_seed(checks.MAX_SEED, 10**6))
    _generator(checks.MAX_SEED, 1, 3)
    torch.manual_seed(checks.MAX_SEED)


@pytest.mark.parametrize("args,expected", [
    (["--steps", "1"], "--steps: expected an integer of at least 2, found '1' (step 0 warms up"),
    (["--repeats", "0"], "--repeats: expected an integer of at least 1, found '0'"),
    (["--repeats", "-2"], "--repeats: expected an integer of at least 1, found '-2'"),
    (["--cores", "0"], f"--cores: expected an integer from 1 to {os.cpu_count()}, found '0'"),
    (["--cores", "1000000"], f"--cores: expected an integer from 1 to {os.cpu_count()}"),
    (["--summarise"], "--summarise is an option of `hgsim live`, not of `hgsim validate live`"),
    (["--inject-failure", "0:1:crash"], "--inject-failure is an option of `hgsim live`"),
])
def test_validate_refuses_its_bad_options_before_profiling(capsys, tmp_path, args, expected):
    out = tmp_path / "out"
    line = refused(capsys, COMPUTE_BOUND, *args, "--out", out, command=validate.main)
    assert line.startswith(f"hgsim validate live: error: {expected}"), line
    assert not out.exists()


@pytest.mark.parametrize("text,expected", [
    ("[1,2]", "expected a JSON object such as '{\"wan_activations\": \"int8\"}', found a list"),
    ('"int8"', "found a string"),
    ("[" * 60000 + "]" * 60000, "nests too deep"),
    ("{nope", "not JSON"),
    ('{"nope": "int8"}', "--compression: unknown key 'nope'; valid: wan_activations, "
                         "wan_gradients"),
    ('{"wan_activations": "nope"}', "--compression: wan_activations: unknown codec 'nope'"),
    ('{"wan_activations": "int8\\u001b[2J"}', "unknown codec 'int8\\x1b[2J'"),
    (os.fsdecode(b'{"wan_activations": "\xff"}'), r""""\xff"}': not UTF-8 text"""),
])
def test_compression_must_be_a_json_object_of_the_scenarios_codecs(capsys, text, expected):
    line = refused(capsys, COMPUTE_BOUND, "--compression", text, "--prepare-only")
    assert expected in line and "\x1b" not in line
    assert len(line) < 400  # the 120 000 characters of the nested one are not echoed


def test_paths_are_checked_before_the_run_and_nothing_is_left_behind(capsys, tmp_path):
    from hgsim_runtime.checks import shown  # a path is quoted as any input: 60 characters
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    new = tmp_path / "new" / "deeper"
    trace = tmp_path / "none" / "t.json"
    cases = [
        (["--out", a_file], f"--out '{shown(a_file)}': not a folder (it is a regular file)"),
        (["--out", a_file / "sub"], f"--out '{shown(a_file / 'sub')}': cannot create the "
                                    f"folder: '{shown(a_file)}' is a regular file, not a folder"),
        (["--out", new, "--trace", tmp_path], f"--trace '{shown(tmp_path)}': it is a folder"),
        (["--out", new, "--trace", trace],
         f"--trace '{shown(trace)}': no folder '{shown(trace.parent)}'"),
        (["--corpus", "/dev/null"], "--corpus '/dev/null': not a regular file or a folder of "
                                    "text files (it is a character device)"),
        (["--corpus", tmp_path / "missing"], "--corpus '"),
    ]
    for args, expected in cases:
        line = refused(capsys, COMPUTE_BOUND, *args)
        assert line.startswith(f"hgsim live: error: {expected}"), line
        assert not (tmp_path / "new").exists()  # the folder made to check --out is gone
    # A path that is not UTF-8 (a byte \xff from the command line) is said so, not a
    # UnicodeEncodeError; its byte is shown escaped.
    for args in ([os.fsdecode(b"/nonexistent/\xff.yaml")],
                 [COMPUTE_BOUND, "--out", os.fsdecode(b"/nonexistent/\xff")]):
        line = refused(capsys, *args)
        assert "is not UTF-8" in line and "\\xff" in line, line


def test_scale_model_keys_once_and_a_model_that_cannot_fit_is_refused(capsys, tmp_path):
    with pytest.raises(LiveError, match="hidden is given twice"):
        planning.parse_scale("hidden=64,hidden=32")
    # The simulator's memory estimate (models/) of every worker, against what is available.
    plan = PLANS["two stages 1f1b"]
    job_of(plan, scale={"seq_len": 64})  # fits in 1 GB: no error
    live.check_memory(job_of(plan, scale={"seq_len": 64}), available=1e9)
    with pytest.raises(LiveError, match=r"needs about [\d.]+ GiB for its 2 workers, more than "
                                        r"the 0\.9 GiB .* seq_len 8192.*--scale-model"):
        live.check_memory(job_of(plan, scale={"seq_len": 8192}), available=1e9)
    out = tmp_path / "out"
    line = refused(capsys, COMPUTE_BOUND, "--scale-model", "seq_len=100000", "--out", out)
    assert "needs about" in line and "seq_len 100000" in line
    assert not out.exists()


def test_an_injected_failure_must_name_a_rank_and_a_step_of_the_run(capsys):
    line = refused(capsys, COMPUTE_BOUND, "--inject-failure", "9:1:crash", "--prepare-only")
    assert line.endswith("--inject-failure 9:1:crash: rank 9 is not one of the plan's ranks "
                         "0..1")
    line = refused(capsys, COMPUTE_BOUND, "--steps", 1, "--inject-failure", "0:5:crash",
                   "--prepare-only")
    assert line.endswith("step 5 is past the run's steps 0..0 (--steps 1)")


def test_a_zero_stage_is_noted_and_not_simulated_by_validation():
    job = job_of(dict(PLANS["dp2 -> tp2 resharded"], zero=2))
    assert any(n.startswith("ZeRO stage 2 is not executed live") for n in job["notes"])
    assert hgsim.resolve(job["live_scenario"])["choices"]["zero"] == 0
    assert not any("ZeRO" in n for n in job_of(PLANS["dp2 -> tp2 resharded"])["notes"])


def test_warnings_are_plain_lines_said_once_and_errors_once(capsys, tmp_path):
    """hgsim's warnings as the command line prints them (not Python's UserWarning with a line
    of source), once; the scenario's strategy's left out when --plan replaces it; an error
    with one 'error:' and reported once."""
    idle = dict(PLANS["two stages 1f1b"])
    path = tmp_path / "idle.json"
    path.write_text(json.dumps(scenario(idle)))  # 1 of the 4 GPUs of each cluster
    assert live.main([str(path), "--prepare-only", "--out", str(tmp_path / "job")]) == 0
    err = capsys.readouterr().err
    assert "UserWarning" not in err and "resolve(" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and all(re.match(rf"{re.escape(str(path))}: warning: "
                                            "strategy.pipelines: the plan uses 1 of the 4 GPUs",
                                            line) for line in lines), err
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(dict(idle, pipelines=[
        dict(p, stages=[dict(s, dp=4) for s in p["stages"]]) for p in idle["pipelines"]])))
    assert live.main([str(path), "--plan", str(plan), "--prepare-only", "--out",
                      str(tmp_path / "job2")]) == 0
    assert capsys.readouterr().err == ""
    line = refused(capsys, path, "--plan", plan, "--compression", '{"wan_gradients": "nope"}')
    assert line.count("error:") == 1 and line.count("nope") == 1


def write_run(folder: Path, job: dict, steps_done: dict[int, int]):
    """The files a run's workers leave: every rank's step records and spans."""
    for role in job["ranks"]:
        rank = role["rank"]
        records = [{"step": s, "rank": rank, "start": s, "end": s + 0.1, "loss_sum": 5.0 * 16,
                    "tokens": 16, "compute_s": 0.05, "wan_raw_bytes": 0, "wan_wire_bytes": 0}
                   for s in range(steps_done[rank])]
        (folder / f"rank{rank}.steps.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records))
        (folder / f"rank{rank}.spans.json").write_text(
            json.dumps([["forward", "forward", 0, 0.0, 0.01, None]]))


def test_summarise_refuses_what_is_not_a_finished_run(capsys, tmp_path):
    not_a_job = tmp_path / "not-a-job"
    not_a_job.mkdir()
    (not_a_job / "job.json").write_text("[]")
    line = refused(capsys, not_a_job, "--summarise")
    assert line.endswith("': job.json: not a job: a list, not an object")
    run = tmp_path / "run"
    assert live.main([str(COMPUTE_BOUND), "--steps", "3", "--prepare-only", "--out",
                      str(run)]) == 0
    capsys.readouterr()
    job = json.loads((run / "job.json").read_text())
    # A worker killed at its step 2 of 3: the run did not finish, nothing is summarised.
    write_run(run, job, {0: 3, 1: 2})
    line = refused(capsys, run, "--summarise")
    assert line.endswith("': the run did not finish: rank 1 recorded 2 of 3 steps (the rank "
                         "logs say why); a summary needs every rank's steps")
    assert not (run / "summary.json").exists() and not (run / "loss.csv").exists()
    # Finished, but the trace cannot be written: the results are, and the message says where.
    write_run(run, job, {0: 3, 1: 3})
    if os.path.exists("/dev/full"):
        line = refused(capsys, run, "--summarise", "--trace", "/dev/full")
        assert line == (f"hgsim live: error: --trace '/dev/full': cannot write it: No space left "
                        f"on device; loss.csv and summary.json are in {run}")
        assert json.loads((run / "summary.json").read_text())["steps"] == 3
        assert len((run / "loss.csv").read_text().splitlines()) == 4
    assert live.main([str(run), "--summarise", "--trace", str(tmp_path / "t.json")]) == 0
    assert json.loads((run / "summary.json").read_text())["trace"] == str(tmp_path / "t.json")


def test_a_worker_started_by_hand_checks_its_environment(tmp_path):
    from hgsim_runtime import checks
    bad = [({"WORLD_SIZE": "abc"}, "WORLD_SIZE: expected an integer of at least 1, found 'abc'"),
           ({"WORLD_SIZE": "3"}, "WORLD_SIZE=3 but the job has 2 ranks"),
           ({"RANK": "2"}, "RANK: expected an integer from 0 to 1, found '2'"),
           ({"RANK": "0", "MASTER_PORT": "99999"},
            "MASTER_PORT: expected an integer from 1 to 65535, found '99999'"),
           ({"RANK": "0", "MASTER_ADDR": ""}, "MASTER_ADDR: an empty address"),
           ({}, "--rank or the RANK environment variable is required")]
    for environ, message in bad:
        with pytest.raises(LiveError, match=re.escape(message)):
            checks.worker_environment(environ, 2, None)
    assert checks.worker_environment({"RANK": "1", "MASTER_PORT": "29500"}, 2, None) == \
        (1, None, 29500)
    # The command: one line, exit status 1, for a bad variable and for a file not a job.
    (tmp_path / "job.json").write_text('{"ranks": 3}')
    for env, job, message in [({"RANK": "0", "WORLD_SIZE": "abc"}, "", "WORLD_SIZE: expected"),
                              ({"RANK": "0"}, tmp_path / "job.json",
                               "not a job: 'ranks' is missing or not a list")]:
        if not job:
            assert live.main([str(COMPUTE_BOUND), "--prepare-only", "--out",
                              str(tmp_path / "job")]) == 0
            job = tmp_path / "job" / "job.json"
        worker = subprocess.run([sys.executable, "-m", "hgsim_runtime.worker", "--job", str(job)],
                                env=dict(os.environ, **env), capture_output=True, text=True,
                                timeout=60)
        assert worker.returncode == 1 and "Traceback" not in worker.stderr, worker.stderr
        assert worker.stderr.startswith("hgsim_runtime.worker: error: ") and message in \
            worker.stderr and len(worker.stderr.splitlines()) == 1, worker.stderr


def test_ctrl_c_ends_the_run_in_one_line_with_status_130(tmp_path):
    """Ctrl-C: every worker and namespace removed, one line, exit status 130 (128 + SIGINT)."""
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "hgsim_runtime.live", str(COMPUTE_BOUND),
                             "--steps", "1000", "--out", str(tmp_path)],
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while "step 1/" not in proc.stdout.readline() and time.monotonic() < deadline:
            pass
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "hgsim live: interrupted" and "Traceback" not in err
    assert worker_processes(tmp_path) == [] and namespaces_of(proc.pid) == []


def test_the_merged_trace_puts_overlapping_slices_on_lanes(tmp_path):
    # Concurrent sends of one rank (and of two ranks on one WAN direction) partly overlap:
    # Perfetto drops such slices, so they go to lanes as in the simulator's traces
    # (sim/trace.cpp): thread tid + k * 2^20, named "... (lane k+1)".
    from hgsim_runtime import trace as tracing
    devices = [{"rank": 0, "cluster": "a", "name": "a/n0/g0"},
               {"rank": 1, "cluster": "b", "name": "b/n0/g0"},
               {"rank": 2, "cluster": "a", "name": "a/n0/g1"}]
    spans = {0: [["send 0", "pp_comm", 1, 0.0, 2.0, {"to": 1, "bytes": 10}],
                 ["send 1", "pp_comm", 1, 1.0, 3.0, {"to": 1, "bytes": 10}],
                 ["send 2", "pp_comm", 1, 2.0, 2.5, {"to": 1, "bytes": 10}]],
             1: [["fwd", "compute", 0, 0.0, 1.0, None]],
             2: [["send 3", "pp_comm", 1, 0.5, 1.5, {"to": 1, "bytes": 10}]]}
    path = tmp_path / "t.json"
    tracing.merge(str(path), ["a", "b"], devices, spans, ["wan:a->b", "wan:b->a"], 0.0)
    events = json.loads(path.read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    by_thread = {}
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in names, e  # every slice on a named thread
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for thread, slices in by_thread.items():
        slices.sort()
        for (_, end), (start, _) in zip(slices, slices[1:]):
            assert end <= start, (names[thread], slices)
    assert names[(0, 1 + tracing.LANE_STRIDE)] == "a/n0/g0 comm (lane 2)"
    wan = [t for t in by_thread if t[0] == 2]
    assert len(wan) == 3 and sum(len(by_thread[t]) for t in wan) == 4  # 4 sends over the WAN
    assert names[(2, 0 + 2 * tracing.LANE_STRIDE)] == "wan:a->b (lane 3)"


def test_validation_gives_the_simulation_the_latency_the_delay_line_applied():
    """With the delay line the simulated WAN has the scenario's latency plus the loopback's
    (the veth path under it); without it, the loopback's alone, as the live run had."""
    job = {"live_scenario": {
        "clusters": [{"name": "a"}, {"name": "b"}],
        "wan": [{"between": ["a", "b"], "bandwidth": "20Mbps", "latency": "15ms"}]}}
    loopback = {"latency_s": 20e-6, "bandwidth_bytes_per_s": 2e9}
    delayed = validate.live_scenario(job, loopback, wan_delayed=True)
    undelayed = validate.live_scenario(job, loopback, wan_delayed=False)
    assert hgsim.parse_quantity(delayed["wan"][0]["latency"], "duration") == pytest.approx(0.01502)
    assert hgsim.parse_quantity(undelayed["wan"][0]["latency"], "duration") == pytest.approx(20e-6)
