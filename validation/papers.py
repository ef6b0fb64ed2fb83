#!/usr/bin/python3
"""Regenerates validation/papers.md: hgsim against the geo-distributed papers' own figures.

Yuan et al. 2022, "Decentralized Training of Foundation Models in Heterogeneous
Environments" (DT-FM, NeurIPS 2022, arXiv 2206.01288): for each of its five network
settings (scenarios/paper/dtfm-*.yaml) and its GPT-3 XL-class models (24, 32, 40 layers)
and global batches (1024, 2048, 4096 sequences), the paper's ratio of DT-FM's throughput to
a grid-tuned Megatron's, hgsim's ratio for the same two systems (its `dtfm` and `megatron`
baselines, each simulated), the difference, and hgsim's own planner beside both.

Usage (from the repository root, after building Release):
    /usr/bin/python3 validation/papers.py [--hgsim build/release/apps/hgsim] [--all]
        [--time-budget 20] [--out validation/papers.md]

Without --all: the paper's GPT-3 XL (24 layers) at batch 1024 in each setting (5 plans,
about a minute on 2 cores); --all adds the 32- and 40-layer models and batches 2048 and 4096
(45 plans, several minutes). Arguments are checked before any plan runs; a plan that fails is
a row quoting hgsim's error and the exit status is then 1 (the table is still written).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# hgsim.files and scripts/script_cli.py from the source tree (validation/source_tree.py).
sys.path.insert(0, HERE)
from source_tree import cli, files as _files  # noqa: E402

# The paper's figures: DT-FM's throughput over Megatron's (the best of Megatron's tp x pp x dp
# grid) per network setting. The paper reports "4.8x" in the world-wide setting (abstract and
# §4's end-to-end comparison) and "1.2-2.5x" in the others (§4); the per-setting bars of its
# end-to-end figure are not transcribed here, so settings 1-4 carry that stated range, and a
# ratio is "within 25%" of it when it lies in [1.2 / 1.25, 2.5 x 1.25].
SETTINGS = [
    ("dtfm-1-datacenter", "1: data centre, on demand", (1.2, 2.5)),
    ("dtfm-2-spot", "2: data centre, spot", (1.2, 2.5)),
    ("dtfm-3-two-regions", "3: two regions", (1.2, 2.5)),
    ("dtfm-4-four-regions", "4: four US regions", (1.2, 2.5)),
    ("dtfm-5-world-wide", "5: world-wide, 8 regions", (4.8, 4.8)),
]
LAYERS = [24, 32, 40]      # §4: GPT-3 XL (24 layers, 1.3B) deepened to 32 and 40 layers
BATCHES = [1024, 2048, 4096]  # §4: global batch sizes, sequences of 2048 tokens
TOLERANCE = 0.25          # the target: hgsim's ratio within 25% of the paper's

# GPT-3 XL's shape (Brown et al. 2020, Table 2.1; models/zoo.yaml gpt3-1.3b) with more layers.
XL = "{name: gpt3-xl-%d, layers: %d, hidden: 2048, heads: 16, vocab: 50257, max_positions: 2048}"

# Where hgsim's ratio and the paper's differ, the cost that differs (from the plans below).
WHY = {
    "dtfm-1-datacenter": (
        "Compute-bound: DT-FM as its authors ran it (8 x 8 GPipe, micro-batch 1, every layer "
        "recomputed) pays a third more compute for recomputation and runs GEMMs of one "
        "sequence, against Megatron's data parallelism at micro-batch 2 without recomputation; "
        "the paper's gain here comes from its runtime, not a cost hgsim models."),
    "dtfm-2-spot": (
        "10 Gbit/s between all machines: both plans' gradient exchange stays on the NICs; "
        "the ratio is set by DT-FM's recomputation and micro-batch 1 against 1F1B at "
        "micro-batch 2 without recomputation."),
    "dtfm-3-two-regions": (
        "Megatron's ranks in the emulation's host order (rank i on host i, regions in host "
        "blocks) put each data-parallel group inside one region: one pipeline boundary "
        "crosses the WAN for both systems, so DT-FM's scheduler has little left to gain and "
        "its recomputation and micro-batch 1 cost more than they save."),
    "dtfm-4-four-regions": (
        "As in setting 3: Megatron's host order keeps data parallelism inside regions; the "
        "systems differ in the pipeline's order over the regions (DT-FM's tour), GPipe at "
        "micro-batch 1 with recomputation against 1F1B at micro-batch 2."),
    "dtfm-5-world-wide": (
        "With pp 4 x dp 16 in host order Megatron's stages hold two regions each, so its "
        "all-reduce crosses one WAN link per stage and its pipelines cross oceans; DT-FM's "
        "tour crosses the Pacific once with data parallelism inside regions. The rest of "
        "the paper's 4.8x is not reproduced: the authors' scheduled runs used the identity "
        "rank map (pipelines inside regions, data parallelism across them, through a "
        "central parameter server), and the repository holds no Megatron launch script "
        "saying how Megatron's ranks were placed."),
}


def scenario_text(setting, layers, batch):
    with open(os.path.join(ROOT, "scenarios", "paper", setting + ".yaml")) as f:
        text = f.read()
    if layers != 24:
        text = re.sub(r"^model: .*$", "model: " + XL % (layers, layers), text, flags=re.M)
    return text.replace("global_batch: 1024", "global_batch: %d" % batch)


def plan(hgsim, text, budget):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        start = time.time()
        out = subprocess.run([hgsim, "plan", path, "--baselines", "--json", "--time-budget",
                              str(budget)], capture_output=True, text=True)
        wall = time.time() - start
    finally:
        os.unlink(path)
    if out.returncode != 0:
        return None, wall, cli.why_failed(out).replace("|", "/")
    try:
        return json.loads(out.stdout), wall, ""
    except ValueError:
        return None, wall, "hgsim plan's output is not JSON"


def baseline(result, name):
    for b in result["baselines"]:
        if b["name"] == name:
            return b
    return None


def within(ratio, paper):
    low, high = paper
    return low / (1 + TOLERANCE) <= ratio <= high * (1 + TOLERANCE)


def paper_text(paper):
    low, high = paper
    return "%.1fx" % low if low == high else "%.1f-%.1fx" % (low, high)


def difference(ratio, paper):
    low, high = paper
    if low <= ratio <= high:
        return "in range"
    target = low if ratio < low else high
    return "%+.0f%%" % (100 * (ratio / target - 1))


def main():
    parser = cli.Parser(description="Regenerates validation/papers.md.")
    parser.add_argument("--hgsim", default="build/release/apps/hgsim")
    parser.add_argument("--all", action="store_true",
                        help="every model (24/32/40 layers) and batch (1024/2048/4096)")
    parser.add_argument("--time-budget", type=cli.positive_float, default=20,
                        help="seconds per planner search (default 20)")
    parser.add_argument("--out", default="validation/papers.md")
    args = parser.parse_args()
    cli.executable(args.hgsim, "--hgsim")
    cli.output_file(args.out, "--out")
    grid = [(l, b) for l in LAYERS for b in BATCHES] if args.all else [(24, 1024)]
    rows, plans, failed = [], [], 0
    for setting, title, paper in SETTINGS:
        for layers, batch in grid:
            print("%s, %d layers, batch %d ..." % (setting, layers, batch), file=sys.stderr,
                  flush=True)
            result, wall, why = plan(args.hgsim, scenario_text(setting, layers, batch),
                                     args.time_budget)
            head = "| %s | %d | %d | %s |" % (title, layers, batch, paper_text(paper))
            if result is None:
                failed += 1
                rows.append(head + " no plan: %s |" % why)
                continue
            m, d = baseline(result, "megatron"), baseline(result, "dtfm")
            own = result.get("planner_own", result["best"])["iteration_time_s"]
            if not (m and d and m["feasible"] and d["feasible"]):
                failed += 1
                rows.append(head + " megatron: %s; dtfm: %s |" % (
                    m and m.get("why", "ok"), d and d.get("why", "ok")))
                continue
            ratio = m["iteration_time_s"] / d["iteration_time_s"]  # throughput ratio
            fastest = min(m["iteration_time_s"], d["iteration_time_s"])
            rows.append(head + " %.2f | %.2f | %.2fx | %s | %s | %.2f | %.2fx | %.0f |" % (
                m["iteration_time_s"], d["iteration_time_s"], ratio, difference(ratio, paper),
                "yes" if within(ratio, paper) else "no", own, fastest / own, wall))
            if layers == 24 and batch == 1024:
                plans.append("- %s: megatron `%s`; dtfm `%s`; hgsim's planner `%s`." % (
                    title, m["description"], d["description"],
                    result.get("planner_own", result["best"]).get("description", "")))
    text = [
        "# hgsim against the geo-distributed papers' figures",
        "",
        "Generated by `/usr/bin/python3 validation/papers.py%s` (`hgsim plan SCENARIO "
        "--baselines --json --time-budget %g` per row). Ratios are throughput ratios, "
        "Megatron's iteration time over DT-FM's, as the paper reports them; hgsim's two "
        "systems are its `megatron` and `dtfm` baselines (planner/baselines.hpp), each "
        "simulated on the scenario; \"planner\" is hgsim's own plan and \"vs best\" the "
        "faster baseline's time over it (>= 1: the planner is at least as fast as both)."
        % (" --all" if args.all else "", args.time_budget),
        "",
        "## Yuan et al. 2022 (DT-FM), §4: 64 V100s, five network settings",
        "",
        "The paper's figure: DT-FM over Megatron, 4.8x world-wide (abstract, §4), 1.2-2.5x "
        "in the other settings (§4, a range: the per-setting bars of its end-to-end figure "
        "are not transcribed). \"within 25%\": the ratio lies in the paper's figure or range "
        "widened by 25%.",
        "",
        "| setting | layers | batch | paper: DT-FM / Megatron | hgsim megatron (s) | hgsim "
        "dtfm (s) | hgsim: DT-FM / Megatron | difference | within 25% | hgsim planner (s) | "
        "vs best | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ] + rows + ["", "Plans (24 layers, batch 1024):", ""] + plans + [
        "", "Where hgsim differs from the paper, the cost that differs:", ""] + [
        "- %s: %s" % (title, WHY[setting]) for setting, title, _ in SETTINGS]
    with _files.atomic_open(args.out) as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text))
    if failed:
        raise cli.ScriptError("%d rows have no plan (their reason is in the table, %s)"
                              % (failed, cli.quoted(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
