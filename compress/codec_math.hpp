// The element-level arithmetic of every codec: float <-> fp16/bf16/fp8 conversions and the
// int8/int4 quantiser. Plain C++17, compiled by both the CPU sources and nvcc (the CUDA
// kernels include this file), so that CPU and CUDA encodings are bit-identical: every
// operation is an IEEE-754 single-precision operation with round-to-nearest-even, and on
// the device the adds and multiplies are written as __fadd_rn/__fmul_rn so that nvcc cannot
// contract them into fused multiply-adds.
//
// Conventions (the README's "Codecs" section repeats them):
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

HGSIM_HD std::uint8_t f32_to_e4m3(float x) {
  const std::uint32_t w = bits_of(x);
  const std::uint32_t sign = (w >> 24) & 0x80u;
  const std::uint32_t a = w & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);   // NaN
  if (a >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448, Inf: saturate
  std::uint32_t code;
  if (a < 0x3C800000u) {  // below 2^-6: subnormal, a multiple of 2^-9
    code = static_cast<std::uint32_t>(round_even(mul_rn(float_of(a), 512.0f)));
  } else {
    const std::uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
    code = (r >> 20) - (120u << 3);
    if (code > 0x7Eu) code = 0x7Eu;
  }
  return static_cast<std::uint8_t>(sign | code);
}

HGSIM_HD std::uint8_t f32_to_e5m2(float x) {
  const std::uint32_t w = bits_of(x);
  const std::uint32_t sign = (w >> 24) & 0x80u;
  const std::uint32_t a = w & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Eu);   // NaN
  if (a == 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Cu);  // Inf
  if (a >= 0x47600000u) return static_cast<std::uint8_t>(sign | 0x7Bu);  // >= 57344: saturate
  std::uint32_t code;
  if (a < 0x38800000u) {  // below 2^-14: subnormal, a multiple of 2^-16
    code = static_cast<std::uint32_t>(round_even(mul_rn(float_of(a), 65536.0f)));
  } else {
    const std::uint32_t r = a + 0xFFFFFu + ((a >> 21) & 1u);
    code = (r >> 21) - (112u << 2);
    if (code > 0x7Bu) code = 0x7Bu;
  }
  return static_cast<std::uint8_t>(sign | code);
}

// 2^e for -30 <= e <= 30, exactly.
HGSIM_HD float exp2i(int e) {
  return float_of(static_cast<std::uint32_t>(e + 127) << 23);
}

HGSIM_HD float e4m3_to_f32(std::uint8_t c) {
  const float sign = (c & 0x80u) ? -1.0f : 1.0f;
  const int e = (c >> 3) & 0xF;
  const int m = c & 0x7;
  if (e == 0xF && m == 0x7) return float_of(0x7FC00000u | ((c & 0x80u) ? 0x80000000u : 0u));
  if (e == 0) return sign * static_cast<float>(m) * exp2i(-9);
  return sign * (1.0f + static_cast<float>(m) / 8.0f) * exp2i(e - 7);
}

HGSIM_HD float e5m2_to_f32(std::uint8_t c) {
  const float sign = (c & 0x80u) ? -1.0f : 1.0f;
  const int e = (c >> 2) & 0x1F;
  const int m = c & 0x3;
  if (e == 0x1F) {
    if (m == 0) return float_of(0x7F800000u | ((c & 0x80u) ? 0x80000000u : 0u));
    return float_of(0x7FC00000u | ((c & 0x80u) ? 0x80000000u : 0u));
  }
  if (e == 0) return sign * static_cast<float>(m) * exp2i(-16);
  return sign * (1.0f + static_cast<float>(m) / 4.0f) * exp2i(e - 15);
}

// ---- scales --------------------------------------------------------------------------------

// The scale of a block whose largest finite magnitude is `amax`, for a format whose largest
// code is `qmax` (127 for int8, 7 for int4, 448/57344 for fp8): amax / qmax. A scale whose
// reciprocal is not finite (amax zero, or so small that amax / qmax underflows) is stored
// as 0 for integer codecs (the block decodes to zeros) and 1 for fp8 (values that small
// round to zero in fp8 anyway).
HGSIM_HD float block_scale(float amax, float qmax, float unusable) {
  const float s = amax / qmax;
  const float inv = 1.0f / s;
  return (s > 0.0f && is_finite_bits(bits_of(inv))) ? s : unusable;
}

HGSIM_HD float inverse_scale(float scale) {
  return scale > 0.0f ? 1.0f / scale : 0.0f;
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

// Counter-based random numbers (SplitMix64 finaliser): deterministic given (seed, index),
// the same on CPU and GPU, independent of the order elements are processed in.
HGSIM_HD std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits.
HGSIM_HD float uniform01(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t r = mix64(seed ^ mix64(index));
  return static_cast<float>(r >> 40) * 5.9604644775390625e-08f;  // 2^-24
}

}  // namespace hgsim::compress::math
