// One simulated point, as `hgsim run`, `hgsim sweep` and the Python module's simulate()
// play it: which plan runs (a plan file or a given plan, the scenario's strategy, or the
// planner's best for `strategy: auto`), which compute model costs it (a layer profile,
// measured op profiles, or the shipped ones), and the simulation itself.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/validate.hpp"
#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"
#include "sim/simulate.hpp"

namespace hgsim::apps {

struct RunOptions {
  std::string plan_file;              // --plan FILE
  std::optional<core::Plan> plan;     // a plan already parsed (the Python module); checked here
  std::string fidelity;               // "full", "folded", "auto"; empty: the scenario's
  std::string collectives;            // "steps", "pipelined"; empty: the scenario's
  std::vector<std::string> profiles;  // measured op profiles; empty: kernels/profiles/
  std::string layer_profile;          // a layer profile (hgsim-layer-profile/1): its GPU type
  std::string trace_filter;           // --trace-filter cluster=..,stage=..,kind=..
  bool report_stats = false;
  double planner_time_budget_s = 0;  // strategy: auto; 0: the planner's default
  int planner_jobs = 0;  // strategy: auto: the planner's threads and simulations; 0: one per core
  sim::SimulationOptions sim;
  std::string chakra_trace;  // --chakra PREFIX: simulate that Chakra trace instead of a plan
  bool reprice = false;      // --reprice: the trace's COMP_NODEs priced by the compute model
};

// The plan a point runs and the key path its messages use ("strategy" for the scenario's
// own plan, "" for a plan file, a given plan or the planner's).
struct ChosenPlan {
  core::Plan plan;
  std::string path;
  // `plan` as its check resolved it (the scenario's own plan, a plan file or given plan);
  // null for the planner's, which the simulation resolves.
  std::shared_ptr<const sim::CheckedPlan> checked;
};

// The plan file or given plan (checked against `c`), else the scenario's strategy, else the
// planner's best (strategy: auto). nullopt with the reasons in `diags`.
std::optional<ChosenPlan> choose_plan(const CheckedScenario& c, const RunOptions& options,
                                      core::Diagnostics& diags);

// The compute model of a run: the layer profile when one is given, else the measured op
// profiles (or the shipped ones). Problems with the files go to `diags`.
std::unique_ptr<kernels::ComputeModel> run_compute_model(const RunOptions& options,
                                                         const core::Scenario& scenario,
                                                         core::Diagnostics& diags);

// Simulates one checked point (sim/results.hpp; its `plan` is the plan that ran).
std::optional<sim::Results> simulate_point(const CheckedScenario& c, const RunOptions& options,
                                           core::Diagnostics& diags);

}  // namespace hgsim::apps
