// NCCL's collectives as hgsim prices them: the fixed cost per collective kernel and the
// achieved bus bandwidth (kernels/nccl_costs.yaml, kernels/kernel_costs.yaml), the channel
// rings of a tensor-parallel group across nodes, each against its closed form written out
// here, and the model against the committed kernel-level tables (kernels/measured/nccl/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "kernels/nccl_costs.hpp"
#include "sim/collectives.hpp"

namespace hgsim {
namespace {

core::Cluster cluster(const std::string& gpu, int nodes, int per_node, double nvlink_bytes_per_s,
                      double nvlink_latency_s = 1e-6, double nic_bytes_per_s = 25e9,
                      double nic_latency_s = 2e-6) {
  core::Cluster c;
  c.name = "c";
  c.gpu = gpu;
  c.nodes = nodes;
  c.gpus_per_node = per_node;
  c.nvlink = {core::BytesPerSecond(nvlink_bytes_per_s), core::Seconds(nvlink_latency_s)};
  c.nic = {core::BytesPerSecond(nic_bytes_per_s), core::Seconds(nic_latency_s)};
  return c;
}

// kernels/nccl_costs.yaml's rows, as written there.
constexpr double kAmpereFloor2 = 40e-6, kAmperePerRank = 2.3e-6, kHopperFloor = 31e-6;
// kernels/kernel_costs.yaml's nvlink_efficiency: ampere 0.56, hopper 0.824.
constexpr double kAmpereBus = 0.56 * 300e9, kHopperBus = 0.824 * 450e9;

TEST(NcclCosts, FloorGrowsWithRanksAsTheFileSays) {
  const auto a100 = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const auto h100 = cluster("H100-80GB-SXM", 1, 8, 450e9);
  EXPECT_EQ(kernels::collective_floor_s(a100, 1), 0);
  EXPECT_NEAR(kernels::collective_floor_s(a100, 2), kAmpereFloor2, 1e-12);
  EXPECT_NEAR(kernels::collective_floor_s(a100, 8), kAmpereFloor2 + 6 * kAmperePerRank, 1e-12);
  EXPECT_NEAR(kernels::collective_floor_s(h100, 8), kHopperFloor, 1e-12);
}

TEST(NcclCosts, TheFileRejectsAMissingFloorWithItsPath) {
  core::Diagnostics diags;
  kernels::parse_nccl_costs(
      "architectures:\n  - {architecture: ampere, floor_per_rank: 1us, "
      "source: x}\n",
      "nccl.yaml", diags);
  ASSERT_TRUE(diags.has_errors());
  EXPECT_NE(diags.format().find("architectures[0]"), std::string::npos) << diags.format();
  EXPECT_NE(diags.format().find("floor_at_two_ranks"), std::string::npos) << diags.format();
}

// In one node: 2(n-1)/n S / B_bus + max(floor(n), 2(n-1) hop latency).
TEST(NcclCollectives, AllReduceInsideANodeIsTheFloorPlusTheBusTime) {
  const auto c = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const double S = 32.0 * (1 << 20);
  const double floor8 = kAmpereFloor2 + 6 * kAmperePerRank;  // 53.8us > 14 x 2us
  const double expected = 2.0 * 7 / 8 * S / kAmpereBus + floor8;
  EXPECT_NEAR(sim::channel_ring_time(c, sim::channel_ring({8}), S, sim::RingKind::all_reduce),
              expected, 1e-12);
  EXPECT_NEAR(sim::tensor_parallel_block_time(c, 8, S, false), expected, 1e-12);
  // Sequence parallelism: two kernels, (n-1)/n S / B + max(floor, (n-1) hop latency) each.
  const double half = 7.0 / 8 * S / kAmpereBus + floor8;
  EXPECT_NEAR(sim::tensor_parallel_block_time(c, 8, S, true), 2 * half, 1e-12);
  EXPECT_NEAR(sim::tensor_parallel_all_gather_time(c, 8, S), half, 1e-12);
}

// A ring whose own latency terms exceed NCCL's floor pays no extra: the uniform ring.
TEST(NcclCollectives, TheFloorHidesUnderALongerRingLatency) {
  const auto c = cluster("H100-80GB-SXM", 1, 4, 450e9, 10e-6);  // 6 steps x 20us > 31us
  const double S = 1e6;
  EXPECT_NEAR(sim::channel_ring_time(c, sim::channel_ring({4}), S, sim::RingKind::all_reduce),
              sim::ring_all_reduce_time(4, S, sim::nvlink_hop(c)), 1e-15);
  EXPECT_EQ(sim::collective_extra_latency(c, 4, 6 * 20e-6), 0);
  EXPECT_NEAR(sim::collective_extra_latency(c, 4, 6e-6), kHopperFloor - 6e-6, 1e-15);
}

// tp 16 on two nodes of 8: NCCL runs 8 channels, each leaving a node through its own GPU's
// NIC. Channel chunk S / (8 x 16); 14 NVLink hops shared by 7 channels, 2 NIC hops:
//   step = max(chunk / B_nic, (14 (a_in + 7 chunk / B_nv) + 2 (a_nic + chunk / B_nic)) / 16)
//   all-reduce = 30 step + max(0, floor(16) - 30 (14 a_in + 2 a_nic) / 16).
TEST(NcclCollectives, TensorParallelAcrossNodesRunsOneChannelPerNic) {
  const auto c = cluster("A100-80GB-SXM", 2, 8, 300e9, 1e-6, 25e9, 2e-6);
  const double S = 64.0 * (1 << 20);
  const double chunk = S / 8 / 16;
  const double a_in = 2e-6, a_nic = 4e-6;
  const double mean = (14 * (a_in + 7 * chunk / kAmpereBus) + 2 * (a_nic + chunk / 25e9)) / 16;
  const double step = std::max(chunk / 25e9, mean);
  const double floor16 = kAmpereFloor2 + 14 * kAmperePerRank;
  const double extra = std::max(0.0, floor16 - 30 * (14 * a_in + 2 * a_nic) / 16);
  const double expected = 30 * step + extra;
  const sim::ChannelRing ring = sim::tensor_parallel_channels(c, 16);
  EXPECT_EQ(ring.channels, 8);
  EXPECT_EQ(ring.nvlink_load, 7);
  EXPECT_NEAR(sim::tensor_parallel_block_time(c, 16, S, false), expected, 1e-12);
  // One ring through one NIC a node (the price before channels) is several times slower.
  sim::RingHops one;
  one.members = 16;
  one.crossings = 2;
  one.inside = sim::nvlink_hop(c);
  one.across = sim::nic_hop(c);
  EXPECT_GT(sim::ring_all_reduce_time(S, one), 4 * expected);
}

// ---- the committed kernel-level tables -------------------------------------------------------

struct Row {
  int ranks = 0, per_node = 0;
  double bytes = 0, seconds = 0;
};

std::vector<Row> read_table(const std::string& name) {
  std::ifstream in(std::string(HGSIM_SOURCE_DIR) + "/kernels/measured/nccl/" + name);
  std::vector<Row> rows;
  std::string line;
  std::getline(in, line);  // header: ranks,ranks_per_node,size_bytes,median_ms
  while (std::getline(in, line)) {
    Row r;
    char comma;
    std::istringstream fields(line);
    double ms = 0;
    fields >> r.ranks >> comma >> r.per_node >> comma >> r.bytes >> comma >> ms;
    r.seconds = ms * 1e-3;
    rows.push_back(r);
  }
  return rows;
}

// The model within 10% mean |error| from 1 MiB up for every group inside one node of the
// tables (vidur's DGX A100 and DGX H100, 2, 4 and 8 ranks), with no side-bias beyond 5%.
TEST(NcclCollectives, AllReduceHoldsTheMeasuredTablesInsideANode) {
  const struct {
    const char* file;
    const char* gpu;
    double nvlink;
  } tables[] = {{"vidur_a100_dgx_all_reduce.csv", "A100-80GB-SXM", 300e9},
                {"vidur_h100_dgx_all_reduce.csv", "H100-80GB-SXM", 450e9}};
  for (const auto& t : tables) {
    std::map<int, std::vector<double>> errors;  // ranks -> signed errors from 1 MiB up
    for (const Row& r : read_table(t.file)) {
      if (r.ranks != r.per_node || r.bytes < (1 << 20)) continue;
      const auto c = cluster(t.gpu, 1, r.ranks, t.nvlink);
      const double hgsim = sim::tensor_parallel_block_time(c, r.ranks, r.bytes, false);
      errors[r.ranks].push_back(hgsim / r.seconds - 1);
    }
    ASSERT_EQ(errors.size(), 3u) << t.file;
    for (const auto& [ranks, e] : errors) {
      double mean_abs = 0, mean = 0;
      for (double x : e) {
        mean_abs += std::abs(x) / e.size();
        mean += x / e.size();
      }
      EXPECT_LE(mean_abs, 0.10) << t.file << " ranks " << ranks;
      EXPECT_LE(std::abs(mean), 0.05) << t.file << " ranks " << ranks;
    }
  }
}

}  // namespace
}  // namespace hgsim
