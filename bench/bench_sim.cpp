// The simulator's speed and memory: activities per second of the engine on a synthetic
// graph, bytes per graph node, and one iteration of the scale scenarios (scenarios/scale/).
//
// SimGrid runs one engine per process, so every measured run happens in a child process
// (sim::run_isolated) and reports its own time: the benchmarks use manual time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

#include "apps/validate.hpp"
#include "kernels/gpu_catalog.hpp"
#include "sim/engine.hpp"
#include "sim/simulate.hpp"

namespace {

using namespace hgsim;

// 16 GPUs in 2 nodes (inline-model.yaml's cluster); each runs `steps` rounds of (compute, send to
// the next GPU, wait for the previous one's message): 3 activities per GPU per round, half of them
// transfers.
void BM_EngineSyntheticGraph(benchmark::State& state) {
  const int steps = static_cast<int>(state.range(0));
  core::Diagnostics diags;
  auto points = apps::check_scenario_file(
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/examples/inline-model.yaml", diags);
  const core::Scenario scenario = points->front().checked.scenario;
  double activities = 0, bytes_per_node = 0;
  for (auto _ : state) {
    const core::Json r = sim::run_isolated([&] {
      std::vector<sim::DeviceRequest> requests;
      for (int g = 0; g < 16; ++g) requests.push_back({0, g, 1});
      core::Diagnostics d;
      const sim::Platform p =
          sim::build_platform(scenario, {kernels::find_gpu(scenario.clusters[0].gpu)}, requests, d);
      const auto start = std::chrono::steady_clock::now();
      sim::Graph g;
      const int n = p.device_count();
      const int label = g.label("step");
      std::vector<sim::NodeId> last(n);
      for (int i = 0; i < n; ++i) last[i] = g.join();
      for (int s = 0; s < steps; ++s) {
        std::vector<sim::NodeId> computed(n), arrived(n);
        for (int i = 0; i < n; ++i) {
          computed[i] = g.compute(i, 1e-4, sim::Work::forward, label);
          g.edge(last[i], computed[i]);
        }
        for (int i = 0; i < n; ++i) {
          arrived[(i + 1) % n] = g.transfer(i, (i + 1) % n, 1e6, sim::Work::pp_comm, label);
          g.edge(computed[i], arrived[(i + 1) % n]);
        }
        last = arrived;
      }
      g.finish();
      const double bytes = static_cast<double>(g.memory_bytes()) / g.size();
      const auto times = sim::execute(g, p);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return core::Json{
          {"seconds", seconds}, {"activities", times.activities}, {"bytes_per_node", bytes}};
    });
    state.SetIterationTime(r["seconds"].get<double>());
    activities = r["activities"];
    bytes_per_node = r["bytes_per_node"];
  }
  state.counters["activities"] = activities;
  state.counters["activities_per_s"] =
      benchmark::Counter(activities * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["graph_bytes_per_node"] = bytes_per_node;
}
BENCHMARK(BM_EngineSyntheticGraph)
    ->Arg(2000)
    ->Arg(8000)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Appending nodes and edges as the workload generator does (a ring: each transfer after the
// one before), `state.range(0)` nodes: sim::Graph, which keeps them in fixed chunks that never
// move, against the std::vector it used before (arg 1: the vector, for the ratio in one run).
// Page faults count: every iteration starts from empty memory, as a simulation does.
void BM_GraphAppend(benchmark::State& state) {
  const auto nodes = static_cast<sim::NodeId>(state.range(0));
  const bool vector_baseline = state.range(1) == 1;
  double bytes_per_node = 0;
  for (auto _ : state) {
    if (vector_baseline) {
      std::vector<sim::GraphNode> v;
      std::vector<std::pair<sim::NodeId, sim::NodeId>> edges;
      for (sim::NodeId i = 0; i < nodes; ++i) {
        v.push_back({1e6, static_cast<int>(i % 512), static_cast<int>((i + 1) % 512), 0, -1, 1,
                     sim::Op::transfer, sim::Work::dp_comm});
        if (i > 0) edges.emplace_back(i - 1, i);
      }
      benchmark::DoNotOptimize(v.data());
      bytes_per_node = static_cast<double>(v.capacity() * sizeof(sim::GraphNode) +
                                           edges.capacity() * sizeof(edges[0])) /
                       nodes;
    } else {
      sim::Graph g;
      const int label = g.label("dp ring step");
      for (sim::NodeId i = 0; i < nodes; ++i) {
        g.transfer(static_cast<int>(i % 512), static_cast<int>((i + 1) % 512), 1e6,
                   sim::Work::dp_comm, label);
        if (i > 0) g.edge(i - 1, i);
      }
      benchmark::DoNotOptimize(&g);
      bytes_per_node = static_cast<double>(g.memory_bytes()) / nodes;
    }
  }
  state.SetItemsProcessed(state.iterations() * nodes);
  state.counters["bytes_per_node"] = bytes_per_node;
}
BENCHMARK(BM_GraphAppend)
    ->ArgNames({"nodes", "vector"})
    ->Args({4 << 20, 0})
    ->Args({4 << 20, 1})
    ->Unit(benchmark::kMillisecond);

// One iteration of a scale scenario, graph building and results included; `collectives`:
// simulation.collectives for the run ("steps", "pipelined"), or "" for the scenario's own.
void BM_ScaleScenario(benchmark::State& state, const std::string& name,
                      const std::string& collectives) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_file(
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/scale/" + name + ".yaml", diags);
  if (!points) {
    state.SkipWithError(diags.format().c_str());
    return;
  }
  const auto& c = points->front().checked;
  core::Scenario scenario = c.scenario;
  if (!collectives.empty())
    scenario.simulation.collectives = collectives == "steps"
                                          ? core::CollectiveGranularity::steps
                                          : core::CollectiveGranularity::pipelined;
  const kernels::KernelModel kernel_model;
  sim::SimulationInput in{&scenario, &scenario.strategy.plan, "strategy",
                          &c.model,  c.compression,           &kernel_model};
  sim::SimulationStats stats;
  for (auto _ : state) {
    core::Diagnostics d;
    auto result = sim::simulate(in, {}, d, &stats);
    if (!result) {
      state.SkipWithError(d.format().c_str());
      return;
    }
    state.SetIterationTime(stats.wall_s);
  }
  state.counters["gpus"] = static_cast<double>(c.scenario.total_gpus());
  state.counters["activities"] = stats.activities;
  state.counters["graph_nodes"] = stats.graph_nodes;
  state.counters["peak_rss_MiB"] = stats.peak_rss_bytes / (1024.0 * 1024.0);
  // Memory beside time: what the execution graph holds per node, and the whole child's
  // peak (graph, SimGrid, results) per activity run.
  state.counters["graph_bytes_per_node"] = stats.graph_bytes / std::max(stats.graph_nodes, 1.0);
  state.counters["peak_bytes_per_activity"] =
      stats.peak_rss_bytes / std::max(stats.activities, 1.0);
}
BENCHMARK_CAPTURE(BM_ScaleScenario, megatron_175b_1536_folded, std::string("megatron-175b-1536"),
                  std::string())
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_ScaleScenario, megatron_1t_3072_folded, std::string("megatron-1t-3072"),
                  std::string())
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_ScaleScenario, hetero_256_full, std::string("hetero-256-full"), std::string())
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
// The same workload on 128 GPUs (DP 32), per collective granularity (simulation.collectives):
// steps, every ring step its own transfers (1.2 M activities, seconds); pipelined, one flow
// per ring edge.
BENCHMARK_CAPTURE(BM_ScaleScenario, astra_gpt_6_7b_128_full_steps,
                  std::string("astra-gpt-6.7b-128"), std::string("steps"))
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_ScaleScenario, astra_gpt_6_7b_128_full_pipelined,
                  std::string("astra-gpt-6.7b-128"), std::string("pipelined"))
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
// ASTRA-sim 2.0's GPT-6.7B workload on 512 GPUs, every GPU simulated: steps, 18 M activities
// (a minute; run it on its own with --benchmark_filter=astra); pipelined, one flow per edge.
BENCHMARK_CAPTURE(BM_ScaleScenario, astra_gpt_6_7b_512_full_steps,
                  std::string("astra-gpt-6.7b-512"), std::string("steps"))
    ->UseManualTime()
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_ScaleScenario, astra_gpt_6_7b_512_full_pipelined,
                  std::string("astra-gpt-6.7b-512"), std::string("pipelined"))
    ->UseManualTime()
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

}  // namespace
