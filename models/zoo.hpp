// The model zoo (models/zoo.yaml, compiled into the library) and the resolution of a
// scenario's `model:` into a checked ModelConfig.
//
// core/ parses `model:` as either a zoo name or an inline mapping and checks its types;
// this file owns the names (is there such a model?) and the architecture's arithmetic
// (do the heads divide the hidden size?), and checks a plan's split against the model
// (does the tensor-parallel degree divide the heads?). Every problem is reported with its
// key path and file:line:column through Scenario::where.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/scenario.hpp"

namespace hgsim::models {

struct ZooEntry {
  core::ModelConfig config;
  double published_params = 0;           // the count the source gives
  double published_params_rounding = 0;  // unit it was rounded to; 0: an exact count
  std::string source;                    // paper or released checkpoint
  std::vector<std::string> aliases;      // other accepted names
};

// Reads a zoo document (the format of models/zoo.yaml). A zoo is part of the program, not
// user input: anything wrong throws std::logic_error carrying every diagnostic.
std::vector<ZooEntry> parse_zoo(std::string_view yaml, const std::string& file);

// Every zoo model of models/zoo.yaml (compiled in), in file order, parsed once.
const std::vector<ZooEntry>& zoo();

// The entry whose name or alias equals `name`, ignoring case; nullptr if none.
const ZooEntry* find_model(std::string_view name);

// The canonical names, in file order (aliases left out).
std::vector<std::string> model_names();

// The scenario's model as a checked ModelConfig: a zoo entry by name, or the inline
// description after checking its arithmetic (positive sizes, heads divide hidden, kv_heads
// divide heads). Returns nullopt when the model is unknown or its description is wrong.
// Also reports (at "training.seq_len") a sequence longer than the model's learned position
// embeddings; the model is still returned then, so that later checks can run.
std::optional<core::ModelConfig> resolve_model(const core::Scenario& s, core::Diagnostics& diags);

// Checks a plan's split against the model: every stage's tp divides heads, kv_heads and
// ffn_hidden (Megatron-LM splits attention by heads and the MLP by columns of ffn_hidden;
// with sequence parallelism tp must also divide seq_len); for the interleaved schedule
// every stage's layers are a multiple of plan.virtual_stages. `path` prefixes key paths
// ("strategy" for an inline plan, "" for a plan file).
void check_plan_against_model(const core::Plan& plan, const core::ModelConfig& m,
                              const core::Scenario& s, const std::string& path,
                              core::Diagnostics& diags);

}  // namespace hgsim::models
