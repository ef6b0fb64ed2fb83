#!/usr/bin/env python3
"""hgsim's compute model against kernel-level measurements: validation/kernels.md.

Reads the committed per-op tables kernels/measured/vidur_<gpu>_<model>_mlp.csv (vidur's
forward time of every op of one Llama-style layer on one GPU of a tensor-parallel group,
fp16, CUDA events; kernels/measured/README.md says where they come from) and asks the
compute model itself for each op's time (hgsim.layer_kernels: kernels::layer_ops and
KernelModel::op_time, the function the simulator and the planner sum), then writes every
prediction beside its measurement with the mean |error| and mean signed error per op class
and GPU. A second section does the same for the linear layers of a training step, forward
and backward, from kernels/measured/sailor_aceso_training_ops.csv (sailor's Aceso profiler
tables: kernels/measured/README.md says what each column measures). When
validation/kernel_collectives.py exists its section (the NCCL tables) is appended.

Nothing here feeds back into the model: the tables are the evidence the constants of
kernels/kernel_costs.yaml are read from, and this report is how they are checked.

Usage:  /usr/bin/python3 validation/kernels.py [--build build/release] [--out validation/kernels.md]
"""
import csv
import glob
import importlib.util
import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# hgsim.files and scripts/script_cli.py from the source tree (validation/source_tree.py).
sys.path.insert(0, HERE)
from source_tree import cli, files as _files  # noqa: E402

# vidur's profiled GPUs: its a100/h100 compute tables come from DGX-class SXM boards (the
# network tables beside them are a100_dgx and h100_dgx).
GPUS = {"a100": "A100-80GB-SXM", "h100": "H100-80GB-SXM"}

# vidur's op (column `<op>_median_ms`) -> the role of the op in hgsim's layer (OpCall::role)
# and its class in the summary. `emb` (the embedding lookup) is not part of a layer.
OPS = [
    ("attn_pre_proj", "qkv_proj", "gemm"),
    ("attn_post_proj", "out_proj", "gemm"),
    ("mlp_up_proj", "up_proj", "gemm"),
    ("mlp_down_proj", "down_proj", "gemm"),
    ("input_layernorm", "input_norm", "norm"),
    ("post_attention_layernorm", "post_norm", "norm"),
    ("attn_rope", "rope", "rope"),
    ("mlp_act", "act", "act"),
    ("add", "attn_residual", "add"),
]
CLASSES = ["gemm", "norm", "rope", "act", "add"]

# The training table: sailor's GPU folder -> the catalog GPU priced for it. GH-96 is a GH200
# (96 GB): its GPU is the H100's GH100 die with 132 SMs and the same 989 TFLOPS dense fp16
# (NVIDIA GH200 datasheet), so H100-80GB-SXM prices it (an ASSUMPTION for HBM-bound GEMMs:
# the GH200's HBM3 runs at 4 TB/s against 3.35).
TRAINING_TABLE = "sailor_aceso_training_ops.csv"
TRAINING_GPUS = {"A100-40": "A100-40GB-SXM", "GH-96": "H100-80GB-SXM",
                 "V100-16": "V100-16GB-SXM"}
# Aceso's op -> (the role in hgsim's layer, Megatron's split under algo0). A column-parallel
# op's backward at tp > 1 also holds the all-reduce of its input gradient, a row-parallel
# op's forward the all-reduce of its output: those are left out (not GEMM-only).
TRAINING_OPS = {"enc-attention-qkv": ("qkv_proj", "column"),
                "enc-attention-dense": ("out_proj", "row"),
                "enc-MLP-GEMM-1": ("up_proj", "column"),
                "enc-MLP-GEMM-2": ("down_proj", "row")}


def training_records(hgsim, path):
    """One record per GEMM-only measurement of the training table: the forward GEMM or the
    backward's data-gradient GEMM (the table's backward is the gradient of the op's inputs
    only), with the model's time in a training step and timed alone."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    cache = {}
    for line, row in enumerate(rows, start=2):
        try:
            gpu, op = row["gpu"], row["op"]
            role, split = TRAINING_OPS[op]
            hidden, heads = int(row["hidden"]), int(row["heads"])
            mbs, tp, seq = int(row["micro_batch"]), int(row["tp"]), int(row["seq_len"])
            measured = {"forward": float(row["forward_us"]) * 1e-6,
                        "dgrad": float(row["backward_us"]) * 1e-6}
        except (KeyError, ValueError) as e:
            raise cli.ScriptError(f"{cli.quoted(path)}:{line}: {e}") from None
        for direction in ("forward", "dgrad"):
            with_collective = tp > 1 and (split == "row") == (direction == "forward")
            if with_collective:
                continue
            phase = "forward" if direction == "forward" else "backward"
            wanted = "gemm" if direction == "forward" else "gemm_dgrad"
            predicted = {}
            for timing in ("in_step", "isolated"):
                key = (gpu, hidden, heads, mbs, tp, phase, timing)
                if key not in cache:
                    cache[key] = hgsim.layer_kernels(
                        TRAINING_GPUS[gpu], hidden=hidden, heads=heads, kv_heads=heads,
                        ffn_hidden=4 * hidden, tokens=mbs * seq, sequences=mbs, tp=tp,
                        activation="gelu", norm="layernorm", rotary=False, precision="fp16",
                        phase=phase, timing=timing)
                kernel = next(k for k in cache[key] if k["role"] == role and k["op"] == wanted)
                predicted[timing] = kernel["seconds"]
                flops = kernel["flops"]
            out.append(dict(gpu=gpu, model=row["model"], micro_batch=mbs, tp=tp, op=op,
                            direction=direction, measured=measured[direction], flops=flops,
                            predicted=predicted["in_step"], isolated=predicted["isolated"]))
    return out


def dgrad_over_forward(records):
    """Per GPU: the measured and predicted dgrad / forward time ratios at tp 1 (the same
    GEMM FLOPs both ways), one per (model, micro-batch, op)."""
    pairs = {}
    for r in records:
        if r["tp"] == 1:
            pairs.setdefault((r["gpu"], r["model"], r["micro_batch"], r["op"]), {})[
                r["direction"]] = r
    out = {}
    for (gpu, *_), p in pairs.items():
        if len(p) == 2:
            out.setdefault(gpu, []).append(
                (p["dgrad"]["measured"] / p["forward"]["measured"],
                 p["dgrad"]["predicted"] / p["forward"]["predicted"]))
    return out


def write_training(out, records, path):
    out.write("\n## Training GEMMs, forward and backward\n\n")
    out.write(f"From `{os.path.relpath(path, ROOT)}` (eth-easl/sailor, MIT: Aceso's op "
              "profiler on one GPU of a tensor-parallel group of `tp`, Megatron-LM GPT layers, "
              "fp16, sequence 2048, micro-batch 1-8, mean of 40 back-to-back runs timed on "
              "the host). `forward` is the linear layer's GEMM; `dgrad` is the table's "
              "backward, which asks autograd for the gradient of the op's input only: the "
              "data-gradient GEMM, without the weight gradient. Rows whose time holds a "
              "tensor-parallel all-reduce (row-parallel forwards, column-parallel backwards "
              "at tp > 1) are left out. GH-96 (GH200) is priced as H100-80GB-SXM (same die, "
              "SMs and peak), A100-40 as A100-40GB-SXM, V100-16 as V100-16GB-SXM. `in a "
              "step` is the model as a training step prices it (`kernels/kernel_costs.yaml` "
              "`gemm_in_step`); `alone` is the same kernel timed alone, as the vidur tables "
              "above are.\n\n")
    out.write("GEMMs of at least 0.1 TFLOP are the ones `validation/fit_kernel_costs.py "
              "--in-step` and `tests/test_kernel_tables.cpp` read: below that the table's host "
              "timing holds the framework's per-op cost (the smallest GEMMs take 30-60 us).\n\n")
    out.write("| GPU | GEMM | GEMMs | ops | achieved TFLOP/s (median) | mean \\|error\\| in a step | "
              "signed | mean \\|error\\| alone | signed |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|\n")
    groups = {}
    for r in records:
        groups.setdefault((r["gpu"], r["direction"], "all"), []).append(r)
        if r["flops"] >= 1e11:
            groups.setdefault((r["gpu"], r["direction"], ">= 0.1 TFLOP"), []).append(r)
    for (gpu, direction, which), rs in sorted(groups.items()):
        err = [(r["predicted"] - r["measured"]) / r["measured"] for r in rs]
        alone = [(r["isolated"] - r["measured"]) / r["measured"] for r in rs]
        rate = sorted(r["flops"] / r["measured"] / 1e12 for r in rs)[len(rs) // 2]
        out.write(f"| {gpu} | {direction} | {which} | {len(rs)} | {rate:.0f} | {mean([abs(e) for e in err]):.1%} | "
                  f"{mean(err):+.1%} | {mean([abs(e) for e in alone]):.1%} | {mean(alone):+.1%} |\n")
    out.write("\n### Backward against forward\n\nThe data-gradient GEMM against the forward "
              "GEMM of the same layer at tp 1 (the same FLOPs): the ratio of their times, "
              "measured and as the model prices them (the model runs dgrad and wgrad at the "
              "forward's efficiency at their own shapes). The weight gradient is not in the "
              "table.\n\n| GPU | pairs | measured dgrad / forward (median, range) | model |\n"
              "|---|---:|---:|---:|\n")
    for gpu, ratios in sorted(dgrad_over_forward(records).items()):
        m = sorted(x for x, _ in ratios)
        p = sorted(y for _, y in ratios)
        out.write(f"| {gpu} | {len(ratios)} | {m[len(m) // 2]:.2f} ({m[0]:.2f}-{m[-1]:.2f}) | "
                  f"{p[len(p) // 2]:.2f} |\n")
    out.write("\n### Every training GEMM\n\nMeasured / predicted in a step, microseconds.\n\n"
              "| GPU | model | micro-batch | tp | op | GEMM | measured | predicted | error |\n"
              "|---|---|---:|---:|---|---|---:|---:|---:|\n")
    for r in records:
        e = (r["predicted"] - r["measured"]) / r["measured"]
        out.write(f"| {r['gpu']} | {r['model']} | {r['micro_batch']} | {r['tp']} | {r['op']} | "
                  f"{r['direction']} | {fmt_us(r['measured'])} | {fmt_us(r['predicted'])} | "
                  f"{e:+.1%} |\n")


def load_hgsim(build):
    package = os.path.join(build, "python")
    if not os.path.isdir(os.path.join(package, "hgsim")):
        raise cli.ScriptError(f"--build {cli.quoted(build)}: no python/hgsim there "
                              "(build the hgsim_python_package target first)")
    sys.path.insert(0, package)
    try:
        import hgsim  # noqa: E402
    except ImportError as e:
        raise cli.ScriptError(f"--build {cli.quoted(build)}: cannot import hgsim ({e})") \
            from None
    return hgsim


def read_table(path):
    """(gpu, model, rows) of one vidur table; ScriptError naming the file and line."""
    name = os.path.basename(path)
    parts = name[len("vidur_"):-len("_mlp.csv")].split("_", 1)
    if len(parts) != 2 or parts[0] not in GPUS:
        raise cli.ScriptError(f"{cli.quoted(path)}: not vidur_<a100|h100>_<model>_mlp.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise cli.ScriptError(f"{cli.quoted(path)}: no rows")
    return parts[0], parts[1], rows


def shape_of(row):
    return dict(hidden=int(row["n_embd"]), heads=int(row["n_head"]),
                kv_heads=int(row["n_kv_head"]), ffn_hidden=int(row["n_expanded_embd"]),
                activation="swiglu" if row["use_gated_mlp"] == "True" else "gelu",
                # vidur's non-gated model (phi-2) is a LayerNorm model; the gated ones RMSNorm.
                norm="rmsnorm" if row["use_gated_mlp"] == "True" else "layernorm")


def compare(hgsim, gpu, path, rows):
    """One record per (row, op): measured and predicted seconds."""
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
            kernels = hgsim.layer_kernels(GPUS[gpu], tokens=tokens, tp=tp, precision="fp16",
                                          timing="isolated", **shape_of(row))
        except (KeyError, ValueError) as e:
            raise cli.ScriptError(f"{cli.quoted(path)}:{line}: {e}") from None
        by_role = {}
        for k in kernels:
            by_role.setdefault(k["role"], k)
        for op, role, cls in OPS:
            column = f"{op}_median_ms"
            if column not in row or row[column] == "":
                continue
            measured = float(row[column]) * 1e-3
            out.append(dict(tokens=tokens, tp=tp, op=op, cls=cls, measured=measured,
                            predicted=by_role[role]["seconds"]))
    return out


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def summary_rows(records, key):
    groups = {}
    for r in records:
        groups.setdefault(key(r), []).append((r["predicted"] - r["measured"]) / r["measured"])
    return {k: (len(v), mean([abs(e) for e in v]), mean(v)) for k, v in groups.items()}


def collectives_section(build):
    """validation/kernel_collectives.py's Markdown section, or None when it is absent."""
    path = os.path.join(HERE, "kernel_collectives.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("kernel_collectives", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    section = module.section
    wanted = inspect.signature(section).parameters
    kwargs = {k: v for k, v in {"root": ROOT, "python_dir": os.path.join(build, "python")}.items()
              if k in wanted}
    result = section(**kwargs)
    # kernel_collectives.section returns (Markdown, rows, summary).
    return result[0] if isinstance(result, tuple) else result


def fmt_us(seconds):
    return f"{seconds * 1e6:.1f}"


def write_report(out, tables, records):
    out.write("# hgsim's compute model against kernel-level measurements\n\n")
    out.write("Produced by `/usr/bin/python3 validation/kernels.py` from the committed tables "
              "`kernels/measured/vidur_<gpu>_<model>_mlp.csv` (microsoft/vidur, MIT: forward "
              "time of each op of one Llama-style layer on one GPU of a tensor-parallel group "
              "of `tp`, fp16, median of CUDA-event timings; `kernels/measured/README.md`). "
              "Each prediction is the compute model's own (`hgsim.layer_kernels`, the "
              "kernels of `kernels/layer_ops.hpp` priced by `KernelModel::op_time`, GPU time "
              "without host dispatch), on A100-80GB-SXM and H100-80GB-SXM. Error = "
              "(predicted - measured) / measured; negative is too fast.\n\n")
    out.write("## Mean error per op class and GPU\n\n")
    out.write("| GPU | class | ops | mean \\|error\\| | mean signed error | "
              "tokens <= 64: \\|error\\| | tokens >= 512: \\|error\\| |\n")
    out.write("|---|---|---:|---:|---:|---:|---:|\n")
    overall = summary_rows(records, lambda r: (r["gpu"], r["cls"]))
    small = summary_rows([r for r in records if r["tokens"] <= 64],
                         lambda r: (r["gpu"], r["cls"]))
    large = summary_rows([r for r in records if r["tokens"] >= 512],
                         lambda r: (r["gpu"], r["cls"]))
    for gpu in GPUS:
        for cls in CLASSES:
            if (gpu, cls) not in overall:
                continue
            n, mae, signed = overall[(gpu, cls)]
            out.write(f"| {gpu} | {cls} | {n} | {mae:.1%} | {signed:+.1%} | "
                      f"{small[(gpu, cls)][1]:.1%} | {large[(gpu, cls)][1]:.1%} |\n")
    out.write("\n## Mean error per op and GPU\n\n")
    out.write("| GPU | op | ops | mean \\|error\\| | mean signed error |\n|---|---|---:|---:|---:|\n")
    per_op = summary_rows(records, lambda r: (r["gpu"], r["op"]))
    for gpu in GPUS:
        for op, _, _ in OPS:
            if (gpu, op) in per_op:
                n, mae, signed = per_op[(gpu, op)]
                out.write(f"| {gpu} | {op} | {n} | {mae:.1%} | {signed:+.1%} |\n")
    out.write("\n## Every op\n\nMeasured / predicted time in microseconds, per table "
              "(model shape: hidden, heads/kv heads, FFN).\n")
    for gpu, model, path in tables:
        mine = [r for r in records if r["gpu"] == gpu and r["model"] == model]
        ops = [op for op, _, _ in OPS if any(r["op"] == op for r in mine)]
        out.write(f"\n### {gpu} {model} (`{os.path.relpath(path, ROOT)}`)\n\n")
        out.write("| tp | tokens | " + " | ".join(ops) + " |\n")
        out.write("|---:|---:|" + "---:|" * len(ops) + "\n")
        cells = {}
        for r in mine:
            cells.setdefault((r["tp"], r["tokens"]), {})[r["op"]] = r
        for (tp, tokens) in sorted(cells):
            row = cells[(tp, tokens)]
            out.write(f"| {tp} | {tokens} | " + " | ".join(
                f"{fmt_us(row[op]['measured'])} / {fmt_us(row[op]['predicted'])}" if op in row
                else "—" for op in ops) + " |\n")


def main():
    ap = cli.Parser(description="hgsim's compute model against kernel-level measurements.")
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"),
                    help="the build folder holding python/hgsim")
    ap.add_argument("--measured", default=os.path.join(ROOT, "kernels/measured"),
                    help="the folder of vidur_<gpu>_<model>_mlp.csv tables")
    ap.add_argument("--out", default=os.path.join(HERE, "kernels.md"))
    args = ap.parse_args()
    cli.output_file(args.out, "--out")
    paths = sorted(glob.glob(os.path.join(args.measured, "vidur_*_mlp.csv")))
    if not paths:
        raise cli.ScriptError(f"--measured {cli.quoted(args.measured)}: no "
                              "vidur_<gpu>_<model>_mlp.csv there")
    hgsim = load_hgsim(args.build)
    tables, records = [], []
    for path in paths:
        gpu, model, rows = read_table(path)
        tables.append((gpu, model, path))
        for r in compare(hgsim, gpu, path, rows):
            r.update(gpu=gpu, model=model)
            records.append(r)
    training_path = os.path.join(args.measured, TRAINING_TABLE)
    training = training_records(hgsim, training_path) if os.path.exists(training_path) else []
    collectives = collectives_section(args.build)
    with _files.atomic_open(args.out) as out:
        write_report(out, tables, records)
        if training:
            write_training(out, training, training_path)
        if collectives:
            out.write("\n" + collectives.rstrip("\n") + "\n")
    for (gpu, cls), (n, mae, signed) in sorted(
            summary_rows(records, lambda r: (r["gpu"], r["cls"])).items()):
        print(f"{gpu} {cls}: {n} ops, mean |error| {mae:.1%}, signed {signed:+.1%}",
              file=sys.stderr)
    for (gpu, direction), (n, mae, signed) in sorted(
            summary_rows(training, lambda r: (r["gpu"], r["direction"])).items()):
        print(f"training {gpu} {direction}: {n} GEMMs, mean |error| {mae:.1%}, "
              f"signed {signed:+.1%}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
