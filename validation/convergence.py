#!/usr/bin/python3
"""What the WAN codecs cost in accuracy: the loss curves of one live training run with each.

    PYTHONPATH=build/release/python:runtime /usr/bin/python3 validation/convergence.py \
        [--steps 300] [--out validation]

    PYTHONPATH=build/release/python:runtime /usr/bin/python3 validation/convergence.py \
        --diloco [--steps 100] [--seeds 3]

Runs scenarios/live/convergence.yaml (two clusters; two pipelines that cross the WAN in
opposite directions, so both the activations between stages and the gradient sync cross it)
with the same seed, data and plan under each compression setting, on unshaped links (only
the loss matters here, not the time), and writes:
    validation/convergence.csv   step, then the loss of every setting
    validation/convergence.png   the curves (smoothed) and their gap to no compression
    validation/convergence.md    the table of final losses
    validation/convergence-losses.json  the same losses per codec setting, as hgsim's
                                 planner reads them (planner.max_loss_increase)

With --summary-only: no training; convergence-losses.json again from the committed
convergence.csv (same final-loss rule as the table).

With --diloco: scenarios/live/diloco.yaml (two islands of one worker) with synchronous data
parallelism and DiLoCo for a few H and outer-sync codecs, at equal tokens (same steps, same
global batch), each with several seeds; writes validation/convergence-diloco.csv and .png and
the "DiLoCo" section of validation/convergence.md (the rest of the file is kept).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# scripts/script_cli.py: one-line errors, exit 1, arguments checked before any long work.
_cli_spec = importlib.util.spec_from_file_location(
    "script_cli", os.path.join(ROOT, "scripts", "script_cli.py"))
cli = importlib.util.module_from_spec(_cli_spec)
_cli_spec.loader.exec_module(cli)

hgsim = live = None  # imported by main() once the arguments are checked


def import_runtime():
    global hgsim, live
    try:
        import hgsim
        from hgsim_runtime import live
    except ImportError as e:
        raise cli.ScriptError(f"cannot import hgsim and hgsim_runtime ({cli.quoted(e)}): run "
                              "with PYTHONPATH=build/release/python:runtime") from None
SCENARIO = os.path.join(ROOT, "scenarios", "live", "convergence.yaml")
DILOCO_SCENARIO = os.path.join(ROOT, "scenarios", "live", "diloco.yaml")
DILOCO_HEADING = "## DiLoCo against synchronous data parallelism"

# (name, outer_sync): the scenario's outer_sync replaced by each.
DILOCO_SETTINGS = [
    ("synchronous DP", "none"),
    ("DiLoCo H=10", {"method": "diloco", "inner_steps": 10}),
    ("DiLoCo H=10 int8", {"method": "diloco", "inner_steps": 10, "codec": "int8"}),
    ("DiLoCo H=50", {"method": "diloco", "inner_steps": 50}),
    ("DiLoCo H=50 int8", {"method": "diloco", "inner_steps": 50, "codec": "int8"}),
]

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


def keep_diloco_section(path: str) -> str:
    """The DiLoCo section of convergence.md as it is, for the codec run to keep."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    at = text.find(DILOCO_HEADING)
    return "" if at < 0 else "\n" + text[at:]


def mean_and_error(values):
    """Mean and standard error of the mean (sample standard deviation / sqrt(n))."""
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (len(values) - 1)
    return m, (var / len(values)) ** 0.5


def diloco(args) -> int:
    seeds = list(range(1234, 1234 + args.seeds))
    curves, wan = {}, {}
    for name, outer_sync in DILOCO_SETTINGS:
        resolved = hgsim.resolve(DILOCO_SCENARIO, dict(hgsim.resolve(DILOCO_SCENARIO)["plan"],
                                                       outer_sync=outer_sync))
        for seed in seeds:
            started = time.time()
            job = live.job_from(resolved["scenario"], resolved["model"], resolved["plan"],
                                resolved["compression"], steps=args.steps, seed=seed,
                                lr=1e-3, timeout_s=3600)
            out_dir = tempfile.mkdtemp(prefix="hgsim-convergence-")
            summary = live.execute(job, out_dir, shape=False, timeout_s=3600, stall_s=600,
                                   echo=lambda *a: None)
            with open(summary["loss_csv"]) as f:
                curves[(name, seed)] = [float(row["loss"]) for row in csv.DictReader(f)]
            wan[(name, seed)] = summary["wan_bytes"]["sent_by_workers_wire"] / args.steps
            print(f"{name:20s} seed {seed}  final loss {curves[(name, seed)][-1]:.4f}  WAN "
                  f"{wan[(name, seed)] / 1e6:.3f} MB/step  {time.time() - started:.0f} s",
                  flush=True)
    names = [n for n, _ in DILOCO_SETTINGS]
    with open(os.path.join(args.out, "convergence-diloco.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step"] + [f"{n} seed {s}" for n in names for s in seeds])
        for step in range(args.steps):
            w.writerow([step] + [f"{curves[(n, s)][step]:.6f}" for n in names for s in seeds])
    tail = max(1, args.steps // 10)
    finals = {n: [sum(curves[(n, s)][-tail:]) / tail for s in seeds] for n in names}
    base, _ = mean_and_error(finals[names[0]])
    lines = [DILOCO_HEADING, "",
             f"Command: `PYTHONPATH=build/release/python:runtime /usr/bin/python3 "
             f"validation/convergence.py --diloco --steps {args.steps} --seeds {args.seeds}` "
             "(scenario `scenarios/live/diloco.yaml`: two islands of one CPU worker, 4 layers, "
             "hidden 128, 16 sequences of 64 bytes per step in all; inner Adam lr 1e-3; outer "
             "Nesterov lr 0.7, momentum 0.9; unshaped links). Every setting trains the same "
             f"tokens ({args.steps} steps of the same global batch); seeds {seeds[0]}-"
             f"{seeds[-1]} (initial weights and data order). Loss: training cross-entropy in "
             "nats per byte of the models that trained on each batch (with DiLoCo, each "
             f"island's own model), mean of the last {tail} steps; ± is the standard error of "
             "the mean over the seeds.", "",
             "| setting | final loss | vs synchronous | WAN MB/step |", "|---|---|---|---|"]
    for n in names:
        m, e = mean_and_error(finals[n])
        mb = sum(wan[(n, s)] for s in seeds) / len(seeds) / 1e6
        lines.append(f"| {n} | {m:.4f} ± {e:.4f} | {100 * (m - base) / base:+.2f}% | "
                     f"{mb:.3f} |")
    lines.append("")
    md = os.path.join(args.out, "convergence.md")
    try:
        with open(md) as f:
            text = f.read()
    except OSError:
        text = ""
    at = text.find(DILOCO_HEADING)
    head = text if at < 0 else text[:at]
    with open(md, "w") as f:
        f.write(head.rstrip("\n") + "\n\n" + "\n".join(lines))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    steps = list(range(args.steps))
    for n in names:
        runs = [smooth(curves[(n, s)]) for s in seeds]
        mean = [sum(r[i] for r in runs) / len(runs) for i in steps]
        err = [mean_and_error([r[i] for r in runs])[1] for i in steps]
        line, = ax.plot(steps, mean, label=n, linewidth=1.2)
        ax.fill_between(steps, [a - b for a, b in zip(mean, err)],
                        [a + b for a, b in zip(mean, err)], alpha=0.2, color=line.get_color())
    ax.set_xlabel("step (equal tokens per step in every setting)")
    ax.set_ylabel("training loss (nats/byte, 10-step mean)")
    ax.set_title(f"scenarios/live/diloco.yaml, mean ± s.e. over {len(seeds)} seeds")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "convergence-diloco.png"), dpi=110)
    return 0


def loss_summary(curves, names, steps):
    """The final loss of each codec setting (mean of the last steps // 10 steps, as the
    table) and its relative increase over the first setting (no compression), with the
    settings' codecs in the scenario form: what validation/convergence-losses.json holds."""
    tail = max(1, steps // 10)
    specs = dict(SETTINGS)
    base = sum(curves[names[0]][-tail:]) / tail
    out = []
    for n in names:
        final = sum(curves[n][-tail:]) / tail
        out.append({"setting": n, "wan_activations": specs[n]["wan_activations"],
                    "wan_gradients": specs[n]["wan_gradients"], "final_loss": final,
                    "loss_increase": (final - base) / base})
    return {"source": "validation/convergence.md",
            "scenario": "scenarios/live/convergence.yaml", "steps": steps, "tail_steps": tail,
            "baseline": names[0], "settings": out}


def write_loss_summary(out_dir, curves, names, steps):
    import json
    with open(os.path.join(out_dir, "convergence-losses.json"), "w") as f:
        json.dump(loss_summary(curves, names, steps), f, indent=2)
        f.write("\n")


def summary_from_csv(out_dir):
    """convergence-losses.json from the committed convergence.csv (no training)."""
    path = os.path.join(out_dir, "convergence.csv")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise cli.ScriptError(f"{path}: {e.strerror}") from None
    if not rows:
        raise cli.ScriptError(f"{path}: no rows")
    names = [n for n in rows[0] if n != "step"]
    unknown = [n for n in names if n not in dict(SETTINGS)]
    if unknown:
        raise cli.ScriptError(f"{path}: column {cli.quoted(unknown[0])} is no setting of this "
                              "script")
    curves = {n: [float(r[n]) for r in rows] for n in names}
    write_loss_summary(out_dir, curves, names, len(rows))
    return 0


def chosen_settings(only):
    """The settings --only names (comma-separated numbers from 0), in its order; all of them
    without --only. ScriptError for a number that names no setting, or one named twice."""
    if only is None:
        return SETTINGS
    numbers = []
    for word in only.split(","):
        word = word.strip()
        if not word.isdigit() or int(word) >= len(SETTINGS):
            raise cli.ScriptError(f"--only {cli.quoted(only)}: {cli.quoted(word) or 'nothing'} "
                                  f"is not a setting number; the settings are 0 to "
                                  f"{len(SETTINGS) - 1}: "
                                  + ", ".join(f"{i} {n}" for i, (n, _) in enumerate(SETTINGS)))
        if int(word) in numbers:
            raise cli.ScriptError(f"--only {cli.quoted(only)}: setting {word} is named twice")
        numbers.append(int(word))
    return [SETTINGS[i] for i in numbers]


def main(argv=None) -> int:
    parser = cli.Parser(description="What the WAN codecs cost in accuracy: live loss curves.")
    parser.add_argument("--steps", type=cli.positive_int, default=None,
                        help="steps per run (default 300; 100 with --diloco)")
    parser.add_argument("--out", default=os.path.join(ROOT, "validation"),
                        help="the folder of the CSV, figure and table")
    parser.add_argument("--only", help="comma-separated setting numbers (0-based)")
    parser.add_argument("--diloco", action="store_true",
                        help="DiLoCo against synchronous data parallelism instead of codecs")
    parser.add_argument("--seeds", type=cli.positive_int, default=3,
                        help="seeds per setting (--diloco)")
    parser.add_argument("--summary-only", action="store_true",
                        help="only write convergence-losses.json from the folder's "
                             "convergence.csv (no training)")
    args = parser.parse_args(argv)
    cli.output_folder(args.out, "--out")
    if args.summary_only:
        return summary_from_csv(args.out)
    if args.diloco:
        if args.only is not None:
            raise cli.ScriptError("--only chooses codec settings; --diloco runs every DiLoCo "
                                  "setting")
        import_runtime()
        args.steps = args.steps or 100
        return diloco(args)
    chosen = chosen_settings(args.only)
    import_runtime()
    args.steps = args.steps or 300
    kept = keep_diloco_section(os.path.join(args.out, "convergence.md"))
    resolved = hgsim.resolve(SCENARIO)
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
        f.write(kept)
    write_loss_summary(args.out, curves, names, args.steps)
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
    sys.exit(cli.run(main))
