// The planner's speed: microseconds per candidate of the analytic cost model, the search's
// candidates per second, and the whole of `hgsim plan` (search and verification of the
// best three by simulation) on four clusters of 64 GPUs of four types with GPT-3 13B
// (scenarios/paper/hetero-4x64-13b.yaml; goal: under 10 s).
#include <benchmark/benchmark.h>

#include "apps/validate.hpp"
#include "kernels/compute_model.hpp"
#include "models/transformer.hpp"
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

// The flat roofline the kernel model replaced (matmul FLOPs at 70% of peak, element-wise
// traffic at 80% of bandwidth, one formula per phase): kept here only as the baseline of
// the CostModel ratio (the kernel model may cost at most 2x per candidate).
class FlatRoofline final : public kernels::ComputeModel {
 public:
  kernels::PhaseTimes layer(const kernels::GpuSpec& gpu,
                            const kernels::LayerWork& w) const override {
    const double rate = 0.7 * kernels::math_rate(gpu, w.precision)->rate.value();
    const double t = std::max(w.tp, 1);
    const double flops = models::layer_forward_flops(*w.model, w.sequences, w.seq_len).value() / t;
    const double bytes =
        models::weight_bytes(models::layer_parameters(*w.model) / t, w.precision).value();
    const double forward = flops / rate + bytes / (0.8 * gpu.memory_bandwidth.value());
    return {core::Seconds(forward), core::Seconds(2 * forward), core::Seconds(0)};
  }
  kernels::PhaseTimes logits(const kernels::GpuSpec& gpu,
                             const kernels::LayerWork& w) const override {
    const double rate = 0.7 * kernels::math_rate(gpu, w.precision)->rate.value();
    const double forward =
        models::logits_forward_flops(*w.model, w.sequences, w.seq_len).value() / w.tp / rate;
    return {core::Seconds(forward), core::Seconds(2 * forward), core::Seconds(0)};
  }
  core::Seconds optimizer_step(const kernels::GpuSpec& gpu, double parameters, core::Precision,
                               core::Optimizer) const override {
    return core::Seconds(parameters * 16 / (0.8 * gpu.memory_bandwidth.value()));
  }
  std::string provenance(const kernels::GpuSpec&) const override { return "estimated"; }
};

void BM_CostModelFlatRoofline(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const FlatRoofline flat;
  const kernels::KernelModel kernel_model;
  // The same plan as BM_CostModelPerCandidate (found with the kernel model), costed flat.
  const auto search_ctx = planner::make_context(c.scenario, c.model, c.compression, kernel_model);
  planner::Options options;
  options.time_budget_s = 30;
  const core::Plan plan = planner::search(search_ctx, options).ranked.front().plan;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, flat);
  for (auto _ : state) benchmark::DoNotOptimize(planner::estimate(ctx, plan).iteration_s);
}
BENCHMARK_CAPTURE(BM_CostModelFlatRoofline, hetero_4x64_13b, std::string("hetero-4x64-13b"))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CostModelFlatRoofline, two_cities_llama2_7b,
                  std::string("two-cities-llama2-7b"))
    ->Unit(benchmark::kMicrosecond);

// One candidate costed: the best plan of the scenario (its pipelines, stages and gradient
// sync as the search costs them).
void BM_CostModelPerCandidate(benchmark::State& state, const std::string& name) {
  const auto c = load(name);
  const kernels::KernelModel kernel_model;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, kernel_model);
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
  const kernels::KernelModel kernel_model;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, kernel_model);
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
  const kernels::KernelModel kernel_model;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, kernel_model);
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
  const kernels::KernelModel kernel_model;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, kernel_model);
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
