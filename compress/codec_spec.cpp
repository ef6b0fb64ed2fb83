#include "compress/codec_spec.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <sstream>

namespace hgsim::compress {
namespace {

const std::vector<std::pair<CodecKind, std::string>>& codec_table() {
  static const std::vector<std::pair<CodecKind, std::string>> table{
      {CodecKind::none, "none"},         {CodecKind::fp16, "fp16"},
      {CodecKind::bf16, "bf16"},         {CodecKind::fp8_e4m3, "fp8-e4m3"},
      {CodecKind::fp8_e5m2, "fp8-e5m2"}, {CodecKind::int8, "int8"},
      {CodecKind::int4, "int4"},         {CodecKind::topk, "topk"},
      {CodecKind::randomk, "randomk"},   {CodecKind::powersgd, "powersgd"},
  };
  return table;
}

std::optional<CodecKind> kind_of(const std::string& name) {
  for (const auto& [kind, n] : codec_table())
    if (n == name) return kind;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> codec_parameters(CodecKind kind) {
  switch (kind) {
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      return {"scaling", "block"};
    case CodecKind::int8:
    case CodecKind::int4:
      return {"block", "stochastic_rounding"};
    case CodecKind::topk:
      return {"ratio", "error_feedback"};
    case CodecKind::randomk:
      return {"ratio", "error_feedback", "seed"};
    case CodecKind::powersgd:
      return {"rank", "error_feedback", "warm_start", "fallback"};
    default:
      return {};
  }
}

// Defaults: block 128 (as in LLM.int8/bitsandbytes block-wise quantisation), top-k and
// random-k send 1% with error feedback, PowerSGD rank 4 with error feedback and warm start
// (Vogels et al. 2019), non-2-D tensors sent uncompressed.
CodecSpec default_spec(CodecKind kind) {
  CodecSpec spec;
  spec.kind = kind;
  switch (kind) {
    case CodecKind::int8:
    case CodecKind::int4:
      spec.block = 128;
      break;
    case CodecKind::topk:
    case CodecKind::randomk:
      spec.ratio = 0.01;
      spec.error_feedback = true;
      break;
    case CodecKind::powersgd:
      spec.rank = 4;
      spec.error_feedback = true;
      spec.warm_start = true;
      break;
    default:
      break;
  }
  return spec;
}

namespace {

class ParamReader {
 public:
  ParamReader(const std::string& path, core::Diagnostics& d) : path_(path), d_(d) {}

  void read(const std::string& key, const core::Node& value, CodecSpec& spec) {
    const std::string p = core::child_path(path_, key);
    if (key == "block") {
      if (auto v = core::as_positive_count(value, p, d_)) {
        spec.block = *v;
        if (spec.kind == CodecKind::int4 && *v % 2 != 0)
          d_.error(value.where, p,
                   "int4 packs two values per byte: the block must be even, found " +
                       core::excerpt(value.text));
      }
    } else if (key == "scaling") {
      if (auto v = core::as_choice(value, p, d_, {"per-tensor", "per-block"}, "scaling"))
        spec.scaling = *v == "per-block" ? Scaling::per_block : Scaling::per_tensor;
    } else if (key == "stochastic_rounding") {
      if (auto v = core::as_bool(value, p, d_)) spec.stochastic_rounding = *v;
    } else if (key == "ratio") {
      if (auto v = core::as_number(value, p, d_)) {
        if (!(*v >= 1e-6 && *v <= 1))  // below 1e-6 a decoder takes the buffer as forged
          d_.error(value.where, p,
                   "ratio is the fraction of elements sent: it must be in [1e-6, 1], found " +
                       value.text);
        else
          spec.ratio = *v;
      }
    } else if (key == "error_feedback") {
      if (auto v = core::as_bool(value, p, d_)) spec.error_feedback = *v;
    } else if (key == "warm_start") {
      if (auto v = core::as_bool(value, p, d_)) spec.warm_start = *v;
    } else if (key == "rank") {
      if (auto v = core::as_positive_count(value, p, d_)) spec.rank = *v;
    } else if (key == "seed") {
      if (auto v = core::as_integer(value, p, d_)) {
        if (*v < 0)
          d_.error(value.where, p,
                   "a seed is zero or positive, found " + core::excerpt(value.text));
        else
          spec.seed = static_cast<std::uint64_t>(*v);
      }
    } else if (key == "fallback") {
      if (auto v = core::as_choice(value, p, d_,
                                   {"none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4"},
                                   "fallback codec"))
        spec.fallback = *kind_of(*v);
    }
  }

 private:
  const std::string& path_;
  core::Diagnostics& d_;
};

}  // namespace

std::string to_string(CodecKind kind) {
  for (const auto& [k, name] : codec_table())
    if (k == kind) return name;
  return "?";
}

std::optional<CodecKind> codec_kind(const std::string& name) {
  return kind_of(name);
}

std::vector<std::string> codec_names() {
  std::vector<std::string> names;
  for (const auto& entry : codec_table()) names.push_back(entry.second);
  return names;
}

std::string describe(const CodecSpec& spec) {
  std::ostringstream out;
  out << to_string(spec.kind);
  std::vector<std::string> parts;
  if (spec.kind == CodecKind::fp8_e4m3 || spec.kind == CodecKind::fp8_e5m2)
    parts.push_back(spec.scaling == Scaling::per_block
                        ? "per-block scale, block " + std::to_string(spec.block)
                        : "per-tensor scale");
  if (spec.kind == CodecKind::int8 || spec.kind == CodecKind::int4) {
    parts.push_back("block " + std::to_string(spec.block));
    if (spec.stochastic_rounding) parts.push_back("stochastic rounding");
  }
  if (spec.kind == CodecKind::topk || spec.kind == CodecKind::randomk)
    parts.push_back("ratio " + core::shortest_decimal(spec.ratio));
  if (spec.kind == CodecKind::powersgd) parts.push_back("rank " + std::to_string(spec.rank));
  if (spec.error_feedback) parts.push_back("error feedback");
  if (!parts.empty()) {
    out << " (";
    for (std::size_t i = 0; i < parts.size(); ++i) out << (i ? ", " : "") << parts[i];
    out << ")";
  }
  return out.str();
}

std::optional<CodecSpec> resolve_codec(const core::CodecConfig& config, const core::Scenario& s,
                                       const std::string& path, core::Diagnostics& diags) {
  auto kind = kind_of(config.codec);
  if (!kind) {
    const bool short_form = config.params.empty();
    std::string where_path = short_form ? path : core::child_path(path, "codec");
    diags.error(s.where(where_path), where_path,
                "unknown codec '" + core::excerpt(config.codec) + "'",
                core::did_you_mean(config.codec, codec_names()));
    return std::nullopt;
  }
  CodecSpec spec = default_spec(*kind);
  ParamReader reader(path, diags);
  const std::vector<std::string> accepted = codec_parameters(*kind);
  const int errors_before = diags.error_count();
  for (const auto& [key, value] : config.params) {
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      std::string p = core::child_path(path, key);
      diags.error(s.where(p), p,
                  "codec '" + core::excerpt(config.codec) + "' has no parameter '" +
                      core::excerpt(key) + "'",
                  accepted.empty() ? "it takes none" : core::did_you_mean(key, accepted));
      continue;
    }
    reader.read(key, value, spec);
  }
  if (spec.scaling == Scaling::per_block && spec.block == 0) spec.block = 128;
  if (spec.scaling == Scaling::per_tensor && spec.block != 0 &&
      (spec.kind == CodecKind::fp8_e4m3 || spec.kind == CodecKind::fp8_e5m2)) {
    std::string p = core::child_path(path, "block");
    diags.error(s.where(p), p, "a block size needs per-block scaling", "add scaling: per-block");
  }
  if (diags.error_count() != errors_before) return std::nullopt;
  return spec;
}

std::optional<CodecSpec> parse_codec_spec(const core::Node& n, const std::string& path,
                                          core::Diagnostics& diags) {
  const auto config = core::parse_codec(n, path, diags);
  if (!config) return std::nullopt;
  return resolve_codec(*config, core::Scenario{}, path, diags);
}

core::Json codec_to_json(const CodecSpec& spec) {
  core::Json out{{"codec", to_string(spec.kind)}};
  for (const std::string& key : codec_parameters(spec.kind)) {
    if (key == "scaling")
      out[key] = spec.scaling == Scaling::per_block ? "per-block" : "per-tensor";
    if (key == "block" && (spec.block > 0)) out[key] = spec.block;
    if (key == "stochastic_rounding") out[key] = spec.stochastic_rounding;
    if (key == "ratio") out[key] = spec.ratio;
    if (key == "error_feedback") out[key] = spec.error_feedback;
    if (key == "seed") out[key] = spec.seed;
    if (key == "rank") out[key] = spec.rank;
    if (key == "warm_start") out[key] = spec.warm_start;
    if (key == "fallback") out[key] = to_string(spec.fallback);
  }
  return out;
}

std::optional<CompressionSpecs> resolve_policy(const core::Scenario& s, core::Diagnostics& diags) {
  auto activations =
      resolve_codec(s.compression.wan_activations, s, "compression.wan_activations", diags);
  auto gradients =
      resolve_codec(s.compression.wan_gradients, s, "compression.wan_gradients", diags);
  if (activations && activations->kind == CodecKind::powersgd)
    diags.error(s.where("compression.wan_activations"), "compression.wan_activations",
                "PowerSGD compresses gradients (it needs a matrix that persists across steps), not "
                "activations",
                "use none, fp16, bf16, fp8-e4m3, fp8-e5m2, int8, int4, topk or randomk");
  if (!activations || !gradients) return std::nullopt;
  return CompressionSpecs{*activations, *gradients};
}

}  // namespace hgsim::compress
