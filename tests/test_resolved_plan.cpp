// The one model of a plan (sim/resolved_plan.hpp): one placement that check and run share,
// one application of a plan's own choices that plan --evaluate and run --plan share, and one
// fidelity rule for the planner's verification and run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "apps/commands.hpp"
#include "apps/validate.hpp"
#include "core/document.hpp"
#include "planner/cost_model.hpp"
#include "sim/resolved_plan.hpp"
#include "sim/results.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

namespace fs = std::filesystem;
using core::Json;

using testing::cli;

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("hgsim-resolved-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

// One cluster of `nodes` x 8 GPUs with an explicit plan of the given stages (tp each).
std::string one_cluster(int nodes, const std::vector<int>& tps) {
  std::string yaml =
      "name: placement\n"
      "model: {name: m, layers: 12, hidden: 768, heads: 24, vocab: 50304}\n"
      "training: {global_batch: 4, seq_len: 128, precision: bf16}\n"
      "clusters:\n"
      "  - {name: a, gpu: H100-80GB-SXM, nodes: " +
      std::to_string(nodes) +
      ", gpus_per_node: 8, nvlink: {bandwidth: 300GB/s, latency: 1us},"
      " nic: {bandwidth: 200Gbps, latency: 2us}}\n"
      "strategy:\n  micro_batch: 1\n  pipelines:\n    - micro_batches: 4\n      stages:\n";
  for (int tp : tps)
    yaml += "        - {cluster: a, tp: " + std::to_string(tp) +
            ", layers: " + std::to_string(12 / tps.size()) + "}\n";
  return yaml;
}

std::optional<apps::CheckedScenario> check_yaml(const std::string& yaml, core::Diagnostics& d) {
  auto node = core::parse_yaml(yaml, "test.yaml", d);
  if (!node) return std::nullopt;
  auto s = core::parse_scenario(*node, "test.yaml", d);
  if (!s) return std::nullopt;
  return apps::check_scenario(*s, d);
}

// The scenario's own plan, resolved (it points into `checked`, which must outlive it).
std::optional<sim::ResolvedPlan> resolve_own_plan(const apps::CheckedScenario& checked,
                                                  core::Diagnostics& diags) {
  return sim::resolve_plan(checked.scenario, checked.model, checked.compression,
                           checked.scenario.strategy.plan, "strategy", diags);
}

// ---- placement: whatever check accepts, run places on GPUs that exist -------------------

TEST(ResolvedPlacement, PhantomNodeCaseIsPlacedOnTheNodesThatExist) {
  // 2 nodes x 8 GPUs, stages tp 2, tp 8, tp 2: placing the groups one after another in
  // plan order would put the last tp 2 on a third node, which does not exist.
  const std::string yaml = one_cluster(2, {2, 8, 2});
  core::Diagnostics diags;
  const auto c = check_yaml(yaml, diags);
  ASSERT_TRUE(c) << diags.format();
  const auto r = resolve_own_plan(*c, diags);
  ASSERT_TRUE(r) << diags.format();
  std::set<int> positions;
  for (const auto& g : r->groups) {
    ASSERT_LT(g.node(c->scenario), 2);
    // A group stays inside its node.
    EXPECT_EQ(g.first_gpu / 8, (g.first_gpu + g.tp - 1) / 8);
    for (int t = 0; t < g.tp; ++t) EXPECT_TRUE(positions.insert(g.first_gpu + t).second);
  }
  EXPECT_EQ(positions.size(), 12u);
  // And `hgsim run` simulates it with devices named on nodes n0 and n1 only.
  const fs::path file = temp_file("phantom.yaml", yaml);
  auto run = cli({"run", file.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Json result = Json::parse(run.out);
  ASSERT_EQ(result["devices"].size(), 12u);
  for (const auto& d : result["devices"]) {
    const std::string id = d["id"];
    EXPECT_TRUE(id.rfind("a/n0/", 0) == 0 || id.rfind("a/n1/", 0) == 0) << id;
  }
  fs::remove(file);
}

TEST(ResolvedPlacement, WhatNoNodeHasRoomForIsRefusedAtTheStagesKeyPath) {
  // Groups of 6, 6 and 4 GPUs on two nodes of 8: 16 GPUs, but no node keeps room for the 4.
  core::Diagnostics diags;
  const auto c = check_yaml(one_cluster(2, {6, 6, 4}), diags);
  EXPECT_FALSE(c);
  const std::string text = diags.format();
  EXPECT_NE(text.find("strategy.pipelines[0].stages[2].tp"), std::string::npos) << text;
  EXPECT_NE(text.find("cannot be placed"), std::string::npos) << text;
  EXPECT_NE(text.find("divide gpus_per_node (8)"), std::string::npos) << text;
}

TEST(ResolvedPlacement, EveryAcceptedPlanOfTwoNodesFitsItsNodes) {
  // Every sequence of three tp degrees in {1, 2, 3, 4, 6, 8} on two nodes of 8: degrees that
  // divide 8 are always placed when they add up to at most 16 GPUs, and every placed group
  // sits inside a node that exists, each GPU used once.
  const std::vector<int> degrees{1, 2, 3, 4, 6, 8};
  int accepted = 0;
  for (int a : degrees)
    for (int b : degrees)
      for (int t : degrees) {
        if (a + b + t > 16) continue;
        core::Diagnostics diags;
        core::Diagnostics parse;
        auto node = core::parse_yaml(one_cluster(2, {a, b, t}), "t.yaml", parse);
        auto s = core::parse_scenario(*node, "t.yaml", parse);
        ASSERT_TRUE(s) << parse.format();
        auto groups = sim::place_groups(*s, s->strategy.plan, "strategy", diags);
        const bool divide = 8 % a == 0 && 8 % b == 0 && 8 % t == 0;
        if (divide) {
          EXPECT_TRUE(groups) << a << " " << b << " " << t << ": " << diags.format();
        }
        if (!groups) continue;
        ++accepted;
        std::set<int> used;
        for (const auto& g : *groups) {
          EXPECT_LT((g.first_gpu + g.tp - 1) / 8, 2);
          EXPECT_EQ(g.first_gpu / 8, (g.first_gpu + g.tp - 1) / 8);
          for (int k = 0; k < g.tp; ++k) EXPECT_TRUE(used.insert(g.first_gpu + k).second);
        }
      }
  EXPECT_GT(accepted, 100);
}

// Tensor parallelism across nodes: a group larger than a node holds whole nodes.
TEST(ResolvedPlacement, GroupsLargerThanANodeHoldWholeNodesAndEveryGpuOnce) {
  // Every sequence of three tp degrees in {1, 2, 4, 8, 16, 24} on four nodes of 8 that adds
  // up to at most 32 GPUs is placed: a group of tp <= 8 inside one node, a larger one from
  // a node's first GPU over tp / 8 whole nodes that no other group touches.
  const std::vector<int> degrees{1, 2, 4, 8, 16, 24};
  int spanning = 0;
  for (int a : degrees)
    for (int b : degrees)
      for (int t : degrees) {
        if (a + b + t > 32) continue;
        SCOPED_TRACE(std::to_string(a) + " " + std::to_string(b) + " " + std::to_string(t));
        core::Diagnostics diags;
        core::Diagnostics parse;
        auto node = core::parse_yaml(one_cluster(4, {a, b, t}), "t.yaml", parse);
        auto s = core::parse_scenario(*node, "t.yaml", parse);
        ASSERT_TRUE(s) << parse.format();
        auto groups = sim::place_groups(*s, s->strategy.plan, "strategy", diags);
        ASSERT_TRUE(groups) << diags.format();
        std::set<int> used;
        std::map<int, int> holder;  // node -> the spanning group that holds it
        for (std::size_t k = 0; k < groups->size(); ++k) {
          const auto& g = (*groups)[k];
          const int first = g.first_gpu / 8, last = (g.first_gpu + g.tp - 1) / 8;
          EXPECT_LT(last, 4);
          if (g.tp <= 8) {
            EXPECT_EQ(first, last);
          } else {
            ++spanning;
            EXPECT_EQ(g.first_gpu % 8, 0);
            EXPECT_EQ(last - first + 1, g.tp / 8);
            for (int n = first; n <= last; ++n) holder[n] = static_cast<int>(k);
          }
          for (int x = 0; x < g.tp; ++x) EXPECT_TRUE(used.insert(g.first_gpu + x).second);
        }
        for (const auto& g : *groups) {
          if (g.tp <= 8) {
            EXPECT_EQ(holder.count(g.first_gpu / 8), 0u) << "shares a spanned node";
          }
        }
      }
  EXPECT_GT(spanning, 20);
}

TEST(ResolvedPlacement, TensorParallelismAcrossNodesIsWarnedAndPartNodesRefused) {
  {
    core::Diagnostics diags;
    std::string yaml = one_cluster(2, {16});  // 24 heads do not split 16 ways: 32
    yaml.replace(yaml.find("hidden: 768, heads: 24"), 22, "hidden: 1024, heads: 32");
    const auto c = check_yaml(yaml, diags);
    ASSERT_TRUE(c) << diags.format();
    const std::string text = diags.format();
    EXPECT_NE(text.find("strategy.pipelines[0].stages[0].tp"), std::string::npos) << text;
    EXPECT_NE(text.find("spans 2 nodes"), std::string::npos) << text;
    EXPECT_NE(text.find("cross the NIC (200 Gbit/s)"), std::string::npos) << text;
  }
  {
    core::Diagnostics diags;
    EXPECT_FALSE(check_yaml(one_cluster(3, {12}), diags));
    const std::string text = diags.format();
    EXPECT_NE(text.find("not a whole number of nodes"), std::string::npos) << text;
    EXPECT_NE(text.find("a multiple of 8"), std::string::npos) << text;
  }
}

// A tensor-parallel group of two whole nodes: NCCL's rings of 16 (one channel per GPU of a
// node) whose two node-crossing hops go over the NIC and the 14 others over NVLink. One stage, one
// replica, no recomputation: the exposed communication of every GPU is 4 all-reduces per layer and
// micro-batch (two forward, two backward) of one micro-batch's activations S, each 2 (n - 1) steps
// of a chunk S / (8 n) on every channel at once, a step max(chunk / B_nic, the hops' mean latency +
// chunk / bandwidth), written here from the scenario's figures. Small activations over a fast NIC
// (the mean hop sets the pace) and large ones over a slow NIC (the NIC does), at full and at folded
// fidelity.
TEST(ResolvedPlacement, TensorParallelismAcrossNodesCostsItsRingInFullAndFolded) {
  struct Case {
    const char* name;
    double hidden, seq_len, layers, micro_batches, nic_gbps;
    // Full against the closed form: the channels' in-node hops share a GPU's NVLink only
    // while they overlap, so the lowering runs up to 1% faster (as the data-parallel
    // channels below).
    double tolerance_full;
  };
  for (const Case& c : {Case{"latency-bound", 1024, 128, 12, 4, 200, 1e-2},
                        Case{"bandwidth-bound", 4096, 2048, 2, 1, 10, 5e-3}}) {
    SCOPED_TRACE(c.name);
    std::string yaml = one_cluster(2, {16});
    auto set = [&](const std::string& from, const std::string& to) {
      const auto at = yaml.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      yaml.replace(at, from.size(), to);
    };
    set("hidden: 768, heads: 24", "hidden: " + std::to_string(int(c.hidden)) + ", heads: 32");
    set("layers: 12,", "layers: " + std::to_string(int(c.layers)) + ",");
    set("layers: 12}", "layers: " + std::to_string(int(c.layers)) + "}");
    set("seq_len: 128", "seq_len: " + std::to_string(int(c.seq_len)));
    set("global_batch: 4", "global_batch: " + std::to_string(int(c.micro_batches)));
    set("micro_batches: 4", "micro_batches: " + std::to_string(int(c.micro_batches)));
    set("200Gbps", std::to_string(int(c.nic_gbps)) + "Gbps");
    // NCCL's 8 channels (one per GPU of a node, each leaving through its own NIC), each
    // over S / 8; each GPU's NVLink carries 7 channels' in-node hops. With NCCL's latencies
    // and fixed cost at 0 (a calibration) every protocol's extra is 0 and Simple runs: the
    // channel rings alone, written out here.
    const double n = 16, crossings = 2, channels = 8, load = 7;
    const double S = 1 * c.seq_len * c.hidden * 2;  // micro_batch 1, bf16
    const double chunk = S / channels / n;
    const double nic = c.nic_gbps * 1e9 / 8, nic_latency = 2 * 2e-6;
    const double nvlink = 300e9 * testing::kNcclNvlinkShareH100 / load, nvlink_latency = 2 * 1e-6;
    const double mean = ((n - crossings) * (nvlink_latency + chunk / nvlink) +
                         crossings * (nic_latency + chunk / nic)) /
                        n;
    core::Diagnostics diags;
    const auto checked = check_yaml(yaml, diags);
    ASSERT_TRUE(checked) << diags.format();
    auto zero = checked->scenario.clusters[0];
    zero.calibration.nccl_latency_scale = 0;
    zero.calibration.nccl_fixed_cost_2_ranks = core::Seconds(0);
    zero.calibration.nccl_fixed_cost_8_ranks = core::Seconds(0);
    EXPECT_NEAR(sim::tensor_parallel_block_time(zero, 16, S, false),
                2 * (n - 1) * std::max(chunk / nic, mean), 1e-12);
    // With NCCL's costs (its protocol and fixed cost), both fidelities play the closed form:
    // four all-reduces a layer and micro-batch.
    const double one = sim::tensor_parallel_block_time(checked->scenario.clusters[0], 16, S, false);
    const double expected = 4 * c.layers * c.micro_batches * one;
    for (const char* fidelity : {"full", "folded"}) {
      SCOPED_TRACE(fidelity);
      const fs::path file = temp_file(std::string("span-") + fidelity + ".yaml", yaml);
      auto run = cli({"run", file.c_str(), "--json", "--fidelity", fidelity});
      fs::remove(file);
      ASSERT_EQ(run.status, 0) << run.err;
      const Json result = Json::parse(run.out);
      ASSERT_FALSE(result["devices"].empty());
      const double tolerance = std::string(fidelity) == "full" ? c.tolerance_full : 1e-9;
      // Every GPU computes the same and waits for the same rings: the iteration is its
      // compute and the collectives (no pipeline, no data parallelism); the GPU whose ring
      // position waits longest has all of them as exposed communication.
      const double iteration = result["iteration_time_s"];
      double most = 0;
      for (const auto& d : result["devices"]) {
        const double compute = d["compute_s"];
        EXPECT_NEAR(iteration - compute, expected, tolerance * expected) << d["id"];
        most = std::max(most, d["comm_exposed_s"].get<double>());
      }
      EXPECT_NEAR(most, expected, tolerance * expected);
    }
  }
}

// Data parallelism over nodes uses every NIC it can, as NCCL's channels do: 16 members, 8
// on each of 2 nodes, reduce in 8 channels of bytes / 8, each leaving a node through a
// different GPU's NIC, its other hops on NVLink ports that carry the other 7 channels. The
// closed form is written out here; both fidelities and the planner's analytic model must
// give it (a single ring through one NIC per node would take about 8 times longer).
TEST(ResolvedPlacement, DataParallelRingsAcrossNodesUseEveryNic) {
  std::string yaml = one_cluster(2, {1});
  auto set = [&](const std::string& from, const std::string& to) {
    const auto at = yaml.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    yaml.replace(at, from.size(), to);
  };
  set("global_batch: 4", "global_batch: 16");
  set("micro_batches: 4", "micro_batches: 1");
  set("200Gbps", "10Gbps");
  set("    - micro_batches", "    - replicas: 16\n      micro_batches");
  yaml += "  grad_reduce: after_backward\n  grad_sync: {algorithm: ring, bucket: 64MB}\n";
  core::Diagnostics diags;
  const auto c = check_yaml(yaml, diags);
  ASSERT_TRUE(c) << diags.format();
  const auto r = resolve_own_plan(*c, diags);
  ASSERT_TRUE(r) << diags.format();
  ASSERT_EQ(r->segments.size(), 1u);
  const auto& seg = r->segments[0];
  EXPECT_EQ(sim::segment_members_per_node(*r, seg, 0), (std::vector<int>{8, 8}));

  const double n = 16, k = 8, nodes = 2;
  const double chunk = seg.bucket_bytes / k / n;
  const double nic = 10e9 / 8, nic_latency = 2 * 2e-6;
  const double nvlink = 300e9 * testing::kNcclNvlinkShareH100 / (k - 1), nvlink_latency = 2 * 1e-6;
  const double mean =
      ((n - nodes) * (nvlink_latency + chunk / nvlink) + nodes * (nic_latency + chunk / nic)) / n;
  // The channel rings alone, with NCCL's latencies and fixed cost at 0 (a calibration):
  // every protocol's extra is 0 and Simple runs.
  auto zero = c->scenario.clusters[0];
  zero.calibration.nccl_latency_scale = 0;
  zero.calibration.nccl_fixed_cost_2_ranks = core::Seconds(0);
  zero.calibration.nccl_fixed_cost_8_ranks = core::Seconds(0);
  const double rings = 2 * (n - 1) * std::max(chunk / nic, mean);
  EXPECT_NEAR(sim::channel_ring_all_reduce_time(zero, sim::channel_ring({8, 8}), seg.bucket_bytes),
              rings, 1e-12 * rings);
  // With NCCL's costs, every fidelity plays the closed form's protocol and fixed cost.
  const double expected =
      seg.buckets * sim::channel_ring_all_reduce_time(c->scenario.clusters[0],
                                                      sim::channel_ring({8, 8}), seg.bucket_bytes);

  const fs::path file = temp_file("dp-channels.yaml", yaml);
  double folded = 0;
  for (const char* fidelity : {"full", "folded"}) {
    SCOPED_TRACE(fidelity);
    auto run = cli({"run", file.c_str(), "--json", "--fidelity", fidelity});
    ASSERT_EQ(run.status, 0) << run.err;
    const Json result = Json::parse(run.out);
    // The sync starts when every GPU's backward is done (after_backward) and nothing else
    // runs beside it: each GPU's exposed communication is the all-reduce.
    const double tolerance = std::string(fidelity) == "full" ? 1e-2 : 1e-9;
    for (const auto& d : result["devices"])
      EXPECT_NEAR(d["comm_exposed_s"].get<double>(), expected, tolerance * expected) << d["id"];
    folded = result["iteration_time_s"];
  }
  fs::remove(file);
  const kernels::KernelModel compute;
  const auto ctx = planner::make_context(c->scenario, c->model, c->compression, compute);
  EXPECT_NEAR(planner::estimate(ctx, c->scenario.strategy.plan).iteration_s, folded, 1e-9 * folded);
}

TEST(ResolvedPlan, ReshardPiecesCoverTheTensorOnceAndNameTheOverlappingSlices) {
  for (auto [from_dp, from_tp, to_dp, to_tp] :
       {std::tuple{2, 1, 1, 2}, std::tuple{3, 2, 2, 1}, std::tuple{1, 4, 4, 2}}) {
    core::Stage from{"a", from_tp, from_dp, 1}, to{"b", to_tp, to_dp, 1};
    const auto pieces = sim::reshard_pieces(from, to);
    const int n_from = from_dp * from_tp, n_to = to_dp * to_tp;
    // The common refinement of two partitions into n_from and n_to equal slices has
    // n_from + n_to - gcd(n_from, n_to) pieces.
    EXPECT_EQ(static_cast<int>(pieces.size()), n_from + n_to - std::gcd(n_from, n_to));
    long at = 0;
    for (const auto& p : pieces) {
      EXPECT_EQ(p.begin, at);
      at = p.end;
      // Piece [begin, end) lies inside sender slice from_slice and receiver slice to_slice.
      EXPECT_LE(p.from_slice * p.units / n_from, p.begin);
      EXPECT_GE((p.from_slice + 1) * p.units / n_from, p.end);
      EXPECT_LE(p.to_slice * p.units / n_to, p.begin);
      EXPECT_GE((p.to_slice + 1) * p.units / n_to, p.end);
    }
    EXPECT_EQ(at, pieces.back().units);
  }
}

// ---- plan --evaluate == run --plan, with a plan's own choices ------------------------------

const char* kTwoRegions = R"(
name: two-regions
model: {name: m, layers: 8, hidden: 1024, heads: 16, vocab: 32000}
training: {global_batch: 16, seq_len: 1024, precision: bf16, recompute: none}
clusters:
  - {name: a, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 8,
     nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}
  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 8,
     nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}
wan:
  - {between: [a, b], bandwidth: 1Gbps, latency: 10ms}
compression: {wan_activations: int8, wan_gradients: none}
strategy: auto
)";

// The plan chooses top-k for WAN activations (the scenario says int8), full recomputation
// and sequence parallelism.
const char* kOwnChoices = R"({
  "schedule": "1f1b", "micro_batch": 2, "sequence_parallel": true,
  "pipelines": [{"replicas": 1, "micro_batches": 8, "stages": [
    {"cluster": "a", "tp": 2, "dp": 1, "layers": 4},
    {"cluster": "b", "tp": 2, "dp": 1, "layers": 4}]}],
  "grad_sync": {"algorithm": "hierarchical", "bucket": "25MB"},
  "recompute": "full",
  "compression": {"wan_activations": {"codec": "topk", "ratio": 0.01}, "wan_gradients": "none"}
})";

TEST(ResolvedChoices, PlanEvaluateSimulatesWhatRunPlanSimulates) {
  const fs::path scenario = temp_file("regions.yaml", kTwoRegions);
  const fs::path plan = temp_file("own.json", kOwnChoices);
  auto evaluated = cli({"plan", scenario.c_str(), "--evaluate", plan.c_str(), "--json"});
  ASSERT_EQ(evaluated.status, 0) << evaluated.err;
  auto run = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Json e = Json::parse(evaluated.out), r = Json::parse(run.out);
  const double simulated = e["simulated_time_s"];
  EXPECT_NEAR(simulated, r["iteration_time_s"].get<double>(), 1e-9 * simulated);
  EXPECT_EQ(e["fidelity"], r["simulator"]["fidelity"]);
  // The run used the plan's codec, not the scenario's.
  EXPECT_NE(r["compression"]["wan_activations"]["codec"].get<std::string>().find("topk"),
            std::string::npos)
      << r["compression"].dump();
  fs::remove(scenario);
  fs::remove(plan);
}

TEST(ResolvedChoices, APlansChoicesCostWhatTheSameSettingsInTheScenarioCost) {
  // The analytic model and the simulator honour a plan's recompute, codecs and sequence
  // parallelism exactly as if the scenario had said them.
  core::Diagnostics diags;
  auto own = core::parse_plan(core::from_json(Json::parse(kOwnChoices)), "", diags);
  ASSERT_TRUE(own) << diags.format();
  core::Plan plain = *own;
  plain.recompute.reset();
  plain.compression.reset();
  std::string said = kTwoRegions;
  said.replace(said.find("recompute: none"), 15, "recompute: full");
  said.replace(said.find("wan_activations: int8"), 21,
               "wan_activations: {codec: topk, ratio: 0.01}");
  const auto written = testing::checked(kTwoRegions);
  const auto as_said = testing::checked(said);
  const kernels::KernelModel compute;
  const auto ctx_written =
      planner::make_context(written.scenario, written.model, written.compression, compute);
  const auto ctx_said =
      planner::make_context(as_said.scenario, as_said.model, as_said.compression, compute);
  const double analytic_own = planner::estimate(ctx_written, *own).iteration_s;
  const double analytic_said = planner::estimate(ctx_said, plain).iteration_s;
  EXPECT_NEAR(analytic_own, analytic_said, 1e-12 * analytic_said);
  // And the choices matter: the scenario's own settings cost something else.
  EXPECT_GT(std::abs(planner::estimate(ctx_written, plain).iteration_s - analytic_own),
            1e-6 * analytic_own);
  // Sequence parallelism is honoured: no all-gather of the activations after a transfer, but
  // two NCCL kernels (reduce-scatter, all-gather) a block instead of one all-reduce, each with
  // its fixed cost; on these small activations the second wins, so only the difference is
  // asserted.
  core::Plan no_sp = *own;
  no_sp.sequence_parallel = false;
  EXPECT_GT(std::abs(planner::estimate(ctx_written, no_sp).iteration_s - analytic_own),
            1e-6 * analytic_own);
}

// ---- one fidelity rule ------------------------------------------------------------------

TEST(ResolvedFidelity, PlanVerifiesAtTheFidelityRunUsesBetween65And256Gpus) {
  // 128 GPUs: full fidelity for `hgsim run` (up to 256), and so for the planner's check.
  std::string yaml =
      "name: hundred-twenty-eight\n"
      "model: {name: m, layers: 4, hidden: 512, heads: 8, vocab: 32000}\n"
      "training: {global_batch: 64, seq_len: 256, precision: bf16}\n"
      "clusters:\n"
      "  - {name: a, gpu: H100-80GB-SXM, nodes: 16, gpus_per_node: 8,"
      " nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
      "strategy: auto\n";
  const char* plan_text = R"({"schedule": "1f1b", "micro_batch": 1,
    "pipelines": [{"replicas": 32, "micro_batches": 2, "stages": [
      {"cluster": "a", "tp": 2, "layers": 2}, {"cluster": "a", "tp": 2, "layers": 2}]}],
    "grad_sync": {"algorithm": "ring", "bucket": "25MB"}})";
  EXPECT_EQ(sim::automatic_fidelity(128), core::Fidelity::full);
  EXPECT_EQ(sim::automatic_fidelity(257), core::Fidelity::folded);
  const fs::path scenario = temp_file("128.yaml", yaml);
  const fs::path plan = temp_file("128.json", plan_text);
  auto evaluated = cli({"plan", scenario.c_str(), "--evaluate", plan.c_str(), "--json"});
  ASSERT_EQ(evaluated.status, 0) << evaluated.err;
  auto run = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Json e = Json::parse(evaluated.out), r = Json::parse(run.out);
  EXPECT_EQ(r["gpus"], 128);
  EXPECT_EQ(e["fidelity"], "full");
  EXPECT_EQ(r["simulator"]["fidelity"], "full");
  const double simulated = e["simulated_time_s"];
  EXPECT_NEAR(simulated, r["iteration_time_s"].get<double>(), 1e-9 * simulated);
  fs::remove(scenario);
  fs::remove(plan);
}

// ---- traces Perfetto keeps ----------------------------------------------------------------

// One slice of a trace track, in integer nanoseconds.
struct Slice {
  long long start, end;
  std::string name;
};

const char* kTracePlan = R"({
  "schedule": "1f1b", "micro_batch": 2,
  "pipelines": [{"replicas": 2, "micro_batches": 4, "stages": [
    {"cluster": "a", "tp": 2, "dp": 2, "layers": 4},
    {"cluster": "b", "tp": 2, "dp": 1, "layers": 4}]}],
  "grad_sync": {"algorithm": "hierarchical", "bucket": "25MB"}
})";

TEST(PerfettoTrace, SlicesNestOrAreDisjointOnEveryTrackOfAMultiClusterRun) {
  const fs::path scenario = temp_file("trace.yaml", kTwoRegions);
  const fs::path plan = temp_file("trace-plan.json", kTracePlan);
  const fs::path trace = temp_file("trace.json", "");
  auto run = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--trace", trace.c_str()});
  ASSERT_EQ(run.status, 0) << run.err;
  const Json events = Json::parse(std::ifstream(trace))["traceEvents"];
  std::map<std::pair<int, long>, std::vector<Slice>> tracks;
  std::set<std::string> lanes;
  std::set<int> pids;
  for (const Json& e : events) {
    if (e["ph"] == "M") {
      const std::string name = e["args"]["name"];
      if (name.find("(lane ") != std::string::npos) lanes.insert(name);
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    // Integer nanoseconds: ts and dur have at most three decimals in microseconds.
    const double ts = e["ts"], dur = e["dur"];
    const long long start = std::llround(ts * 1000), length = std::llround(dur * 1000);
    EXPECT_NEAR(ts * 1000, static_cast<double>(start), 1e-3);
    tracks[{e["pid"].get<int>(), e["tid"].get<long>()}].push_back(
        {start, start + length, e["name"]});
    pids.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(pids.size(), 3u);  // two clusters and the WAN
  // Four senders reshard into two receivers over one WAN link at once: lanes were needed.
  EXPECT_FALSE(lanes.empty());
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end(), [](const Slice& x, const Slice& y) {
      return x.start != y.start ? x.start < y.start : x.end > y.end;
    });
    std::vector<Slice> open;  // enclosing slices
    for (const Slice& s : slices) {
      while (!open.empty() && open.back().end <= s.start) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(s.end, open.back().end) << "track " << track.first << "/" << track.second << ": '"
                                          << s.name << "' overlaps '" << open.back().name << "'";
      }
      open.push_back(s);
    }
  }
  // --trace-filter keeps one cluster's pipeline transfers only.
  auto filtered = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--trace", trace.c_str(),
                       "--trace-filter", "cluster=b,kind=pp_comm"});
  ASSERT_EQ(filtered.status, 0) << filtered.err;
  int kept = 0;
  const Json kept_events = Json::parse(std::ifstream(trace))["traceEvents"];
  for (const Json& e : kept_events) {
    if (e["ph"] != "X") continue;
    ++kept;
    EXPECT_EQ(e["cat"], "pp_comm");
    EXPECT_NE(e["pid"], 0) << "a slice of cluster a";
  }
  EXPECT_GT(kept, 0);
  // tracks=wan keeps exactly the full trace's WAN slices (what run --plot reads), nothing else.
  auto wan_slices = [](const Json& events, int wan_pid) {
    std::multiset<std::string> out;
    for (const Json& e : events)
      if (e["ph"] == "X" && e["pid"] == wan_pid) out.insert(e.dump());
    return out;
  };
  auto wan_only = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--trace", trace.c_str(),
                       "--trace-filter", "tracks=wan"});
  ASSERT_EQ(wan_only.status, 0) << wan_only.err;
  const Json wan_events = Json::parse(std::ifstream(trace))["traceEvents"];
  for (const Json& e : wan_events) {
    if (e["ph"] == "X") {
      EXPECT_EQ(e["pid"], 2) << "a device slice: " << e.dump();
    }
  }
  EXPECT_FALSE(wan_slices(wan_events, 2).empty());
  EXPECT_EQ(wan_slices(wan_events, 2), wan_slices(events, 2));
  auto bad = cli({"run", scenario.c_str(), "--trace", trace.c_str(), "--trace-filter", "kind=x"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("kind=x: no such kind"), std::string::npos) << bad.err;
  fs::remove(scenario);
  fs::remove(plan);
  fs::remove(trace);
}

// The plan-only choices (ZeRO stage, gradient reduction, tp_comm_overlap, sequence
// parallelism) are the resolved plan's, and its gradient buckets carry ZeRO-3's traffic:
// reduce-scatter plus two all-gathers of the weights, 1.5 all-reduces' bytes (ZeRO sec. 7.2).
TEST(ResolvedChoices, ThePlansParallelOptionsAreResolvedAndZero3BucketsCarryItsGathers) {
  core::Diagnostics diags;
  const auto c = check_yaml(one_cluster(2, {2, 2}), diags);
  ASSERT_TRUE(c) << diags.format();
  core::Plan plan = c->scenario.strategy.plan;
  plan.pipelines[0].replicas = 2;  // two copies of each stage: gradients to sync
  auto resolve = [&](const core::Plan& p) {
    auto r = sim::resolve_plan(c->scenario, c->model, c->compression, p, "", diags);
    EXPECT_TRUE(r) << diags.format();
    return *r;
  };
  const sim::ResolvedPlan plain = resolve(plan);
  EXPECT_EQ(plain.choices.zero, 0);
  EXPECT_EQ(plain.choices.grad_reduce, core::GradReduce::overlap);
  EXPECT_FALSE(plain.choices.tp_comm_overlap);
  EXPECT_EQ(plain.choices.attention, c->scenario.training.attention);
  EXPECT_EQ(plain.layer_work(plan.pipelines[0].stages[0]).attention,
            c->scenario.training.attention);
  plan.zero = 3;
  plan.grad_reduce = core::GradReduce::after_backward;
  plan.tp_comm_overlap = true;
  plan.sequence_parallel = true;
  const sim::ResolvedPlan chosen = resolve(plan);
  EXPECT_EQ(chosen.choices.zero, 3);
  EXPECT_EQ(chosen.choices.grad_reduce, core::GradReduce::after_backward);
  EXPECT_TRUE(chosen.choices.tp_comm_overlap);
  EXPECT_TRUE(chosen.choices.sequence_parallel);
  const Json j = sim::resolved_plan_json(chosen)["choices"];
  EXPECT_EQ(j["zero"], 3);
  EXPECT_EQ(j["grad_reduce"], "after_backward");
  EXPECT_EQ(j["tp_comm_overlap"], true);
  ASSERT_EQ(plain.segments.size(), chosen.segments.size());
  for (std::size_t k = 0; k < plain.segments.size(); ++k) {
    const auto& a = plain.segments[k];
    const auto& b = chosen.segments[k];
    ASSERT_GT(a.buckets, 0);
    // bf16 training all-reduces fp32 main gradients (Megatron-LM): 4 bytes per parameter
    // over tp-rank rings. ZeRO-3 reduce-scatters them (4) and gathers the bf16 weights
    // twice (2 x 2), half an all-reduce each: (4 + 4) / 2, the same 4 bytes.
    EXPECT_NEAR(a.buckets * a.bucket_bytes, 4 * a.parameters / a.rings, 1e-6 * a.parameters);
    EXPECT_NEAR(b.buckets * b.bucket_bytes, (4 + 2 * 2) / 2.0 * b.parameters / b.rings,
                1e-6 * b.parameters);
  }
}

// ---- results ----------------------------------------------------------------------------

// Where every link on a WAN route has no latency, one TCP flow's cap (window / round trip)
// is infinite: the results say null for it, warn of nothing, and come back from the
// simulator's child process (the JSON reader) intact.
TEST(ResultsJson, AWanRouteWithoutRoundTripHasNoWindowCap) {
  std::string yaml = kTwoRegions;
  for (const char* latency : {"latency: 1us", "latency: 2us", "latency: 10ms"})
    for (std::size_t at; (at = yaml.find(latency)) != std::string::npos;)
      yaml.replace(at, std::string(latency).size(), "latency: 0s");
  const fs::path scenario = temp_file("no-rtt.yaml", yaml);
  const fs::path plan = temp_file("no-rtt-plan.json", kTracePlan);
  auto run = cli({"run", scenario.c_str(), "--plan", plan.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const Json result = Json::parse(run.out);
  int wan = 0;
  for (const Json& link : result["links"]) {
    if (link["kind"] != "wan") continue;
    ++wan;
    EXPECT_TRUE(link["flow_cap_bytes_per_s"].is_null()) << link.dump();
  }
  EXPECT_EQ(wan, 2);  // both directions
  EXPECT_TRUE(result["warnings"].empty()) << result["warnings"].dump();
  const sim::Results back = sim::results_from_json(result);
  for (const sim::LinkResult& link : back.links) {
    if (link.kind == "wan") {
      EXPECT_TRUE(std::isinf(*link.flow_cap_bytes_per_s));
    }
  }
  fs::remove(scenario);
  fs::remove(plan);
}

}  // namespace
}  // namespace hgsim
