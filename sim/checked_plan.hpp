// A plan checked against a scenario, resolved once, with what it costs in memory and work
// computed once: what `hgsim check --summary`, `hgsim run` (the simulation's memory check,
// per-device memory and FLOPs) and the Python module read, so none of them resolves the
// plan or assembles a stage's memory again.
//
// This module owns two rules: a stage's peak memory per GPU under a plan (the memory
// model's, models::stage_memory, plus DiLoCo's outer state, sim::outer_state_bytes) and the
// FLOPs of one iteration (models::training_flops without recomputation, what MFU counts, and
// with the plan's, what the GPUs run).
//
// Ownership. A ResolvedPlan points into the scenario and the model it was resolved against.
// A CheckedPlan keeps its own copies of both next to the ResolvedPlan and is never copied or
// moved (it lives behind shared_ptr<const CheckedPlan>), so those pointers stay valid for as
// long as anyone holds it, however the objects that share it are copied.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "models/transformer.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::sim {

// One GPU of one stage.
struct StageFigures {
  models::StageMemory memory;       // its peak; total includes outer_state
  core::Bytes outer_state{0};       // DiLoCo's fp32 snapshot and momentum; 0 without outer sync
  double parameters = 0;            // the parameters it holds (its tp shard)
  int micro_batches_in_flight = 0;  // the schedule's peak (models::micro_batches_in_flight)
};

struct PlanFigures {
  std::vector<std::vector<StageFigures>> stages;  // [pipeline][stage]
  // One iteration of the plan's global batch: the model's FLOPs (6N + attention per token,
  // no recomputation: what model TFLOP/s and MFU count) and the FLOPs the GPUs run (with the
  // plan's recomputation: model FLOPs plus the recomputed forwards).
  core::Flops model_flops{0};
  core::Flops hardware_flops{0};
};

PlanFigures plan_figures(const ResolvedPlan& r);

class CheckedPlan {
 public:
  // Every check of `plan` against `s` and `model` (sim::check_and_resolve), then the plan
  // resolved against this object's own copies of them; nullptr with the problems in `diags`.
  static std::shared_ptr<const CheckedPlan> check(const core::Scenario& s,
                                                  const core::ModelConfig& model,
                                                  const compress::CompressionSpecs& codecs,
                                                  const core::Plan& plan,
                                                  const std::string& plan_path,
                                                  core::Diagnostics& diags);
  // The same for a plan checked before (sim::resolve_plan only).
  static std::shared_ptr<const CheckedPlan> resolve(const core::Scenario& s,
                                                    const core::ModelConfig& model,
                                                    const compress::CompressionSpecs& codecs,
                                                    const core::Plan& plan,
                                                    const std::string& plan_path,
                                                    core::Diagnostics& diags);

  CheckedPlan(const CheckedPlan&) = delete;
  CheckedPlan& operator=(const CheckedPlan&) = delete;

  const core::Scenario& scenario() const { return scenario_; }
  const core::ModelConfig& model() const { return model_; }
  const compress::CompressionSpecs& scenario_codecs() const { return scenario_codecs_; }
  const ResolvedPlan& resolved() const { return resolved_; }
  const PlanFigures& figures() const { return figures_; }
  const StageFigures& stage(int pipeline, int stage) const {
    return figures_.stages[pipeline][stage];
  }

 private:
  CheckedPlan(const core::Scenario& s, const core::ModelConfig& model,
              const compress::CompressionSpecs& codecs)
      : scenario_(s), model_(model), scenario_codecs_(codecs) {}
  static std::shared_ptr<const CheckedPlan> make(bool check, const core::Scenario& s,
                                                 const core::ModelConfig& model,
                                                 const compress::CompressionSpecs& codecs,
                                                 const core::Plan& plan,
                                                 const std::string& plan_path,
                                                 core::Diagnostics& diags);

  const core::Scenario scenario_;
  const core::ModelConfig model_;
  const compress::CompressionSpecs scenario_codecs_;
  ResolvedPlan resolved_;  // points into scenario_ and model_
  PlanFigures figures_;
};

}  // namespace hgsim::sim
