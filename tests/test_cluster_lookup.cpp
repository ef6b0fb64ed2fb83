// A cluster name that no cluster has is refused where it is looked up, never mapped to a
// default cluster (the first, index 0): the scenario's lookups, the planner's, and the
// analytic model on a plan that names it.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/compute_model.hpp"
#include "planner/cost_model.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

apps::CheckedScenario two_clusters() {
  return testing::checked(std::string("name: lookup\n") + testing::kTinyModel +
                          "training: {global_batch: 4, seq_len: 128}\n"
                          "clusters:\n"
                          "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 4}\n"
                          "  - {name: b, gpu: V100-32GB-SXM, nodes: 1, gpus_per_node: 4}\n"
                          "wan:\n  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms}\n"
                          "strategy:\n  pipelines:\n    - micro_batches: 4\n      stages:\n"
                          "        - {cluster: a, layers: 4}\n"
                          "        - {cluster: b, layers: 4}\n");
}

TEST(ClusterLookup, TheScenarioRefusesAnUnknownName) {
  const auto c = two_clusters();
  EXPECT_EQ(c.scenario.cluster_index("b"), 1);
  EXPECT_EQ(&c.scenario.cluster("b"), &c.scenario.clusters[1]);
  EXPECT_FALSE(c.scenario.cluster_index("mars").has_value());
  EXPECT_EQ(c.scenario.find_cluster("mars"), nullptr);
  try {
    (void)c.scenario.cluster("mars");
    ADD_FAILURE() << "cluster(\"mars\") returned a cluster";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'mars'"), std::string::npos) << e.what();
  }
}

TEST(ClusterLookup, ThePlannerRefusesAnUnknownName) {
  const auto c = two_clusters();
  const kernels::KernelModel compute;
  const planner::Context ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  EXPECT_EQ(ctx.cluster_index("a"), 0);
  EXPECT_EQ(ctx.cluster_index("b"), 1);
  EXPECT_THROW((void)ctx.cluster_index("mars"), std::invalid_argument);
  // A plan naming it costs nothing finite and says why, rather than running on cluster a.
  core::Plan plan = c.scenario.strategy.plan;
  plan.pipelines[0].stages[1].cluster = "mars";
  const planner::Estimate e = planner::estimate(ctx, plan);
  EXPECT_TRUE(std::isinf(e.iteration_s));
  EXPECT_FALSE(e.fits);
  EXPECT_NE(e.not_fitting.find("mars"), std::string::npos) << e.not_fitting;
}

}  // namespace
}  // namespace hgsim
