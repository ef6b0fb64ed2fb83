#include "sim/checked_plan.hpp"

#include "sim/outer_sync.hpp"
#include "sim/plan_memory.hpp"

namespace hgsim::sim {

PlanFigures plan_figures(const ResolvedPlan& r) {
  PlanFigures out;
  const core::Plan& plan = r.plan;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    std::vector<StageFigures> stages;
    for (std::size_t st = 0; st < plan.pipelines[p].stages.size(); ++st) {
      const models::StageSpec spec = models::stage_spec(plan, p, st);
      StageFigures f;
      // The one memory rule (sim/plan_memory.hpp), DiLoCo's snapshot and momentum included.
      f.memory = plan_stage_memory(r, static_cast<int>(p), static_cast<int>(st), &f.outer_state);
      f.parameters = models::stage_parameters(*r.model, spec);
      f.micro_batches_in_flight = models::micro_batches_in_flight(spec);
      stages.push_back(f);
    }
    out.stages.push_back(std::move(stages));
  }
  const double sequences = plan.global_batch();
  const int seq_len = r.choices.training.seq_len;
  out.model_flops = models::training_flops(*r.model, sequences, seq_len, core::Recompute::none);
  out.hardware_flops = models::training_flops(*r.model, sequences, seq_len, r.choices.recompute);
  return out;
}

std::shared_ptr<const CheckedPlan> CheckedPlan::make(bool check, const core::Scenario& s,
                                                     const core::ModelConfig& model,
                                                     const compress::CompressionSpecs& codecs,
                                                     const core::Plan& plan,
                                                     const std::string& plan_path,
                                                     core::Diagnostics& diags) {
  // Not make_shared: the constructor is private, so that no CheckedPlan exists outside one.
  std::shared_ptr<CheckedPlan> out(new CheckedPlan(s, model, codecs));
  auto resolved =
      check ? check_and_resolve(out->scenario_, out->model_, codecs, plan, plan_path, diags)
            : resolve_plan(out->scenario_, out->model_, codecs, plan, plan_path, diags);
  if (!resolved) return nullptr;
  out->resolved_ = std::move(*resolved);
  out->figures_ = plan_figures(out->resolved_);
  return out;
}

std::shared_ptr<const CheckedPlan> CheckedPlan::check(const core::Scenario& s,
                                                      const core::ModelConfig& model,
                                                      const compress::CompressionSpecs& codecs,
                                                      const core::Plan& plan,
                                                      const std::string& plan_path,
                                                      core::Diagnostics& diags) {
  return make(true, s, model, codecs, plan, plan_path, diags);
}

std::shared_ptr<const CheckedPlan> CheckedPlan::resolve(const core::Scenario& s,
                                                        const core::ModelConfig& model,
                                                        const compress::CompressionSpecs& codecs,
                                                        const core::Plan& plan,
                                                        const std::string& plan_path,
                                                        core::Diagnostics& diags) {
  return make(false, s, model, codecs, plan, plan_path, diags);
}

}  // namespace hgsim::sim
