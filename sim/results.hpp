// The results of one simulated iteration as a type: one struct, one JSON writer (and the
// reader that brings it back from the simulator's child process), one table renderer. The
// CLI (`hgsim run`, `hgsim sweep`), the planner and the Python module all use it.
//
// The JSON form (`hgsim run --json`; keys are stable, new ones are added beside them):
//   scenario, plan (the plan that ran: `hgsim run SCENARIO --plan <it>` reproduces the
//   result), iteration_time_s, tokens_per_s,
//   flops: {model_flops, hardware_flops} per iteration (model: 6N + attention, what MFU
//          counts; hardware: with the recomputation the plan runs),
//   model_tflops_per_gpu (model FLOPs / time / GPUs used), mfu (model FLOPs over the peak of
//   the GPUs used), mfu_available (over the peak of every GPU the scenario has),
//   gpus (= gpus_used), gpus_used, gpus_available,
//   devices[]: id, cluster, gpu, pipeline, stage, compute_s, comm_exposed_s, bubble_s,
//              idle_s, memory{peak_bytes, capacity_bytes, fits},
//              breakdown{gemm_s, attention_s, memory_s, overhead_s, optimizer_s, codec_s,
//              tp_comm_s, cp_comm_s, pp_comm_s, dp_comm_s, bubble_s} (sim/breakdown.hpp)
//   stages[]:  pipeline, stage, cluster, gpu, gpus, breakdown{...}: the mean of its GPUs'
//              breakdowns (derived from devices[], not read back)
//   links[]:   name, kind (nvlink | nic | wan), bytes, busy_s; WAN links also
//              flow_cap_bytes_per_s (one TCP flow: window / round-trip time; null when the
//              round trip is zero: no cap) and max_flows (the most flows the plan had on it
//              at once)
//   compression: per traffic class the codec, raw and wire bytes, bytes saved; codec_time_s
//   warnings[]: what the user should know (a WAN link the plan's flows cannot fill)
//   the keys sim/iterations.hpp adds (iterations_simulated, iteration_times_s, outer_sync,
//   tokens_per_day, time_to_train_s, ...)
//   provenance: where every number comes from
//   simulator: fidelity, network model, graph nodes and edges, activities
//
// Per device: compute_s is time computing; comm_exposed_s time communicating while not
// computing; bubble_s time doing neither between its first and last pipeline op; idle_s
// the rest of the iteration. The four add up to iteration_time_s, and so do the parts of
// its breakdown (its compute by kernel class, optimizer and codec; its exposed
// communication by class; bubble_s there is bubble_s + idle_s here).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "sim/breakdown.hpp"

namespace hgsim::sim {

struct DeviceResult {
  std::string id;  // "cluster/nN/gG"
  std::string cluster;
  std::string gpu;
  int pipeline = 0;
  int stage = 0;
  double compute_s = 0;
  double comm_exposed_s = 0;
  double bubble_s = 0;
  double idle_s = 0;
  double memory_peak_bytes = 0;
  double memory_capacity_bytes = 0;
  bool fits = true;
  Breakdown breakdown{};
};

struct LinkResult {
  std::string name;
  std::string kind;  // nvlink | nic | wan
  double bytes = 0;
  double busy_s = 0;
  std::optional<double> flow_cap_bytes_per_s;  // WAN links
  int max_flows = 0;                           // WAN links: most flows at once
  double bytes_per_s = 0;                      // the link's bandwidth (not in the JSON)
};

struct CodecResult {
  std::string codec;  // compress::describe
  double wan_raw_bytes = 0;
  double wan_wire_bytes = 0;
};

struct SimulatorInfo {
  std::string fidelity;
  std::string network_model;
  double graph_nodes = 0;
  double graph_edges = 0;
  double activities = 0;
  double iterations_played = 1;  // distinct phases played (sim/iterations.hpp)
  std::string simgrid;           // the SimGrid library that played it: "3.32.0"
};

struct Results {
  std::string scenario;
  core::Plan plan;
  double iteration_time_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0;     // per iteration, 6N + attention, no recomputation
  double hardware_flops = 0;  // per iteration, with the plan's recomputation
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  double mfu_available = 0;
  int gpus_used = 0;
  int gpus_available = 0;
  std::vector<DeviceResult> devices;
  std::vector<LinkResult> links;
  CodecResult wan_activations;
  CodecResult wan_gradients;
  double codec_time_s = 0;
  std::vector<std::string> warnings;
  std::map<std::string, std::string> compute_provenance;  // per GPU name
  std::string compute_model;
  std::string codec_provenance;
  std::string memory_provenance;
  std::string network_provenance;
  std::string iterations_provenance;
  SimulatorInfo simulator;
  // What sim/iterations.hpp reports (iterations_simulated, iteration_times_s,
  // iteration_time_stats, outer_sync, tokens_per_day, time_to_train_s, ...): top-level keys
  // of the JSON form, kept as they are written there.
  core::Json iterations = core::Json::object();
};

core::Json to_json(const Results& r);
// The reader of to_json's form (the simulator's child process sends results as JSON).
Results results_from_json(const core::Json& j);
// The short table a person reads at a glance.
std::string format_table(const Results& r);

// One (pipeline, stage)'s breakdown: the mean over its GPUs, in devices' order of stages.
struct StageBreakdown {
  int pipeline = 0;
  int stage = 0;
  std::string cluster;
  std::string gpu;
  int gpus = 0;
  Breakdown breakdown{};
};
std::vector<StageBreakdown> stage_breakdowns(const Results& r);

}  // namespace hgsim::sim
