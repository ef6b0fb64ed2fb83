// The iteration lowered once, as data that the workload generator (sim/workload.cpp) and the
// planner's analytic model (planner/cost_model.cpp) both read, so that neither re-derives a
// rule of the other's (the design's "Lower an iteration once").
//
// This module owns, so far: which hop a data-parallel ring takes inside a cluster
// (ring_hop), for the gradient sync of a segment and for DiLoCo's all-gather inside an
// island.
#pragma once

#include <vector>

#include "core/scenario.hpp"
#include "sim/collectives.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::sim {

// ---- which hop a data-parallel ring takes -------------------------------------------------

// The hop of a ring whose members, inside cluster `cluster`, sit `members_per_node` to a node
// (the nodes it visits, from the placement: segment_members_per_node,
// stage_members_per_node): NVLink when they all sit on one node, else the NIC (a ring that
// visits several nodes is paced by its slowest hop). The placement decides, never a count
// of GPUs: six GPUs of one stage need not share a node of eight.
Hop2 ring_hop(const core::Cluster& cluster, const std::vector<int>& members_per_node);

// The hop of the data-parallel ring of segment `seg` inside `cluster` (gradient sync, both
// fidelities and the analytic model).
Hop2 segment_ring_hop(const ResolvedPlan& r, const Segment& seg, int cluster);

// The hop of a ring over every tensor-parallel group of stage `stage` of pipeline
// `pipeline` (all its replicas, dp and cp ranks), inside the stage's cluster: DiLoCo's
// all-gather of a shard inside an island.
Hop2 stage_ring_hop(const ResolvedPlan& r, int pipeline, int stage);

}  // namespace hgsim::sim
