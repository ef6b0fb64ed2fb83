// Writes the seed corpora of the fuzz targets: for every codec, valid encodings of small
// tensors (several dtypes, shapes, parameters) and a few raw inputs for the encode path.
// Run once after a format change: hgsim_fuzz_seeds fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "compress/codec.hpp"

using namespace hgsim::compress;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 1;
  }
  const std::filesystem::path root(argv[1]);
  std::mt19937_64 rng(20261129);
  std::normal_distribution<float> normal;
  const char* names[] = {"none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2",
                         "int8", "int4", "topk", "randomk",  "powersgd"};
  for (int id = 0; id < 10; ++id) {
    const std::filesystem::path dir = root / names[id];
    std::filesystem::create_directories(dir);
    int count = 0;
    auto write = [&](const void* data, std::size_t size) {
      std::ofstream out(dir / ("seed-" + std::to_string(count++)), std::ios::binary);
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    };
    for (const Shape& shape : {Shape{0}, Shape{1}, Shape{5}, Shape{6, 4}, Shape{3, 17}}) {
      for (int variant = 0; variant < 2; ++variant) {
        CodecSpec spec;
        spec.kind = static_cast<CodecKind>(id);
        spec.block = variant ? 4 : 16;
        spec.scaling = variant ? Scaling::per_block : Scaling::per_tensor;
        spec.stochastic_rounding = variant;
        spec.ratio = variant ? 0.5 : 0.1;
        spec.rank = variant ? 2 : 1;
        spec.fallback = CodecKind::int8;
        const std::size_t n = element_count(shape);
        std::vector<float> x(n);
        for (float& v : x) v = normal(rng);
        if (n > 2) x[1] = variant ? INFINITY : NAN;
        std::vector<BFloat16> b(n);
        convert(std::span<const float>(x), std::span<BFloat16>(b));
        const auto enc = variant ? encode(spec, shape, std::span<const BFloat16>(b), 3)
                                 : encode(spec, shape, std::span<const float>(x), 3);
        write(enc.data(), enc.size());
      }
    }
    for (int raw = 0; raw < 3; ++raw) {  // encode-path inputs: 4 parameter bytes + elements
      std::vector<std::uint8_t> bytes(4 + 4 * 24 * (raw + 1));
      for (auto& byte : bytes) byte = static_cast<std::uint8_t>(rng());
      bytes[0] = static_cast<std::uint8_t>(raw * 70);
      write(bytes.data(), bytes.size());
    }
  }
  return 0;
}
