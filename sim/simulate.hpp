// One simulated training iteration, from a checked scenario and plan to its results.
//
// The results are sim::Results (sim/results.hpp): one struct, its JSON form and its table.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"
#include "sim/checked_plan.hpp"
#include "sim/resolved_plan.hpp"
#include "sim/results.hpp"
#include "sim/trace.hpp"

namespace hgsim::sim {

// The scenario as written and its codecs; simulate() applies the plan's own choices
// (sim/resolved_plan.hpp), so a plan runs alike whoever simulates it.
struct SimulationInput {
  const core::Scenario* scenario = nullptr;
  const core::Plan* plan = nullptr;  // the scenario's strategy or a --plan file
  std::string plan_path;             // "strategy" or the plan file, for messages
  const core::ModelConfig* model = nullptr;
  compress::CompressionSpecs compression;  // the scenario's policy, typed
  const kernels::ComputeModel* compute = nullptr;
  // `plan` checked and resolved against `scenario` already (apps::CheckedScenario's own plan,
  // a checked --plan file): simulate reads it instead of resolving again. Null: resolved here.
  std::shared_ptr<const CheckedPlan> checked;
};

struct SimulationOptions {
  core::Fidelity fidelity = core::Fidelity::automatic;  // overrides the scenario's if set
  bool fidelity_from_cli = false;
  bool allow_oom = false;
  std::string trace_path;     // Chrome trace, streamed
  TraceFilter trace_filter;   // what the trace keeps (sim/trace.hpp)
  std::string graph_path;     // execution graph JSON
  std::string platform_path;  // SimGrid platform XML
  std::string chakra_prefix;  // Chakra ET, one file per GPU (sim/chakra.hpp)
};

// How the simulation itself went (not part of the results: they must not depend on it).
struct SimulationStats {
  double wall_s = 0;          // in the child: building, simulating, summing up
  double peak_rss_bytes = 0;  // the child's peak resident memory
  double graph_nodes = 0;
  double graph_bytes = 0;  // memory the execution graph holds
  double activities = 0;   // activities played (NodeTimes::activities)
};

// Runs `body` in a child process and returns what it returned: SimGrid allows one engine
// per process. Throws std::runtime_error with the child's message when it throws, or when
// it dies.
core::Json run_isolated(const std::function<core::Json()>& body);

// What one body of run_isolated_all gave: its value, or why it failed.
struct IsolatedResult {
  core::Json value;
  std::string failure;  // empty when it succeeded
  bool stopped = false;  // not run to its end: the StopRule stopped it (or it never started)
};
// When a batch of isolated runs may stop early: past `deadline`, as soon as `min_succeeded`
// bodies have succeeded, the children still running are killed and the bodies not started
// are not; each of them fails with `why` and is marked stopped. Without a deadline every
// body runs to its end.
struct StopRule {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::size_t min_succeeded = 1;
  std::string why = "stopped";
};
// Runs every body in its own child process, at most `jobs` at once, and returns their
// results in order (the children are independent: on a machine with several cores they
// run side by side).
std::vector<IsolatedResult> run_isolated_all(const std::vector<std::function<core::Json()>>& bodies,
                                             int jobs, const StopRule& stop = {});

// Simulates one iteration in a child process (SimGrid allows one engine per process).
// Returns the results; problems (a plan that does not fit in memory without
// allow_oom, a WAN that does not join the clusters, a plan folding cannot handle, the
// simulator failing) go to `diags`.
std::optional<Results> simulate(const SimulationInput& in, const SimulationOptions& options,
                                core::Diagnostics& diags, SimulationStats* stats = nullptr);

// The fidelity simulate() plays `in` at under `options`, decided as simulate() decides it
// (the option's, else the scenario's, else automatic: full up to full_fidelity_max_gpus GPUs
// while the full graph, counted, stays within full_fidelity_max_graph_nodes), without
// building the workload it would play. Folded where the rule folds even if folding then
// fails (simulate() falls back to full). automatic, with the problems in `diags`, when the
// plan cannot be resolved.
core::Fidelity fidelity_for(const SimulationInput& in, const SimulationOptions& options,
                            core::Diagnostics& diags);
// simulate() for several inputs at once, each in its own child process, at most `jobs` at a
// time; `diags` gets one entry per input. The results are those simulate() gives.
// Under `stop`, an input it stopped has no result, its reason in `diags`, and true in
// `stopped` (when given).
std::vector<std::optional<Results>> simulate_all(const std::vector<SimulationInput>& inputs,
                                                 const std::vector<SimulationOptions>& options,
                                                 std::vector<core::Diagnostics>& diags, int jobs,
                                                 const StopRule& stop = {},
                                                 std::vector<bool>* stopped = nullptr);

}  // namespace hgsim::sim
