#!/usr/bin/python3
"""Compares the results of two hgsim binaries on the same scenarios, number by number.

A change to the simulator's speed must not move its results. This runs
`hgsim run SCENARIO --json` (and `--fidelity folded`, `--fidelity full` when asked) with
both binaries and prints, per scenario, the largest relative difference over every number
of the results (differences below 1e-12 absolute
are rounding and count as none) (the `simulator` block, which names graph sizes and activity counts, is
left out: those may change on purpose).

    scripts/compare-results.py OLD_HGSIM NEW_HGSIM [--fidelity full|folded] SCENARIO...

Exit status 1 when a difference exceeds --tolerance (default 1e-9, relative, a finite
number of at least 0), and when a scenario could not be compared (either binary failed on
it, or its output is not JSON): a comparison that did not happen never passes.
"""
import argparse
import json
import subprocess
import sys

import script_cli as cli

# A difference below this (absolute) is floating-point rounding, not a change: an idle
# time of 0 s against 1e-15 s.
FLOOR = 1e-12


def numbers(value, path=""):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if path == "" and k == "simulator":
                continue
            yield from numbers(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from numbers(v, f"{path}[{i}]")


def run(binary, scenario, fidelity):
    cmd = [binary, "run", scenario, "--json", "--allow-oom"]
    if fidelity:
        cmd += ["--fidelity", fidelity]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return None, f"cannot run it ({e.strerror or e})"
    if out.returncode != 0:
        return None, f"exit {out.returncode}: {cli.why_failed(out)}"
    try:
        return json.loads(out.stdout), None
    except ValueError:
        return None, "its output is not JSON"


def tolerance(text):
    value = cli.finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{cli.quoted(text)}: must be at least 0")
    return value


def main():
    ap = cli.Parser(description="Compares the results of two hgsim binaries.")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--fidelity", choices=["full", "folded"])
    ap.add_argument("--tolerance", type=tolerance, default=1e-9,
                    help="largest relative difference that passes (default 1e-9)")
    args = ap.parse_args()
    cli.executable(args.old, "OLD_HGSIM")
    cli.executable(args.new, "NEW_HGSIM")
    worst_overall = 0.0
    not_compared = 0
    for scenario in args.scenarios:
        a, why_a = run(args.old, scenario, args.fidelity)
        b, why_b = run(args.new, scenario, args.fidelity)
        if a is None or b is None:
            print(f"{scenario}: not compared (old: {why_a or 'ok'}; new: {why_b or 'ok'})")
            not_compared += 1
            continue
        na, nb = dict(numbers(a)), dict(numbers(b))
        if na.keys() != nb.keys():
            print(f"{scenario}: different fields: {sorted(set(na) ^ set(nb))[:5]}")
            worst_overall = float("inf")
            continue
        worst, where = 0.0, ""
        for k, x in na.items():
            y = nb[k]
            d = abs(x - y) / max(abs(x), abs(y)) if abs(x - y) > FLOOR else 0.0
            if d > worst:
                worst, where = d, k
        worst_overall = max(worst_overall, worst)
        print(f"{scenario}: {len(na)} numbers, largest relative difference {worst:.3g}"
              + (f" ({where}: {na[where]!r} vs {nb[where]!r})" if worst > 0 else ""))
    if not_compared:
        raise cli.ScriptError(f"{not_compared} of {len(args.scenarios)} scenarios could not "
                              "be compared")
    if worst_overall > args.tolerance:
        raise cli.ScriptError(f"a difference of {worst_overall:.3g} exceeds the tolerance "
                              f"{args.tolerance:g}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
