// The element-level arithmetic of every codec: float <-> fp16/bf16/fp8 conversions and the
// int8/int4 quantiser. Plain C++17, compiled by both the CPU sources and nvcc (the CUDA
// kernels include this file), so that CPU and CUDA encodings are bit-identical: every
// operation is an IEEE-754 single-precision operation with round-to-nearest-even, and on
// the device the adds and multiplies are written as __fadd_rn/__fmul_rn so that nvcc cannot
// contract them into fused multiply-adds.
//
// Conventions (docs/codecs.md repeats them):
//  - fp16 and bf16: round to nearest even; overflow gives +-Inf; NaN stays NaN (quiet).
//  - fp8 e4m3 (OCP 8-bit floating point, "E4M3": bias 7, max 448, no Inf, NaN = S.1111.111)
//    and e5m2 (bias 15, max 57344, Inf = S.11111.00, NaN = S.11111.10): round to nearest
//    even; finite values beyond the largest finite value SATURATE to it (OCP's saturating
//    mode); +-Inf saturates to +-448 in e4m3 (it has no Inf) and stays +-Inf in e5m2.
//  - int8/int4: codes -127..127 / -7..7; the code -128 / -8 marks a NaN input.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HGSIM_HD __host__ __device__ __forceinline__
#else
#define HGSIM_HD inline
#endif

namespace hgsim::compress::math {

HGSIM_HD std::uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

HGSIM_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Single-precision add and multiply, rounded to nearest even, never fused.
HGSIM_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HGSIM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

HGSIM_HD bool is_nan_bits(std::uint32_t w) {
  return (w & 0x7FFFFFFFu) > 0x7F800000u;
}
HGSIM_HD bool is_finite_bits(std::uint32_t w) {
  return (w & 0x7FFFFFFFu) < 0x7F800000u;
}

// |x| as bits when x is finite, 0 otherwise: the integer order of these bits is the order
// of the magnitudes, so block maxima are integer max reductions (which vectorise).
HGSIM_HD std::uint32_t finite_magnitude_bits(float x) {
  const std::uint32_t a = bits_of(x) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}

// Rounds |v| < 2^22 to the nearest integer, ties to even (the 1.5 * 2^23 trick).
HGSIM_HD float round_even(float v) {
  const float magic = 12582912.0f;
  return add_rn(add_rn(v, magic), -magic);
}

// ---- fp16 (IEEE binary16) ------------------------------------------------------------------
// After M. Maratyszcza's FP16 library (MIT): branch-free, exact, round to nearest even.

HGSIM_HD std::uint16_t f32_to_f16(float f) {
  const float scale_to_inf = 5.192296858534828e+33f;   // 2^112
  const float scale_to_zero = 7.703719777548943e-34f;  // 2^-110
  const std::uint32_t w = bits_of(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  float base = mul_rn(mul_rn(float_of(w & 0x7FFFFFFFu), scale_to_inf), scale_to_zero);
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = add_rn(float_of((bias >> 1) + 0x07800000u), base);
  const std::uint32_t b = bits_of(base);
  const std::uint32_t exp_bits = (b >> 13) & 0x00007C00u;
  const std::uint32_t mantissa_bits = b & 0x00000FFFu;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

HGSIM_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  const std::uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 1.925929944387236e-34f;  // 2^-112
  const float normalized = mul_rn(float_of((two_w >> 4) + exp_offset), exp_scale);
  const std::uint32_t magic_mask = 126u << 23;
  const float denormalized = add_rn(float_of((two_w >> 17) | magic_mask), -0.5f);
  const std::uint32_t cutoff = 1u << 27;
  return float_of(sign | (two_w < cutoff ? bits_of(denormalized) : bits_of(normalized)));
}

// ---- bf16 ----------------------------------------------------------------------------------

HGSIM_HD std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t w = bits_of(f);
  if (is_nan_bits(w)) return static_cast<std::uint16_t>((w >> 16) | 0x0040u);
  const std::uint32_t rounded = w + 0x7FFFu + ((w >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

HGSIM_HD float bf16_to_f32(std::uint16_t h) {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

// ---- fp8 -----------------------------------------------------------------------------------

constexpr float kE4m3Max = 448.0f;
constexpr float kE5m2Max = 57344.0f;

// The fp8 encoders and decoders are branch-free (selects only, integer arithmetic on
// non-negative int32 values) so that the CPU loops vectorise.

// Rounding is done by the float adder: adding B = 2^(E + 20) to a value of exponent E
// (E >= -6; below, B = 2^14) leaves an ulp of 2^(E - 3), e4m3's spacing there, so the sum
// is rounded to nearest even in hardware and its low bits, minus B's, count the steps:
// 8..16 for a normal value (the implicit 1 included), 0..8 below 2^-6. Checked against the
// previous two-path formula on all 2^32 inputs.
HGSIM_HD std::uint8_t f32_to_e4m3(float x) {
  const std::uint32_t w = bits_of(x);
  const std::uint32_t sign = (w >> 24) & 0x80u;
  const std::int32_t a = static_cast<std::int32_t>(w & 0x7FFFFFFFu);
  const std::int32_t ac = a < 0x43E00000 ? a : 0x43E00000;  // >= 448 (and Inf): saturate
  std::int32_t eb = ac & 0x7F800000;
  eb = eb > (121 << 23) ? eb : (121 << 23);  // exponent E, at least -6
  const std::int32_t bb = eb + (20 << 23);   // B = 2^(E + 20)
  const std::int32_t steps =
      static_cast<std::int32_t>(bits_of(add_rn(float_of(static_cast<std::uint32_t>(ac)),
                                               float_of(static_cast<std::uint32_t>(bb))))) -
      bb;
  // NaN was saturated to 0x7E; the NaN code is one up.
  const std::int32_t code = steps + (((eb >> 23) - 121) << 3) + (a > 0x7F800000 ? 1 : 0);
  return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(code));
}

// The same with 2 mantissa bits: B = 2^(E + 21), E at least -14.
HGSIM_HD std::uint8_t f32_to_e5m2(float x) {
  const std::uint32_t w = bits_of(x);
  const std::uint32_t sign = (w >> 24) & 0x80u;
  const std::int32_t a = static_cast<std::int32_t>(w & 0x7FFFFFFFu);
  const std::int32_t ac = a < 0x47600000 ? a : 0x47600000;  // >= 57344: saturate
  std::int32_t eb = ac & 0x7F800000;
  eb = eb > (113 << 23) ? eb : (113 << 23);
  const std::int32_t bb = eb + (21 << 23);
  const std::int32_t steps =
      static_cast<std::int32_t>(bits_of(add_rn(float_of(static_cast<std::uint32_t>(ac)),
                                               float_of(static_cast<std::uint32_t>(bb))))) -
      bb;
  // Inf and NaN were saturated to 0x7B: Inf is one code up (0x7C), NaN three (0x7E).
  const std::int32_t code =
      steps + (((eb >> 23) - 113) << 2) + (a >= 0x7F800000 ? 1 : 0) + (a > 0x7F800000 ? 2 : 0);
  return static_cast<std::uint8_t>(sign | static_cast<std::uint32_t>(code));
}

HGSIM_HD float e4m3_to_f32(std::uint8_t c) {
  const std::int32_t v = c;
  const std::uint32_t sign = static_cast<std::uint32_t>(v & 0x80) << 24;
  const std::int32_t e = (v >> 3) & 0xF, m = v & 0x7;
  const std::uint32_t normal = static_cast<std::uint32_t>(((e + 120) << 23) | (m << 20));
  const std::uint32_t subnormal = bits_of(mul_rn(static_cast<float>(m), 0.001953125f));  // 2^-9
  std::uint32_t r = e == 0 ? subnormal : normal;
  r = (e == 0xF && m == 0x7) ? 0x7FC00000u : r;  // NaN
  return float_of(sign | r);
}

HGSIM_HD float e5m2_to_f32(std::uint8_t c) {
  const std::int32_t v = c;
  const std::uint32_t sign = static_cast<std::uint32_t>(v & 0x80) << 24;
  const std::int32_t e = (v >> 2) & 0x1F, m = v & 0x3;
  const std::uint32_t normal = static_cast<std::uint32_t>(((e + 112) << 23) | (m << 21));
  const std::uint32_t subnormal = bits_of(mul_rn(static_cast<float>(m), 1.52587890625e-05f));
  std::uint32_t r = e == 0 ? subnormal : normal;
  r = e == 0x1F ? (m == 0 ? 0x7F800000u : 0x7FC00000u) : r;  // Inf, NaN
  return float_of(sign | r);
}

// ---- scales --------------------------------------------------------------------------------

// The scale of a block whose largest finite magnitude is `amax`, for a format whose largest
// code is `qmax` (127 for int8, 7 for int4, 448/57344 for fp8): amax / qmax. A scale whose
// reciprocal is not finite (amax zero, or so small that amax / qmax underflows) is stored
// as 0 for integer codecs (the block decodes to zeros) and 1 for fp8 (values that small
// round to zero in fp8 anyway).
struct Scale {
  float scale;  // what is stored: value = code x scale
  float inv;    // what encoding multiplies by: 1 / scale (0 when the scale is 0)
};

HGSIM_HD Scale block_scale(float amax, float qmax, float unusable) {
  const float s = amax / qmax;
  const float inv = 1.0f / s;
  if (s > 0.0f && is_finite_bits(bits_of(inv))) return {s, inv};
  return {unusable, unusable > 0.0f ? 1.0f / unusable : 0.0f};
}

// The integer code of x for a block with largest finite magnitude amax and inverse scale
// inv: round(clamp(x, -amax, amax) * inv), ties to even, within [-qmax, qmax]; NaN gives
// -(qmax + 1). `noise` in [0, 1) replaces round-to-nearest by floor(v + noise)
// (stochastic rounding); pass -1 for round-to-nearest-even.
HGSIM_HD int quantize(float x, float amax, float inv, float qmax, float noise) {
  const bool nan = is_nan_bits(bits_of(x));
  float c = nan ? 0.0f : x;
  c = c > amax ? amax : c;
  c = c < -amax ? -amax : c;
  const float v = mul_rn(c, inv);
  float q;
  if (noise < 0.0f) {
    q = round_even(v);
  } else {
    const float t = add_rn(v, noise);
    q = static_cast<float>(static_cast<int>(t));
    q = q > t ? add_rn(q, -1.0f) : q;  // floor for negative t
  }
  q = q > qmax ? qmax : q;
  q = q < -qmax ? -qmax : q;
  const int code = static_cast<int>(q);
  return nan ? -static_cast<int>(qmax) - 1 : code;
}

HGSIM_HD float dequantize(int code, float scale, float qmax) {
  if (code < -static_cast<int>(qmax)) return float_of(0x7FC00000u);
  return mul_rn(static_cast<float>(code), scale);
}

// ---- top-k selection -----------------------------------------------------------------------

// The sort key of a value: its magnitude bits, NaN above +Inf (a NaN is always sent). The
// integer order of the keys is the order of the magnitudes.
HGSIM_HD std::uint32_t topk_key(float x) {
  const std::uint32_t a = bits_of(x) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0x7F800001u : a;
}

// One pass of top-k's radix select, from the histogram of one 8-bit digit among the keys
// that match the digits chosen so far: the digit of the k-th largest key. `remaining` (how
// many of the matching keys are still wanted) becomes how many keys with that digit are.
// The CPU encoder and the CUDA host code both call this, so they choose the same threshold.
inline int topk_radix_bucket(const std::uint64_t hist[256], std::uint64_t& remaining) {
  int bucket = 255;
  for (; bucket > 0; --bucket) {
    if (hist[bucket] >= remaining) break;
    remaining -= hist[bucket];
  }
  return bucket;
}

// Counter-based random numbers (SplitMix64 finaliser): deterministic given (seed, index),
// the same on CPU and GPU, independent of the order elements are processed in.
HGSIM_HD std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// MurmurHash3's 32-bit finaliser: a bijection that mixes every bit.
HGSIM_HD std::uint32_t mix32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// Uniform in [0, 1) with 24 random bits, a function of (seed, index) only. 32-bit
// arithmetic, so that a loop over consecutive indices vectorises (AVX2 has 32-bit but no
// 64-bit multiplies): the seed and the index's high half make a key, the low half is mixed
// with it.
HGSIM_HD std::uint32_t noise_key(std::uint64_t seed, std::uint32_t index_high) {
  const std::uint32_t s =
      static_cast<std::uint32_t>(seed) ^ (static_cast<std::uint32_t>(seed >> 32) * 0x9E3779B9u);
  return mix32(s ^ index_high);
}
HGSIM_HD float uniform01_keyed(std::uint32_t key, std::uint32_t index_low) {
  const std::uint32_t r = mix32((index_low * 0x9E3779B9u) ^ key);
  return static_cast<float>(static_cast<std::int32_t>(r >> 8)) * 5.9604644775390625e-08f;
}
HGSIM_HD float uniform01(std::uint64_t seed, std::uint64_t index) {
  return uniform01_keyed(noise_key(seed, static_cast<std::uint32_t>(index >> 32)),
                         static_cast<std::uint32_t>(index));
}

}  // namespace hgsim::compress::math
