#include "apps/validate.hpp"

#include <set>

#include "kernels/gpu_catalog.hpp"
#include "models/zoo.hpp"

namespace hgsim::apps {

std::optional<CheckedScenario> check_scenario(const core::Scenario& s, core::Diagnostics& diags) {
  const int errors_before = diags.error_count();
  auto model = models::resolve_model(s, diags);
  kernels::resolve_gpus(s, diags);
  auto compression = compress::resolve_policy(s, diags);
  if (!s.strategy.automatic) {
    // Placement needs a scenario without errors (clusters with nodes and GPUs).
    if (model && compression && !diags.has_errors())
      sim::check_and_resolve(s, *model, *compression, s.strategy.plan, "strategy", diags);
    else  // what can be checked without the model or the codecs
      core::check_plan(s.strategy.plan, s, model ? model->layers : 0, "strategy", diags);
  }
  if (diags.error_count() != errors_before || !model || !compression) return std::nullopt;
  return CheckedScenario{s, *model, *compression};
}

namespace {

// Adds the diagnostics of `point` that `seen` does not hold yet, naming the sweep point.
void merge_new(const core::Diagnostics& point, const std::string& label,
               std::set<std::string>& seen, core::Diagnostics& diags) {
  for (const core::Diagnostic& d : point.all()) {
    if (!seen.insert(core::format_diagnostic(d)).second) continue;
    std::string message = d.message + " (sweep point " + label + ")";
    if (d.severity == core::Severity::error)
      diags.error(d.where, d.key_path, message, d.hint);
    else
      diags.warning(d.where, d.key_path, message, d.hint);
  }
}

std::string label_of(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string label;
  for (const auto& [path, value] : settings)
    label += (label.empty() ? "" : ", ") + path + "=" + value;
  return label;
}

}  // namespace

std::optional<std::vector<CheckedPoint>> check_scenario_file(const std::string& path,
                                                             core::Diagnostics& diags) {
  const int errors_before = diags.error_count();
  auto document = core::load_document(path, diags);
  if (!document) return std::nullopt;
  auto points = check_scenario_document(*document, path, diags);
  // A document read with errors (a duplicate key) is not a valid scenario either.
  if (diags.error_count() != errors_before) return std::nullopt;
  return points;
}

std::optional<std::vector<CheckedPoint>> check_scenario_document(const core::Node& document,
                                                                 const std::string& path,
                                                                 core::Diagnostics& diags) {
  const int errors_before = diags.error_count();

  // The scenario as written (sweep values not applied) is checked first; its problems are
  // reported once, and sweep points then only add what their values change.
  auto base = core::parse_scenario(document, path, diags);
  std::optional<CheckedScenario> checked_base;
  if (base) checked_base = check_scenario(*base, diags);
  std::set<std::string> seen;
  for (const core::Diagnostic& d : diags.all()) seen.insert(core::format_diagnostic(d));

  std::vector<CheckedPoint> points;
  auto sweep = core::sweep_points(document, diags);
  const bool swept = !(sweep.size() == 1 && sweep.front().settings.empty());
  if (!swept) {
    if (checked_base) points.push_back({{}, *checked_base});
  } else {
    for (const core::SweepPoint& point : sweep) {
      core::Diagnostics local;
      auto parsed = core::parse_scenario(point.document, path, local);
      std::optional<CheckedScenario> checked;
      if (parsed) {
        parsed->sweep = base ? base->sweep : std::vector<core::SweepAxis>{};
        checked = check_scenario(*parsed, local);
      }
      merge_new(local, label_of(point.settings), seen, diags);
      if (checked) points.push_back({point.settings, *checked});
    }
  }
  if (diags.error_count() != errors_before) return std::nullopt;
  return points;
}

std::optional<sim::ResolvedPlan> check_plan_file_against(const core::Plan& plan,
                                                         const CheckedScenario& s,
                                                         core::Diagnostics& diags) {
  return sim::check_and_resolve(s.scenario, s.model, s.compression, plan, "", diags);
}

}  // namespace hgsim::apps
