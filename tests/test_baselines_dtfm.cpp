// The dtfm and megatron baselines against what Yuan et al. 2022 (DT-FM, NeurIPS 2022) state:
// DT-FM's pieces (bottleneck matching, open-loop tour) against brute force; on the paper's
// world-wide setting its data-parallel groups stay inside regions, its tour visits each
// region once and is the shortest over the regions; no tensor parallelism; Megatron's plan
// is one uniform tp x pp x dp layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "kernels/compute_model.hpp"
#include "models/transformer.hpp"
#include "planner/baselines.hpp"
#include "planner/cost_model.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using testing::checked;

std::string read(const std::string& path) {
  std::ifstream in(std::string(HGSIM_SOURCE_DIR) + "/" + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::vector<double>> random_matrix(std::mt19937& rng, int n, bool symmetric) {
  std::uniform_real_distribution<double> value(0.1, 10);
  std::vector<std::vector<double>> m(n, std::vector<double>(n, 0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (!symmetric || j > i) m[i][j] = value(rng);
  if (symmetric)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < i; ++j) m[i][j] = m[j][i];
  return m;
}

TEST(DtfmScheduler, BottleneckMatchingIsTheBestOverEveryPermutation) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 1 + trial % 6;
    const auto cost = random_matrix(rng, n, false);
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    double brute = 1e300;
    do {
      double worst = 0;
      for (int i = 0; i < n; ++i) worst = std::max(worst, cost[i][perm[i]]);
      brute = std::min(brute, worst);
    } while (std::next_permutation(perm.begin(), perm.end()));
    std::vector<int> match;
    const double got = planner::dtfm::bottleneck_matching(cost, match);
    EXPECT_DOUBLE_EQ(got, brute);
    ASSERT_EQ(static_cast<int>(match.size()), n);
    std::set<int> cols(match.begin(), match.end());
    EXPECT_EQ(static_cast<int>(cols.size()), n);  // a perfect matching
    for (int i = 0; i < n; ++i) EXPECT_LE(cost[i][match[i]], got);
  }
}

double path_length(const std::vector<std::vector<double>>& cost, const std::vector<int>& t) {
  double sum = 0;
  for (std::size_t k = 1; k < t.size(); ++k) sum += cost[t[k - 1]][t[k]];
  return sum;
}

TEST(DtfmScheduler, OpenLoopTourIsTheShortestPathThroughEveryNode) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 1 + trial % 8;
    const auto cost = random_matrix(rng, n, true);
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    double brute = 1e300;
    do brute = std::min(brute, path_length(cost, perm));
    while (std::next_permutation(perm.begin(), perm.end()));
    double length = 0;
    const auto tour = planner::dtfm::open_loop_tour(cost, length);
    ASSERT_EQ(static_cast<int>(tour.size()), n);
    EXPECT_EQ(std::set<int>(tour.begin(), tour.end()).size(), static_cast<std::size_t>(n));
    EXPECT_NEAR(length, brute, 1e-9 * brute);
    EXPECT_NEAR(path_length(cost, tour), length, 1e-9 * (1 + length));
  }
  // Past the exact size the heuristic still visits every node once, and its length is its
  // path's.
  const auto big = random_matrix(rng, 16, true);
  double length = 0;
  const auto tour = planner::dtfm::open_loop_tour(big, length);
  EXPECT_EQ(std::set<int>(tour.begin(), tour.end()).size(), 16u);
  EXPECT_NEAR(path_length(big, tour), length, 1e-9 * length);
}

struct WorldWide {
  apps::CheckedScenario c = checked(read("scenarios/paper/dtfm-5-world-wide.yaml"));
  kernels::KernelModel compute;
  planner::Context ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
};

// §3: with 8 GPUs in each of 8 regions and 8 x 8 tasklets, the cheapest cut keeps every
// data-parallel group inside one region (in-region links are faster than any WAN pair), and
// the pipeline's order is the shortest open path over the regions.
TEST(DtfmScheduler, WorldWideGroupsStayInsideRegionsAndTheTourIsTheShortest) {
  WorldWide w;
  const auto net = planner::dtfm::network(w.ctx);
  ASSERT_EQ(net.size(), 64);
  planner::dtfm::Payload payload;
  const int L = w.c.model.layers;
  payload.activation_bytes =
      models::pipeline_boundary_bytes(w.c.model, 1024.0 / 8, 2048, core::Precision::fp16).value();
  payload.gradient_bytes = 2 * models::layer_parameters(w.c.model) * (L / 8);
  const auto s = planner::dtfm::schedule(net, 8, 8, payload, 1);
  ASSERT_EQ(s.groups.size(), 8u);
  std::vector<int> region_of_stage;
  for (const auto& g : s.groups) {
    ASSERT_EQ(g.size(), 8u);
    std::set<int> regions;
    for (int d : g) regions.insert(net.cluster[d]);
    EXPECT_EQ(regions.size(), 1u) << "a data-parallel group spans regions";
    region_of_stage.push_back(net.cluster[g[0]]);
  }
  EXPECT_EQ(std::set<int>(region_of_stage.begin(), region_of_stage.end()).size(), 8u)
      << "the tour visits a region twice";
  // Every pipeline follows the tour: stage s on a GPU of stage s's region.
  ASSERT_EQ(s.pipelines.size(), 8u);
  for (const auto& p : s.pipelines)
    for (std::size_t k = 0; k < p.size(); ++k) EXPECT_EQ(net.cluster[p[k]], region_of_stage[k]);
  // The tour against every order of the regions, each hop costed independently as the
  // paper's alpha + c_PP / beta between two GPUs of the two regions.
  std::vector<std::vector<double>> hop(8, std::vector<double>(8, 0));
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        const auto& ca = w.c.scenario.clusters[a];
        const auto& cb = w.c.scenario.clusters[b];
        const double beta = std::min(
            {w.ctx.wan_bandwidth[a][b], ca.nic.bandwidth.value(), cb.nic.bandwidth.value()});
        hop[a][b] = w.ctx.latency[a][b] + payload.activation_bytes / beta;
      }
  std::vector<int> perm(8);
  std::iota(perm.begin(), perm.end(), 0);
  double brute = 1e300;
  do brute = std::min(brute, path_length(hop, perm));
  while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_NEAR(s.pipeline_s, brute, 1e-9 * brute);
  EXPECT_NEAR(path_length(hop, region_of_stage), brute, 1e-9 * brute);
  // The same seed gives the same schedule.
  const auto again = planner::dtfm::schedule(net, 8, 8, payload, 1);
  EXPECT_EQ(again.groups, s.groups);
  EXPECT_EQ(again.pipelines, s.pipelines);
}

// The baselines' plans on the world-wide setting (a smaller batch keeps the simulation
// short): dtfm has no tensor parallelism, every stage index in one region across its
// pipelines (data parallelism inside regions) and each pipeline visits a region at most
// once; megatron is one tp x pp x dp layout over all 64 GPUs, uniform layers.
TEST(DtfmBaseline, WorldWidePlanKeepsDataParallelismInsideRegionsWithoutTensorParallelism) {
  std::string yaml = read("scenarios/paper/dtfm-5-world-wide.yaml");
  yaml.replace(yaml.find("global_batch: 1024"), 18, "global_batch: 64");
  auto c = checked(yaml);
  kernels::KernelModel compute;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  planner::Options options;
  options.time_budget_s = 2;
  options.verify = 1;
  const auto baselines = planner::run_baselines(ctx, options);
  const auto find = [&](const std::string& name) {
    return std::find_if(baselines.begin(), baselines.end(),
                        [&](const planner::Baseline& b) { return b.name == name; });
  };
  const auto dtfm = find("dtfm");
  ASSERT_NE(dtfm, baselines.end());
  ASSERT_TRUE(dtfm->feasible && dtfm->plan) << dtfm->why;
  const auto& plan = *dtfm->plan;
  EXPECT_EQ(plan.schedule, core::Schedule::gpipe);
  // The authors' runs: 8 stages x 8 replicas, micro-batch 1, every layer recomputed.
  EXPECT_EQ(plan.micro_batch, 1);
  EXPECT_EQ(plan.recompute, core::Recompute::full);
  int replicas = 0;
  for (const auto& p : plan.pipelines) replicas += p.replicas;
  EXPECT_EQ(replicas, 8);
  EXPECT_EQ(plan.pipelines.front().stages.size(), 8u);
  std::size_t stages = plan.pipelines.front().stages.size();
  for (const auto& p : plan.pipelines) {
    ASSERT_EQ(p.stages.size(), stages);
    std::set<std::string> visited;
    for (const auto& st : p.stages) {
      EXPECT_EQ(st.tp, 1);
      EXPECT_EQ(st.dp, 1);
      visited.insert(st.cluster);
    }
    EXPECT_EQ(visited.size(), stages) << "a pipeline visits a region twice";
  }
  for (std::size_t k = 0; k < stages; ++k)
    for (const auto& p : plan.pipelines)
      EXPECT_EQ(p.stages[k].cluster, plan.pipelines.front().stages[k].cluster)
          << "stage " << k << "'s data-parallel group spans regions";

  const auto megatron = find("megatron");
  ASSERT_NE(megatron, baselines.end());
  ASSERT_TRUE(megatron->feasible && megatron->plan) << megatron->why;
  const auto& mplan = *megatron->plan;
  const auto& first = mplan.pipelines.front();
  const int pp = static_cast<int>(first.stages.size());
  EXPECT_EQ(c.model.layers % pp, 0);
  int gpus = 0;
  for (const auto& p : mplan.pipelines) {
    ASSERT_EQ(static_cast<int>(p.stages.size()), pp);
    for (const auto& st : p.stages) {
      EXPECT_EQ(st.tp, first.stages[0].tp);
      EXPECT_EQ(st.layers, c.model.layers / pp);
      gpus += p.replicas * st.gpus();
    }
  }
  EXPECT_EQ(gpus, 64);  // Megatron runs on every GPU
}

}  // namespace
}  // namespace hgsim
