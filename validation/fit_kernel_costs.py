#!/usr/bin/env python3
"""Fits the GEMM and memory-bound constants of kernels/kernel_costs.yaml to the committed
kernel-level tables kernels/measured/vidur_<gpu>_<model>_mlp.csv, and prints them.

Only those tables are read: per op and GPU, one measured forward time per (model, tp, tokens)
row. End-to-end iteration times never enter (validation/published.py checks those). The op
shapes, FLOPs and bytes are the compute model's own (hgsim.layer_kernels, kernels/layer_ops.cpp);
the formulas fitted are those of kernels/compute_model.cpp, restated below:

  GEMM         t = max(flops / (peak x ceiling x m / (m + half_rows) x wave),
                       bytes / (HBM x gemm_memory_efficiency)) + gemm_overhead
               wave = w / ((1 - loss) w + loss ceil(w)), w = ceil(m / 128) ceil(n / 256) / SMs
  memory op    t = overhead + max(min(bytes, L2) / (HBM x l2_efficiency)
                                  + (bytes - min(bytes, L2)) / (HBM x efficiency),
                                  row_bytes / row_bandwidth)

Each class and GPU is fitted on its own, minimising the mean |relative error| (what
validation/kernels.md reports) by Nelder-Mead from a few starts; `l2_resident` per GPU is
the fraction of its L2 (0, 1/4, 1/2, 3/4, 1) that minimises the memory classes' mean.
tests/test_kernel_tables.cpp holds the C++ model to a subset of the same tables.

`--in-step` fits only `gemm_in_step` (the share of a GEMM's rate timed alone that it keeps
in a training step), per GPU of the training table kernels/measured/
sailor_aceso_training_ops.csv, on its GEMMs of at least IN_STEP_MIN_FLOPS: t = overhead +
(t_alone - overhead) / share, t_alone the model's own (hgsim.layer_kernels, timing
"isolated"), the share minimising the mean |relative error| on a grid of 0.001.

Usage:  /usr/bin/python3 validation/fit_kernel_costs.py [--build build/release] [--in-step]
Needs numpy and scipy (Debian: python3-numpy, python3-scipy).
"""
import importlib.util
import math
import os
import re
import sys

import numpy as np
from scipy.optimize import minimize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_spec = importlib.util.spec_from_file_location("kernels_report", os.path.join(HERE, "kernels.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)
cli = report.cli

# The L2 of the GPUs the tables were measured on (NVIDIA A100 whitepaper: 40 MB; H100
# whitepaper: 50 MB).
L2_BYTES = {"a100": 40e6, "h100": 50e6}
WAVE_TILE = (128, 256)
# vidur's op -> the compute model's memory class (kernels::memory_class); `mlp_act` is
# swiglu or gelu by the model.
MEMORY_CLASS = {"input_layernorm": "norm", "post_attention_layernorm": "norm",
                "attn_rope": "rope", "add": "add"}


def gpu_constants(name):
    """(HBM bytes/s, fp16 FLOP/s, SMs) of `name` from kernels/gpus.yaml."""
    import yaml
    with open(os.path.join(ROOT, "kernels", "gpus.yaml")) as f:
        doc = yaml.safe_load(f)
    for g in doc["gpus"]:
        if g["name"] == name:
            bw = re.fullmatch(r"([\d.]+)GB/s", g["memory_bandwidth"])
            peak = re.fullmatch(r"([\d.]+)TFLOPS", g["peak"]["fp16"])
            return float(bw.group(1)) * 1e9, float(peak.group(1)) * 1e12, int(g["sms"])
    raise cli.ScriptError(f"kernels/gpus.yaml: no GPU {name}")


def samples(hgsim, paths):
    """Per GPU: a list of (class, measured s, op record) for every measured op."""
    out = {}
    for path in paths:
        gpu, model, rows = report.read_table(path)
        for line, row in enumerate(rows, start=2):
            tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            shape = report.shape_of(row)
            kernels = hgsim.layer_kernels(report.GPUS[gpu], tokens=tokens, tp=tp,
                                          precision="fp16", timing="isolated", **shape)
            by_role = {}
            for k in kernels:
                by_role.setdefault(k["role"], k)
            for op, role, cls in report.OPS:
                value = row.get(f"{op}_median_ms", "")
                if value == "":
                    continue
                k = by_role[role]
                if cls == "gemm":
                    name = "gemm"
                elif op == "mlp_act":
                    name = shape["activation"]
                else:
                    name = MEMORY_CLASS[op]
                out.setdefault(gpu, []).append((name, float(value) * 1e-3, k))
    return out


def gemm_time(p, k, hbm, peak, sms):
    ceiling, half_rows, loss, memory_efficiency, overhead_us = p
    m, n, _ = k["shape"]
    w = math.ceil(m / WAVE_TILE[0]) * math.ceil(n / WAVE_TILE[1]) / sms
    wave = w / ((1 - loss) * w + loss * math.ceil(w))
    efficiency = ceiling * m / (m + half_rows) * wave
    return max(k["flops"] / (peak * efficiency),
               k["bytes"] / (hbm * memory_efficiency)) + overhead_us * 1e-6


def memory_time(p, k, hbm, l2):
    efficiency, l2_efficiency, overhead_us, row_gbps = p
    cached = min(k["bytes"], l2)
    t = cached / (hbm * l2_efficiency) + (k["bytes"] - cached) / (hbm * efficiency)
    if len(k["shape"]) >= 2 and row_gbps > 0:
        t = max(t, k["bytes"] / k["shape"][0] / (row_gbps * 1e9))
    return t + overhead_us * 1e-6


def fit(loss, starts, bounds):
    def bounded(p):
        if any(not (lo <= v <= hi) for v, (lo, hi) in zip(p, bounds)):
            return 1e9
        return loss(p)
    best = None
    for p0 in starts:
        r = minimize(bounded, p0, method="Nelder-Mead",
                     options=dict(maxiter=6000, xatol=1e-4, fatol=1e-6))
        if best is None or r.fun < best.fun:
            best = r
    return best.x, best.fun


def fit_gpu(gpu, records):
    hbm, peak, sms = gpu_constants(report.GPUS[gpu])
    out = {}
    gemms = [(t, k) for name, t, k in records if name == "gemm"]

    def gemm_loss(p):
        return np.mean([abs(gemm_time(p, k, hbm, peak, sms) / t - 1) for t, k in gemms])
    p, err = fit(gemm_loss, [[0.78, 50, 0.1, 0.8, 4], [0.75, 90, 0.3, 0.85, 5]],
                 [(0.3, 1), (0, 1e4), (0, 1), (0.1, 1), (0, 50)])
    out["gemm"] = (p, err, len(gemms))
    best_l2 = None
    for share in (0, 0.25, 0.5, 0.75, 1):
        l2 = share * L2_BYTES[gpu]
        fits, total = {}, 0
        for name in ("norm", "rope", "swiglu", "gelu", "add"):
            mine = [(t, k) for n, t, k in records if n == name]
            if not mine:
                continue

            # Flat ops (add, gelu: shape {elements}) have no rows: three constants.
            rows = len(mine[0][1]["shape"]) >= 2

            def loss(q, mine=mine, rows=rows):
                q = list(q) if rows else list(q) + [0]
                return np.mean([abs(memory_time(q, k, hbm, l2) / t - 1) for t, k in mine])
            starts = [[0.5, 0.7, 2, 10], [0.8, 1.2, 1, 5], [0.4, 0.5, 3, 50]]
            bounds = [(0.05, 1), (0.05, 3), (0, 50), (0, 1e4)]
            if not rows:
                starts, bounds = [s[:3] for s in starts], bounds[:3]
            q, e = fit(loss, starts, bounds)
            q = list(q) if rows else list(q) + [0]
            fits[name] = (q, e, len(mine))
            total += e * len(mine)
        if best_l2 is None or total < best_l2[0]:
            best_l2 = (total, l2, fits)
    out["l2_resident"] = best_l2[1]
    out.update(best_l2[2])
    return out


# Below this, the training table's host timing of one op holds the framework's per-op cost
# (tens of microseconds; the smallest GEMMs there take 30-60 us).
IN_STEP_MIN_FLOPS = 1e11


def fit_in_step(hgsim, measured):
    import yaml
    path = os.path.join(measured, report.TRAINING_TABLE)
    records = [r for r in report.training_records(hgsim, path) if r["flops"] >= IN_STEP_MIN_FLOPS]
    with open(os.path.join(ROOT, "kernels", "kernel_costs.yaml")) as f:
        rows = {r["architecture"]: r for r in yaml.safe_load(f)["architectures"]}
    arch = {"A100-40": "ampere", "GH-96": "hopper", "V100-16": "volta"}
    for gpu in sorted({r["gpu"] for r in records}):
        mine = [r for r in records if r["gpu"] == gpu]
        overhead = float(str(rows[arch[gpu]]["gemm_overhead"]).rstrip("us")) * 1e-6

        def errors(share):
            return [((r["isolated"] - overhead) / share + overhead - r["measured"]) / r["measured"]
                    for r in mine]

        def mae(share):
            return sum(abs(e) for e in errors(share)) / len(mine)

        best = min((k / 1000 for k in range(500, 1500)), key=mae)
        alone = errors(1.0)
        print(f"# {gpu} ({report.TRAINING_GPUS[gpu]}, {arch[gpu]}): {len(mine)} GEMMs; alone "
              f"mean |error| {mae(1.0):.1%}, signed {sum(alone) / len(alone):+.1%}; "
              f"gemm_in_step {best:.3f}: mean |error| {mae(best):.1%}, "
              f"signed {sum(errors(best)) / len(mine):+.1%}")
    return 0


def main():
    ap = cli.Parser(description="Fits kernel_costs.yaml's GEMM and memory-op constants to "
                                "the committed vidur tables.")
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"),
                    help="the build folder holding python/hgsim")
    ap.add_argument("--measured", default=os.path.join(ROOT, "kernels/measured"))
    ap.add_argument("--in-step", action="store_true",
                    help="fit only gemm_in_step, to the training table")
    args = ap.parse_args()
    if args.in_step:
        return fit_in_step(report.load_hgsim(args.build), args.measured)
    import glob
    paths = sorted(glob.glob(os.path.join(args.measured, "vidur_*_mlp.csv")))
    if not paths:
        raise cli.ScriptError(f"--measured {cli.quoted(args.measured)}: no vidur tables")
    hgsim = report.load_hgsim(args.build)
    by_gpu = samples(hgsim, paths)
    for gpu, records in sorted(by_gpu.items()):
        fits = fit_gpu(gpu, records)
        print(f"# {gpu} ({report.GPUS[gpu]})")
        (c, half, loss, mem, ov), err, n = fits["gemm"]
        print(f"gemm ({n} ops, mean |error| {err:.1%}): gemm_efficiency {c:.3f}, "
              f"gemm_half_rows {half:.0f}, gemm_wave_loss {loss:.2f}, "
              f"gemm_memory_efficiency {mem:.3f}, gemm_overhead {ov:.1f}us")
        print(f"l2_resident {fits['l2_resident'] / 1e6:.0f}MB")
        for name in ("norm", "rope", "swiglu", "gelu", "add"):
            if name not in fits:
                continue
            (e, l2e, ov, row), err, n = fits[name]
            row_text = f", row_bandwidth: {row:.1f}GB/s" if row > 0 else ""
            print(f"{name} ({n} ops, mean |error| {err:.1%}): {{efficiency: {e:.3f}, "
                  f"l2_efficiency: {l2e:.3f}{row_text}, overhead: {ov:.1f}us}}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
