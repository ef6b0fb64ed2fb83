// `hgsim plan`: search a plan, verify the best candidates by simulation, compare with the
// baselines, write the plan file.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "apps/validate.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"

namespace hgsim::apps {

struct PlanCommandOptions {
  std::string out_file;  // --out PLAN.json
  bool baselines = false;
  bool json = false;
  double time_budget_s = 60;
  int verify = 3;
  bool no_compression = false;  // plan (and compare) with every codec off
  std::string evaluate_file;    // --evaluate PLAN: cost and simulate this plan only
};

int cmd_plan(const std::string& path, const PlanCommandOptions& options, std::ostream& out,
             std::ostream& err);
// The same for a scenario already checked (one point; the Python module's plan()). `path`
// names the scenario in messages.
int plan_scenario(CheckedScenario c, const std::string& path, const PlanCommandOptions& options,
                  std::ostream& out, std::ostream& err);

// The planner's best plan for a scenario with `strategy: auto` (what `hgsim run` plays);
// nullopt with the reasons in `diags` when no plan fits. `time_budget_s` > 0 bounds the
// enumeration (hgsim sweep --time-budget); 0 keeps the planner's default.
std::optional<core::Plan> auto_plan(const CheckedScenario& c, core::Diagnostics& diags,
                                    double time_budget_s = 0);

}  // namespace hgsim::apps
