// The codec parameters as plain types, without the scenario machinery: what encode and
// decode need (compress/codec.hpp), so that the codecs build on their own (the fuzz targets,
// a training run's extension). compress/codec_spec.hpp reads them from a scenario.
#pragma once

#include <cstdint>

namespace hgsim::compress {

enum class CodecKind { none, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int4, topk, randomk, powersgd };

enum class Scaling { per_tensor, per_block };

struct CodecSpec {
  CodecKind kind = CodecKind::none;
  Scaling scaling = Scaling::per_tensor;  // fp8: one scale per tensor or per block
  int block = 0;                          // elements per scale block (int8/int4, fp8 per-block)
  bool stochastic_rounding = false;       // int8/int4
  double ratio = 0;                       // topk/randomk: fraction of elements sent, in (0, 1]
  bool error_feedback = false;            // topk/randomk/powersgd
  int rank = 0;                           // powersgd
  bool warm_start = false;                // powersgd: reuse last step's Q
  std::uint64_t seed = 0;                 // randomk; also stochastic rounding, PowerSGD Q0
  CodecKind fallback = CodecKind::none;   // powersgd: codec for tensors that are not 2-D
  bool operator==(const CodecSpec&) const = default;
};

}  // namespace hgsim::compress
