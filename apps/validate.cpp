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
  // planner.fragments against the model: a fragment is at least one layer.
  if (model)
    for (std::size_t i = 0; i < s.planner.fragments.size(); ++i)
      if (s.planner.fragments[i] > model->layers) {
        const std::string at =
            s.planner.fragments.size() == 1 && !s.locations.count("planner.fragments[0]")
                ? "planner.fragments"
                : "planner.fragments[" + std::to_string(i) + "]";
        diags.error(s.where(at), at,
                    std::to_string(s.planner.fragments[i]) + " fragments, but the model has " +
                        std::to_string(model->layers) + " layers",
                    "a fragment is at least one layer");
      }
  std::shared_ptr<const sim::CheckedPlan> plan;
  if (!s.strategy.automatic) {
    // Placement needs a scenario without errors (clusters with nodes and GPUs).
    if (model && compression && !diags.has_errors())
      plan = sim::CheckedPlan::check(s, *model, *compression, s.strategy.plan, "strategy", diags);
    else  // what can be checked without the model or the codecs
      core::check_plan(s.strategy.plan, s, model ? model->layers : 0, "strategy", diags);
  }
  if (diags.error_count() != errors_before || !model || !compression) return std::nullopt;
  return CheckedScenario{s, *model, *compression, std::move(plan)};
}

std::shared_ptr<const sim::CheckedPlan> CheckedScenario::own_plan() const {
  if (!plan || !(plan->scenario() == scenario) || !(plan->model() == model)) return nullptr;
  return plan;
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

std::optional<std::size_t> check_scenario_file_each(const std::string& path,
                                                    core::Diagnostics& diags,
                                                    const CheckedPointVisitor& each) {
  const int errors_before = diags.error_count();
  auto document = core::load_document(path, diags);
  if (!document) return std::nullopt;
  const SweepPoints sweep(*document, path, diags);
  for (std::size_t k = 0; k < sweep.size(); ++k)
    if (auto p = sweep.point(k, diags)) each(k, *p);
  // A document read with errors (a duplicate key) is not a valid scenario either.
  if (diags.error_count() != errors_before) return std::nullopt;
  return sweep.size();
}

SweepPoints::SweepPoints(const core::Node& document, std::string path, core::Diagnostics& diags)
    : path_(std::move(path)), grid_(document, diags) {
  parsed_base_ = core::parse_scenario(document, path_, diags);
  if (parsed_base_) base_ = check_scenario(*parsed_base_, diags);
  for (const core::Diagnostic& d : diags.all()) seen_.insert(core::format_diagnostic(d));
  swept_ = !(grid_.size() == 1 && grid_.axis_paths().empty());
}

std::optional<CheckedPoint> SweepPoints::point(std::size_t k, core::Diagnostics& diags) const {
  if (!swept_) {
    if (base_) return CheckedPoint{{}, *base_};
    return std::nullopt;
  }
  const core::SweepPoint point = grid_.point(k);
  core::Diagnostics local;
  auto parsed = core::parse_scenario(point.document, path_, local);
  std::optional<CheckedScenario> checked;
  if (parsed) {
    parsed->sweep = parsed_base_ ? parsed_base_->sweep : std::vector<core::SweepAxis>{};
    checked = check_scenario(*parsed, local);
  }
  merge_new(local, label_of(point.settings), seen_, diags);
  if (!checked || local.has_errors()) return std::nullopt;
  return CheckedPoint{point.settings, *checked};
}

std::optional<std::vector<CheckedPoint>> check_scenario_document(const core::Node& document,
                                                                 const std::string& path,
                                                                 core::Diagnostics& diags) {
  const int errors_before = diags.error_count();
  const SweepPoints sweep(document, path, diags);
  std::vector<CheckedPoint> points;
  for (std::size_t k = 0; k < sweep.size(); ++k)
    if (auto p = sweep.point(k, diags)) points.push_back(std::move(*p));
  if (diags.error_count() != errors_before) return std::nullopt;
  return points;
}

std::shared_ptr<const sim::CheckedPlan> check_plan_file_against(const core::Plan& plan,
                                                                const CheckedScenario& s,
                                                                core::Diagnostics& diags,
                                                                const std::string& plan_file) {
  if (plan_file.empty())
    return sim::CheckedPlan::check(s.scenario, s.model, s.compression, plan, "", diags);
  core::Diagnostics own;
  auto resolved = sim::CheckedPlan::check(s.scenario, s.model, s.compression, plan, "", own);
  // Positions from the plan file itself (a JSON plan has none: its key paths say where).
  std::map<std::string, core::SourceLocation> locations;
  if (!own.empty()) {
    core::Diagnostics reread;
    if (auto document = core::load_document(plan_file, reread))
      core::record_locations(*document, "", locations);
  }
  auto where = [&](std::string path) {
    while (true) {
      if (auto it = locations.find(path); it != locations.end() && it->second.line > 0)
        return it->second;
      const auto cut = path.find_last_of(".[");
      if (cut == std::string::npos) return core::SourceLocation{plan_file, 0, 0};
      path.resize(cut);
    }
  };
  for (const core::Diagnostic& d : own.all()) {
    if (d.severity == core::Severity::error)
      diags.error(where(d.key_path), d.key_path, d.message, d.hint);
    else
      diags.warning(where(d.key_path), d.key_path, d.message, d.hint);
  }
  return resolved;
}

}  // namespace hgsim::apps
