// The ops of kernels/layer_ops.hpp on a CUDA GPU: cuBLASLt GEMMs (fp32, tf32, fp16, bf16,
// and fp8 e4m3 on GPUs with fp8 tensor cores) and simple kernels for the rest, storage in
// the dtype, math in fp32. Attention is batched cuBLASLt GEMMs + a causal softmax kernel
// (scores materialised), grouped-query heads stacked per kv head so one strided batch does
// every head. Compiled from ops_cuda.cu into the CUDA module when nvcc is found (C++17,
// plain types only); the main library's definitions forward to it
// (kernels/cuda_module_calls.cpp), and fail with the reason when it cannot be loaded (no
// CUDA in this build, the module missing: core/cuda_module.hpp).
//
// Shapes and op names as in layer_ops.hpp. Non-GEMM ops in fp8 run in bf16 (fp8 training
// keeps 16-bit activations); tf32 non-GEMM ops run in fp32.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace hgsim::kernels::gpu {

struct CudaDeviceInfo {
  std::string name;
  int compute_capability_major = 0, compute_capability_minor = 0;
  int driver_version = 0, runtime_version = 0;  // e.g. 13000
  long cublaslt_version = 0;
  double sm_clock_mhz = 0, memory_clock_mhz = 0;  // 0 where the runtime does not say
};
bool cuda_device_info(CudaDeviceInfo* out, std::string* error);

struct CudaTiming {
  double median_s = 0, p10_s = 0, p90_s = 0;
  int repeats = 0;
};

// Times one op on random inputs with CUDA events: warm-up, then samples of back-to-back
// calls (each sample at least 0.2 ms) until about `seconds_per_entry` is spent (5 to 25).
bool cuda_time_op(const std::string& op, const std::vector<double>& shape, const std::string& dtype,
                  double seconds_per_entry, CudaTiming* out, std::string* error);

// Runs one op once on the given inputs (host fp32, converted to the dtype) and returns its
// outputs (converted back), for the correctness tests against the CPU references. Inputs
// and outputs in the order of the CPU ops' arguments (kernels/ops_cpu.hpp), e.g. gemm: A, B
// -> C; attention: q, k, v -> p, o; layernorm: x, gamma, beta -> y, mean, rstd.
bool cuda_run_op(const std::string& op, const std::vector<int>& shape, const std::string& dtype,
                 const std::vector<std::vector<float>>& inputs,
                 std::vector<std::vector<float>>* outputs, std::string* error);

// The measured matrix peak per dtype (the best of large square GEMMs) and the copy
// bandwidth (device-to-device cudaMemcpy of 1 GiB, bytes read + written).
bool cuda_measure_peaks(std::map<std::string, double>* peak_flops_per_s,
                        double* copy_bandwidth_bytes_per_s, std::string* error);

// What the CUDA module exports for this interface (core/cuda_module.hpp).
struct OpsCudaTable {
  static constexpr int kVersion = 1;
  static constexpr const char* kSymbol = "hgsim_ops_cuda_table";
  int version = kVersion;
  std::size_t size = sizeof(OpsCudaTable);
  decltype(&cuda_device_info) device_info = nullptr;
  decltype(&cuda_time_op) time_op = nullptr;
  decltype(&cuda_run_op) run_op = nullptr;
  decltype(&cuda_measure_peaks) measure_peaks = nullptr;
};

}  // namespace hgsim::kernels::gpu
