// The TCP window on multi-hop WAN routes: a flow's cap is its whole route's (the smallest
// window along it over twice the route's one-way latency), and the results' per-link cap and
// window advice describe the routes the plan's flows took, not the shortest route crossing
// the link. Closed form: window / (2 x route latency) per flow.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/gpu_catalog.hpp"
#include "planner/cost_model.hpp"
#include "sim/engine.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"
#include "sim/resolved_plan.hpp"
#include "sim/simulate.hpp"
#include "sim_helpers.hpp"

using namespace hgsim;
using hgsim::testing::checked;
using hgsim::testing::FixedTimes;
using hgsim::testing::simulate_plan;

namespace {

// Three clusters, a-b 10 ms, b-c 10 ms, a-c 50 ms: least latency routes a -> c through b.
// Stages only in a and c, so every WAN flow takes a -> b -> c or back.
std::string triangle(const std::string& window_ab, const std::string& window_bc) {
  auto window = [](const std::string& w) { return w.empty() ? "" : ", tcp_window: " + w; };
  return std::string("name: tri\n") + hgsim::testing::kTinyModel +
         "training: {global_batch: 8, seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: a, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 1, nvlink: "
         "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
         "  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
         "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 3us}}\n"
         "  - {name: c, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
         "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 5us}}\n"
         "wan:\n"
         "  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms" +
         window(window_ab) +
         "}\n"
         "  - {between: [b, c], bandwidth: 20Gbps, latency: 10ms" +
         window(window_bc) +
         "}\n"
         "  - {between: [c, a], bandwidth: 40Gbps, latency: 50ms}\n"
         "strategy:\n  schedule: 1f1b\n  pipelines:\n    - micro_batches: 8\n      stages:\n"
         "        - {cluster: a, layers: 3}\n"
         "        - {cluster: c, layers: 2}\n"
         "        - {cluster: a, layers: 3}\n";
}

constexpr double kMiB = 1024.0 * 1024;
// a -> c: both WAN hops and the NICs at either end (a 2 us, c 5 us).
constexpr double kRouteLatencyAC = 20e-3 + 2e-6 + 5e-6;

const core::Json& link_named(const core::Json& result, const std::string& name) {
  for (const auto& l : result["links"])
    if (l["name"] == name) return l;
  throw std::runtime_error("no link " + name);
}

}  // namespace

TEST(WanTcp, ARoutesFlowCapIsItsSmallestWindowOverItsWholeRoundTrip) {
  auto c = checked(triangle("", "16MiB"));
  const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
  core::Diagnostics diags;
  const sim::Platform p =
      sim::build_platform(c.scenario, {gpu, gpu, gpu}, {{0, 0, 1}, {1, 0, 1}, {2, 0, 1}}, diags);
  ASSERT_FALSE(diags.has_errors()) << diags.format();
  const sim::WanRouteTcp& ac = p.wan_tcp[0][2];
  // The default 4 MiB of a-b is the smaller window; b-c's 16 MiB does not help.
  EXPECT_EQ(ac.window_bytes, 4 * kMiB);
  EXPECT_NEAR(ac.round_trip_s, 2 * kRouteLatencyAC, 1e-15);
  EXPECT_NEAR(ac.flow_cap(), 4 * kMiB / (2 * kRouteLatencyAC), 1e-6);
  EXPECT_EQ(ac.scenario_wan, (std::vector<int>{0, 1}));
  // The simulator caps a device pair's flows with the same figure.
  EXPECT_DOUBLE_EQ(p.flow_cap(0, 2), ac.flow_cap());
  EXPECT_DOUBLE_EQ(p.links[ac.cap_link].bytes_per_s, ac.flow_cap());
  EXPECT_NEAR(p.route_latency(0, 2), kRouteLatencyAC, 1e-15);
}

TEST(WanTcp, PerLinkCapAndWindowAdviceComeFromTheRoutesTheFlowsTook) {
  auto c = checked(triangle("", ""));
  const FixedTimes compute(1e-3);
  const core::Json r = simulate_plan(c, compute);
  // wan:a->b carried only a -> c flows: its cap is that route's, not the 10 ms a -> b route's
  // (4 MiB / (2 x 10.005 ms), twice as fast, which no flow of the plan had).
  const core::Json& ab = link_named(r, "wan:a->b");
  ASSERT_GT(ab["bytes"].get<double>(), 0);
  EXPECT_NEAR(ab["flow_cap_bytes_per_s"].get<double>(), 4 * kMiB / (2 * kRouteLatencyAC), 1e-3);
  const core::Json& bc = link_named(r, "wan:b->c");
  EXPECT_NEAR(bc["flow_cap_bytes_per_s"].get<double>(), 4 * kMiB / (2 * kRouteLatencyAC), 1e-3);
  // The advice names both links of the route (the smaller window of the two caps a flow).
  std::string advice;
  for (const auto& w : r["warnings"])
    if (w.get<std::string>().find("WAN link wan:b->c ") == 0) advice = w.get<std::string>();
  ASSERT_FALSE(advice.empty()) << r["warnings"].dump();
  EXPECT_NE(advice.find("on route a->c"), std::string::npos) << advice;
  const auto at = advice.find("wan[0].tcp_window and wan[1].tcp_window: ");
  ASSERT_NE(at, std::string::npos) << advice;
  const auto from = at + std::string("wan[0].tcp_window and wan[1].tcp_window: ").size();
  const std::string window = advice.substr(from, advice.find(' ', from) - from);
  // Following the advice fills the link: no warning for it, and its flows together carry at
  // least its bandwidth.
  auto fixed = checked(triangle(window, window));
  const core::Json after = simulate_plan(fixed, compute);
  for (const auto& w : after["warnings"])
    EXPECT_NE(w.get<std::string>().find("WAN link wan:b->c "), 0u) << w;
  const core::Json& bc_after = link_named(after, "wan:b->c");
  EXPECT_GE(bc_after["max_flows"].get<int>() * bc_after["flow_cap_bytes_per_s"].get<double>(),
            bc_after["bytes_per_s"].get<double>());
  // The cap is the closed form with the advised window.
  const double advised = fixed.scenario.wan[0].tcp_window->value();
  EXPECT_NEAR(bc_after["flow_cap_bytes_per_s"].get<double>(), advised / (2 * kRouteLatencyAC),
              1e-3);
}

// ---- a transfer of many flows ----------------------------------------------------------------

namespace {

// Two clusters of `replicas` one-GPU nodes (fast NICs), 100 Gbit/s and 15 ms apart, with the
// default 4 MiB window: one flow carries 4 MiB / 30.004 ms = 1.1 Gbit/s, so 80 flows carry
// 89.5 Gbit/s and do not fill the link (64 flows would carry 71.6 Gbit/s). A pipeline of
// `replicas` replicas with a stage in each cluster: one activation transfer per replica.
std::string many_replicas(int replicas) {
  const std::string cluster = ", gpu: A100-80GB-SXM, nodes: " + std::to_string(replicas) +
                              ", gpus_per_node: 1, nvlink: {bandwidth: 300GB/s, latency: 1us},"
                              " nic: {bandwidth: 400Gbps, latency: 1us}}\n";
  return std::string("name: many\n") + hgsim::testing::kTinyModel +
         "training: {global_batch: " + std::to_string(replicas) +
         ", seq_len: 128, precision: bf16}\n"
         "clusters:\n  - {name: a" +
         cluster + "  - {name: b" + cluster +
         "wan:\n  - {between: [a, b], bandwidth: 100Gbps, latency: 15ms}\n"
         "strategy:\n  pipelines:\n    - replicas: " +
         std::to_string(replicas) +
         "\n      micro_batches: 1\n      stages:\n"
         "        - {cluster: a, layers: 4}\n        - {cluster: b, layers: 4}\n";
}

// `flows` transfers of `bytes` each, from cluster a's GPU i to cluster b's GPU i (full
// fidelity), or one of flows x bytes standing for them between two folded devices of
// `flows` GPUs each (folded fidelity), all at once: the makespan.
double many_flows(const core::Scenario& s, int flows, double bytes, bool folded) {
  return sim::run_isolated([&] {
    std::vector<sim::DeviceRequest> requests;
    if (folded) {
      requests = {{0, 0, flows}, {1, 0, flows}};
    } else {
      for (int c = 0; c < 2; ++c)
        for (int f = 0; f < flows; ++f) requests.push_back({c, f, 1});
    }
    core::Diagnostics diags;
    const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
    const sim::Platform p = sim::build_platform(s, {gpu, gpu}, requests, diags);
    EXPECT_FALSE(diags.has_errors()) << diags.format();
    sim::Graph g;
    const int label = g.label("activations");
    if (folded)
      g.transfer(0, 1, flows * bytes, sim::Work::pp_comm, label, -1, flows);
    else
      for (int f = 0; f < flows; ++f) g.transfer(f, flows + f, bytes, sim::Work::pp_comm, label);
    g.finish();
    return core::Json(sim::execute(g, p).makespan);
  });
}

}  // namespace

// Each flow of a transfer has its own window at every fidelity and in the analytic model:
// a folded transfer of 80 flows takes what 80 transfers take at full fidelity, and what the
// planner's closed form gives, latency + 80 S / min(bandwidth, 80 x window / RTT).
TEST(WanTcp, ATransferOfManyFlowsGetsAWindowPerFlowAtEveryFidelityAndInTheModel) {
  const int replicas = 80;
  auto c = checked(many_replicas(replicas));
  const double latency = 15e-3 + 2e-6;  // the WAN and both NICs
  const double window_cap = 4 * kMiB / (2 * latency);
  const double wan = 100e9 / 8;
  ASSERT_LT(replicas * window_cap, wan);  // the flows' windows, not the link, bound them

  const double S = 8e6;
  const double closed_form = latency + replicas * S / std::min(wan, replicas * window_cap);
  EXPECT_NEAR(many_flows(c.scenario, replicas, S, false), closed_form, 1e-9 * closed_form);
  EXPECT_NEAR(many_flows(c.scenario, replicas, S, true), closed_form, 1e-9 * closed_form);

  // The analytic model's stage transfer: every replica's activations at once.
  const FixedTimes compute(1e-3);
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  core::Diagnostics diags;
  const auto r =
      sim::resolve_plan(c.scenario, c.model, c.compression, c.scenario.strategy.plan, "", diags);
  ASSERT_TRUE(r) << diags.format();
  const double boundary = r->boundary_bytes();
  const double modelled = latency + replicas * boundary / std::min(wan, replicas * window_cap);
  const auto estimate = planner::estimate(ctx, c.scenario.strategy.plan);
  ASSERT_EQ(estimate.pipelines.size(), 1u);
  EXPECT_NEAR(estimate.pipelines[0].stages[0].send_s, modelled, 1e-9 * modelled);
}
