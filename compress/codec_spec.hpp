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
std::optional<CodecKind> codec_kind(const std::string& name);  // nullopt: no such codec

// The parameters a codec accepts (scenario keys besides `codec`), and its defaults.
std::vector<std::string> codec_parameters(CodecKind kind);
CodecSpec default_spec(CodecKind kind);

// "int8 (block 128)", "topk (ratio 0.01, error feedback)".
std::string describe(const CodecSpec& spec);

// Types and checks a codec from the scenario. Problems are reported at `path`
// ("compression.wan_gradients") and its children, located through `s.where`.
std::optional<CodecSpec> resolve_codec(const core::CodecConfig& config, const core::Scenario& s,
                                       const std::string& path, core::Diagnostics& diags);

// A codec outside a scenario (`int8`, `{codec: topk, ratio: 0.01}`): parsed and checked as
// resolve_codec does; problems at `path`.
std::optional<CodecSpec> parse_codec_spec(const core::Node& n, const std::string& path,
                                          core::Diagnostics& diags);

// The scenario form of a typed codec with every parameter it accepts ({codec: topk, ratio:
// 0.01, error_feedback: true}); parse_codec_spec reads it back to the same spec.
core::Json codec_to_json(const CodecSpec& spec);

struct CompressionSpecs {
  CodecSpec wan_activations;
  CodecSpec wan_gradients;
};

// Both traffic classes of the scenario's `compression:` policy.
std::optional<CompressionSpecs> resolve_policy(const core::Scenario& s, core::Diagnostics& diags);

}  // namespace hgsim::compress
