#!/usr/bin/python3
"""Regenerates validation/paper-table.md: for every scenario in scenarios/paper/, the
planner's plan against each baseline (simulated iteration time; speedup = baseline time /
planner time), with the scenario's WAN codecs and with every codec off.

Usage (from the repository root, after building Release):
    /usr/bin/python3 scripts/reproduce-paper.py [--hgsim build/release/apps/hgsim] [--time-budget 20]

The arguments and the --out folder are checked before any search runs. A row whose plan
failed quotes hgsim's error; the exit status is 1 when any row failed (the table is still
written, with the failed rows).
"""
import glob
import json
import os
import subprocess
import sys
import time
import importlib.util

import script_cli as cli

# hgsim.files.atomic_open (the rule of core/files.hpp's AtomicFile), loaded from the source
# tree: this script needs only the hgsim binary, not the built Python module.
_spec = importlib.util.spec_from_file_location(
    "hgsim_files", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "hgsim", "files.py"))
_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_files)

BASELINES = ["megatron", "dp-only", "dp-only+codec", "pipeline-uniform", "metis-like", "dtfm"]


def plan(hgsim, scenario, budget, no_compression):
    cmd = [hgsim, "plan", scenario, "--baselines", "--json", "--time-budget", str(budget)]
    if no_compression:
        cmd.append("--no-compression")
    start = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - start
    if out.returncode != 0:
        return None, wall, [cli.why_failed(out).replace("|", "/")]
    try:
        return json.loads(out.stdout), wall, []
    except ValueError:
        return None, wall, ["hgsim plan's output is not JSON"]


def speedups(result):
    """The planner's own plan (before any baseline's was adopted) against each baseline."""
    best = result.get("planner_own", result["best"])["iteration_time_s"]
    cells = {}
    for b in result["baselines"]:
        if b["feasible"]:
            cells[b["name"]] = "%.2fx" % (b["iteration_time_s"] / best)
        else:
            cells[b["name"]] = "n/f"
    return best, cells


def main():
    parser = cli.Parser(description="Regenerates validation/paper-table.md.")
    parser.add_argument("--hgsim", default="build/release/apps/hgsim")
    parser.add_argument("--time-budget", type=cli.positive_float, default=20,
                        help="seconds per search (default 20)")
    parser.add_argument("--out", default="validation/paper-table.md")
    args = parser.parse_args()
    cli.executable(args.hgsim, "--hgsim")
    cli.output_file(args.out, "--out")
    scenarios = sorted(glob.glob("scenarios/paper/*.yaml"))
    if not scenarios:
        raise cli.ScriptError("no scenarios/paper/*.yaml here: run from the repository root")
    rows = []
    notes = []
    failed = 0
    for scenario in scenarios:
        name = os.path.splitext(os.path.basename(scenario))[0]
        for no_compression in (False, True):
            print("%s%s ..." % (name, " (no compression)" if no_compression else ""),
                  file=sys.stderr, flush=True)
            result, wall, why = plan(args.hgsim, scenario, args.time_budget, no_compression)
            if result is None:
                failed += 1
                rows.append("| %s | %s | no plan: %s |" % (name, "off" if no_compression else "on",
                                                           " ".join(why)))
                continue
            best, cells = speedups(result)
            errors = [abs(v["error"]) for v in result["verified"]]
            chosen = abs(result["best"]["error"])
            codecs = result["compression"]
            codec = ("%s / %s" % (codecs["wan_activations"], codecs["wan_gradients"])
                     if not no_compression else "off")
            adopted = result["best"]["adopted_from_baseline"]
            reported = ("%.3f (%s's plan)" % (result["best"]["iteration_time_s"], adopted)
                        if adopted else "own")
            rows.append("| %s | %s | %.3f | %s | %s | %.1f%% / %.1f%% | %.1f |" % (
                name, codec, best, reported, " | ".join(cells.get(b, "-") for b in BASELINES),
                100 * chosen, 100 * max(errors) if errors else 0.0, wall))
            for b in result["baselines"]:
                if not b["feasible"]:
                    notes.append("%s%s, %s: %s" % (name, " (no compression)" if no_compression
                                                  else "", b["name"], b["why"]))
    header = ("| scenario | WAN codecs (activations / gradients) | planner's own plan: iteration "
              "(s, simulated) | reported (adopted from a baseline) | "
              + " | ".join(BASELINES) + " | model error: chosen plan / largest among simulated | wall (s) |")
    rule = "|" + "---|" * (header.count("|") - 1)
    text = ["# Planner vs baselines on the reproduction scenarios",
            "",
            "Generated by `/usr/bin/python3 scripts/reproduce-paper.py` (hgsim plan SCENARIO "
            "--baselines --json, with the scenario's codecs and with --no-compression). Each "
            "baseline column is the baseline's simulated iteration time over the planner's "
            "own plan (higher: the planner is that much faster; below 1.00x: the search missed "
            "a faster plan); when a baseline's plan, run with the scenario's codecs, beats the "
            "planner's own, `hgsim plan --baselines` reports it instead, and the column "
            "'reported' says so; n/f: the baseline has no feasible plan "
            "(reasons below). Baselines that run without compression by definition (megatron, "
            "dp-only, metis-like, dtfm) are the same in both rows; dp-only+codec and "
            "pipeline-uniform use the scenario's codecs in the first row. Compute times are "
            "estimated by the kernel-level model on datasheet peaks (kernels/compute_model.hpp, "
            "constants in kernels/kernel_costs.yaml). Time budget per search: %g s." % args.time_budget,
            "",
            header, rule] + rows + ["", "Infeasible baselines:", ""] + ["- " + n for n in notes]
    with _files.atomic_open(args.out) as f:  # whole or not at all
        f.write("\n".join(text) + "\n")
    print("\n".join(text))
    if failed:
        raise cli.ScriptError(f"{failed} of {len(rows)} rows have no plan (their reason is in "
                              f"the table, {cli.quoted(args.out)})")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
