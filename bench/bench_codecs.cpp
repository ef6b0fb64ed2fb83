// Codec throughput on one thread beside memcpy of the same buffer (the roofline of a
// streaming CPU kernel): bytes/s counts the fp32 input. `hgsim codecs --bench` prints the
// same comparison as a table; this is the Google Benchmark form of it.
#include <cstring>
#include <random>

#include <benchmark/benchmark.h>

#include "compress/codec.hpp"
#include "compress/codec_spec.hpp"

namespace {

using namespace hgsim::compress;

constexpr std::int64_t kElements = std::int64_t(1) << 22;  // 16 MiB of fp32

const std::vector<float>& input() {
  static const std::vector<float> x = [] {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal;
    std::vector<float> v(kElements);
    for (float& f : v) f = normal(rng);
    return v;
  }();
  return x;
}

CodecSpec spec_of(CodecKind kind, bool per_block = false) {
  CodecSpec s;
  s.kind = kind;
  s.block = (kind == CodecKind::int8 || kind == CodecKind::int4 || per_block) ? 128 : 0;
  if (per_block) s.scaling = Scaling::per_block;
  s.ratio = 0.01;
  s.rank = 4;
  return s;
}

void BM_Memcpy(benchmark::State& state) {
  const std::vector<float>& x = input();
  std::vector<float> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), x.size() * 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}
BENCHMARK(BM_Memcpy);

void BM_Encode(benchmark::State& state, CodecSpec spec) {
  const std::vector<float>& x = input();
  const Shape shape =
      spec.kind == CodecKind::powersgd ? Shape{kElements / 1024, 1024} : Shape{kElements};
  std::vector<std::byte> out(encoded_bytes(spec, shape, DType::fp32));
  for (auto _ : state) {
    encode(spec, shape, std::span<const float>(x), out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}

void BM_Decode(benchmark::State& state, CodecSpec spec) {
  const std::vector<float>& x = input();
  std::vector<float> y(x.size());
  const std::vector<std::byte> enc = encode(spec, Shape{kElements}, std::span<const float>(x));
  for (auto _ : state) {
    decode(enc, std::span<float>(y));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4);
}

BENCHMARK_CAPTURE(BM_Encode, fp16, spec_of(CodecKind::fp16));
BENCHMARK_CAPTURE(BM_Encode, bf16, spec_of(CodecKind::bf16));
BENCHMARK_CAPTURE(BM_Encode, fp8_e4m3, spec_of(CodecKind::fp8_e4m3));
BENCHMARK_CAPTURE(BM_Encode, fp8_e4m3_block128, spec_of(CodecKind::fp8_e4m3, true));
BENCHMARK_CAPTURE(BM_Encode, fp8_e5m2, spec_of(CodecKind::fp8_e5m2));
BENCHMARK_CAPTURE(BM_Encode, int8, spec_of(CodecKind::int8));
BENCHMARK_CAPTURE(BM_Encode, int4, spec_of(CodecKind::int4));
BENCHMARK_CAPTURE(BM_Encode, topk, spec_of(CodecKind::topk));
BENCHMARK_CAPTURE(BM_Encode, randomk, spec_of(CodecKind::randomk));
BENCHMARK_CAPTURE(BM_Encode, powersgd_rank4, spec_of(CodecKind::powersgd));
BENCHMARK_CAPTURE(BM_Decode, fp8_e4m3, spec_of(CodecKind::fp8_e4m3));
BENCHMARK_CAPTURE(BM_Decode, int8, spec_of(CodecKind::int8));
BENCHMARK_CAPTURE(BM_Decode, int4, spec_of(CodecKind::int4));

}  // namespace
