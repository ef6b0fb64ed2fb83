"""From a scenario and a plan to a live job: the scaled model, the scenario the live run
is, checks. Placement, segments, gradient buckets and reshard pieces are not derived here:
they come from the resolved plan (`hgsim.resolve`, sim/resolved_plan.hpp), the simulator's.

Everything here is pure data (dicts as `hgsim.resolve` gives them), so it can be tested
without starting a worker.
"""

from __future__ import annotations

import copy
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
    """`--scale-model hidden=128,heads=4,ffn_hidden=512,seq_len=64,micro_batch=2`: each key
    once, each value a positive integer (the live scenario's checks and the memory estimate,
    `live.check_memory`, bound them)."""
    if not text:
        return {}
    from .checks import shown
    allowed = {"hidden", "heads", "ffn_hidden", "seq_len", "micro_batch"}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise LiveError(f"--scale-model: '{shown(item)}' is not KEY=VALUE with KEY one of "
                            f"{', '.join(sorted(allowed))}")
        if key in out:
            raise LiveError(f"--scale-model: {key} is given twice ({key}={out[key]} and "
                            f"{key}={shown(value)}); give each key once")
        try:
            out[key] = int(value)
        except ValueError:
            out[key] = 0
        if out[key] <= 0:
            raise LiveError(f"--scale-model: {key}={shown(value)}: expected a positive integer")
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


MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "vocab", "ffn_hidden",
              "activation", "norm", "max_positions", "tied_embeddings", "bias", "dropout")


def global_batch(plan: dict) -> int:
    """Sequences per iteration: sum over pipelines of replicas x micro_batches x micro_batch."""
    return sum(p["replicas"] * p["micro_batches"] for p in plan["pipelines"]) * plan["micro_batch"]


def live_run_scenario(scenario: dict, live_model: dict, seq_len: int, plan: dict,
                      compression: dict) -> dict:
    """The scenario a live run is: the scaled model, fp32 (CPU workers), no recomputation (the
    workers keep every activation), no ZeRO sharding (every dp rank keeps whole weights,
    gradients and Adam states), the plan as it runs, with the run's codecs. The job's
    placement, segments, buckets and reshard pieces are this scenario's resolved plan
    (`hgsim.resolve`, the simulator's), and validation simulates it."""
    s = copy.deepcopy(scenario)
    s["name"] = s.get("name", "scenario") + "-live"
    s["model"] = {k: live_model[k] for k in MODEL_KEYS}
    run_plan = dict(copy.deepcopy(plan), recompute="none", zero=0)
    # The codecs once, as the scenario's: a plan's own `compression` would override them, and
    # a codec in both places would be checked (and refused) twice.
    run_plan.pop("compression", None)
    s["training"] = dict(s["training"], seq_len=seq_len, precision="fp32", recompute="none",
                         global_batch=global_batch(run_plan))
    s["strategy"] = run_plan
    s["compression"] = compression
    s.pop("sweep", None)
    return s


def check_executable(plan: dict, model: dict, max_workers: int, gpus: int) -> None:
    """Refuses, with the reason, plans the live runner does not execute (before they are
    resolved on the live scenario)."""
    schedule = plan.get("schedule", "1f1b")
    if schedule not in ("gpipe", "1f1b"):
        raise LiveError(f"schedule '{schedule}' is simulated but not executed live "
                        "(the live runner executes gpipe and 1f1b)")
    if gpus > max_workers:
        raise LiveError(f"the plan needs {gpus} workers, more than --max-workers "
                        f"{max_workers}: pick a smaller plan (scenarios/live/) or raise the limit")
    for i, p in enumerate(plan["pipelines"]):
        for s, stage in enumerate(p["stages"]):
            if stage.get("cp", 1) > 1:
                raise LiveError(f"pipelines[{i}].stages[{s}]: cp={stage['cp']}: context "
                                "parallelism (ring attention) is simulated but not executed live "
                                "(the live runner's attention sees whole sequences); use cp: 1")
            if model["heads"] % stage["tp"] or model["ffn_hidden"] % stage["tp"]:
                raise LiveError(f"pipelines[{i}].stages[{s}]: tp={stage['tp']} does not divide "
                                f"the live model's {model['heads']} heads and ffn_hidden "
                                f"{model['ffn_hidden']}")


def check_resolved(resolved: dict) -> None:
    """Refuses what the resolved live plan asks that the workers do not do: boundary tensors
    that do not split into whole values per reshard piece, and gradients of one segment held
    with different tp (the workers sync equal shards only)."""
    plan, model = resolved["plan"], resolved["model"]
    n = plan["micro_batch"] * resolved["scenario"]["training"]["seq_len"] * model["hidden"]
    for i, boundaries in enumerate(resolved["reshard"]):
        for s, pieces in enumerate(boundaries):
            if pieces and n % pieces[0][4]:
                raise LiveError(f"pipelines[{i}].stages[{s}]: the stage boundary of {n} values "
                                f"does not split into {pieces[0][4]} equal slices")
    for seg in resolved["segments"]:
        tps = {plan["pipelines"][i]["stages"][stage]["tp"]
               for i, stage in enumerate(seg["holders"])}
        if len(tps) > 1 and seg["buckets"]:
            raise LiveError(f"layers {seg['first_layer']}..{seg['first_layer'] + seg['layers'] - 1}"
                            f" are held with different tp {sorted(tps)}: the live runner syncs "
                            "their gradients only between equal shards")


def default_corpus() -> str:
    """Real English text every Debian machine has: the licence texts of base-files."""
    return "/usr/share/common-licenses"


def corpus_file(source: str, out_dir: str, min_bytes: int = 0) -> str:
    """One file of bytes to train on: `source` itself, or its files concatenated; at least
    `min_bytes` of them (the workers draw sequences of seq_len + 1 bytes)."""
    from .checks import input_source, shown
    input_source("--corpus", source)
    if os.path.isfile(source):
        path = source
    else:
        path = os.path.join(out_dir, "corpus.txt")
        with open(path, "wb") as out:
            for name in sorted(os.listdir(source)):
                full = os.path.join(source, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    with open(full, "rb") as f:
                        out.write(f.read())
        if os.path.getsize(path) < 4096:
            raise LiveError(f"--corpus '{shown(source)}': less than 4 KiB of text")
    size = os.path.getsize(path)
    if size < min_bytes:
        raise LiveError(f"--corpus '{shown(source)}': {size} bytes; the workers draw sequences "
                        f"of seq_len + 1 bytes and need at least {min_bytes}")
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
