// How long it takes to read and check a scenario, and to parse units: the cost every
// command pays before it does its real work.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// A whole `hgsim gpus` process (exec, dynamic loading, static initialisation, the command,
// exit); its time is the child's CPU time, user + sys (wait4), which the load of a shared
// machine disturbs less than wall time. `gpus` uses no GPU, so it does not load the CUDA
// module (core/cuda_module.hpp); the `cuda_preloaded` variant maps it and the CUDA
// libraries into the same command (LD_PRELOAD), as every command did before the module
// existed: the ratio of the two, in one run, is what loading CUDA costs at start-up.
void BM_StartupHgsimGpus(benchmark::State& state, bool cuda_preloaded) {
  std::string preload;
  if (cuda_preloaded) {
#ifdef HGSIM_CUDA_MODULE_PATH
    preload = HGSIM_CUDA_MODULE_PATH;
#else
    state.SkipWithError("no CUDA module in this build");
    return;
#endif
  }
  for (auto _ : state) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      if (!preload.empty()) ::setenv("LD_PRELOAD", preload.c_str(), 1);
      ::execl(HGSIM_BINARY, HGSIM_BINARY, "gpus", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    rusage usage{};
    if (pid < 0 || ::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      state.SkipWithError("hgsim gpus failed");
      return;
    }
    auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
    state.SetIterationTime(seconds(usage.ru_utime) + seconds(usage.ru_stime));
  }
}
BENCHMARK_CAPTURE(BM_StartupHgsimGpus, plain, false)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StartupHgsimGpus, cuda_preloaded, true)
    ->UseManualTime()
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond);

}  // namespace
