// The workload generator: a plan, a model and the compute-time model become the execution
// graph of one training iteration on a platform.
//
// What one iteration is, per pipeline replica: the schedule's forwards and backwards of
// every micro-batch on every stage (each op a chain of per-layer compute and tensor-
// parallel collectives), activations and their gradients sent between stages (resharded
// when neighbouring stages have different tp or dp), then each bucket of gradients
// all-reduced across every GPU that holds the same layers (overlapping the backward of
// other stages), then the optimizer step. The iteration ends when the last GPU's optimizer
// step ends.
//
// Folded fidelity simulates each stage of each pipeline once: one folded device stands
// for the stage's tp x dp GPUs of every replica, tensor-parallel collectives and the
// intra-cluster phases of gradient sync become delays in closed form on the same links,
// and transfers between folded devices carry the summed bytes of the GPUs they stand for
// (as that many TCP flows when they cross the WAN).
#pragma once

#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"
#include "sim/collectives.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::sim {

// The schedules a stage plays are models/schedule.hpp's.

struct WorkloadInput {
  const ResolvedPlan* plan = nullptr;  // placement, segments, reshard pieces, choices
  const kernels::ComputeModel* compute = nullptr;
  std::vector<const kernels::GpuSpec*> gpus;  // per cluster
  bool folded = false;
  // The graph's node limit, when lower than limits().graph_nodes (0: that limit). Past it
  // build_workload throws GraphTooLarge.
  std::int64_t max_graph_nodes = 0;
  // Only count the graph's nodes (Graph::count_only): the workload is for graph.size() alone.
  bool count_only = false;
  // Record each collective as a span of the graph (Graph::record_collectives): the Chakra
  // export writes it as one COMM_COLL_NODE per member.
  bool record_collectives = false;
  // Keep each compute node's FLOPs and bytes (Graph::record_op_counts): the Chakra export
  // writes them as num_ops and tensor_size.
  bool record_op_counts = false;
};

// Which stage a device works for (and how many GPUs it stands for).
struct DeviceRole {
  int pipeline = 0;
  int stage = 0;
  int replica = 0;  // folded: 0, standing for every replica
  int dp_rank = 0;  // folded: 0, standing for every dp rank
  int tp_rank = 0;  // folded: 0, standing for every tp rank
  int cp_rank = 0;  // folded: 0, standing for every cp rank
};

struct Workload {
  Platform platform;
  Graph graph;
  std::vector<DeviceRole> roles;  // per device
  // Per device: the positions (inside its cluster) of the GPUs it stands for.
  std::vector<std::vector<int>> gpus;
  // Per device: the seconds of layer compute it was given, by kernel class (what the
  // results' breakdown splits its layers' time by, sim/breakdown.hpp).
  std::vector<kernels::KernelSplit> layer_split;
  CodecStats activation_codec;  // pipeline traffic crossing the WAN
  CodecStats gradient_codec;    // gradient sync crossing the WAN
};

// Builds platform and graph. Problems (a plan folded fidelity cannot fold, clusters the
// WAN does not join) go to `diags`; the graph is finished. A graph past its node limit
// throws GraphTooLarge.
Workload build_workload(const WorkloadInput& in, core::Diagnostics& diags);

}  // namespace hgsim::sim
