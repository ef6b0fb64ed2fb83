// The iteration lowered once (sim/program.hpp): the rules the workload generator and the
// planner's analytic model both read from it.
#include <gtest/gtest.h>

#include <string>

#include "kernels/compute_model.hpp"
#include "models/transformer.hpp"
#include "planner/cost_model.hpp"
#include "planner/outer_sync_cost.hpp"
#include "sim/collectives.hpp"
#include "sim/program.hpp"
#include "sim/resolved_plan.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using testing::checked;

// Two clusters of `nodes` x `per_node` H100s, one DiLoCo island each (a pipeline of two
// stages: tp 4, then tp 2 x dp 3). With nodes of 8 GPUs, cluster a is placed
//   node 0: stage 0 [0, 4), stage 1 dp 0 [4, 6), dp 1 [6, 8);  node 1: stage 1 dp 2 [8, 10)
// so stage 1's six GPUs (fewer than a node holds) sit on two nodes. The WAN is fast and
// short, so that an outer sync's time is its all-gathers inside the islands.
std::string split_islands(int nodes, int per_node) {
  std::string cluster = ", gpu: H100-80GB-SXM, nodes: " + std::to_string(nodes) +
                        ", gpus_per_node: " + std::to_string(per_node) +
                        ", nvlink: {bandwidth: 450GB/s, latency: 1us},"
                        " nic: {bandwidth: 100Gbps, latency: 2us}}\n";
  std::string stages = "[{cluster: X, tp: 4, layers: 4}, {cluster: X, tp: 2, dp: 3, layers: 4}]";
  auto on = [&](const std::string& c) {
    std::string s = stages;
    for (std::size_t at; (at = s.find("X")) != std::string::npos;) s.replace(at, 1, c);
    return s;
  };
  return "name: split\n"
         "model: {name: m, layers: 8, hidden: 1024, heads: 16, vocab: 32000}\n"
         "training: {global_batch: 24, seq_len: 512, precision: bf16}\n"
         "clusters:\n"
         "  - {name: a" +
         cluster + "  - {name: b" + cluster +
         "wan:\n  - {between: [a, b], bandwidth: 800Gbps, latency: 10us}\n"
         "simulation: {fidelity: full}\n"
         "strategy:\n"
         "  micro_batch: 6\n"
         "  outer_sync: {method: diloco, inner_steps: 10}\n"
         "  pipelines:\n"
         "    - {micro_batches: 2, stages: " +
         on("a") + "}\n    - {micro_batches: 2, stages: " + on("b") + "}\n";
}

bool same(const sim::Hop2& x, const sim::Hop2& y) {
  return x.bytes_per_s == y.bytes_per_s && x.latency_s == y.latency_s;
}

TEST(RingHop, ThePlacementDecidesNotTheGpuCount) {
  const auto c = checked(split_islands(2, 8));
  ASSERT_TRUE(c.plan);
  const sim::ResolvedPlan& r = c.plan->resolved();
  const core::Cluster& a = c.scenario.clusters[0];
  // Stage 0: one group on node 0. Stage 1: two groups on node 0, one on node 1.
  EXPECT_EQ(sim::stage_members_per_node(r, 0, 0), (std::vector<int>{1}));
  EXPECT_EQ(sim::stage_members_per_node(r, 0, 1), (std::vector<int>{2, 1}));
  EXPECT_TRUE(same(sim::stage_ring_hop(r, 0, 0), sim::nvlink_hop(a)));
  EXPECT_TRUE(same(sim::stage_ring_hop(r, 0, 1), sim::nic_hop(a)));
  // A segment's data-parallel ring reads the same rule: stage 1's ring leaves node 0 (on
  // each island), stage 0's has one member per island.
  for (const sim::Segment& seg : r.segments) {
    const bool second_stage = seg.holders[0].first == 1;
    EXPECT_TRUE(
        same(sim::segment_ring_hop(r, seg, 0), second_stage ? sim::nic_hop(a) : sim::nvlink_hop(a)))
        << "segment from layer " << seg.first_layer;
  }
  // On nodes of 16 the same plan sits on one node, and its rings on NVLink.
  const auto wide = checked(split_islands(1, 16));
  ASSERT_TRUE(wide.plan);
  EXPECT_TRUE(same(sim::stage_ring_hop(wide.plan->resolved(), 0, 1),
                   sim::nvlink_hop(wide.scenario.clusters[0])));
}

TEST(RingHop, TheAnalyticOuterSyncGathersOnTheHopThePlacementGives) {
  // The planner's DiLoCo estimate all-gathers stage 1's shard inside each island: through
  // the NIC when its ring splits across nodes (it used to count GPUs: 6 <= 8, NVLink), on
  // NVLink when one node of 16 holds it. The NIC (12.5 GB/s) is much slower than NVLink.
  const kernels::KernelModel roofline;
  const auto split = checked(split_islands(2, 8));
  const auto wide = checked(split_islands(1, 16));
  const auto split_ctx =
      planner::make_context(split.scenario, split.model, split.compression, roofline);
  const auto wide_ctx =
      planner::make_context(wide.scenario, wide.model, wide.compression, roofline);
  const auto on_split = planner::estimate_outer_sync(split_ctx, split.scenario.strategy.plan);
  const auto on_wide = planner::estimate_outer_sync(wide_ctx, wide.scenario.strategy.plan);
  ASSERT_EQ(on_split.fragment_s.size(), 1u);
  ASSERT_EQ(on_wide.fragment_s.size(), 1u);
  // Stage 1's shard: its parameters on one GPU (tp 2), bf16 pseudo-gradients, 3 holders.
  const sim::ResolvedPlan& r = split.plan->resolved();
  const double shard = 2 * models::stage_parameters(*r.model, models::stage_spec(r.plan, 0, 1));
  const core::Cluster& a = split.scenario.clusters[0];
  const double gap = sim::ring_all_gather_time(3, shard, sim::nic_hop(a)) -
                     sim::ring_all_gather_time(3, shard, sim::nvlink_hop(a));
  ASSERT_GT(gap, 0);
  EXPECT_GT(on_split.fragment_s[0], on_wide.fragment_s[0] + 0.5 * gap)
      << "split " << on_split.fragment_s[0] << " s, one node " << on_wide.fragment_s[0] << " s";
}

}  // namespace
}  // namespace hgsim
