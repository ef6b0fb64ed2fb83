// The whole check of a scenario: core's structure and plan arithmetic, then the names
// and rules other folders own (the model zoo, the GPU catalog, the codecs), then the
// plan against the model. Every command that reads a scenario goes through here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::apps {

struct CheckedScenario {
  core::Scenario scenario;
  core::ModelConfig model;                 // resolved from the zoo or inline
  compress::CompressionSpecs compression;  // typed codecs
};

// Checks a parsed scenario. Returns it resolved when no errors were reported.
std::optional<CheckedScenario> check_scenario(const core::Scenario& s, core::Diagnostics& diags);

struct CheckedPoint {
  std::vector<std::pair<std::string, std::string>>
      settings;  // sweep (path, value); empty if no sweep
  CheckedScenario checked;
};

// Loads and checks a scenario file and every point of its sweep. Problems are reported
// once each, even when several sweep points share them; a problem that only one sweep
// value causes names that value. Returns the points (one without a sweep) when no errors.
std::optional<std::vector<CheckedPoint>> check_scenario_file(const std::string& path,
                                                             core::Diagnostics& diags);
// The same for a document already read (a dict from Python); `path` names it in messages
// and is where relative paths in it (WAN traces) are found from.
std::optional<std::vector<CheckedPoint>> check_scenario_document(const core::Node& document,
                                                                 const std::string& path,
                                                                 core::Diagnostics& diags);

// Checks an explicit plan (from a --plan file) against a checked scenario and resolves it
// (sim::check_and_resolve: arithmetic, the model's rules, its codecs, placement).
std::optional<sim::ResolvedPlan> check_plan_file_against(const core::Plan& plan,
                                                         const CheckedScenario& s,
                                                         core::Diagnostics& diags);

}  // namespace hgsim::apps
