// Plain C++17 interface between codec.cpp (C++20) and the CUDA kernels (codec_cuda.cu,
// nvcc, C++17): the body of an encoding (everything after the header), computed on the
// GPU with the element arithmetic of codec_math.hpp, so that it is bit-identical to the
// CPU's for every codec but PowerSGD (cuBLAS sums in another order: equal to rounding).
// codec_cuda.cu is built into the CUDA module; the main library's definitions forward to
// it (compress/codec_cuda_calls.cpp) and fail with the reason when it cannot be loaded (no
// CUDA in this build, the module missing: core/cuda_module.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hgsim::compress::cuda {

struct BodyParams {
  int kind = 0;   // CodecKind
  int dtype = 0;  // DType of the input (encode) or of the encoded tensor (decode)
  std::uint64_t count = 0;
  std::uint64_t block = 0;  // elements per scale (per-tensor fp8: count)
  bool stochastic = false;
  std::uint64_t seed = 0;  // the derived key (stochastic rounding)
  // top-k and random-k
  std::uint64_t kept = 0;         // elements sent
  std::uint64_t index_width = 0;  // top-k: bytes per index
  // random-k: the kept indices, ascending, in HOST memory, drawn by codec.cpp's
  // random_indices() (Floyd's algorithm is sequential; the device only gathers/scatters).
  const std::uint64_t* indices = nullptr;
  // PowerSGD: the matrix (rows x cols, row-major) and the rank; q is HOST memory, cols x rank
  // row-major: the starting Q on entry, the new Q (the next warm start) on return.
  std::uint64_t rows = 0, cols = 0, rank = 0;
  float* q = nullptr;
  bool cold = true;  // no warm start: one extra power iteration (the identity if rank == cols)
};

// Whether the GPU path can run here; otherwise `why` says why (no CUDA in this build, no
// device).
bool available(std::string& why);
// The codecs with GPU kernels: all of them (none, fp16, bf16, fp8 in both scalings, int8,
// int4, top-k, random-k, PowerSGD).
bool supports(int kind);

// Device pointers. Return false with `error` set on a CUDA error.
bool encode_body_device(const BodyParams& p, const void* input, void* body, std::string& error);
bool decode_body_device(const BodyParams& p, const void* body, float* output, std::string& error);

// Host pointers: copy in, run, copy out (tests, hgsim codecs).
bool encode_body_host(const BodyParams& p, const void* input, std::size_t input_bytes, void* body,
                      std::size_t body_bytes, std::string& error);
bool decode_body_host(const BodyParams& p, const void* body, std::size_t body_bytes, float* output,
                      std::string& error);

// What the CUDA module exports for this interface (core/cuda_module.hpp).
struct CodecCudaTable {
  static constexpr int kVersion = 1;
  static constexpr const char* kSymbol = "hgsim_codec_cuda_table";
  int version = kVersion;
  std::size_t size = sizeof(CodecCudaTable);
  decltype(&available) check_available = nullptr;
  decltype(&supports) supports_kind = nullptr;
  decltype(&encode_body_device) encode_device = nullptr;
  decltype(&decode_body_device) decode_device = nullptr;
  decltype(&encode_body_host) encode_host = nullptr;
  decltype(&decode_body_host) decode_host = nullptr;
};

}  // namespace hgsim::compress::cuda
