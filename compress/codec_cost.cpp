#include "compress/codec_cost.hpp"

#include <algorithm>
#include <cmath>

namespace hgsim::compress {

namespace {

double element_count(const std::vector<std::int64_t>& shape) {
  double n = 1;
  for (auto d : shape) n *= static_cast<double>(d);
  return n;
}

// Bytes on the wire. Stand-in until the codec implementations give exact sizes: payload
// plus one fp32 scale per block, 4-byte indices for top-k.
double wire_bytes(const CodecSpec& spec, const std::vector<std::int64_t>& shape,
                  core::Precision dtype) {
  const double n = element_count(shape);
  const double block = spec.block > 0 ? spec.block : n;
  const double scales = n > 0 ? std::ceil(n / block) * 4 : 0;
  switch (spec.kind) {
    case CodecKind::none:
      return n * core::element_bytes(dtype);
    case CodecKind::fp16:
    case CodecKind::bf16:
      return 2 * n;
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      return n + (spec.scaling == Scaling::per_block ? scales : 4);
    case CodecKind::int8:
      return n + scales;
    case CodecKind::int4:
      return std::ceil(n / 2) + scales;
    case CodecKind::topk:
      return std::ceil(spec.ratio * n) * (core::element_bytes(dtype) + 4);
    case CodecKind::randomk:
      return std::ceil(spec.ratio * n) * core::element_bytes(dtype) + 8;
    case CodecKind::powersgd: {
      const double cols = shape.empty() ? 1 : static_cast<double>(shape.back());
      const double rows = cols > 0 ? n / cols : 0;
      const double rank = std::min<double>(spec.rank, std::min(rows, cols));
      return (rows + cols) * rank * core::element_bytes(dtype);
    }
  }
  return n * core::element_bytes(dtype);
}

}  // namespace

TransferCoding code_transfer(const CodecSpec& spec, const std::vector<std::int64_t>& shape,
                             core::Precision dtype, const kernels::GpuSpec& device) {
  const double raw = element_count(shape) * core::element_bytes(dtype);
  const double wire = wire_bytes(spec, shape, dtype);
  TransferCoding coding{core::Bytes(wire), core::Seconds(0), core::Seconds(0), "estimated"};
  if (spec.kind == CodecKind::none) return coding;
  // Stand-in: codecs are memory-bound kernels reading the input and writing the output at
  // 70% of the datasheet memory bandwidth.
  const auto bandwidth = 0.7 * device.memory_bandwidth;
  coding.encode = core::Bytes(raw + wire) / bandwidth;
  coding.decode = core::Bytes(raw + wire) / bandwidth;
  return coding;
}

}  // namespace hgsim::compress
