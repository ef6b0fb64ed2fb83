#!/usr/bin/env bash
# The one prepared GPU measurement: build, check every CUDA op against its CPU
# reference, profile the zoo's shapes, write the profile JSON. Made for a short slot on a
# shared GPU (one H200): the sweep stops itself after --max-seconds (default 200 s), so the
# whole script fits in about 5 minutes on 16 cores.
#
#   kernels/measure_gpu.sh [OUT_DIR]      (default: $OUT if set, else kernels/profiles)
#
# Writes OUT_DIR/<gpu>.json (e.g. h200.json) and OUT_DIR/measure_gpu.log. Copy the JSON into
# kernels/profiles/ and commit it; the log's roofline summary goes to docs/compute.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-${OUT:-kernels/profiles}}
mkdir -p "$out_dir"
log="$out_dir/measure_gpu.log"
exec > >(tee "$log") 2>&1

echo "== $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu --format=csv || true

echo "== build"
cmake --preset release >/dev/null
cmake --build build/release -j "$(nproc)" --target hgsim hgsim_tests

echo "== correctness: every CUDA op against its CPU reference"
build/release/tests/hgsim_tests --gtest_filter='KernelCuda*:KernelOps*' --gtest_brief=1
if build/release/tests/hgsim_tests --gtest_filter='KernelCuda*' 2>&1 | grep -q SKIPPED; then
  echo "the CUDA tests were skipped: no usable GPU; nothing to profile" >&2
  exit 1
fi

echo "== profile"
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed 's/^NVIDIA //; s/[^A-Za-z0-9]\+/-/g' | tr 'A-Z' 'a-z')
profile="$out_dir/${name:-gpu}.json"
time build/release/apps/hgsim profile --device cuda --dtype bf16 \
  --gemm-dtypes fp32,tf32,fp16,fp8 --max-seconds "${MAX_SECONDS:-200}" --out "$profile"

echo "== roofline summary (largest bf16 GEMM vs matrix peak; memory-bound ops vs copy bandwidth)"
/usr/bin/python3 - "$profile" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
d = p["device"]
print("device", d["name"], "driver", d["driver"], d["toolkit"])
print("peaks TFLOP/s", {k: round(v / 1e12, 1) for k, v in d["peak_flops_per_s"].items()},
      "copy GB/s", round(d["copy_bandwidth_bytes_per_s"] / 1e9))
gemms = [e for e in p["entries"] if e["op"] == "gemm" and e["dtype"] == "bf16"]
gemms.sort(key=lambda e: e["flops"])
for e in gemms[-3:]:
    print("gemm bf16", e["shape"], "%.0f TFLOP/s = %.0f%% of the measured peak"
          % (e["tflops"], 100 * e.get("fraction_of_peak_flops", 0)))
for op in ("add", "layernorm", "rmsnorm", "gelu", "swiglu", "adam"):
    es = sorted((e for e in p["entries"] if e["op"] == op), key=lambda e: e["bytes"])
    if es:
        e = es[-1]
        print(op, e["shape"], "%.0f GB/s = %.0f%% of the copy bandwidth"
              % (e["gb_per_s"], 100 * e["fraction_of_copy_bandwidth"]))
print(len(p["entries"]), "entries;", d["conditions"].get("truncated", "complete"))
PY
echo "== done: $profile"
