#include "apps/validate.hpp"

#include <set>

#include "kernels/gpu_catalog.hpp"
#include "models/zoo.hpp"

namespace hgsim::apps {

std::optional<compress::CompressionSpecs> resolve_plan_compression(const core::Plan& plan,
                                                                   const core::Scenario& s,
                                                                   const std::string& prefix,
                                                                   core::Diagnostics& diags) {
  if (!plan.compression) return std::nullopt;
  const std::string base = (prefix.empty() ? "" : prefix + ".") + "compression.";
  auto activations = compress::resolve_codec(plan.compression->wan_activations, s,
                                             base + "wan_activations", diags);
  auto gradients =
      compress::resolve_codec(plan.compression->wan_gradients, s, base + "wan_gradients", diags);
  if (!activations || !gradients) return std::nullopt;
  return compress::CompressionSpecs{*activations, *gradients};
}

std::optional<CheckedScenario> with_plan_choices(const CheckedScenario& c, const core::Plan& plan,
                                                 const std::string& prefix,
                                                 core::Diagnostics& diags) {
  CheckedScenario out{core::with_plan_choices(c.scenario, plan), c.model, c.compression};
  if (plan.compression) {
    auto specs = resolve_plan_compression(plan, c.scenario, prefix, diags);
    if (!specs) return std::nullopt;
    out.compression = *specs;
  }
  return out;
}

std::optional<CheckedScenario> check_scenario(const core::Scenario& s, core::Diagnostics& diags) {
  const int errors_before = diags.error_count();
  auto model = models::resolve_model(s, diags);
  kernels::resolve_gpus(s, diags);
  auto compression = compress::resolve_policy(s, diags);
  if (!s.strategy.automatic) {
    core::check_plan(s.strategy.plan, s, model ? model->layers : 0, "strategy", diags);
    if (model) models::check_plan_against_model(s.strategy.plan, *model, s, "strategy", diags);
    if (s.strategy.plan.compression && compression)
      resolve_plan_compression(s.strategy.plan, s, "strategy", diags);
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

bool check_plan_file_against(const core::Plan& plan, const CheckedScenario& s,
                             core::Diagnostics& diags) {
  const int errors_before = diags.error_count();
  core::check_plan(plan, s.scenario, s.model.layers, "", diags);
  models::check_plan_against_model(plan, s.model, s.scenario, "", diags);
  if (plan.compression) resolve_plan_compression(plan, s.scenario, "", diags);
  return diags.error_count() == errors_before;
}

}  // namespace hgsim::apps
