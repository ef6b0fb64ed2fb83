#include "compress/codec_cost.hpp"

#include <algorithm>
#include <cmath>

#include "compress/codec.hpp"

namespace hgsim::compress {

namespace {

struct Work {
  double bytes = 0;
  double flops = 0;
};

core::Seconds roofline(const Work& w, const kernels::GpuSpec& device) {
  const double memory = w.bytes / (kMemoryEfficiency * device.memory_bandwidth.value());
  const double math =
      device.peak_fp32 ? w.flops / (kFlopEfficiency * device.peak_fp32->value()) : 0.0;
  return core::Seconds(kLaunchSeconds + std::max(memory, math));
}

}  // namespace

DType storage_dtype(core::Precision p) {
  switch (p) {
    case core::Precision::fp32:
    case core::Precision::tf32:
      return DType::fp32;
    case core::Precision::fp16:
      return DType::fp16;
    case core::Precision::bf16:
    case core::Precision::fp8:
      return DType::bf16;
  }
  return DType::fp32;
}

std::vector<std::int64_t> wan_codec_shape(double elements, std::int64_t columns) {
  columns = std::max<std::int64_t>(columns, 1);
  const auto rows = static_cast<std::int64_t>(std::ceil(elements / static_cast<double>(columns)));
  return {std::max<std::int64_t>(rows, 1), columns};
}

TransferCoding code_transfer(const CodecSpec& requested, const std::vector<std::int64_t>& shape,
                             core::Precision precision, const kernels::GpuSpec& device) {
  const DType dtype = storage_dtype(precision);
  const double n = static_cast<double>(element_count(shape));
  const double raw = n * static_cast<double>(element_size(dtype));
  const CodecSpec spec = effective_spec(requested, shape);
  if (spec.kind == CodecKind::none)
    return {core::Bytes(raw), core::Seconds(0), core::Seconds(0), "estimated"};

  const double wire = static_cast<double>(encoded_bytes(spec, shape, dtype));
  Work enc{raw + wire, 0}, dec{wire + raw, 0};
  switch (spec.kind) {
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      if (spec.scaling == Scaling::per_tensor) enc.bytes += raw;
      break;
    case CodecKind::topk:
      enc.bytes = 5 * raw + wire;
      break;
    case CodecKind::randomk:
      enc.bytes = 32 * static_cast<double>(kept_elements(spec.ratio, element_count(shape))) + wire;
      break;
    case CodecKind::powersgd: {
      const double cols = static_cast<double>(shape.back()), rows = n / cols;
      const double r = effective_rank(spec.rank, shape);
      enc = {2 * raw + wire, 4 * rows * cols * r + 4 * rows * r * r};
      dec = {wire + raw, 2 * rows * cols * r};
      break;
    }
    default:
      break;
  }
  if (spec.error_feedback) {
    enc.bytes += 12 * n + dec.bytes;
    enc.flops += dec.flops;
  }
  return {core::Bytes(wire), roofline(enc, device), roofline(dec, device), "estimated"};
}

}  // namespace hgsim::compress
