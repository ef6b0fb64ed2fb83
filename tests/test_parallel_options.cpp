// The parallelism options on small cases with closed forms: tensor-parallel
// collectives overlapped with their GEMMs, gradient reduction after the backward, ZeRO's
// data-parallel traffic; and the scenario language for them (zero, grad_reduce,
// tp_comm_overlap, training.attention, clusters[].calibration) with its errors.
#include <gtest/gtest.h>

#include <string>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "models/transformer.hpp"
#include "planner/cost_model.hpp"
#include "sim/collectives.hpp"
#include "sim/simulate.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;
using testing::checked;
using testing::FixedTimes;
using testing::kTinyModel;

double iteration(const apps::CheckedScenario& c, const kernels::ComputeModel& compute) {
  return testing::simulate_plan(c, compute)["iteration_time_s"].get<double>();
}

// One stage of tp 2 on one node whose NVLink is so slow that every collective outlasts the
// compute of the block before it.
std::string tp_scenario(bool overlap) {
  return std::string("name: tp\n") + kTinyModel +
         "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: c, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 2, nvlink: {bandwidth: "
         "1GB/s, latency: 0s}, nic: {bandwidth: 1000TB/s, latency: 0s}}\n"
         "strategy:\n  tp_comm_overlap: " +
         (overlap ? "true" : "false") +
         "\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
         "        - {cluster: c, tp: 2, layers: 8}\n";
}

// Serial: each block costs compute + collective; overlapped: the longer of the two, here
// the collective. The difference is exactly the layers' compute, forward and backward.
TEST(TpCommOverlap, HidesTheComputeBehindLongerCollectives) {
  const double tf = 1e-5;  // forward per layer; a collective of 64 KiB over 1 GB/s is 65 us
  const FixedTimes compute(tf);
  const double serial = iteration(checked(tp_scenario(false)), compute);
  const double overlapped = iteration(checked(tp_scenario(true)), compute);
  const double layers_compute = 8 * (tf + 2 * tf);
  EXPECT_NEAR(serial - overlapped, layers_compute, 1e-9);
  // And the collectives themselves are all still paid: 4 per layer (2 forward, 2 backward).
  const double bytes = 128.0 * 256 * 2;  // one micro-batch's s x h in bf16
  // Each with NCCL's latency and fixed cost of a 2-rank kernel on Hopper under Simple (the
  // ring's own latency is 0 here).
  const double one = sim::ring_all_reduce_time(2, bytes, {1e9 * testing::kNcclNvlinkShareH100, 0}) +
                     testing::kNcclSimpleTwoRanksH100;
  EXPECT_NEAR(overlapped, 8 * 4 * one, 1e-6 * overlapped);
}

// Compute longer than the collective beside it runs slower while they overlap (Galvatron's
// rule, kernels::compute_beside_collective): a block costs compute + collective x (1 - 1/c)
// instead of compute + collective, so overlapping saves collective / c per block, whatever
// the compute: 4 blocks per layer, c = 1.1256 (Hetu-Galvatron's profiled overlap
// coefficient, kernels/kernel_costs.yaml).
TEST(TpCommOverlap, ComputeLongerThanItsCollectiveIsSlowedBesideIt) {
  const double tf = 1e-3;  // every block's compute outlasts its 96 us collective
  const FixedTimes compute(tf);
  const double serial = iteration(checked(tp_scenario(false)), compute);
  const double overlapped = iteration(checked(tp_scenario(true)), compute);
  const double bytes = 128.0 * 256 * 2;
  const double one =
      sim::ring_all_reduce_time(2, bytes, {1e9 * testing::kNcclNvlinkShareH100, 0}) +
      testing::kNcclSimpleTwoRanksH100;  // as in HidesTheComputeBehindLongerCollectives
  EXPECT_NEAR(serial - overlapped, 8 * 4 * one / 1.1256, 1e-6 * serial);
}

// Intra-node links carry NCCL's share of the written `nvlink.bandwidth`: 20.6 of NVLink 4's
// 25 GB/s a link on an H100 (NCCL's SM90_NVLINK_BW), 0.56 on an A100 (measured), PCIe's 0.75
// (Gen4 x16: 24 of 32 GB/s) for a GPU without NVLink, and exactly the written rate when the
// user calibrated it to 1 (a measured figure). The same tp-2 blocks as above, serial: the
// collectives are the iteration less the compute, 4 per layer.
TEST(IntraNodeLinks, CarryNcclsShareOfTheWrittenBandwidthUnlessCalibrated) {
  const double tf = 1e-5;
  const FixedTimes compute(tf);
  const double bytes = 128.0 * 256 * 2;
  const double layers_compute = 8 * (tf + 2 * tf);
  auto collectives = [&](const std::string& gpu, const std::string& calibration) {
    std::string yaml = tp_scenario(false);
    yaml.replace(yaml.find("H100-80GB-SXM"), 13, gpu);
    yaml.replace(yaml.find("nic: {"), 0, calibration);
    return iteration(checked(yaml), compute) - layers_compute;
  };
  // Each collective also pays NCCL's latency and fixed cost of a 2-rank kernel under Simple
  // (the ring's own latency is 0 here).
  auto expected = [&](double share, double floor) {
    return 8 * 4 * (sim::ring_all_reduce_time(2, bytes, {1e9 * share, 0}) + floor);
  };
  const double h100 = collectives("H100-80GB-SXM", "");
  EXPECT_NEAR(h100, expected(20.6 / 25, testing::kNcclSimpleTwoRanksH100), 1e-9 * h100);
  const double a100 = collectives("A100-80GB-SXM", "");  // the share NCCL achieves on a DGX A100
  EXPECT_NEAR(a100, expected(0.56, testing::kNcclSimpleTwoRanksA100), 1e-9 * a100);
  const double l40s = collectives("L40S-48GB", "");  // no NVLink: PCIe Gen4
  EXPECT_NEAR(l40s, expected(24.0 / 32, testing::kNcclSimpleTwoRanksA100), 1e-9 * l40s);
  const double measured = collectives("H100-80GB-SXM", "calibration: {nvlink_efficiency: 1}, ");
  EXPECT_NEAR(measured, expected(1, testing::kNcclSimpleTwoRanksH100), 1e-9 * measured);
  // The rule is one function: the planner's closed-form hop agrees.
  const auto c = checked(tp_scenario(false));
  EXPECT_DOUBLE_EQ(sim::nvlink_hop(c.scenario.clusters[0]).bytes_per_s, 1e9 * 20.6 / 25);
  // And the run says where the share came from.
  const core::Json r = testing::simulate_plan(checked(tp_scenario(false)), compute);
  EXPECT_NE(r["provenance"]["network"].get<std::string>().find("c 82.4%"), std::string::npos)
      << r["provenance"];
}

// The planner's analytic model plays the same blocks: serial and overlapped, it costs the
// one-stage plan as the simulator does, on collectives longer than the blocks and shorter.
TEST(TpCommOverlap, TheAnalyticModelCostsWhatTheSimulatorPlays) {
  for (double tf : {1e-5, 1e-3}) {
    const FixedTimes compute(tf);
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(std::to_string(tf) + (overlap ? " overlapped" : " serial"));
      const auto c = checked(tp_scenario(overlap));
      const auto ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
      const double analytic = planner::estimate(ctx, c.scenario.strategy.plan).iteration_s;
      const double simulated = iteration(c, compute);
      EXPECT_NEAR(analytic, simulated, 1e-9 * simulated);
    }
  }
}

std::string dp_scenario(const std::string& plan_extra, const std::string& schedule,
                        int virtual_stages) {
  return std::string("name: dp\n") + kTinyModel +
         "training: {global_batch: 8, seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: c, gpu: H100-80GB-SXM, nodes: 4, gpus_per_node: 1, nvlink: {bandwidth: "
         "1000TB/s, latency: 0s}, nic: {bandwidth: 1GB/s, latency: 0s}}\n"
         "strategy:\n  schedule: " +
         schedule + "\n  virtual_stages: " + std::to_string(virtual_stages) + "\n" + plan_extra +
         "  pipelines:\n    - replicas: 2\n      micro_batches: 4\n      stages:\n"
         "        - {cluster: c, layers: 4}\n        - {cluster: c, layers: 4}\n"
         "  grad_sync: {algorithm: ring, bucket: 1GB}\n";
}

// Interleaved: each stage holds two chunks whose gradients are ready at different times.
// after_backward holds every bucket until the stage's last backward, so it can only be
// slower; with one chunk per stage the two coincide (one segment, ready at the end).
TEST(GradReduce, AfterBackwardWaitsForTheWholeBackward) {
  const FixedTimes compute(1e-3);
  const double overlap = iteration(checked(dp_scenario("", "interleaved", 2)), compute);
  const double after =
      iteration(checked(dp_scenario("  grad_reduce: after_backward\n", "interleaved", 2)), compute);
  EXPECT_GT(after, overlap * (1 + 1e-6));
  const double one_chunk = iteration(checked(dp_scenario("", "1f1b", 1)), compute);
  const double one_chunk_after =
      iteration(checked(dp_scenario("  grad_reduce: after_backward\n", "1f1b", 1)), compute);
  EXPECT_NEAR(one_chunk, one_chunk_after, 1e-12);
}

// One stage of 8 layers over two one-GPU nodes, its gradients in `bucket_bytes` buckets.
std::string dp_bucket_scenario(const std::string& extra, double bucket_bytes) {
  return std::string("name: dp1\n") + kTinyModel +
         "training: {global_batch: 2, seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: c, gpu: H100-80GB-SXM, nodes: 2, gpus_per_node: 1, nvlink: {bandwidth: "
         "1000TB/s, latency: 0s}, nic: {bandwidth: 1GB/s, latency: 0s}}\n"
         "strategy:\n" +
         extra +
         "  pipelines:\n    - replicas: 2\n      micro_batches: 1\n      stages:\n"
         "        - {cluster: c, layers: 8}\n"
         "  grad_sync: {algorithm: ring, bucket: " +
         std::to_string(static_cast<long long>(bucket_bytes)) + "B}\n";
}

// One stage, two replicas, eight buckets of one layer each. overlap: every bucket but the
// last (the one holding layer 0) is reduced while the backward goes on, because one
// bucket's all-reduce (1.6 ms) is shorter than a layer's backward (4 ms); after_backward:
// all eight wait. The layer that runs beside a bucket is slowed by c = 1.1256 while they
// overlap (Hetu-Galvatron's coefficient, kernels::CollectiveStream): it lasts its backward
// + one x (1 - 1/c), so overlapping saves one / c per hidden bucket, not one.
TEST(GradReduce, OverlappedBucketsHideAllButTheLast) {
  const auto scenario = dp_bucket_scenario;
  const auto probe = checked(scenario("", 1e9));
  // bf16 training all-reduces fp32 main gradients (Megatron-LM): 4 bytes per parameter.
  const double grad = 4.0 * models::parameter_count(probe.model);
  const double bucket = grad / 8 + 1;  // ceil(grad / bucket) = 8 buckets
  // A bucket's ring plus NCCL's latency and fixed cost of a 2-rank kernel across 2 nodes on
  // Hopper under Simple: fixed(2) + scale x 1.4 (plateau) x (8.4us + 2 NET steps of one rank a
  // node, 14us each) (NVIDIA/nccl src/graph/tuning.cc; kernels/nccl_costs.yaml: 23.9us, 0.255).
  const double one = sim::ring_all_reduce_time(2, grad / 8, {1e9, 0}) + 23.9e-6 +
                     0.255 * 1.4 * (8.4e-6 + 2 * 14.0e-6);
  const FixedTimes compute(2e-3);
  const double overlap = iteration(checked(scenario("", bucket)), compute);
  const double after =
      iteration(checked(scenario("  grad_reduce: after_backward\n", bucket)), compute);
  EXPECT_NEAR(after - overlap, 7 * one / 1.1256, 1e-6 * after);
  EXPECT_NEAR(overlap, 8 * 3 * 2e-3 + 7 * one * (1 - 1 / 1.1256) + one, 1e-6 * after);
  EXPECT_NEAR(after, 8 * 3 * 2e-3 + 8 * one, 1e-6 * after);
}

// Two buckets of four layers: the first is ready after layer 4 and outlasts a layer's
// backward, so it overlaps the layers below it until it ends. Layers of 4 ms (backward) with
// a bucket of about 13 ms: the compute stays the critical path and runs beside the whole
// bucket, longer by bucket x (1 - 1/c); the second bucket leaves after layer 0. Layers of
// 1 ms: the stream is the critical path (4 layers, slowed, end before the first bucket), and
// the iteration is the two buckets after layer 4, whatever the slowdown. The planner's
// analytic model plays the same stream and agrees with the simulator on both, and on a
// tensor-parallel stage (tp 2, serial and overlapped blocks) whose collectives drain the
// bucket stream between the blocks' compute.
TEST(GradReduce, ComputeBesideTheBucketsIsSlowedAndTheAnalyticModelAgrees) {
  const auto probe = checked(dp_bucket_scenario("", 1e9));
  const double grad = 4.0 * models::parameter_count(probe.model);
  const double bucket = grad / 2 + 1;  // 2 buckets
  const double one = sim::ring_all_reduce_time(2, grad / 2, {1e9, 0}) + 23.9e-6 +
                     0.255 * 1.4 * (8.4e-6 + 2 * 14.0e-6);
  const double c = 1.1256;
  auto analytic = [](const apps::CheckedScenario& s, const kernels::ComputeModel& compute) {
    const auto ctx = planner::make_context(s.scenario, s.model, s.compression, compute);
    return planner::estimate(ctx, s.scenario.strategy.plan).iteration_s;
  };
  {
    const FixedTimes compute(2e-3);  // backward 4 ms a layer, 16 ms below the first bucket
    ASSERT_LT(one, 16e-3);
    const auto s = checked(dp_bucket_scenario("", bucket));
    const double simulated = iteration(s, compute);
    EXPECT_NEAR(simulated, 8 * 3 * 2e-3 + one * (1 - 1 / c) + one, 1e-6 * simulated);
    EXPECT_NEAR(analytic(s, compute), simulated, 1e-9 * simulated);
  }
  {
    const FixedTimes compute(0.5e-3);  // backward 1 ms a layer: c x 4 ms < one bucket
    ASSERT_GT(one, c * 4e-3);
    const auto s = checked(dp_bucket_scenario("", bucket));
    const double simulated = iteration(s, compute);
    EXPECT_NEAR(simulated, 8 * 0.5e-3 + 4 * 1e-3 + 2 * one, 1e-6 * simulated);
    EXPECT_NEAR(analytic(s, compute), simulated, 1e-9 * simulated);
  }
  for (const char* overlap : {"false", "true"}) {
    SCOPED_TRACE(std::string("tp 2, tp_comm_overlap ") + overlap);
    std::string yaml =
        dp_bucket_scenario(std::string("  tp_comm_overlap: ") + overlap + "\n", bucket / 2);
    yaml.replace(yaml.find("gpus_per_node: 1"), 16, "gpus_per_node: 2");
    yaml.replace(yaml.find("nvlink: {bandwidth: 1000TB/s"), 28, "nvlink: {bandwidth: 50GB/s");
    yaml.replace(yaml.find("layers: 8}"), 10, "tp: 2, layers: 8}");
    const auto s = checked(yaml);
    const FixedTimes compute(1e-3);
    const double simulated = iteration(s, compute);
    const double after =
        iteration(checked(std::string(yaml).insert(yaml.find("strategy:\n") + 10,
                                                   "  grad_reduce: after_backward\n")),
                  compute);
    EXPECT_LT(simulated, after);  // the buckets still hide behind the (slowed) backward
    EXPECT_NEAR(analytic(s, compute), simulated, 1e-9 * simulated);
  }
}

// With 16-bit gradients ZeRO-1 moves what the all-reduce moves (reduce-scatter + all-gather);
// ZeRO-3 gathers the weights once more: 1.5 times the data-parallel traffic. With a slow NIC
// the sync dominates and the difference is half the ZeRO-1 sync time. With Megatron's fp32
// main gradients under bf16 the reduce-scatter carries 4 bytes and the gather 2: ZeRO-1 moves
// (4 + 2) / 2 = 3 bytes per parameter where the all-reduce moves 4, and ZeRO-3 (4 + 2 x 2) / 2.
TEST(Zero, DataParallelTrafficFollowsTheStage) {
  EXPECT_EQ(models::zero_traffic_factor(0), 1.0);
  EXPECT_EQ(models::zero_traffic_factor(1), 1.0);
  EXPECT_EQ(models::zero_traffic_factor(2), 1.0);
  EXPECT_EQ(models::zero_traffic_factor(3), 1.5);
  const FixedTimes compute(1e-6);
  auto run = [&](const std::string& zero, bool bf16_gradients) {
    std::string text = dp_scenario(zero, "1f1b", 1);
    if (bf16_gradients) {
      const std::string from = "precision: bf16}";
      text.replace(text.find(from), from.size(), "precision: bf16, grad_dtype: bf16}");
    }
    return iteration(checked(text), compute);
  };
  const double z0 = run("", true), z1 = run("  zero: 1\n", true), z3 = run("  zero: 3\n", true);
  EXPECT_NEAR(z0, z1, 1e-12);
  EXPECT_GT(z3, 1.4 * z1);
  EXPECT_LT(z3, 1.5 * z1);
  const double f0 = run("", false), f1 = run("  zero: 1\n", false), f3 = run("  zero: 3\n", false);
  EXPECT_GT(f0 / z0, 1.85);          // the all-reduce carries twice the bytes (and the compute
  EXPECT_LE(f0 / z0, 2.0);           // and pipeline are the same)
  EXPECT_NEAR(f1 / f0, 0.75, 0.01);  // 3 bytes against 4
  EXPECT_NEAR(f3 / f0, 1.0, 0.01);   // 4 bytes against 4
}

// Under ZeRO >= 1 a rank steps the optimizer over its shard only (Megatron-LM's distributed
// optimizer): one stage over 4 replicas, where everything else is the same at zero 0 and 1
// (the same traffic), is shorter by exactly 3/4 of the unsharded step, in the simulator and
// in the planner's model alike.
TEST(Zero, TheOptimizerStepsItsShard) {
  auto scenario = [](const std::string& extra) {
    // 16-bit gradients: ZeRO-1's reduce-scatter and gather move what the all-reduce moves.
    return std::string("name: dp4\n") + kTinyModel +
           "training: {global_batch: 4, seq_len: 128, precision: bf16, grad_dtype: bf16}\n"
           "clusters:\n"
           "  - {name: c, gpu: H100-80GB-SXM, nodes: 4, gpus_per_node: 1, nvlink: {bandwidth: "
           "1000TB/s, latency: 0s}, nic: {bandwidth: 100GB/s, latency: 0s}}\n"
           "strategy:\n" +
           extra +
           "  pipelines:\n    - replicas: 4\n      micro_batches: 1\n      stages:\n"
           "        - {cluster: c, layers: 8}\n"
           "  grad_sync: {algorithm: ring, bucket: 1GB}\n";
  };
  const auto z0 = checked(scenario("  zero: 0\n"));
  const auto z1 = checked(scenario("  zero: 1\n"));
  const double per_parameter = 1e-9;
  const FixedTimes compute(1e-3, 0, per_parameter);
  models::StageSpec spec = models::stage_spec(z0.scenario.strategy.plan, 0, 0);
  const double step = models::stage_parameters(z0.model, spec) * per_parameter;
  spec.zero = 1;
  EXPECT_DOUBLE_EQ(models::optimizer_step_parameters(z0.model, spec),
                   models::stage_parameters(z0.model, spec) / 4);
  const double simulated = iteration(z0, compute) - iteration(z1, compute);
  EXPECT_NEAR(simulated, 0.75 * step, 1e-9 * step);
  const auto ctx0 = planner::make_context(z0.scenario, z0.model, z0.compression, compute);
  const auto ctx1 = planner::make_context(z1.scenario, z1.model, z1.compression, compute);
  const double analytic = planner::estimate(ctx0, z0.scenario.strategy.plan).iteration_s -
                          planner::estimate(ctx1, z1.scenario.strategy.plan).iteration_s;
  EXPECT_NEAR(analytic, 0.75 * step, 1e-9 * step);
}

// ---- the language ------------------------------------------------------------------------------

core::Diagnostics parse(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "t.yaml", diags);
  if (node) {
    auto s = core::parse_scenario(*node, "t.yaml", diags);
    if (s && !diags.has_errors()) kernels::resolve_gpus(*s, diags);
  }
  return diags;
}

std::string with_cluster_extra(const std::string& cluster_extra, const std::string& plan_extra) {
  return std::string("name: x\n") + kTinyModel +
         "training: {global_batch: 1, seq_len: 128, precision: bf16, attention: flash}\n"
         "clusters:\n"
         "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}" +
         cluster_extra +
         "}\n"
         "  - {name: b, gpu: A100, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
         "wan:\n  - {between: [a, b], bandwidth: 1Gbps, latency: 1ms}\n"
         "strategy:\n" +
         plan_extra +
         "  pipelines:\n    - micro_batches: 1\n      stages:\n        - {cluster: a, layers: "
         "8}\n";
}

TEST(OptionsLanguage, ZeroOutsideZeroToThreeIsAnError) {
  const auto diags = parse(with_cluster_extra("", "  zero: 4\n"));
  ASSERT_TRUE(diags.has_errors());
  EXPECT_NE(diags.format().find("strategy.zero"), std::string::npos) << diags.format();
}

TEST(OptionsLanguage, GradReduceSuggestsTheClosestName) {
  const auto diags = parse(with_cluster_extra("", "  grad_reduce: after-backward\n"));
  ASSERT_TRUE(diags.has_errors());
  EXPECT_NE(diags.format().find("after_backward"), std::string::npos) << diags.format();
}

TEST(OptionsLanguage, AttentionIsFlashOrStandard) {
  std::string yaml = with_cluster_extra("", "");
  yaml.replace(yaml.find("attention: flash"), 16, "attention: fused");
  const auto d = parse(yaml);
  ASSERT_TRUE(d.has_errors());
  EXPECT_NE(d.format().find("training.attention"), std::string::npos) << d.format();
}

TEST(OptionsLanguage, FlashVersionIsTwoOrThreeAndThreeNeedsHopper) {
  auto with_version = [](const std::string& version, const std::string& attention) {
    std::string yaml = with_cluster_extra("", "");
    yaml.replace(yaml.find("attention: flash"), 16,
                 "attention: " + attention + ", flash_version: " + version);
    return yaml;
  };
  const auto four = parse(with_version("4", "flash"));
  ASSERT_TRUE(four.has_errors());
  EXPECT_NE(four.format().find("training.flash_version"), std::string::npos) << four.format();
  const auto standard = parse(with_version("2", "standard"));
  ASSERT_TRUE(standard.has_errors());
  EXPECT_NE(standard.format().find("applies to training.attention: flash"), std::string::npos)
      << standard.format();
  const auto three = parse(with_version("3", "flash"));  // both clusters are A100s
  ASSERT_TRUE(three.has_errors());
  EXPECT_NE(three.format().find("FlashAttention-3 runs on Hopper GPUs only, but cluster 'a'"),
            std::string::npos)
      << three.format();
  EXPECT_FALSE(parse(with_version("2", "flash")).has_errors());
  // The JSON form round-trips.
  core::Diagnostics diags;
  auto node = core::parse_yaml(with_version("2", "flash"), "t.yaml", diags);
  auto s = core::parse_scenario(*node, "t.yaml", diags);
  ASSERT_TRUE(s) << diags.format();
  EXPECT_EQ(s->training.flash_version, 2);
  auto again = core::parse_scenario(core::from_json(core::scenario_to_json(*s)), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_EQ(again->training, s->training);
}

TEST(OptionsLanguage, CalibrationIsCheckedAndAppliesPerGpuType) {
  auto bad = parse(with_cluster_extra(", calibration: {gemm_efficiency: 1.2}", ""));
  ASSERT_TRUE(bad.has_errors());
  EXPECT_NE(bad.format().find("clusters[0].calibration.gemm_efficiency"), std::string::npos)
      << bad.format();
  auto unknown = parse(with_cluster_extra(", calibration: {gemm: 0.5}", ""));
  ASSERT_TRUE(unknown.has_errors());
  auto link = parse(with_cluster_extra(", calibration: {nvlink_efficiency: 0}", ""));
  ASSERT_TRUE(link.has_errors());
  EXPECT_NE(link.format().find("clusters[0].calibration.nvlink_efficiency"), std::string::npos)
      << link.format();
  // Cluster b has the same GPU type (A100 is the A100-80GB-SXM): the calibration reaches it,
  // and hgsim says so.
  auto shared =
      parse(with_cluster_extra(", calibration: {gemm_efficiency: 0.6, "
                               "kernel_overhead: 6us}",
                               ""));
  EXPECT_FALSE(shared.has_errors()) << shared.format();
  EXPECT_NE(shared.format().find("also applies to cluster 'b'"), std::string::npos)
      << shared.format();

  core::Diagnostics diags;
  auto node = core::parse_yaml(
      with_cluster_extra(
          ", calibration: {gemm_efficiency: 0.6, kernel_overhead: 6us, nvlink_efficiency: 0.9}",
          ""),
      "t.yaml", diags);
  auto s = core::parse_scenario(*node, "t.yaml", diags);
  ASSERT_TRUE(s);
  const auto calibrations = kernels::calibrations_of(*s);
  ASSERT_EQ(calibrations.size(), 1u);
  const auto& cal = calibrations.at("A100-80GB-SXM");
  EXPECT_EQ(*cal.gemm_efficiency, 0.6);
  EXPECT_NEAR(cal.kernel_overhead->value(), 6e-6, 1e-18);
  // The JSON form round-trips.
  auto again = core::parse_scenario(core::from_json(core::scenario_to_json(*s)), "", diags);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->clusters[0].calibration, s->clusters[0].calibration);
}

TEST(OptionsLanguage, PlanKeysRoundTripThroughJson) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(
      with_cluster_extra("", "  zero: 3\n  grad_reduce: after_backward\n  tp_comm_overlap: true\n"),
      "t.yaml", diags);
  auto s = core::parse_scenario(*node, "t.yaml", diags);
  ASSERT_TRUE(s) << diags.format();
  const core::Plan& plan = s->strategy.plan;
  EXPECT_EQ(plan.zero, 3);
  EXPECT_EQ(plan.grad_reduce, core::GradReduce::after_backward);
  EXPECT_TRUE(plan.tp_comm_overlap);
  auto again = core::parse_plan(core::from_json(core::plan_to_json(plan)), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_EQ(*again, plan);
}

}  // namespace
}  // namespace hgsim
