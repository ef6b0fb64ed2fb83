// Context parallelism (`cp: N` on a stage) as Megatron-core runs it with Transformer Engine's
// ring attention: each of the stage's cp ranks (a tensor-parallel group each) holds s / cp
// tokens of every sequence, two chunks of s / (2 cp) chosen so that the causal mask's work
// falls equally on every rank. Everything outside the attention core works on the rank's
// own tokens (sim::layer_work: 1 / cp of the sequences). The attention core needs every
// earlier key: in the forward the ranks pass their K and V round the ring of cp ranks,
// cp - 1 steps, each overlapped with the attention on the chunk the rank already has; the
// backward passes K, V and their gradients (twice the bytes), cp - 1 steps again.
//
// Priced in closed form, one function for the workload generator (both fidelities) and the
// planner's cost model: a step takes sim::ring_step_time of its bytes on the ring's hops
// (NVLink between ranks in one node, the NIC between nodes), and each of the cp - 1 steps
// leaves exposed what its transfer takes beyond 1 / cp of the attention core's time:
//   forward  (cp - 1) max(0, step(KV) - A_f / cp)
//   backward (cp - 1) max(0, step(2 KV) - A_b / cp)
// (A_f, A_b: the core's kernel time, kernels::PhaseTimes; KV: models::context_exchange_bytes).
// Recomputation that repeats the attention core (full or selective) repeats the forward's
// exchange. The exchanges do not share links with other traffic in the simulation.
#pragma once

#include <vector>

#include "kernels/compute_model.hpp"
#include "sim/collectives.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::sim {

struct ContextRing {
  int cp = 1;
  RingHops hops;        // between neighbouring cp ranks (the same tp rank of each group)
  double kv_bytes = 0;  // one forward step: K and V of one rank's tokens, one tp shard
};

// The ring of stage `stage` of pipeline `pipeline` as placed: its first replica's first dp
// rank's groups in cp order, a hop that leaves a node crossing the NIC (nic_hop), the others
// NVLink (nvlink_hop). cp = 1: an empty ring.
ContextRing context_ring(const ResolvedPlan& r, int pipeline, int stage);

// Every stage's ring: [pipeline][stage].
std::vector<std::vector<ContextRing>> context_rings(const ResolvedPlan& r);

// Seconds the ring's exchanges add to one layer, per phase (the closed forms above).
struct ContextExposure {
  double forward = 0;
  double backward = 0;
  double recompute = 0;
};
ContextExposure context_exposure(const kernels::PhaseTimes& layer, const ContextRing& ring,
                                 core::Recompute recompute);

}  // namespace hgsim::sim
