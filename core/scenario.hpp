// The Scenario (what the user has: clusters, GPUs, WAN, model, training setup) and the
// Plan (how the job is split), with loading from YAML/JSON and a JSON form.
//
// core/ checks structure, types, units and the arithmetic of a plan (layers, GPUs and
// batch add up). Names owned by other folders (a GPU in the catalog, a model in the zoo,
// a codec) are kept as written, with their key path; those folders resolve them
// (kernels::resolve_gpus, models::resolve_model, compress::resolve_policy), and every
// error can still say file:line:column because the Scenario remembers where each key
// path was (`Scenario::where`).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/units.hpp"

namespace hgsim::core {

// ---- enumerations, each with its scenario spelling ----------------------------------

enum class Precision { fp32, tf32, fp16, bf16, fp8 };
enum class Optimizer { adam, adamw, sgd };
enum class Recompute { none, selective, full };
enum class Schedule { gpipe, one_f_one_b, interleaved };
enum class GradSyncAlgorithm { ring, tree, halving_doubling, hierarchical };
enum class Activation { gelu, swiglu, relu };
enum class Norm { layernorm, rmsnorm };
enum class NetworkModel { flow, lv08 };
enum class Fidelity { automatic, full, folded };
enum class PipelineMessages { shared, in_order };
// How a ring or tree collective becomes activities at full fidelity (`simulation.collectives`).
enum class CollectiveGranularity { steps, pipelined };
// How attention runs: `flash` (FlashAttention: one fused kernel, the score matrix never
// stored) or `standard` (score GEMM, softmax, dropout and value GEMM, scores kept).
enum class Attention { flash, standard };
// When data-parallel gradient buckets are reduced: `overlap`, each as soon as the backward
// has produced it (Megatron-LM's overlapped buckets, PyTorch DDP); `after_backward`, all
// of them once the stage's whole backward is done (DeepSpeed's default, older stacks).
enum class GradReduce { overlap, after_backward };
enum class OuterSyncMethod { none, diloco };
enum class OuterOptimizer { nesterov };

std::string to_string(Precision);
std::string to_string(Optimizer);
std::string to_string(Recompute);
std::string to_string(Schedule);
std::string to_string(GradSyncAlgorithm);
std::string to_string(Activation);
std::string to_string(Norm);
std::string to_string(NetworkModel);
std::string to_string(Fidelity);
std::string to_string(PipelineMessages);
std::string to_string(CollectiveGranularity);
std::string to_string(Attention);
std::string to_string(GradReduce);
std::string to_string(OuterSyncMethod);
std::string to_string(OuterOptimizer);

// Bytes of one element of activations/weights in this precision (fp32 and tf32 keep
// fp32 storage; fp8 training keeps 16-bit activations between layers, see models/).
int element_bytes(Precision);

// ---- the model -------------------------------------------------------------------------

// A decoder-only transformer, as the zoo or an inline `model:` mapping describes it.
struct ModelConfig {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // = heads without grouped-query attention
  int vocab = 0;
  int ffn_hidden = 0;  // default 4 * hidden
  Activation activation = Activation::gelu;
  Norm norm = Norm::layernorm;
  int max_positions = 0;        // learned position embeddings; 0 = rotary (no parameters)
  bool tied_embeddings = true;  // the LM head shares the input embedding
  bool bias = true;             // linear layers and norms have biases (GPT) or not (LLaMA)
  bool dropout = true;          // dropout masks are kept for backward (GPT training)
  bool operator==(const ModelConfig&) const = default;
};

// Either a zoo name or an inline description; models::resolve_model turns it into a
// ModelConfig. `path` is where it came from ("model").
struct ModelRef {
  std::optional<std::string> zoo_name;
  std::optional<ModelConfig> inline_config;
  bool operator==(const ModelRef&) const = default;
};

// ---- hardware --------------------------------------------------------------------------

struct LinkSpec {
  BytesPerSecond bandwidth;  // per GPU, each direction
  Seconds latency;
  bool operator==(const LinkSpec&) const = default;
};

// What a user measured for the cluster's GPU type (`clusters[].calibration`); each present
// figure replaces the compute model's catalog figure for that GPU type
// (kernels/kernel_costs.yaml explains each one).
struct ComputeCalibration {
  std::optional<double> gemm_efficiency;       // best-shape GEMM rate / datasheet peak
  std::optional<double> gemm_efficiency_fp8;   // the same for fp8 GEMMs / the fp8 peak
  std::optional<double> attention_efficiency;  // FlashAttention, forward and backward
  std::optional<double> memory_efficiency;     // element-wise kernels / datasheet bandwidth
  std::optional<Seconds> kernel_overhead;      // GPU-side fixed cost per kernel
  std::optional<Seconds> host_dispatch;        // CPU time to issue one kernel
  // NCCL's transfers inside a node / `nvlink.bandwidth` (e.g. nccl-tests' all-reduce busbw
  // over the written figure; 1 when `nvlink.bandwidth` is itself a measured rate).
  std::optional<double> nvlink_efficiency;
  // NCCL's fixed cost per collective kernel beyond its latency model, at 2 and at 8 ranks,
  // the scale on its protocols' latencies and a send/recv's fixed cost
  // (kernels/nccl_costs.yaml says what each is).
  std::optional<Seconds> nccl_fixed_cost_2_ranks;
  std::optional<Seconds> nccl_fixed_cost_8_ranks;
  std::optional<double> nccl_latency_scale;
  std::optional<Seconds> nccl_send_recv_fixed_cost;
  bool empty() const {
    return !gemm_efficiency && !gemm_efficiency_fp8 && !attention_efficiency &&
           !memory_efficiency && !kernel_overhead && !host_dispatch && !nvlink_efficiency &&
           !nccl_fixed_cost_2_ranks && !nccl_fixed_cost_8_ranks && !nccl_latency_scale &&
           !nccl_send_recv_fixed_cost;
  }
  bool operator==(const ComputeCalibration&) const = default;
};

struct Cluster {
  std::string name;
  std::string gpu;  // catalog name as written; kernels::resolve_gpus checks it
  int nodes = 0;
  int gpus_per_node = 0;
  LinkSpec nvlink;  // inside a node, per GPU, each direction
  LinkSpec nic;     // one NIC, into the cluster fabric
  // NICs a node: 0 is one per GPU (a DGX: 8). Fewer NICs than GPUs: the node's GPUs share
  // them, gpus_per_node / nics_per_node to a NIC (nic_share).
  int nics_per_node = 0;
  // Fabric oversubscription: a node's uplink carries gpus_per_node * nic.bandwidth /
  // oversubscription; 1 is a non-blocking fabric.
  double oversubscription = 1;
  ComputeCalibration calibration;
  int gpu_count() const { return nodes * gpus_per_node; }
  // The node's NICs: nics_per_node, or gpus_per_node when it is 0.
  int nic_count() const { return nics_per_node > 0 ? nics_per_node : gpus_per_node; }
  // What one GPU gets of the node's NICs when all of its GPUs send at once: 1 with a NIC
  // each, nics / gpus_per_node with fewer.
  double nic_share() const {
    return gpus_per_node > nic_count() ? double(nic_count()) / gpus_per_node : 1.0;
  }
  bool operator==(const Cluster&) const = default;
};

// One step of a bandwidth-over-time trace: from `at` on, the link runs at `bandwidth`.
struct BandwidthStep {
  Seconds at;
  BytesPerSecond bandwidth;
  bool operator==(const BandwidthStep&) const = default;
};

struct WanLink {
  std::string from;  // `between: [from, to]`
  std::string to;
  BytesPerSecond bandwidth;  // from -> to (and back, unless `reverse_bandwidth`)
  std::optional<BytesPerSecond> reverse_bandwidth;  // to -> from, for asymmetric links
  Seconds latency;
  std::optional<Bytes> tcp_window;         // per flow; the simulator's default when absent
  std::string trace;                       // CSV path as written (relative to the scenario)
  std::vector<BandwidthStep> trace_steps;  // loaded from `trace`; empty without one
  bool operator==(const WanLink&) const = default;
};

// A codec as the scenario names it: `int8`, or `{codec: topk, ratio: 0.01}`. Parameters
// stay as document nodes; compress::resolve_codec gives them types and checks them.
struct CodecConfig {
  std::string codec = "none";
  std::vector<std::pair<std::string, Node>> params;  // in file order, without "codec"
  bool operator==(const CodecConfig& o) const;
};

// The most iterations one simulation plays (`simulation.iterations`): each costs about one
// iteration's simulation when a bandwidth trace makes them differ.
constexpr int max_simulated_iterations = 1000000;

// How the simulator plays the scenario (`simulation:`; every key optional).
struct Simulation {
  // flow: SimGrid's CM02 flow model with latencies and bandwidths as written (closed forms
  // hold exactly); lv08: SimGrid's default, calibrated on TCP (latency x 13.01, bandwidth
  // x 0.97).
  NetworkModel network_model = NetworkModel::flow;
  // TCP window of a flow that crosses the WAN, when the link names none: a flow's rate is
  // at most window / round-trip time. 4 MiB, SimGrid's default (Linux autotuning caps
  // receive windows at 6 MiB by default).
  Bytes tcp_window = Bytes(4.0 * 1024 * 1024);
  Fidelity fidelity = Fidelity::automatic;
  // Activations and gradients between two pipeline stages: `shared`, every message is its
  // own flow from the moment it is ready and concurrent ones share the link; `in_order`,
  // messages between one pair of GPUs go one after another in micro-batch order, each
  // starting when the previous one has arrived (NCCL send/recv on one stream; gloo on one
  // connection, measured by the live runner). Not for the interleaved schedule.
  PipelineMessages pipeline_messages = PipelineMessages::in_order;
  // Ring, tree and hierarchical collectives at full fidelity: `steps`, every step of the
  // textbook algorithm its own transfers (2n(n-1) for a ring all-reduce); `pipelined`, the
  // flows NCCL keeps in flight, one per ring or tree edge carrying that edge's share, plus
  // the latency of the steps (sim::pipelined_ring). A few activities per collective instead.
  CollectiveGranularity collectives = CollectiveGranularity::steps;
  // Consecutive training iterations played in one simulation: links, bandwidth traces and
  // queues carry over from one to the next (sim/iterations.hpp).
  int iterations = 1;
  // Where in the bandwidth traces the first iteration starts (a trace's time 0 is the
  // simulation's start_time before it).
  Seconds start_time = Seconds(0);
  bool operator==(const Simulation&) const = default;
};

struct CompressionPolicy {
  CodecConfig wan_activations;  // pipeline traffic crossing the WAN (both directions)
  CodecConfig wan_gradients;    // data-parallel gradient sync crossing the WAN
  bool operator==(const CompressionPolicy&) const = default;
};

// ---- the plan --------------------------------------------------------------------------

// Synchronisation across islands less often than every step (`strategy.outer_sync`).
// DiLoCo (Douillard et al. 2023, arXiv:2311.08105): each island (a pipeline of the plan,
// with its replicas) trains H inner steps on its own, then the islands all-reduce their
// pseudo-gradients (parameters at the last sync minus parameters now) and apply them with
// an outer optimizer (Nesterov momentum; the paper's outer_lr 0.7, momentum 0.9).
// Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512): with fragments F > 1 each
// fragment (1/F of the layers) syncs at its own staggered step and its transfer overlaps
// the next `overlap_steps` inner steps.
struct OuterSync {
  OuterSyncMethod method = OuterSyncMethod::none;
  int inner_steps = 1;    // H
  int fragments = 1;      // F
  int overlap_steps = 1;  // tau: inner steps a fragment's transfer overlaps (F > 1)
  CodecConfig codec;      // pseudo-gradients across islands; compress::resolve_codec checks it
  OuterOptimizer outer_optimizer = OuterOptimizer::nesterov;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool enabled() const { return method != OuterSyncMethod::none; }
  bool operator==(const OuterSync&) const = default;
};

struct Stage {
  std::string cluster;
  int tp = 1;      // tensor-parallel degree (inside one node)
  int dp = 1;      // data-parallel degree inside the stage: splits each micro-batch
  int layers = 0;  // transformer layers (all virtual chunks together for `interleaved`)
  // Context-parallel degree: splits each sequence into cp token chunks, one per group of
  // tp GPUs (Megatron-core's ring attention; sim/context_parallel.hpp prices its exchanges).
  int cp = 1;
  // Tensor-parallel groups per replica: one per (dp rank, cp rank), dp rank major.
  int slices() const { return dp * cp; }
  int gpus() const { return tp * dp * cp; }
  bool operator==(const Stage&) const = default;
};

struct Pipeline {
  int replicas = 1;       // identical copies of this pipeline (plain data parallelism)
  int micro_batches = 0;  // per replica per iteration
  std::vector<Stage> stages;
  bool operator==(const Pipeline&) const = default;
};

struct GradSync {
  GradSyncAlgorithm algorithm = GradSyncAlgorithm::ring;
  Bytes bucket = Bytes(25e6);
  bool operator==(const GradSync&) const = default;
};

struct Plan {
  Schedule schedule = Schedule::one_f_one_b;
  int micro_batch = 1;             // sequences per micro-batch
  int virtual_stages = 1;          // model chunks per GPU (interleaved only)
  bool sequence_parallel = false;  // Megatron sequence parallelism inside tensor-parallel groups
  // ZeRO stage: 0 none, 1 optimizer state sharded over the data-parallel copies (Megatron's
  // distributed optimizer), 2 gradients too, 3 weights too (FSDP full shard).
  int zero = 0;
  GradReduce grad_reduce = GradReduce::overlap;
  // Tensor-parallel collectives overlapped with the GEMMs they feed (Megatron-core's
  // tp_comm_overlap): only what the GEMMs cannot hide is exposed.
  bool tp_comm_overlap = false;
  std::vector<Pipeline> pipelines;
  GradSync grad_sync;
  // Choices a plan may make for itself (the planner does): they override the scenario's
  // training.recompute and compression for this plan. Absent: the scenario's.
  std::optional<Recompute> recompute;
  std::optional<CompressionPolicy> compression;
  OuterSync outer_sync;  // none: every step synchronises every replica (the default)

  int global_batch() const;  // sum of replicas * micro_batches * micro_batch
  bool operator==(const Plan&) const = default;
};

struct Strategy {
  bool automatic = true;  // `strategy: auto`: the planner chooses
  Plan plan;              // meaningful when !automatic
  bool operator==(const Strategy&) const = default;
};

// ---- compression, training, sweep ------------------------------------------------------

// What long runs lose to failures (`training.failures`): GPU failures at a constant rate,
// work since the last checkpoint lost at each, and a restart. sim/iterations.hpp prices it.
struct FailureModel {
  Seconds gpu_mtbf{0};             // mean time between failures of one GPU
  Seconds checkpoint_interval{0};  // from one checkpoint's start to the next's
  Seconds checkpoint_cost{0};      // training stalled while one checkpoint is written
  Seconds restart_time{0};         // from a failure to training again (reload, requeue)
  bool operator==(const FailureModel&) const = default;
};

struct Training {
  int global_batch = 0;  // sequences per iteration
  int seq_len = 0;       // tokens per sequence
  Precision precision = Precision::bf16;
  Optimizer optimizer = Optimizer::adam;
  Recompute recompute = Recompute::none;
  Attention attention = Attention::flash;
  // FlashAttention's version (`training.flash_version: 2 | 3`, attention: flash only); 0:
  // the GPU's own, kernels/kernel_costs.yaml `attention_version` (3 on Hopper, 2 before).
  int flash_version = 0;
  // The dtype of the main gradients (`training.grad_dtype: fp32 | bf16 | fp16`): what they
  // are accumulated in and what the data-parallel reduction moves. Unset: the rule of
  // Megatron-LM (models::gradient_precision).
  std::optional<Precision> grad_dtype;
  // The dtype of the optimizer's state, its master weights and moments
  // (`training.optimizer_state: fp32 | bf16`): bf16 as NeMo's distributed_fused_adam keeps it
  // with `dtype: bf16`.
  Precision optimizer_state = Precision::fp32;
  // How much training the run is for (`tokens: 1T` or `iterations: 100000`; at most one):
  // results extrapolate time to train from the simulated iterations.
  std::optional<double> tokens;
  std::optional<long long> iterations;
  std::optional<FailureModel> failures;
  bool operator==(const Training&) const = default;
};

// One axis of a `sweep:` grid: a key path (`wan[*].bandwidth`) and its values. Axes of one
// `zip:` group (same `zip_group` >= 0) vary together: their i-th values make one setting.
struct SweepAxis {
  std::string path;
  std::vector<Node> values;
  int zip_group = -1;  // -1: an axis of the cartesian product of its own
  bool operator==(const SweepAxis& o) const;
};

// How the planner searches (`planner:`, core/outer_sync.cpp): which outer synchronisation it
// may choose, and how it compares plans that do not train alike. A DiLoCo plan's tokens are
// worth `diloco_token_efficiency` of a synchronous plan's: its time to the same training
// progress is its iteration time / diloco_token_efficiency.
struct PlannerSettings {
  std::vector<OuterSyncMethod> outer_sync{OuterSyncMethod::none};  // none: synchronous only
  std::vector<int> inner_steps{50, 200};                           // H values tried with diloco
  std::vector<int> fragments{1};  // F values tried (1: blocking; > 1: streaming)
  int overlap_steps = 1;          // tau of streaming candidates (at most H / F)
  // The assumption: progress per DiLoCo token relative to a synchronous token, in (0, 1].
  // Default 1: the claim of DiLoCo (Douillard et al. 2023, arXiv:2311.08105, abstract) that
  // 8 workers with 500x less communication perform as well as fully synchronous training on
  // C4 (docs/diloco.md, "The planner and outer sync"); an assumption, not a measured efficiency.
  double diloco_token_efficiency = 1.0;
  // The most a lossy WAN codec may raise the final training loss, as a fraction (0.05: 5 %),
  // by the project's convergence runs (validation/convergence-losses.json); with it set, the
  // planner does not use a codec above it, nor one those runs did not measure.
  std::optional<double> max_loss_increase;
  bool allows_diloco() const;
  bool operator==(const PlannerSettings&) const = default;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source_file;  // where it was loaded from (empty for JSON without a file)
  ModelRef model;
  Training training;
  std::vector<Cluster> clusters;
  std::vector<WanLink> wan;
  Strategy strategy;
  CompressionPolicy compression;
  Simulation simulation;
  std::vector<SweepAxis> sweep;
  PlannerSettings planner;  // `planner:` (defaults: synchronous plans only)
  // `workload: {chakra: PREFIX}`: simulate that MLCommons Chakra trace (PREFIX.<rank>.et)
  // instead of a plan (docs/chakra.md). Written relative to the scenario's folder; held
  // resolved against it. Empty: none.
  std::string workload_chakra;

  // Where a key path was written ("clusters[1].gpu"); the document's location if unknown.
  SourceLocation where(const std::string& key_path) const;
  std::map<std::string, SourceLocation> locations;

  // Clusters by name. find_cluster and cluster_index answer "none" for a name no cluster
  // has, and their callers say what that means; cluster() is for names already checked (a
  // plan check_plan accepted) and throws std::invalid_argument naming the cluster if not.
  const Cluster* find_cluster(const std::string& name) const;
  std::optional<int> cluster_index(const std::string& name) const;
  const Cluster& cluster(const std::string& name) const;
  int total_gpus() const;
  bool operator==(const Scenario& o) const;  // ignores `locations` and `source_file`
};

// ---- loading and the JSON form ---------------------------------------------------------

// Reads a scenario file (YAML, or JSON by extension) and checks structure, units and
// plan arithmetic. Everything wrong goes to `diags` (all problems, not the first).
// Returns a Scenario whenever the document could be read, even with errors, so that
// callers can add their own checks; trust it only if !diags.has_errors().
std::optional<Scenario> load_scenario(const std::string& path, Diagnostics& diags);
std::optional<Scenario> parse_scenario(const Node& document, const std::string& source_file,
                                       Diagnostics& diags);

// The canonical JSON form: the scenario language's keys, defaults filled in, quantities
// as canonical unit strings. parse_scenario(from_json(scenario_to_json(s))) == s.
Json scenario_to_json(const Scenario& s);

// A Plan file holds what `strategy:` holds in a scenario (schedule, micro_batch,
// pipelines, grad_sync, ...). Checking it against a scenario (clusters exist, GPUs and
// batch add up) is check_plan's job.
std::optional<Plan> parse_plan(const Node& document, const std::string& path, Diagnostics& diags);
// One codec as a scenario names it: `int8` or `{codec: topk, ratio: 0.01}` (the parameters
// stay untyped: compress::resolve_codec checks them). Problems are reported at `path`.
std::optional<CodecConfig> parse_codec(const Node& n, const std::string& path, Diagnostics& diags);
// A `compression:` mapping (wan_activations, wan_gradients); `path` prefixes key paths.
CompressionPolicy parse_compression(const Node& n, const std::string& path, Diagnostics& diags);
Json plan_to_json(const Plan& plan);
std::optional<Plan> load_plan(const std::string& path, Diagnostics& diags);

// Checks a plan's arithmetic against the scenario's clusters and training (placement is
// sim::place_groups's, called by sim::check_and_resolve): every stage names a known
// cluster, tp fits in a node, layers add up to `model_layers` (when > 0), GPUs per cluster
// are not over-used, micro-batches add up to the global batch. `path` prefixes key paths
// ("strategy" for an inline plan, "" for a plan file).
void check_plan(const Plan& plan, const Scenario& s, int model_layers, const std::string& path,
                Diagnostics& diags);

// Which clusters the WAN links join: the same number for clusters with a WAN path between
// them, keyed by cluster name.
std::map<std::string, int> wan_components(const Scenario& s);

// The rows of a bandwidth trace (CSV "time_s,bandwidth", '#' comments, an optional header
// row): problems go to `diags` at `csv`:line:column under `key_path`, quoting at most an
// excerpt of a row. At most limits().trace_rows rows, limits().trace_min_step_s apart.
std::vector<BandwidthStep> parse_bandwidth_trace(std::string_view text, const std::string& csv,
                                                 const std::string& key_path, Diagnostics& diags);

// `strategy.outer_sync` (core/outer_sync.cpp): `none` or a mapping; problems at `path`.
std::optional<OuterSync> parse_outer_sync(const Node& n, const std::string& path, Diagnostics& d);
Json outer_sync_json(const OuterSync& o);
// Outer sync needs two islands or more that cut the model the same way (check_plan calls it).
void check_outer_sync(const Plan& plan, const Scenario& s, int model_layers,
                      const std::string& path, Diagnostics& diags);
// `planner:` (core/outer_sync.cpp): the planner's settings; problems at `path`.
PlannerSettings parse_planner_settings(const Node& n, const std::string& path, Diagnostics& d);
Json planner_settings_json(const PlannerSettings& p);
// Where planner.diloco_token_efficiency comes from: the scenario's (the user's assumption) or
// the default's published claim (an assumption too), for every report that prints it.
std::string diloco_token_efficiency_source(const Scenario& s);
// `training.tokens`: a count with an optional K, M, B (or G), T suffix (powers of 1000).
std::optional<double> parse_token_count(const Node& n, const std::string& path, Diagnostics& d);

// ---- sweeps ----------------------------------------------------------------------------

// A zip group as the messages show it (the keys quoted: unquoted inside { }, YAML reads
// `[*]` as a list holding an alias).
inline constexpr const char* kSweepZipExample =
    "zip: {\"wan[*].bandwidth\": [1Gbps, 10Gbps], \"wan[*].latency\": [50ms, 5ms]}";

struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> settings;  // (path, value as JSON text)
  Node document;  // the scenario document with these values set and `sweep:` removed
};

// The points of a document's `sweep:` grid, one at a time (a grid of a million points is
// never held whole). The grid is the cartesian product of its dimensions in the order
// they are written, the last varying fastest; a dimension is one axis (`path: [values]`)
// or one `zip:` group (axes of equal length that vary together; `zip:` holds one mapping
// of axes, or a list of such mappings for several groups). Point k (0-based) is the
// mixed-radix digit string of k. A value keeps its own position, so an error in it is
// reported on the sweep's line. Bad paths and zip groups of unequal lengths are reported
// (and leave the grid empty); no axes gives one point.
class SweepGrid {
 public:
  SweepGrid(const Node& document, Diagnostics& diags);
  std::size_t size() const { return size_; }
  SweepPoint point(std::size_t k) const;
  // Point k's settings alone (point(k).settings without copying the document).
  std::vector<std::pair<std::string, std::string>> settings(std::size_t k) const;
  // The axis paths in the order written (the keys of every point's settings).
  std::vector<std::string> axis_paths() const;

 private:
  struct Axis {
    std::string path;
    const Node* values = nullptr;  // into document_
  };
  struct Dimension {
    std::vector<Axis> axes;  // one, or a zip group's
    std::size_t length = 0;
  };
  std::shared_ptr<const Node> document_;  // the document as written (the values live here)
  Node base_;                             // the document without `sweep:`
  std::vector<Dimension> dimensions_;
  std::size_t size_ = 1;

  // Point k's index into each dimension's values.
  std::vector<std::size_t> digits(std::size_t k) const;
};

// Every point of the grid, in grid order. Each point is then parsed and checked like a
// scenario of its own.
std::vector<SweepPoint> sweep_points(const Node& document, Diagnostics& diags);

}  // namespace hgsim::core
