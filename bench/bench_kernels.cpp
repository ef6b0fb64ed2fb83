// The CPU ops against this core's roofline: GEMMs as a fraction of the measured matrix peak
// (mul+add on the build's vector registers, kernels::measure_cpu_matrix_peak) and memory-
// bound ops as a fraction of the measured copy bandwidth (memcpy of 64 MiB,
// kernels::measure_cpu_copy_bandwidth), each counted as bytes read + written once.
// Run: taskset -c 1 build/release/bench/hgsim_bench --benchmark_filter=Cpu
// (Eigen on one thread; the ops are timed by the same runners as `hgsim profile`; CPU time
// of the thread, as Google Benchmark measures by default, so that other jobs on a shared core
// do not count.)
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/ops_cpu.hpp"
#include "kernels/profiler.hpp"

namespace {

using hgsim::kernels::make_op;
using hgsim::kernels::OpCall;

double matrix_peak() {
  static const double peak = hgsim::kernels::measure_cpu_matrix_peak();
  return peak;
}
double copy_bandwidth() {
  static const double bandwidth = hgsim::kernels::measure_cpu_copy_bandwidth();
  return bandwidth;
}

void run(benchmark::State& state, const OpCall& call) {
  hgsim::kernels::cpu::use_one_thread();
  const auto op = hgsim::kernels::cpu_op_runner(call, 7);
  for (auto _ : state) op();
  const double calls = double(state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(call.flops * calls / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(call.bytes * calls / 1e9, benchmark::Counter::kIsRate);
  // Fractions of the roofline, from the same rates.
  state.counters["of_peak"] =
      benchmark::Counter(call.flops * calls / matrix_peak(), benchmark::Counter::kIsRate);
  state.counters["of_copy_bw"] =
      benchmark::Counter(call.bytes * calls / copy_bandwidth(), benchmark::Counter::kIsRate);
}

void BM_CpuGemm(benchmark::State& state) {
  const double n = double(state.range(0));
  run(state, make_op("gemm", {n, n, n}, 4));
}
BENCHMARK(BM_CpuGemm)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);

void BM_CpuGemmLayerShape(benchmark::State& state) {
  // The MLP up-projection of gpt2-124m at 4 x 1024 tokens, fp32.
  run(state, make_op(state.range(0) == 0   ? "gemm"
                     : state.range(0) == 1 ? "gemm_dgrad"
                                           : "gemm_wgrad",
                     {4096, 3072, 768}, 4));
}
BENCHMARK(BM_CpuGemmLayerShape)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

void BM_CpuCopy(benchmark::State& state) {
  // memcpy itself, for the reference line.
  const std::size_t bytes = std::size_t(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * double(bytes) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["of_copy_bw"] =
      benchmark::Counter(2.0 * double(bytes) * double(state.iterations()) / copy_bandwidth(),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CpuCopy)->Arg(64 << 20)->Unit(benchmark::kMillisecond);

void BM_CpuMemoryBound(benchmark::State& state, const char* op) {
  const double n = 16 << 20;  // 64 MiB per fp32 tensor: far beyond the caches
  if (std::string(op) == "add" || std::string(op) == "adam" || std::string(op) == "gelu")
    return run(state, make_op(op, {n}, 4));
  return run(state, make_op(op, {n / 4096, 4096}, 4));
}
BENCHMARK_CAPTURE(BM_CpuMemoryBound, add, "add")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuMemoryBound, adam, "adam")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuMemoryBound, layernorm, "layernorm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuMemoryBound, rmsnorm, "rmsnorm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CpuMemoryBound, gelu, "gelu")->Unit(benchmark::kMillisecond);

}  // namespace
