#!/usr/bin/python3
"""Extract the committed subset of vidur's per-op forward timings.

Usage: extract_vidur.py VIDUR_CHECKOUT OUT_DIR
Reads data/profiling/compute/{a100,h100}/<model>/mlp.csv from a checkout of
microsoft/vidur (MIT) and keeps, for each op, the median time (ms) at token
counts that are powers of two (1..4096) and every tensor-parallel degree.
"""
import csv
import os
import sys

MODELS = ["Qwen/Qwen-72B", "codellama/CodeLlama-34b-Instruct-hf",
          "internlm/internlm-20b", "meta-llama/Llama-2-7b-hf",
          "meta-llama/Llama-2-70b-hf", "meta-llama/Meta-Llama-3-8B",
          "meta-llama/Meta-Llama-3-70B", "microsoft/phi-2"]
GPUS = ["a100", "h100"]
SHAPE = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
         "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"]
TOKENS = {1 << k for k in range(13)}


def main():
    src, out = sys.argv[1], sys.argv[2]
    for gpu in GPUS:
        for model in MODELS:
            path = os.path.join(src, "data/profiling/compute", gpu, model, "mlp.csv")
            if not os.path.exists(path):
                continue
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            ops = [k[len("time_stats."):-len(".median")] for k in rows[0]
                   if k.startswith("time_stats.") and k.endswith(".median")]
            seen = set()
            name = f"vidur_{gpu}_{model.split('/')[1]}_mlp.csv"
            with open(os.path.join(out, name), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(SHAPE + [f"{op}_median_ms" for op in ops])
                for r in rows:
                    key = (r["num_tokens"], r["num_tensor_parallel_workers"])
                    if int(r["num_tokens"]) not in TOKENS or key in seen:
                        continue
                    seen.add(key)
                    w.writerow([r[c] for c in SHAPE] +
                               [r[f"time_stats.{op}.median"] for op in ops])


if __name__ == "__main__":
    main()
