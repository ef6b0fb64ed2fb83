#!/usr/bin/env python3
"""hgsim against published end-to-end training runs: validation/published.md.

Reads validation/published-runs.csv (each row: a published run's configuration, the
figure it reported, the FLOP convention of that figure, and where it comes from), writes
one scenario per row (one cluster of DGX-class nodes, the run's explicit plan), runs
`hgsim run --json`, converts hgsim's iteration time into the reported metric under the
row's convention, and writes the table with the error of every row.

Nothing here feeds back into the model: the compute and memory constants come from
kernels/kernel_costs.yaml and kernels/gpus.yaml (kernel-level sources). Rows hgsim misses
stay in the table.

Usage:  /usr/bin/python3 validation/published.py [--hgsim build/release/apps/hgsim]
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# hgsim.files and scripts/script_cli.py from the source tree (validation/source_tree.py).
sys.path.insert(0, HERE)
from source_tree import cli, files as _files  # noqa: E402

# Datasheet dense bf16 peaks, for MFU: hgsim's own catalog (kernels/gpus.yaml, read through
# `hgsim gpus --json` by gpu_peaks in main), not a copy of it.
PEAK = {}


def gpu_peaks(hgsim):
    """Each catalogued GPU's dense bf16 peak (FLOP/s), as `hgsim gpus --json` gives it."""
    out = subprocess.run([hgsim, "gpus", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise cli.ScriptError(f"{cli.quoted(hgsim)} gpus --json failed: "
                              + (out.stderr.strip() or f"exit {out.returncode}"))
    return {g["name"]: g["peak_flops_per_s"]["bf16"] for g in json.loads(out.stdout)["gpus"]
            if g["peak_flops_per_s"]["bf16"]}

# DGX A100 / DGX H100 nodes: 8 GPUs on NVSwitch, one NIC per GPU. Per GPU and direction:
# NVLink 3 300 GB/s (600 GB/s total), NVLink 4 450 GB/s; HDR 200 Gbit/s, NDR 400 Gbit/s.
NODE = {
    "A100-80GB-SXM": {"nvlink": "300GB/s", "nic": "200Gbps"},
    "A100-40GB-SXM": {"nvlink": "300GB/s", "nic": "200Gbps"},
    "H100-80GB-SXM": {"nvlink": "450GB/s", "nic": "400Gbps"},
}


def model_flops(row, convention):
    """FLOPs of one iteration under the paper's convention."""
    B, s, l, h, V = (float(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    if convention == "narayanan_96":  # Narayanan et al. 2021, eq. (3): with recomputation
        return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    if convention == "korthikanti_72":  # Korthikanti et al. 2022, model FLOPs (no recompute)
        return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    raise ValueError("unknown FLOP convention " + convention)


def model_yaml(row):
    """The row's model: a zoo model by name (optional `model` column), else the GPT-shaped
    model of its columns."""
    if row.get("model"):
        return f"model: {row['model']}"
    return f"""model:
  name: {row['id']}-gpt
  layers: {row['layers']}
  hidden: {row['hidden']}
  heads: {row['heads']}
  vocab: {row['vocab']}
  max_positions: {row['seq_len']}"""


def scenario_yaml(row):
    gpus, tp, pp = int(row["gpus"]), int(row["tp"]), int(row["pp"])
    # Optional column: context parallelism (cp ranks per stage; older rows leave it out).
    cp = int(row.get("cp") or 1)
    dp = gpus // (tp * pp * cp)
    mb = int(row["micro_batch"])
    micro_batches = int(row["global_batch"]) // (dp * mb)
    node = NODE[row["gpu"]]
    per_node = min(8, gpus)  # DGX nodes of 8; a run on fewer GPUs is part of one node
    layers = int(row["layers"]) // pp
    # Optional columns (older rows leave them out): the sharding the run's optimizer used
    # (0 plain data parallelism, 1 Megatron's distributed optimizer / NeMo's distributed
    # Adam, 3 FSDP full shard) and Megatron-core's tensor-parallel communication overlap.
    zero = int(row.get("zero") or 0)
    tp_comm_overlap = (row.get("tp_comm_overlap") or "false").strip().lower()
    cp_key = f", cp: {cp}" if cp > 1 else ""
    # Optional column: the FlashAttention version the run's software had (FlashAttention-3
    # appeared in July 2024; empty: the GPU's own, 3 on Hopper).
    flash_version = (row.get("flash_version") or "").strip()
    training_extra = f"\n  flash_version: {int(flash_version)}" if flash_version else ""
    # Optional columns: the dtypes the run kept its main gradients and optimizer state in
    # (empty: Megatron-LM's, fp32 gradients under bf16 and fp32 state).
    for key in ("grad_dtype", "optimizer_state"):
        if (row.get(key) or "").strip():
            training_extra += f"\n  {key}: {row[key].strip()}"
    stages = "\n".join(
        f"        - {{cluster: dgx, tp: {tp}, layers: {layers}{cp_key}}}" for _ in range(pp))
    vs = int(row["virtual_stages"])
    return f"""name: {row['id']}
{model_yaml(row)}
training:
  global_batch: {row['global_batch']}
  seq_len: {row['seq_len']}
  precision: {row['precision']}
  optimizer: adam
  recompute: {row['recompute']}
  attention: {row['attention']}{training_extra}
clusters:
  - name: dgx
    gpu: {row['gpu']}
    nodes: {gpus // per_node}
    gpus_per_node: {per_node}
    nvlink: {{bandwidth: {node['nvlink']}, latency: 1us}}
    nic: {{bandwidth: {node['nic']}, latency: 2us}}
strategy:
  schedule: {row['schedule']}
  virtual_stages: {vs}
  micro_batch: {mb}
  sequence_parallel: {row['sequence_parallel']}
  grad_reduce: {row['grad_reduce']}
  zero: {zero}
  tp_comm_overlap: {tp_comm_overlap}
  pipelines:
    - replicas: {dp}
      micro_batches: {micro_batches}
      stages:
{stages}
  grad_sync: {{algorithm: ring, bucket: 25MB}}
simulation: {{fidelity: folded}}
"""


def refusal(p):
    """Why hgsim refused a row: the first error of its --json diagnostics, else stderr."""
    try:
        for d in json.loads(p.stdout).get("diagnostics", []):
            if d.get("severity") == "error":
                return d.get("message", "failed").replace("|", "/")
    except (ValueError, AttributeError):
        pass
    lines = [line for line in p.stderr.strip().splitlines() if "error" in line]
    return (lines[0] if lines else "failed").replace("|", "/")


def predict(row, hgsim):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, row["id"] + ".yaml")
        with open(path, "w") as f:
            f.write(scenario_yaml(row))
        p = subprocess.run([hgsim, "run", path, "--json"], capture_output=True, text=True)
        if p.returncode != 0:
            return None, refusal(p)
        result = json.loads(p.stdout)
    t = result["summary"]["iteration_time_s"] if "summary" in result else result["iteration_time_s"]
    return metric(row, t), (t, breakdown(result, t))


def metric(row, t):
    """The row's reported metric for an iteration of t seconds."""
    gpus = int(row["gpus"])
    if row["metric"] == "tokens_per_gpu_s":  # needs no FLOP convention
        return float(row["global_batch"]) * float(row["seq_len"]) / (t * gpus)
    if row["metric"] == "iteration_s":  # the step time itself, no FLOP convention
        return t
    flops = model_flops(row, row["flop_convention"])
    if row["metric"] == "tflops_per_gpu":
        return flops / (t * gpus) / 1e12
    if row["metric"] == "mfu":
        return flops / (t * gpus * PEAK[row["gpu"]])
    raise ValueError("unknown metric " + row["metric"])


# The breakdown's parts (hgsim run --json, stages[].breakdown, sim/breakdown.hpp) in the
# order the table shows them, with their column headings.
PARTS = (("gemm", "GEMM"), ("attention", "attention"), ("memory", "memory-bound"),
         ("overhead", "per-kernel overhead"), ("optimizer", "optimizer"), ("codec", "codec"),
         ("tp_comm", "TP comm"), ("cp_comm", "CP comm"), ("pp_comm", "PP comm"),
         ("dp_comm", "DP comm"), ("bubble", "bubble"))


def breakdown(result, t):
    """Where the iteration goes, as fractions of it: the mean over the run's stages of each
    stage's breakdown (each stage's parts add up to the iteration)."""
    stages = result.get("stages") or []
    if not stages or not t > 0:
        return None
    return {part: sum(s["breakdown"].get(part + "_s", 0.0) for s in stages) / len(stages) / t
            for part, _ in PARTS}


# The columns every row needs (the others are optional; see scenario_yaml).
REQUIRED = ("id", "gpus", "gpu", "tp", "pp", "micro_batch", "global_batch", "seq_len", "layers",
            "hidden", "heads", "vocab", "precision", "recompute", "attention", "schedule",
            "virtual_stages", "sequence_parallel", "grad_reduce", "metric", "reported", "source")


def read_rows(path):
    """The CSV's rows; ScriptError naming the line of a row that lacks a column or whose
    numbers, GPU, metric or FLOP convention this script does not know."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise cli.ScriptError(f"--csv {cli.quoted(path)}: not a CSV file ({e})") from None
    if not rows:
        raise cli.ScriptError(f"--csv {cli.quoted(path)}: no rows")
    for line, row in enumerate(rows, start=2):
        where = f"--csv {cli.quoted(path)}:{line}"
        missing = [c for c in REQUIRED if not (row.get(c) or "").strip()]
        if missing and not (missing == ["flop_convention"]
                            and row.get("metric") in ("tokens_per_gpu_s", "iteration_s")):
            raise cli.ScriptError(f"{where}: no {', '.join(missing)}")
        try:
            for c in ("gpus", "tp", "pp", "micro_batch", "global_batch", "seq_len", "layers",
                      "virtual_stages"):
                if int(row[c]) < 1:
                    raise ValueError(f"{c} is {row[c]}")
            if not float(row["reported"]) > 0:
                raise ValueError(f"reported is {row['reported']}")
        except ValueError as e:
            raise cli.ScriptError(f"{where}: not a positive whole number ({cli.quoted(e)})") \
                from None
        if row["gpu"] not in NODE:
            raise cli.ScriptError(f"{where}: gpu {cli.quoted(row['gpu'])}: one of "
                                  + ", ".join(NODE))
        if row["metric"] not in ("tokens_per_gpu_s", "tflops_per_gpu", "mfu", "iteration_s"):
            raise cli.ScriptError(f"{where}: metric {cli.quoted(row['metric'])}: one of "
                                  "tokens_per_gpu_s, tflops_per_gpu, mfu, iteration_s")
        if row["metric"] in ("tflops_per_gpu", "mfu") and \
                row["flop_convention"] not in ("narayanan_96", "korthikanti_72"):
            raise cli.ScriptError(f"{where}: flop_convention "
                                  f"{cli.quoted(row['flop_convention'])}: narayanan_96 or "
                                  "korthikanti_72")
    return rows


def time_error(metric, err):
    """The error of the predicted iteration time for a signed error of the metric: time is
    inversely proportional to the throughput metrics, and is the metric for iteration_s.
    Negative: hgsim's iteration is shorter than the run's (optimistic)."""
    if err is None:
        return None
    return err if metric == "iteration_s" else 1 / (1 + err) - 1


def error_summary(errors, time_errors=None):
    """The errors per provenance class and group, as the tool reads them.

    Every published row is predicted from datasheets (no profile, no calibration), so
    all of them fall in the class `datasheet`; `errors` maps a group (single-node,
    multi-node) to signed relative errors of the reported metric (None: refused), and
    `time_errors` (same shape) to those of the iteration time (time_error): what hgsim
    prints beside a time. Optimistic runs are those whose predicted time is shorter."""
    groups = {}
    for group, errs in errors.items():
        ok = [e for e in errs if e is not None]
        times = [t for t in (time_errors or {}).get(group, []) if t is not None]
        groups[group] = {
            "runs": len(ok),
            "refused": sum(e is None for e in errs),
            "mean_abs_error": sum(abs(e) for e in ok) / len(ok) if ok else None,
            "mean_signed_error": sum(ok) / len(ok) if ok else None,
            "optimistic_runs": sum(t < 0 for t in times) if times else sum(e > 0 for e in ok),
        }
        if times:
            groups[group]["mean_abs_time_error"] = sum(abs(t) for t in times) / len(times)
            groups[group]["mean_signed_time_error"] = sum(times) / len(times)
    return {"source": "validation/published.md", "classes": {"datasheet": groups}}


def main():
    ap = cli.Parser(description="hgsim against published end-to-end training runs.")
    ap.add_argument("--hgsim", default=os.path.join(ROOT, "build/release/apps/hgsim"))
    ap.add_argument("--csv", default=os.path.join(HERE, "published-runs.csv"))
    ap.add_argument("--out", default=os.path.join(HERE, "published.md"))
    ap.add_argument("--json", default=os.path.join(HERE, "published-errors.json"),
                    help="machine-readable summary of the errors, per provenance class and group")
    args = ap.parse_args()
    cli.executable(args.hgsim, "--hgsim")
    PEAK.update(gpu_peaks(args.hgsim))
    cli.input_file(args.csv, "--csv")
    cli.output_file(args.out, "--out")
    cli.output_file(args.json, "--json")
    rows = read_rows(args.csv)
    lines = []
    split = []  # the breakdown table's rows
    errors = {"single-node": [], "multi-node": []}
    time_errors = {"single-node": [], "multi-node": []}
    for row in rows:
        predicted, detail = predict(row, args.hgsim)
        reported = float(row["reported"])
        group = "single-node" if int(row["gpus"]) <= 8 else "multi-node"
        if predicted is None:
            lines.append(f"| {row['id']} | {row['gpus']} | {row['metric']} | {reported:g} | "
                         f"refused: {detail} | — | {row['source']} |")
            errors[group].append(None)
            time_errors[group].append(None)
            continue
        t, parts = detail
        err = (predicted - reported) / reported
        errors[group].append(err)
        time_errors[group].append(time_error(row["metric"], err))
        lines.append(f"| {row['id']} | {row['gpus']} | {row['metric']} | {reported:g} | "
                     f"{predicted:.3g} (iteration {t:.2f} s) | {err:+.1%} | {row['source']} |")
        if parts is not None:
            split.append(f"| {row['id']} | {err:+.1%} | "
                         + " | ".join(f"{100 * parts[p]:.1f}" for p, _ in PARTS) + " |")
        print(f"{row['id']}: reported {reported:g}, hgsim {predicted:.4g} ({err:+.1%})",
              file=sys.stderr)
    with _files.atomic_open(args.out) as out:
        out.write("# hgsim against published end-to-end runs\n\n")
        out.write("Produced by `/usr/bin/python3 validation/published.py` from "
                  "`validation/published-runs.csv` (configurations, reported figures, FLOP "
                  "conventions and sources; assumptions per row in its `notes` column). "
                  "Nothing in hgsim is fitted to these figures: they are for validation only.\n\n")
        out.write("Software of the time, as the papers describe it: Megatron-LM in 2021-2022 "
                  "ran standard attention (FlashAttention appeared in mid-2022) and reduced "
                  "gradients after the backward (overlapped reduction came in 2023), so those rows "
                  "say `attention: standard` and `grad_reduce: after_backward`. Later rows "
                  "(FlashAttention's, MosaicML's llm-foundry, NVIDIA NeMo's) say the sharding "
                  "their sources state in `zero` (NeMo's distributed Adam, apex's ZeRO-2, 2; FSDP full shard "
                  "3) and `tp_comm_overlap`; `validation/published-sources.md` quotes every "
                  "figure and configuration from its source.\n\n")
        out.write("FLOP conventions: `narayanan_96` = 96 B s l h² (1 + s/6h + V/16lh) per "
                  "iteration (Narayanan et al. 2021, eq. 3, counts the recomputed forward); "
                  "`korthikanti_72` = 72 B s l h² (1 + s/6h + V/12lh) (model FLOPs, "
                  "Korthikanti et al. 2022). MFU against the dense bf16/fp16 peak. "
                  "`tokens_per_gpu_s` rows compare the tokens per second per GPU the source "
                  "reports (no FLOP convention). Rows with a `model` column run that zoo "
                  "model (Llama's SwiGLU, RMSNorm and RoPE) instead of the GPT shape of their "
                  "columns, which still give the FLOP convention; `cp` is the context-parallel "
                  "degree; `flash_version` the FlashAttention of the run's time (2 before "
                  "FlashAttention-3's release in July 2024; empty: the GPU's own).\n\n")
        for group, errs in errors.items():
            ok = [abs(e) for e in errs if e is not None]
            refused = sum(e is None for e in errs)
            if errs:
                mae = f"{sum(ok) / len(ok):.1%}" if ok else "—"
                out.write(f"- {group}: {len(errs)} runs, mean |error| {mae}"
                          f"{f', {refused} refused' if refused else ''}\n")
        out.write("\n| run | GPUs | metric | reported | hgsim | error | source |\n")
        out.write("|---|---:|---|---:|---:|---:|---|\n")
        out.write("\n".join(lines) + "\n")
        out.write("\n## Where each run's iteration goes\n\n"
                  "hgsim's breakdown of the predicted iteration (`hgsim run --json`, "
                  "`stages[].breakdown`; docs/simulator.md, 'Where the time goes'), in percent of "
                  "the iteration, averaged over the run's pipeline stages. Compute is split "
                  "by kernel class as the compute model priced it; communication counts only "
                  "where the stage computes nothing (exposed); the bubble is the rest. "
                  "`validation/published-analysis.md` names, for every row off by more than "
                  "10%, the cost class that explains it.\n\n")
        out.write("| run | error | " + " | ".join(h for _, h in PARTS) + " |\n")
        out.write("|---|---:|" + "---:|" * len(PARTS) + "\n")
        out.write("\n".join(split) + "\n")
    with _files.atomic_open(args.json) as out:
        json.dump(error_summary(errors, time_errors), out, indent=2, sort_keys=True)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
