// The iteration lowered once, as data that the workload generator (sim/workload.cpp) and the
// planner's analytic model (planner/cost_model.cpp) both read, so that neither re-derives a
// rule of the other's (the design's "Lower an iteration once").
//
// This module owns, so far: which hop a data-parallel ring takes inside a cluster
// (ring_hop), for the gradient sync of a segment and for DiLoCo's all-gather inside an
// island; a gradient bucket's closed-form time inside a cluster, and which buckets run
// beside the backward of each layer (buckets_beside_backward).
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

// ---- the gradient buckets beside the backward ------------------------------------------

// One bucket of `bytes` per ring of segment `seg`, all-reduced among `members`
// tensor-parallel groups inside `cluster`, in closed form: NCCL's channel rings where the
// plan's algorithm runs as them (channel_ring_all_reduce_time over the segment's members per
// node), else the algorithm over the segment's ring hop. Folded fidelity charges it; the
// planner's model adds it up.
double segment_bucket_time(const ResolvedPlan& r, const Segment& seg, int cluster, int members,
                           double bytes);

// Per local layer of chunk `chunk` of stage `stage` of pipeline `pipeline`: the seconds of
// the data-parallel collectives that join the stage's gradient stream, on each of its GPUs,
// once the last micro-batch's backward has finished that layer (grad_reduce: overlap): every
// bucket of the segments the chunk holds whose lowest layer it is (bucket_lowest_layer), at
// segment_bucket_time. These are NCCL kernels on the stage's own GPUs, so the backward that
// runs beside them is slowed (kernels::CollectiveStream). A segment whose holders span
// clusters is left out (its buckets cross the WAN as the engine plays it: no closed form
// says when their kernels run, and a WAN codec's CPU time does not share the GPU), and so is
// everything under after_backward (nothing runs beside the backward).
std::vector<double> buckets_beside_backward(const ResolvedPlan& r, int pipeline, int stage,
                                            int chunk);

}  // namespace hgsim::sim
