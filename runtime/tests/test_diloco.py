"""DiLoCo and Streaming DiLoCo in the live runner, against a reference written here.

The reference trains one whole model per island in this process (no pipelines, no
messages), with the outer optimizer written out as Douillard et al. 2023 (Algorithm 1) with
PyTorch's Nesterov: the live workers, with their pipelines, replicas, rings and codecs, must
end with the same weights after two outer rounds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import hgsim
from hgsim_runtime import live
from hgsim_runtime import plan as planning
from hgsim_runtime.model import GptConfig, StageModule, TensorParallel

TINY = {"name": "tiny", "layers": 4, "hidden": 32, "heads": 2, "ffn_hidden": 128, "vocab": 256}
SEQ, SEED, LR = 16, 7, 1e-3


def job_of(plan, wan_bandwidth="10Gbps", **options):
    """The live job of `plan` on two clusters of four CPU-sized GPUs and the tiny model,
    resolved as hgsim live resolves a scenario (the runs below are not shaped but one)."""
    cluster = {"gpu": "A100-80GB-SXM", "nodes": 1, "gpus_per_node": 4,
               "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
               "nic": {"bandwidth": "200Gbps", "latency": "2us"}}
    full = json.loads(json.dumps(plan))
    for p in full["pipelines"]:
        p.setdefault("replicas", 1)
    s = {"name": "tiny-diloco", "model": TINY,
         "training": {"seq_len": SEQ, "precision": "fp32", "recompute": "none",
                      "global_batch": planning.global_batch(full)},
         "clusters": [dict(cluster, name="a"), dict(cluster, name="b")],
         "wan": [{"between": ["a", "b"], "bandwidth": wan_bandwidth, "latency": "1ms"}],
         "strategy": plan}
    return live.job_from(hgsim.resolve(s), **options)


def outer_sync(inner_steps, fragments=1, overlap_steps=1, codec="none"):
    return {"method": "diloco", "inner_steps": inner_steps, "fragments": fragments,
            "overlap_steps": overlap_steps, "codec": codec, "outer_optimizer": "nesterov",
            "outer_lr": 0.7, "outer_momentum": 0.9}


# Island 0: two replicas of one stage in cluster a (gradients all-reduced between them every
# step); island 1: one worker in cluster b.
REPLICAS = {"micro_batch": 2, "schedule": "1f1b",
            "pipelines": [{"replicas": 2, "micro_batches": 1,
                           "stages": [{"cluster": "a", "layers": 4}]},
                          {"micro_batches": 2, "stages": [{"cluster": "b", "layers": 4}]}]}
# Two islands of two stages (1 + 3 layers): fragment 0 (layers 0-1) spans both stages.
STAGES = {"micro_batch": 2, "schedule": "1f1b",
          "pipelines": [{"micro_batches": 2, "stages": [{"cluster": "a", "layers": 1},
                                                        {"cluster": "a", "layers": 3}]},
                        {"micro_batches": 2, "stages": [{"cluster": "b", "layers": 1},
                                                        {"cluster": "b", "layers": 3}]}]}


def run(tmp_path, name, plan, o, steps):
    job = job_of(dict(plan, outer_sync=o), steps=steps, seed=SEED, lr=LR, timeout_s=120)
    job["dump_weights"] = True
    out = tmp_path / name
    summary = live.execute(job, str(out), shape=False, timeout_s=240, stall_s=120,
                           echo=lambda *a: None)
    weights = {r["rank"]: torch.load(out / f"rank{r['rank']}.weights.pt") for r in job["ranks"]}
    return dict(job, out_dir=str(out)), summary, weights


# ---- the reference -------------------------------------------------------------------------

def fragment_of(name: str, layers: int, fragments: int) -> int:
    """Fragment f holds layers [f L / F, (f + 1) L / F); the embedding goes with the first,
    the final norm and head with the last (Streaming DiLoCo's split by depth)."""
    if name.startswith("embedding."):
        return 0
    if name.startswith("head."):
        return fragments - 1
    layer = int(name.split(".")[1])
    return next(f for f in range(fragments) if layer < (f + 1) * layers // fragments)


def reference(job, plan, o, steps):
    """Weights of every island after `steps` steps of DiLoCo, trained in this process."""
    cfg = GptConfig(layers=TINY["layers"], hidden=TINY["hidden"], heads=TINY["heads"],
                    ffn_hidden=TINY["ffn_hidden"], seq_len=SEQ)
    islands = plan["pipelines"]
    models = [StageModule(cfg, 0, cfg.layers, True, True, SEED, TensorParallel())
              for _ in islands]
    optimizers = [torch.optim.Adam(m.parameters(), lr=LR) for m in models]
    # The corpus file the run trained on (execute concatenates a folder into it).
    path = job["out_dir"] + "/corpus.txt"
    corpus = torch.from_numpy(np.fromfile(path, dtype=np.uint8).astype(np.int64))
    mb = plan["micro_batch"]
    sizes = [p.get("replicas", 1) * p["micro_batches"] * mb for p in islands]
    H, F, tau = o["inner_steps"], o["fragments"], o["overlap_steps"]
    names = [n for n, _ in models[0].named_parameters()]
    snapshot = {n: p.detach().clone() for n, p in models[0].named_parameters()}
    momentum = {n: torch.zeros_like(p) for n, p in snapshot.items()}
    # (step count when the fragment's pseudo-gradient is taken, when its update applies):
    # blocking every H steps; fragment f of F at (k H + (f + 1) H / F - tau, + tau).
    events = []
    for k in range(steps // H):
        for f in range(F):
            start = k * H + (f + 1) * H // F - (tau if F > 1 else 0)
            events.append((start, start + (tau if F > 1 else 0), f))
    pending = {}

    def outer_steps(done):
        """The updates that apply after `done` steps, then the syncs that start."""
        for start, applies, f in events:
            if applies == done and start < done:
                for n, value in pending.pop(f).items():
                    for model in models:
                        dict(model.named_parameters())[n].data.copy_(value)
        for start, applies, f in events:
            if start != done:
                continue
            mine = [n for n in names if fragment_of(n, cfg.layers, F) == f]
            new = {}
            for n in mine:
                g_n = sum(snapshot[n] - dict(m.named_parameters())[n].detach()
                          for m in models) / len(models)
                momentum[n] = o["outer_momentum"] * momentum[n] + g_n
                snapshot[n] = snapshot[n] - o["outer_lr"] * (g_n + o["outer_momentum"]
                                                              * momentum[n])
                new[n] = snapshot[n].clone()
            if applies == done:
                for n, value in new.items():
                    for model in models:
                        dict(model.named_parameters())[n].data.copy_(value)
            else:
                pending[f] = new

    outer_steps(0)  # tau = H / F: fragment 0 starts before the first step
    for step in range(steps):
        g = torch.Generator().manual_seed(SEED * 7919 + step)
        offsets = torch.randint(0, corpus.numel() - SEQ - 1, (sum(sizes),), generator=g)
        base = 0
        for i, model in enumerate(models):
            # The island's batch, replica by replica, micro-batch by micro-batch (the order
            # in which the workers add up gradients, so that the sums agree to the last bit
            # where they can: Adam turns rounding differences of near-zero gradients into
            # differences of up to its learning rate).
            total = None
            for _ in range(islands[i].get("replicas", 1)):
                for _ in range(islands[i]["micro_batches"]):
                    rows = offsets[base: base + mb]
                    base += mb
                    window = corpus[rows[:, None] + torch.arange(SEQ + 1)[None, :]]
                    loss = model(window[:, :-1], window[:, 1:]) * (1.0 / (sizes[i] * SEQ))
                    loss.backward()
                grads = [p.grad.clone() for p in model.parameters()]
                total = grads if total is None else [a + b for a, b in zip(total, grads)]
                model.zero_grad(set_to_none=True)
            for p, g in zip(model.parameters(), total):
                p.grad = g
            optimizers[i].step()
            optimizers[i].zero_grad(set_to_none=True)
        outer_steps(step + 1)
    return [{n: p.detach() for n, p in m.named_parameters()} for m in models]


def assert_matches(job, weights, expected):
    for role in job["ranks"]:
        mine = weights[role["rank"]]
        assert mine, role
        for name, value in mine.items():
            ref = expected[role["pipeline"]][name]
            diff = (value - ref).abs().max().item()
            assert diff < 1e-5, (role["rank"], name, diff)


# ---- the schedule ---------------------------------------------------------------------------

def test_schedule_is_the_simulators_closed_form():
    # Blocking: the whole model after every H-th step; an unfinished last round syncs nothing.
    assert [(e["fragment"], e["start_after"], e["applies_after"])
            for e in hgsim.outer_sync_events(7, 3)] == [(0, 3, 3), (0, 6, 6)]
    # Streaming, H = 4, F = 2, tau = 1: fragment f starts tau steps before its H / F slot ends.
    assert [(e["fragment"], e["start_after"], e["applies_after"])
            for e in hgsim.outer_sync_events(8, 4, 2, 1)] == [
        (0, 1, 2), (1, 3, 4), (0, 5, 6), (1, 7, 8)]
    assert hgsim.fragment_layers(4, 0, 2) == (0, 2) and hgsim.fragment_layers(5, 1, 2) == (2, 5)
    with pytest.raises(hgsim.Error, match="divide"):
        hgsim.outer_sync_events(8, 4, 3)


# ---- against the reference ------------------------------------------------------------------

def test_diloco_matches_the_reference_after_two_outer_rounds(tmp_path):
    o = outer_sync(2)
    job, summary, weights = run(tmp_path, "blocking", REPLICAS, o, steps=4)
    assert_matches(job, weights, reference(job, REPLICAS, o, 4))
    syncs = summary["outer_syncs"]
    assert syncs["count"] == 2 and [s["after_step"] for s in syncs["syncs"]] == [2, 4]
    assert all(t > 0 for t in syncs["seconds"])


def test_streaming_diloco_matches_the_reference(tmp_path):
    o = outer_sync(4, fragments=2, overlap_steps=1)
    job, summary, weights = run(tmp_path, "streaming", STAGES, o, steps=8)
    assert_matches(job, weights, reference(job, STAGES, o, 8))
    assert [(s["fragment"], s["after_step"], s["applies_after_step"])
            for s in summary["outer_syncs"]["syncs"]] == [(0, 1, 2), (1, 3, 4), (0, 5, 6),
                                                          (1, 7, 8)]


def test_streaming_diloco_whose_first_sync_starts_before_the_first_step(tmp_path):
    # overlap_steps = H / F: fragment 0's window starts the run (its pseudo-gradient is zero,
    # and its update takes the fragment back to the initial weights: alpha = 0).
    o = outer_sync(4, fragments=2, overlap_steps=2)
    job, summary, weights = run(tmp_path, "streaming-tau", STAGES, o, steps=8)
    assert_matches(job, weights, reference(job, STAGES, o, 8))
    assert [(s["fragment"], s["after_step"], s["applies_after_step"])
            for s in summary["outer_syncs"]["syncs"]] == [(0, 0, 2), (1, 2, 4), (0, 4, 6),
                                                          (1, 6, 8)]


# Two islands of one worker, one in each cluster: the outer sync is the only WAN traffic.
ONE_EACH = {"micro_batch": 2, "schedule": "1f1b",
            "pipelines": [{"micro_batches": 2, "stages": [{"cluster": "a", "layers": 4}]},
                          {"micro_batches": 2, "stages": [{"cluster": "b", "layers": 4}]}]}


def test_streaming_transfers_overlap_the_inner_steps_over_a_shaped_link(tmp_path):
    """Over a 2 Mbit/s shaped link a fragment's all-reduce (about 136 kB each way) takes
    about half a second, several tiny inner steps: the steps of its window run while it is
    in flight, and the workers wait at the step it applies after only for what is left."""
    from hgsim_runtime.wan import shaping_probe
    verdict = shaping_probe()
    if not verdict.usable:
        pytest.skip(f"links cannot be shaped here: {verdict.reason}")
    o = outer_sync(8, fragments=2, overlap_steps=3)
    job = job_of(dict(ONE_EACH, outer_sync=o), wan_bandwidth="2Mbps", steps=8, seed=SEED,
                 lr=LR, timeout_s=120)
    out = tmp_path / "overlap"
    summary = live.execute(job, str(out), shape=True, timeout_s=240, stall_s=120,
                           echo=lambda *a: None)
    assert summary["wan"]["shaped"] is True
    rows = summary["outer_syncs"]["syncs"]
    assert [(r["fragment"], r["after_step"], r["applies_after_step"]) for r in rows] == [
        (0, 1, 4), (1, 5, 8)]
    for role in job["ranks"]:
        with open(out / f"rank{role['rank']}.steps.jsonl") as f:
            steps = [json.loads(line) for line in f]
        syncs = [s for r in steps for s in r["outer_syncs"]]
        assert len(syncs) == 2
        for sync in syncs:
            duration = sync["end"] - sync["start"]
            assert 0 <= sync["exposed_s"] < duration, sync
            # The window's steps but its last (whose end includes the wait) ran while the
            # transfer was in flight.
            for k in range(sync["start_after"], sync["applies_after"] - 1):
                assert sync["start"] <= steps[k]["start"] < steps[k]["end"] <= sync["end"], (
                    k, steps[k]["start"], steps[k]["end"], sync)
            # The wait began after the window's steps, and the step ended once the transfer
            # had. On a loaded machine the window's steps can outlast the transfer: then the
            # step found it done and nothing is exposed; else it waited for what was left.
            last = steps[sync["applies_after"] - 1]
            assert last["start"] < sync["wait_start"] and sync["end"] <= last["end"], sync
            if sync["wait_start"] < sync["end"]:
                assert sync["exposed_s"] >= sync["end"] - sync["wait_start"] - 1e-3, sync
            else:
                assert sync["exposed_s"] < 0.25, sync
    for row in rows:
        assert row["exposed_s"] < row["seconds"], row


def test_int8_outer_sync_leaves_islands_bit_identical_and_sends_exact_sizes(tmp_path):
    o = outer_sync(2, codec="int8")
    trace = tmp_path / "trace.json"
    job = job_of(dict(REPLICAS, outer_sync=o), steps=2, seed=SEED, lr=LR, timeout_s=120)
    job["dump_weights"] = True
    out = tmp_path / "int8"
    summary = live.execute(job, str(out), shape=False, timeout_s=240, stall_s=120,
                           trace_path=str(trace), echo=lambda *a: None)
    weights = [torch.load(out / f"rank{r['rank']}.weights.pt") for r in job["ranks"]]
    for other in weights[1:]:
        for name, value in weights[0].items():
            assert torch.equal(value, other[name]), name
    # The pseudo-gradient (every parameter) crosses the WAN on one lane per member of the
    # larger island (two: the 2-replica island's members each carry one half, the other
    # island's one member both): each half is a ring all-reduce of two members, each sending
    # one quarter in the reduce-scatter and one in the all-gather, each int8-coded in rows of
    # the hidden size (the last row zero-padded, compress::wan_codec_shape).
    n = sum(v.numel() for v in weights[0].values())
    h = TINY["hidden"]

    def coded(values):  # rows of the hidden size, the last one zero-padded
        return hgsim.encoded_bytes("int8", [max(-(-values // h), 1), h])

    halves = [n // 2, n - n // 2]
    quarters = [q for x in halves for q in (x // 2, x - x // 2)]
    assert summary["outer_syncs"]["bytes_per_sync"] == [2 * sum(coded(x) for x in quarters)]
    assert summary["outer_syncs"]["syncs"][0]["wan_raw_bytes"] == 2 * 4 * n
    # Outer-sync transfers on the devices' comm tracks and the WAN tracks, as the simulator
    # names them.
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X" and e["name"].startswith("outer sync")]
    assert any(e["name"] == "outer sync fragment 0 stage 0 lane 0" for e in spans)


def test_validation_simulates_the_runs_steps_with_their_outer_syncs():
    from pathlib import Path

    from hgsim_runtime import validate
    path = Path(__file__).resolve().parents[2] / "scenarios" / "live" / "diloco.yaml"
    resolved = hgsim.resolve(str(path))
    job = live.job_from(resolved, steps=21)
    s = validate.live_scenario(job, validate.INSTANT_LINK)
    assert s["simulation"]["iterations"] == 21
    sim = hgsim.simulate(s)
    # H = 10: syncs after steps 10 and 20, as the live run's schedule says.
    assert sim["outer_sync"]["count"] == 2 == len(hgsim.outer_sync_events(21, 10))
