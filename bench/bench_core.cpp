// How long it takes to read and check a scenario, and to parse units: the cost every
// command pays before it does its real work.
#include <benchmark/benchmark.h>

#include "apps/validate.hpp"
#include "core/units.hpp"

namespace {

void BM_ParseBandwidth(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(hgsim::core::parse_bandwidth("12.5 Gbit/s"));
}
BENCHMARK(BM_ParseBandwidth);

void BM_CheckScenario(benchmark::State& state) {
  const std::string path =
      std::string(HGSIM_SOURCE_DIR) + "/scenarios/examples/four-regions-sweep.yaml";
  for (auto _ : state) {
    hgsim::core::Diagnostics diags;
    benchmark::DoNotOptimize(hgsim::apps::check_scenario_file(path, diags));
  }
}
BENCHMARK(BM_CheckScenario)->Unit(benchmark::kMicrosecond);

}  // namespace
