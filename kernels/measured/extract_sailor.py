#!/usr/bin/python3
"""Extract the committed subset of sailor's Aceso training per-op timings.

Usage: extract_sailor.py SAILOR_CHECKOUT OUT_FILE
Reads sailor/Planner/baselines/Aceso/profiler/<gpu>/profiled-data-fp16/
<model>_mbs<m>_tp<t>_algo0.csv from a checkout of eth-easl/sailor (MIT) and keeps the
four linear layers of one GPT layer (QKV, attention output, MLP up, MLP down): their
forward and backward time (microseconds) at every micro-batch and tensor-parallel degree.
algo0 is Megatron's own split (column-parallel QKV and MLP up, row-parallel output and MLP
down); algo1 swaps it and is not kept.
"""
import csv
import os
import sys

GPUS = ["A100-40", "GH-96", "V100-16"]
# model: (hidden, heads); sequence length 2048 and FFN 4 x hidden in every run
# (Aceso profiler/model_configs.py and op_profiler.py get_model).
MODELS = {"GPT-Neo-2.7": (2560, 32), "OPT-30": (7168, 56), "OPT-350": (1024, 16)}
SEQ = 2048
OPS = ["enc-attention-qkv", "enc-attention-dense", "enc-MLP-GEMM-1", "enc-MLP-GEMM-2"]
FOLDER = "sailor/Planner/baselines/Aceso/profiler"


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "model", "hidden", "heads", "seq_len", "micro_batch", "tp", "op",
                    "forward_us", "backward_us"])
        for gpu in GPUS:
            for model, (hidden, heads) in MODELS.items():
                for mbs in (1, 2, 4, 8):
                    for tp in (1, 2, 4):
                        path = os.path.join(src, FOLDER, gpu, "profiled-data-fp16",
                                            f"{model}_mbs{mbs}_tp{tp}_algo0.csv")
                        if not os.path.exists(path):
                            continue
                        with open(path, newline="") as g:
                            rows = {r["op_name"]: r for r in csv.DictReader(g)}
                        for op in OPS:
                            r = rows[op]
                            w.writerow([gpu, model, hidden, heads, SEQ, mbs, tp, op,
                                        r["forward-compute"], r["backward-compute"]])


if __name__ == "__main__":
    main()
