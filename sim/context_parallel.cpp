#include "sim/context_parallel.hpp"

#include <algorithm>

#include "models/transformer.hpp"

namespace hgsim::sim {

ContextRing context_ring(const ResolvedPlan& r, int pipeline, int stage) {
  ContextRing ring;
  const core::Stage& st = r.stage(pipeline, stage);
  ring.cp = st.cp;
  if (st.cp <= 1) return ring;
  std::vector<int> nodes;  // per cp rank, the node of its group's first GPU
  int cluster = 0;
  for (const PlacedGroup& g : r.groups)
    if (g.pipeline == pipeline && g.stage == stage && g.replica == 0 && g.dp_rank == 0) {
      nodes.push_back(g.node(*r.scenario));
      cluster = g.cluster;
    }
  const core::Cluster& c = r.scenario->clusters[cluster];
  ring.hops.members = st.cp;
  ring.hops.inside = nvlink_hop(c);
  ring.hops.across = nic_hop(c);
  const int n = static_cast<int>(nodes.size());
  for (int k = 0; k < n; ++k)
    if (n > 1 && nodes[k] != nodes[(k + 1) % n]) ++ring.hops.crossings;
  const kernels::LayerWork work = r.layer_work(st);
  ring.kv_bytes = models::context_exchange_bytes(*r.model, work.sequences, work.seq_len, st.tp,
                                                 r.choices.precision)
                      .value();
  return ring;
}

std::vector<std::vector<ContextRing>> context_rings(const ResolvedPlan& r) {
  std::vector<std::vector<ContextRing>> out(r.plan.pipelines.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t st = 0; st < r.plan.pipelines[i].stages.size(); ++st)
      out[i].push_back(context_ring(r, static_cast<int>(i), static_cast<int>(st)));
  return out;
}

ContextExposure context_exposure(const kernels::PhaseTimes& layer, const ContextRing& ring,
                                 core::Recompute recompute) {
  ContextExposure out;
  if (ring.cp <= 1) return out;
  const double steps = ring.cp - 1;
  auto exposed = [&](double attention_s, double bytes) {
    return steps * std::max(0.0, ring_step_time(bytes, ring.hops) - attention_s / ring.cp);
  };
  out.forward = exposed(layer.attention_forward.value(), ring.kv_bytes);
  out.backward = exposed(layer.attention_backward.value(), 2 * ring.kv_bytes);
  if (recompute != core::Recompute::none) out.recompute = out.forward;
  return out;
}

}  // namespace hgsim::sim
