#!/usr/bin/env bash
# A smoke run of every hgsim command on a tiny scenario: each must succeed, and bad input
# must exit 1. ctest runs it in every build (tests/CMakeLists.txt), and make test runs it
# again in the sanitizer build, where any ASan or UBSan report fails it.
# Usage: scripts/smoke.sh path/to/hgsim
set -euo pipefail
hgsim=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/s.yaml" <<'YAML'
name: smoke
model: {name: tiny, layers: 4, hidden: 256, heads: 4, vocab: 1000}
training: {global_batch: 8, seq_len: 128, precision: bf16}
clusters:
  - {name: east, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 2,
     nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}
  - {name: west, gpu: V100-32GB-SXM, nodes: 1, gpus_per_node: 2,
     nvlink: {bandwidth: 150GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 2us}}
wan:
  - {between: [east, west], bandwidth: 10Gbps, latency: 15ms}
strategy: auto
compression: {wan_activations: int8, wan_gradients: int8}
YAML
{ cat "$dir/s.yaml"; printf 'sweep:\n  wan[0].bandwidth: [1Gbps, 10Gbps]\n'; } > "$dir/sweep.yaml"
step() { echo "smoke: hgsim $*"; "$hgsim" "$@" > "$dir/out" 2> "$dir/err" || { cat "$dir/err"; exit 1; }; }
step --version
step models
step gpus --json
step codecs --size 4096
step check "$dir/s.yaml"
step check "$dir/s.yaml" --summary
step check "$dir/s.yaml" --json
step plan "$dir/s.yaml" --time-budget 2 --verify 1 --out "$dir/plan.json"
step run "$dir/s.yaml" --plan "$dir/plan.json" --trace "$dir/t.json" --export-graph "$dir/g.json" \
  --export-platform "$dir/p.xml" --fidelity full
step run "$dir/s.yaml" --plan "$dir/plan.json" --json --fidelity folded
step sweep "$dir/sweep.yaml" --list
step sweep "$dir/sweep.yaml" --json
# hgsim profile measures for a minute or more: only its refusal of a missing --out here.
status=0; "$hgsim" profile --device cpu 2> "$dir/err" || status=$?
[ "$status" = 1 ] || { echo "smoke: hgsim profile without --out exited $status"; exit 1; }
# Bad input exits 1, with file:line:column.
printf 'name: &a [*a]\n' > "$dir/bad.yaml"
if "$hgsim" check "$dir/bad.yaml" 2> "$dir/err"; then echo "smoke: bad input accepted"; exit 1; fi
status=0; "$hgsim" run "$dir/bad.yaml" 2> "$dir/err" || status=$?
[ "$status" = 1 ] || { echo "smoke: bad input exited $status, not 1"; cat "$dir/err"; exit 1; }
grep -q "bad.yaml:1:" "$dir/err" || { cat "$dir/err"; exit 1; }
echo "smoke: every command ran"
