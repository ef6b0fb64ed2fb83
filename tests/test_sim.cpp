// The simulator against closed forms: pipeline schedules, collectives, link sharing,
// bandwidth traces, a WAN-bound pipeline; folded against full fidelity; determinism; the
// platform XML loaded back into SimGrid; bad plans and plans that do not fit.
#include <gtest/gtest.h>

#include <simgrid/s4u.hpp>

#include <unistd.h>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <stdexcept>

#include "apps/commands.hpp"
#include "apps/validate.hpp"
#include "compress/codec.hpp"
#include "compress/codec_cost.hpp"
#include "core/document.hpp"
#include "kernels/gpu_catalog.hpp"
#include "models/schedule.hpp"
#include "sim/collectives.hpp"
#include "sim/engine.hpp"
#include "sim/iterations.hpp"
#include "sim/simulate.hpp"
#include "sim/workload.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

namespace fs = std::filesystem;
using core::Json;

using testing::checked;
using testing::FixedTimes;

Json run(const apps::CheckedScenario& c, const kernels::ComputeModel& compute,
         core::Fidelity fidelity = core::Fidelity::full) {
  return testing::simulate_plan(c, compute, fidelity);
}

using testing::kTinyModel;
using testing::nodes_scenario;
using testing::pipeline_scenario;
using testing::two_cluster_scenario;

// ---- pipeline schedules -------------------------------------------------------------------

TEST(SimPipeline, OneFOneBAndGPipeFollowTheClosedForm) {
  const double tf = 1e-3;  // per layer
  const FixedTimes compute(tf);
  for (const char* schedule : {"1f1b", "gpipe"}) {
    for (auto [p, m] : {std::pair{4, 8}, std::pair{2, 5}, std::pair{8, 3}}) {
      auto c = checked(pipeline_scenario(schedule, p, m));
      const double stage_f = 8 / p * tf, stage_b = 2 * stage_f;
      const double expected = (m + p - 1) * (stage_f + stage_b);  // (m + p - 1)(t_f + t_b)
      const double got = run(c, compute)["iteration_time_s"];
      EXPECT_NEAR(got, expected, 1e-6 * expected) << schedule << " p=" << p << " m=" << m;
    }
  }
}

TEST(SimPipeline, InterleavedShrinksTheBubbleByTheChunkCount) {
  const double tf = 1e-3;
  const FixedTimes compute(tf);
  const int p = 4, m = 8, v = 2;
  auto c = checked(pipeline_scenario("interleaved", p, m, v));
  const double stage = 8 / p * 3 * tf;  // forward + backward of all chunks
  // Narayanan et al. 2021: the bubble shrinks from (p - 1) to (p - 1) / v op-times.
  const double expected = (m + double(p - 1) / v) * stage;
  const double got = run(c, compute)["iteration_time_s"];
  EXPECT_NEAR(got, expected, 1e-6 * expected);
}

TEST(SimPipeline, SchedulesRunEveryOpOnce) {
  for (int p : {1, 2, 4})
    for (int stage = 0; stage < p; ++stage)
      for (int v : {1, 2}) {
        const int m = 2 * p;
        auto ops = v == 1 ? models::one_f_one_b(p, stage, m) : models::interleaved(p, stage, m, v);
        ASSERT_EQ(ops.size(), std::size_t(2 * m * v));
        std::set<std::tuple<bool, int, int>> seen;
        for (const auto& op : ops) {
          EXPECT_TRUE(seen.insert({op.forward, op.micro_batch, op.chunk}).second);
          if (!op.forward) {
            EXPECT_TRUE(seen.count({true, op.micro_batch, op.chunk}));
          }
        }
      }
}

// ---- collectives ----------------------------------------------------------------------------

// A WAN transfer whose values are not a whole number of rows of the hidden size is coded as
// rows with the last one padded, as the live runner codes it (runtime/tests/test_live.py,
// the same 10 rows of 32 and 7 values more): PowerSGD compresses it, it does not fall back
// to the raw tensor.
TEST(SimCodecs, PowerSgdCodesAnOddSizedChunkAsPaddedRows) {
  compress::CodecSpec spec = compress::default_spec(compress::CodecKind::powersgd);
  spec.rank = 2;
  const sim::WanCodec codec{spec, core::Precision::fp32, 32};
  const double elements = 10 * 32 + 7;
  const auto& gpu = *kernels::find_gpu("A100-80GB-SXM");
  const auto coded = sim::code_wan_transfer(codec, elements * 4, 1, gpu, gpu);
  EXPECT_EQ(compress::wan_codec_shape(elements, 32), (std::vector<std::int64_t>{11, 32}));
  const std::vector<std::int64_t> padded{11, 32};
  EXPECT_EQ(coded.wire_bytes, double(compress::encoded_bytes(spec, padded, compress::DType::fp32)));
  // P (11 x 2) and Q (32 x 2) in fp32 and the header: far less than the raw 1308 bytes.
  EXPECT_EQ(coded.wire_bytes, double(compress::kHeaderBytes + (11 + 32) * 2 * 4));
  EXPECT_LT(coded.wire_bytes, elements * 4);
}

// run_isolated_all gives a slot to the next body as soon as any child ends: with 2 slots,
// body 0 waits for a file that only the last of five short bodies writes. Were slots freed
// in start order, body 5 could not start before body 0 ended, and body 0 would give up
// after 20 s and fail.
TEST(SimIsolation, AFinishedChildsSlotGoesToTheNextBodyWhileALongerOneRuns) {
  const std::filesystem::path flag =
      std::filesystem::temp_directory_path() / ("hgsim-slot-" + std::to_string(::getpid()));
  std::filesystem::remove(flag);
  std::vector<std::function<Json()>> bodies;
  bodies.push_back([&flag]() -> Json {
    for (int waited = 0; !std::filesystem::exists(flag); ++waited) {
      if (waited > 2000) throw std::runtime_error("body 5 never ran beside body 0");
      ::usleep(10000);
    }
    return Json("waited");
  });
  for (int i = 1; i <= 5; ++i)
    bodies.push_back([i, &flag]() -> Json {
      if (i == 5) std::ofstream(flag) << "here";
      return Json(i);
    });
  const auto out = sim::run_isolated_all(bodies, 2);
  std::filesystem::remove(flag);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(out[0].failure.empty()) << out[0].failure;
  EXPECT_EQ(out[0].value, Json("waited"));
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(out[i].value, Json(i));
}

// Past a StopRule's deadline, once enough bodies have succeeded, the children still running
// are killed and the bodies not started never start; each is marked stopped with the rule's
// reason. Body 1 would sleep a minute: the test ending well before shows it was killed.
TEST(SimIsolation, PastTheDeadlineTheChildrenStillRunningAreStopped) {
  std::vector<std::function<Json()>> bodies;
  bodies.push_back([]() -> Json { return Json("quick"); });
  bodies.push_back([]() -> Json {
    ::sleep(60);
    return Json("slept");
  });
  bodies.push_back([]() -> Json { return Json("never started"); });
  sim::StopRule stop;
  stop.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  stop.min_succeeded = 1;
  stop.why = "out of time";
  const auto began = std::chrono::steady_clock::now();
  // Two slots: bodies 0 and 1 start; body 0's slot goes to body 2 only if it starts before
  // the deadline, so body 2 is either done or stopped, never both.
  const auto out = sim::run_isolated_all(bodies, 2, stop);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].value, Json("quick"));
  EXPECT_FALSE(out[0].stopped);
  EXPECT_TRUE(out[1].stopped);
  EXPECT_EQ(out[1].failure, "out of time");
  EXPECT_TRUE(out[2].stopped || out[2].value == Json("never started"));
  EXPECT_LT(took, 30.0);
}

// However early the deadline, `min_succeeded` bodies run to their end (the planner's one
// verified plan); with none required, a deadline already past starts nothing.
TEST(SimIsolation, TheBodiesAStopRuleRequiresRunToTheirEnd) {
  std::vector<std::function<Json()>> bodies;
  bodies.push_back([]() -> Json {
    ::usleep(400000);
    return Json("first");
  });
  bodies.push_back([]() -> Json { return Json("second"); });
  sim::StopRule stop;
  stop.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  stop.min_succeeded = 1;
  auto out = sim::run_isolated_all(bodies, 1, stop);
  EXPECT_EQ(out[0].value, Json("first"));
  EXPECT_FALSE(out[0].stopped);
  EXPECT_TRUE(out[1].stopped);
  stop.min_succeeded = 0;
  out = sim::run_isolated_all(bodies, 2, stop);
  EXPECT_TRUE(out[0].stopped && out[1].stopped);
  EXPECT_TRUE(out[0].value.is_null() && out[1].value.is_null());
}

// run_isolated_all: every body in its own process, results in the bodies' order whatever
// order the children finish in, a failing body reported as its own failure only.
TEST(SimIsolation, ChildrenSideBySideReturnInOrderAndFailAlone) {
  std::vector<std::function<Json()>> bodies;
  for (int i = 0; i < 7; ++i)
    bodies.push_back([i]() -> Json {
      // The later bodies finish first; body 3 throws; each answers with its own pid.
      ::usleep(static_cast<useconds_t>((7 - i) * 20000));
      if (i == 3) throw std::runtime_error("body three fails");
      return Json{{"i", i}, {"pid", static_cast<long>(::getpid())}};
    });
  for (int jobs : {1, 3, 16}) {
    const auto out = sim::run_isolated_all(bodies, jobs);
    ASSERT_EQ(out.size(), bodies.size());
    std::set<long> pids;
    for (int i = 0; i < 7; ++i) {
      if (i == 3) {
        EXPECT_NE(out[i].failure.find("body three fails"), std::string::npos) << out[i].failure;
        continue;
      }
      EXPECT_TRUE(out[i].failure.empty()) << out[i].failure;
      EXPECT_EQ(out[i].value["i"].get<int>(), i) << "jobs " << jobs;
      pids.insert(out[i].value["pid"].get<long>());
    }
    EXPECT_EQ(pids.size(), 6u) << "each body runs in a process of its own";
    EXPECT_EQ(pids.count(static_cast<long>(::getpid())), 0u);
  }
}

sim::Platform one_gpu_per_node(const core::Scenario& s, int n) {
  std::vector<sim::DeviceRequest> requests;
  for (int i = 0; i < n; ++i) requests.push_back({0, i, 1});
  core::Diagnostics diags;
  return sim::build_platform(s, {kernels::find_gpu(s.clusters[0].gpu)}, requests, diags);
}

using Lowering = std::vector<sim::NodeId> (*)(const sim::Sender&, const sim::Collective&);

double simulated_collective(const core::Scenario& s, int n, double bytes, Lowering lowering) {
  return sim::run_isolated([&] {
    const sim::Platform platform = one_gpu_per_node(s, n);
    sim::Graph g;
    sim::Sender sender{g, platform, nullptr, nullptr, sim::Work::dp_comm, -1};
    sim::Collective c{{}, {}, bytes, "test", 1};
    for (int i = 0; i < n; ++i) {
      c.members.push_back(i);
      c.ready.push_back(g.join());
    }
    lowering(sender, c);
    g.finish();
    return Json(sim::execute(g, platform).makespan);
  });
}

// Two computations on one device share its speed while both run, as SimGrid shares a host
// between its executions: A (1 s of work) starts at 0, B (1 s) at 0.5 after a delay. A runs
// alone to 0.5 (half done), both at half speed until A's other half is done at 1.5 (B half
// done), B alone to 2.0. C (0.25 s) after B runs alone again: 2.25. D (1 s) on another device
// at 0 is untouched: 1.0. Worked out here by hand, not by the engine's rule.
TEST(SimEngine, ComputationsOnOneDeviceShareItOnlyWhileTheyOverlap) {
  auto c = checked(nodes_scenario(2));
  const Json times = sim::run_isolated([&] {
    const sim::Platform platform = one_gpu_per_node(c.scenario, 2);
    sim::Graph g;
    const auto a = g.compute(0, 1.0, sim::Work::forward, -1);
    const auto wait = g.delay(0, 0.5, sim::Work::pp_comm, -1);
    const auto b = g.compute(0, 1.0, sim::Work::forward, -1);
    g.edge(wait, b);
    const auto cc = g.compute(0, 0.25, sim::Work::forward, -1);
    g.edge(b, cc);
    const auto d = g.compute(1, 1.0, sim::Work::forward, -1);
    g.finish();
    const sim::NodeTimes t = sim::execute(g, platform);
    return Json{t.end[a], t.end[b], t.end[cc], t.end[d]};
  });
  EXPECT_NEAR(times[0].get<double>(), 1.5, 1e-9);
  EXPECT_NEAR(times[1].get<double>(), 2.0, 1e-9);
  EXPECT_NEAR(times[2].get<double>(), 2.25, 1e-9);
  EXPECT_NEAR(times[3].get<double>(), 1.0, 1e-9);
}

// The busy time and the gaps the results report, for intervals in order, nearly in order
// (a few swapped, as the results read them) and shuffled, against a count of the unit cells
// the intervals cover (integer ends, so the sums are exact).
TEST(SimResults, UnionAndGapsOfIntervalsInAnyOrder) {
  std::mt19937 rng(7);
  std::vector<sim::Interval> sorted;
  for (int i = 0; i < 3000; ++i) {
    const int a = static_cast<int>(rng() % 20000);
    sorted.emplace_back(a, a + 1 + static_cast<int>(rng() % 12));
  }
  std::sort(sorted.begin(), sorted.end());
  const int lo = 100, hi = 19000;
  std::vector<char> covered(20100, 0);
  for (const auto& [a, b] : sorted)
    for (int t = static_cast<int>(a); t < static_cast<int>(b); ++t) covered[t] = 1;
  double busy = 0;
  std::vector<sim::Interval> holes;
  for (int t = 0; t < static_cast<int>(covered.size()); ++t) {
    busy += covered[t];
    if (t >= lo && t < hi && !covered[t]) {
      if (!holes.empty() && holes.back().second == t)
        holes.back().second = t + 1;
      else
        holes.emplace_back(t, t + 1);
    }
  }
  std::vector<sim::Interval> nearly = sorted;
  for (int k = 0; k < 40; ++k) {
    const std::size_t i = rng() % (nearly.size() - 1);
    std::swap(nearly[i], nearly[i + 1]);
  }
  std::vector<sim::Interval> shuffled = sorted;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (const auto* order : {&sorted, &nearly, &shuffled}) {
    std::vector<sim::Interval> v = *order;
    EXPECT_EQ(sim::union_length(v), busy);
    EXPECT_EQ(sim::gaps(*order, lo, hi), holes);
  }
}

TEST(SimCollectives, LoweredCollectivesMatchTheirClosedForms) {
  auto c = checked(nodes_scenario(8));
  const double bandwidth = 100e9 / 8;
  const sim::Hop2 hop{bandwidth, 2 * 5e-6};  // NIC out and NIC in
  const double S = 1e9;
  struct Case {
    const char* name;
    Lowering lowering;
    double (*closed)(int, double, sim::Hop2);
    std::vector<int> sizes;
  } cases[] = {
      {"ring all-reduce", sim::ring_all_reduce, sim::ring_all_reduce_time, {2, 3, 5, 8}},
      {"ring reduce-scatter", sim::ring_reduce_scatter, sim::ring_reduce_scatter_time, {2, 5, 8}},
      {"ring all-gather", sim::ring_all_gather, sim::ring_all_gather_time, {3, 8}},
      {"tree broadcast", sim::tree_broadcast, sim::tree_broadcast_time, {2, 4, 5, 8}},
      {"tree all-reduce", sim::tree_all_reduce, sim::tree_all_reduce_time, {2, 4, 8}},
      {"halving-doubling",
       sim::halving_doubling_all_reduce,
       sim::halving_doubling_all_reduce_time,
       {2, 4, 8}},
  };
  for (const auto& k : cases)
    for (int n : k.sizes) {
      const double expected = k.closed(n, S, hop);
      const double got = simulated_collective(c.scenario, n, S, k.lowering);
      EXPECT_NEAR(got, expected, 1e-9 * expected) << k.name << " n=" << n;
    }
}

// A ring all-reduce of `bytes` over the devices of `requests` (one member each, in order),
// the last member ready `late` seconds after the others: when each member is done
// ("done", in member order) and when each send of the late member ends ("sends", in order).
Json ring_with_a_late_member(const core::Scenario& s,
                             const std::vector<const kernels::GpuSpec*>& gpus,
                             const std::vector<sim::DeviceRequest>& requests, double bytes,
                             double late) {
  return sim::run_isolated([&] {
    core::Diagnostics diags;
    const sim::Platform platform = sim::build_platform(s, gpus, requests, diags);
    const int n = static_cast<int>(requests.size());
    sim::Graph g;
    sim::Sender sender{g, platform, nullptr, nullptr, sim::Work::dp_comm, -1};
    sim::Collective ring{{}, {}, bytes, "test", 1};
    for (int i = 0; i < n; ++i) {
      ring.members.push_back(i);
      ring.ready.push_back(i == n - 1 ? g.delay(i, late, sim::Work::forward, -1) : g.join());
    }
    const auto finished = sim::ring_all_reduce(sender, ring);
    g.finish();
    const sim::NodeTimes t = sim::execute(g, platform);
    Json done = Json::array();
    for (sim::NodeId f : finished) done.push_back(t.end[f]);
    std::vector<double> sends;
    for (sim::NodeId id = 0; id < g.size(); ++id)
      if (g.node(id).op == sim::Op::transfer && g.node(id).device == n - 1)
        sends.push_back(t.end[id]);
    std::sort(sends.begin(), sends.end());
    return Json{{"done", done}, {"sends", sends}};
  });
}

// A ring all-reduce whose last member's data is ready T late: the chunk that member starts
// with passes 2 (n - 1) hops after T, one after another, and every member's sends go in
// order, so every member is done at T + 2 (n - 1) (S / n / B + alpha), the ring's time as if
// all had started at T. (The members ready early cannot finish without the late member's
// contribution.)
TEST(SimCollectives, ALateMemberHoldsTheRingUpAtEveryStep) {
  auto c = checked(nodes_scenario(8));
  const double B = 100e9 / 8, a = 2 * 5e-6, S = 1e9, T = 1.0;
  for (int n : {2, 3, 5}) {
    std::vector<sim::DeviceRequest> requests;
    for (int i = 0; i < n; ++i) requests.push_back({0, i, 1});
    const Json done = ring_with_a_late_member(
        c.scenario, {kernels::find_gpu(c.scenario.clusters[0].gpu)}, requests, S, T)["done"];
    const double expected = T + 2 * (n - 1) * (S / n / B + a);
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(done[i].get<double>(), expected, 1e-9 * expected) << "n=" << n << " member " << i;
  }
}

// The same on a ring of mixed hops, 4 members on 2 nodes (m0 m1 | m2 m3: NVLink, NIC,
// NVLink, NIC), member 3 ready T late. By then its predecessor has sent it everything that
// does not pass through it: its reduce-scatter steps 0-2 and its first all-gather step can
// all leave at T. They leave one after another at its NIC's full rate, as NCCL's FIFO sends
// them, and arrive at T + k c / B + a for k = 1..4 (c the chunk, B the NIC, a its two
// latencies); sent at once, they would share the NIC and all arrive at T + 4 c / B + a,
// holding the ring back a whole backlog at its first step.
TEST(SimCollectives, ALateMembersBacklogLeavesOneSendAfterAnotherOnAMixedRing) {
  std::string yaml = nodes_scenario(2);
  yaml.replace(yaml.find("gpus_per_node: 1"), 16, "gpus_per_node: 2");
  auto c = checked(yaml);
  const double B = 100e9 / 8, a = 2 * 5e-6, S = 1e9, T = 1.0, chunk = S / 4;
  const kernels::GpuSpec* gpu = kernels::find_gpu(c.scenario.clusters[0].gpu);
  const Json sends = ring_with_a_late_member(
      c.scenario, {gpu}, {{0, 0, 1}, {0, 1, 1}, {0, 2, 1}, {0, 3, 1}}, S, T)["sends"];
  ASSERT_EQ(sends.size(), 6u);  // 2 (n - 1) steps
  for (int k = 1; k <= 4; ++k) {
    const double expected = T + k * chunk / B + a;
    EXPECT_NEAR(sends[k - 1].get<double>(), expected, 1e-9 * expected) << "send " << k;
  }
}

TEST(SimCollectives, RingAllReduceClosedFormByHand) {
  // 2 (n - 1) / n * S / B + 2 (n - 1) alpha with n = 4, S = 1 GB, B = 12.5 GB/s, alpha = 10 us.
  EXPECT_NEAR(sim::ring_all_reduce_time(4, 1e9, {12.5e9, 10e-6}), 0.12 + 60e-6, 1e-15);
  EXPECT_EQ(sim::ring_all_reduce_time(1, 1e9, {12.5e9, 10e-6}), 0);
}

TEST(SimCollectives, TreeAndHalvingDoublingMatchTextbookFormulasWrittenHere) {
  // The lowerings against the textbook forms, written out here rather than taken from
  // sim/collectives.hpp: a binomial tree reduce then broadcast moves the whole buffer in each
  // of 2 ceil(log2 n) rounds (Thakur, Rabenseifner and Gropp 2005, sec. 4); Rabenseifner's
  // recursive halving then doubling moves S/2, S/4, ... S/n out and back in log2 n rounds
  // each, 2 (n - 1)/n S in all.
  auto c = checked(nodes_scenario(8));
  const double B = 100e9 / 8, a = 2 * 5e-6, S = 1e9;
  for (int n : {2, 4, 8}) {
    double rounds = 0;
    for (int reach = 1; reach < n; reach *= 2) ++rounds;  // ceil(log2 n)
    const double tree = 2 * rounds * (S / B + a);
    EXPECT_NEAR(simulated_collective(c.scenario, n, S, sim::tree_all_reduce), tree, 1e-9 * tree)
        << "tree n=" << n;
    double halving = 0;
    for (double piece = S / 2; piece >= S / n * (1 - 1e-12); piece /= 2) halving += piece / B + a;
    const double hd = 2 * halving;
    EXPECT_NEAR(simulated_collective(c.scenario, n, S, sim::halving_doubling_all_reduce), hd,
                1e-9 * hd)
        << "halving-doubling n=" << n;
  }
}

// ---- links ----------------------------------------------------------------------------------

// Transfers of `bytes` from cluster a's GPU i to cluster b's GPU i, all starting at 0.
double wan_transfers(const core::Scenario& s, int flows, double bytes) {
  return sim::run_isolated([&] {
    std::vector<sim::DeviceRequest> requests{{0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}};
    core::Diagnostics diags;
    const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
    const sim::Platform p = sim::build_platform(s, {gpu, gpu}, requests, diags);
    sim::Graph g;
    for (int f = 0; f < flows; ++f) g.transfer(f, 2 + f, bytes, sim::Work::pp_comm, -1);
    g.finish();
    return Json(sim::execute(g, p).makespan);
  });
}

TEST(SimLinks, TwoFlowsOnOneLinkTakeTwiceAsLong) {
  auto c = checked(two_cluster_scenario("bandwidth: 1Gbps, latency: 1ms, tcp_window: 1GB"));
  const double latency = 1e-3 + 2e-6, W = 1e9 / 8, S = 50e6;
  EXPECT_NEAR(wan_transfers(c.scenario, 1, S), latency + S / W, 1e-9);
  EXPECT_NEAR(wan_transfers(c.scenario, 2, S), latency + 2 * S / W, 1e-9);
}

TEST(SimLinks, TcpWindowCapsOneFlowOnALongFatPipe) {
  // 4 MiB over a 15 ms link: window / RTT = 4 MiB / 30.004 ms, far below 10 Gbit/s.
  auto c = checked(two_cluster_scenario("bandwidth: 10Gbps, latency: 15ms"));
  const double latency = 15e-3 + 2e-6;
  const double cap = 4.0 * 1024 * 1024 / (2 * latency);
  const double S = 100e6;
  EXPECT_NEAR(wan_transfers(c.scenario, 1, S), latency + S / cap, 1e-9);
  // Two flows get a window each: together twice as fast as one.
  EXPECT_NEAR(wan_transfers(c.scenario, 2, S), latency + S / cap, 1e-9);
}

TEST(SimLinks, BandwidthTraceHalvingMidTransferGivesTheIntegral) {
  auto c = checked(two_cluster_scenario("bandwidth: 1Gbps, latency: 1ms, tcp_window: 1GB"));
  // From 0 s 1 Gbit/s, from 1 s 0.5 Gbit/s; the period ends at 1000 s.
  auto& wan = c.scenario.wan[0];
  wan.trace = "inline";
  wan.trace_steps = {{core::Seconds(0), core::BytesPerSecond(1e9 / 8)},
                     {core::Seconds(1), core::BytesPerSecond(0.5e9 / 8)},
                     {core::Seconds(1000), core::BytesPerSecond(1e9 / 8)}};
  const double latency = 1e-3 + 2e-6, W = 1e9 / 8, S = 200e6;
  const double moved_by_1s = W * (1 - latency);
  const double expected = 1 + (S - moved_by_1s) / (W / 2);
  EXPECT_NEAR(wan_transfers(c.scenario, 1, S), expected, 1e-6);
}

// A ring of mixed hops over a WAN link with a bandwidth trace: m0 and m1 in cluster a (the
// NIC between them), m2 in cluster b (the WAN both ways), m2 ready T = 1 s late. Its backlog
// of three sends to m0 leaves one after another at the rate the link has then (W, since
// 0.5 s; W / 4 before): they arrive at T + k c / W + a, k = 1..3. Paced at the trace's first
// step (W / 4), they would arrive 4 c / W apart.
TEST(SimLinks, ARingBacklogIsPacedAtTheRateItsTracedLinkCanReach) {
  auto c = checked(two_cluster_scenario("bandwidth: 1Gbps, latency: 1ms, tcp_window: 1GB"));
  const double W = 1e9 / 8, a = 1e-3 + 2e-6, T = 1.0, chunk = 0.01 * W;
  auto& wan = c.scenario.wan[0];
  wan.trace = "inline";
  wan.trace_steps = {{core::Seconds(0), core::BytesPerSecond(W / 4)},
                     {core::Seconds(0.5), core::BytesPerSecond(W)},
                     {core::Seconds(1000), core::BytesPerSecond(W)}};
  const kernels::GpuSpec* gpu = kernels::find_gpu("A100-80GB-SXM");
  const Json sends = ring_with_a_late_member(
      c.scenario, {gpu, gpu}, {{0, 0, 1}, {0, 1, 1}, {1, 0, 1}}, 3 * chunk, T)["sends"];
  ASSERT_EQ(sends.size(), 4u);  // 2 (n - 1) steps
  for (int k = 1; k <= 3; ++k) {
    const double expected = T + k * chunk / W + a;
    EXPECT_NEAR(sends[k - 1].get<double>(), expected, 1e-9 * expected) << "send " << k;
  }
}

TEST(SimLinks, BandwidthTraceRepeatsWithItsPeriod) {
  // W from 0 s, W/2 from 1 s, W/4 from 1.5 s; the period ends at 2 s and starts again at W.
  // A transfer of W (2.5 - L) bytes moves W (1 - L) + W/4 + W/8 in the first period, W in
  // [2, 3) and the last W/8 at W/2 from 3 s: it ends at 3.25 s. (Four rows: the example
  // four-regions-sweep.yaml crashed SimGrid with "loop conditions are not realizable" when
  // the period was handed over as the wait after the last row.)
  auto c = checked(two_cluster_scenario("bandwidth: 1Gbps, latency: 1ms, tcp_window: 1GB"));
  const double W = 1e9 / 8, L = 1e-3 + 2e-6;
  auto& wan = c.scenario.wan[0];
  wan.trace = "inline";
  wan.trace_steps = {{core::Seconds(0), core::BytesPerSecond(W)},
                     {core::Seconds(1), core::BytesPerSecond(W / 2)},
                     {core::Seconds(1.5), core::BytesPerSecond(W / 4)},
                     {core::Seconds(2), core::BytesPerSecond(W)}};
  EXPECT_NEAR(wan_transfers(c.scenario, 1, W * (2.5 - L)), 3.25, 1e-6);
}

TEST(SimLinks, WanBoundPipelineIsLimitedByBytesOverBandwidth) {
  // GPipe over a slow WAN with next to no compute: the forwards stream m activations over
  // the link one way, then the backwards stream m gradients back: 2 m S / W. Messages as
  // concurrent flows (pipeline_messages: shared), so that no latency is paid per message.
  const int m = 16;
  std::string yaml = two_cluster_scenario("bandwidth: 1Gbps, latency: 10us, tcp_window: 1GB");
  yaml.replace(yaml.find("global_batch: 2"), 15, "global_batch: " + std::to_string(m));
  yaml.replace(yaml.find("micro_batches: 2"), 16, "micro_batches: " + std::to_string(m));
  yaml.replace(yaml.find("strategy:\n"), 10, "strategy:\n  schedule: gpipe\n");
  yaml += "simulation: {pipeline_messages: shared}\n";
  auto c = checked(yaml);
  const FixedTimes compute(1e-7);
  const double S = 128 * 256 * 2;  // one micro-batch's activations: s h bf16
  const double W = 1e9 / 8;
  const Json r = run(c, compute);
  const double T = r["iteration_time_s"];
  EXPECT_GE(T, 2 * m * S / W);
  EXPECT_NEAR(T, 2 * m * S / W, 0.01 * T);
  // int8 on the WAN halves the bytes (plus one scale per block), and the time with them.
  yaml.replace(yaml.find("strategy:"), 0, "compression: {wan_activations: int8}\n");
  auto compressed = checked(yaml);
  const Json rc = run(compressed, compute);
  const auto& codec = rc["compression"]["wan_activations"];
  const double ratio = codec["wan_wire_bytes"].get<double>() / codec["wan_raw_bytes"].get<double>();
  EXPECT_GT(ratio, 0.5);  // one byte per bf16 element, plus the scales and the header
  EXPECT_LT(ratio, 0.6);
  EXPECT_NEAR(rc["iteration_time_s"].get<double>() / T, ratio, 0.03);
}

TEST(SimLinks, ACodecThatExpandsTheWanTrafficIsWarnedAbout) {
  // topk of every element sends each value with its index: k (w + e) bytes for n e, w = 2 bytes
  // of index for 32 768 elements and e = 2 (bf16), so about twice the raw bytes. int8 shrinks
  // them and says nothing.
  std::string yaml = two_cluster_scenario("bandwidth: 1Gbps, latency: 10us, tcp_window: 1GB");
  const FixedTimes compute(1e-7);
  auto warnings_with = [&](const std::string& codec) {
    std::string y = yaml;
    y.replace(y.find("strategy:"), 0, "compression: {wan_activations: " + codec + "}\n");
    const Json r = run(checked(y), compute);
    const auto& c = r["compression"]["wan_activations"];
    return std::tuple{r["warnings"],
                      c["wan_wire_bytes"].get<double>() / c["wan_raw_bytes"].get<double>()};
  };
  const auto [expanding, ratio] = warnings_with("{codec: topk, ratio: 1}");
  EXPECT_GT(ratio, 1.9);
  ASSERT_EQ(expanding.size(), 1u) << expanding.dump();
  const std::string text = expanding[0];
  EXPECT_NE(text.find("compression.wan_activations: topk"), std::string::npos) << text;
  EXPECT_NE(text.find("it expands the traffic"), std::string::npos) << text;
  const auto [shrinking, int8_ratio] = warnings_with("int8");
  EXPECT_LT(int8_ratio, 0.6);
  EXPECT_TRUE(shrinking.empty()) << shrinking.dump();
}

TEST(SimLinks, InOrderPipelineMessagesStreamWhileTheReceiverComputes) {
  // GPipe, 2 stages over a WAN where one micro-batch's activations take tau and a stage's
  // forward f = tau / 8 (backward 2 f). In order (simulation.pipeline_messages: in_order),
  // message k arrives at f + (k+1) tau and stage 1 computes it while k+1 is on the wire; the
  // gradients stream back the same way: T = 2 m tau + 6 f + 2 m L. Shared, concurrent
  // messages split the link, so each arrives later than in order and the iteration is longer
  // (only a little here: a message's share grows as earlier ones finish).
  const int m = 16;
  const double L = 10e-6;
  std::string yaml = two_cluster_scenario("bandwidth: 1Gbps, latency: 10us, tcp_window: 1GB");
  yaml.replace(yaml.find("global_batch: 2"), 15, "global_batch: " + std::to_string(m));
  yaml.replace(yaml.find("micro_batches: 2"), 16, "micro_batches: " + std::to_string(m));
  yaml.replace(yaml.find("strategy:\n"), 10, "strategy:\n  schedule: gpipe\n");
  const double S = 128 * 256 * 2;
  const double tau = S / (1e9 / 8);
  const double f = tau / 8;
  const FixedTimes compute(f / 4);  // 4 layers per stage
  const double shared =
      run(checked(yaml + "simulation: {pipeline_messages: shared}\n"), compute)["iteration_time_s"];
  const double in_order = run(checked(yaml), compute)["iteration_time_s"];  // the default
  EXPECT_NEAR(in_order, 2 * m * tau + 6 * f + 2 * m * L, 0.02 * in_order);
  EXPECT_GT(shared, in_order);
}

// ---- fidelity, determinism -------------------------------------------------------------------

// A small model on an A100 cluster and a V100 cluster joined by the WAN; `batch` sequences.
std::string fold_clusters(int batch) {
  return std::string("name: fold\n") +
         "model: {name: small, layers: 8, hidden: 1024, heads: 16, vocab: 32000}\n"
         "training: {global_batch: " +
         std::to_string(batch) +
         ", seq_len: 1024, precision: bf16}\n"
         "clusters:\n"
         "  - {name: a, gpu: A100-80GB-SXM, nodes: 4, gpus_per_node: 4, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
         "  - {name: b, gpu: V100-32GB-SXM, nodes: 4, gpus_per_node: 4, nvlink: {bandwidth: "
         "150GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 2us}}\n"
         "wan:\n  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms}\n";
}

std::string fold_case(const std::string& schedule, const std::string& stages, int replicas,
                      int micro_batches, const std::string& algorithm, int micro_batch = 1) {
  return fold_clusters(replicas * micro_batches * micro_batch) +
         "strategy:\n  schedule: " + schedule +
         (schedule == "interleaved" ? "\n  virtual_stages: 2" : "") +
         "\n  micro_batch: " + std::to_string(micro_batch) +
         "\n  pipelines:\n    - replicas: " + std::to_string(replicas) +
         "\n      micro_batches: " + std::to_string(micro_batches) + "\n      stages:\n" + stages +
         "  grad_sync: {algorithm: " + algorithm + ", bucket: 4MB}\n";
}

// The lanes of a hierarchical all-reduce across clusters of unequal size: one per member of
// the largest cluster, a smaller cluster's member serving several (floor(j n / L)). Lowered
// over clusters of 2 and 4 members (one per node), with S bytes: each of the 4 lanes is a ring
// of 2 over S / 4, whose members each send 2 x S / 8 = S / 4 across the WAN; a member of the
// 2-member cluster serves 2 lanes: S / 2. Every member of the larger cluster crosses the WAN
// (with the fewest members' count, 2 lanes of S / 2, its members 2 and 3 sent nothing across
// and gathered shards that were never reduced with the other cluster's).
TEST(SimCollectives, HierarchicalLanesServeEveryMemberOfTheLargestCluster) {
  EXPECT_EQ(sim::hierarchical_lanes({2, 4}), 4);
  EXPECT_EQ(sim::hierarchical_lanes({3, 4, 2}), 4);
  EXPECT_EQ(sim::hierarchical_lanes({8, 8}), 8);
  const auto members = [](int lanes, int size) {
    std::vector<int> m;
    for (int j = 0; j < lanes; ++j) m.push_back(sim::hierarchical_lane_member(j, lanes, size));
    return m;
  };
  EXPECT_EQ(members(4, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(members(4, 3), (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(members(4, 4), (std::vector<int>{0, 1, 2, 3}));

  auto c = checked(fold_clusters(8));
  const double S = 64e6;
  const Json sent = sim::run_isolated([&] {
    std::vector<sim::DeviceRequest> requests;
    for (int i = 0; i < 2; ++i) requests.push_back({0, 4 * i, 1});
    for (int i = 0; i < 4; ++i) requests.push_back({1, 4 * i, 1});
    core::Diagnostics diags;
    const sim::Platform platform = sim::build_platform(
        c.scenario, {kernels::find_gpu("A100-80GB-SXM"), kernels::find_gpu("V100-32GB-SXM")},
        requests, diags);
    sim::Graph g;
    sim::Sender sender{g, platform, nullptr, nullptr, sim::Work::dp_comm, -1};
    sim::Collective all{{}, {}, S, "test", 1};
    for (int d = 0; d < 6; ++d) {
      all.members.push_back(d);
      all.ready.push_back(g.join());
    }
    sim::hierarchical_all_reduce(sender, all, {{0, 1}, {2, 3, 4, 5}});
    Json across = Json::array();
    for (int d = 0; d < 6; ++d) {
      double bytes = 0;
      for (sim::NodeId id = 0; id < g.size(); ++id) {
        const auto& n = g.node(id);
        if (n.op == sim::Op::transfer && n.device == d && platform.crosses_wan(d, n.peer))
          bytes += n.amount;
      }
      across.push_back(bytes);
    }
    return across;
  });
  for (int d = 0; d < 6; ++d)
    EXPECT_NEAR(sent[d].get<double>(), d < 2 ? S / 2 : S / 4, 1e-6 * S) << "member " << d;
}

TEST(SimFidelity, FoldedIsWithinHalfAPercentOfFull) {
  const kernels::KernelModel roofline;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"two clusters, tp 2, two replicas, hierarchical sync",
       fold_case("1f1b",
                 "        - {cluster: a, tp: 2, layers: 5}\n"
                 "        - {cluster: b, tp: 2, layers: 3}\n",
                 2, 8, "hierarchical")},
      {"one cluster, tp 2 dp 2, ring sync",
       fold_case("1f1b",
                 "        - {cluster: a, tp: 2, dp: 2, layers: 4}\n"
                 "        - {cluster: a, tp: 2, dp: 2, layers: 4}\n",
                 1, 8, "ring", 2)},
      {"interleaved, two replicas", fold_case("interleaved",
                                              "        - {cluster: a, tp: 2, layers: 4}\n"
                                              "        - {cluster: a, tp: 2, layers: 4}\n",
                                              2, 4, "ring")},
      {"gpipe, tree sync, tp 4", fold_case("gpipe",
                                           "        - {cluster: b, tp: 4, layers: 4}\n"
                                           "        - {cluster: b, tp: 4, layers: 4}\n",
                                           2, 4, "tree")},
      {"resharding tp 4 -> tp 2 dp 2 across the WAN",
       fold_case("1f1b",
                 "        - {cluster: a, tp: 4, layers: 4}\n"
                 "        - {cluster: b, tp: 2, dp: 2, layers: 4}\n",
                 2, 6, "hierarchical", 2)},
      // The A100 replicas finish their backward before the V100 ones, so the gradient rings'
      // members are ready at different times (a ring that let a member forward before its
      // own data was ready would put full 8.5% under folded here).
      {"data parallelism across two clusters of different GPUs, 8 replicas each",
       fold_clusters(64) +
           "strategy:\n  schedule: 1f1b\n  micro_batch: 1\n  pipelines:\n"
           "    - {replicas: 8, micro_batches: 4, stages: [{cluster: a, tp: 2, layers: 8}]}\n"
           "    - {replicas: 8, micro_batches: 4, stages: [{cluster: b, tp: 2, layers: 8}]}\n"
           "  grad_sync: {algorithm: hierarchical, bucket: 4MB}\n"},
  };
  for (const auto& [name, yaml] : cases) {
    auto c = checked(yaml);
    const double full = run(c, roofline, core::Fidelity::full)["iteration_time_s"];
    const double folded = run(c, roofline, core::Fidelity::folded)["iteration_time_s"];
    EXPECT_NEAR(folded, full, 0.005 * full) << name;
  }
}

TEST(SimFidelity, SameInputGivesByteIdenticalResults) {
  const kernels::KernelModel roofline;
  auto c = checked(fold_case("1f1b",
                             "        - {cluster: a, tp: 2, layers: 5}\n"
                             "        - {cluster: b, tp: 2, layers: 3}\n",
                             2, 4, "hierarchical"));
  EXPECT_EQ(run(c, roofline).dump(), run(c, roofline).dump());
}

// ---- graph ----------------------------------------------------------------------------------

TEST(SimGraph, CyclesAndDanglingEndpointsAreReported) {
  sim::Graph g;
  const int l = g.label("step");
  auto a = g.compute(0, 1, sim::Work::forward, l);
  auto b = g.compute(0, 1, sim::Work::forward, l);
  auto c = g.compute(0, 1, sim::Work::forward, l);
  g.edge(a, b);
  g.edge(b, c);
  g.edge(c, b);
  g.transfer(0, 0, 10, sim::Work::pp_comm, l);  // to itself
  g.transfer(0, 7, 10, sim::Work::pp_comm, l);  // to a device that does not exist
  g.finish();
  core::Diagnostics diags;
  g.check(2, diags);
  const std::string text = diags.format();
  EXPECT_NE(text.find("cycle"), std::string::npos) << text;
  EXPECT_NE(text.find("two different devices"), std::string::npos) << text;
  EXPECT_EQ(diags.error_count(), 3) << text;

  sim::Graph dangling;
  dangling.join();
  dangling.edge(0, 5);
  dangling.finish();
  core::Diagnostics d2;
  dangling.check(1, d2);
  EXPECT_NE(d2.format().find("does not exist"), std::string::npos) << d2.format();
}

TEST(SimGraph, NodesStaySmall) {
  EXPECT_LE(sizeof(sim::GraphNode), 32u);
}

TEST(SimPlatform, WanRoutesTakeTheLeastLatencyPathAndKeepDirections) {
  auto c =
      checked(std::string("name: three\n") + kTinyModel +
              "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
              "clusters:\n"
              "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
              "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
              "  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
              "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
              "  - {name: c, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
              "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
              "wan:\n"
              "  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms}\n"
              "  - {between: [b, c], bandwidth: 5Gbps, reverse_bandwidth: 2Gbps, latency: 10ms}\n"
              "  - {between: [a, c], bandwidth: 1Gbps, latency: 50ms}\n"
              "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
              "        - {cluster: a, layers: 8}\n");
  const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
  core::Diagnostics diags;
  const auto p =
      sim::build_platform(c.scenario, {gpu, gpu, gpu}, {{0, 0, 1}, {1, 0, 1}, {2, 0, 1}}, diags);
  auto wan_names = [&](int src, int dst) {
    std::vector<std::string> names;
    for (const auto& h : p.route(src, dst))
      if (p.links[h.link].kind == sim::LinkKind::wan) names.push_back(p.links[h.link].name);
    return names;
  };
  // a -> c: 20 ms through b beats the direct 50 ms link.
  EXPECT_EQ(wan_names(0, 2), (std::vector<std::string>{"wan:a->b", "wan:b->c"}));
  EXPECT_EQ(wan_names(2, 0), (std::vector<std::string>{"wan:c->b", "wan:b->a"}));
  EXPECT_NEAR(p.route_latency(0, 2), 20e-3 + 4e-6, 1e-12);
  // The window cap of the path: 4 MiB over twice the route latency.
  EXPECT_NEAR(p.flow_cap(0, 2), 4.0 * 1024 * 1024 / (2 * (20e-3 + 4e-6)), 1e-6);
  // Asymmetric: b -> c at 5 Gbit/s, c -> b at 2 Gbit/s.
  EXPECT_NEAR(p.route_bandwidth(1, 2), std::min(5e9 / 8, p.flow_cap(1, 2)), 1e-3);
  double c_to_b = 0;
  for (const auto& l : p.links)
    if (l.name == "wan:c->b") c_to_b = l.bytes_per_s;
  EXPECT_EQ(c_to_b, 2e9 / 8);
}

// ---- platform XML ---------------------------------------------------------------------------

TEST(SimPlatform, ExportedXmlLoadsIntoSimGridWithTheSameRoutes) {
  auto c = checked(fold_case("1f1b",
                             "        - {cluster: a, tp: 2, layers: 5}\n"
                             "        - {cluster: b, tp: 2, layers: 3}\n",
                             2, 4, "hierarchical"));
  c.scenario.clusters[0].oversubscription = 2;
  const auto* a100 = kernels::find_gpu("A100-80GB-SXM");
  const auto* v100 = kernels::find_gpu("V100-32GB-SXM");
  std::vector<sim::DeviceRequest> requests{{0, 0, 1}, {0, 1, 1}, {0, 4, 1}, {1, 0, 1}, {1, 5, 1}};
  core::Diagnostics diags;
  const auto p = sim::build_platform(c.scenario, {a100, v100}, requests, diags);
  ASSERT_FALSE(diags.has_errors()) << diags.format();
  const fs::path xml =
      fs::temp_directory_path() / ("hgsim-platform-" + std::to_string(getpid()) + ".xml");
  std::ofstream(xml) << sim::platform_xml(p);
  const Json routes = sim::run_isolated([&] {
    int argc = 2;
    char a0[] = "test", a1[] = "--log=root.thresh:critical";
    char* argv[] = {a0, a1, nullptr};
    simgrid::s4u::Engine e(&argc, argv);
    e.load_platform(xml.string());
    Json out = Json::array();
    for (int s = 0; s < p.device_count(); ++s)
      for (int d = 0; d < p.device_count(); ++d) {
        if (s == d) continue;
        std::vector<simgrid::s4u::Link*> links;
        double latency = 0;
        e.host_by_name(p.devices[s].name)
            ->route_to(e.host_by_name(p.devices[d].name), links, &latency);
        double bandwidth = 1e300;
        for (auto* l : links) bandwidth = std::min(bandwidth, l->get_bandwidth());
        out.push_back({latency, bandwidth});
      }
    return out;
  });
  fs::remove(xml);
  std::size_t k = 0;
  for (int s = 0; s < p.device_count(); ++s)
    for (int d = 0; d < p.device_count(); ++d) {
      if (s == d) continue;
      EXPECT_NEAR(routes[k][0].get<double>(), p.route_latency(s, d), 1e-12) << s << "->" << d;
      EXPECT_NEAR(routes[k][1].get<double>(), p.route_bandwidth(s, d), 1e-3) << s << "->" << d;
      ++k;
    }
}

// ---- the command ----------------------------------------------------------------------------

using testing::CliResult;
using testing::hgsim;

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() / (std::to_string(getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path;
}

TEST(SimCli, BadPlanFilesAreRefusedWithTheirJsonPath) {
  const auto scenario = temp_file("scenario.yaml", fold_case("1f1b",
                                                             "        - {cluster: a, layers: 4}\n"
                                                             "        - {cluster: b, layers: 4}\n",
                                                             1, 4, "ring"));
  struct Case {
    std::string plan, expected;
  } cases[] = {
      {R"({"pipelines": [{"micro_batches": 4, "stages": [{"cluster": "mars", "layers": 8}]}]})",
       "pipelines[0].stages[0].cluster"},
      {R"({"pipelines": [{"micro_batches": 4, "stages": [{"cluster": "a", "tp": 8, "dp": 4, "layers": 8}]}]})",
       "pipelines[0].stages[0]"},
      {R"({"pipelines": [{"micro_batches": 4, "stages": [{"cluster": "a", "layers": 7}]}]})",
       "layers"},
      {R"({"pipelines": [{"micro_batches": 3, "stages": [{"cluster": "a", "layers": 8}]}]})",
       "global_batch"},
      {R"({"pipelines": [)", "plan.json"},
  };
  for (const auto& k : cases) {
    const auto plan = temp_file("plan.json", k.plan);
    auto r = hgsim({"run", scenario.string(), "--plan", plan.string()});
    EXPECT_EQ(r.status, 1) << k.plan << "\n" << r.err << r.out;
    EXPECT_NE((r.err + r.out).find(k.expected), std::string::npos) << k.plan << "\n" << r.err;
    fs::remove(plan);
  }
  fs::remove(scenario);
}

TEST(SimCli, APlanThatDoesNotFitIsRefusedUnlessAllowed) {
  // 8 GPT-3 13B layers of 2048 tokens, no recompute, on a 16 GiB V100: far too much.
  std::string yaml = fold_case("gpipe", "        - {cluster: b, layers: 40}\n", 1, 32, "ring");
  yaml.replace(yaml.find("model: {"),
               yaml.find('\n', yaml.find("model: {")) - yaml.find("model: {"), "model: gpt3-13b");
  const auto scenario = temp_file("oom.yaml", yaml);
  auto r = hgsim({"run", scenario.string()});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("does not fit in memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("strategy.pipelines[0].stages[0]"), std::string::npos) << r.err;
  fs::remove(scenario);
}

// `hgsim check` and `hgsim run` give an explicit plan one memory verdict
// (sim::check_plan_memory): check accepted Llama-3-8B at tp 1, no ZeRO, no recompute, on an
// 80 GB GPU (16 B of weights, gradients and Adam state per parameter: 128 GB) that run
// refused.
TEST(SimCli, CheckAndRunGiveAPlanThatDoesNotFitOneVerdict) {
  const std::string scenario_text =
      "name: oom\n"
      "model: llama3-8b\n"
      "training: {global_batch: 8, seq_len: 4096, precision: bf16, optimizer: adam}\n"
      "clusters:\n"
      "  - {name: a, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 8, nvlink: {bandwidth: "
      "450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}\n"
      "strategy:\n"
      "  micro_batch: 1\n"
      "  pipelines:\n"
      "    - replicas: 8\n"
      "      micro_batches: 1\n"
      "      stages:\n"
      "        - {cluster: a, tp: 1, layers: 32}\n"
      "  grad_sync: {algorithm: ring, bucket: 25MB}\n";
  const auto scenario = temp_file("oom-check.yaml", scenario_text);
  const auto check = hgsim({"check", scenario.string()});
  const auto run = hgsim({"run", scenario.string()});
  EXPECT_EQ(check.status, 1) << check.out << check.err;
  EXPECT_EQ(run.status, 1) << run.out << run.err;
  const auto first_error = [](const std::string& text) {
    const auto at = text.find("error:");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
  EXPECT_NE(first_error(check.err).find("strategy.pipelines[0].stages[0]: does not fit in memory"),
            std::string::npos)
      << check.err;
  EXPECT_EQ(first_error(check.err), first_error(run.err)) << check.err << "\n" << run.err;
  // The JSON answer says the same.
  const auto json = hgsim({"check", scenario.string(), "--json"});
  EXPECT_EQ(json.status, 1);
  EXPECT_NE(json.out.find("does not fit in memory"), std::string::npos) << json.out;

  // In a sweep, a point that does not fit is one `hgsim sweep` records as failed: check
  // warns, naming the point, and the scenario stays valid.
  const auto sweep =
      temp_file("oom-sweep.yaml", scenario_text + "sweep:\n  strategy.zero: [0, 3]\n");
  const auto swept = hgsim({"check", sweep.string()});
  EXPECT_EQ(swept.status, 0) << swept.err;
  EXPECT_NE(swept.err.find("warning:"), std::string::npos) << swept.err;
  EXPECT_NE(swept.err.find("does not fit in memory"), std::string::npos) << swept.err;
  EXPECT_NE(swept.err.find("sweep point strategy.zero=0:"), std::string::npos) << swept.err;
  EXPECT_EQ(swept.err.find("strategy.zero=3"), std::string::npos) << swept.err;
  fs::remove(scenario);
  fs::remove(sweep);
}

TEST(SimCli, TraceGraphAndPlatformExportsAreWellFormed) {
  const auto scenario =
      temp_file("trace.yaml", fold_case("1f1b",
                                        "        - {cluster: a, tp: 2, layers: 4}\n"
                                        "        - {cluster: b, tp: 2, layers: 4}\n",
                                        1, 4, "ring"));
  const auto trace = temp_file("trace.json", "");
  const auto graph = temp_file("graph.json", "");
  const auto platform = temp_file("platform.xml", "");
  auto r = hgsim({"run", scenario.string(), "--json", "--trace", trace.string(), "--export-graph",
                  graph.string(), "--export-platform", platform.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json result = Json::parse(r.out);
  std::ifstream t(trace);
  const Json events = Json::parse(t)["traceEvents"];
  std::set<std::string> categories;
  std::set<std::pair<int, int>> tracks;
  int wan_events = 0;
  for (const auto& e : events) {
    if (e["ph"] != "X") continue;
    categories.insert(e["cat"].get<std::string>());
    tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_LE((e["ts"].get<double>() + e["dur"].get<double>()) * 1e-6,
              result["iteration_time_s"].get<double>() * (1 + 1e-9));
    if (e["pid"].get<int>() == 2) ++wan_events;  // the WAN process follows the clusters
  }
  for (const char* c : {"forward", "backward", "tp_comm", "pp_comm", "optimizer", "bubble"})
    EXPECT_TRUE(categories.count(c)) << c;
  EXPECT_GT(wan_events, 0);
  EXPECT_GE(tracks.size(), 8u);  // 4 GPUs x (compute, comm) at least
  std::ifstream g(graph);
  const Json nodes = Json::parse(g)["nodes"];
  EXPECT_EQ(nodes.size(), result["simulator"]["graph_nodes"].get<std::size_t>());
  std::ifstream x(platform);
  const std::string xml((std::istreambuf_iterator<char>(x)), std::istreambuf_iterator<char>());
  EXPECT_NE(xml.find("<platform version=\"4.1\">"), std::string::npos);
  EXPECT_NE(xml.find("wan:a->b"), std::string::npos);
  for (const auto& f : {scenario, trace, graph, platform}) fs::remove(f);
}

TEST(SimCli, SweepSimulatesEveryPoint) {
  std::string yaml = fold_case("1f1b",
                               "        - {cluster: a, layers: 4}\n"
                               "        - {cluster: b, layers: 4}\n",
                               1, 4, "ring");
  yaml += "sweep:\n  wan[0].bandwidth: [1Gbps, 100Gbps]\n";
  const auto scenario = temp_file("sweep.yaml", yaml);
  auto r = hgsim({"sweep", scenario.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json points = Json::parse(r.out)["points"];
  ASSERT_EQ(points.size(), 2u);
  // A faster WAN never makes the iteration slower.
  EXPECT_GT(points[0]["result"]["iteration_time_s"].get<double>(),
            points[1]["result"]["iteration_time_s"].get<double>());
  fs::remove(scenario);
}

// ---- every example against the summary checked in beside it (STYLE.md) ------------------

// What an example's summary pins: iteration time, throughput, MFU, the per-stage breakdown
// and the plan that ran (the planner's for strategy: auto).
Json run_summary(const Json& got) {
  Json summary{{"iteration_time_s", got["iteration_time_s"]},
               {"tokens_per_s", got["tokens_per_s"]},
               {"mfu", got["mfu"]},
               {"plan", got["plan"]}};
  Json stages = Json::object();
  for (const auto& d : got["devices"]) {
    const std::string key = "p" + std::to_string(d["pipeline"].get<int>()) + " s" +
                            std::to_string(d["stage"].get<int>());
    if (stages.contains(key)) continue;
    stages[key] = {{"compute_s", d["compute_s"]},
                   {"comm_exposed_s", d["comm_exposed_s"]},
                   {"bubble_s", d["bubble_s"]},
                   {"idle_s", d["idle_s"]},
                   {"peak_bytes", d["memory"]["peak_bytes"]}};
  }
  summary["stages"] = stages;
  return summary;
}

// A sweep's summary: every point run, by its index, with its settings, status and the plan
// and numbers of a run.
Json sweep_summary(const Json& got) {
  Json points = Json::object();
  for (const auto& p : got["points"]) {
    Json point{{"settings", p["settings"]}, {"status", p["status"]}};
    if (p["status"] == "ok") {
      const Json& r = p["result"];
      point["plan"] = p["plan"];
      point["iteration_time_s"] = r["iteration_time_s"];
      point["tokens_per_s"] = r["tokens_per_s"];
      point["mfu"] = r["mfu"];
    }
    points[std::to_string(p["point"].get<int>())] = point;
  }
  return Json{{"points", points}};
}

// Numbers within the relative tolerance; everything else (strings, booleans, integers in
// plans, array lengths, keys) exactly.
void compare_summary(const Json& want, const Json& have, double tolerance, const std::string& path,
                     std::vector<std::string>& problems) {
  if (want.is_object() || want.is_array()) {
    if (want.is_array() && (!have.is_array() || have.size() != want.size())) {
      problems.push_back(path + ": expected " + want.dump() + ", got " + have.dump());
      return;
    }
    if (want.is_object() && (!have.is_object() || have.size() != want.size())) {
      problems.push_back(path + ": expected keys of " + want.dump() + ", got " + have.dump());
      return;
    }
    if (want.is_array()) {
      for (std::size_t k = 0; k < want.size(); ++k)
        compare_summary(want[k], have[k], tolerance, path + "[" + std::to_string(k) + "]",
                        problems);
    } else {
      for (auto it = want.begin(); it != want.end(); ++it) {
        if (!have.contains(it.key())) {
          problems.push_back(path + "." + it.key() + ": missing");
          continue;
        }
        compare_summary(it.value(), have[it.key()], tolerance, path + "." + it.key(), problems);
      }
    }
    return;
  }
  if (want.is_number_float() && have.is_number()) {
    const double w = want.get<double>(), h = have.get<double>();
    if (!(std::abs(h - w) <= tolerance * std::max(std::abs(w), 1e-6)))
      problems.push_back(path + ": expected " + std::to_string(w) + ", got " + std::to_string(h) +
                         " (" + std::to_string(100 * (h - w) / w) + "%)");
    return;
  }
  if (want != have) problems.push_back(path + ": expected " + want.dump() + ", got " + have.dump());
}

struct Example {
  const char* name;  // scenarios/examples/<name>.yaml
  bool sweep;
  std::vector<std::string> points;  // a sweep's points to run (--point K); empty: all
};

void PrintTo(const Example& e, std::ostream* os) {
  *os << e.name;
}

class SimExamples : public ::testing::TestWithParam<Example> {};

// Every example matches the summary checked in beside it, within the tolerance the file
// states. HGSIM_UPDATE_EXPECTED=1 rewrites the files (and the diff shows by how much a
// change moved each number).
TEST_P(SimExamples, MatchTheirExpectedSummaries) {
  const Example& example = GetParam();
  const fs::path dir = fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "examples";
  const fs::path scenario = dir / (std::string(example.name) + ".yaml");
  const fs::path expected_file = dir / (std::string(example.name) + ".expected.json");
  std::string command = std::string("hgsim ") + (example.sweep ? "sweep" : "run") +
                        " scenarios/examples/" + example.name + ".yaml --json";
  Json summary;
  if (!example.sweep) {
    auto r = hgsim({"run", scenario.string(), "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    summary = run_summary(Json::parse(r.out));
  } else {
    const fs::path db = fs::temp_directory_path() / ("hgsim-example-" + std::to_string(::getpid()) +
                                                     "-" + example.name + ".sqlite");
    Json points{{"points", Json::array()}};
    std::vector<std::vector<std::string>> runs;
    for (const auto& k : example.points) runs.push_back({"--point", k});
    if (runs.empty()) runs.push_back({});
    for (const auto& extra : runs) {
      std::vector<std::string> args{"sweep", scenario.string(), "--json", "--db", db.string(), "-j",
                                    "1"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto r = hgsim(args);
      fs::remove(db);
      ASSERT_EQ(r.status, 0) << r.err;
      const Json got = Json::parse(r.out);
      for (const auto& p : got["points"]) points["points"].push_back(p);
    }
    summary = sweep_summary(points);
    for (const auto& k : example.points) command += " --point " + k;
  }
  if (std::getenv("HGSIM_UPDATE_EXPECTED")) {
    Json file{{"command", command},
              {"tolerance",
               "relative 1e-6 on every number, the rest exactly (the simulator and the planner "
               "are deterministic)"},
              {"relative_tolerance", 1e-6},
              {"summary", summary}};
    std::ofstream(expected_file) << file.dump(2) << "\n";
  }
  std::ifstream in(expected_file);
  ASSERT_TRUE(in) << "missing " << expected_file << " (run with HGSIM_UPDATE_EXPECTED=1)";
  const Json expected = Json::parse(in);
  EXPECT_EQ(expected["command"].get<std::string>(), command);
  std::vector<std::string> problems;
  compare_summary(expected["summary"], summary, expected["relative_tolerance"].get<double>(), "",
                  problems);
  for (const auto& p : problems) ADD_FAILURE() << example.name << p;
}

// The four-regions sweep has 12 points, each a planner search over 128 GPUs (a minute and a
// half in all): its first and last points stand for it.
INSTANTIATE_TEST_SUITE_P(All, SimExamples,
                         ::testing::Values(Example{"explicit-plan", false, {}},
                                           Example{"inline-model", false, {}},
                                           Example{"long-context", false, {}},
                                           Example{"two-clusters", false, {}},
                                           Example{"wan-sweep", true, {}},
                                           Example{"four-regions-sweep", true, {"0", "11"}}),
                         [](const ::testing::TestParamInfo<Example>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace hgsim
