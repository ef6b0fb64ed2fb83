// Whether a resolved plan fits in its GPUs' memory: the one rule `hgsim check`, `hgsim run`
// (sim::simulate) and `hgsim sweep` give their verdict from.
#pragma once

#include <string>

#include "core/diagnostics.hpp"
#include "core/units.hpp"
#include "models/transformer.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::sim {

// Peak memory of one GPU of a stage: the memory model's (models::stage_memory), plus
// DiLoCo's parameter snapshot and outer momentum when the plan has outer sync (their bytes
// in `outer_state` when given).
models::StageMemory plan_stage_memory(const ResolvedPlan& r, int pipeline, int stage,
                                      core::Bytes* outer_state = nullptr);

// Reports, as an error in `diags`, every stage whose GPUs need more memory than they have,
// naming the stage (`plan_path`: "strategy" for the scenario's own plan, "" for a plan
// file), what it needs and what would help. Returns whether every stage fits.
bool check_plan_memory(const ResolvedPlan& r, const std::string& plan_path,
                       core::Diagnostics& diags);

}  // namespace hgsim::sim
