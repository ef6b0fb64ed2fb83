// The analytic cost model: the iteration time of a plan in closed form, from the same
// compute-time (kernels::ComputeModel), codec (compress::code_transfer), memory and FLOP
// (models/) functions and the same collective closed forms (sim/collectives.hpp) that the
// simulator uses, on the same routes (sim::build_platform: least-latency WAN paths and the
// per-flow TCP-window cap).
//
// What it computes, per pipeline (all replicas run in lockstep):
//   F_s, B_s   forward and backward of one micro-batch on stage s: layers x layer times
//              (+ recompute), the tensor-parallel all-reduces on NVLink (2 per layer each
//              way, 2 more with full recomputation), the logits on the last stage, and the
//              codec time of WAN transfers the stage encodes or decodes;
//   X_s        the transfer of one micro-batch's activations from stage s to s + 1 (and
//              of their gradients back): latency + wire bytes / min(bandwidth, flows x
//              window/RTT, NIC ports), + the receiver's tensor-parallel all-gather;
//   fill       one micro-batch's round trip: sum_s (F_s + B_s) + 2 sum_s X_s;
//   period     the steady-state time per micro-batch, the largest of: max_s (F_s + B_s);
//              per WAN link, the wire bytes of all replicas / bandwidth; for 1F1B the
//              in-flight bound: stage s keeps min(p - s, m) micro-batches in flight and
//              each needs the round trip from s to the last stage and back;
//   pipeline   1F1B: fill + (m - 1) period ((m + p - 1)(t_f + t_b) when balanced);
//              GPipe: the forwards and the backwards each as a pipeline of their own;
//              interleaved over v chunks: max(F+B) + (sum - max)/v + comm + (m - 1) period
//              ((m + (p - 1)/v)(t_f + t_b) when balanced).
// Gradient sync: the layers are cut into segments held by the same stages (as the
// simulator does); per segment, buckets of all-reduce in closed form (ring inside one
// cluster; hierarchical across clusters: reduce-scatter inside, a ring of the cluster
// leaders over the WAN carrying lanes x rings flows (sim::hierarchical_lanes) with the
// gradient codec, all-gather
// inside). A segment's sync starts when the last of its holders finished its last backward
// (stage s finishes sum_{j<s} (B_j + X_j) before stage 0) and after the holder's previous
// segment, so sync overlaps the backward of earlier stages. Then the optimizer step. The
// iteration is the latest optimizer end. Traffic of different pipelines sharing a WAN link
// is counted as a lower bound (bytes / bandwidth), not as contention.
#pragma once

#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "sim/collectives.hpp"
#include "sim/platform.hpp"

namespace hgsim::planner {

// Everything the model needs about a scenario, resolved once.
struct Context {
  const core::Scenario* scenario = nullptr;
  const core::ModelConfig* model = nullptr;
  compress::CompressionSpecs compression;
  const kernels::ComputeModel* compute = nullptr;
  std::vector<const kernels::GpuSpec*> gpus;  // per cluster

  // Between clusters a and b (a != b): one-way latency of the route (WAN hops and both
  // NIC hops), the narrowest WAN bandwidth along it, the per-flow TCP-window cap, and the
  // directed WAN links it crosses (indices into `wan_link_bandwidth`).
  std::vector<std::vector<double>> latency;
  std::vector<std::vector<double>> wan_bandwidth;
  std::vector<std::vector<double>> flow_cap;
  std::vector<std::vector<std::vector<int>>> wan_links;
  std::vector<double> wan_link_bandwidth;
  std::vector<std::vector<bool>> connected;

  int cluster_index(const std::string& name) const;
};

// Resolves GPUs and routes. Throws std::invalid_argument on an unknown GPU.
Context make_context(const core::Scenario& s, const core::ModelConfig& model,
                     const compress::CompressionSpecs& compression,
                     const kernels::ComputeModel& compute);

struct StageEstimate {
  double forward_s = 0;   // F: one micro-batch
  double backward_s = 0;  // B: one micro-batch, recompute included
  double send_s = 0;      // X to the next stage, one direction (0 on the last)
  double sync_s = 0;      // gradient sync of its layers (all segments, all buckets)
  double optimizer_s = 0;
  double memory_bytes = 0;
  double capacity_bytes = 0;
};

struct PipelineEstimate {
  double pipeline_s = 0;  // first forward to the last backward of stage 0
  double period_s = 0;
  double fill_s = 0;
  std::vector<StageEstimate> stages;
};

struct Estimate {
  double iteration_s = 0;
  bool fits = true;         // every stage fits in its GPUs' memory
  std::string not_fitting;  // the first stage that does not, for messages
  std::vector<PipelineEstimate> pipelines;
};

// The iteration time of `plan` (which must be structurally valid: check_plan).
Estimate estimate(const Context& ctx, const core::Plan& plan);

// ---- pieces the search reuses -----------------------------------------------------------

// Per-layer forward and backward (recompute included) of one micro-batch on a stage of
// cluster c with this tp and dp, tensor-parallel all-reduces included (overlapped with the
// GEMMs under `tp_comm_overlap`). With cp > 1: the rank's 1 / cp of each sequence, without
// the ring's exchanges (they depend on the placement; estimate() prices them), so a lower
// bound on the stage's per-layer time.
struct LayerCost {
  double forward_s = 0;
  double backward_s = 0;   // recomputation included
  double recompute_s = 0;  // the part of backward_s that recomputes the forward
};
LayerCost layer_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch,
                     bool tp_comm_overlap = false, int cp = 1);
// One hop between two GPUs of cluster c, as the collectives' closed forms take it: the
// simulator's (sim/collectives.hpp), one definition for both.
using sim::nic_hop;
using sim::nvlink_hop;
// The logits layer on a last stage: forward + backward.
double logits_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch);

}  // namespace hgsim::planner
