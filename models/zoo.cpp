#include "models/zoo.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include "core/document.hpp"

namespace hgsim::embedded {
extern const std::string_view model_zoo_yaml;  // models/zoo.yaml, embedded by CMake
}  // namespace hgsim::embedded

namespace hgsim::models {

using core::Diagnostics;
using core::Fields;
using core::ModelConfig;
using core::Node;

namespace {

constexpr const char* kZooFile = "models/zoo.yaml";

// ---- reading zoo.yaml -------------------------------------------------------------------

// Sets `target` from the required field `key` when it is present and converts.
template <class T, class Convert>
void read_required(Fields& f, std::string_view key, T& target, Convert convert) {
  if (const Node* n = f.required(key))
    if (auto v = convert(*n, f.path_of(key))) target = static_cast<T>(*v);
}

// One of `values`, spelled as core::to_string spells it in scenarios.
template <class Enum>
std::optional<Enum> read_enum(const Node& n, const std::string& path, Diagnostics& diags,
                              std::initializer_list<Enum> values, std::string_view what) {
  std::vector<std::string> names;
  for (Enum value : values) names.push_back(core::to_string(value));
  const auto chosen = core::as_choice(n, path, diags, names, what);
  if (!chosen) return std::nullopt;
  for (Enum value : values)
    if (core::to_string(value) == *chosen) return value;
  return std::nullopt;
}

std::vector<std::string> read_aliases(Fields& f, Diagnostics& diags) {
  std::vector<std::string> aliases;
  const Node* list = f.optional("aliases");
  if (list == nullptr) return aliases;
  const std::string path = f.path_of("aliases");
  if (!list->is_sequence()) {
    diags.error(list->where, path, "expected a list of names, found " + list->describe());
    return aliases;
  }
  for (std::size_t i = 0; i < list->items.size(); ++i)
    if (auto name = core::as_string(list->items[i], core::index_path(path, i), diags))
      aliases.push_back(*name);
  return aliases;
}

ModelConfig read_config(Fields& f, Diagnostics& diags) {
  const auto text = [&](const Node& n, const std::string& p) {
    return core::as_string(n, p, diags);
  };
  const auto count = [&](const Node& n, const std::string& p) {
    return core::as_positive_count(n, p, diags);
  };
  const auto integer = [&](const Node& n, const std::string& p) {
    return core::as_integer(n, p, diags);
  };
  const auto boolean = [&](const Node& n, const std::string& p) {
    return core::as_bool(n, p, diags);
  };
  const auto activation = [&](const Node& n, const std::string& p) {
    using core::Activation;
    return read_enum(n, p, diags, {Activation::gelu, Activation::swiglu, Activation::relu},
                     "activation");
  };
  const auto norm = [&](const Node& n, const std::string& p) {
    return read_enum(n, p, diags, {core::Norm::layernorm, core::Norm::rmsnorm}, "norm");
  };

  ModelConfig m;
  read_required(f, "name", m.name, text);
  read_required(f, "layers", m.layers, count);
  read_required(f, "hidden", m.hidden, count);
  read_required(f, "heads", m.heads, count);
  read_required(f, "kv_heads", m.kv_heads, count);
  read_required(f, "vocab", m.vocab, count);
  read_required(f, "ffn_hidden", m.ffn_hidden, count);
  read_required(f, "activation", m.activation, activation);
  read_required(f, "norm", m.norm, norm);
  read_required(f, "max_positions", m.max_positions, integer);
  read_required(f, "tied_embeddings", m.tied_embeddings, boolean);
  read_required(f, "bias", m.bias, boolean);
  read_required(f, "dropout", m.dropout, boolean);
  return m;
}

ZooEntry read_entry(const Node& node, const std::string& path, Diagnostics& diags) {
  const auto number = [&](const Node& n, const std::string& p) {
    return core::as_number(n, p, diags);
  };
  const auto text = [&](const Node& n, const std::string& p) {
    return core::as_string(n, p, diags);
  };
  Fields f(node, path, diags);
  ZooEntry entry;
  if (!f.ok()) return entry;
  entry.config = read_config(f, diags);
  read_required(f, "published_params", entry.published_params, number);
  read_required(f, "published_params_rounding", entry.published_params_rounding, number);
  read_required(f, "source", entry.source, text);
  entry.aliases = read_aliases(f, diags);
  f.reject_unknown();
  return entry;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Every name and alias must pick one model, whatever its case.
void check_unique_names(const std::vector<ZooEntry>& entries, const std::string& file,
                        Diagnostics& diags) {
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::vector<std::string> names = entries[i].aliases;
    names.push_back(entries[i].config.name);
    for (const std::string& name : names) {
      const std::string key = lowercase(name);
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        diags.error({file, 0, 0}, core::index_path("models", i),
                    "the name '" + core::excerpt(name) + "' is used twice");
      seen.push_back(key);
    }
  }
}

// ---- checking an inline model -------------------------------------------------------

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The valid choices nearest an invalid `target`: the two largest divisors of n below it
// and the two smallest above it, ascending.
std::vector<int> divisors_near(int n, int target) {
  const std::vector<int> all = divisors(n);
  const auto split = std::lower_bound(all.begin(), all.end(), target);
  const auto first = split - std::min<std::ptrdiff_t>(2, split - all.begin());
  const auto last = split + std::min<std::ptrdiff_t>(2, all.end() - split);
  return std::vector<int>(first, last);
}

std::string join(const std::vector<int>& values, std::string_view separator = ", ") {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? std::string(separator) : std::string()) + std::to_string(values[i]);
  return out;
}

// The multiples of `step` just below and above `value` ("2496 or 2528").
std::string multiples_around(int value, int step) {
  const int below = value / step * step;
  const int above = below + step;
  if (below <= 0) return std::to_string(above);
  return std::to_string(below) + " or " + std::to_string(above);
}

bool already_reported(const Diagnostics& diags, const std::string& key_path) {
  const auto& all = diags.all();
  return std::any_of(all.begin(), all.end(), [&](const core::Diagnostic& d) {
    return d.severity == core::Severity::error && d.key_path == key_path;
  });
}

// Sizes must be positive. core reports a non-positive count it parsed; a size left at 0
// because it was missing or invalid was reported there too, so report only the rest.
bool check_positive_sizes(const ModelConfig& m, const core::Scenario& s, Diagnostics& diags) {
  // (key, value, the key its default comes from): kv_heads defaults to heads and ffn_hidden
  // to 4 x hidden, so a refused heads or hidden is not reported again as their 0.
  const std::vector<std::tuple<std::string, int, std::string>> sizes = {
      {"layers", m.layers, ""}, {"hidden", m.hidden, ""},
      {"heads", m.heads, ""},   {"kv_heads", m.kv_heads, "heads"},
      {"vocab", m.vocab, ""},   {"ffn_hidden", m.ffn_hidden, "hidden"}};
  bool ok = true;
  for (const auto& [key, value, source] : sizes) {
    if (value > 0) continue;
    ok = false;
    const std::string path = core::child_path("model", key);
    if (already_reported(diags, path)) continue;
    if (!source.empty() && !s.locations.count(path) &&
        already_reported(diags, core::child_path("model", source)))
      continue;
    diags.error(s.where(path), path, key + " must be at least 1, found " + std::to_string(value));
  }
  if (m.max_positions < 0) {
    ok = false;
    diags.error(
        s.where("model.max_positions"), "model.max_positions",
        "max_positions must be 0 (rotary) or positive, found " + std::to_string(m.max_positions));
  }
  return ok;
}

// Multi-head attention splits the hidden size evenly over the heads.
bool check_heads_divide_hidden(const ModelConfig& m, const core::Scenario& s, Diagnostics& diags) {
  if (m.hidden % m.heads == 0) return true;
  diags.error(
      s.where("model.heads"), "model.heads",
      std::to_string(m.heads) + " heads do not divide hidden size " + std::to_string(m.hidden),
      "heads must divide hidden: near " + std::to_string(m.heads) + ", " +
          join(divisors_near(m.hidden, m.heads)) + "; or keep " + std::to_string(m.heads) +
          " heads with hidden " + multiples_around(m.hidden, m.heads));
  return false;
}

// Grouped-query attention shares each key/value head among heads / kv_heads query heads.
bool check_kv_heads_divide_heads(const ModelConfig& m, const core::Scenario& s,
                                 Diagnostics& diags) {
  if (m.heads % m.kv_heads == 0) return true;
  diags.error(
      s.where("model.kv_heads"), "model.kv_heads",
      std::to_string(m.kv_heads) + " kv_heads do not divide " + std::to_string(m.heads) + " heads",
      "kv_heads must divide heads (" + std::to_string(m.heads) + "): near " +
          std::to_string(m.kv_heads) + ", " + join(divisors_near(m.heads, m.kv_heads)) +
          " (kv_heads = heads is plain multi-head attention)");
  return false;
}

bool check_inline_model(const ModelConfig& m, const core::Scenario& s, Diagnostics& diags) {
  if (!check_positive_sizes(m, s, diags)) return false;
  const bool heads_ok = check_heads_divide_hidden(m, s, diags);
  const bool kv_ok = check_kv_heads_divide_heads(m, s, diags);
  return heads_ok && kv_ok;
}

std::optional<ModelConfig> model_from_zoo(const std::string& name, const core::Scenario& s,
                                          Diagnostics& diags) {
  if (const ZooEntry* entry = find_model(name)) return entry->config;
  const std::vector<std::string> names = model_names();
  diags.error(s.where("model"), "model", "unknown model '" + core::excerpt(name) + "'",
              core::did_you_mean(name, names) +
                  " (or describe the model inline: a mapping with layers, hidden, heads, vocab)");
  return std::nullopt;
}

// Learned position embeddings have one row per position: a longer sequence has none.
void check_positions_cover_sequence(const ModelConfig& m, const core::Scenario& s,
                                    Diagnostics& diags) {
  const int seq_len = s.training.seq_len;
  if (m.max_positions <= 0 || seq_len <= m.max_positions) return;
  diags.error(s.where("training.seq_len"), "training.seq_len",
              "seq_len " + std::to_string(seq_len) + " is longer than the " +
                  std::to_string(m.max_positions) + " learned positions of model '" + m.name + "'",
              "use seq_len <= " + std::to_string(m.max_positions) +
                  ", or a model with more positions or rotary positions (e.g. a LLaMA model)");
}

// ---- checking a plan against the model ------------------------------------------------

// Where a key path of the plan was written: in the scenario for an inline plan
// ("strategy..."); a plan file has no positions in the scenario (as core::check_plan).
core::SourceLocation plan_location(const core::Scenario& s, const std::string& plan_path,
                                   const std::string& key_path) {
  if (plan_path == "strategy") return s.where(key_path);
  return {};
}

std::string stage_path(const std::string& plan_path, std::size_t pipeline, std::size_t stage) {
  const std::string pipelines = core::child_path(plan_path, "pipelines");
  const std::string stages = core::child_path(core::index_path(pipelines, pipeline), "stages");
  return core::index_path(stages, stage);
}

// Megatron-LM gives each tensor-parallel rank whole heads (query and key/value) and an
// equal column slice of the MLP, so t must divide heads, kv_heads and ffn_hidden.
void check_tp_divides_model(const core::Stage& stage, const ModelConfig& m,
                            core::SourceLocation where, const std::string& path,
                            Diagnostics& diags) {
  const int tp = stage.tp;
  if (tp <= 0) return;  // core reports non-positive counts
  std::vector<std::string> failed;
  if (m.heads % tp != 0) failed.push_back("heads (" + std::to_string(m.heads) + ")");
  if (m.kv_heads % tp != 0) failed.push_back("kv_heads (" + std::to_string(m.kv_heads) + ")");
  if (m.ffn_hidden % tp != 0) failed.push_back("ffn_hidden (" + std::to_string(m.ffn_hidden) + ")");
  if (failed.empty()) return;
  std::string what;
  for (std::size_t i = 0; i < failed.size(); ++i)
    what += (i == 0 ? "" : i + 1 == failed.size() ? " and " : ", ") + failed[i];
  const int common = std::gcd(std::gcd(m.heads, m.kv_heads), m.ffn_hidden);
  diags.error(
      where, path,
      "tp " + std::to_string(tp) + " does not divide " + what + " of model '" + m.name + "'",
      "tensor parallelism splits whole heads and the MLP evenly; valid tp for this "
      "model: " +
          join(divisors(common)));
}

// Megatron-LM's sequence parallelism splits the sequence evenly over the tp group: each of
// the stage's cp context ranks' seq_len / cp tokens.
void check_tp_divides_sequence(const core::Stage& stage, int seq_len, core::SourceLocation where,
                               const std::string& path, Diagnostics& diags) {
  if (stage.tp <= 0 || stage.cp <= 0 || seq_len <= 0 || seq_len % stage.cp != 0) return;
  const int tokens = seq_len / stage.cp;
  if (tokens % stage.tp == 0) return;
  const std::string what = stage.cp > 1 ? "seq_len / cp = " + std::to_string(tokens)
                                        : "training.seq_len " + std::to_string(seq_len);
  diags.error(where, path,
              "with sequence_parallel, tp " + std::to_string(stage.tp) + " must divide " + what,
              "use a tp that divides " + std::to_string(tokens) + ", or sequence_parallel: false");
}

// The interleaved schedule cuts each stage into virtual_stages chunks of equal layers.
void check_layers_split_into_chunks(const core::Stage& stage, int virtual_stages,
                                    core::SourceLocation where, const std::string& path,
                                    Diagnostics& diags) {
  if (virtual_stages <= 0 || stage.layers <= 0 || stage.layers % virtual_stages == 0) return;
  diags.error(where, path,
              std::to_string(stage.layers) + " layers do not split into " +
                  std::to_string(virtual_stages) + " equal model chunks (virtual_stages)",
              "with the interleaved schedule each stage's layers must be a multiple of "
              "virtual_stages, e.g. " +
                  multiples_around(stage.layers, virtual_stages));
}

}  // namespace

// ---- public API -------------------------------------------------------------------------

std::vector<ZooEntry> parse_zoo(std::string_view yaml, const std::string& file) {
  Diagnostics diags;
  std::vector<ZooEntry> entries;
  const std::optional<Node> document = core::parse_yaml(yaml, file, diags);
  if (document) {
    Fields root(*document, "", diags);
    if (const Node* list = root.required("models"); list != nullptr && list->is_sequence()) {
      for (std::size_t i = 0; i < list->items.size(); ++i)
        entries.push_back(read_entry(list->items[i], core::index_path("models", i), diags));
    } else if (list != nullptr) {
      diags.error(list->where, "models", "expected a list of models, found " + list->describe());
    }
    root.reject_unknown();
  }
  check_unique_names(entries, file, diags);
  if (!document || diags.has_errors() || entries.empty())
    throw std::logic_error("the model zoo " + file + " is broken:\n" + diags.format());
  return entries;
}

const std::vector<ZooEntry>& zoo() {
  static const std::vector<ZooEntry> entries = parse_zoo(embedded::model_zoo_yaml, kZooFile);
  return entries;
}

const ZooEntry* find_model(std::string_view name) {
  const std::string wanted = lowercase(name);
  for (const ZooEntry& entry : zoo()) {
    if (lowercase(entry.config.name) == wanted) return &entry;
    for (const std::string& alias : entry.aliases)
      if (lowercase(alias) == wanted) return &entry;
  }
  return nullptr;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ZooEntry& entry : zoo()) names.push_back(entry.config.name);
  return names;
}

std::optional<ModelConfig> resolve_model(const core::Scenario& s, Diagnostics& diags) {
  std::optional<ModelConfig> model;
  if (s.model.zoo_name) {
    model = model_from_zoo(*s.model.zoo_name, s, diags);
  } else if (s.model.inline_config) {
    if (check_inline_model(*s.model.inline_config, s, diags)) model = s.model.inline_config;
  } else if (!already_reported(diags, "model")) {
    diags.error(s.where("model"), "model", "the scenario names no model",
                "a zoo name (e.g. llama2-7b) or a mapping with layers, hidden, heads, vocab");
  }
  // A sequence too long for the model is training's problem: reported, model still usable.
  if (model) check_positions_cover_sequence(*model, s, diags);
  return model;
}

void check_plan_against_model(const core::Plan& plan, const ModelConfig& m, const core::Scenario& s,
                              const std::string& path, Diagnostics& diags) {
  if (m.heads <= 0 || m.kv_heads <= 0 || m.ffn_hidden <= 0) return;  // resolve_model reported it
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const core::Pipeline& pipeline = plan.pipelines[p];
    for (std::size_t i = 0; i < pipeline.stages.size(); ++i) {
      const core::Stage& stage = pipeline.stages[i];
      const std::string tp_path = core::child_path(stage_path(path, p, i), "tp");
      const core::SourceLocation tp_where = plan_location(s, path, tp_path);
      check_tp_divides_model(stage, m, tp_where, tp_path, diags);
      if (plan.sequence_parallel)
        check_tp_divides_sequence(stage, s.training.seq_len, tp_where, tp_path, diags);
      if (plan.schedule != core::Schedule::interleaved) continue;
      const std::string layers_path = core::child_path(stage_path(path, p, i), "layers");
      check_layers_split_into_chunks(stage, plan.virtual_stages,
                                     plan_location(s, path, layers_path), layers_path, diags);
    }
  }
}

}  // namespace hgsim::models
