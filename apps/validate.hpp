// The whole check of a scenario: core's structure and plan arithmetic, then the names
// and rules other folders own (the model zoo, the GPU catalog, the codecs), then the
// plan against the model. Every command that reads a scenario goes through here.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "sim/checked_plan.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::apps {

struct CheckedScenario {
  core::Scenario scenario;
  core::ModelConfig model;                 // resolved from the zoo or inline
  compress::CompressionSpecs compression;  // typed codecs
  // An explicit strategy's plan as the check resolved it, with its stage memory, FLOPs and
  // outer-sync codec (sim/checked_plan.hpp); null for strategy: auto. Shared and immutable:
  // copies of this struct share it, and it keeps its own scenario and model to point into.
  std::shared_ptr<const sim::CheckedPlan> plan;

  // `plan` while it answers for `scenario` and `model` (null once either was edited after
  // the check, as tests do): what run and the Python module read instead of resolving again.
  std::shared_ptr<const sim::CheckedPlan> own_plan() const;
};

// Checks a parsed scenario. Returns it resolved when no errors were reported.
std::optional<CheckedScenario> check_scenario(const core::Scenario& s, core::Diagnostics& diags);

struct CheckedPoint {
  std::vector<std::pair<std::string, std::string>>
      settings;  // sweep (path, value); empty if no sweep
  CheckedScenario checked;
};

// The points of a scenario document's sweep, each checked when asked for: a sweep of any
// size is checked and run one point at a time. The scenario as written (sweep values not
// applied) is checked when this is made; its problems are reported once, and each point
// then only adds what its values change (named with the point's values).
class SweepPoints {
 public:
  SweepPoints(const core::Node& document, std::string path, core::Diagnostics& diags);
  std::size_t size() const { return swept_ ? grid_.size() : (base_ ? 1 : 0); }
  bool swept() const { return swept_; }
  std::vector<std::string> axis_paths() const { return grid_.axis_paths(); }
  // Point k (0-based, grid order), checked; nullopt with its problems in `diags`.
  std::optional<CheckedPoint> point(std::size_t k, core::Diagnostics& diags) const;
  // Point k's sweep settings, without checking it (empty without a sweep).
  std::vector<std::pair<std::string, std::string>> settings(std::size_t k) const {
    return swept_ ? grid_.settings(k) : std::vector<std::pair<std::string, std::string>>{};
  }

 private:
  std::string path_;
  core::SweepGrid grid_;
  std::optional<core::Scenario> parsed_base_;
  std::optional<CheckedScenario> base_;
  bool swept_ = false;
  mutable std::set<std::string> seen_;  // diagnostics reported already
};

// Loads and checks a scenario file and every point of its sweep, one point at a time:
// each valid point is handed to `each` (its index, the point) and then dropped, so memory
// is that of one point whatever the grid's size (10 000 points of a 100 kB scenario held
// at once took 1.6 GB). Problems are reported as by check_scenario_file. Returns the
// number of points when there were no errors (`each` may have seen some points before a
// later one's error).
using CheckedPointVisitor = std::function<void(std::size_t k, CheckedPoint& point)>;
std::optional<std::size_t> check_scenario_file_each(const std::string& path,
                                                    core::Diagnostics& diags,
                                                    const CheckedPointVisitor& each);

// Loads and checks a scenario file and every point of its sweep, and keeps them all
// (check_scenario_file_each keeps none). Problems are reported
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
// (sim::CheckedPlan::check: arithmetic, the model's rules, its codecs, placement; then its
// memory and FLOPs); nullptr when it has errors. With
// `plan_file`, every problem is reported in that file (at its line for a YAML plan), since
// the scenario was checked before and these are the plan's.
std::shared_ptr<const sim::CheckedPlan> check_plan_file_against(const core::Plan& plan,
                                                                const CheckedScenario& s,
                                                                core::Diagnostics& diags,
                                                                const std::string& plan_file = {});

}  // namespace hgsim::apps
