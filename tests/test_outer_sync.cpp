// Several iterations in one simulation, bandwidth traces over them, time to train, and
// DiLoCo's outer synchronisation (blocking and streaming) against closed forms and the
// codecs' exact encoded sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "compress/codec.hpp"
#include "compress/codec_cost.hpp"
#include "core/document.hpp"
#include "kernels/gpu_catalog.hpp"
#include "models/transformer.hpp"
#include "sim/engine.hpp"
#include "sim/iterations.hpp"
#include "sim/outer_sync.hpp"
#include "sim/simulate.hpp"
#include "sim/workload.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;
using testing::checked;
using testing::FixedTimes;
using testing::kTinyModel;

Json run(const apps::CheckedScenario& c, const kernels::ComputeModel& compute) {
  return testing::simulate_plan(c, compute);
}

// Islands: one cluster each, `gpus` GPUs in one node; a 1 Gbit/s, 10 ms WAN between them
// (a window large enough not to cap a flow).
std::string islands_scenario(int islands, int gpus, const std::string& outer_sync,
                             const std::string& simulation = "") {
  std::string yaml = std::string("name: islands\n") + kTinyModel +
                     "training: {global_batch: " + std::to_string(islands * gpus) +
                     ", seq_len: 128, precision: bf16}\nclusters:\n";
  const std::string names = "abc";
  for (int i = 0; i < islands; ++i)
    yaml += std::string("  - {name: ") + names[i] +
            ", gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: " + std::to_string(gpus) +
            ", nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: "
            "1us}}\n";
  yaml += "wan:\n";
  for (int i = 0; i < islands; ++i)
    for (int j = i + 1; j < islands; ++j)
      yaml += std::string("  - {between: [") + names[i] + ", " + names[j] +
              "], bandwidth: 1Gbps, latency: 10ms, tcp_window: 1GB}\n";
  yaml += "strategy:\n  pipelines:\n";
  for (int i = 0; i < islands; ++i)
    yaml += "    - {replicas: " + std::to_string(gpus) +
            ", micro_batches: 1, stages: [{cluster: " + names[i] + ", layers: 8}]}\n";
  if (!outer_sync.empty()) yaml += "  outer_sync: " + outer_sync + "\n";
  yaml += simulation;
  return yaml;
}

const sim::Hop2 kWan{1e9 / 8, 10e-3 + 2e-6};  // WAN, plus a NIC at each end
const sim::Hop2 kNvlink{300e9 * testing::kNcclNvlinkShareH100, 2e-6};  // NVLink out and in

// The pseudo-gradient of the whole tiny model on one GPU, in bf16.
double model_shard_bytes(const core::ModelConfig& m) {
  models::StageSpec whole;
  whole.layers = m.layers;
  return 2 * models::stage_parameters(m, whole);
}

// ---- the outer all-reduce against its closed form -----------------------------------------

double simulated_outer_all_reduce(const apps::CheckedScenario& c, int islands, int gpus,
                                  const compress::CodecSpec& codec, double* wan_bytes) {
  const Json out = sim::run_isolated([&] {
    std::vector<sim::DeviceRequest> requests;
    std::vector<sim::DeviceRole> roles;
    std::vector<const kernels::GpuSpec*> gpu_types;
    for (int i = 0; i < islands; ++i) {
      gpu_types.push_back(kernels::find_gpu("H100-80GB-SXM"));
      for (int g = 0; g < gpus; ++g) {
        requests.push_back({i, g, 1});
        roles.push_back({i, 0, g, 0, 0});
      }
    }
    core::Diagnostics diags;
    const sim::Platform platform = sim::build_platform(c.scenario, gpu_types, requests, diags);
    sim::Graph g;
    const std::vector<sim::NodeId> ready(roles.size(), g.join());
    sim::OuterSyncInput in;
    in.plan = &c.scenario.strategy.plan;
    in.model = &c.model;
    in.codec = codec;
    in.roles = &roles;
    sim::CodecStats stats;
    sim::outer_all_reduce(g, platform, in, ready, &stats);
    g.finish();
    return Json{{"time", sim::execute(g, platform).makespan}, {"wire", stats.wan_wire_bytes}};
  });
  if (wan_bytes) *wan_bytes = out["wire"];
  return out["time"];
}

TEST(OuterSync, LoweredAllReduceMatchesItsClosedForm) {
  for (int islands : {2, 3})
    for (int gpus : {1, 2, 4}) {
      auto c = checked(islands_scenario(islands, gpus, "{method: diloco, inner_steps: 4}"));
      const double S = model_shard_bytes(c.model);
      const double expected = sim::outer_all_reduce_time(islands, gpus, S, kWan, kNvlink);
      const double got = simulated_outer_all_reduce(c, islands, gpus, {}, nullptr);
      // Transfers carry whole bytes: each of the 2 (I - 1) WAN steps of a lane may round its
      // chunk by up to half a byte (at B / L).
      const double rounding = 2.0 * (islands - 1) * 0.5 * gpus / kWan.bytes_per_s;
      EXPECT_NEAR(got, expected, 1e-9 * expected + rounding) << islands << " islands of " << gpus;
    }
}

TEST(OuterSync, ClosedFormByHand) {
  // Two islands, one lane: a ring of two moves S / 2 each way twice: S / B + 2 a.
  EXPECT_NEAR(sim::outer_all_reduce_time(2, 1, 1e9, {1e8, 0.01}, {1e12, 0}), 10 + 0.02, 1e-12);
  // Four lanes share the WAN (B / 4 each) with a quarter of S each: the same S / B, then
  // the all-gather of S inside the island: 3/4 S / B_nv + 3 a_nv.
  EXPECT_NEAR(sim::outer_all_reduce_time(2, 4, 1e9, {1e8, 0.01}, {1e11, 1e-6}),
              10 + 0.02 + 0.75e9 / 1e11 + 3e-6, 1e-12);
}

TEST(OuterSync, WanBytesAreTheCodecsExactEncodedSizes) {
  const int islands = 3, gpus = 2;
  auto c = checked(islands_scenario(islands, gpus, "{method: diloco, inner_steps: 4}"));
  const double S = model_shard_bytes(c.model);
  const auto int8 = compress::default_spec(compress::CodecKind::int8);
  double wire = 0;
  simulated_outer_all_reduce(c, islands, gpus, int8, &wire);
  // Each lane's ring: 2 (I - 1) steps, I sends of S / (L I) bytes each, coded as a matrix
  // of hidden (256) columns.
  const double chunk = S / (gpus * islands);
  const auto elements = static_cast<std::int64_t>(chunk / 2);
  const std::vector<std::int64_t> shape{(elements + 255) / 256, 256};
  const double encoded = static_cast<double>(
      compress::encoded_bytes(int8, shape, compress::storage_dtype(core::Precision::bf16)));
  EXPECT_DOUBLE_EQ(wire, gpus * 2.0 * (islands - 1) * islands * encoded);
  EXPECT_LT(wire, 0.55 * 2.0 * (islands - 1) * S);  // about half of bf16
}

TEST(OuterSync, FragmentsPartitionEveryStagesParameters) {
  auto c = checked(islands_scenario(2, 1, ""));
  const std::vector<int> layers{3, 5};
  for (int stage = 0; stage < 2; ++stage) {
    models::StageSpec spec;
    spec.stages = 2;
    spec.stage_index = stage;
    spec.layers = layers[stage];
    spec.tp = 2;
    double sum = 0;
    for (int f = 0; f < 4; ++f)
      sum += sim::fragment_stage_parameters(c.model, layers, stage, 2, f, 4);
    EXPECT_NEAR(sum, models::stage_parameters(c.model, spec), 1e-6) << "stage " << stage;
  }
  // Fragment 1 of 4 is layers 2-3: stage 0 holds layer 2, stage 1 layer 3 (of layers 3-7).
  EXPECT_DOUBLE_EQ(sim::fragment_stage_parameters(c.model, layers, 0, 1, 1, 4),
                   models::layer_parameters(c.model));
}

// ---- DiLoCo iterations ----------------------------------------------------------------------

TEST(OuterSync, BlockingRoundIsHInnerStepsPlusTheSync) {
  const FixedTimes compute(1e-3);
  const std::string diloco = "{method: diloco, inner_steps: 4}";
  // Fewer iterations than H: inner steps only.
  const double t_inner =
      run(checked(islands_scenario(2, 2, diloco)), compute)["iteration_time_s"].get<double>();
  auto c = checked(islands_scenario(2, 2, diloco, "simulation: {iterations: 8}\n"));
  const Json r = run(c, compute);
  const double S = model_shard_bytes(c.model);
  const double t_sync = sim::outer_all_reduce_time(2, 2, S, kWan, kNvlink);
  EXPECT_NEAR(r["iteration_time_s"].get<double>(), (4 * t_inner + t_sync) / 4, 1e-9);
  EXPECT_EQ(r["iterations_simulated"], 8);
  const auto times = r["iteration_times_s"].get<std::vector<double>>();
  ASSERT_EQ(times.size(), 8u);
  for (int k = 0; k < 8; ++k)
    EXPECT_NEAR(times[k], k % 4 == 3 ? t_inner + t_sync : t_inner, 1e-9) << k;
  const auto& o = r["outer_sync"];
  EXPECT_EQ(o["count"], 2);
  EXPECT_NEAR(o["bytes"].get<double>(), 2 * 2 * S, 1e-6);  // S each way per sync
  EXPECT_NEAR(o["exposed_s"].get<double>(), 2 * t_sync, 1e-9);
  EXPECT_NEAR(o["time_s"].get<double>(), 2 * t_sync, 1e-9);
  // The WAN links' bytes per iteration include the outer sync, and nothing else crosses.
  double wan = 0;
  for (const auto& l : r["links"])
    if (l["kind"] == "wan") wan += l["bytes"].get<double>();
  EXPECT_NEAR(wan, 2 * 2 * S / 8, 1e-6);
  // Memory: 8 more bytes per parameter (fp32 snapshot and momentum).
  const Json plain = run(checked(islands_scenario(2, 2, "", "")), compute);
  EXPECT_NEAR(r["devices"][0]["memory"]["peak_bytes"].get<double>() -
                  plain["devices"][0]["memory"]["peak_bytes"].get<double>(),
              4 * S, 1e-3);
}

TEST(OuterSync, StreamingOverlapsEachFragmentWithTheNextInnerStep) {
  // Islands of one GPU: an inner step is compute only (24 f: 8 layers of f + 2 f), shorter
  // than either fragment's all-reduce. Per round of H = 4: step, window 0, step, window 1,
  // each window max(t_step, t_f) with the fragment started at its beginning.
  const double t_step = 0.02;
  const FixedTimes compute(t_step / 24);
  auto c = checked(
      islands_scenario(2, 1, "{method: diloco, inner_steps: 4, fragments: 2, overlap_steps: 1}",
                       "simulation: {iterations: 8}\n"));
  const Json r = run(c, compute);
  const auto& m = c.model;
  const double S0 = 2 * (4 * models::layer_parameters(m) + models::embedding_parameters(m));
  const double S1 = model_shard_bytes(m) - S0;
  const double t0 = sim::outer_all_reduce_time(2, 1, S0, kWan, kNvlink);
  const double t1 = sim::outer_all_reduce_time(2, 1, S1, kWan, kNvlink);
  ASSERT_GT(t0, t_step);
  ASSERT_GT(t1, t_step);
  EXPECT_NEAR(r["iteration_time_s"].get<double>(), (2 * t_step + t0 + t1) / 4, 1e-9);
  const auto& o = r["outer_sync"];
  EXPECT_EQ(o["count"], 4);
  EXPECT_NEAR(o["exposed_s"].get<double>(), 2 * (t0 - t_step + t1 - t_step), 1e-9);
  EXPECT_NEAR(o["bytes"].get<double>(), 2 * (S0 + S1) * 2, 1e-6);
  // Blocking DiLoCo exposes the whole sync: streaming hides t_step per fragment.
  auto blocking = checked(
      islands_scenario(2, 1, "{method: diloco, inner_steps: 4}", "simulation: {iterations: 8}\n"));
  const Json b = run(blocking, compute);
  const double t_whole = sim::outer_all_reduce_time(2, 1, S0 + S1, kWan, kNvlink);
  EXPECT_NEAR(b["outer_sync"]["exposed_s"].get<double>(), 2 * t_whole, 1e-9);
  EXPECT_GT(b["outer_sync"]["exposed_s"].get<double>(), o["exposed_s"].get<double>());
}

// Every number of `a` and `b` (objects and arrays walked alike) within 1e-9 of each other,
// relatively; `where` names the path.
void expect_same_numbers(const Json& a, const Json& b, const std::string& where) {
  if (a.is_number()) {
    ASSERT_TRUE(b.is_number()) << where;
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_NEAR(x, y, 1e-9 * std::max(std::abs(y), 1e-3)) << where;
    return;
  }
  if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (std::size_t i = 0; i < a.size(); ++i)
      expect_same_numbers(a[i], b[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  if (!a.is_object()) return;
  for (auto it = a.begin(); it != a.end(); ++it) {
    ASSERT_TRUE(b.contains(it.key())) << where << "." << it.key();
    expect_same_numbers(it.value(), b.at(it.key()), where + "." + it.key());
  }
}

// `yaml` simulated twice: as it is (Streaming DiLoCo windows grown from one step, the rest
// counted as the plain step) and with a bandwidth trace that holds the WAN at its bandwidth
// (every phase played, windows whole). Returns the first.
Json composed_against_whole_windows(const std::string& yaml, const kernels::ComputeModel& compute) {
  auto c = checked(yaml);
  const Json composed = run(c, compute);
  auto& wan = c.scenario.wan[0];
  wan.trace = "inline";
  wan.trace_steps = {{core::Seconds(0), wan.bandwidth}, {core::Seconds(1e6), wan.bandwidth}};
  const Json whole = run(c, compute);
  EXPECT_NE(whole["iterations_played"].get<std::string>().find("every"), std::string::npos);
  EXPECT_FALSE(whole.contains("iterations_composed"));
  for (const char* key :
       {"iteration_time_s", "iteration_times_s", "devices", "links", "compression"})
    expect_same_numbers(composed.at(key), whole.at(key), key);
  for (const char* key : {"count", "bytes", "time_s", "exposed_s"})
    expect_same_numbers(composed.at("outer_sync").at(key), whole.at("outer_sync").at(key), key);
  return composed;
}

TEST(Iterations, StreamingWindowsComposedFromTheirFirstStepsMatchWholeWindows) {
  // Islands of two GPUs (their inner steps all-reduce over NVLink, which the outer sync's
  // in-island steps share): the fragment syncs end within the first step of each window.
  const FixedTimes compute(5e-3);
  for (const std::string outer :
       {"{method: diloco, inner_steps: 4, fragments: 2, overlap_steps: 2}",
        "{method: diloco, inner_steps: 8, fragments: 2, overlap_steps: 3}"}) {
    SCOPED_TRACE(outer);
    const Json r = composed_against_whole_windows(
        islands_scenario(2, 2, outer, "simulation: {iterations: 10}\n"), compute);
    // One round: each of the 2 windows counts its last tau - 1 steps.
    const int tau = outer.find("overlap_steps: 2") != std::string::npos ? 2 : 3;
    const int rounds = outer.find("inner_steps: 4") != std::string::npos ? 2 : 1;
    EXPECT_EQ(r["iterations_composed"].get<int>(), rounds * 2 * (tau - 1));
    EXPECT_NE(r["iterations_played"].get<std::string>().find("idle links"), std::string::npos);
  }
  // Each island a two-stage pipeline: a stage idles between inner steps (the first stage
  // waits for the last's backward), which is no bubble of either step.
  std::string yaml = islands_scenario(
      2, 2, "{method: diloco, inner_steps: 8, fragments: 2, overlap_steps: 3}",
      "simulation: {iterations: 8}\n");
  for (const std::string island : {"a", "b"}) {
    const std::string one = "{replicas: 2, micro_batches: 1, stages: [{cluster: " + island +
                            ", layers: 8}]}";
    yaml.replace(yaml.find(one), one.size(),
                 "{replicas: 1, micro_batches: 2, stages: [{cluster: " + island +
                     ", layers: 4}, {cluster: " + island + ", layers: 4}]}");
  }
  const Json r = composed_against_whole_windows(yaml, compute);
  EXPECT_GT(r["iterations_composed"].get<int>(), 0);
  EXPECT_GT(r["devices"][0]["bubble_s"].get<double>(), 0);
}

TEST(Iterations, StreamingWindowGrowsWhileItsSyncOutlastsItsSteps) {
  // Islands of one GPU, H = 8, F = 2, tau = 4 (no plain step in a round): each fragment's
  // sync lasts between one and two inner steps, so each window is played with 2 steps and
  // counts 2; every window takes tau t_step, so every iteration t_step, nothing exposed.
  auto c = checked(islands_scenario(
      2, 1, "{method: diloco, inner_steps: 8, fragments: 2, overlap_steps: 4}"));
  const auto& m = c.model;
  const double S0 = 2 * (4 * models::layer_parameters(m) + models::embedding_parameters(m));
  const double t0 = sim::outer_all_reduce_time(2, 1, S0, kWan, kNvlink);
  const double t1 = sim::outer_all_reduce_time(2, 1, model_shard_bytes(m) - S0, kWan, kNvlink);
  const double t_step = 0.6 * std::max(t0, t1);
  ASSERT_LT(std::max(t0, t1), 2 * t_step);
  ASSERT_GT(std::max(t0, t1), t_step);
  const FixedTimes compute(t_step / 24);
  const Json r = composed_against_whole_windows(
      islands_scenario(2, 1, "{method: diloco, inner_steps: 8, fragments: 2, overlap_steps: 4}",
                       "simulation: {iterations: 16}\n"),
      compute);
  EXPECT_NEAR(r["iteration_time_s"].get<double>(), t_step, 1e-9);
  EXPECT_NEAR(r["outer_sync"]["exposed_s"].get<double>(), 0, 1e-9);
  EXPECT_EQ(r["outer_sync"]["count"], 4);
  // Per round, a window whose sync outlasts a step grows to 2 steps and counts 4 - 2, one
  // whose sync does not counts 4 - 1.
  auto counted = [&](double t_f) { return t_f > t_step ? 2 : 3; };
  EXPECT_EQ(r["iterations_composed"].get<int>(), 2 * (counted(t0) + counted(t1)));
}

TEST(OuterSync, TraceRecordsTheFirstPhasePlayed) {
  // H = 1: every iteration is a sync phase, so the first phase played is not the plain step.
  auto c = checked(
      islands_scenario(2, 2, "{method: diloco, inner_steps: 1}", "simulation: {iterations: 3}\n"));
  const FixedTimes compute(1e-3);
  sim::SimulationInput in;
  in.scenario = &c.scenario;
  in.plan = &c.scenario.strategy.plan;
  in.model = &c.model;
  in.compression = c.compression;
  in.compute = &compute;
  sim::SimulationOptions options;
  options.trace_path = ::testing::TempDir() + "outer-sync-trace.json";
  core::Diagnostics diags;
  auto result = sim::simulate(in, options, diags);
  ASSERT_TRUE(result) << diags.format();
  EXPECT_EQ(sim::to_json(*result)["outer_sync"]["count"], 3);
  std::ifstream file(options.trace_path);
  const Json trace = Json::parse(file);
  bool outer = false;
  for (const auto& e : trace["traceEvents"])
    if (e.value("name", "").find("outer sync") != std::string::npos) outer = true;
  EXPECT_TRUE(outer);
}

// ---- iterations over time ---------------------------------------------------------------------

TEST(Iterations, IdenticalIterationsAreReusedAndTimeToTrainExtrapolates) {
  const FixedTimes compute(1e-3);
  const std::string one = islands_scenario(2, 1, "");
  const double T = run(checked(one), compute)["iteration_time_s"].get<double>();
  std::string yaml = islands_scenario(2, 1, "", "simulation: {iterations: 50}\n");
  yaml.replace(yaml.find("precision: bf16}"), 16, "precision: bf16, tokens: 1M}");
  const Json r = run(checked(yaml), compute);
  EXPECT_NEAR(r["iteration_time_s"].get<double>(), T, 1e-12);
  EXPECT_NEAR(r["iteration_time_stats"]["p99"].get<double>(), T, 1e-12);
  EXPECT_NE(r["iterations_played"].get<std::string>().find("once"), std::string::npos);
  // 2 sequences of 128 tokens per iteration: 1M tokens take ceil(1e6 / 256) iterations.
  EXPECT_NEAR(r["time_to_train_s"].get<double>(), std::ceil(1e6 / 256) * T, 1e-6);
  EXPECT_NEAR(r["tokens_per_day"].get<double>(), 256 / T * 86400, 1e-3);
  EXPECT_NE(r["time_to_train"]["note"].get<std::string>().find("extrapolated"), std::string::npos);
}

TEST(Iterations, TimeToTrainCountsFailuresAndCheckpoints) {
  const FixedTimes compute(1e-3);
  std::string yaml = islands_scenario(2, 1, "");
  yaml.replace(yaml.find("precision: bf16}"), 16,
               "precision: bf16, tokens: 1G, failures: {gpu_mtbf: 100h, checkpoint_interval: "
               "10min, checkpoint_cost: 30s, restart_time: 2min}}");
  const Json r = run(checked(yaml), compute);
  const double work = r["time_to_train_s"].get<double>();
  const Json& f = r["time_to_train"]["failures"];
  // By hand: 2 GPUs fail every 50 h; checkpoints every 9.5 min of work, 30 s each; a failure
  // loses 5 min + 2 min.
  const double overhead = work / 570 * 30;
  const double failures = (work + overhead) / (50 * 3600.0);
  EXPECT_EQ(f["gpus"].get<int>(), 2);
  EXPECT_NEAR(f["failures"].get<double>(), failures, 1e-9 * failures);
  EXPECT_NEAR(f["expected_time_s"].get<double>(), work + overhead + failures * 420, 1e-9 * work);
  EXPECT_NEAR(f["young_interval_s"].get<double>(), std::sqrt(2 * 30 * 50 * 3600.0), 1e-6);
  const std::string table = sim::format_iterations(r);
  EXPECT_NE(
      table.find("with failures (one per 4.167 d of a GPU; the job's 2 GPUs: one every 2.083 d)"),
      std::string::npos)
      << table;
  EXPECT_NE(table.find("Young's optimal checkpoint interval"), std::string::npos) << table;
}

TEST(Iterations, BandwidthTraceChangesIterationsAfterItsStep) {
  // Synchronous data parallelism across the WAN: every iteration all-reduces the gradients
  // over it. At W the iteration takes T_fast; the trace drops to W / 4 at 3.5 T_fast.
  const FixedTimes compute(1e-4);
  auto fast = checked(islands_scenario(2, 1, ""));
  const double T_fast = run(fast, compute)["iteration_time_s"].get<double>();
  std::string slow_yaml = islands_scenario(2, 1, "");
  slow_yaml.replace(slow_yaml.find("bandwidth: 1Gbps"), 16, "bandwidth: 250Mbps");
  const double T_slow = run(checked(slow_yaml), compute)["iteration_time_s"].get<double>();
  ASSERT_GT(T_slow, 2 * T_fast);
  const double W = 1e9 / 8;
  const double drop = 3.5 * T_fast;
  auto with_trace = [&](int iterations, double start) {
    auto c = checked(islands_scenario(2, 1, ""));
    c.scenario.simulation.iterations = iterations;
    c.scenario.simulation.start_time = core::Seconds(start);
    auto& wan = c.scenario.wan[0];
    wan.trace = "inline";
    wan.trace_steps = {{core::Seconds(0), core::BytesPerSecond(W)},
                       {core::Seconds(drop), core::BytesPerSecond(W / 4)},
                       {core::Seconds(1000), core::BytesPerSecond(W)}};
    return run(c, compute);
  };
  const Json r = with_trace(8, 0);
  const auto t = r["iteration_times_s"].get<std::vector<double>>();
  ASSERT_EQ(t.size(), 8u);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(t[k], T_fast, 1e-9 * T_fast) << k;
  EXPECT_GT(t[3], T_fast);
  EXPECT_LT(t[3], T_slow);
  for (int k = 4; k < 8; ++k) EXPECT_NEAR(t[k], T_slow, 1e-9 * T_slow) << k;
  EXPECT_NE(r["iterations_played"].get<std::string>().find("every"), std::string::npos);
  // start_time: the first iteration starts where the trace is at W / 4 already.
  EXPECT_NEAR(with_trace(1, drop + 1)["iteration_time_s"].get<double>(), T_slow, 1e-9 * T_slow);
}

// ---- the plan language ------------------------------------------------------------------------

std::string errors_of(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "test.yaml", diags);
  if (node)
    if (auto s = core::parse_scenario(*node, "test.yaml", diags)) apps::check_scenario(*s, diags);
  return diags.format();
}

TEST(OuterSync, BadSettingsAreRefusedWithWhereAndWhy) {
  const auto e1 =
      errors_of(islands_scenario(2, 1, "{method: diloco, inner_steps: 10, fragments: 3}"));
  EXPECT_NE(e1.find("strategy.outer_sync.fragments"), std::string::npos) << e1;
  EXPECT_NE(e1.find("do not divide inner_steps"), std::string::npos) << e1;
  const auto e2 = errors_of(islands_scenario(2, 1, "{method: dilocco}"));
  EXPECT_NE(e2.find("did you mean"), std::string::npos) << e2;
  const auto e3 = errors_of(
      islands_scenario(2, 1, "{method: diloco, inner_steps: 4, fragments: 2, overlap_steps: 3}"));
  EXPECT_NE(e3.find("overlap_steps"), std::string::npos) << e3;
  std::string one_island = islands_scenario(1, 2, "{method: diloco, inner_steps: 4}");
  const auto e4 = errors_of(one_island);
  EXPECT_NE(e4.find("outer sync joins islands"), std::string::npos) << e4;
  std::string uneven = islands_scenario(2, 1, "{method: diloco, inner_steps: 4}");
  uneven.replace(uneven.find("{cluster: b, layers: 8}"), 23,
                 "{cluster: b, layers: 4}, {cluster: b, layers: 4}");
  const auto e5 = errors_of(uneven);
  EXPECT_NE(e5.find("splits the model differently"), std::string::npos) << e5;
  const auto e6 = errors_of(islands_scenario(2, 1, "", "simulation: {iterations: 0}\n"));
  EXPECT_NE(e6.find("simulation.iterations"), std::string::npos) << e6;
  std::string tokens = islands_scenario(2, 1, "");
  tokens.replace(tokens.find("precision: bf16}"), 16, "precision: bf16, tokens: lots}");
  const auto e7 = errors_of(tokens);
  EXPECT_NE(e7.find("training.tokens"), std::string::npos) << e7;
}

TEST(OuterSync, PlanRoundTripsThroughJson) {
  auto c = checked(islands_scenario(
      2, 1, "{method: diloco, inner_steps: 8, fragments: 2, codec: int8, outer_lr: 0.5}"));
  const Json j = core::plan_to_json(c.scenario.strategy.plan);
  EXPECT_EQ(j["outer_sync"]["inner_steps"], 8);
  core::Diagnostics diags;
  auto back = core::parse_plan(core::from_json(j), "", diags);
  ASSERT_TRUE(back) << diags.format();
  EXPECT_EQ(back->outer_sync, c.scenario.strategy.plan.outer_sync);
  EXPECT_EQ(back->outer_sync.outer_lr, 0.5);
  EXPECT_EQ(back->outer_sync.codec.codec, "int8");
}

}  // namespace
}  // namespace hgsim
