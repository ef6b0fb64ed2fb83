// CUDA kernels of the deterministic codecs, writing exactly the CPU's body bytes.
//
// Each codec is an elementwise kernel over codec_math.hpp's functions (the same source as
// the CPU loops; on the device every add and multiply is an explicit __fadd_rn/__fmul_rn,
// so nothing is contracted into an FMA). Block-scaled codecs first reduce each block's
// largest finite magnitude with atomicMax on its bits (order-independent, hence
// deterministic), then derive the scale with the same block_scale(), then encode.
//
// Compiled as C++17 by nvcc, only when nvcc is found. Not yet here: top-k, random-k and
// PowerSGD kernels (they run on the CPU).
#include <cuda_runtime.h>

#include <vector>

#include "compress/codec_cuda_body.hpp"
#include "compress/codec_math.hpp"

namespace hgsim::compress::cuda {
namespace {

namespace m = hgsim::compress::math;

enum Kind { kNone, kFp16, kBf16, kE4m3, kE5m2, kInt8, kInt4 };
enum Dtype { kF32, kF16, kBF16 };

constexpr int kThreads = 256;

__device__ float load(const void* in, int dtype, std::uint64_t i) {
  if (dtype == kF32) return static_cast<const float*>(in)[i];
  const std::uint16_t h = static_cast<const std::uint16_t*>(in)[i];
  return dtype == kF16 ? m::f16_to_f32(h) : m::bf16_to_f32(h);
}

unsigned grid_for(std::uint64_t n) {
  const std::uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535ull * 32 ? (blocks ? blocks : 1) : 65535ull * 32);
}

__global__ void to_half(const void* in, int dtype, std::uint64_t n, bool bf16, std::uint16_t* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const float x = load(in, dtype, i);
    out[i] = bf16 ? m::f32_to_bf16(x) : m::f32_to_f16(x);
  }
}

// Each thread scans 16 consecutive elements and flushes its maximum at block boundaries.
__global__ void block_amax(const void* in, int dtype, std::uint64_t n, std::uint64_t block,
                           unsigned* amax_bits) {
  const std::uint64_t per_thread = 16;
  for (std::uint64_t t = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; t * per_thread < n;
       t += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t begin = t * per_thread;
    const std::uint64_t end = begin + per_thread < n ? begin + per_thread : n;
    unsigned best = 0;
    std::uint64_t current = begin / block;
    for (std::uint64_t i = begin; i < end; ++i) {
      if (i / block != current) {
        atomicMax(amax_bits + current, best);
        best = 0;
        current = i / block;
      }
      const unsigned a = m::finite_magnitude_bits(load(in, dtype, i));
      best = a > best ? a : best;
    }
    atomicMax(amax_bits + current, best);
  }
}

__global__ void make_scales(const unsigned* amax_bits, std::uint64_t blocks, float qmax,
                            float unusable, float* scales, float* inv) {
  for (std::uint64_t b = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; b < blocks;
       b += std::uint64_t(gridDim.x) * blockDim.x) {
    const m::Scale s = m::block_scale(m::float_of(amax_bits[b]), qmax, unusable);
    scales[b] = s.scale;
    inv[b] = s.inv;
  }
}

__global__ void to_fp8(const void* in, int dtype, std::uint64_t n, std::uint64_t block,
                       const float* inv, bool e4m3, std::uint8_t* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const float v = m::mul_rn(load(in, dtype, i), inv[i / block]);
    out[i] = e4m3 ? m::f32_to_e4m3(v) : m::f32_to_e5m2(v);
  }
}

__device__ int quantize_at(const void* in, int dtype, std::uint64_t i, std::uint64_t block,
                           const unsigned* amax_bits, const float* inv, float qmax, bool stochastic,
                           std::uint64_t seed) {
  const std::uint64_t b = i / block;
  const float noise = stochastic ? m::uniform01(seed, i) : -1.0f;
  return m::quantize(load(in, dtype, i), m::float_of(amax_bits[b]), inv[b], qmax, noise);
}

__global__ void to_int8(const void* in, int dtype, std::uint64_t n, std::uint64_t block,
                        const unsigned* amax_bits, const float* inv, bool stochastic,
                        std::uint64_t seed, std::int8_t* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::int8_t>(
        quantize_at(in, dtype, i, block, amax_bits, inv, 127.0f, stochastic, seed));
}

__global__ void to_int4(const void* in, int dtype, std::uint64_t n, std::uint64_t block,
                        const unsigned* amax_bits, const float* inv, bool stochastic,
                        std::uint64_t seed, std::uint8_t* out) {
  const std::uint64_t pairs = (n + 1) / 2;
  for (std::uint64_t p = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t i = 2 * p;
    const int lo = quantize_at(in, dtype, i, block, amax_bits, inv, 7.0f, stochastic, seed);
    const int hi =
        i + 1 < n ? quantize_at(in, dtype, i + 1, block, amax_bits, inv, 7.0f, stochastic, seed)
                  : 0;
    out[p] = static_cast<std::uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
  }
}

__global__ void from_body(const void* body, int kind, std::uint64_t n, std::uint64_t block,
                          std::uint64_t blocks, float* out) {
  const float* scales = static_cast<const float*>(body);
  const std::uint8_t* codes = static_cast<const std::uint8_t*>(body) + 4 * blocks;
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint16_t* h = static_cast<const std::uint16_t*>(body);
    switch (kind) {
      case kFp16:
        out[i] = m::f16_to_f32(h[i]);
        break;
      case kBf16:
        out[i] = m::bf16_to_f32(h[i]);
        break;
      case kE4m3:
        out[i] = m::mul_rn(m::e4m3_to_f32(codes[i]), scales[i / block]);
        break;
      case kE5m2:
        out[i] = m::mul_rn(m::e5m2_to_f32(codes[i]), scales[i / block]);
        break;
      case kInt8:
        out[i] = m::dequantize(static_cast<std::int8_t>(codes[i]), scales[i / block], 127.0f);
        break;
      case kInt4: {
        const int nibble = (i % 2) ? codes[i / 2] >> 4 : codes[i / 2] & 0xF;
        out[i] = m::dequantize(nibble >= 8 ? nibble - 16 : nibble, scales[i / block], 7.0f);
        break;
      }
      default:
        break;
    }
  }
}

bool ok(cudaError_t status, std::string& error) {
  if (status == cudaSuccess) return true;
  error = std::string("CUDA: ") + cudaGetErrorString(status);
  return false;
}

std::uint64_t element_bytes(int dtype) {
  return dtype == kF32 ? 4 : 2;
}

}  // namespace

bool available(std::string& why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    why = std::string("no CUDA device: ") + cudaGetErrorString(status);
    return false;
  }
  if (count == 0) {
    why = "no CUDA device";
    return false;
  }
  return true;
}

bool supports(int kind) {
  return kind >= kNone && kind <= kInt4;
}

bool encode_body_device(const BodyParams& p, const void* in, void* body, std::string& error) {
  const std::uint64_t n = p.count;
  if (n == 0 && p.kind != kE4m3 && p.kind != kE5m2) return true;
  const unsigned grid = grid_for(n);
  switch (p.kind) {
    case kNone:
      return ok(cudaMemcpy(body, in, n * element_bytes(p.dtype), cudaMemcpyDeviceToDevice), error);
    case kFp16:
    case kBf16:
      if ((p.kind == kFp16 && p.dtype == kF16) || (p.kind == kBf16 && p.dtype == kBF16))
        return ok(cudaMemcpy(body, in, 2 * n, cudaMemcpyDeviceToDevice), error);
      to_half<<<grid, kThreads>>>(in, p.dtype, n, p.kind == kBf16,
                                  static_cast<std::uint16_t*>(body));
      return ok(cudaGetLastError(), error);
    default:
      break;
  }
  // Block-scaled codecs: scales first in the body, then the codes.
  const std::uint64_t block = p.block ? p.block : 1;
  const std::uint64_t blocks = n ? (n + block - 1) / block : 1;
  unsigned* amax = nullptr;
  float* inv = nullptr;
  if (!ok(cudaMalloc(&amax, blocks * sizeof(unsigned)), error)) return false;
  if (!ok(cudaMalloc(&inv, blocks * sizeof(float)), error)) {
    cudaFree(amax);
    return false;
  }
  bool good = ok(cudaMemset(amax, 0, blocks * sizeof(unsigned)), error);
  float* scales = static_cast<float*>(body);
  std::uint8_t* codes = static_cast<std::uint8_t*>(body) + 4 * blocks;
  const bool fp8 = p.kind == kE4m3 || p.kind == kE5m2;
  const float qmax = p.kind == kE4m3   ? m::kE4m3Max
                     : p.kind == kE5m2 ? m::kE5m2Max
                     : p.kind == kInt8 ? 127.0f
                                       : 7.0f;
  if (good && n) block_amax<<<grid_for((n + 15) / 16), kThreads>>>(in, p.dtype, n, block, amax);
  if (good)
    make_scales<<<grid_for(blocks), kThreads>>>(amax, blocks, qmax, fp8 ? 1.0f : 0.0f, scales, inv);
  if (good && n) {
    if (fp8)
      to_fp8<<<grid, kThreads>>>(in, p.dtype, n, block, inv, p.kind == kE4m3, codes);
    else if (p.kind == kInt8)
      to_int8<<<grid, kThreads>>>(in, p.dtype, n, block, amax, inv, p.stochastic, p.seed,
                                  reinterpret_cast<std::int8_t*>(codes));
    else
      to_int4<<<grid_for((n + 1) / 2), kThreads>>>(in, p.dtype, n, block, amax, inv, p.stochastic,
                                                   p.seed, codes);
  }
  good = good && ok(cudaGetLastError(), error) && ok(cudaDeviceSynchronize(), error);
  cudaFree(amax);
  cudaFree(inv);
  return good;
}

bool decode_body_device(const BodyParams& p, const void* body, float* out, std::string& error) {
  const std::uint64_t n = p.count;
  if (n == 0) return true;
  if (p.kind == kNone) {
    if (p.dtype != kF32) {
      error = "CUDA decode of 'none' writes fp32 from fp32 only";
      return false;
    }
    return ok(cudaMemcpy(out, body, 4 * n, cudaMemcpyDeviceToDevice), error);
  }
  const std::uint64_t block = p.block ? p.block : n;
  const std::uint64_t blocks = (p.kind == kFp16 || p.kind == kBf16) ? 0 : (n + block - 1) / block;
  from_body<<<grid_for(n), kThreads>>>(body, p.kind, n, block, blocks, out);
  return ok(cudaGetLastError(), error) && ok(cudaDeviceSynchronize(), error);
}

bool encode_body_host(const BodyParams& p, const void* input, std::size_t input_bytes, void* body,
                      std::size_t body_bytes, std::string& error) {
  void* d_in = nullptr;
  void* d_body = nullptr;
  bool good = ok(cudaMalloc(&d_in, input_bytes ? input_bytes : 1), error) &&
              ok(cudaMalloc(&d_body, body_bytes ? body_bytes : 1), error) &&
              ok(cudaMemcpy(d_in, input, input_bytes, cudaMemcpyHostToDevice), error) &&
              encode_body_device(p, d_in, d_body, error) &&
              ok(cudaMemcpy(body, d_body, body_bytes, cudaMemcpyDeviceToHost), error);
  cudaFree(d_in);
  cudaFree(d_body);
  return good;
}

bool decode_body_host(const BodyParams& p, const void* body, std::size_t body_bytes, float* output,
                      std::string& error) {
  void* d_body = nullptr;
  float* d_out = nullptr;
  bool good = ok(cudaMalloc(&d_body, body_bytes ? body_bytes : 1), error) &&
              ok(cudaMalloc(&d_out, p.count ? 4 * p.count : 1), error) &&
              ok(cudaMemcpy(d_body, body, body_bytes, cudaMemcpyHostToDevice), error) &&
              decode_body_device(p, d_body, d_out, error) &&
              ok(cudaMemcpy(output, d_out, 4 * p.count, cudaMemcpyDeviceToHost), error);
  cudaFree(d_body);
  cudaFree(d_out);
  return good;
}

}  // namespace hgsim::compress::cuda
