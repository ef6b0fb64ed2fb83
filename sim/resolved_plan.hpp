// One model of a plan: a scenario and a plan become the one description of the work that
// `hgsim check`, the planner's analytic model, the workload generator, the baselines, the
// Python module and the live runner (through `_hgsim`) all read:
//
//   - the plan's effective choices: recomputation, the codec of each WAN traffic class,
//     sequence parallelism and precision (the plan's own where it makes them, else the
//     scenario's) -- apply_plan_choices, the one place they are applied;
//   - every GPU's place (cluster, node, index in the node): place_groups, the one placement;
//   - each stage's layers (per model chunk), the segments of layers held by the same stages
//     (the unit of gradient sync) with their gradient buckets, and the reshard pieces
//     between neighbouring stages;
//   - the per-layer work of a stage (what the compute model costs).
//
// Placement. Tensor-parallel groups are placed cluster by cluster in the plan's order
// (pipelines, replicas, stages, dp ranks); a group takes consecutive GPUs of one node: the
// first node (in node order) that has room for it. When that leaves a group without room,
// the cluster's groups are placed again largest first (first-fit decreasing), which places
// every set of sizes that divide each other. What neither places, `check` refuses at the
// stage's key path; so whatever check accepts is placed on GPUs that exist.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "kernels/compute_model.hpp"

namespace hgsim::sim {

// ---- effective choices -----------------------------------------------------------------

struct PlanChoices {
  core::Recompute recompute = core::Recompute::none;
  compress::CompressionSpecs codecs;  // per WAN traffic class, typed
  // DiLoCo's pseudo-gradients across islands (the plan's outer_sync.codec, typed; none
  // without outer sync): resolved here once, read by the simulation and check --summary.
  compress::CodecSpec outer_sync_codec;
  bool sequence_parallel = false;
  core::Precision precision = core::Precision::bf16;
  core::Attention attention = core::Attention::flash;  // the scenario's training.attention
  int zero = 0;                                        // ZeRO stage 0-3
  core::GradReduce grad_reduce = core::GradReduce::overlap;
  bool tp_comm_overlap = false;
  // The scenario's training with the plan's recomputation: what memory and compute read.
  core::Training training;
};

// The plan's own recomputation and codecs where it chooses them, else the scenario's
// (`scenario_codecs`: the scenario's policy, typed), and the choices only a plan makes
// (sequence parallelism, ZeRO stage, gradient reduction, tp_comm_overlap, the outer-sync
// codec). Precision and attention are the scenario's. A plan's codecs are checked and typed
// here; problems are reported at `plan_path`.compression.* (`plan_path`.outer_sync.codec)
// and give nullopt.
std::optional<PlanChoices> apply_plan_choices(const core::Scenario& s,
                                              const compress::CompressionSpecs& scenario_codecs,
                                              const core::Plan& plan, const std::string& plan_path,
                                              core::Diagnostics& diags);

// The scenario's own choices (a plan that makes none: the plan-only choices at their
// defaults).
PlanChoices scenario_choices(const core::Scenario& s,
                             const compress::CompressionSpecs& scenario_codecs);

// What one layer computes per micro-batch on a GPU of a stage with this tp, dp and cp (its
// dp slice of the micro-batch, its cp chunk of every sequence, its tp shard), under these
// choices. A cp chunk is work of micro_batch / (dp cp) whole sequences: its s / cp queries
// against the keys before them (load-balanced causal) do 1 / cp of the attention.
kernels::LayerWork layer_work(const core::ModelConfig& model, const PlanChoices& choices,
                              int micro_batch, int tp, int dp, int cp = 1);
// Bytes of the activation tensor of `sequences` sequences at a stage boundary.
double boundary_bytes(const core::ModelConfig& model, const PlanChoices& choices, double sequences);

// ---- placement -------------------------------------------------------------------------

// One tensor-parallel group of one stage: (pipeline, replica, stage, dp rank, cp rank),
// placed on `tp` consecutive GPUs of one node, from `first_gpu` (its position in the
// cluster).
struct PlacedGroup {
  int pipeline = 0;
  int replica = 0;
  int stage = 0;
  int dp_rank = 0;
  int cluster = 0;  // index into scenario.clusters
  int tp = 1;
  int first_gpu = 0;
  int cp_rank = 0;
  int node(const core::Scenario& s) const;
};

// Where one GPU is.
struct GpuPlace {
  int cluster = 0;
  int node = 0;
  int index = 0;  // inside the node
  int position(const core::Scenario& s) const;
};

// "cluster/nN/gG": the simulator's device name of a GPU.
std::string gpu_name(const core::Cluster& c, int position);

// Every group of the plan, in the plan's order (pipelines, replicas, stages, dp ranks, cp
// ranks).
// Problems (an unknown cluster, a group no node has room for) go to `diags` at
// `plan_path`.pipelines[i].stages[j]; nullopt then.
std::optional<std::vector<PlacedGroup>> place_groups(const core::Scenario& s,
                                                     const core::Plan& plan,
                                                     const std::string& plan_path,
                                                     core::Diagnostics& diags);

// ---- layers, segments, buckets, reshard pieces ------------------------------------------

// Model chunks per stage: virtual_stages for the interleaved schedule, 1 otherwise.
int model_chunks(const core::Plan& plan);

// The layers of pipeline `pipeline` are cut into stages and chunks: chunk c of stage s holds
// layers [first, first + count). Stage 0 chunk 0 starts at layer 0; chunks follow stage
// order, all stages' chunk 0, then all stages' chunk 1, ...
struct LayerRange {
  int first = 0;
  int count = 0;
};
std::vector<std::vector<LayerRange>> stage_layers(const core::Pipeline& pipeline, int chunks);

// A run of consecutive layers held by the same (stage, chunk) in every pipeline: the unit
// of gradient sync. Its gradients (embedding on the first, final norm and LM head on the
// last) are all-reduced by every tensor-parallel group holding them, in `rings` parallel
// rings (one per tp rank of the smallest tp among them), each split into `buckets` equal
// buckets of `bucket_bytes`.
struct Segment {
  int first_layer = 0;
  int layers = 0;
  std::vector<std::pair<int, int>> holders;  // per pipeline: (stage, chunk)
  double parameters = 0;                     // of the whole segment, unsharded
  int members = 0;                           // tensor-parallel groups holding it
  int rings = 1;
  int buckets = 0;          // 0 when members < 2: nothing to sync
  double bucket_bytes = 0;  // per ring
  int first_bucket = 0;     // the number of its first bucket (backward order, synced only)
};

// Gradient buckets of `parameters` synchronised in `rings` parallel rings: ceil(bytes per
// ring / bucket) equal buckets of `bytes_per_ring`. The bytes are what the data-parallel step
// moves (models::gradient_sync_bytes: the main gradients in their dtype and, under ZeRO, the
// weight gathers that ride on the gradient stream).
struct GradientBuckets {
  int count = 1;
  double bytes_per_ring = 0;
};
GradientBuckets gradient_buckets(double parameters, int rings, const PlanChoices& choices,
                                 core::Bytes bucket);
// The lowest layer of bucket `bucket` of `buckets` of the segment of `layers` layers from
// `first_layer`: buckets fill from the segment's last layer down, bucket b covering its top ceil((b
// + 1) n / buckets) of n layers (at least one); with grad_reduce: overlap a bucket leaves once the
// last micro-batch's backward has finished this layer. The workload generator and the planner's
// cost model both ask here.
int bucket_lowest_layer(int first_layer, int layers, int buckets, int bucket);
// The buckets of one lowest layer are consecutive (the lowest layer never rises with the
// bucket): each run of them, in bucket order, found by galloping and bisecting, so that a
// segment of many buckets costs its runs (at most its layers) x log buckets.
struct BucketRun {
  int lowest = 0;  // the run's lowest layer (bucket_lowest_layer)
  int first = 0;   // its first and last bucket
  int last = 0;
};
std::vector<BucketRun> bucket_runs(int first_layer, int layers, int buckets);

// One piece of a tensor that the sender's slices (dp rank major, then cp rank, tp rank
// minor, each 1 / from_slices of it) and the receiver's (1 / to_slices each) reshard: units
// [begin, end) of `units` = lcm(from_slices, to_slices).
struct ReshardPiece {
  int from_slice = 0;
  int to_slice = 0;
  long begin = 0;
  long end = 0;
  long units = 1;
};
std::vector<ReshardPiece> reshard_pieces(const core::Stage& from, const core::Stage& to);

// ---- the resolved plan -----------------------------------------------------------------

struct ResolvedPlan {
  const core::ModelConfig* model = nullptr;
  core::Plan plan;
  const core::Scenario* scenario = nullptr;  // as written; its plan's choices are `choices`
  PlanChoices choices;
  int chunks = 1;
  std::vector<PlacedGroup> groups;                           // placement order
  std::vector<std::vector<std::vector<LayerRange>>> layers;  // [pipeline][stage][chunk]
  std::vector<Segment> segments;                             // in layer order
  // Per pipeline: pieces from stage s to stage s + 1 (and, with chunks > 1, from the last
  // stage to stage 0 at index stages - 1); empty for the last stage otherwise.
  std::vector<std::vector<std::vector<ReshardPiece>>> reshard;
  int gpus_used = 0;
  int gpus_available = 0;

  const core::Stage& stage(int pipeline, int stage) const;
  // The GPUs of the plan, one per tp rank of every group, in placement order.
  GpuPlace gpu(const PlacedGroup& g, int tp_rank) const;
  // What one layer of a stage computes per micro-batch (its dp slice, cp chunk, tp shard).
  kernels::LayerWork layer_work(const core::Stage& stage) const;
  // Bytes of the activation tensor of one micro-batch between stages (all of it), and of
  // one tensor-parallel group's (dp, cp) slice of it (what a tp collective moves).
  double boundary_bytes() const;
  double slice_bytes(const core::Stage& stage) const;
};

// The members a data-parallel ring of `seg` has on each node of `cluster` it visits (one GPU
// of every tensor-parallel group holding the segment there, counted on the group's first
// node), in node order: what sim::channel_ring reads. The workload generator (both
// fidelities) and the planner's cost model ask here.
std::vector<int> segment_members_per_node(const ResolvedPlan& r, const Segment& seg, int cluster);
// The same for every tensor-parallel group of stage `stage` of pipeline `pipeline` (all its
// replicas, dp and cp ranks), on the nodes of the stage's cluster.
std::vector<int> stage_members_per_node(const ResolvedPlan& r, int pipeline, int stage);

// The resolved plan as data (what `_hgsim.resolve` gives the live runner):
//   choices   {recompute, sequence_parallel, precision, attention, zero, grad_reduce,
//             tp_comm_overlap}; the codecs are compression's
//   ranks[]   one per GPU in placement order: rank, pipeline, replica, stage, dp, cp, tp,
//             cluster, node, index, device ("cluster/nN/gG")
//   stages[][] per pipeline per stage: cluster, tp, dp, cp, layers[] ([first, count] per
//             chunk)
//   segments[] first_layer, layers, holders[] (stage per pipeline), holder_chunks[],
//             parameters, members, rings, buckets, bucket_bytes, first_bucket
//   reshard[][] per pipeline per boundary: [from_slice, to_slice, begin, end, units] pieces
//   gpus_used, gpus_available
core::Json resolved_plan_json(const ResolvedPlan& r);

// Resolves a plan that check_plan accepted structurally (`plan_path`: "strategy" for the
// scenario's own plan, "" for a plan file). Problems (codecs, placement) go to `diags`.
std::optional<ResolvedPlan> resolve_plan(const core::Scenario& s, const core::ModelConfig& model,
                                         const compress::CompressionSpecs& scenario_codecs,
                                         const core::Plan& plan, const std::string& plan_path,
                                         core::Diagnostics& diags);

// Every check of a plan against a scenario and its model (core::check_plan's arithmetic,
// the model's divisibility rules, the plan's codecs, placement), then the resolved plan.
// What `hgsim check`, `hgsim run --plan`, the planner's verification and the Python module
// call.
std::optional<ResolvedPlan> check_and_resolve(const core::Scenario& s,
                                              const core::ModelConfig& model,
                                              const compress::CompressionSpecs& scenario_codecs,
                                              const core::Plan& plan, const std::string& plan_path,
                                              core::Diagnostics& diags);

// Full fidelity up to this many GPUs, folded above (fidelity: auto): a full simulation of 256
// GPUs runs in seconds (bench/bench_sim.cpp).
constexpr int full_fidelity_max_gpus = 256;

// ... and while the full graph has at most this many nodes: past it, fidelity auto folds
// (sim/simulate.cpp). A full simulation's time and memory grow with its graph (bench/README.md
// gives the cost per node and the command that measures it): 5 M nodes keep it to seconds and
// under a GiB, and hold the demo scenario (scenarios/examples/explicit-plan.yaml, 4.0 M).
constexpr std::int64_t full_fidelity_max_graph_nodes = 5'000'000;

// The fidelity a simulation of `gpus` GPUs uses when the fidelity is `automatic`: full up
// to full_fidelity_max_gpus, folded above (and folded past full_fidelity_max_graph_nodes,
// which the simulation counts as it builds). `hgsim run` and the planner's verification
// both call it.
core::Fidelity automatic_fidelity(int gpus);

// GPUs a plan uses: sum of replicas x tp x dp x cp.
int used_gpus(const core::Plan& plan);
// The same per cluster, in the order the plan first places a stage on each.
std::vector<std::pair<std::string, int>> used_gpus_per_cluster(const core::Plan& plan);

}  // namespace hgsim::sim
