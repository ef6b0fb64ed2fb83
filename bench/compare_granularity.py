#!/usr/bin/python3
"""Iteration time under `--collectives steps` and `--collectives pipelined`, per scenario.

    bench/compare_granularity.py HGSIM [--fidelity full|folded|auto] SCENARIO...

Prints one Markdown row per scenario: iteration time under each granularity, their
relative difference, the activities each played and the wall time of each run. A scenario
that fails under either (a sweep, a broken scenario) is shown with the first line of its
error and does not stop the others. Exit status 1 when none could be compared.
"""
import argparse
import json
import subprocess
import sys
import time


def run(hgsim, scenario, granularity, fidelity):
    command = [hgsim, "run", scenario, "--json", "--collectives", granularity]
    if fidelity:
        command += ["--fidelity", fidelity]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode != 0:
        try:  # --json reports refusals as JSON diagnostics
            return None, wall, json.loads(done.stdout)["diagnostics"][0]["message"]
        except (ValueError, KeyError, IndexError):
            lines = (done.stderr or done.stdout).strip().splitlines()
            return None, wall, lines[0] if lines else f"exit {done.returncode}"
    return json.loads(done.stdout), wall, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hgsim")
    parser.add_argument("--fidelity", choices=["full", "folded", "auto"])
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()
    print("| scenario | steps (s) | pipelined (s) | difference | activities steps / pipelined "
          "| wall steps / pipelined (s) |")
    print("|---|---|---|---|---|---|")
    compared = 0
    for scenario in args.scenarios:
        steps, wall_steps, error = run(args.hgsim, scenario, "steps", args.fidelity)
        pipelined, wall_pipelined, error2 = (None, 0, None)
        if steps is not None:
            pipelined, wall_pipelined, error2 = run(args.hgsim, scenario, "pipelined",
                                                    args.fidelity)
        if steps is None or pipelined is None:
            print(f"| {scenario} | not compared: {error or error2} | | | | |")
            continue
        compared += 1
        a, b = steps["iteration_time_s"], pipelined["iteration_time_s"]
        activities = [r.get("simulator", {}).get("activities", "?") for r in (steps, pipelined)]
        difference = (b - a) / a if a else 0.0
        print(f"| {scenario} | {a:.6g} | {b:.6g} | {difference:+.3%} | "
              f"{activities[0]} / {activities[1]} | {wall_steps:.2f} / {wall_pipelined:.2f} |")
    return 0 if compared else 1


if __name__ == "__main__":
    sys.exit(main())
