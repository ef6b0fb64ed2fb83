// A WAN link of latency 0 on a route whose NICs have latency: flows must still take at least
// their bytes over the WAN's bandwidth (B1). SimGrid 3.32's lazy update left the WAN out of the
// solve when two flows leaving one NIC ended their latency at the same instant; sim/engine.cpp's
// LatencyEndRepair puts it back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/gpu_catalog.hpp"
#include "sim/engine.hpp"
#include "sim/platform.hpp"
#include "sim/simulate.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;

// From b's first GPU, at once: `wan_flows` flows of `bytes` to a's GPUs and one to b's other
// GPU (its route latency, NIC + NIC, is the WAN flows' when the WAN has none), in the order
// given. Returns when each WAN flow ended.
std::vector<double> leave_one_nic(const core::Scenario& s, double bytes, bool wan_first) {
  const Json ends = sim::run_isolated([&] {
    // Devices 0, 1: cluster a's nodes 0, 1; devices 2, 3: cluster b's.
    std::vector<sim::DeviceRequest> requests{{0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}};
    core::Diagnostics diags;
    const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
    const sim::Platform p = sim::build_platform(s, {gpu, gpu}, requests, diags);
    sim::Graph g;
    std::vector<sim::NodeId> wan;
    if (!wan_first) g.transfer(2, 3, bytes, sim::Work::pp_comm, -1);
    wan.push_back(g.transfer(2, 0, bytes, sim::Work::pp_comm, -1));
    wan.push_back(g.transfer(2, 1, bytes, sim::Work::pp_comm, -1));
    if (wan_first) g.transfer(2, 3, bytes, sim::Work::pp_comm, -1);
    g.finish();
    const sim::NodeTimes t = sim::execute(g, p);
    Json out = Json::array();
    for (sim::NodeId id : wan) out.push_back(t.end[id]);
    return out;
  });
  return ends.get<std::vector<double>>();
}

TEST(SimZeroLatency, AWanOfNoLatencyStillCarriesItsBandwidthOnly) {
  // Two flows of S bytes share the WAN's W bytes/s: each ends at 2 S / W plus the route's
  // latency (2 us), whatever else leaves their NIC at the same instant, and whether the WAN's
  // latency is 0 or 1 ns.
  const double W = 10e6 / 8;  // 10 Mbit/s
  const double S = 1.5 * 1024 * 1024;
  for (const char* latency : {"0s", "1ns"}) {
    auto c = testing::checked(testing::two_cluster_scenario(
        "bandwidth: 10Mbps, latency: " + std::string(latency) + ", tcp_window: 1GB"));
    for (bool wan_first : {false, true}) {
      for (double end : leave_one_nic(c.scenario, S, wan_first)) {
        EXPECT_GE(end, 2 * S / W) << "WAN latency " << latency << ", WAN flows first " << wan_first;
        EXPECT_NEAR(end, 2 * S / W + 2e-6, 1e-6 * end)
            << "WAN latency " << latency << ", WAN flows first " << wan_first;
      }
    }
  }
}

}  // namespace
}  // namespace hgsim
