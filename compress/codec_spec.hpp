// Codecs as the scenario names them, with typed and checked parameters.
//
// This is the codec *catalog*: names, parameters, defaults and their validation. The
// implementations (encode/decode, exact encoded sizes, codec time) live beside it in
// compress/ and take a CodecSpec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/scenario.hpp"

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
  std::uint64_t seed = 0;                 // randomk
  CodecKind fallback = CodecKind::none;   // powersgd: codec for tensors that are not 2-D
  bool operator==(const CodecSpec&) const = default;
};

std::string to_string(CodecKind kind);  // the scenario spelling: "fp8-e4m3", "topk", ...
std::vector<std::string> codec_names();

// "int8 (block 128)", "topk (ratio 0.01, error feedback)".
std::string describe(const CodecSpec& spec);

// Types and checks a codec from the scenario. Problems are reported at `path`
// ("compression.wan_gradients") and its children, located through `s.where`.
std::optional<CodecSpec> resolve_codec(const core::CodecConfig& config, const core::Scenario& s,
                                       const std::string& path, core::Diagnostics& diags);

struct CompressionSpecs {
  CodecSpec wan_activations;
  CodecSpec wan_gradients;
};

// Both traffic classes of the scenario's `compression:` policy.
std::optional<CompressionSpecs> resolve_policy(const core::Scenario& s, core::Diagnostics& diags);

}  // namespace hgsim::compress
