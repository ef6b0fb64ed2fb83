// The planner's side of DiLoCo (core::OuterSync, sim/outer_sync.hpp): which outer-sync
// variants of a plan it tries (`planner:` in the scenario), their iteration time in closed
// form, and how plans that train differently are compared.
//
// A DiLoCo plan's islands are its pipelines (with their replicas). Its analytic iteration:
//   t_inner     one inner step: every island alone (planner::estimate of a plan holding
//               only that island: its own gradient sync, nothing across islands), the slowest;
//   t_f         one outer all-reduce of fragment f: per shard (sim::outer_shards), each lane
//               a ring over the islands (sim::outer_lane_time: coded transfers from
//               sim::code_wan_transfer) on its share of the WAN route (every lane of every shard
//               crosses it at once: a lane's share is its bytes over all the lanes' bytes on the
//               link, capped by the TCP window per flow), then the all-gather inside each island
//               (sim::ring_all_gather_time on NVLink or the NIC); the fragment takes the slowest
//               shard;
//   blocking    (F = 1): t_inner + t_0 / H (the round is H t_inner + t_sync);
//   streaming   (F > 1, tau overlap steps): t_inner + sum_f max(0, t_f - tau t_inner) / H
//               (what a fragment's transfer exposes past the tau inner steps it overlaps).
// Memory: each stage must also hold DiLoCo's fp32 parameter snapshot and outer momentum
// (sim::outer_state_bytes).
//
// Plans are ranked by time to the same training progress: iteration time / token
// efficiency (1 for synchronous plans, planner.diloco_token_efficiency with outer sync).
#pragma once

#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "planner/cost_model.hpp"

namespace hgsim::planner {

struct OuterSyncEstimate {
  double inner_s = 0;              // one inner step, every island on its own
  std::vector<double> fragment_s;  // one outer all-reduce of each fragment
  double exposed_per_round_s = 0;  // what a round's outer syncs add to its H inner steps
  double iteration_s = 0;          // inner_s + exposed_per_round_s / H
  Estimate inner;                  // the islands' estimates, one pipeline each
};

// The closed form above for a plan with outer sync (structurally valid: check_plan).
OuterSyncEstimate estimate_outer_sync(const Context& ctx, const core::Plan& plan);

// estimate() for any plan: with outer sync, the islands' estimates and the amortised outer
// sync (iteration_s = OuterSyncEstimate::iteration_s; fits counts the outer state too).
Estimate estimate_plan(const Context& ctx, const core::Plan& plan);

// The DiLoCo variants of `plan` the scenario's `planner:` allows (one per inner_steps H and
// fragments F that divides H, streaming with overlap_steps clamped to H / F), each with the
// scenario's WAN gradient codec on the pseudo-gradients; none when diloco is not allowed or
// the plan cannot have outer sync (fewer than two pipelines, pipelines that share a cluster:
// islands are places, or pipelines that cut the model differently: core::check_outer_sync),
// or when the simulator could not play it (folded fidelity).
std::vector<core::Plan> outer_sync_variants(const Context& ctx, const core::Plan& plan);

// Progress per token relative to synchronous training: 1 without outer sync, the scenario's
// planner.diloco_token_efficiency with it.
double token_efficiency(const Context& ctx, const core::Plan& plan);

// Where the efficiency comes from, for reports (core::diloco_token_efficiency_source).
std::string token_efficiency_source(const Context& ctx);

}  // namespace hgsim::planner
