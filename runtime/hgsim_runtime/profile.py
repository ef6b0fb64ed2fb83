"""Measures what the live workers execute, layer by layer, on this CPU: the simulator's
compute model for `hgsim validate live` (format "hgsim-layer-profile/1", read by
kernels/layer_profile.hpp).

For every (sequences, seq_len, tp) a stage of the job runs: one transformer layer's forward
and backward (the rank's tensor-parallel shard, its all-reduces left out: the simulator adds
those as communication), the LM head with the loss on last stages, and the Adam step over
each stage's parameters. With sequence parallelism the layer is still timed whole (its norms
and residual adds on every token, not the rank's 1/tp): a little more than the workers compute.
One thread, as the workers; medians of repeated runs after warm-up;
thread CPU time would hide nothing here, so wall time is used, as the workers' spans do.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time

import torch

from .model import Block, GptConfig, Head, TensorParallel

WARMUP, REPEATS = 3, 15


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def profile_job(job: dict, repeats: int = REPEATS, echo=None) -> dict:
    """The layer profile of every stage shape in a live job, measured here, alone: the
    timing the workers do between steps (profile_shapes_once), repeated."""
    torch.set_num_threads(1)
    cfg = GptConfig.of_job(job)
    stages = set()
    for p in job["pipelines"]:
        first_layer = 0
        for s, stage in enumerate(p["stages"]):
            last = s == len(p["stages"]) - 1
            params = cfg.segment_parameters(first_layer, stage["layers"], stage["tp"])
            stages.add((job["micro_batch"] // stage["dp"], stage["tp"], last, params))
            first_layer += stage["layers"]
    load_before = os.getloadavg()
    samples = []
    for sequences, tp, last, params in sorted(stages):
        once = profile_shapes_once(cfg, job["seed"], sequences, tp, last, params)
        for i in range(WARMUP + repeats):
            sample = once()
            if i >= WARMUP:
                samples.append(sample)
    profile = profile_of_samples(job, samples, "alone, one stage shape after another, "
                                 f"{repeats} repeats after {WARMUP} warm-up; medians")
    profile["device"]["conditions"].update(
        load_average_before=" ".join(f"{x:.2f}" for x in load_before),
        load_average_after=" ".join(f"{x:.2f}" for x in os.getloadavg()))
    if echo:
        for e in profile["entries"]:
            if e["what"] == "optimizer":
                echo(f"  adam   {e['parameters']} parameters: {e['seconds'] * 1e3:.3f} ms")
            else:
                echo(f"  {e['what']:6} sequences {e['sequences']} tp {e['tp']}: forward "
                     f"{e['forward_s'] * 1e3:.3f} ms, backward {e['backward_s'] * 1e3:.3f} ms")
    return profile


def profile_shapes_once(cfg: GptConfig, seed: int, sequences: int, tp: int, last: bool,
                        parameters: int):
    """A function that times, once per call, what one worker runs: a layer's forward and
    backward, the head's (last stage) and an Adam step over `parameters` values. For
    hgsim_runtime.worker's profile between steps."""
    block = Block(cfg, 0, seed, TensorParallel(0, tp, collectives=False))
    head = Head(cfg, seed) if last else None
    x = torch.randn(sequences, cfg.seq_len, cfg.hidden, requires_grad=True)
    g = torch.randn(sequences, cfg.seq_len, cfg.hidden)
    targets = torch.randint(0, cfg.vocab, (sequences, cfg.seq_len))
    params = [torch.nn.Parameter(torch.randn(parameters))]
    optimizer = torch.optim.Adam(params, lr=1e-3)

    def once() -> dict:
        out = {"sequences": sequences, "tp": tp, "parameters": parameters}
        t0 = _now()
        y = block(x)
        t1 = _now()
        y.backward(g)
        t2 = _now()
        out.update(layer_forward_s=t1 - t0, layer_backward_s=t2 - t1)
        if head is not None:
            t0 = _now()
            loss = head(x, targets)
            t1 = _now()
            loss.backward()
            t2 = _now()
            out.update(logits_forward_s=t1 - t0, logits_backward_s=t2 - t1)
        params[0].grad = torch.randn(parameters)
        t0 = _now()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        out["optimizer_s"] = _now() - t0
        return out

    return once


def profile_from_run(job: dict, out_dir: str) -> dict:
    """The layer profile from the workers' measurements between steps (steps after the first):
    medians per shape over every rank and step."""
    samples = []
    for role in job["ranks"]:
        with open(os.path.join(out_dir, f"rank{role['rank']}.steps.jsonl")) as f:
            for line in f:
                record = json.loads(line)
                if record["step"] > 0 and "profile" in record:
                    samples.append(record["profile"])
    if not samples:
        raise ValueError(f"{out_dir}: the workers recorded no profile between steps")
    return profile_of_samples(job, samples, "timed by every worker after each step of the "
                                            "live run, all workers at once; medians")


def profile_of_samples(job: dict, samples: list[dict], method: str) -> dict:
    """The "hgsim-layer-profile/1" document of profile_shapes_once samples: medians per shape
    (layer, logits) and per parameter count (optimizer)."""
    m = job["model"]
    entries = []
    shapes = sorted({(p["sequences"], p["tp"]) for p in samples})
    for sequences, tp in shapes:
        mine = [p for p in samples if (p["sequences"], p["tp"]) == (sequences, tp)]
        entries.append({"what": "layer", "sequences": sequences, "seq_len": job["seq_len"],
                        "tp": tp, "hidden": m["hidden"],
                        "forward_s": statistics.median(p["layer_forward_s"] for p in mine),
                        "backward_s": statistics.median(p["layer_backward_s"] for p in mine),
                        "recompute_s": 0.0, "repeats": len(mine)})
        heads = [p for p in mine if "logits_forward_s" in p]
        if heads:
            entries.append({"what": "logits", "sequences": sequences, "seq_len": job["seq_len"],
                            "tp": tp, "hidden": m["hidden"],
                            "forward_s": statistics.median(p["logits_forward_s"] for p in heads),
                            "backward_s": statistics.median(p["logits_backward_s"]
                                                            for p in heads),
                            "repeats": len(heads)})
    for n in sorted({p["parameters"] for p in samples}):
        mine = [p["optimizer_s"] for p in samples if p["parameters"] == n]
        entries.append({"what": "optimizer", "parameters": n,
                        "seconds": statistics.median(mine), "repeats": len(mine)})
    return {
        "format": "hgsim-layer-profile/1",
        "device": {"kind": "cpu", "name": cpu_name(), "threads": 1, "torch": torch.__version__,
                   "conditions": {"timer": "wall time (CLOCK_MONOTONIC)",
                                  "what": "hgsim_runtime.model Block/Head/Adam, one thread",
                                  "method": method}},
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "entries": entries,
    }
