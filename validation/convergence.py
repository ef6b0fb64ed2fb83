#!/usr/bin/python3
"""What the WAN codecs cost in accuracy: the loss curves of one live training run with each.

    PYTHONPATH=build/release/python:runtime /usr/bin/python3 validation/convergence.py \
        [--steps 300] [--out validation]

Runs scenarios/live/convergence.yaml (two clusters; two pipelines that cross the WAN in
opposite directions, so both the activations between stages and the gradient sync cross it)
with the same seed, data and plan under each compression setting, on unshaped links (only
the loss matters here, not the time), and writes:
    validation/convergence.csv   step, then the loss of every setting
    validation/convergence.png   the curves (smoothed) and their gap to no compression
    validation/convergence.md    the table of final losses
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time

import hgsim
from hgsim_runtime import live

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(ROOT, "scenarios", "live", "convergence.yaml")

SETTINGS = [
    ("none", {"wan_activations": "none", "wan_gradients": "none"}),
    ("int8 activations", {"wan_activations": "int8", "wan_gradients": "none"}),
    ("fp8 (e4m3) activations", {"wan_activations": "fp8-e4m3",
                         "wan_gradients": "none"}),
    ("top-k 1% gradients (error feedback)",
     {"wan_activations": "none", "wan_gradients": {"codec": "topk", "ratio": 0.01}}),
    ("PowerSGD rank 4 gradients (error feedback)",
     {"wan_activations": "none", "wan_gradients": {"codec": "powersgd", "rank": 4}}),
    ("int8 activations + PowerSGD rank 4",
     {"wan_activations": "int8", "wan_gradients": {"codec": "powersgd", "rank": 4}}),
]


def smooth(values, window=10):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default=os.path.join(ROOT, "validation"))
    parser.add_argument("--only", help="comma-separated setting numbers (0-based)")
    args = parser.parse_args(argv)
    resolved = hgsim.resolve(SCENARIO)
    chosen = SETTINGS if not args.only else [SETTINGS[int(i)] for i in args.only.split(",")]
    curves = {}
    for name, compression in chosen:
        started = time.time()
        job = live.job_from(resolved, compression=compression, steps=args.steps, seed=1234,
                            lr=1e-3, timeout_s=3600)
        out_dir = tempfile.mkdtemp(prefix="hgsim-convergence-")
        summary = live.execute(job, out_dir, shape=False, timeout_s=7200, stall_s=600,
                               echo=lambda *a: None)
        with open(summary["loss_csv"]) as f:
            curves[name] = [float(row["loss"]) for row in csv.DictReader(f)]
        wb = summary["wan_bytes"]
        print(f"{name:45s} final loss {curves[name][-1]:.4f}  WAN bytes/step "
              f"{wb['sent_by_workers_wire'] / args.steps / 1e6:.3f} MB "
              f"(raw {wb['sent_by_workers_raw'] / args.steps / 1e6:.3f} MB)  "
              f"{time.time() - started:.0f} s", flush=True)
        curves[name + " :bytes"] = (wb["sent_by_workers_wire"], wb["sent_by_workers_raw"])
    names = [n for n, _ in chosen]
    with open(os.path.join(args.out, "convergence.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + names)
        for step in range(args.steps):
            w.writerow([step] + [f"{curves[n][step]:.6f}" for n in names])
    tail = max(1, args.steps // 10)
    with open(os.path.join(args.out, "convergence.md"), "w") as f:
        f.write("# What the WAN codecs cost in accuracy\n\n")
        f.write(f"Command: `PYTHONPATH=build/release/python:runtime /usr/bin/python3 "
                f"validation/convergence.py --steps {args.steps}` (scenario "
                "`scenarios/live/convergence.yaml`, seed 1234, Adam lr 1e-3; same data and "
                "initial weights in every run). Loss: cross-entropy in nats per byte, mean of the "
                f"last {tail} steps; WAN bytes: what the workers sent across clusters per step.\n\n")
        f.write("| compression | final loss | vs none | WAN MB/step | of raw |\n|---|---|---|---|---|\n")
        base = sum(curves[names[0]][-tail:]) / tail
        for n in names:
            final = sum(curves[n][-tail:]) / tail
            wire, raw = curves[n + " :bytes"]
            f.write(f"| {n} | {final:.4f} | {100 * (final - base) / base:+.2f}% | "
                    f"{wire / args.steps / 1e6:.3f} | {100 * wire / raw:.1f}% |\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    steps = list(range(args.steps))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, n in enumerate(names):
        color = colors[i % len(colors)]  # one colour per setting in both panels
        top.plot(steps, smooth(curves[n]), label=n, linewidth=1.2, color=color)
        if n != names[0]:
            gap = [a - b for a, b in zip(smooth(curves[n]), smooth(curves[names[0]]))]
            bottom.plot(steps, gap, label=n, linewidth=1.0, color=color)
    top.set_ylabel("training loss (nats/byte, 10-step mean)")
    top.set_title("Live runs of scenarios/live/convergence.yaml, same seed")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.axhline(0, color="black", linewidth=0.8)
    bottom.set_ylabel("loss - loss without compression")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "convergence.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
