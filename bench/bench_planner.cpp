// The planner's speed: microseconds per candidate of the analytic cost model, the search's
// candidates per second, and the whole of `hgsim plan` (search and verification of the
// best three by simulation) on four clusters of 64 GPUs of four types with GPT-3 13B
// (scenarios/paper/hetero-4x64-13b.yaml; goal: under 10 s).
#include <benchmark/benchmark.h>

#include "apps/validate.hpp"
#include "kernels/compute_model.hpp"
#include "planner/baselines.hpp"
#include "planner/cost_model.hpp"
#include "planner/planner.hpp"

namespace {

using namespace hgsim;

apps::CheckedScenario load(const std::string& name) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_file(
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/paper/" + name + ".yaml", diags);
  if (!points) throw std::runtime_error(diags.format());
  return points->front().checked;
}

// One candidate costed: the best plan of the scenario (its pipelines, stages and gradient
// sync as the search costs them).
void BM_CostModelPerCandidate(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const kernels::RooflineModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  planner::Options options;
  options.time_budget_s = 30;
  const auto ranked = planner::search(ctx, options).ranked;
  const core::Plan plan = ranked.front().plan;
  int stages = 0;
  for (const auto& p : plan.pipelines) stages += static_cast<int>(p.stages.size());
  for (auto _ : state) benchmark::DoNotOptimize(planner::estimate(ctx, plan).iteration_s);
  state.counters["stages"] = stages;
}
BENCHMARK_CAPTURE(BM_CostModelPerCandidate, hetero_4x64_13b, std::string("hetero-4x64-13b"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CostModelPerCandidate, two_cities_llama2_7b,
                  std::string("two-cities-llama2-7b"))
    ->Unit(benchmark::kMicrosecond);

// The enumeration alone (partitions, costs, pruning): candidates per second.
void BM_Search(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const kernels::RooflineModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  long evaluated = 0;
  for (auto _ : state) evaluated = planner::search(ctx, planner::Options{}).evaluated;
  state.counters["candidates"] = static_cast<double>(evaluated);
  state.counters["candidates_per_s"] = benchmark::Counter(
      static_cast<double>(evaluated), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_Search, hetero_4x64_13b, std::string("hetero-4x64-13b"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// Everything `hgsim plan` does without baselines: search, then simulate the best three.
void BM_PlanAndVerify(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const kernels::RooflineModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  double simulated = 0;
  for (auto _ : state) {
    const auto r = planner::plan(ctx, planner::Options{});
    simulated = r.best ? r.best->simulated_s : -1;
  }
  state.counters["iteration_s"] = simulated;
}
BENCHMARK_CAPTURE(BM_PlanAndVerify, hetero_4x64_13b, std::string("hetero-4x64-13b"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// The same with --baselines: the planner, then every baseline planned and simulated.
void BM_PlanWithBaselines(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const kernels::RooflineModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  double baselines = 0;
  for (auto _ : state) {
    auto r = planner::plan(ctx, planner::Options{});
    const auto b = planner::run_baselines(ctx, planner::Options{});
    if (r.best) planner::adopt_faster_baselines(ctx, planner::Options{}, b, r);
    baselines = static_cast<double>(b.size());
  }
  state.counters["baselines"] = baselines;
}
BENCHMARK_CAPTURE(BM_PlanWithBaselines, hetero_4x64_13b, std::string("hetero-4x64-13b"))
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
