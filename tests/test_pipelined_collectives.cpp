// simulation.collectives: pipelined (sim::pipelined_flows) against the textbook closed forms,
// written out here, and against the step-by-step lowering: equal on uniform rings and trees,
// and where they part (a slow hop, a WAN shared by two rings) in the direction NCCL's own
// model gives (its ring pays the latency of every step and runs at the slowest link's rate).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "kernels/gpu_catalog.hpp"
#include "sim/collectives.hpp"
#include "sim/engine.hpp"
#include "sim/simulate.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;
using testing::checked;
using testing::nodes_scenario;
using Lowering = std::vector<sim::NodeId> (*)(const sim::Sender&, const sim::Collective&);
using Granularity = core::CollectiveGranularity;

// One GPU per node, `nodes` nodes, NIC `nic` with latency `latency` at each end.

// Plays `rings` collectives at once, ring r over the devices rings[r] (indices into
// `requests`), each of `bytes`; returns when the last member of any ring is done.
double play(const core::Scenario& s, const std::vector<sim::DeviceRequest>& requests,
            const std::vector<std::vector<int>>& rings, double bytes, Lowering lowering,
            Granularity granularity) {
  return sim::run_isolated([&] {
           std::vector<const kernels::GpuSpec*> gpus;
           for (const auto& c : s.clusters) gpus.push_back(kernels::find_gpu(c.gpu));
           core::Diagnostics diags;
           const sim::Platform platform = sim::build_platform(s, gpus, requests, diags);
           sim::Graph g;
           sim::Sender sender{g, platform, nullptr, nullptr, sim::Work::dp_comm, -1};
           sender.granularity = granularity;
           for (std::size_t r = 0; r < rings.size(); ++r) {
             sim::Collective c{{}, {}, bytes, "ring " + std::to_string(r), 1};
             for (int m : rings[r]) {
               c.members.push_back(m);
               c.ready.push_back(g.join());
             }
             lowering(sender, c);
           }
           g.finish();
           return Json(sim::execute(g, platform).makespan);
         })
      .get<double>();
}

std::vector<sim::DeviceRequest> one_per_node(int n) {
  std::vector<sim::DeviceRequest> requests;
  for (int i = 0; i < n; ++i) requests.push_back({0, i, 1});
  return requests;
}

std::vector<int> iota(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// On a uniform ring (every hop B = 12.5 GB/s, a = 2 x 5 us) the pipelined lowering is the
// textbook closed form exactly, written out here: steps (a + S / n / B) with 2(n-1) steps for
// an all-reduce and n-1 for a reduce-scatter or all-gather; the binomial tree's
// ceil(log2 n) (S / B + a) per phase (the root's link carries a child's whole tensor per
// round). The step-by-step lowering gives the same within 1% (it is the closed form too,
// for a tree all-reduce on powers of two).
TEST(SimPipelinedCollectives, UniformRingsAndTreesMatchTheClosedFormAndTheSteps) {
  auto c = checked(nodes_scenario(8));
  const double B = 100e9 / 8, a = 2 * 5e-6;
  struct Case {
    const char* name;
    Lowering lowering;
    int (*steps)(int n);
    bool ring;  // chunk S / n per step; else the whole S per round
    std::vector<int> sizes;
  } cases[] = {
      {"ring all-reduce",
       sim::ring_all_reduce,
       [](int n) { return 2 * (n - 1); },
       true,
       {2, 3, 5, 8}},
      {"ring reduce-scatter",
       sim::ring_reduce_scatter,
       [](int n) { return n - 1; },
       true,
       {2, 3, 5, 8}},
      {"ring all-gather", sim::ring_all_gather, [](int n) { return n - 1; }, true, {2, 3, 5, 8}},
      {"tree broadcast",
       sim::tree_broadcast,
       [](int n) {
         int r = 0;
         while ((1 << r) < n) ++r;
         return r;
       },
       false,
       {2, 3, 5, 8}},
      {"tree all-reduce",
       sim::tree_all_reduce,
       [](int n) {
         int r = 0;
         while ((1 << r) < n) ++r;
         return 2 * r;
       },
       false,
       {2, 4, 8}},  // off powers of two the steps' reduce has a shorter critical path
  };
  for (double S : {1e9, 1e5})  // bandwidth-bound and latency-bound
    for (const auto& k : cases)
      for (int n : k.sizes) {
        const double piece = k.ring ? S / n : S;
        const double expected = k.steps(n) * (a + piece / B);
        const double pipelined =
            play(c.scenario, one_per_node(n), {iota(n)}, S, k.lowering, Granularity::pipelined);
        const double steps =
            play(c.scenario, one_per_node(n), {iota(n)}, S, k.lowering, Granularity::steps);
        // (SimGrid settles times to about 1e-10 s with chunks of S/3 bytes.)
        EXPECT_NEAR(pipelined, expected, 1e-6 * expected + 1e-10)
            << k.name << " n=" << n << " S=" << S;
        EXPECT_NEAR(pipelined, steps, 0.01 * steps) << k.name << " n=" << n << " S=" << S;
      }
}

// A pipelined all-reduce is a handful of activities: one transfer per edge (n), one wait
// per edge for the rest of the steps' latency, and two joins; the steps lowering 2n(n-1).
TEST(SimPipelinedCollectives, ARingIsOneFlowPerEdge) {
  auto c = checked(nodes_scenario(8));
  const auto count = [&](Granularity granularity) {
    return sim::run_isolated([&] {
             core::Diagnostics diags;
             const sim::Platform platform =
                 sim::build_platform(c.scenario, {kernels::find_gpu(c.scenario.clusters[0].gpu)},
                                     one_per_node(8), diags);
             sim::Graph g;
             sim::Sender sender{g, platform, nullptr, nullptr, sim::Work::dp_comm, -1};
             sender.granularity = granularity;
             sim::Collective ring{iota(8), {}, 1e9, "ring", 1};
             for (int i = 0; i < 8; ++i) ring.ready.push_back(g.join());
             sim::ring_all_reduce(sender, ring);
             int transfers = 0;
             for (sim::NodeId id = 0; id < g.size(); ++id)
               transfers += g.node(id).op == sim::Op::transfer;
             return Json(transfers);
           })
        .get<int>();
  };
  EXPECT_EQ(count(Granularity::pipelined), 8);
  EXPECT_EQ(count(Granularity::steps), 2 * 8 * 7);
}

// Two clusters of two GPUs, joined by a WAN of 10 Gbit/s and 10 ms (window large enough not
// to cap it). Inside a cluster: NIC 400 Gbit/s, 1 us at each end.
std::string wan_scenario() {
  return testing::two_cluster_scenario("bandwidth: 10Gbps, latency: 10ms, tcp_window: 1GiB");
}
const std::vector<sim::DeviceRequest> kWanDevices = {{0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}};

// A flat ring a0 a1 b0 b1 with two WAN hops among four. NCCL's ring runs at its slowest
// link's rate with every step's latency paid once (its tuning model: steps x latency +
// bytes / bus bandwidth), so the pipelined lowering is, written out here,
//   2(n-1) mean hop latency + 2(n-1)/n S / B_wan
// for every size; the steps lowering takes each step at its slowest hop's time or its mean
// hop, whichever is longer (sim::ring_step_time), so it hides the latencies under the WAN
// hop's transmission when the ring is bandwidth-bound: it is never slower than pipelined, and
// shorter by at most the latency terms.
TEST(SimPipelinedCollectives, ASlowHopPaysItsLatencyAndSetsTheRate) {
  auto c = checked(wan_scenario());
  const double wan = 10e9 / 8, nic = 400e9 / 8;
  const double lan_latency = 2e-6;
  // a1 -> b0: NIC out, WAN, NIC in.
  const double wan_latency = 10e-3 + 2e-6;
  const double mean_latency = (2 * lan_latency + 2 * wan_latency) / 4;
  for (double S : {4e8, 4e6}) {
    const double bytes_per_edge = 2.0 * 3 / 4 * S;
    const double expected = 6 * mean_latency + std::max(bytes_per_edge / wan, bytes_per_edge / nic);
    const double pipelined = play(c.scenario, kWanDevices, {{0, 1, 2, 3}}, S, sim::ring_all_reduce,
                                  Granularity::pipelined);
    const double steps =
        play(c.scenario, kWanDevices, {{0, 1, 2, 3}}, S, sim::ring_all_reduce, Granularity::steps);
    EXPECT_NEAR(pipelined, expected, 1e-6 * expected) << "S=" << S;
    EXPECT_LE(steps, pipelined * (1 + 1e-9)) << "S=" << S;
    EXPECT_GE(steps, pipelined - 6 * mean_latency - 1e-9) << "S=" << S;
  }
}

// Two 2-member rings (a0 b0 and a1 b1) cross the one WAN link at once, each way: its
// bandwidth is shared, so each ring's bytes cross at half the rate. Pipelined, written out:
// 2 mean latency + 2 (S / 2) / (B_wan / 2). The steps lowering shares the link the same way
// and lands within 1% when bandwidth-bound.
TEST(SimPipelinedCollectives, ASharedWanHalvesEachRingsRate) {
  auto c = checked(wan_scenario());
  const double wan = 10e9 / 8;
  const double wan_latency = 10e-3 + 2e-6;
  const double S = 4e8;
  const double expected = 2 * wan_latency + 2 * (S / 2) / (wan / 2);
  const double pipelined = play(c.scenario, kWanDevices, {{0, 2}, {1, 3}}, S, sim::ring_all_reduce,
                                Granularity::pipelined);
  const double steps =
      play(c.scenario, kWanDevices, {{0, 2}, {1, 3}}, S, sim::ring_all_reduce, Granularity::steps);
  EXPECT_NEAR(pipelined, expected, 1e-6 * expected);
  EXPECT_NEAR(steps, pipelined, 0.01 * pipelined);
}

// The key reads both names and refuses others with the valid choices.
TEST(SimPipelinedCollectives, TheScenarioKeyReadsBothGranularities) {
  for (const char* name : {"steps", "pipelined"}) {
    auto c = checked(nodes_scenario(2) + "simulation: {collectives: " + name + "}\n");
    EXPECT_EQ(core::to_string(c.scenario.simulation.collectives), name);
  }
}

// `hgsim run --collectives G` plays what `simulation: {collectives: G}` plays: the same
// iteration and the same activity count (a pipelined ring is a few activities where steps
// are 2n(n - 1)), on the inline example (4 replicas: data-parallel rings at full fidelity).
TEST(SimPipelinedCollectives, TheCliFlagPlaysWhatTheScenarioKeyPlays) {
  const std::string example =
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/examples/inline-model.yaml";
  std::ifstream in(example);
  std::stringstream text;
  text << in.rdbuf();
  const auto dir = std::filesystem::temp_directory_path() / "hgsim_test_cli_collectives";
  std::filesystem::create_directories(dir);
  auto with_key = [&](const std::string& g) {
    std::string yaml = text.str();
    const std::string key = "strategy:";
    yaml.insert(yaml.find("\n" + key) + 1, "simulation: {collectives: " + g + "}\n");
    const auto path = (dir / (g + ".yaml")).string();
    std::ofstream(path) << yaml;
    return path;
  };
  auto run = [](const std::string& scenario, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"hgsim", "run", scenario, "--json", "--fidelity", "full"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int status = apps::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
    EXPECT_EQ(status, 0) << out.str() << err.str();
    return status == 0 ? Json::parse(out.str()) : Json();
  };
  const Json steps = run(example, {"--collectives", "steps"});
  const Json flag = run(example, {"--collectives", "pipelined"});
  const Json key = run(with_key("pipelined"), {});
  ASSERT_TRUE(steps.is_object() && flag.is_object() && key.is_object());
  EXPECT_EQ(flag.at("iteration_time_s"), key.at("iteration_time_s"));
  EXPECT_EQ(flag.at("simulator").at("activities"), key.at("simulator").at("activities"));
  EXPECT_LT(flag.at("simulator").at("activities").get<double>(),
            steps.at("simulator").at("activities").get<double>());
}

}  // namespace
}  // namespace hgsim
