#include "sim/plan_memory.hpp"

#include "kernels/gpu_catalog.hpp"
#include "sim/outer_sync.hpp"

namespace hgsim::sim {

models::StageMemory plan_stage_memory(const ResolvedPlan& r, int pipeline, int stage,
                                      core::Bytes* outer_state) {
  auto m = models::stage_memory(*r.model, r.choices.training, r.plan, pipeline, stage);
  core::Bytes extra(0);
  if (r.plan.outer_sync.enabled())
    extra = outer_state_bytes(
        models::stage_parameters(*r.model, models::stage_spec(r.plan, pipeline, stage)));
  m.total = core::Bytes(m.total.value() + extra.value());
  if (outer_state) *outer_state = extra;
  return m;
}

bool check_plan_memory(const ResolvedPlan& r, const std::string& plan_path,
                       core::Diagnostics& diags) {
  const auto& s = *r.scenario;
  const auto& plan = r.plan;
  bool fits = true;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    for (std::size_t st = 0; st < plan.pipelines[i].stages.size(); ++st) {
      const auto& stage = plan.pipelines[i].stages[st];
      const auto* gpu = &kernels::gpu_of(s.cluster(stage.cluster).gpu);
      core::Bytes outer_state(0);
      const auto m = plan_stage_memory(r, static_cast<int>(i), static_cast<int>(st), &outer_state);
      if (m.total.value() <= gpu->memory.value()) continue;
      fits = false;
      const std::string path = (plan_path.empty() ? "" : plan_path + ".") + "pipelines[" +
                               std::to_string(i) + "].stages[" + std::to_string(st) + "]";
      diags.error(s.where(path), path,
                  "does not fit in memory: each GPU needs " + core::human_size(m.total) +
                      " (weights " + core::human_size(m.weights) + ", gradients " +
                      core::human_size(m.gradients) + ", optimizer " +
                      core::human_size(m.optimizer) + ", activations " +
                      core::human_size(m.activations) +
                      (outer_state.value() > 0
                           ? ", outer-sync snapshot and momentum " + core::human_size(outer_state)
                           : std::string()) +
                      "), a " + gpu->name + " has " + core::human_size(gpu->memory),
                  "give the stage fewer layers or more tp, turn on recompute, or pass --allow-oom "
                  "to simulate it anyway");
    }
  return fits;
}

}  // namespace hgsim::sim
