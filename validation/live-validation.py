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

import datetime
import importlib.util
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# scripts/script_cli.py: one-line errors, exit 1, arguments checked before any long work.
_cli_spec = importlib.util.spec_from_file_location(
    "script_cli", os.path.join(ROOT, "scripts", "script_cli.py"))
cli = importlib.util.module_from_spec(_cli_spec)
_cli_spec.loader.exec_module(cli)
SCENARIOS = ["wan-bound-1f1b", "wan-bound-gpipe-int8", "compute-bound-1f1b",
             "compute-bound-gpipe-int8"]


def pct(x):
    return "-" if x is None else f"{x * 100:+.1f}%"


def main(argv=None) -> int:
    parser = cli.Parser(description="Simulated against live on the four live scenarios.")
    parser.add_argument("--steps", type=cli.positive_int, default=20)
    parser.add_argument("--out", default=os.path.join(ROOT, "validation", "live.md"))
    parser.add_argument("--json-out", default=os.path.join(ROOT, "validation", "live.json"))
    parser.add_argument("--repeat", type=cli.positive_int, default=3,
                        help="validations per scenario, taken in turns (default 3)")
    parser.add_argument("--render-only", action="store_true",
                        help="only write live.md again from the JSON of the last run")
    args = parser.parse_args(argv)
    cli.output_file(args.out, "--out")
    if args.render_only:
        return render(read_results(args.json_out), args)
    cli.output_file(args.json_out, "--json-out")
    try:
        from hgsim_runtime import validate
    except ImportError as e:
        raise cli.ScriptError(f"cannot import hgsim_runtime ({cli.quoted(e)}): run with "
                              "PYTHONPATH=build/release/python:runtime") from None
    runs = {name: [] for name in SCENARIOS}
    # In turns (each scenario once, then again), so that a slow phase of the machine does not
    # fall on one scenario's repeats only.
    for turn in range(args.repeat):
        for name in SCENARIOS:
            path = os.path.join(ROOT, "scenarios", "live", name + ".yaml")
            vargs = validate.build_parser().parse_args([path, "--steps", str(args.steps)])
            print(f"== {name} ({turn + 1}/{args.repeat})", flush=True)
            result = validate.run(vargs, echo=lambda *a: print("  ", *a, flush=True))
            validate.print_result(result, echo=lambda *a: print("  ", *a, flush=True))
            runs[name].append(result)
    # The run with the median iteration-time error stands for its scenario; all are kept.
    results = []
    for name in SCENARIOS:
        ordered = sorted(runs[name], key=lambda r: r["iteration_time_s"]["rel_error"])
        median = ordered[len(ordered) // 2]
        median["repeats"] = [r["iteration_time_s"] for r in runs[name]]
        results.append((name, median))
    with open(args.json_out, "w") as f:
        json.dump({name: r for name, r in results}, f, indent=1)
    return render(results, args)


def read_results(path):
    """The results a previous run wrote to --json-out, for --render-only; ScriptError when
    the file is missing or is not what this script writes."""
    cli.input_file(path, "--json-out")
    where = f"--json-out {cli.quoted(path)}"
    try:
        with open(path, encoding="utf-8") as f:
            results = list(json.load(f).items())
        if not results:
            raise ValueError("no scenarios")
        for _, r in results:
            len(r["repeats"])
    except (ValueError, AttributeError, KeyError, TypeError) as e:
        raise cli.ScriptError(f"{where}: not the JSON live-validation.py writes "
                              f"({type(e).__name__} {cli.quoted(e)})") from None
    return results


def render(results, args) -> int:
    """Writes --out from the results; ScriptError for a result that lacks what it shows."""
    try:
        return _render(results, args)
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise cli.ScriptError(f"--json-out: a result lacks what the table shows "
                              f"({type(e).__name__} {cli.quoted(e)})") from None


def _render(results, args) -> int:
    args.repeat = len(results[0][1]["repeats"])
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
        "What the simulation is given (all measured on this machine, never datasheet "
        "figures): the layer profile of the scaled model on this CPU (forward and backward of "
        "one layer and of the LM head with the loss, Adam over each stage's parameters; one "
        "thread), timed by every worker after each live step, outside it, all workers at once "
        "(medians over the steps after the first): the cores of this virtual machine change "
        "speed by 10-40% over minutes, so a profile taken before the run does not describe "
        "the run; the shaped rate of the WAN link times the payload share of a frame "
        "(2948/3014 with the emulation's 3000-byte MTU); gloo's ping-pong over loopback for "
        "NVLink/NIC and for the WAN's latency (netem is not available, so the kernel adds no "
        "delay; the shaper's queue adds some under load); `pipeline_messages: in_order`. "
        "Live: median iteration time over the steps after the first; WAN bytes counted by tc "
        "on the shaped interfaces (TCP/IP headers and gloo's own messages included), per "
        "step.",
        "",
        f"Each scenario was validated {args.repeat} times, in turns; the row is the run with "
        "the median iteration-time error, and the last column lists every run's error.",
        "",
        "| scenario | schedule | WAN | activations | iteration sim (s) | live (s) [range] | error | "
        "WAN MB/step sim | live | error | stage 0 compute sim / live (s) | stage 1 compute "
        "sim / live (s) | error of every run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
                     f"{wb['live'] / 1e6:.3f} | {pct(wb['rel_error'])} | " + " | ".join(cells) +
                     " | " + ", ".join(pct(x["rel_error"]) for x in r["repeats"]) + " |")
        within += abs(it["rel_error"]) <= 0.10
    lines += [
        "",
        f"Iteration time within 10%: {within} of {len(results)} plans (goal: at least 4).",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average after the runs {load[0]:.2f}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}.",
        "",
        "Error = (simulated - live) / live. Live iteration time: the median over the steps "
        "after the first, [the fastest and slowest step]. The per-scenario JSON (every stage, "
        "time not computing, the loopback measurement, traces) is in validation/live.json.",
        "",
        "## What the comparison found, and what changed because of it",
        "",
        "- gloo sends the messages between two ranks one after another on one TCP "
        "connection, and only once the receiver has posted its receive. The runner posts "
        "every receive of a step at its start; the simulator gained "
        "`simulation.pipeline_messages: in_order` (messages between a pair of GPUs in order, "
        "as NCCL's send/recv on one stream also do), which validation uses and which is the "
        "default since December 2026. With `shared` (the default before), the WAN-bound 1F1B "
        "plan was simulated 25% slower than it ran.",
        "- The emulated link let whole 64 KiB GSO packets through HTB before charging them: a "
        "33.8 KB message crossed a 20 Mbit/s link in 0.4 ms. Packets are now capped at 1 ms of "
        "the rate; pure ACKs go first (gloo uses one connection both ways, and ACKs queued "
        "behind gradients starved the activations).",
        "- With 1500-byte frames at 20 Mbit/s the kernel's per-packet work (two veth pairs and "
        "the shaper per packet) took 20-40% from the workers' compute on the two cores; with "
        "9000-byte frames the first message of a burst arrived up to two frame-times (7 ms) "
        "early and the WAN-bound GPipe plan ran 9-10% faster than simulated. The emulated "
        "links use a 3000-byte MTU (that plan: 1.5-1.7%).",
        "- The workers' layers ran up to 25% slower than a profile measured in the long-lived "
        "validation process (glibc returned freed tensors to the kernel); workers and "
        "profiler now keep freed memory (a 32 MiB mmap threshold), and the profile is timed "
        "inside the run.",
        "",
        "What is left: the shared cores. In the live run the stages compute longer than the "
        "same layers timed between the steps (up to 16% in the WAN-bound runs, where packets "
        "flow during compute; within 4% in the compute-bound ones): gloo's threads, the "
        "kernel's packet processing and the runner share the two cores with the compute "
        "threads, and the simulator gives networking no compute cost. The cores' "
        "speed also changes over seconds on this virtual machine (one 30-step run had steps "
        "of 80 ms and of 55 ms compute for the same work), so repeated validations of one "
        "plan differ by several percent (last column). WAN bytes: tc counts frames "
        "(headers, ACKs, gloo's own messages), the simulator payload.",
        "",
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
