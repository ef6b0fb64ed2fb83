#include "sim/program.hpp"

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

}  // namespace hgsim::sim
