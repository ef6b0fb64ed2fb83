#!/usr/bin/python3
"""Compares the results of two hgsim binaries on the same scenarios, number by number.

A change to the simulator's speed must not move its results. This runs
`hgsim run SCENARIO --json` (and `--fidelity folded`, `--fidelity full` when asked) with
both binaries and prints, per scenario, the largest relative difference over every number
of the results (differences below 1e-12 absolute
are rounding and count as none) (the `simulator` block, which names graph sizes and activity counts, is
left out: those may change on purpose).

    scripts/compare-results.py OLD_HGSIM NEW_HGSIM [--fidelity full|folded] SCENARIO...

Exit status 1 when a difference exceeds --tolerance (default 1e-9, relative).
"""
import argparse
import json
import subprocess
import sys

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
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    return json.loads(out.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--fidelity", choices=["full", "folded"])
    ap.add_argument("--tolerance", type=float, default=1e-9)
    args = ap.parse_args()
    worst_overall = 0.0
    for scenario in args.scenarios:
        a, why_a = run(args.old, scenario, args.fidelity)
        b, why_b = run(args.new, scenario, args.fidelity)
        if a is None or b is None:
            print(f"{scenario}: not compared (old: {why_a or 'ok'}; new: {why_b or 'ok'})")
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
    return 1 if worst_overall > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
