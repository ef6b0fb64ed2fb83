#include "sim/program.hpp"

#include <algorithm>
#include <limits>

namespace hgsim::sim {

Hop2 ring_hop(const core::Cluster& cluster, const std::vector<int>& members_per_node) {
  return members_per_node.size() <= 1 ? nvlink_hop(cluster) : nic_hop(cluster);
}

Hop2 segment_ring_hop(const ResolvedPlan& r, const Segment& seg, int cluster) {
  return ring_hop(r.scenario->clusters[cluster], segment_members_per_node(r, seg, cluster));
}

Hop2 stage_ring_hop(const ResolvedPlan& r, int pipeline, int stage) {
  return ring_hop(r.scenario->cluster(r.stage(pipeline, stage).cluster),
                  stage_members_per_node(r, pipeline, stage));
}

double segment_bucket_time(const ResolvedPlan& r, const Segment& seg, int cluster, int members,
                           double bytes) {
  const core::Cluster& c = r.scenario->clusters[cluster];
  const auto algorithm = r.plan.grad_sync.algorithm;
  if (runs_as_channel_rings(algorithm))
    return channel_ring_all_reduce_time(c, channel_ring(segment_members_per_node(r, seg, cluster)),
                                        bytes);
  return all_reduce_time(algorithm, members, bytes, segment_ring_hop(r, seg, cluster));
}

std::vector<double> buckets_beside_backward(const ResolvedPlan& r, int pipeline, int stage,
                                            int chunk) {
  const LayerRange range = r.layers[pipeline][stage][chunk];
  std::vector<double> out(range.count, 0.0);
  if (r.choices.grad_reduce != core::GradReduce::overlap) return out;
  const int cluster = r.scenario->cluster_index(r.stage(pipeline, stage).cluster).value_or(0);
  for (const Segment& seg : r.segments) {
    if (seg.buckets == 0 || seg.holders[pipeline] != std::pair{stage, chunk}) continue;
    // The members that reduce with this stage: every pipeline's holder, or with outer sync
    // (DiLoCo) this pipeline's only, as the workload's islands.
    int members = 0;
    int rings = std::numeric_limits<int>::max();
    bool one_cluster = true;
    for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
      if (r.plan.outer_sync.enabled() && int(i) != pipeline) continue;
      const core::Stage& holder = r.stage(int(i), seg.holders[i].first);
      one_cluster = one_cluster && r.scenario->cluster_index(holder.cluster) == cluster;
      members += r.plan.pipelines[i].replicas * holder.slices();
      rings = std::min(rings, holder.tp);
    }
    if (!one_cluster || members <= 1) continue;
    const GradientBuckets buckets =
        gradient_buckets(seg.parameters, rings, r.choices, r.plan.grad_sync.bucket);
    const double seconds = segment_bucket_time(r, seg, cluster, members, buckets.bytes_per_ring);
    for (const BucketRun& run : bucket_runs(seg.first_layer, seg.layers, buckets.count)) {
      const int local = run.lowest - range.first;
      if (local >= 0 && local < range.count) out[local] += (run.last - run.first + 1) * seconds;
    }
  }
  return out;
}

}  // namespace hgsim::sim
