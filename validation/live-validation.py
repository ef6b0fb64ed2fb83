#!/usr/bin/python3
"""Simulated against live on the four live scenarios: writes validation/live.md.

    PYTHONPATH=build/release/python:runtime /usr/bin/python3 validation/live-validation.py \
        [--steps 8] [--repeat 1]

Each scenario goes through `hgsim validate live` (runtime/hgsim_runtime/validate.py): the
scaled model's layers profiled on this CPU, the plan simulated with that profile and the
shaped rates, then run live over links shaped with tc. Needs root for the shaping (without
it the table says the links were not shaped and the WAN-bound rows mean nothing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

from hgsim_runtime import validate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ["wan-bound-1f1b", "wan-bound-gpipe-int8", "compute-bound-1f1b",
             "compute-bound-gpipe-int8"]


def pct(x):
    return "-" if x is None else f"{x * 100:+.1f}%"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=os.path.join(ROOT, "validation", "live.md"))
    parser.add_argument("--json-out", default=os.path.join(ROOT, "validation", "live.json"))
    args = parser.parse_args(argv)
    results = []
    for name in SCENARIOS:
        path = os.path.join(ROOT, "scenarios", "live", name + ".yaml")
        vargs = validate.build_parser().parse_args([path, "--steps", str(args.steps)])
        print(f"== {name}", flush=True)
        result = validate.run(vargs, echo=lambda *a: print("  ", *a, flush=True))
        validate.print_result(result, echo=lambda *a: print("  ", *a, flush=True))
        results.append((name, result))
    with open(args.json_out, "w") as f:
        json.dump({name: r for name, r in results}, f, indent=1)
    load = os.getloadavg()
    lines = [
        "# Simulated vs live",
        "",
        "The same plan simulated by hgsim and executed by `hgsim live` on this machine: a "
        "scaled GPT (4 layers, hidden 128, 4 heads, byte-level vocabulary, sequences of 64 "
        "bytes, micro-batches of 4, 4 micro-batches) in two one-GPU clusters whose WAN link is "
        "shaped with tc (HTB) in network namespaces. Each worker is one process with one CPU "
        "thread; with two workers on this 2-core machine no more than two compute at once, "
        "so the simulator's one-processor-per-GPU holds.",
        "",
        "Command (as root, from the repository root, after `make`):",
        "",
        f"    PYTHONPATH=build/release/python:runtime /usr/bin/python3 "
        f"validation/live-validation.py --steps {args.steps}",
        "",
        "or one scenario: `build/release/apps/hgsim validate live scenarios/live/NAME.yaml`.",
        "",
        "What the simulation is given (all measured on this machine just before the live run, "
        "never datasheet figures): the layer profile of the scaled model on this CPU (forward "
        "and backward of one layer and of the LM head with the loss, Adam over each stage's "
        "parameters; one thread, median of 15), the shaped rate of the WAN link, and the "
        "gloo ping-pong over loopback for NVLink/NIC and for the WAN's latency (netem is not "
        "available, so the kernel adds no delay; the shaper's queue adds some under load). "
        "Live: median iteration time over the steps after the first; WAN bytes counted by tc "
        "on the shaped interfaces (TCP/IP headers and gloo's own messages included), per "
        "step.",
        "",
        "| scenario | schedule | WAN | activations | iteration sim (s) | live (s) [range] | error | "
        "WAN MB/step sim | live | error | stage 0 compute sim / live (s) | stage 1 compute "
        "sim / live (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    within = 0
    for name, r in results:
        it, wb = r["iteration_time_s"], r["wan_bytes"]
        scen = r["scenario"]
        act = r["compression"].get("wan_activations", "none")
        act = act if isinstance(act, str) else act.get("codec", "none")
        rate = "20 Mbit/s" if "wan-bound" in name else "1 Gbit/s"
        stages = r["stages"]
        cells = [f"{s['compute_s']['sim']:.4f} / {s['compute_s']['live']:.4f}" for s in stages]
        lines.append(f"| {scen} | {r['plan']['schedule']} | {rate} | {act} | {it['sim']:.4f} | "
                     f"{it['live']:.4f} [{r['live']['iteration_time_range_s'][0]:.3f}-"
                     f"{r['live']['iteration_time_range_s'][1]:.3f}] | {pct(it['rel_error'])} | {wb['sim'] / 1e6:.3f} | "
                     f"{wb['live'] / 1e6:.3f} | {pct(wb['rel_error'])} | " + " | ".join(cells) + " |")
        within += abs(it["rel_error"]) <= 0.10
    lines += [
        "",
        f"Iteration time within 10%: {within} of {len(results)} plans (goal: at least 4).",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average after the runs {load[0]:.2f}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}.",
        "",
        "Error = (simulated - live) / live. The per-scenario JSON (every stage, exposed "
        "communication, traces) is in validation/live.json.",
        "",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
