// Multi-iteration simulation (simulation.iterations, sim/iterations.hpp): what N iterations
// cost against one. scenarios/diloco/two-regions.yaml has no bandwidth trace, so identical
// iterations are reused (the cost hardly grows with N); three-continents.yaml has a daily
// trace on every WAN link, so every iteration is played (the cost is about N x one).
//
// Each run happens in a child process (SimGrid: one engine per process) and reports its
// own wall time: manual time.
#include <benchmark/benchmark.h>

#include "apps/validate.hpp"
#include "kernels/compute_model.hpp"
#include "sim/simulate.hpp"

namespace {

using namespace hgsim;

// Point `point` of the scenario's sweep (0: synchronous, 1: DiLoCo, ...), N iterations.
void BM_Iterations(benchmark::State& state, const std::string& name) {
  const int point = static_cast<int>(state.range(0));
  const int iterations = static_cast<int>(state.range(1));
  core::Diagnostics diags;
  auto points = apps::check_scenario_file(
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/diloco/" + name + ".yaml", diags);
  if (!points || points->size() <= static_cast<std::size_t>(point)) {
    state.SkipWithError(diags.format().c_str());
    return;
  }
  auto c = (*points)[point].checked;
  c.scenario.simulation.iterations = iterations;
  const kernels::KernelModel kernel_model;
  sim::SimulationInput in{
      &c.scenario, &c.scenario.strategy.plan, "strategy", &c.model, c.compression, &kernel_model};
  sim::SimulationStats stats;
  for (auto _ : state) {
    core::Diagnostics d;
    if (!sim::simulate(in, {}, d, &stats)) {
      state.SkipWithError(d.format().c_str());
      return;
    }
    state.SetIterationTime(stats.wall_s);
  }
  state.counters["iterations"] = iterations;
  state.counters["activities"] = stats.activities;
  state.counters["peak_rss_MiB"] = stats.peak_rss_bytes / (1024.0 * 1024.0);
}
BENCHMARK_CAPTURE(BM_Iterations, two_regions, std::string("two-regions"))
    ->Args({0, 1})
    ->Args({0, 400})
    ->Args({1, 400})
    ->Args({2, 400})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_Iterations, three_continents, std::string("three-continents"))
    ->Args({0, 1})
    ->Args({0, 20})
    ->Args({0, 80})
    ->Args({1, 400})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
