// MLCommons Chakra execution traces on the simulator: a hand-written two-rank trace against its
// closed form, a collective across a WAN link, --reprice against the kernel model's roofline,
// the workload: key, collectives exported as COMM_COLL_NODE, and export then import of shipped
// scenarios keeping their iteration time. Hostile input: tests/test_chakra_hostile.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "chakra/wire.hpp"
#include "chakra_helpers.hpp"
#include "sim/chakra.hpp"
#include "sim_helpers.hpp"

using namespace hgsim;
using namespace hgsim::testing;

namespace {

// ---- import --------------------------------------------------------------------------------

// Rank 0: 1 ms of compute, then sends 100 MB to rank 1; rank 1: 2 ms of compute, and 0.5 ms
// after the receive; then both all-reduce 1 GB. The transfer starts at 1 ms (both sides
// ready: the receive has no dependency) and ends at 1 ms + S1/B + a; rank 1 is ready for the
// all-reduce 0.5 ms later, the later member; a ring of two then takes two steps of S2/2, each
// waiting for the other's previous one: ready + S2/B + 2a.
TEST(ChakraImport, TwoRankTraceGivesTheClosedForm) {
  const auto dir = scratch("two-rank");
  const std::string prefix = (dir / "t").string();
  write_rank(prefix, 0,
             {comp(0, 1000), p2p(1, true, 1, 100'000'000, {0}), all_reduce(2, 1'000'000'000, {1})});
  write_rank(prefix, 1,
             {comp(0, 2000), p2p(1, false, 0, 100'000'000), comp(2, 500, {1}),
              all_reduce(3, 1'000'000'000, {2, 0})});
  std::string error;
  const core::Json out = run_trace(two_nodes(), prefix, &error);
  ASSERT_FALSE(out.is_null()) << error;
  const double B = 100e9 / 8, a = 2 * 5e-6;
  const double transfer_end = 1e-3 + 1e8 / B + a;
  const double expected = transfer_end + 0.5e-3 + 1e9 / B + 2 * a;
  EXPECT_NEAR(out["iteration_time_s"].get<double>(), expected, 1e-9 * expected);
  EXPECT_EQ(out["ranks"], 2);
  EXPECT_EQ(out["collectives"], 1);
  EXPECT_EQ(out["transfers"], 1);
  std::filesystem::remove_all(dir);
}

// One GPU in each of two clusters joined by one WAN link: an all-reduce of S between them is a
// ring of two over the WAN route, S / B_wan + 2 (nic + wan + nic latency); halving the link's
// bandwidth adds exactly S / B_wan.
TEST(ChakraImport, AllReduceAcrossTheWanIsSlowedAsTheLinkDictates) {
  const auto dir = scratch("wan");
  const std::string prefix = (dir / "t").string();
  const double S = 1e8;
  write_rank(prefix, 0, {all_reduce(0, static_cast<std::int64_t>(S), {})});
  write_rank(prefix, 1, {all_reduce(0, static_cast<std::int64_t>(S), {})});
  auto scenario = [](const std::string& wan) {
    return std::string("name: wan\n") + hgsim::testing::kTinyModel +
           "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
           "clusters:\n"
           "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
           "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
           "  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
           "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
           "wan:\n  - {between: [a, b], bandwidth: " +
           wan +
           ", latency: 1ms, tcp_window: 1GiB}\n"
           "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
           "        - {cluster: a, layers: 8}\n";
  };
  std::string error;
  const core::Json fast = run_trace(scenario("10Gbps"), prefix, &error);
  ASSERT_FALSE(fast.is_null()) << error;
  const core::Json slow = run_trace(scenario("5Gbps"), prefix, &error);
  ASSERT_FALSE(slow.is_null()) << error;
  const double B = 10e9 / 8, a = 2e-6 + 1e-3 + 2e-6;
  const double expected = S / B + 2 * a;
  EXPECT_NEAR(fast["iteration_time_s"].get<double>(), expected, 1e-9 * expected);
  EXPECT_NEAR(slow["iteration_time_s"].get<double>() - fast["iteration_time_s"].get<double>(),
              S / B, 1e-9 * expected);
  std::filesystem::remove_all(dir);
}

// ---- round trip ----------------------------------------------------------------------------

double iteration_time(const hgsim::testing::CliResult& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  if (r.status != 0) return -1;
  return core::Json::parse(r.out)["iteration_time_s"].get<double>();
}

// Export then import: the same iteration on the same GPUs, to rounding, on the shipped
// homogeneous scenarios small enough for a unit test.
TEST(ChakraRoundTrip, ShippedHomogeneousScenariosKeepTheirIterationTime) {
  for (const char* name :
       {"scenarios/examples/inline-model.yaml", "scenarios/examples/long-context.yaml"}) {
    const auto dir = scratch("round-trip");
    const std::string prefix = (dir / "it").string();
    const double simulated = iteration_time(hgsim::testing::hgsim(
        {"run", name, "--fidelity", "full", "--json", "--export-chakra", prefix}));
    const double imported =
        iteration_time(hgsim::testing::hgsim({"run", name, "--json", "--chakra", prefix}));
    EXPECT_NEAR(imported, simulated, 1e-6 * simulated) << name;
    std::filesystem::remove_all(dir);
  }
}

// --reprice: a COMP_NODE with num_ops and tensor_size costs what the kernel model's roofline
// gives on its GPU, its duration ignored. A100 80GB SXM (kernels/gpus.yaml: 312 TFLOPS bf16,
// 2039 GB/s) and the ampere row of kernels/kernel_costs.yaml (gemm_efficiency 0.757,
// memory_efficiency 0.85, gemm_overhead 4.9 us): 1e12 FLOPs over 1 MB is compute bound,
// 1e12 / (312e12 x 0.757) + 4.9 us; 1 FLOP over 2 GB is memory bound, 2e9 / (2039e9 x 0.85)
// + 4.9 us. Without --reprice, the trace's 7 us.
TEST(ChakraImport, RepriceTakesComputeFromTheKernelModelNotTheTrace) {
  const auto dir = scratch("reprice");
  const std::string prefix = (dir / "t").string();
  auto priced = [](std::uint64_t id, std::int64_t flops, std::int64_t bytes) {
    chakra::Node n = comp(id, 7);
    n.attrs.push_back(chakra::Attribute::int64("num_ops", flops));
    n.attrs.push_back(chakra::Attribute::uint64("tensor_size", static_cast<std::uint64_t>(bytes)));
    return n;
  };
  write_rank(prefix, 0, {priced(0, 1'000'000'000'000, 1'000'000)});
  write_rank(prefix, 1, {priced(0, 1, 2'000'000'000)});
  std::string error;
  const core::Json as_traced = run_trace(two_nodes(), prefix, &error);
  ASSERT_FALSE(as_traced.is_null()) << error;
  EXPECT_NEAR(as_traced["iteration_time_s"].get<double>(), 7e-6, 1e-12);
  const core::Json repriced = run_trace(two_nodes(), prefix, &error, true);
  ASSERT_FALSE(repriced.is_null()) << error;
  const double math = 1e12 / (312e12 * 0.757) + 4.9e-6;
  const double memory = 2e9 / (2039e9 * 0.85) + 4.9e-6;
  EXPECT_EQ(repriced["repriced"], 2);
  EXPECT_NEAR(repriced["devices"][0]["compute_s"].get<double>(), math, 1e-9 * math);
  EXPECT_NEAR(repriced["devices"][1]["compute_s"].get<double>(), memory, 1e-9 * memory);
  EXPECT_NEAR(repriced["iteration_time_s"].get<double>(), std::max(math, memory), 1e-9 * math);
  std::filesystem::remove_all(dir);
}

// One H100 (SXM or PCIe: one Hopper row of kernels/kernel_costs.yaml, two datasheet peaks)
// playing two micro-batches of the tiny model with selective recomputation: one chain of
// compute on one GPU, no communication.
std::string one_gpu(const std::string& gpu) {
  return std::string("name: one\n") + hgsim::testing::kTinyModel +
         "training: {global_batch: 2, seq_len: 128, precision: bf16, optimizer: adam, "
         "recompute: selective}\n"
         "clusters:\n  - {name: c, gpu: " +
         gpu +
         ", nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: 300GB/s, latency: 1us}, "
         "nic: {bandwidth: 100Gbps, latency: 5us}}\n"
         "strategy:\n  pipelines:\n    - micro_batches: 2\n      stages:\n"
         "        - {cluster: c, layers: 8}\n";
}

// The export writes every layer's, the logits' and the optimizer's COMP_NODE with its FLOPs
// and bytes (num_ops, tensor_size), so that --reprice prices hgsim's own traces: one GPU's
// chain of compute then takes the sum over its nodes of the roofline max(num_ops / (peak x
// gemm_efficiency), tensor_size / (HBM x memory_efficiency)) + gemm_overhead, with the
// datasheet's bf16 peak and HBM bandwidth (kernels/gpus.yaml) and the hopper row of
// kernels/kernel_costs.yaml, on either GPU; the same trace on a GPU of another peak moves by
// exactly the difference of those sums. The forward nodes' FLOPs are the layers' and the
// logits' forward FLOPs of models/ (2 x tokens x matrix parameters plus the attention core,
// 2 x tokens x hidden x vocab) to within the element-wise ops' FLOPs (norms, GeLU, residual
// adds: a few per element of the h-wide activations against about 24 h per token of matrix
// work; under 1% at hidden 256). Without --reprice nothing changes: the exporting run's time
// is the plain run's, bit for bit.
TEST(ChakraRoundTrip, ExportedFlopsRepriceAsTheRooflineOfTheGpu) {
  const auto dir = scratch("flops");
  const std::string prefix = (dir / "it").string();
  const std::string yaml = (dir / "one.yaml").string();
  std::ofstream(yaml) << one_gpu("H100-80GB-SXM");
  const double plain = iteration_time(hgsim::testing::hgsim({"run", yaml, "--json"}));
  const double exported = iteration_time(hgsim::testing::hgsim(
      {"run", yaml, "--fidelity", "full", "--json", "--export-chakra", prefix}));
  EXPECT_EQ(exported, plain);

  struct Counted {
    double flops, bytes;
  };
  std::vector<Counted> nodes;
  double forward_flops = 0;
  std::set<std::string> works;
  chakra::read_trace(
      chakra::trace_path(prefix, 0), {}, [](const auto&) {},
      [&](const chakra::Node& n) {
        if (n.type != chakra::NodeType::comp || n.duration_micros == 0) return;
        const auto* flops = n.attr("num_ops");
        const auto* bytes = n.attr("tensor_size");
        const auto* work = n.attr(sim::kChakraWorkAttr);
        ASSERT_NE(work, nullptr) << n.name;
        ASSERT_NE(flops, nullptr) << n.name;
        ASSERT_NE(bytes, nullptr) << n.name;
        works.insert(work->text);
        nodes.push_back({static_cast<double>(flops->integer), static_cast<double>(bytes->integer)});
        if (work->text == "forward") forward_flops += nodes.back().flops;
      });
  EXPECT_EQ(works, (std::set<std::string>{"forward", "backward", "recompute", "optimizer"}));

  const double tokens = 128, hidden = 256, vocab = 1000, layers = 8, micro_batches = 2;
  // GPT layer: 12 h^2 matrix parameters (QKV 3 h^2, output h^2, MLP 8 h^2); attention core
  // 4 s^2 h per sequence (scores and values, no causal discount).
  const double layer_forward = 2 * tokens * 12 * hidden * hidden + 4 * tokens * tokens * hidden;
  const double expected_forward =
      micro_batches * (layers * layer_forward + 2 * tokens * hidden * vocab);
  EXPECT_NEAR(forward_flops, expected_forward, 0.01 * expected_forward);

  double previous = -1, previous_roofline = -1;
  for (const char* gpu_name : {"H100-80GB-SXM", "H100-80GB-PCIe"}) {
    const kernels::GpuSpec& gpu = kernels::gpu_of(gpu_name);
    const kernels::KernelCosts& costs = kernels::kernel_costs_for(gpu.architecture);
    ASSERT_EQ(costs.architecture, kernels::Architecture::hopper);
    const double peak = gpu.peak_bf16->value(), hbm = gpu.memory_bandwidth.value();
    double roofline = 0;
    for (const Counted& n : nodes)
      roofline += std::max(n.flops / (peak * costs.gemm_efficiency),
                           n.bytes / (hbm * costs.memory_efficiency)) +
                  costs.gemm_overhead.value();
    std::string error;
    const core::Json repriced = run_trace(one_gpu(gpu_name), prefix, &error, true);
    ASSERT_FALSE(repriced.is_null()) << error;
    EXPECT_EQ(repriced["repriced"].get<std::size_t>(), nodes.size());
    const double t = repriced["iteration_time_s"].get<double>();
    EXPECT_NEAR(t, roofline, 1e-9 * roofline) << gpu_name;
    if (previous >= 0) {
      EXPECT_NEAR(t - previous, roofline - previous_roofline, 1e-9 * roofline) << gpu_name;
    }
    previous = t;
    previous_roofline = roofline;
  }
  // Slower peak and HBM: the PCIe card takes longer.
  EXPECT_GT(previous, 0);

  std::string error;
  const core::Json as_traced = run_trace(one_gpu("H100-80GB-SXM"), prefix, &error);
  ASSERT_FALSE(as_traced.is_null()) << error;
  EXPECT_EQ(as_traced["repriced"], 0);
  EXPECT_EQ(as_traced["iteration_time_s"].get<double>(), exported);
  std::filesystem::remove_all(dir);
}

// An all-gather's comm_size is each rank's share, as ASTRA-sim reads it (Ring.cc: final size
// comm_size x ranks): two ranks gathering 2 x 50 MB move 50 MB each way, S/2 / B + a.
TEST(ChakraImport, AllGatherCommSizeIsEachRanksShare) {
  const auto dir = scratch("all-gather");
  const std::string prefix = (dir / "t").string();
  chakra::Node gather = all_reduce(0, 50'000'000, {});
  gather.attrs[0] = chakra::Attribute::int64("comm_type", 2);  // ALL_GATHER
  write_rank(prefix, 0, {gather});
  write_rank(prefix, 1, {gather});
  std::string error;
  const core::Json out = run_trace(two_nodes(), prefix, &error);
  ASSERT_FALSE(out.is_null()) << error;
  const double B = 100e9 / 8, a = 2 * 5e-6;
  EXPECT_NEAR(out["iteration_time_s"].get<double>(), 5e7 / B + a, 1e-9);
  std::filesystem::remove_all(dir);
}

// A scenario's workload: {chakra: PREFIX}, relative to the scenario file, runs that trace as
// --chakra does; its errors name the key, the scenario file and the trace's file.
TEST(ChakraWorkloadKey, AScenarioNamesItsTraceRelativeToItself) {
  const auto dir = scratch("workload-key");
  std::filesystem::create_directories(dir / "traces");
  const std::string prefix = (dir / "traces" / "t").string();
  write_rank(prefix, 0, {comp(0, 1000)});
  write_rank(prefix, 1, {comp(0, 3000)});
  auto scenario_with = [&](const std::string& workload) {
    const std::string path = (dir / "s.yaml").string();
    std::ofstream(path) << two_nodes(workload);
    return path;
  };
  const std::string good = scenario_with("workload: {chakra: traces/t}\n");
  const auto run = hgsim::testing::hgsim({"run", good, "--json"});
  ASSERT_EQ(run.status, 0) << run.err << run.out;
  EXPECT_NEAR(core::Json::parse(run.out)["iteration_time_s"].get<double>(), 3e-3, 1e-12);
  const auto flag = hgsim::testing::hgsim({"run", good, "--json", "--chakra", prefix});
  ASSERT_EQ(flag.status, 0) << flag.err;
  EXPECT_EQ(core::Json::parse(flag.out)["iteration_time_s"],
            core::Json::parse(run.out)["iteration_time_s"]);

  const std::string missing = scenario_with("workload: {chakra: traces/nothing}\n");
  auto bad = hgsim::testing::hgsim({"run", missing});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("s.yaml:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("workload.chakra"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("nothing.0.et"), std::string::npos) << bad.err;

  const std::string unknown = scenario_with("workload: {chakra: traces/t, format: et}\n");
  bad = hgsim::testing::hgsim({"run", unknown});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("s.yaml:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("workload.format"), std::string::npos) << bad.err;

  const std::string empty = scenario_with("workload: {chakra: ''}\n");
  bad = hgsim::testing::hgsim({"check", empty});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("workload.chakra"), std::string::npos) << bad.err;
  std::filesystem::remove_all(dir);
}

// The export writes each tensor- and data-parallel collective as one COMM_COLL_NODE per member
// (et_def.proto, mlcommons/chakra 21585d8: NodeType 7, comm_type, comm_size, pg_name), with
// its ranks in the communicator-group file ASTRA-sim reads (--comm-group-configuration), and
// leaves only the pipeline's activations as send/receive pairs.
TEST(ChakraExport, CollectivesAreCollNodesWithTypeSizeAndGroup) {
  const auto dir = scratch("coll");
  const std::string prefix = (dir / "it").string();
  const auto run =
      hgsim::testing::hgsim({"run", "scenarios/examples/inline-model.yaml", "--fidelity", "full",
                             "--json", "--export-chakra", prefix});
  ASSERT_EQ(run.status, 0) << run.err;
  std::ifstream groups_file(sim::chakra_comm_groups_path(prefix));
  ASSERT_TRUE(groups_file) << sim::chakra_comm_groups_path(prefix);
  const core::Json groups = core::Json::parse(groups_file);
  std::map<int, int> by_type;  // comm_type -> nodes
  int sends = 0, collectives = 0;
  std::set<std::string> send_work;
  for (int rank = 0; rank < 16; ++rank) {
    chakra::read_trace(
        chakra::trace_path(prefix, rank), {}, [](const auto&) {},
        [&](const chakra::Node& n) {
          if (n.type == chakra::NodeType::comm_send) {
            ++sends;
            const auto* work = n.attr(sim::kChakraWorkAttr);
            send_work.insert(work ? work->text : "none");
          }
          if (n.type != chakra::NodeType::comm_coll) return;
          ++collectives;
          ASSERT_NE(n.attr("comm_type"), nullptr);
          ASSERT_NE(n.attr("comm_size"), nullptr);
          ASSERT_NE(n.attr("pg_name"), nullptr);
          const auto* ranks = n.attr(sim::kChakraGroupAttr);
          ASSERT_NE(ranks, nullptr);
          ++by_type[static_cast<int>(n.attr("comm_type")->integer)];
          std::vector<std::int64_t> members = ranks->integers;
          EXPECT_NE(std::find(members.begin(), members.end(), rank), members.end());
          std::sort(members.begin(), members.end());
          const std::string pg = n.attr("pg_name")->text;
          if (pg == "0") {
            EXPECT_EQ(members.size(), 16u);
          } else {
            ASSERT_TRUE(groups.contains(pg)) << pg;
            EXPECT_EQ(groups[pg].get<std::vector<std::int64_t>>(), members);
          }
          const double bytes = n.attr(sim::kChakraBytesAttr)->real;
          const double share = n.attr("comm_type")->integer == 2 ? bytes / members.size() : bytes;
          EXPECT_EQ(n.attr("comm_size")->integer, std::llround(share));
        });
  }
  // tp 2 all-reduces inside every layer and a data-parallel all-reduce of 4 per bucket.
  EXPECT_GT(by_type[0], 0);
  EXPECT_GT(collectives, 16 * 32);
  EXPECT_EQ(send_work, std::set<std::string>{"pp_comm"});
  EXPECT_GT(sends, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
