"""From a scenario and a plan to a live job: the scaled model, placement, checks.

Everything here is pure data (dicts as `hgsim.resolve` gives them), so it can be tested
without starting a worker.
"""

from __future__ import annotations

import math
import os

import hgsim

BYTE_VOCAB = 256


class LiveError(ValueError):
    """A plan the live runner cannot execute, or a bad option; the message says why and what
    would work."""


# The scaled model when the scenario's model is too big for CPU workers.
DEFAULT_SCALE = {"hidden": 128, "heads": 4, "seq_len": 64}
# Above this hidden size (or seq_len) the model is scaled down by default.
MAX_LIVE_HIDDEN, MAX_LIVE_SEQ = 512, 512


def parse_scale(text: str | None) -> dict:
    """`--scale-model hidden=128,heads=4,ffn_hidden=512,seq_len=64,micro_batch=2`."""
    if not text:
        return {}
    allowed = {"hidden", "heads", "ffn_hidden", "seq_len", "micro_batch"}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise LiveError(f"--scale-model: '{item}' is not KEY=VALUE with KEY one of "
                            f"{', '.join(sorted(allowed))}")
        try:
            out[key] = int(value)
        except ValueError:
            raise LiveError(f"--scale-model: {key}={value}: expected a positive integer") from None
        if out[key] <= 0:
            raise LiveError(f"--scale-model: {key}={value}: expected a positive integer")
    return out


def scaled_model(model: dict, seq_len: int, scale: dict) -> tuple[dict, int, list[str]]:
    """The model the workers train: the plan's layer count, byte-level vocabulary, hidden
    size / heads / sequence length scaled down when the scenario's do not fit CPU workers or
    --scale-model says so. Returns (model, seq_len, notes)."""
    notes = []
    too_big = model["hidden"] > MAX_LIVE_HIDDEN or seq_len > MAX_LIVE_SEQ
    base = dict(DEFAULT_SCALE) if too_big else {}
    base.update(scale)
    hidden = base.get("hidden", model["hidden"])
    heads = base.get("heads", model["heads"] if "hidden" not in base else DEFAULT_SCALE["heads"])
    ffn = base.get("ffn_hidden", 4 * hidden if "hidden" in base else model["ffn_hidden"])
    live_seq = base.get("seq_len", seq_len)
    if hidden % heads:
        raise LiveError(f"scaled model: hidden {hidden} does not divide into {heads} heads")
    if too_big and not scale:
        notes.append(f"model {model.get('name', '')} scaled down for CPU workers: hidden "
                     f"{model['hidden']} -> {hidden}, heads {model['heads']} -> {heads}, "
                     f"seq_len {seq_len} -> {live_seq} (--scale-model to choose)")
    if model["vocab"] != BYTE_VOCAB:
        notes.append(f"vocabulary {model['vocab']} -> {BYTE_VOCAB} (byte-level tokens)")
    live = {"name": f"{model.get('name', 'model')}-live", "layers": model["layers"],
            "hidden": hidden, "heads": heads, "kv_heads": heads, "vocab": BYTE_VOCAB,
            "ffn_hidden": ffn, "activation": "gelu", "norm": "layernorm",
            "max_positions": live_seq, "tied_embeddings": False, "bias": True, "dropout": False}
    return live, live_seq, notes


def placement(scenario: dict, plan: dict) -> list[dict]:
    """One role per GPU, in the simulator's placement order (sim/workload.cpp `place`):
    pipelines, replicas, stages, dp ranks, tp ranks; tensor-parallel groups take consecutive
    GPUs of one node. `device` is the simulator's device name (cluster/nN/gG)."""
    clusters = {c["name"]: c for c in scenario["clusters"]}
    next_gpu = {name: 0 for name in clusters}
    roles = []
    for i, pipeline in enumerate(plan["pipelines"]):
        for r in range(pipeline.get("replicas", 1)):
            for s, stage in enumerate(pipeline["stages"]):
                c = clusters[stage["cluster"]]
                per_node = c["gpus_per_node"]
                tp, dp = stage.get("tp", 1), stage.get("dp", 1)
                for d in range(dp):
                    g = next_gpu[stage["cluster"]]
                    if g % per_node + tp > per_node:
                        g += per_node - g % per_node
                    for t in range(tp):
                        gpu = g + t
                        roles.append({"rank": len(roles), "pipeline": i, "replica": r, "stage": s,
                                      "dp": d, "tp": t, "cluster": stage["cluster"],
                                      "device": f"{stage['cluster']}/n{gpu // per_node}"
                                                f"/g{gpu % per_node}"})
                    next_gpu[stage["cluster"]] = g + tp
    return roles


def normalise_plan(plan: dict) -> dict:
    """Defaults filled in: replicas 1, tp 1, dp 1."""
    out = dict(plan)
    out["pipelines"] = []
    for p in plan["pipelines"]:
        q = dict(p)
        q["replicas"] = p.get("replicas", 1)
        q["stages"] = [dict(s, tp=s.get("tp", 1), dp=s.get("dp", 1)) for s in p["stages"]]
        out["pipelines"].append(q)
    return out


def check_executable(plan: dict, model: dict, seq_len: int, max_workers: int,
                     segments: list[dict], roles: list[dict]) -> None:
    """Refuses, with the reason, plans the live runner does not execute."""
    schedule = plan.get("schedule", "1f1b")
    if schedule not in ("gpipe", "1f1b"):
        raise LiveError(f"schedule '{schedule}' is simulated but not executed live "
                        "(the live runner executes gpipe and 1f1b)")
    if plan.get("sequence_parallel"):
        raise LiveError("sequence_parallel is simulated but not executed live")
    if len(roles) > max_workers:
        raise LiveError(f"the plan needs {len(roles)} workers, more than --max-workers "
                        f"{max_workers}: pick a smaller plan (scenarios/live/) or raise the limit")
    mb = plan["micro_batch"]
    for i, p in enumerate(plan["pipelines"]):
        for s, stage in enumerate(p["stages"]):
            where = f"pipelines[{i}].stages[{s}]"
            if mb % stage["dp"]:
                raise LiveError(f"{where}: micro_batch {mb} does not split into dp={stage['dp']} "
                                "whole sequences")
            if model["heads"] % stage["tp"] or model["ffn_hidden"] % stage["tp"]:
                raise LiveError(f"{where}: tp={stage['tp']} does not divide the live model's "
                                f"{model['heads']} heads and ffn_hidden {model['ffn_hidden']}")
            n = mb * seq_len * model["hidden"]
            for t, other in ((s - 1, "previous"), (s + 1, "next")):
                if 0 <= t < len(p["stages"]):
                    o = p["stages"][t]
                    units = math.lcm(stage["dp"] * stage["tp"], o["dp"] * o["tp"])
                    if n % units:
                        raise LiveError(f"{where}: the stage boundary of {n} values does not "
                                        f"split into {units} equal slices ({other} stage)")
    for seg in segments:
        tps = {plan["pipelines"][r["pipeline"]]["stages"][r["stage"]]["tp"] for r in roles
               if r["stage"] == seg["holders"][r["pipeline"]]}
        if len(tps) > 1:
            raise LiveError(f"layers {seg['first_layer']}..{seg['first_layer'] + seg['layers'] - 1}"
                            f" are held with different tp {sorted(tps)}: the live runner syncs "
                            "their gradients only between equal shards")


def default_corpus() -> str:
    """Real English text every Debian machine has: the licence texts of base-files."""
    return "/usr/share/common-licenses"


def corpus_file(source: str, out_dir: str) -> str:
    """One file of bytes to train on: `source` itself, or its files concatenated."""
    if os.path.isfile(source):
        return source
    if not os.path.isdir(source):
        raise LiveError(f"--corpus {source}: no such file or directory")
    path = os.path.join(out_dir, "corpus.txt")
    with open(path, "wb") as out:
        for name in sorted(os.listdir(source)):
            full = os.path.join(source, name)
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as f:
                    out.write(f.read())
    if os.path.getsize(path) < 4096:
        raise LiveError(f"--corpus {source}: less than 4 KiB of text")
    return path


def wan_links(scenario: dict) -> list[dict]:
    """The scenario's WAN links with rates in bits per second (what tc takes)."""
    links = []
    for w in scenario.get("wan", []):
        a, b = w["between"]
        rate = hgsim.parse_quantity(w["bandwidth"], "bandwidth") * 8
        reverse = w.get("reverse_bandwidth")
        back = hgsim.parse_quantity(reverse, "bandwidth") * 8 if reverse else rate
        links.append({"from": a, "to": b, "rate_bps": rate, "reverse_rate_bps": back,
                      "latency_s": hgsim.parse_quantity(w["latency"], "duration")})
    return links
