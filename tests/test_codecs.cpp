// Codecs: exact sizes, conversions against independent references, per-codec error bounds,
// error feedback, PowerSGD on low-rank matrices, determinism, bad input. Every test draws
// fresh random inputs from std::random_device and prints its seed when it fails.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "compress/codec.hpp"
#include "compress/codec_cost.hpp"
#include "compress/codec_math.hpp"
#include "kernels/gpu_catalog.hpp"

using namespace hgsim::compress;

namespace {

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) | rd();
}

#define SEEDED(rng)                                     \
  const std::uint64_t seed_ = fresh_seed();             \
  SCOPED_TRACE("random seed " + std::to_string(seed_)); \
  std::mt19937_64 rng(seed_)

std::vector<float> gaussian(std::mt19937_64& rng, std::size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  // libstdc++'s normal_distribution<float> returns exactly 0 about once in 5 million
  // draws; tests that tell sent elements by their being non-zero need none.
  for (float& x : v)
    while ((x = d(rng)) == 0.0f) {
    }
  return v;
}

CodecSpec make(CodecKind kind) {
  CodecSpec s;
  s.kind = kind;
  switch (kind) {
    case CodecKind::int8:
    case CodecKind::int4:
      s.block = 128;
      break;
    case CodecKind::topk:
    case CodecKind::randomk:
      s.ratio = 0.05;
      break;
    case CodecKind::powersgd:
      s.rank = 4;
      s.fallback = CodecKind::bf16;
      break;
    default:
      break;
  }
  return s;
}

// Every codec, with fp8 in both scalings and int8 with stochastic rounding.
std::vector<CodecSpec> all_specs() {
  std::vector<CodecSpec> specs;
  for (CodecKind k :
       {CodecKind::none, CodecKind::fp16, CodecKind::bf16, CodecKind::fp8_e4m3, CodecKind::fp8_e5m2,
        CodecKind::int8, CodecKind::int4, CodecKind::topk, CodecKind::randomk, CodecKind::powersgd})
    specs.push_back(make(k));
  for (CodecKind k : {CodecKind::fp8_e4m3, CodecKind::fp8_e5m2}) {
    CodecSpec s = make(k);
    s.scaling = Scaling::per_block;
    s.block = 64;
    specs.push_back(s);
  }
  CodecSpec sr = make(CodecKind::int8);
  sr.stochastic_rounding = true;
  specs.push_back(sr);
  return specs;
}

std::vector<float> round_trip(const CodecSpec& spec, const Shape& shape,
                              const std::vector<float>& x, std::uint64_t seed = 0) {
  std::vector<std::byte> enc = encode(spec, shape, std::span<const float>(x), seed);
  EXPECT_EQ(enc.size(), encoded_bytes(spec, shape, DType::fp32)) << describe(spec);
  std::vector<float> y(x.size());
  decode(enc, std::span<float>(y));
  return y;
}

std::vector<float> block_scales(const std::vector<float>& x, std::size_t block, float qmax) {
  std::vector<float> scales;
  for (std::size_t b = 0; b < x.size(); b += block) {
    float amax = 0;
    for (std::size_t i = b; i < std::min(x.size(), b + block); ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    scales.push_back(amax / qmax);
  }
  return scales;
}

// The fp8 value nearest to v among all 256 codes, ties to the even code (brute force).
float nearest_fp8(float v, bool e4m3) {
  float best = 0;
  double best_err = INFINITY;
  int best_code = 0;
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3 ? math::e4m3_to_f32(std::uint8_t(c)) : math::e5m2_to_f32(std::uint8_t(c));
    if (!std::isfinite(f)) continue;
    const double err = std::fabs(double(f) - double(v));
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best_code & 1) == 1)) {
      best = f, best_err = err, best_code = c;
    }
  }
  return best;
}

}  // namespace

// ---- sizes -------------------------------------------------------------------------------

TEST(Codecs, EncodedSizeIsExactForEveryCodecDtypeAndShape) {
  SEEDED(rng);
  const std::vector<Shape> shapes{{0}, {1}, {7}, {129}, {1000}, {3, 5}, {64, 33}, {2, 3, 17}};
  for (const CodecSpec& spec : all_specs())
    for (const Shape& shape : shapes)
      for (DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        const std::size_t n = element_count(shape);
        std::vector<float> x = gaussian(rng, n);
        std::vector<Half> h(n);
        std::vector<BFloat16> b(n);
        convert(std::span<const float>(x), std::span<Half>(h));
        convert(std::span<const float>(x), std::span<BFloat16>(b));
        ConstTensor in = dtype == DType::fp32   ? ConstTensor(std::span<const float>(x))
                         : dtype == DType::fp16 ? ConstTensor(std::span<const Half>(h))
                                                : ConstTensor(std::span<const BFloat16>(b));
        std::vector<std::byte> enc = encode(spec, shape, in);
        const std::size_t expected = encoded_bytes(spec, shape, dtype);
        ASSERT_EQ(enc.size(), expected) << describe(spec) << " " << to_string(dtype);
        EXPECT_EQ(inspect(enc).total_bytes, expected);
        EXPECT_EQ(inspect(enc).count, n);
      }
}

// Element counts are checked without overflow: 2^32 x 2^32 is 2^64, which a 64-bit product
// wraps around to 0 (it was accepted as an empty tensor of 40 encoded bytes).
TEST(Codecs, ElementCountsPastTwoToTheFortyAreRefusedWithoutWrappingAround) {
  const std::int64_t k = std::int64_t{1} << 20;
  EXPECT_EQ(element_count(std::vector<std::int64_t>{k, k}), std::uint64_t{1} << 40);
  for (const auto& shape :
       {std::vector<std::int64_t>{k, k + 1}, std::vector<std::int64_t>{k * 4096, k * 4096},
        std::vector<std::int64_t>{k * 4096, k * 4096, 2}, std::vector<std::int64_t>{2, k * k}}) {
    try {
      element_count(shape);
      ADD_FAILURE() << shape[0] << " x " << shape[1] << " accepted";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find("more than 2^40 elements"), std::string::npos);
    }
  }
}

TEST(Codecs, SizeFormulas) {
  const Shape shape{1000};
  EXPECT_EQ(encoded_bytes(make(CodecKind::none), shape, DType::bf16), kHeaderBytes + 2000);
  EXPECT_EQ(encoded_bytes(make(CodecKind::fp16), shape, DType::fp32), kHeaderBytes + 2000);
  EXPECT_EQ(encoded_bytes(make(CodecKind::fp8_e4m3), shape, DType::fp32), kHeaderBytes + 4 + 1000);
  EXPECT_EQ(encoded_bytes(make(CodecKind::int8), shape, DType::fp32), kHeaderBytes + 8 * 4 + 1000);
  EXPECT_EQ(encoded_bytes(make(CodecKind::int4), shape, DType::fp32), kHeaderBytes + 8 * 4 + 500);
  // top-k: 50 of 1000, 2-byte indices and fp32 values; random-k sends no indices.
  EXPECT_EQ(encoded_bytes(make(CodecKind::topk), shape, DType::fp32), kHeaderBytes + 50 * 6);
  EXPECT_EQ(encoded_bytes(make(CodecKind::randomk), shape, DType::bf16), kHeaderBytes + 50 * 2);
  EXPECT_EQ(encoded_bytes(make(CodecKind::powersgd), Shape{100, 40}, DType::bf16),
            kHeaderBytes + 4 * (100 + 40) * 4);
  // PowerSGD on a vector falls back (here to bf16).
  EXPECT_EQ(encoded_bytes(make(CodecKind::powersgd), shape, DType::fp32), kHeaderBytes + 2000);
}

// ---- conversions against independent references -------------------------------------------

TEST(Codecs, Fp16ConversionMatchesCompilerFloat16) {
  SEEDED(rng);
  for (std::uint32_t h = 0; h < 65536; ++h) {  // every fp16 value survives fp32 and back
    const float f = math::f16_to_f32(std::uint16_t(h));
    const _Float16 ref = std::bit_cast<_Float16>(std::uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f, static_cast<float>(ref)) << h;
    ASSERT_EQ(math::f32_to_f16(f), h) << h;
  }
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = math::float_of(bits(rng));
    const std::uint16_t ours = math::f32_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(math::f16_to_f32(ours)));
      continue;
    }
    ASSERT_EQ(ours, std::bit_cast<std::uint16_t>(static_cast<_Float16>(f))) << f;
  }
}

TEST(Codecs, Bf16ConversionRoundsToNearestEven) {
  SEEDED(rng);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = math::float_of(bits(rng));
    const std::uint16_t h = math::f32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(math::bf16_to_f32(h)));
      continue;
    }
    // Reference in double: the two bf16 neighbours of f, pick the nearer, ties to even.
    const std::uint32_t w = math::bits_of(f);
    const float lo = math::float_of(w & 0xFFFF0000u);
    const std::uint32_t hi_bits = (w & 0xFFFF0000u) + 0x10000u;
    // Above the largest bf16 the next step up is 2^128 (which rounds to Inf).
    const double hi = (hi_bits & 0x7FFFFFFFu) == 0x7F800000u ? std::copysign(0x1p128, double(f))
                                                             : double(math::float_of(hi_bits));
    const double dlo = std::fabs(double(f) - lo), dhi = std::fabs(hi - f);
    const std::uint16_t want = std::uint16_t(
        ((dlo < dhi || (dlo == dhi && ((w >> 16) & 1) == 0)) ? w >> 16 : (w >> 16) + 1));
    ASSERT_EQ(h, want) << f;
  }
  EXPECT_EQ(math::bf16_to_f32(math::f32_to_bf16(3.4e38f)), INFINITY);  // overflow rounds to Inf
}

TEST(Codecs, Fp8CodesRoundTripAndMatchBruteForceNearest) {
  SEEDED(rng);
  for (int c = 0; c < 256; ++c) {
    const float a = math::e4m3_to_f32(std::uint8_t(c)), b = math::e5m2_to_f32(std::uint8_t(c));
    if (!std::isnan(a) && c != 0x80) {
      EXPECT_EQ(math::f32_to_e4m3(a), c) << c;
    }
    if (!std::isnan(b) && c != 0x80) {
      EXPECT_EQ(math::f32_to_e5m2(b), c) << c;
    }
  }
  EXPECT_EQ(math::e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(math::e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(math::e4m3_to_f32(math::f32_to_e4m3(1e9f)), 448.0f);  // saturates
  EXPECT_EQ(math::e4m3_to_f32(math::f32_to_e4m3(-INFINITY)), -448.0f);
  EXPECT_EQ(math::e5m2_to_f32(math::f32_to_e5m2(1e9f)), 57344.0f);
  EXPECT_EQ(math::e5m2_to_f32(math::f32_to_e5m2(INFINITY)), INFINITY);
  EXPECT_TRUE(std::isnan(math::e4m3_to_f32(math::f32_to_e4m3(NAN))));
  EXPECT_TRUE(std::isnan(math::e5m2_to_f32(math::f32_to_e5m2(NAN))));
  std::uniform_real_distribution<float> exponent(-20.0f, 17.0f);
  for (int i = 0; i < 20000; ++i) {
    const float v = (rng() & 1 ? 1.0f : -1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(math::e4m3_to_f32(math::f32_to_e4m3(v)), nearest_fp8(v, true)) << v;
    ASSERT_EQ(math::e5m2_to_f32(math::f32_to_e5m2(v)), nearest_fp8(v, false)) << v;
  }
}

// ---- per-codec error bounds on fresh random data -------------------------------------------

TEST(Codecs, NoneFp16Bf16RoundTripEveryDtype) {
  SEEDED(rng);
  const std::size_t n = 5001;
  std::vector<float> x = gaussian(rng, n, 3.0f);
  EXPECT_EQ(round_trip(make(CodecKind::none), {long(n)}, x), x);
  std::vector<Half> h(n), h2(n);
  std::vector<BFloat16> b(n), b2(n);
  convert(std::span<const float>(x), std::span<Half>(h));
  convert(std::span<const float>(x), std::span<BFloat16>(b));
  for (CodecKind k : {CodecKind::none, CodecKind::fp16}) {
    auto enc = encode(make(k), Shape{long(n)}, std::span<const Half>(h));
    decode(enc, std::span<Half>(h2));
    EXPECT_EQ(0, std::memcmp(h.data(), h2.data(), 2 * n)) << to_string(k);
  }
  for (CodecKind k : {CodecKind::none, CodecKind::bf16}) {
    auto enc = encode(make(k), Shape{long(n)}, std::span<const BFloat16>(b));
    decode(enc, std::span<BFloat16>(b2));
    EXPECT_EQ(0, std::memcmp(b.data(), b2.data(), 2 * n)) << to_string(k);
  }
  // fp32 through fp16 and bf16: half an ulp of the format (relative 2^-11 and 2^-8).
  std::vector<float> y16 = round_trip(make(CodecKind::fp16), {long(n)}, x);
  std::vector<float> yb = round_trip(make(CodecKind::bf16), {long(n)}, x);
  for (std::size_t i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > 6.2e-5f) {
      EXPECT_LE(std::fabs(x[i] - y16[i]), std::fabs(x[i]) * 0x1p-11f);
    }
    EXPECT_LE(std::fabs(x[i] - yb[i]), std::fabs(x[i]) * 0x1p-8f);
  }
  // A bf16 tensor decoded into fp32 and an fp16 codec reading bf16 input.
  std::vector<float> from_b(n);
  decode(encode(make(CodecKind::fp16), Shape{long(n)}, std::span<const BFloat16>(b)),
         std::span<float>(from_b));
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_EQ(from_b[i], math::f16_to_f32(math::f32_to_f16(math::bf16_to_f32(b[i].bits))));
}

TEST(Codecs, Int8AndInt4WithinHalfAStepPerElement) {
  SEEDED(rng);
  for (CodecKind kind : {CodecKind::int8, CodecKind::int4})
    for (int block : {2, 32, 128, 1000}) {
      CodecSpec spec = make(kind);
      spec.block = block;
      const std::size_t n = 4099;  // odd, not a multiple of any block
      std::vector<float> x = gaussian(rng, n, 0.01f);
      std::vector<float> y = round_trip(spec, {long(n)}, x);
      const float qmax = kind == CodecKind::int8 ? 127 : 7;
      std::vector<float> scales = block_scales(x, block, qmax);
      for (std::size_t i = 0; i < n; ++i) {
        const float step = scales[i / block];
        // Half a step, plus the rounding of x / scale and of code x scale (an ulp or two
        // of x: found by repeating the test).
        const float rounding = 4 * std::numeric_limits<float>::epsilon() * std::fabs(x[i]);
        ASSERT_LE(std::fabs(x[i] - y[i]), 0.5f * step + rounding + 1e-30f)
            << describe(spec) << " element " << i;
      }
    }
}

TEST(Codecs, Fp8WithinHalfAnUlpOfTheScaledValue) {
  SEEDED(rng);
  for (CodecKind kind : {CodecKind::fp8_e4m3, CodecKind::fp8_e5m2})
    for (Scaling scaling : {Scaling::per_tensor, Scaling::per_block}) {
      CodecSpec spec = make(kind);
      spec.scaling = scaling;
      spec.block = scaling == Scaling::per_block ? 96 : 0;
      const std::size_t n = 3001;
      std::vector<float> x = gaussian(rng, n, 50.0f);
      std::vector<float> y = round_trip(spec, {long(n)}, x);
      const bool e4m3 = kind == CodecKind::fp8_e4m3;
      const float fmax = e4m3 ? 448.0f : 57344.0f;
      std::vector<float> scales = block_scales(x, spec.block ? spec.block : n, fmax);
      // Half an ulp: relative 2^-4 (e4m3) or 2^-3 (e5m2) for normals, and half the smallest
      // subnormal step (2^-10 or 2^-17 times the scale) below.
      const float rel = e4m3 ? 0x1p-4f : 0x1p-3f, sub = e4m3 ? 0x1p-10f : 0x1p-17f;
      for (std::size_t i = 0; i < n; ++i) {
        const float s = scales[spec.block ? i / spec.block : 0];
        ASSERT_LE(std::fabs(x[i] - y[i]), std::max(rel * std::fabs(x[i]), sub * s) * (1 + 1e-5f))
            << describe(spec) << " element " << i;
      }
    }
}

TEST(Codecs, StochasticRoundingIsUnbiasedAndDeterministicGivenTheSeed) {
  SEEDED(rng);
  CodecSpec spec = make(CodecKind::int8);
  spec.stochastic_rounding = true;
  const std::size_t n = 256;
  std::vector<float> x = gaussian(rng, n);
  EXPECT_EQ(encode(spec, Shape{long(n)}, std::span<const float>(x), 7),
            encode(spec, Shape{long(n)}, std::span<const float>(x), 7));
  EXPECT_NE(encode(spec, Shape{long(n)}, std::span<const float>(x), 7),
            encode(spec, Shape{long(n)}, std::span<const float>(x), 8));
  std::vector<double> mean(n, 0.0);
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<float> y = round_trip(spec, {long(n)}, x, t);
    for (std::size_t i = 0; i < n; ++i) mean[i] += y[i] / trials;
  }
  std::vector<float> scales = block_scales(x, 128, 127);
  for (std::size_t i = 0; i < n; ++i)  // std of the mean <= step / (2 sqrt(trials)); 6 sigma
    EXPECT_NEAR(mean[i], x[i], 6 * 0.5 * scales[i / 128] / std::sqrt(double(trials))) << i;
}

TEST(Codecs, TopKSendsTheLargestMagnitudes) {
  SEEDED(rng);
  const std::size_t n = 10007;
  std::vector<float> x = gaussian(rng, n);
  x[17] = x[18] = 40.0f;  // ties are fine
  for (double ratio : {1e-6, 0.013, 0.5, 1.0}) {
    CodecSpec spec = make(CodecKind::topk);
    spec.ratio = ratio;
    std::vector<float> y = round_trip(spec, {long(n)}, x);
    const std::uint64_t k = kept_elements(ratio, n);
    std::size_t sent = 0;
    float smallest_sent = INFINITY, largest_unsent = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (y[i] != 0) {
        ++sent;
        ASSERT_EQ(y[i], x[i]);
        smallest_sent = std::min(smallest_sent, std::fabs(x[i]));
      } else {
        largest_unsent = std::max(largest_unsent, std::fabs(x[i]));
      }
    }
    EXPECT_EQ(sent, k) << ratio;
    EXPECT_LE(largest_unsent, smallest_sent) << ratio;
  }
}

TEST(Codecs, RandomKSendsKDistinctElementsChosenByTheSeed) {
  SEEDED(rng);
  const std::size_t n = 5000;
  std::vector<float> x = gaussian(rng, n);
  for (double ratio : {0.001, 0.02, 0.3, 1.0}) {
    CodecSpec spec = make(CodecKind::randomk);
    spec.ratio = ratio;
    spec.seed = rng();
    std::vector<float> a = round_trip(spec, {long(n)}, x, 1);
    std::vector<float> b = round_trip(spec, {long(n)}, x, 1);
    std::vector<float> c = round_trip(spec, {long(n)}, x, 2);
    EXPECT_EQ(a, b);
    if (ratio < 1) {
      EXPECT_NE(a, c);
    }
    std::size_t sent = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (a[i] != 0) {
        ++sent;
        EXPECT_EQ(a[i], x[i]);
      }
    EXPECT_EQ(sent, kept_elements(ratio, n));
  }
}

// With error feedback, what has been sent over T steps differs from the sum of the inputs
// only by the residual still held back: the running sum is unbiased, the gap does not grow.
TEST(Codecs, ErrorFeedbackKeepsTheRunningSumUnbiased) {
  SEEDED(rng);
  const Shape shape{48, 40};
  const std::size_t n = 48 * 40;
  std::vector<float> drift = gaussian(rng, n, 0.2f);  // a consistent gradient direction
  for (CodecKind kind : {CodecKind::topk, CodecKind::randomk, CodecKind::powersgd}) {
    CodecSpec spec = make(kind);
    spec.error_feedback = true;
    spec.ratio = 0.05;
    spec.rank = 2;
    spec.warm_start = true;
    spec.seed = rng();
    CodecSpec no_ef = spec;
    no_ef.error_feedback = false;
    TensorCodec with(spec, shape, DType::fp32), without(no_ef, shape, DType::fp32);
    std::vector<double> sum_in(n, 0), sum_with(n, 0), sum_without(n, 0);
    const int steps = 300;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> g = gaussian(rng, n);
      for (std::size_t i = 0; i < n; ++i) g[i] += drift[i];
      std::vector<float> y(n), z(n);
      decode(with.encode(std::span<const float>(g)), std::span<float>(y));
      decode(without.encode(std::span<const float>(g)), std::span<float>(z));
      for (std::size_t i = 0; i < n; ++i)
        sum_in[i] += g[i], sum_with[i] += y[i], sum_without[i] += z[i];
    }
    double gap = 0, gap_without = 0, norm = 0, identity = 0;
    for (std::size_t i = 0; i < n; ++i) {
      gap += std::pow(sum_with[i] - sum_in[i], 2);
      gap_without += std::pow(sum_without[i] - sum_in[i], 2);
      norm += sum_in[i] * sum_in[i];
      identity = std::max(identity, std::fabs(sum_with[i] + with.residual()[i] - sum_in[i]));
    }
    EXPECT_LT(identity, 1e-2) << to_string(kind);  // sent + held back == input, up to rounding
    EXPECT_LT(std::sqrt(gap / norm), 0.25) << to_string(kind);
    EXPECT_LT(std::sqrt(gap / norm), 0.5 * std::sqrt(gap_without / norm)) << to_string(kind);
  }
}

TEST(Codecs, PowerSgdIsExactOnRankRMatrices) {
  SEEDED(rng);
  for (auto [rows, cols, r] : {std::tuple{64, 48, 4}, std::tuple{200, 17, 8}, {5, 300, 1}}) {
    std::vector<float> a = gaussian(rng, rows * r), b = gaussian(rng, cols * r);
    std::vector<float> m(rows * cols, 0);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        for (int k = 0; k < r; ++k) m[i * cols + j] += a[i * r + k] * b[j * r + k];
    CodecSpec spec = make(CodecKind::powersgd);
    spec.rank = r;
    std::vector<float> y = round_trip(spec, {rows, cols}, m, rng());
    EXPECT_LT(relative_l2_error(m, y), 1e-4) << rows << "x" << cols << " rank " << r;
    // A rank above min(rows, cols) is clamped: the matrix is sent exactly.
    spec.rank = 1000;
    std::vector<float> full = gaussian(rng, rows * cols);
    EXPECT_LT(relative_l2_error(full, round_trip(spec, {rows, cols}, full, rng())), 1e-4);
  }
}

TEST(Codecs, PowerSgdWarmStartConvergesAndVectorsFallBack) {
  SEEDED(rng);
  const int rows = 96, cols = 64;
  std::vector<float> m = gaussian(rng, rows * cols, 0.1f);
  std::vector<float> u = gaussian(rng, rows), v = gaussian(rng, cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m[i * cols + j] += 3 * u[i] * v[j] * (1 + (j % 2));
  CodecSpec spec = make(CodecKind::powersgd);
  spec.rank = 1;
  spec.error_feedback = false;
  spec.warm_start = true;
  TensorCodec codec(spec, {rows, cols}, DType::fp32);
  double first = 0, last = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<float> y(m.size());
    decode(codec.encode(std::span<const float>(m)), std::span<float>(y));
    (step == 0 ? first : last) = relative_l2_error(m, y);
  }
  EXPECT_LE(last, first + 1e-6);  // power iteration: never worse, here converged
  // A vector is not a matrix: PowerSGD sends it with the fallback codec (bf16 here).
  std::vector<float> vec = gaussian(rng, 300);
  auto enc = encode(make(CodecKind::powersgd), Shape{300}, std::span<const float>(vec));
  EXPECT_EQ(inspect(enc).kind, CodecKind::bf16);
}

// ---- bad input -----------------------------------------------------------------------------

TEST(Codecs, NanInfZeroEmptyAndOddSizesGiveDefinedResults) {
  SEEDED(rng);
  for (const CodecSpec& spec : all_specs()) {
    SCOPED_TRACE(describe(spec));
    // Empty and all-zero tensors decode to what they were.
    for (const Shape& shape : {Shape{0}, Shape{0, 5}, Shape{1}, Shape{3}, Shape{4, 4}}) {
      const std::size_t n = element_count(shape);
      std::vector<float> zeros(n, 0.0f);
      EXPECT_EQ(round_trip(spec, shape, zeros), zeros);
    }
    // NaN and Inf: the codecs that send every element keep NaN as NaN and Inf as Inf
    // (int8/int4/fp8-e4m3 saturate Inf to the block's largest finite value).
    std::vector<float> x = gaussian(rng, 257);
    x[3] = NAN;
    x[100] = INFINITY;
    x[200] = -INFINITY;
    std::vector<float> y = round_trip(spec, {257}, x);
    if (spec.kind == CodecKind::topk) {
      EXPECT_TRUE(std::isnan(y[3]));  // NaN ranks first
    }
    if (spec.kind != CodecKind::topk && spec.kind != CodecKind::randomk &&
        spec.kind != CodecKind::powersgd) {
      EXPECT_TRUE(std::isnan(y[3]));
      EXPECT_GT(y[100], 0);
      EXPECT_LT(y[200], 0);
      for (std::size_t i = 0; i < x.size(); ++i)
        if (std::isfinite(x[i]) && spec.kind != CodecKind::fp8_e5m2 &&
            spec.kind != CodecKind::fp8_e4m3) {
          EXPECT_TRUE(std::isfinite(y[i])) << i;  // one NaN does not spoil its block
        }
    }
  }
}

TEST(Codecs, TruncatedExtendedAndDamagedBuffersAreRefusedOrDecodedSafely) {
  SEEDED(rng);
  for (const CodecSpec& spec : all_specs()) {
    SCOPED_TRACE(describe(spec));
    const Shape shape{20, 15};
    std::vector<float> x = gaussian(rng, 300), y(300);
    std::vector<std::byte> enc = encode(spec, shape, std::span<const float>(x));
    for (std::size_t len = 0; len < enc.size(); ++len)
      EXPECT_THROW(decode(std::span(enc).first(len), std::span<float>(y)), CodecError) << len;
    std::vector<std::byte> longer = enc;
    longer.push_back(std::byte{0});
    EXPECT_THROW(decode(longer, std::span<float>(y)), CodecError);
    std::vector<float> wrong(299);
    EXPECT_THROW(decode(enc, std::span<float>(wrong)), CodecError);
    // Every single-byte change of the header, and random body damage: a CodecError or a
    // defined decode, never a crash (the sanitizer build and the fuzzers check the rest).
    for (std::size_t at = 0; at < kHeaderBytes; ++at)
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<std::byte> bad = enc;
        bad[at] ^= std::byte(1 << bit);
        try {
          EncodedInfo info = inspect(bad);
          if (info.count > (1u << 20)) continue;  // a huge count with a small body (random-k)
          std::vector<float> out(info.count);
          decode(bad, std::span<float>(out));
        } catch (const CodecError&) {
        }
      }
    for (int t = 0; t < 200 && enc.size() > kHeaderBytes; ++t) {
      std::vector<std::byte> bad = enc;
      bad[kHeaderBytes + rng() % (enc.size() - kHeaderBytes)] = std::byte(rng());
      try {
        decode(bad, std::span<float>(y));
      } catch (const CodecError&) {
      }
    }
  }
  std::vector<float> x(10), y(10);
  auto enc = encode(make(CodecKind::topk), Shape{10}, std::span<const float>(x));
  EXPECT_THROW(encode(make(CodecKind::int8), Shape{11}, std::span<const float>(x)), CodecError);
  EXPECT_THROW(encode(make(CodecKind::int8), Shape{-1}, std::span<const float>(x)), CodecError);
  std::vector<std::byte> small(5);
  EXPECT_THROW(encode(make(CodecKind::int8), Shape{10}, std::span<const float>(x), small),
               CodecError);
}

TEST(Codecs, SameSeedSameBytesForEveryCodec) {
  SEEDED(rng);
  std::vector<float> x = gaussian(rng, 32 * 24);
  for (const CodecSpec& spec : all_specs())
    EXPECT_EQ(encode(spec, Shape{32, 24}, std::span<const float>(x), 99),
              encode(spec, Shape{32, 24}, std::span<const float>(x), 99))
        << describe(spec);
}

// ---- the simulator's hook ------------------------------------------------------------------

TEST(CodecCost, WireBytesAreTheEncodedBytes) {
  const hgsim::kernels::GpuSpec& gpu = *hgsim::kernels::find_gpu("a100");
  const std::vector<std::int64_t> shape{4096, 1024};
  for (const CodecSpec& spec : all_specs()) {
    const TransferCoding c = code_transfer(spec, shape, hgsim::core::Precision::bf16, gpu);
    if (spec.kind == CodecKind::none) {
      EXPECT_EQ(c.wire_bytes.value(), 4096.0 * 1024 * 2);  // not encoded at all
      EXPECT_EQ(c.encode.value(), 0);
      continue;
    }
    EXPECT_EQ(c.wire_bytes.value(), double(encoded_bytes(spec, shape, DType::bf16)))
        << describe(spec);
    EXPECT_GT(c.encode.value(), 0);
    EXPECT_GT(c.decode.value(), 0);
    EXPECT_EQ(c.provenance, "estimated");
  }
  // int8 halves a bf16 tensor, plus one fp32 scale per 128 elements and the header.
  const double n = 4096.0 * 1024;
  const TransferCoding int8 =
      code_transfer(make(CodecKind::int8), shape, hgsim::core::Precision::bf16, gpu);
  EXPECT_EQ(int8.wire_bytes.value(), n + 4 * n / 128 + kHeaderBytes);
  EXPECT_NEAR(int8.wire_bytes.value() / (2 * n), 0.5 + 2.0 / 128, 1e-5);
  // The estimate is a roofline: int8 on an A100 (2039 GB/s at 70%) moves 2n + ~1.03n bytes.
  EXPECT_NEAR(
      int8.encode.value(),
      kLaunchSeconds + (2 * n + int8.wire_bytes.value()) / (0.7 * gpu.memory_bandwidth.value()),
      1e-12);
}

// ---- hgsim codecs --------------------------------------------------------------------------

TEST(CodecsCommand, JsonHasEveryCodecAndTheMemcpyReference) {
  const char* argv[] = {"hgsim", "codecs", "--bench", "--json", "--size", "2048"};
  std::ostringstream out, err;
  ASSERT_EQ(hgsim::apps::run_cli(6, argv, out, err), 0) << err.str();
  const auto doc = nlohmann::json::parse(out.str());
  EXPECT_GT(doc.at("memcpy_gb_per_s").get<double>(), 0);
  std::set<std::string> names;
  for (const auto& c : doc.at("codecs")) {
    names.insert(c.at("codec").get<std::string>());
    for (const char* key : {"ratio_vs_fp32", "rel_l2_error", "encode_gb_per_s", "decode_gb_per_s"})
      EXPECT_TRUE(c.at(key).is_number()) << key;
    if (c.at("codec") == "int8") {
      EXPECT_NEAR(c.at("ratio_vs_fp32").get<double>(), (2048 + 16 * 4 + 40) / 8192.0, 1e-12);
      // Rounding to 255 levels of each block's absmax a leaves an error of rms a / (255 sqrt 3)
      // (uniform over a step): for blocks of 128 normal draws, a < 5 but with probability
      // < 1e-4, so the relative error stays below 5 / (255 sqrt 3) = 0.0113. The data is
      // drawn anew each run (0.01004 was seen once).
      EXPECT_LT(c.at("rel_l2_error").get<double>(), 0.0113);
    }
  }
  for (const std::string& name : codec_names()) EXPECT_TRUE(names.count(name)) << name;
}

// ---- CPU and CUDA ------------------------------------------------------------------------

// Every codec but PowerSGD writes the same bytes on the GPU as on the CPU (and decodes to
// the same values); PowerSGD is compared to rounding below. Runs where a GPU is; skips
// elsewhere, saying why.
TEST(CodecsCuda, EncodingsAreBitIdenticalToTheCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  SEEDED(rng);
  std::vector<CodecSpec> specs = all_specs();
  CodecSpec dense_topk = make(CodecKind::topk), dense_randomk = make(CodecKind::randomk);
  dense_topk.ratio = dense_randomk.ratio = 0.7;  // random-k's bitmap branch, many top-k ties
  specs.push_back(dense_topk);
  specs.push_back(dense_randomk);
  for (const CodecSpec& spec : specs) {
    SCOPED_TRACE(describe(spec));
    for (const Shape& shape : {Shape{0}, Shape{1}, Shape{1001}, Shape{300, 129}}) {
      if (effective_spec(spec, shape).kind == CodecKind::powersgd) continue;  // not bit-exact
      const std::size_t n = element_count(shape);
      std::vector<float> x = gaussian(rng, n, 10.0f);
      if (n > 10) x[3] = NAN, x[5] = INFINITY, x[7] = -1e-40f;
      // Ties for top-k: a third of the elements share a few magnitudes (both signs).
      for (std::size_t i = 11; i < n; i += 3) x[i] = float(int(rng() % 5) - 2) * 1.5f;
      std::vector<BFloat16> b(n);
      convert(std::span<const float>(x), std::span<BFloat16>(b));
      for (bool as_bf16 : {false, true}) {
        const ConstTensor in = as_bf16 ? ConstTensor(std::span<const BFloat16>(b))
                                       : ConstTensor(std::span<const float>(x));
        const std::vector<std::byte> cpu = encode(spec, shape, in, 5);
        std::vector<std::byte> gpu(cpu.size());
        encode_cuda(spec, shape, in, gpu, 5);
        ASSERT_EQ(cpu, gpu) << "n=" << n << (as_bf16 ? " bf16" : " fp32");
        std::vector<float> from_cpu(n), from_gpu(n);
        decode(cpu, std::span<float>(from_cpu));
        decode_cuda(cpu, from_gpu);
        ASSERT_EQ(0, std::memcmp(from_cpu.data(), from_gpu.data(), 4 * n));
      }
    }
  }
}

// A damaged top-k index list is refused on the GPU as on the CPU.
TEST(CodecsCuda, DamagedTopKIndicesAreRefused) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  SEEDED(rng);
  std::vector<float> x = gaussian(rng, 1000);
  CodecSpec spec = make(CodecKind::topk);
  spec.ratio = 0.1;
  std::vector<std::byte> enc = encode(spec, Shape{1000}, std::span<const float>(x));
  std::vector<float> y(1000);
  std::vector<std::byte> beyond = enc, repeated = enc;
  beyond[kHeaderBytes + 1] = std::byte{0xFF};  // index 0's high byte: 0xFFxx >= 1000
  std::memcpy(&repeated[kHeaderBytes + 2], &repeated[kHeaderBytes], 2);  // index 1 = index 0
  EXPECT_THROW(decode_cuda(beyond, y), CodecError);
  EXPECT_THROW(decode_cuda(repeated, y), CodecError);
}

// PowerSGD on the GPU: the same algorithm as the CPU with cuBLAS and Gram-Schmidt, so the
// decoded matrices agree to rounding (the bytes do not: sums in another order, column
// signs); exact on matrices of rank <= r, as on the CPU, the zero matrix included (a rank
// above the matrix's makes P's extra columns dependent).
TEST(CodecsCuda, PowerSgdMatchesTheCpuToRounding) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  SEEDED(rng);
  for (auto [rows, cols, r] : {std::tuple{64, 48, 4}, std::tuple{200, 17, 8}, {5, 300, 1}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " rank " + std::to_string(r));
    std::vector<float> a = gaussian(rng, rows * r), b = gaussian(rng, cols * r);
    std::vector<float> m(rows * cols, 0);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        for (int k = 0; k < r; ++k) m[i * cols + j] += a[i * r + k] * b[j * r + k];
    std::vector<float> noisy = gaussian(rng, rows * cols, 0.01f);  // rank r plus a little noise
    for (std::size_t i = 0; i < m.size(); ++i) noisy[i] += m[i];
    std::vector<float> full = gaussian(rng, rows * cols);
    std::vector<float> zeros(rows * cols, 0.0f);  // every column of P dependent
    CodecSpec spec = make(CodecKind::powersgd);
    const Shape shape{rows, cols};
    for (int rank : {r, 1000}) {  // 1000: clamped to min(rows, cols), the matrix is sent whole
      spec.rank = rank;
      for (const std::vector<float>* input : {&m, &noisy, &full, &zeros}) {
        if (input == &full && rank == r) continue;  // no dominant subspace to agree on
        const ConstTensor in{std::span<const float>(*input)};
        const std::uint64_t seed = rng();
        const std::vector<std::byte> cpu = encode(spec, shape, in, seed);
        std::vector<std::byte> gpu(cpu.size());
        encode_cuda(spec, shape, in, gpu, seed);
        ASSERT_TRUE(std::equal(cpu.begin(), cpu.begin() + kHeaderBytes, gpu.begin()));
        std::vector<float> from_cpu(input->size()), from_gpu(input->size()),
            gpu_decoded(input->size());
        decode(cpu, std::span<float>(from_cpu));
        decode(gpu, std::span<float>(from_gpu));
        decode_cuda(gpu, gpu_decoded);
        EXPECT_LT(relative_l2_error(from_cpu, from_gpu), 1e-4) << "rank " << rank;
        EXPECT_LT(relative_l2_error(from_gpu, gpu_decoded), 1e-5) << "rank " << rank;
        const bool exact = input != &noisy || rank != r;  // rank <= r, or the whole matrix
        if (exact) {
          EXPECT_LT(relative_l2_error(*input, from_gpu), 1e-4) << "rank " << rank;
        }
      }
    }
  }
}

// TensorCodec on the GPU: error feedback and warm start as on the CPU. top-k and random-k
// send the CPU's exact bytes at every step (the residual too is then the CPU's); PowerSGD's
// decoded steps agree to rounding.
TEST(CodecsCuda, TensorCodecErrorFeedbackAndWarmStartMatchTheCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  SEEDED(rng);
  const Shape shape{48, 40};
  const std::size_t n = 48 * 40;
  std::vector<float> drift = gaussian(rng, n, 0.2f);
  for (CodecKind kind : {CodecKind::topk, CodecKind::randomk, CodecKind::powersgd}) {
    SCOPED_TRACE(to_string(kind));
    CodecSpec spec = make(kind);
    spec.error_feedback = true;
    spec.rank = 2;
    spec.warm_start = true;
    spec.seed = rng();
    TensorCodec cpu(spec, shape, DType::fp32), gpu(spec, shape, DType::fp32, Device::cuda);
    std::vector<double> sum_in(n, 0), sum_sent(n, 0);
    for (int step = 0; step < 5; ++step) {
      std::vector<float> g = gaussian(rng, n);
      for (std::size_t i = 0; i < n; ++i) g[i] += drift[i];
      const std::vector<std::byte> a = cpu.encode(std::span<const float>(g));
      const std::vector<std::byte> b = gpu.encode(std::span<const float>(g));
      std::vector<float> ya(n), yb(n);
      decode(a, std::span<float>(ya));
      decode(b, std::span<float>(yb));
      for (std::size_t i = 0; i < n; ++i) sum_in[i] += g[i], sum_sent[i] += yb[i];
      if (kind != CodecKind::powersgd)
        ASSERT_EQ(a, b) << "step " << step;
      else
        EXPECT_LT(relative_l2_error(ya, yb), 1e-3) << "step " << step;
    }
    double identity = 0;  // sent + held back == input, up to rounding
    for (std::size_t i = 0; i < n; ++i)
      identity = std::max(identity, std::fabs(sum_sent[i] + gpu.residual()[i] - sum_in[i]));
    EXPECT_LT(identity, 1e-3);
  }
}

TEST(CodecsCuda, WithoutADeviceTheGpuPathSaysWhy) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(why.empty());
  std::vector<float> x(16, 1.0f), y(16);
  for (const CodecSpec& spec : all_specs()) {  // every codec: a CodecError, never a crash
    SCOPED_TRACE(describe(spec));
    std::vector<std::byte> out(encoded_bytes(spec, Shape{4, 4}, DType::fp32));
    EXPECT_THROW(encode_cuda(spec, Shape{4, 4}, std::span<const float>(x), out), CodecError);
    EXPECT_THROW(decode_cuda(encode(spec, Shape{4, 4}, std::span<const float>(x)), y), CodecError);
    TensorCodec on_gpu(spec, Shape{4, 4}, DType::fp32, Device::cuda);
    EXPECT_THROW(on_gpu.encode(std::span<const float>(x)), CodecError);
  }
}

// Found by fuzz_topk: top-k values follow 1- to 5-byte indices, so they are unaligned; the
// conversion into another dtype read them as aligned floats (UBSan: misaligned load).
TEST(Codecs, TopKValuesAfterOddIndexBytesDecodeIntoEveryDtype) {
  SEEDED(rng);
  for (std::size_t n : {1, 3, 257, 70000}) {
    std::vector<float> x = gaussian(rng, n);
    CodecSpec spec = make(CodecKind::topk);
    spec.ratio = 0.3;
    const auto enc = encode(spec, Shape{long(n)}, std::span<const float>(x));
    std::vector<float> y(n);
    std::vector<BFloat16> b(n);
    std::vector<Half> h(n);
    decode(enc, std::span<float>(y));
    decode(enc, std::span<BFloat16>(b));
    decode(enc, std::span<Half>(h));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(b[i].bits, math::f32_to_bf16(y[i]));
      EXPECT_EQ(h[i].bits, math::f32_to_f16(y[i]));
    }
  }
}

TEST(Codecs, UnalignedEncodedBuffersAreRefused) {
  std::vector<float> x(8, 1.0f), y(8);
  const auto enc = encode(make(CodecKind::int8), Shape{8}, std::span<const float>(x));
  std::vector<std::byte> shifted(enc.size() + 1);
  std::memcpy(shifted.data() + 1, enc.data(), enc.size());
  EXPECT_THROW(decode(std::span(shifted).subspan(1), std::span<float>(y)), CodecError);
  EXPECT_THROW(encode(make(CodecKind::int8), Shape{8}, std::span<const float>(x),
                      std::span(shifted).subspan(1)),
               CodecError);
}
