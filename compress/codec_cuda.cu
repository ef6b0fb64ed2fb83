// CUDA kernels of every codec, writing exactly the CPU's body bytes (PowerSGD: to rounding).
//
// Each deterministic codec is an elementwise kernel over codec_math.hpp's functions (the
// same source as the CPU loops; on the device every add and multiply is an explicit
// __fadd_rn/__fmul_rn, so nothing is contracted into an FMA). Block-scaled codecs first
// reduce each block's largest finite magnitude with atomicMax on its bits
// (order-independent, hence deterministic), then derive the scale with the same
// block_scale(), then encode.
//
// The sparse and low-rank codecs follow codec.cpp step by step:
//  - random-k: Floyd's algorithm draws each index depending on the ones before, so the
//    indices come from the CPU's own random_indices() on the host (BodyParams::indices);
//    the device gathers (encode) and scatters (decode). Same bytes as the CPU.
//  - top-k: the CPU's four-pass radix select on the keys math::topk_key (magnitude bits,
//    NaN above +Inf): each pass is a histogram built with integer atomics (the same counts
//    in any order), the digit is chosen on the host by the CPU's math::topk_radix_bucket.
//    Then the elements above the threshold key and the first `remaining` elements equal to
//    it in index order (ties to the lower index, as on the CPU) are compacted in index order
//    by two exclusive prefix sums (CUB). Same set, same order, same bytes as the CPU.
//  - PowerSGD: the same algorithm (cold start: Q from the seed, drawn on the host by the
//    CPU's random_q(), or the identity when the rank covers every column, then one extra
//    power iteration; warm start: the caller's Q), with cuBLAS products and classical
//    Gram-Schmidt applied twice instead of Householder QR (dependent columns replaced by
//    orthogonal unit vectors, as QR gives). Not bit-identical: the sums run in another
//    order and a column of P may have the opposite sign (Q follows it), so P Q^T agrees
//    with the CPU's to rounding.
//
// Compiled as C++17 by nvcc into the CUDA module (core/cuda_module.hpp), only when nvcc is
// found. Every CUDA and cuBLAS call is checked; a failure becomes the `error` string
// (CodecError in codec.cpp).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cub/device/device_scan.cuh>
#include <vector>

#include "compress/codec_cuda_body.hpp"
#include "compress/codec_math.hpp"

namespace hgsim::compress::cuda {
namespace {

namespace m = hgsim::compress::math;

enum Kind { kNone, kFp16, kBf16, kE4m3, kE5m2, kInt8, kInt4, kTopk, kRandomk, kPowersgd };
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

// cudaMalloc'd memory, freed when it goes out of scope (cudaFree waits for the device).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (ptr_) cudaFree(ptr_);
  }
  bool allocate(std::uint64_t bytes, std::string& error) {
    return ok(cudaMalloc(&ptr_, bytes ? bytes : 1), error);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// A flag kernels raise when they meet an index out of range: allocated cleared, read once.
bool make_flag(DeviceMemory& flag, std::string& error) {
  return flag.allocate(sizeof(int), error) && ok(cudaMemset(flag.as<int>(), 0, sizeof(int)), error);
}
bool flag_raised(const DeviceMemory& flag, bool& raised, std::string& error) {
  int value = 0;
  if (!ok(cudaMemcpy(&value, flag.as<int>(), sizeof(int), cudaMemcpyDeviceToHost), error))
    return false;
  raised = value != 0;
  return true;
}

// ---- top-k and random-k --------------------------------------------------------------------

// Element i of the input, its bytes as they are (NaN payloads included), to `to`.
__device__ void copy_element(const void* in, std::uint64_t i, std::uint64_t es, std::uint8_t* to) {
  const std::uint8_t* from = static_cast<const std::uint8_t*>(in) + i * es;
  for (std::uint64_t b = 0; b < es; ++b) to[b] = from[b];
}

// Value j of a sparse body as fp32 (the CPU's load_one): values follow top-k's indices of
// 1 to 8 bytes, so they are read byte by byte, little-endian.
__device__ float load_unaligned(const std::uint8_t* values, int dtype, std::uint64_t j) {
  if (dtype == kF32) {
    const std::uint8_t* v = values + 4 * j;
    return m::float_of(std::uint32_t(v[0]) | (std::uint32_t(v[1]) << 8) |
                       (std::uint32_t(v[2]) << 16) | (std::uint32_t(v[3]) << 24));
  }
  const std::uint8_t* v = values + 2 * j;
  const auto h = static_cast<std::uint16_t>(v[0] | (v[1] << 8));
  return dtype == kF16 ? m::f16_to_f32(h) : m::bf16_to_f32(h);
}

// Top-k index j of a body: `width` bytes, little-endian (encode_sparse's memcpy of a u64).
__device__ std::uint64_t read_index(const std::uint8_t* body, std::uint64_t width,
                                    std::uint64_t j) {
  std::uint64_t i = 0;
  for (std::uint64_t b = 0; b < width; ++b) i |= std::uint64_t(body[j * width + b]) << (8 * b);
  return i;
}

// random-k encode: value j = input[idx[j]].
__global__ void gather(const void* in, std::uint64_t n, std::uint64_t es, const std::uint64_t* idx,
                       std::uint64_t kept, std::uint8_t* values, int* bad) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; j < kept;
       j += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t i = idx[j];
    if (i >= n) {
      *bad = 1;
      continue;
    }
    copy_element(in, i, es, values + j * es);
  }
}

// random-k decode: out[idx[j]] = value j (out was cleared).
__global__ void scatter_randomk(const std::uint8_t* values, int dtype, std::uint64_t n,
                                const std::uint64_t* idx, std::uint64_t kept, float* out,
                                int* bad) {
  for (std::uint64_t j = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; j < kept;
       j += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t i = idx[j];
    if (i >= n) {
      *bad = 1;
      continue;
    }
    out[i] = load_unaligned(values, dtype, j);
  }
}

// top-k decode: the CPU's checks (every index below n, strictly increasing), then
// out[index j] = value j. A bad index raises the flag and writes nothing.
__global__ void scatter_topk(const std::uint8_t* body, int dtype, std::uint64_t n,
                             std::uint64_t width, std::uint64_t kept, float* out, int* bad) {
  const std::uint8_t* values = body + kept * width;
  for (std::uint64_t j = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; j < kept;
       j += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t i = read_index(body, width, j);
    if (i >= n || (j > 0 && i <= read_index(body, width, j - 1))) {
      *bad = 1;
      continue;
    }
    out[i] = load_unaligned(values, dtype, j);
  }
}

// One radix-select pass: the histogram of the key digit at `shift` among the keys that
// match `prefix` under `mask` (topk_indices() in codec.cpp). Block-local counts first, then
// one atomicAdd per digit and block; integer sums, so the counts do not depend on order.
__global__ void topk_histogram(const void* in, int dtype, std::uint64_t n, std::uint32_t prefix,
                               std::uint32_t mask, int shift, unsigned long long* hist) {
  __shared__ unsigned long long local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint32_t key = m::topk_key(load(in, dtype, i));
    if ((key & mask) == prefix) atomicAdd(&local[(key >> shift) & 0xFFu], 1ull);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}

// 1 where the key equals the threshold (the k-th largest key), else 0.
__global__ void topk_flag_ties(const void* in, int dtype, std::uint64_t n, std::uint32_t threshold,
                               std::uint64_t* tie) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    tie[i] = m::topk_key(load(in, dtype, i)) == threshold ? 1 : 0;
}

// 1 where the element is sent: its key is above the threshold, or equal to it and it is
// one of the first `remaining` such elements in index order (tie_rank: how many ties come
// before it). The CPU's collecting loop, without its sequential counter.
__global__ void topk_flag_selected(const void* in, int dtype, std::uint64_t n,
                                   std::uint32_t threshold, std::uint64_t remaining,
                                   const std::uint64_t* tie_rank, std::uint64_t* selected) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    const std::uint32_t key = m::topk_key(load(in, dtype, i));
    selected[i] = key > threshold || (key == threshold && tie_rank[i] < remaining) ? 1 : 0;
  }
}

// The body (encode_sparse's layout): the sent element of position j (its index's position
// among the sent ones) writes its index in `width` bytes at j * width and its value bytes
// at kept * width + j * es.
__global__ void topk_write(const void* in, std::uint64_t n, std::uint64_t es, std::uint64_t width,
                           std::uint64_t kept, const std::uint64_t* selected,
                           const std::uint64_t* position, std::uint8_t* body, int* bad) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x) {
    if (!selected[i]) continue;
    const std::uint64_t j = position[i];
    if (j >= kept) {
      *bad = 1;
      continue;
    }
    for (std::uint64_t b = 0; b < width; ++b)
      body[j * width + b] = static_cast<std::uint8_t>(i >> (8 * b));
    copy_element(in, i, es, body + kept * width + j * es);
  }
}

// out[i] = in[0] + ... + in[i - 1] (CUB; integer sums, deterministic).
bool exclusive_sum(const std::uint64_t* in, std::uint64_t* out, std::uint64_t n,
                   std::string& error) {
  std::size_t temp_bytes = 0;
  if (!ok(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, in, out, n), error)) return false;
  DeviceMemory temp;
  return temp.allocate(temp_bytes, error) &&
         ok(cub::DeviceScan::ExclusiveSum(temp.as<void>(), temp_bytes, in, out, n), error) &&
         ok(cudaDeviceSynchronize(), error);
}

bool encode_randomk(const BodyParams& p, const void* in, void* body, std::string& error) {
  const std::uint64_t n = p.count, kept = p.kept;
  if (kept == 0) return true;
  if (kept > n || p.indices == nullptr) {
    error = "random-k: " + std::to_string(kept) + " indices out of " + std::to_string(n);
    return false;
  }
  DeviceMemory idx, bad;
  bool raised = false;
  if (!idx.allocate(8 * kept, error) || !make_flag(bad, error) ||
      !ok(cudaMemcpy(idx.as<std::uint64_t>(), p.indices, 8 * kept, cudaMemcpyHostToDevice), error))
    return false;
  gather<<<grid_for(kept), kThreads>>>(in, n, element_bytes(p.dtype), idx.as<std::uint64_t>(), kept,
                                       static_cast<std::uint8_t*>(body), bad.as<int>());
  if (!ok(cudaGetLastError(), error) || !ok(cudaDeviceSynchronize(), error) ||
      !flag_raised(bad, raised, error))
    return false;
  if (raised) error = "random-k: an index beyond the tensor's " + std::to_string(n) + " elements";
  return !raised;
}

bool decode_randomk(const BodyParams& p, const void* body, float* out, std::string& error) {
  const std::uint64_t n = p.count, kept = p.kept;
  if (kept > n || (kept > 0 && p.indices == nullptr)) {
    error = "random-k: " + std::to_string(kept) + " indices out of " + std::to_string(n);
    return false;
  }
  DeviceMemory idx, bad;
  bool raised = false;
  if (!ok(cudaMemset(out, 0, 4 * n), error) || !idx.allocate(8 * kept, error) ||
      !make_flag(bad, error))
    return false;
  if (kept == 0) return ok(cudaDeviceSynchronize(), error);
  if (!ok(cudaMemcpy(idx.as<std::uint64_t>(), p.indices, 8 * kept, cudaMemcpyHostToDevice), error))
    return false;
  scatter_randomk<<<grid_for(kept), kThreads>>>(static_cast<const std::uint8_t*>(body), p.dtype, n,
                                                idx.as<std::uint64_t>(), kept, out, bad.as<int>());
  if (!ok(cudaGetLastError(), error) || !ok(cudaDeviceSynchronize(), error) ||
      !flag_raised(bad, raised, error))
    return false;
  if (raised) error = "random-k: an index beyond the tensor's " + std::to_string(n) + " elements";
  return !raised;
}

// topk_indices() and encode_sparse() of codec.cpp, on the device.
bool encode_topk(const BodyParams& p, const void* in, void* body, std::string& error) {
  const std::uint64_t n = p.count, kept = p.kept, width = p.index_width;
  if (kept == 0) return true;
  if (kept > n || width < 1 || width > 8) {
    error = "top-k: " + std::to_string(kept) + " of " + std::to_string(n) + " elements with " +
            std::to_string(width) + "-byte indices";
    return false;
  }
  // The k-th largest key, 8 bits at a time from the top.
  DeviceMemory hist;
  if (!hist.allocate(256 * sizeof(unsigned long long), error)) return false;
  std::uint32_t prefix = 0, mask = 0;
  std::uint64_t remaining = kept;  // how many of the keys matching the prefix are still wanted
  for (int shift = 24; shift >= 0; shift -= 8) {
    unsigned long long counts[256];
    if (!ok(cudaMemset(hist.as<void>(), 0, sizeof counts), error)) return false;
    topk_histogram<<<grid_for(n), kThreads>>>(in, p.dtype, n, prefix, mask, shift,
                                              hist.as<unsigned long long>());
    if (!ok(cudaGetLastError(), error) ||
        !ok(cudaMemcpy(counts, hist.as<void>(), sizeof counts, cudaMemcpyDeviceToHost), error))
      return false;
    std::uint64_t h[256];
    for (int b = 0; b < 256; ++b) h[b] = counts[b];
    const int bucket = m::topk_radix_bucket(h, remaining);
    prefix |= static_cast<std::uint32_t>(bucket) << shift;
    mask |= 0xFFu << shift;
  }
  // Collect in index order: ties ranked by index, then the sent elements' positions.
  DeviceMemory tie, tie_rank, selected, position, bad;
  if (!tie.allocate(8 * n, error) || !tie_rank.allocate(8 * n, error) ||
      !selected.allocate(8 * n, error) || !position.allocate(8 * n, error) ||
      !make_flag(bad, error))
    return false;
  const unsigned grid = grid_for(n);
  topk_flag_ties<<<grid, kThreads>>>(in, p.dtype, n, prefix, tie.as<std::uint64_t>());
  if (!ok(cudaGetLastError(), error) ||
      !exclusive_sum(tie.as<std::uint64_t>(), tie_rank.as<std::uint64_t>(), n, error))
    return false;
  topk_flag_selected<<<grid, kThreads>>>(in, p.dtype, n, prefix, remaining,
                                         tie_rank.as<std::uint64_t>(),
                                         selected.as<std::uint64_t>());
  if (!ok(cudaGetLastError(), error) ||
      !exclusive_sum(selected.as<std::uint64_t>(), position.as<std::uint64_t>(), n, error))
    return false;
  // Exactly `kept` are sent (as on the CPU); anything else is a bug, not a bad input.
  std::uint64_t last_selected = 0, last_position = 0;
  if (!ok(cudaMemcpy(&last_selected, selected.as<std::uint64_t>() + (n - 1), 8,
                     cudaMemcpyDeviceToHost),
          error) ||
      !ok(cudaMemcpy(&last_position, position.as<std::uint64_t>() + (n - 1), 8,
                     cudaMemcpyDeviceToHost),
          error))
    return false;
  if (last_selected + last_position != kept) {
    error = "top-k: selected " + std::to_string(last_selected + last_position) + " elements, not " +
            std::to_string(kept);
    return false;
  }
  bool raised = false;
  topk_write<<<grid, kThreads>>>(in, n, element_bytes(p.dtype), width, kept,
                                 selected.as<std::uint64_t>(), position.as<std::uint64_t>(),
                                 static_cast<std::uint8_t*>(body), bad.as<int>());
  if (!ok(cudaGetLastError(), error) || !ok(cudaDeviceSynchronize(), error) ||
      !flag_raised(bad, raised, error))
    return false;
  if (raised) error = "top-k: a position beyond the " + std::to_string(kept) + " kept elements";
  return !raised;
}

bool decode_topk(const BodyParams& p, const void* body, float* out, std::string& error) {
  const std::uint64_t n = p.count, kept = p.kept, width = p.index_width;
  if (kept > n || width < 1 || width > 8) {
    error = "top-k: " + std::to_string(kept) + " of " + std::to_string(n) + " elements with " +
            std::to_string(width) + "-byte indices";
    return false;
  }
  DeviceMemory bad;
  bool raised = false;
  if (!ok(cudaMemset(out, 0, 4 * n), error) || !make_flag(bad, error)) return false;
  if (kept > 0)
    scatter_topk<<<grid_for(kept), kThreads>>>(static_cast<const std::uint8_t*>(body), p.dtype, n,
                                               width, kept, out, bad.as<int>());
  if (!ok(cudaGetLastError(), error) || !ok(cudaDeviceSynchronize(), error) ||
      !flag_raised(bad, raised, error))
    return false;
  if (raised)
    error = "encoded buffer: top-k indices are not strictly increasing or not below the tensor's " +
            std::to_string(n) + " elements";
  return !raised;
}

// ---- PowerSGD ------------------------------------------------------------------------------

bool ok(cublasStatus_t status, std::string& error) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  error = std::string("cuBLAS: ") + cublasGetStatusString(status);
  return false;
}

// A cuBLAS handle for one call, in pedantic fp32 (no TF32, whatever the environment says).
class Cublas {
 public:
  Cublas() = default;
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  ~Cublas() {
    if (handle_) cublasDestroy(handle_);
  }
  bool create(std::string& error) {
    return ok(cublasCreate(&handle_), error) &&
           ok(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), error);
  }
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Row-major matrices as cuBLAS (column-major) sees them: a row-major r x c matrix is the
// column-major c x r matrix of its transpose. With M rows x cols, P rows x rank and
// Q cols x rank, all row-major:
//   P = M Q    is  P^T = Q^T M^T   gemm(N, N, rank, rows, cols, Q, ld rank, M, ld cols)
//   Q = M^T P  is  Q^T = P^T M     gemm(N, T, rank, cols, rows, P, ld rank, M, ld cols)
//   M = P Q^T  is  M^T = Q P^T     gemm(T, N, cols, rows, rank, Q, ld rank, P, ld rank)
struct Dims {
  int rows, cols, rank;
};

bool m_times(cublasHandle_t h, Dims d, const float* m, const float* q, float* p,
             std::string& error) {
  const float one = 1, zero = 0;
  return ok(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, d.rank, d.rows, d.cols, &one, q, d.rank, m,
                        d.cols, &zero, p, d.rank),
            error);
}

bool m_transposed_times(cublasHandle_t h, Dims d, const float* m, const float* p, float* q,
                        std::string& error) {
  const float one = 1, zero = 0;
  return ok(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, d.rank, d.cols, d.rows, &one, p, d.rank, m,
                        d.cols, &zero, q, d.rank),
            error);
}

// p_j -= P[:, :j] (P[:, :j]^T p_j), twice ("twice is enough": orthogonal to rounding unless
// p_j was numerically in their span). Column j of the row-major P (rows x rank) is the
// vector at p + j with stride rank; P[:, :j]^T is the j x rows column-major matrix at p
// with leading dimension rank.
bool project_out(cublasHandle_t h, Dims d, float* p, int j, float* coeffs, std::string& error) {
  const float one = 1, zero = 0, minus_one = -1;
  float* column = p + j;
  for (int pass = 0; pass < 2 && j > 0; ++pass) {
    if (!ok(cublasSgemv(h, CUBLAS_OP_N, j, d.rows, &one, p, d.rank, column, d.rank, &zero, coeffs,
                        1),
            error) ||
        !ok(cublasSgemv(h, CUBLAS_OP_T, j, d.rows, &minus_one, p, d.rank, coeffs, 1, &one, column,
                        d.rank),
            error))
      return false;
  }
  return true;
}

// Column j of P := a fixed pseudo-random vector, entries in [-0.5, 0.5).
__global__ void fill_column(float* p, int rows, int rank, int j) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x;
       i < std::uint64_t(rows); i += std::uint64_t(gridDim.x) * blockDim.x)
    p[i * rank + j] = m::add_rn(m::uniform01(std::uint64_t(j), i), -0.5f);
}

// Below this fraction of its norm, what is left of a column after the projections is
// rounding noise: the column was in the span of the ones before (M of rank below r).
constexpr float kDependent = 1e-4f;

// The columns of P made orthonormal by classical Gram-Schmidt, every projection done twice.
// The CPU uses Householder QR: the same span, but a column's sign may differ (Q = M^T P
// follows it, so P Q^T does not change). A column in the span of the ones before (M of
// lower rank than r, or zero) is replaced, as Householder QR does, by a unit vector
// orthogonal to them (here: a fixed pseudo-random vector, projected and normalised); its
// Q column, M^T times it, is then zero to rounding. Non-finite columns (NaN or Inf in M)
// are left as they are: the result is NaN, as on the CPU.
bool orthonormalise(cublasHandle_t h, Dims d, float* p, float* coeffs, std::string& error) {
  for (int j = 0; j < d.rank; ++j) {
    float* column = p + j;
    float before = 0, after = 0;
    if (!ok(cublasSnrm2(h, d.rows, column, d.rank, &before), error) ||
        !project_out(h, d, p, j, coeffs, error) ||
        !ok(cublasSnrm2(h, d.rows, column, d.rank, &after), error))
      return false;
    if (!std::isfinite(before)) continue;
    if (!(after > kDependent * before)) {
      fill_column<<<grid_for(std::uint64_t(d.rows)), kThreads>>>(p, d.rows, d.rank, j);
      if (!ok(cudaGetLastError(), error) || !project_out(h, d, p, j, coeffs, error) ||
          !ok(cublasSnrm2(h, d.rows, column, d.rank, &after), error))
        return false;
      if (!(after > 0)) continue;  // cannot happen while j < rows
    }
    const float inv = 1.0f / after;
    if (!ok(cublasSscal(h, d.rows, &inv, column, d.rank), error)) return false;
  }
  return true;
}

__global__ void to_f32(const void* in, int dtype, std::uint64_t n, float* out) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::uint64_t(gridDim.x) * blockDim.x)
    out[i] = load(in, dtype, i);
}

// Rows, columns and rank as cuBLAS ints, checked against the element count.
bool powersgd_dims(const BodyParams& p, Dims& d, std::string& error) {
  const bool fits = p.rows >= 2 && p.cols >= 2 && p.rows <= INT_MAX && p.cols <= INT_MAX &&
                    p.rows * p.cols == p.count && p.rank >= 1 && p.rank <= p.rows &&
                    p.rank <= p.cols;
  if (!fits) {
    error = "PowerSGD: " + std::to_string(p.count) + " elements as a " + std::to_string(p.rows) +
            " x " + std::to_string(p.cols) + " matrix of rank " + std::to_string(p.rank) +
            " (cuBLAS needs dimensions below 2^31)";
    return false;
  }
  d = {static_cast<int>(p.rows), static_cast<int>(p.cols), static_cast<int>(p.rank)};
  return true;
}

// encode_powersgd() of codec.cpp: P = M Q, P orthonormalised (a cold start runs one more
// iteration, P = orth(M (M^T P))), Q = M^T P; the body is P then Q, fp32 row-major.
bool encode_powersgd(const BodyParams& p, const void* in, void* body, std::string& error) {
  Dims d{};
  if (!powersgd_dims(p, d, error)) return false;
  if (p.q == nullptr) {
    error = "PowerSGD: no starting Q";
    return false;
  }
  const std::uint64_t q_size = p.cols * p.rank;
  std::vector<float> start(p.q, p.q + q_size);
  if (p.cold && p.rank == p.cols) {  // a rank that covers every column: the identity
    for (std::uint64_t c = 0; c < p.cols; ++c)
      for (std::uint64_t j = 0; j < p.rank; ++j) start[c * p.rank + j] = c == j ? 1.0f : 0.0f;
  }
  // The matrix in fp32: the input itself, or a converted copy (F32 in codec.cpp).
  DeviceMemory converted, tmp, coeffs;
  const float* m = static_cast<const float*>(in);
  if (p.dtype != kF32) {
    if (!converted.allocate(4 * p.count, error)) return false;
    to_f32<<<grid_for(p.count), kThreads>>>(in, p.dtype, p.count, converted.as<float>());
    if (!ok(cudaGetLastError(), error)) return false;
    m = converted.as<float>();
  }
  float* pm = static_cast<float*>(body);  // P, rows x rank
  float* qm = pm + p.rows * p.rank;       // Q, cols x rank
  Cublas blas;
  if (!tmp.allocate(4 * q_size, error) || !coeffs.allocate(4 * p.rank, error) ||
      !blas.create(error) ||
      !ok(cudaMemcpy(qm, start.data(), 4 * q_size, cudaMemcpyHostToDevice), error))
    return false;
  const cublasHandle_t h = blas.get();
  if (!m_times(h, d, m, qm, pm, error) || !orthonormalise(h, d, pm, coeffs.as<float>(), error))
    return false;
  if (p.cold && p.rank < p.cols) {
    if (!m_transposed_times(h, d, m, pm, tmp.as<float>(), error) ||
        !m_times(h, d, m, tmp.as<float>(), pm, error) ||
        !orthonormalise(h, d, pm, coeffs.as<float>(), error))
      return false;
  }
  return m_transposed_times(h, d, m, pm, qm, error) &&
         ok(cudaMemcpy(p.q, qm, 4 * q_size, cudaMemcpyDeviceToHost), error);
}

// M = P Q^T.
bool decode_powersgd(const BodyParams& p, const void* body, float* out, std::string& error) {
  Dims d{};
  if (!powersgd_dims(p, d, error)) return false;
  const float* pm = static_cast<const float*>(body);
  const float* qm = pm + p.rows * p.rank;
  const float one = 1, zero = 0;
  Cublas blas;
  return blas.create(error) &&
         ok(cublasSgemm(blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, d.cols, d.rows, d.rank, &one, qm,
                        d.rank, pm, d.rank, &zero, out, d.cols),
            error) &&
         ok(cudaDeviceSynchronize(), error);
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
  return kind >= kNone && kind <= kPowersgd;
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
    case kTopk:
      return encode_topk(p, in, body, error);
    case kRandomk:
      return encode_randomk(p, in, body, error);
    case kPowersgd:
      return encode_powersgd(p, in, body, error);
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
  if (p.kind == kTopk) return decode_topk(p, body, out, error);
  if (p.kind == kRandomk) return decode_randomk(p, body, out, error);
  if (p.kind == kPowersgd) return decode_powersgd(p, body, out, error);
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

// The table the main library calls through (core/cuda_module.hpp).
extern "C" __attribute__((visibility("default"))) const hgsim::compress::cuda::CodecCudaTable*
hgsim_codec_cuda_table() {
  namespace cuda = hgsim::compress::cuda;
  static const cuda::CodecCudaTable table = [] {
    cuda::CodecCudaTable t;
    t.check_available = &cuda::available;
    t.supports_kind = &cuda::supports;
    t.encode_device = &cuda::encode_body_device;
    t.decode_device = &cuda::decode_body_device;
    t.encode_host = &cuda::encode_body_host;
    t.decode_host = &cuda::decode_body_host;
    return t;
  }();
  return &table;
}
