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

#include "compress/codec_types.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"

namespace hgsim::compress {

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
