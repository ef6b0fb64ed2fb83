// The planner on scenarios of many clusters: the sets of clusters it searches as one group
// are bounded (every set of up to 10 clusters, fewer clusters per set beyond, said in a
// note), and a cluster index never wraps a bitmask (33 clusters once made c32 alias c0).
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "kernels/gpu_catalog.hpp"
#include "planner/planner.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using testing::checked;

// `n` clusters of two A100s in a chain (c0 - c1 - ... ), gpt3-350m: any one cluster holds the
// model, so the best plan uses one cluster.
std::string chain_of_clusters(int n) {
  std::ostringstream y;
  y << "name: chain" << n << "\nmodel: gpt3-350m\n"
    << "training: {global_batch: 64, seq_len: 1024, precision: fp16, optimizer: adam, "
       "recompute: selective}\nclusters:\n";
  for (int c = 0; c < n; ++c)
    y << "  - {name: c" << c << ", gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 2, "
      << "nvlink: {bandwidth: 100GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 2us}}\n";
  y << "wan:\n";
  for (int c = 0; c + 1 < n; ++c)
    y << "  - {between: [c" << c << ", c" << c + 1 << "], bandwidth: 1Gbps, latency: " << 5 + c % 10
      << "ms}\n";
  y << "strategy: auto\n";
  return y.str();
}

// The clusters of a pipeline in stage order, consecutive stages on one cluster counted once.
std::vector<std::string> path_of(const core::Pipeline& p) {
  std::vector<std::string> path;
  for (const auto& st : p.stages)
    if (path.empty() || path.back() != st.cluster) path.push_back(st.cluster);
  return path;
}

TEST(PlannerManyClusters, TwelveClustersSearchEverySetOfUpToFourClustersAndSaySo) {
  auto c = checked(chain_of_clusters(12));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  planner::Options options;
  options.time_budget_s = 2;  // the mixtures of 12 clusters are many; the budget ends them
  const auto r = planner::search(ctx, options);
  // C(12, 1) + ... + C(12, 4) = 793 sets; with the 5s (792 more) it would pass 1024.
  EXPECT_EQ(r.cluster_sets, 793);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().find("at most 4 of the 12 clusters"), std::string::npos)
      << r.notes.front();
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& cand : r.ranked)
    for (const auto& p : cand.plan.pipelines) EXPECT_LE(path_of(p).size(), 4u);
}

TEST(PlannerManyClusters, TenClustersAreSearchedWholeWithNoNote) {
  auto c = checked(chain_of_clusters(10));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  planner::Options options;
  options.time_budget_s = 1;
  const auto r = planner::search(ctx, options);
  EXPECT_EQ(r.cluster_sets, 1023);  // every non-empty set of 10 clusters
  for (const auto& note : r.notes) EXPECT_EQ(note.find("at most"), std::string::npos) << note;
}

TEST(PlannerManyClusters, ThirtyThreeClustersNeverAliasAndTheModelAgreesWithTheSimulator) {
  auto c = checked(chain_of_clusters(33));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  planner::Options options;
  options.time_budget_s = 2;
  const auto r = planner::plan(ctx, options);
  ASSERT_TRUE(r.best) << (r.why_not.empty() ? "" : r.why_not.front());
  // Every candidate's pipelines visit distinct clusters, each joined to the next by the WAN.
  for (const auto& cand : r.ranked)
    for (const auto& p : cand.plan.pipelines) {
      const auto path = path_of(p);
      EXPECT_EQ(std::set<std::string>(path.begin(), path.end()).size(), path.size())
          << planner::describe(cand.plan);
      for (std::size_t k = 0; k + 1 < path.size(); ++k)
        EXPECT_TRUE(ctx.connected[ctx.cluster_index(path[k])][ctx.cluster_index(path[k + 1])]);
    }
  // The 33rd cluster is a cluster of its own: a plan on it alone is in the families.
  bool c32_alone = false;
  for (const auto& f : r.family_best) {
    std::set<std::string> used;
    for (const auto& p : f.plan.pipelines)
      for (const auto& st : p.stages) used.insert(st.cluster);
    c32_alone = c32_alone || used == std::set<std::string>{"c32"};
  }
  EXPECT_TRUE(c32_alone);
  const double error = r.best->candidate.analytic_s / r.best->simulated_s - 1;
  EXPECT_LT(std::abs(error), 0.15)
      << planner::describe(r.best->candidate.plan) << ": analytic " << r.best->candidate.analytic_s
      << " s, simulated " << r.best->simulated_s << " s";
}

// The sources line names clusters of one NVLink share together: twelve clusters alike give
// the first three and a count, not twelve entries (a hundred clusters once printed a page).
TEST(PlannerManyClusters, ClustersOfOneNvlinkShareAreNamedTogetherInTheSources) {
  std::string yaml = chain_of_clusters(12);
  yaml.replace(yaml.find("strategy: auto\n"), std::string::npos,
               "strategy:\n  pipelines:\n    - micro_batches: 64\n"
               "      stages:\n        - {cluster: c0, tp: 2, layers: 24}\n");
  auto c = checked(yaml);
  const kernels::KernelModel model;
  const std::string network =
      testing::simulate_plan(c, model)["provenance"]["network"].get<std::string>();
  const std::size_t from = network.find("nvlink.bandwidth (");
  ASSERT_NE(from, std::string::npos) << network;
  const std::string shares = network.substr(from, network.find(';', from) - from);
  EXPECT_EQ(shares.rfind("nvlink.bandwidth (c0, c1, c2 and 9 more ", 0), 0u) << shares;
  EXPECT_EQ(shares.find("c3"), std::string::npos) << shares;
}

}  // namespace
}  // namespace hgsim
