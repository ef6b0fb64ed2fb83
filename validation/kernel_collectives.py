#!/usr/bin/python3
"""NCCL collectives as hgsim prices them, beside kernel-level measurements.

Reads the committed tables kernels/measured/nccl/vidur_<gpu>_dgx_<kind>.csv (microsoft/vidur,
commit 7d47513363ec447a741ac5e47241580b47724fbf, data/profiling/network/; MIT; see
kernels/measured/README.md) and asks the simulator's own closed forms for each row through
the Python binding `_hgsim.collective_time` (sim/collectives.hpp: NCCL's channel rings and
fixed cost, the one function every fidelity and the planner call). Nothing here re-derives
a cost.

The cluster of each row: the GPU's catalog NVLink rate a direction, the scenarios' 1 us NVLink
latency. Across nodes, vidur's testbed is not a DGX fabric: its NIC is taken at the rate its
own send/recv table shows between two nodes (the fit of send_recv (2, 1) from 1 MiB up), so
the cross-node all-reduce rows check the channel rings against that testbed.

validation/kernels.py imports `section()` and puts its Markdown into validation/kernels.md;
run alone, this prints the same section.

Usage:  /usr/bin/python3 validation/kernel_collectives.py [--python build/release/python]
"""

import argparse
import csv
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TABLES = os.path.join(ROOT, "kernels", "measured", "nccl")
MIB = 1 << 20

# vidur's a100_dgx and h100_dgx profiles, as the catalog names those GPUs.
GPUS = {"a100": "A100-80GB-SXM", "h100": "H100-80GB-SXM"}
KINDS = ("all_reduce", "send_recv")


def load_hgsim(python_dir=None):
    """The _hgsim extension from a build (PYTHONPATH, --python, or build/release/python)."""
    for candidate in (python_dir, os.environ.get("HGSIM_PYTHON"),
                      os.path.join(ROOT, "build", "release", "python")):
        if candidate and candidate not in sys.path and os.path.isdir(candidate):
            sys.path.insert(0, candidate)
    try:
        return importlib.import_module("hgsim._hgsim")
    except ImportError as e:
        raise SystemExit(
            "kernel_collectives.py: cannot import hgsim._hgsim (%s); build it "
            "(cmake --build --preset release --target _hgsim) or pass --python DIR" % e)


def read_table(gpu, kind):
    path = os.path.join(TABLES, "vidur_%s_dgx_%s.csv" % (gpu, kind))
    with open(path, newline="") as f:
        return [{"ranks": int(r["ranks"]), "ranks_per_node": int(r["ranks_per_node"]),
                 "bytes": int(r["size_bytes"]), "measured_s": float(r["median_ms"]) * 1e-3}
                for r in csv.DictReader(f)]


def testbed_nic_bytes_per_s(rows):
    """Bandwidth of vidur's cross-node send/recv from 1 MiB up: the slope of a least-squares
    line t = a + S / B (the testbed's NIC rate, a fact of the same table)."""
    pts = [(r["bytes"], r["measured_s"]) for r in rows
           if r["ranks_per_node"] == 1 and r["bytes"] >= MIB]
    n = len(pts)
    mx = sum(s for s, _ in pts) / n
    my = sum(t for _, t in pts) / n
    slope = sum((s - mx) * (t - my) for s, t in pts) / sum((s - mx) ** 2 for s, _ in pts)
    return 1 / slope


def collect(hgsim):
    """Every measured row with hgsim's prediction: dicts with kind, gpu, ranks,
    ranks_per_node, bytes, measured_s, hgsim_s, error (signed, relative to measured)."""
    out = []
    for gpu, name in GPUS.items():
        nic = "%.6gGB/s" % (testbed_nic_bytes_per_s(read_table(gpu, "send_recv")) / 1e9)
        for kind in KINDS:
            for r in read_table(gpu, kind):
                predicted = hgsim.collective_time(
                    kind, name, r["ranks"], r["ranks_per_node"], float(r["bytes"]),
                    nic_bandwidth=nic)
                out.append(dict(r, kind=kind, gpu=gpu, hgsim_s=predicted,
                                error=predicted / r["measured_s"] - 1))
    return out


def summary(rows):
    """Per (kind, gpu, ranks, ranks_per_node): mean |error| from 1 MiB up and over all sizes,
    and the signed mean from 1 MiB up."""
    groups = {}
    for r in rows:
        groups.setdefault((r["kind"], r["gpu"], r["ranks"], r["ranks_per_node"]), []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        big = [r["error"] for r in rs if r["bytes"] >= MIB]
        out.append({"kind": key[0], "gpu": key[1], "ranks": key[2], "ranks_per_node": key[3],
                    "mean_abs_error_from_1MiB": sum(map(abs, big)) / len(big),
                    "mean_error_from_1MiB": sum(big) / len(big),
                    "mean_abs_error_all": sum(abs(r["error"]) for r in rs) / len(rs),
                    "inside_one_node": key[2] == key[3]})
    return out


def size_text(b):
    for unit, scale in (("MiB", MIB), ("KiB", 1024)):
        if b >= scale:
            return "%.4g %s" % (b / scale, unit)
    return "%d B" % b


def section(python_dir=None):
    """(Markdown section, per-row dicts, per-group summary) for validation/kernels.md."""
    rows = collect(load_hgsim(python_dir))
    groups = summary(rows)
    lines = [
        "## Collectives (NCCL)",
        "",
        "Measured: NCCL kernel time (median, kineto) of one all-reduce or send/recv in "
        "microsoft/vidur 7d47513363ec447a741ac5e47241580b47724fbf "
        "`data/profiling/network/{a100_dgx,h100_dgx}/` (subset in `kernels/measured/nccl/`). "
        "hgsim: `_hgsim.collective_time`, the closed form both fidelities and the planner use "
        "(NCCL's channel rings and fixed cost, `sim/collectives.hpp`; constants in "
        "`kernels/nccl_costs.yaml` and `kernels/kernel_costs.yaml`, fitted to the rows inside "
        "one node from 1 MiB up). Rows across nodes describe vidur's testbed, whose NIC is "
        "taken at the rate its own send/recv (2 ranks, 1 per node) shows; they are not a DGX "
        "fabric.",
        "",
        "| kind | gpu | ranks | per node | mean abs error >= 1 MiB | signed >= 1 MiB "
        "| mean abs error, all sizes |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for g in groups:
        lines.append("| %s | %s | %d | %d | %.1f%% | %+.1f%% | %.1f%% |" % (
            g["kind"], g["gpu"], g["ranks"], g["ranks_per_node"],
            100 * g["mean_abs_error_from_1MiB"], 100 * g["mean_error_from_1MiB"],
            100 * g["mean_abs_error_all"]))
    lines += ["", "Every row:", "",
              "| kind | gpu | ranks | per node | size | measured (us) | hgsim (us) | error |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %s | %s | %d | %d | %s | %.1f | %.1f | %+.1f%% |" % (
            r["kind"], r["gpu"], r["ranks"], r["ranks_per_node"], size_text(r["bytes"]),
            1e6 * r["measured_s"], 1e6 * r["hgsim_s"], 100 * r["error"]))
    return "\n".join(lines) + "\n", rows, groups


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", help="the build's python/ folder (holds hgsim/_hgsim)")
    args = parser.parse_args()
    markdown, _, _ = section(args.python)
    sys.stdout.write(markdown)


if __name__ == "__main__":
    main()
