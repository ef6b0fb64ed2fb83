// One simulated training iteration, from a checked scenario and plan to the results JSON.
//
// The results contract (`hgsim run --json`):
//   iteration_time_s, tokens_per_s, model_tflops_per_gpu, mfu,
//   devices[]: id, cluster, gpu, pipeline, stage, compute_s, comm_exposed_s, bubble_s,
//              idle_s, memory{peak_bytes, capacity_bytes, fits}
//   links[]:   name, kind (nvlink | nic | wan), bytes, busy_s
//   compression: per traffic class the codec, raw and wire bytes, bytes saved; codec_time_s
//   provenance: where every number comes from
//   simulator: fidelity, network model, graph nodes, activities, wall time, peak memory
//
// Per device: compute_s is time computing; comm_exposed_s time communicating while not
// computing; bubble_s time doing neither between its first and last pipeline op; idle_s
// the rest of the iteration (waiting for gradient sync of others, the optimizer of others).
// The four add up to iteration_time_s.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"

namespace hgsim::sim {

struct SimulationInput {
  const core::Scenario* scenario = nullptr;
  const core::Plan* plan = nullptr;  // the scenario's strategy or a --plan file
  std::string plan_path;             // "strategy" or the plan file, for messages
  const core::ModelConfig* model = nullptr;
  compress::CompressionSpecs compression;
  const kernels::ComputeModel* compute = nullptr;
};

struct SimulationOptions {
  core::Fidelity fidelity = core::Fidelity::automatic;  // overrides the scenario's if set
  bool fidelity_from_cli = false;
  bool allow_oom = false;
  std::string trace_path;     // Chrome trace, streamed
  std::string graph_path;     // execution graph JSON
  std::string platform_path;  // SimGrid platform XML
};

// Full fidelity up to this many GPUs, folded above (fidelity: auto).
constexpr int full_fidelity_max_gpus = 256;

// How the simulation itself went (not part of the results: they must not depend on it).
struct SimulationStats {
  double wall_s = 0;          // in the child: building, simulating, summing up
  double peak_rss_bytes = 0;  // the child's peak resident memory
  double graph_nodes = 0;
  double graph_bytes = 0;  // memory the execution graph holds
  double activities = 0;   // SimGrid activities run
};

// Runs `body` in a child process and returns what it returned: SimGrid allows one engine
// per process. Throws std::runtime_error with the child's message when it throws, or when
// it dies.
core::Json run_isolated(const std::function<core::Json()>& body);

// What one body of run_isolated_all gave: its value, or why it failed.
struct IsolatedResult {
  core::Json value;
  std::string failure;  // empty when it succeeded
};
// Runs every body in its own child process, at most `jobs` at once, and returns their
// results in order (the children are independent: on a machine with several cores they
// run side by side).
std::vector<IsolatedResult> run_isolated_all(const std::vector<std::function<core::Json()>>& bodies,
                                             int jobs);

// Simulates one iteration in a child process (SimGrid allows one engine per process).
// Returns the results JSON; problems (a plan that does not fit in memory without
// allow_oom, a WAN that does not join the clusters, a plan folding cannot handle, the
// simulator failing) go to `diags`.
std::optional<core::Json> simulate(const SimulationInput& in, const SimulationOptions& options,
                                   core::Diagnostics& diags, SimulationStats* stats = nullptr);

// simulate() for several inputs at once, each in its own child process, at most `jobs` at a
// time; `diags` gets one entry per input. The results are those simulate() gives.
std::vector<std::optional<core::Json>> simulate_all(const std::vector<SimulationInput>& inputs,
                                                    const std::vector<SimulationOptions>& options,
                                                    std::vector<core::Diagnostics>& diags,
                                                    int jobs);

// The short table a person reads at a glance.
std::string format_results(const core::Json& results);

}  // namespace hgsim::sim
