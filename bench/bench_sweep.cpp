// What a sweep adds to each point: the point's own process (fork, pipe, wait) and the
// database write, against simulating the same point in this process. The three run in one
// program on the same point, so compare them as a difference in one run (the machine is
// shared and its speed drifts):
//   BM_SweepPointSimulateOnly   simulate_point() here (the simulator forks its child)
//   BM_SweepPointInItsProcess   run_point_in_child(): the same, in a point process
//   BM_SweepPointRecord         one point's row written (one transaction, WAL)
// The overhead per point is (InItsProcess - SimulateOnly) + Record.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "apps/results_db.hpp"
#include "apps/run_point.hpp"
#include "apps/sweep_command.hpp"
#include "apps/validate.hpp"
#include "core/document.hpp"

namespace {

using namespace hgsim;

const std::string kScenario = std::string(HGSIM_SOURCE_DIR) + "/scenarios/scale/sweep-1000.yaml";

struct Loaded {
  core::Node document;
  std::unique_ptr<apps::SweepPoints> points;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    core::Diagnostics diags;
    Loaded out{*core::load_document(kScenario, diags), nullptr};
    out.points = std::make_unique<apps::SweepPoints>(out.document, kScenario, diags);
    return out;
  }();
  return l;
}

void BM_SweepPointSimulateOnly(benchmark::State& state) {
  core::Diagnostics diags;
  const auto point = loaded().points->point(555, diags);
  for (auto _ : state) {
    core::Diagnostics d;
    benchmark::DoNotOptimize(apps::simulate_point(point->checked, {}, d));
  }
}
BENCHMARK(BM_SweepPointSimulateOnly)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SweepPointInItsProcess(benchmark::State& state) {
  const apps::SweepJob job{loaded().points.get(), {}};
  for (auto _ : state) benchmark::DoNotOptimize(apps::run_point_in_child(job, 555));
}
BENCHMARK(BM_SweepPointInItsProcess)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_SweepPointRecord(benchmark::State& state) {
  const apps::SweepJob job{loaded().points.get(), {}};
  const std::string outcome = apps::run_point_in_child(job, 555);
  const auto path = std::filesystem::temp_directory_path() /
                    ("hgsim-bench-" + std::to_string(::getpid()) + ".sqlite");
  {
    apps::ResultsDb db(path.string(), true);
    apps::PointRow row;
    row.settings = R"({"wan[*].bandwidth": "1Gbps"})";
    row.status = "ok";
    row.iteration_time_s = row.tokens_per_s = row.mfu = 1.0;
    row.result = outcome;  // the size of a real row
    row.plan = "{}";
    row.finished_at = apps::utc_now();
    row.scenario_hash = "0123456789abcdef";
    long long k = 0;
    for (auto _ : state) {
      row.point = k++;
      db.record(row);
    }
    state.counters["row_bytes"] = static_cast<double>(outcome.size());
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path.string() + suffix);
}
BENCHMARK(BM_SweepPointRecord)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
