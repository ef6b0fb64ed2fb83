// NCCL's collectives as hgsim prices them: the fixed cost per collective kernel and the
// achieved bus bandwidth (kernels/nccl_costs.yaml, kernels/kernel_costs.yaml), the channel
// rings of a tensor-parallel group across nodes, each against its closed form written out
// here, and the model against the committed kernel-level tables (kernels/measured/nccl/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "kernels/nccl_costs.hpp"
#include "sim/collectives.hpp"
#include "sim/platform.hpp"

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
constexpr double kAmpereFixed2 = 19.9e-6, kAmpereFixed8 = 0, kAmpereScale = 1.27;
constexpr double kHopperFixed2 = 23.9e-6, kHopperFixed8 = 19.1e-6, kHopperScale = 0.255;
constexpr double kAmpereSendRecv = 10.8e-6;
// kernels/kernel_costs.yaml's nvlink_efficiency: ampere 0.56, hopper 0.824.
constexpr double kAmpereBus = 0.56 * 300e9;

// NVIDIA/nccl 5067397 src/graph/tuning.cc, written out apart from kernels/nccl_costs.cpp:
// ring base latency, NVLink and NET step latency (us), and the share of the bus bandwidth
// of LL, LL128 and Simple.
struct Protocol {
  double base, nvlink, net, share;
};
constexpr Protocol kLL{6.6, 0.6, 2.7, 0.5}, kLL128{14.0, 1.9, 4.0, 0.92},
    kSimple{8.4, 3.4, 14.0, 1.0};

TEST(NcclCosts, FixedCostFollowsTheFileBetweenTwoAndEightRanks) {
  const auto a100 = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const auto h100 = cluster("H100-80GB-SXM", 1, 8, 450e9);
  EXPECT_EQ(kernels::collective_fixed_cost_s(a100, 1), 0);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(a100, 2), kAmpereFixed2, 1e-12);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(a100, 5), (kAmpereFixed2 + kAmpereFixed8) / 2,
              1e-12);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(a100, 8), kAmpereFixed8, 1e-12);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(a100, 16), kAmpereFixed8, 1e-12);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(h100, 2), kHopperFixed2, 1e-12);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(h100, 8), kHopperFixed8, 1e-12);
  // A cluster's calibration takes the file's place.
  auto calibrated = a100;
  calibrated.calibration.nccl_fixed_cost_2_ranks = core::Seconds(5e-6);
  calibrated.calibration.nccl_fixed_cost_8_ranks = core::Seconds(11e-6);
  EXPECT_NEAR(kernels::collective_fixed_cost_s(calibrated, 4), 7e-6, 1e-15);
}

TEST(NcclCosts, TheFileRejectsAMissingFigureWithItsPath) {
  core::Diagnostics diags;
  kernels::parse_nccl_costs(
      "architectures:\n  - {architecture: ampere, fixed_cost_at_eight_ranks: 1us, "
      "latency_scale: 1, send_recv_fixed_cost: 1us, source: x}\n",
      "nccl.yaml", diags);
  ASSERT_TRUE(diags.has_errors());
  EXPECT_NE(diags.format().find("architectures[0]"), std::string::npos) << diags.format();
  EXPECT_NE(diags.format().find("fixed_cost_at_two_ranks"), std::string::npos) << diags.format();
}

// One all-reduce of S inside an 8-GPU A100 node under protocol p, by hand: 14 steps, the
// ring's own latency 14 x 2us (NVLink 1us each way), NCCL's latency scale x (base + 14
// NVLink steps) plus the fixed cost, the bytes at the protocol's share of the bus:
//   2 (7/8) S / (share B) + 28us + max(0, fixed(8) + scale (base + 14 step) - 28us).
double all_reduce_in_a100_node(double S, const Protocol& p) {
  const double own = 14 * 2e-6;
  const double latency = kAmpereFixed8 + kAmpereScale * (p.base + 14 * p.nvlink) * 1e-6;
  return 2.0 * 7 / 8 * S / (p.share * kAmpereBus) + own + std::max(0.0, latency - own);
}

// A tiny message pays the latency floor of NCCL's low-latency protocol (LL), whatever it
// carries; the closed form runs the cheapest protocol.
TEST(NcclCollectives, ATinyAllReducePaysTheLowLatencyProtocolsFloor) {
  const auto c = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const double S = 2048;
  const double ll = all_reduce_in_a100_node(S, kLL);
  EXPECT_LT(ll, all_reduce_in_a100_node(S, kLL128));
  EXPECT_LT(ll, all_reduce_in_a100_node(S, kSimple));
  const auto plan = sim::channel_ring_plan(c, sim::channel_ring({8}), S, sim::RingKind::all_reduce);
  EXPECT_EQ(plan.protocol, kernels::NcclProtocol::ll);
  EXPECT_EQ(plan.wire_factor, 2);
  EXPECT_NEAR(plan.time_s, ll, 1e-12);
  // The floor: halving the message changes the time by less than 1%.
  const double half =
      sim::channel_ring_time(c, sim::channel_ring({8}), S / 2, sim::RingKind::all_reduce);
  EXPECT_LT(plan.time_s - half, 0.01 * plan.time_s);
}

// A large message runs Simple and reaches the bus bandwidth: 2 (n-1)/n S / t within 1% of B
// at 1 GiB (the rest is the latency).
TEST(NcclCollectives, ALargeAllReduceRunsSimpleAtTheBusBandwidth) {
  const auto c = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const double S = 1024.0 * (1 << 20);
  const auto plan = sim::channel_ring_plan(c, sim::channel_ring({8}), S, sim::RingKind::all_reduce);
  EXPECT_EQ(plan.protocol, kernels::NcclProtocol::simple);
  EXPECT_NEAR(plan.time_s, all_reduce_in_a100_node(S, kSimple), 1e-12);
  EXPECT_NEAR(2.0 * 7 / 8 * S / plan.time_s, kAmpereBus, 0.01 * kAmpereBus);
}

// In one node, every size: the cheapest of the three protocols, as written out above; the
// tensor-parallel block is the same all-reduce, and with sequence parallelism a
// reduce-scatter and an all-gather (7 steps each).
TEST(NcclCollectives, AllReduceInsideANodeIsTheCheapestProtocol) {
  const auto c = cluster("A100-80GB-SXM", 1, 8, 300e9);
  for (double S : {64.0 * 1024, 1.0 * (1 << 20), 32.0 * (1 << 20)}) {
    const double expected =
        std::min({all_reduce_in_a100_node(S, kLL), all_reduce_in_a100_node(S, kLL128),
                  all_reduce_in_a100_node(S, kSimple)});
    EXPECT_NEAR(sim::channel_ring_time(c, sim::channel_ring({8}), S, sim::RingKind::all_reduce),
                expected, 1e-12)
        << S;
    EXPECT_NEAR(sim::tensor_parallel_block_time(c, 8, S, false), expected, 1e-12);
  }
  const double S = 32.0 * (1 << 20);
  auto half = [&](const Protocol& p) {
    const double own = 7 * 2e-6;
    const double latency = kAmpereFixed8 + kAmpereScale * (p.base + 7 * p.nvlink) * 1e-6;
    return 7.0 / 8 * S / (p.share * kAmpereBus) + own + std::max(0.0, latency - own);
  };
  const double gather = std::min({half(kLL), half(kLL128), half(kSimple)});
  EXPECT_NEAR(sim::tensor_parallel_all_gather_time(c, 8, S), gather, 1e-12);
  EXPECT_NEAR(sim::tensor_parallel_block_time(c, 8, S, true), 2 * gather, 1e-12);
}

// A ring whose own latency terms exceed NCCL's pays no extra: the uniform ring, under
// Simple (the fewest bytes).
TEST(NcclCollectives, NcclsLatencyHidesUnderALongerRingLatency) {
  const auto c = cluster("H100-80GB-SXM", 1, 4, 450e9, 100e-6);  // 6 steps x 200us
  const double S = 1e6;
  const auto plan = sim::channel_ring_plan(c, sim::channel_ring({4}), S, sim::RingKind::all_reduce);
  EXPECT_EQ(plan.protocol, kernels::NcclProtocol::simple);
  EXPECT_EQ(plan.extra_s, 0);
  EXPECT_NEAR(plan.time_s, sim::ring_all_reduce_time(4, S, sim::nvlink_hop(c)), 1e-15);
}

// NCCL's ring latency across nodes (tuning.cc), by hand: 16 ranks on 2 nodes, 30 steps of
// which 2 cross nodes; Simple's intra steps at least 3us, its all-reduce x1.4 (plateau).
TEST(NcclCollectives, NcclsRingLatencyAcrossNodesIsItsTuningModel) {
  const auto c = cluster("H100-80GB-SXM", 2, 8, 450e9);
  const auto& protocols = kernels::nccl_ring_protocols();
  auto latency = [&](int i) {
    return kernels::nccl_ring_latency_s(c, protocols[i], 30, 2, 16, 2, true) / kHopperScale;
  };
  EXPECT_NEAR(latency(0), (6.6 + 28 * 1.0 + 2 * 2.7) * 1e-6, 1e-12);         // LL: 1us floor
  EXPECT_NEAR(latency(1), (14.0 + 28 * 1.9 + 2 * 4.0) * 1e-6, 1e-12);        // LL128
  EXPECT_NEAR(latency(2), 1.4 * (8.4 + 28 * 3.4 + 2 * 14.0) * 1e-6, 1e-12);  // Simple
  // One rank a node: NCCL's tree NET figures (5.0, 8.5, 14).
  EXPECT_NEAR(kernels::nccl_ring_latency_s(c, protocols[0], 2, 2, 2, 2, true) / kHopperScale,
              (6.6 + 2 * 5.0) * 1e-6, 1e-12);
}

// tp 16 on two nodes of 8: NCCL runs 8 channels, each leaving a node through its own GPU's
// NIC. With NCCL's latencies and fixed cost set to 0 (a cluster's calibration), every
// protocol's extra is 0 and Simple (the fewest bytes) runs: the channel rings alone.
// Channel chunk S / (8 x 16); 14 NVLink hops shared by 7 channels, 2 NIC hops:
//   step = max(chunk / B_nic, (14 (a_in + 7 chunk / B_nv) + 2 (a_nic + chunk / B_nic)) / 16)
//   all-reduce = 30 step.
TEST(NcclCollectives, TensorParallelAcrossNodesRunsOneChannelPerNic) {
  auto c = cluster("A100-80GB-SXM", 2, 8, 300e9, 1e-6, 25e9, 2e-6);
  c.calibration.nccl_latency_scale = 0;
  c.calibration.nccl_fixed_cost_2_ranks = core::Seconds(0);
  c.calibration.nccl_fixed_cost_8_ranks = core::Seconds(0);
  const double S = 64.0 * (1 << 20);
  const double chunk = S / 8 / 16;
  const double a_in = 2e-6, a_nic = 4e-6;
  const double mean = (14 * (a_in + 7 * chunk / kAmpereBus) + 2 * (a_nic + chunk / 25e9)) / 16;
  const double step = std::max(chunk / 25e9, mean);
  const double expected = 30 * step;
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

// A node with fewer NICs than GPUs: its GPUs share them. The NIC hop each GPU gets when all
// of them send is nic x nics / gpus_per_node, and a bandwidth-bound ring across nodes slows
// by nearly that ratio (its NVLink hops do not).
TEST(NcclCollectives, FewerNicsAPerNodeShareTheirBandwidth) {
  auto eight = cluster("A100-80GB-SXM", 2, 8, 300e9, 1e-6, 25e9, 2e-6);
  auto one = eight;
  one.nics_per_node = 1;
  auto two = eight;
  two.nics_per_node = 2;
  EXPECT_EQ(sim::nic_hop(eight).bytes_per_s, 25e9);
  EXPECT_EQ(sim::nic_hop(one).bytes_per_s, 25e9 / 8);
  EXPECT_EQ(sim::nic_hop(two).bytes_per_s, 25e9 / 4);
  const double S = 1024.0 * (1 << 20);
  const double t8 = sim::tensor_parallel_block_time(eight, 16, S, false);
  const double t2 = sim::tensor_parallel_block_time(two, 16, S, false);
  const double t1 = sim::tensor_parallel_block_time(one, 16, S, false);
  EXPECT_GT(t1 / t8, 7.0);
  EXPECT_LE(t1 / t8, 8.0 + 1e-9);
  EXPECT_GT(t2 / t8, 3.5);
  EXPECT_LE(t2 / t8, 4.0 + 1e-9);
}

// A send/recv pays the larger of its hop's latency and NCCL's send/recv fixed cost, then
// its bytes at the hop's rate.
TEST(NcclCollectives, ASendRecvInsideANodePaysItsFixedCost) {
  const auto c = cluster("A100-80GB-SXM", 1, 8, 300e9);
  const double S = 64.0 * (1 << 20);
  EXPECT_NEAR(sim::send_recv_time(c, true, 0), std::max(2e-6, kAmpereSendRecv), 1e-15);
  EXPECT_NEAR(sim::send_recv_time(c, true, S), std::max(2e-6, kAmpereSendRecv) + S / kAmpereBus,
              1e-12);
  auto slow = c;
  slow.nvlink.latency = core::Seconds(1e-3);  // a hop slower than the fixed cost
  EXPECT_NEAR(sim::send_recv_time(slow, true, 0), 2e-3, 1e-15);
}

// `nics_per_node` in a scenario: whole numbers from 1 to gpus_per_node, the error naming
// the key; with fewer NICs than GPUs the simulator's node gets an uplink of its NICs.
std::optional<core::Scenario> two_dgx_nodes(const std::string& nics, core::Diagnostics& diags) {
  const std::string yaml =
      "name: nics\nmodel: {name: tiny, layers: 8, hidden: 256, heads: 4, vocab: 1000}\n"
      "training: {global_batch: 8, seq_len: 128}\n"
      "clusters:\n  - {name: c, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 8, " +
      nics +
      "nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
      "strategy:\n  pipelines:\n    - micro_batches: 8\n      stages:\n"
      "        - {cluster: c, layers: 8}\n";
  auto node = core::parse_yaml(yaml, "nics.yaml", diags);
  if (!node) return std::nullopt;
  return core::parse_scenario(*node, "nics.yaml", diags);
}

TEST(NicsPerNode, TheKeyIsReadAndItsErrorsNameIt) {
  for (const char* bad : {"nics_per_node: 9, ", "nics_per_node: 0, ", "nics_per_node: 1.5, "}) {
    core::Diagnostics diags;
    two_dgx_nodes(bad, diags);
    ASSERT_TRUE(diags.has_errors()) << bad;
    EXPECT_NE(diags.format().find("clusters[0].nics_per_node"), std::string::npos)
        << diags.format();
  }
  core::Diagnostics diags;
  const auto dgx = two_dgx_nodes("", diags);
  ASSERT_TRUE(dgx) << diags.format();
  EXPECT_EQ(dgx->clusters[0].nic_count(), 8);  // one NIC a GPU, as a DGX
  const auto shared = two_dgx_nodes("nics_per_node: 2, ", diags);
  ASSERT_TRUE(shared) << diags.format();
  EXPECT_EQ(shared->clusters[0].nic_count(), 2);
  EXPECT_EQ(shared->clusters[0].nic_share(), 0.25);

  const auto* a100 = kernels::find_gpu("A100-80GB-SXM");
  const std::vector<sim::DeviceRequest> requests{{0, 0, 1}, {0, 1, 1}, {0, 8, 1}};
  for (const auto& [scenario, uplink] :
       {std::pair{*dgx, -1.0}, std::pair{*shared, 2 * 200e9 / 8}}) {
    core::Diagnostics built;
    const auto p = sim::build_platform(scenario, {a100}, requests, built);
    ASSERT_FALSE(built.has_errors()) << built.format();
    double found = -1;
    for (const auto& l : p.links)
      if (l.kind == sim::LinkKind::uplink) found = l.bytes_per_s;
    EXPECT_EQ(found, uplink);
  }
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
// tables (vidur's DGX A100 and DGX H100, 2, 4 and 8 ranks), with no side-bias beyond 5%;
// H100 at 2 ranks within 12% and 10%.
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
      // H100 at 2 ranks is the one group the fit leaves above 10% (11.4%, signed -9%).
      const bool h100_pair = ranks == 2 && std::string(t.gpu) == "H100-80GB-SXM";
      EXPECT_LE(mean_abs, h100_pair ? 0.12 : 0.10) << t.file << " ranks " << ranks;
      EXPECT_LE(std::abs(mean), h100_pair ? 0.10 : 0.05) << t.file << " ranks " << ranks;
    }
  }
}

// Below 1 MiB, where NCCL's protocols and fixed cost are all there is: 8 ranks in a node
// within 20% (A100) and 25% (H100) mean |error| (the 2- and 4-rank rows are bimodal, 7 or
// 40us at one size, and are not held); send/recv inside a node within 40% (A100, whose
// send/recv moves more than its all-reduce's bus rate) and 10% (H100) over every size.
TEST(NcclCollectives, SmallMessagesAndSendRecvHoldTheMeasuredTables) {
  const struct {
    const char* gpu;
    const char* tag;
    double nvlink, small_bound, send_recv_bound;
  } gpus[] = {{"A100-80GB-SXM", "a100", 300e9, 0.20, 0.40},
              {"H100-80GB-SXM", "h100", 450e9, 0.25, 0.10}};
  for (const auto& g : gpus) {
    double small = 0, send_recv = 0;
    int small_rows = 0, send_recv_rows = 0;
    for (const Row& r : read_table(std::string("vidur_") + g.tag + "_dgx_all_reduce.csv")) {
      if (r.ranks != 8 || r.per_node != 8 || r.bytes >= (1 << 20)) continue;
      const auto c = cluster(g.gpu, 1, 8, g.nvlink);
      small += std::abs(sim::tensor_parallel_block_time(c, 8, r.bytes, false) / r.seconds - 1);
      ++small_rows;
    }
    for (const Row& r : read_table(std::string("vidur_") + g.tag + "_dgx_send_recv.csv")) {
      if (r.per_node != 2) continue;
      const auto c = cluster(g.gpu, 1, 2, g.nvlink);
      send_recv += std::abs(sim::send_recv_time(c, true, r.bytes) / r.seconds - 1);
      ++send_recv_rows;
    }
    ASSERT_GT(small_rows, 5) << g.tag;
    ASSERT_GT(send_recv_rows, 10) << g.tag;
    EXPECT_LE(small / small_rows, g.small_bound) << g.tag;
    EXPECT_LE(send_recv / send_recv_rows, g.send_recv_bound) << g.tag;
  }
}

}  // namespace
}  // namespace hgsim
