// `hgsim plan`: search a plan, verify the best candidates by simulation, compare with the
// baselines, write the plan file.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "apps/validate.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "planner/baselines.hpp"
#include "planner/planner.hpp"

namespace hgsim::apps {

struct PlanCommandOptions {
  std::string out_file;  // --out PLAN.json
  bool baselines = false;
  bool json = false;
  double time_budget_s = 60;
  int verify = 3;
  bool no_compression = false;  // plan (and compare) with every codec off
  bool exhaustive = false;      // planner::Options::exhaustive
  std::string evaluate_file;    // --evaluate PLAN: cost and simulate this plan only
};

// What `hgsim plan` found: the CLI renders it as a table or JSON, the Python module as a
// dict; nobody parses the other's output.
struct PlanReport {
  std::string scenario;
  double tokens_per_iteration = 0;
  compress::CompressionSpecs compression;  // the scenario's (none with --no-compression)
  // --evaluate: the one plan, its analytic estimate and its simulation.
  bool evaluated = false;
  planner::Estimate estimate;
  // The plan chosen (or evaluated), simulated; absent when no plan fits.
  std::optional<planner::Verified> best;
  std::string adopted_from_baseline;  // the baseline whose plan was adopted, or ""
  // The planner's own best before any baseline's plan was adopted (what "never slower than
  // a baseline" is about; `best` when nothing was adopted).
  std::optional<planner::Verified> own_best;
  planner::SearchResult search;  // candidates, verification, why nothing fits
  std::vector<planner::Baseline> baselines;
  double wall_s = 0;
  // planner.diloco_token_efficiency and where it comes from (planner/outer_sync_cost.hpp),
  // printed whenever a plan with outer sync is chosen or evaluated.
  double diloco_token_efficiency = 1;
  std::string token_efficiency_source;
  // Codecs planner.max_loss_increase kept the planner from using (planner/loss_bound.hpp).
  std::vector<std::string> loss_notes;
  // What the search decided about DiLoCo (empty verdict when planner.outer_sync does not
  // allow it).
  planner::DilocoDecision diloco;
};

// Plans (or, with options.evaluate_file, evaluates) a checked scenario (one point). Progress
// lines go to `progress`; nullopt with the problems in `diags` on bad input.
std::optional<PlanReport> plan_report(CheckedScenario c, const PlanCommandOptions& options,
                                      std::ostream& progress, core::Diagnostics& diags);
// The report's JSON form (`hgsim plan --json`, the Python module's plan()).
core::Json to_json(const PlanReport& report);
// The report for people.
std::string format_table(const PlanReport& report, const PlanCommandOptions& options,
                         const std::string& path);

int cmd_plan(const std::string& path, const PlanCommandOptions& options, std::ostream& out,
             std::ostream& err);

// The planner's best plan for a scenario with `strategy: auto` (what `hgsim run` plays);
// nullopt with the reasons in `diags` when no plan fits. `time_budget_s` > 0 bounds the
// enumeration (hgsim sweep --time-budget); 0 keeps the planner's default. `jobs` > 0 caps the
// planner's threads and simulations (a sweep running several points at once); 0: one per core.
std::optional<core::Plan> auto_plan(const CheckedScenario& c, core::Diagnostics& diags,
                                    double time_budget_s = 0, int jobs = 0);

}  // namespace hgsim::apps
