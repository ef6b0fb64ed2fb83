// The compute-time model: how long one GPU takes for the work of one layer, the logits
// layer and the optimizer step. The one source of truth for compute time: the simulator's
// workload generator and the planner's cost model both call it.
//
// KernelModel is the estimate used where no measured profile exists. It prices the kernels
// a layer launches (kernels/layer_ops.hpp lists them, forward and backward): each kernel
// costs max(its FLOPs at a shape-dependent efficiency, its bytes at the memory bandwidth)
// plus a fixed overhead, and a phase cannot go faster than the framework issues its
// kernels from the CPU. GEMM efficiency follows tile and wave quantization against the
// GPU's SM count; attention is FlashAttention unless training.attention says standard.
// Every constant per GPU family is in kernels/kernel_costs.yaml with its source. Results
// built on it say "estimated". Measured profiles (kernels/profile.hpp) implement the same interface
// and fall back to KernelModel::op_time for the ops they lack.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/scenario.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/layer_ops.hpp"

namespace hgsim::kernels {

// The work one GPU of a stage does for one layer and one micro-batch.
struct LayerWork {
  const core::ModelConfig* model = nullptr;
  double sequences = 1;  // sequences this GPU's data-parallel slice of the micro-batch holds
  int seq_len = 0;
  int tp = 1;  // the layer's matrices are split over tp GPUs
  bool sequence_parallel = false;
  core::Precision precision = core::Precision::bf16;
  core::Recompute recompute = core::Recompute::none;
  core::Attention attention = core::Attention::flash;
  int flash_version = 0;  // 0: the GPU's own (KernelCosts::attention_version)
};

// Where a phase's time goes, by the class of its kernels; the four parts add up to the
// phase's time. gemm: the linear layers' and the LM head's GEMMs (their math, or their
// weights streamed when the rows are few); attention: the attention core (FlashAttention's
// kernels, or standard attention's batched GEMMs and passes over the score matrix);
// memory: the memory-bound kernels (norms, rope, activations, residual adds, casts,
// cross-entropy); overhead: every kernel's fixed GPU-side cost, plus what the CPU's issue
// time (kernels x host_dispatch) adds where it is longer than the kernels' GPU time.
struct KernelSplit {
  double gemm_s = 0;
  double attention_s = 0;
  double memory_s = 0;
  double overhead_s = 0;
  double total() const { return gemm_s + attention_s + memory_s + overhead_s; }
  KernelSplit scaled(double k) const {
    return {k * gemm_s, k * attention_s, k * memory_s, k * overhead_s};
  }
  KernelSplit& operator+=(const KernelSplit& o) {
    gemm_s += o.gemm_s;
    attention_s += o.attention_s;
    memory_s += o.memory_s;
    overhead_s += o.overhead_s;
    return *this;
  }
};

// `seconds` of one op, all in its class (a measured op, whose overhead is not apart):
// the attention core's ops (role "attention") are attention, GEMMs gemm, the rest memory.
KernelSplit op_split(const OpCall& op, double seconds);

struct PhaseTimes {
  core::Seconds forward;
  core::Seconds backward;   // without recomputation
  core::Seconds recompute;  // forward work repeated before the backward (0 without)
  // The attention core's kernels, part of forward and backward: what context parallelism's
  // ring exchanges overlap with (sim/context_parallel.hpp).
  core::Seconds attention_forward{0};
  core::Seconds attention_backward{0};
  // forward, backward and recompute by kernel class (each adds up to its phase's time).
  // A model that gives none (all zero) leaves its compute unsplit: sim/breakdown.hpp.
  KernelSplit forward_split{};
  KernelSplit backward_split{};
  KernelSplit recompute_split{};
};

class ComputeModel {
 public:
  virtual ~ComputeModel() = default;
  // One transformer layer.
  virtual PhaseTimes layer(const GpuSpec& gpu, const LayerWork& work) const = 0;
  // The LM head and cross-entropy of the last stage (recompute is 0).
  virtual PhaseTimes logits(const GpuSpec& gpu, const LayerWork& work) const = 0;
  // One optimizer step over `parameters` held by this GPU.
  virtual core::Seconds optimizer_step(const GpuSpec& gpu, double parameters,
                                       core::Precision precision,
                                       core::Optimizer optimizer) const = 0;
  // Where the numbers for this GPU come from: "estimated" or "measured:<file>".
  virtual std::string provenance(const GpuSpec& gpu) const = 0;
};

// The memory-bound op classes with constants of their own (kernel_costs.yaml `memory_ops`);
// every other memory-bound op (softmax, dropout, cross-entropy, casts) is `other`.
enum class MemoryClass { norm, rope, swiglu, gelu, add, other };
inline constexpr int kMemoryClasses = 6;
const char* to_string(MemoryClass c);
// The class of a memory-bound op by name (layernorm and rmsnorm, forward and backward, are
// `norm`; swiglu and swiglu_backward `swiglu`; ...).
MemoryClass memory_class(const std::string& op);

// One architecture's kernel constants (a row of kernels/kernel_costs.yaml).
struct KernelCosts {
  Architecture architecture = Architecture::ampere;
  double gemm_efficiency = 0.8;  // best-shape GEMM rate / datasheet peak (the ceiling)
  // The same for fp8 GEMMs against the fp8 peak, where it was measured (else
  // gemm_efficiency applies to fp8 too).
  std::optional<double> gemm_efficiency_fp8;
  struct Tile {
    double m = 128, n = 256;
  };
  // GEMM efficiency against shape: ceiling x rows / (rows + gemm_half_rows) x the wave
  // term of the output's tiles of gemm_wave_tile over the SMs, gemm_wave_loss the share of
  // a partial wave's idle SMs that is lost (0: none, 1: all).
  double gemm_half_rows = 0;
  Tile gemm_wave_tile;
  double gemm_wave_loss = 0;
  // GEMMs of few rows stream their weights: bytes at this share of HBM bandwidth.
  double gemm_memory_efficiency = 0.85;
  core::Seconds gemm_overhead{2e-6};  // GPU-side fixed cost of one GEMM kernel
  // The share of an isolated GEMM's rate (each op timed alone, as in the tables the
  // constants above are fitted to) that the same GEMM keeps inside a training step, where
  // the GEMMs of every layer run back to back: a training table's GEMMs against the model's
  // isolated prediction (kernels/kernel_costs.yaml names the table). Linear layers only.
  double gemm_in_step = 1;
  // How many times slower compute runs while a collective's kernels share the GPU with it
  // (NCCL's kernels take SMs and memory bandwidth): compute_beside_collective.
  double overlap_slowdown = 1;
  double attention_forward_efficiency = 0.6;
  double attention_backward_efficiency = 0.5;
  // The FlashAttention version those two figures are for (what the GPU runs by default),
  // and FlashAttention-2's figures on a GPU whose default is 3 (Hopper).
  int attention_version = 2;
  std::optional<double> attention_fa2_forward_efficiency;
  std::optional<double> attention_fa2_backward_efficiency;
  double attention_block = 128;  // query rows per FlashAttention thread block
  // A memory-bound class's kernel: its first `l2_resident` bytes at l2_efficiency of the
  // HBM bandwidth, the rest at efficiency, never faster than one row (the op's bytes per
  // token) at row_bandwidth (one thread block per row), plus overhead.
  struct MemoryOp {
    double efficiency = 0.85;
    double l2_efficiency = 0.85;
    core::BytesPerSecond row_bandwidth{0};  // 0: no per-row floor
    core::Seconds overhead{2e-6};
  };
  // By MemoryClass; `other`, and a class the row does not give, is {memory_efficiency,
  // memory_efficiency, none, kernel_overhead}.
  std::array<MemoryOp, kMemoryClasses> memory_ops;
  core::Bytes l2_resident{0};
  double memory_efficiency = 0.85;
  // What NCCL moves over one GPU's NVLink (PCIe for GPUs without it), per direction, as a
  // share of the datasheet rate: NCCL's own per-link model (src/graph/topo.h).
  double nvlink_efficiency = 0.8;
  double pcie_efficiency = 0.75;
  core::Seconds kernel_overhead{2e-6};  // GPU-side fixed cost per kernel (attention, others)
  core::Seconds host_dispatch{5e-6};    // CPU time to issue one kernel
  std::string source;
  const MemoryOp& memory_op(MemoryClass c) const { return memory_ops[static_cast<int>(c)]; }
};

// The embedded kernels/kernel_costs.yaml, parsed once (throws std::logic_error if invalid).
const std::vector<KernelCosts>& kernel_costs();
std::vector<KernelCosts> parse_kernel_costs(std::string_view yaml_text, const std::string& file,
                                            core::Diagnostics& diags);
const KernelCosts& kernel_costs_for(Architecture architecture);

// What a user measured on one GPU type (`clusters[].calibration`): each present figure
// replaces the catalog's for that GPU type only.
using Calibration = core::ComputeCalibration;

// `costs` with FlashAttention `version`'s attention efficiencies (0: the row's own version;
// 2 on a row of version 3: its FlashAttention-2 figures). Throws std::invalid_argument for a
// version the row has no figures for (resolve_gpus refuses those scenarios first).
KernelCosts with_flash_version(KernelCosts costs, int version);

// The share of a cluster's intra-node bandwidth as written (`clusters[].nvlink`, the
// datasheet rate) that NCCL's transfers get: the cluster's `calibration.nvlink_efficiency`
// where the user measured it, else its GPU architecture's nvlink_efficiency
// (pcie_efficiency for GPUs without NVLink) from kernels/kernel_costs.yaml. The one rule
// every NVLink hop of the simulator, the planner and the collectives' closed forms use
// (sim::nvlink_hop).
double intra_node_efficiency(const core::Cluster& c);

// The scenario's calibrations by GPU name (resolve_gpus has checked that clusters of one
// GPU type agree). Clusters whose GPU is unknown are skipped.
std::map<std::string, Calibration> calibrations_of(const core::Scenario& s);

// The efficiency a GEMM of m x n x k reaches on `gpu`: the ceiling for its precision times
// m / (m + gemm_half_rows) times the wave term (KernelCosts): what validation/compute.md
// plots. m is the tokens' dimension (the forward GEMM's rows), n the output's columns.
double gemm_efficiency(const GpuSpec& gpu, const KernelCosts& costs, double m, double n, double k,
                       core::Precision precision = core::Precision::bf16);
// The share of `gpu`'s SMs that `blocks` thread blocks keep busy, a partial last wave
// losing `loss` of its idle SMs: waves / ((1 - loss) waves + loss ceil(waves)).
double wave_efficiency(double blocks, int sms, double loss);
// One memory-bound kernel of `bytes`, `row_bytes` per row (0: no rows), under `op`'s
// constants: the rule every memory-bound op's time follows (KernelCosts::MemoryOp).
core::Seconds memory_op_time(const GpuSpec& gpu, const KernelCosts& costs,
                             const KernelCosts::MemoryOp& op, double bytes, double row_bytes);
// The time `compute_s` seconds of compute take when a collective of `collective_s` seconds
// runs beside them on the same GPU (tensor-parallel communication overlap), the compute
// running `slowdown` times slower while the collective is in flight: compute_s +
// min(collective_s, slowdown x compute_s) x (1 - 1 / slowdown). Hetu-Galvatron's rule
// (galvatron/core/search_engine/cost_model.py, get_overlap_time): the block then lasts
// max(this, collective_s). The one rule the simulator and the planner's cost model use.
double compute_beside_collective(double compute_s, double collective_s, double slowdown);
// One GPU's compute beside a stream of NCCL collectives on the same GPU that run back to back
// (each starts once it is queued and the one before it has ended: data-parallel gradient
// buckets, with the ZeRO gathers that ride on them): the stream's backlog (collective seconds
// still to run) drains as time passes, and a compute piece issued while it is not empty runs
// `slowdown` times slower for the part they overlap (compute_beside_collective over the
// backlog). Hetu-Galvatron applies the same coefficient to data-parallel communication beside
// the forward and backward (galvatron/core/search_engine/cost_model.py @0beac24,
// get_overlap_time). The one rule the simulator's workload and the planner's cost model use.
class CollectiveStream {
 public:
  explicit CollectiveStream(double slowdown) : slowdown_(slowdown) {}
  // Collectives of `collective_s` seconds join the stream now.
  void queue(double collective_s) { backlog_s_ += std::max(collective_s, 0.0); }
  // The time a compute piece of `compute_s` seconds (alone) issued now takes; the backlog
  // drains over that time.
  double compute(double compute_s);
  // `seconds` pass without compute of this GPU (its own collective, an exchange).
  void pass(double seconds) { backlog_s_ = std::max(backlog_s_ - seconds, 0.0); }
  double backlog_s() const { return backlog_s_; }

 private:
  double slowdown_ = 1;
  double backlog_s_ = 0;
};
// The best-shape efficiency of a GEMM in `precision` (gemm_efficiency_fp8 for fp8 where set).
double gemm_ceiling(const KernelCosts& costs, core::Precision precision);
// FlashAttention's work in the convention its efficiencies were measured in (its own
// benchmark, benchmarks/benchmark_flash_attention.py: forward 4 s^2 d per head and sequence,
// halved when causal; backward 2.5x the forward, five GEMMs against two), from an
// `attention` or `attention_backward` op (whose `flops` count the backward as 2x).
double flash_attention_work(const OpCall& op);
// FlashAttention's efficiency on that work.
double attention_efficiency(const GpuSpec& gpu, const KernelCosts& costs, double sequences,
                            double heads, double seq_len, bool backward);

// The FLOPs and bytes of the kernels one layer's phases run (recompute: recompute_ops of
// the forward), from the op lists KernelModel::layer prices, whichever model gives the
// times: what the Chakra export writes as each compute node's num_ops and tensor_size.
struct PhaseCounts {
  OpCounts forward;
  OpCounts backward;
  OpCounts recompute;
};
PhaseCounts layer_counts(const LayerWork& work);
// The same for the logits layer (final norm, LM head, cross-entropy; no recompute).
PhaseCounts logits_counts(const LayerWork& work);
// One optimizer step's: Adam's FLOPs (optimizer_op) and the bytes KernelModel::optimizer_step
// moves. SGD has no op of its own to count: nullopt.
std::optional<OpCounts> optimizer_counts(double parameters, core::Precision precision,
                                         core::Optimizer optimizer);

class KernelModel final : public ComputeModel {
 public:
  KernelModel();
  // Calibrations by GPU name (GpuSpec::name): they apply to that GPU type only.
  explicit KernelModel(std::map<std::string, Calibration> calibrations);
  PhaseTimes layer(const GpuSpec& gpu, const LayerWork& work) const override;
  PhaseTimes logits(const GpuSpec& gpu, const LayerWork& work) const override;
  core::Seconds optimizer_step(const GpuSpec& gpu, double parameters, core::Precision precision,
                               core::Optimizer optimizer) const override;
  std::string provenance(const GpuSpec& gpu) const override;

  // One kernel's time on the GPU (without host dispatch): the unit everything sums. In a
  // training step (`in_step`, what layer() and logits() price) or timed alone (`isolated`,
  // as the inference tables measure it: KernelCosts::gemm_in_step left out).
  enum class Timing { in_step, isolated };
  core::Seconds op_time(const GpuSpec& gpu, const OpCall& op, core::Precision precision,
                        Timing timing = Timing::in_step) const;
  // A kernel known only by its FLOPs and the bytes it moves (a Chakra trace's num_ops and
  // tensor_size, no shape): the roofline of a best-shape GEMM, max(FLOPs / (peak x
  // gemm_ceiling), bytes / (HBM x memory_efficiency)), plus one GEMM kernel's fixed cost.
  core::Seconds roofline_time(const GpuSpec& gpu, double flops, double bytes,
                              core::Precision precision) const;
  // A phase: the kernels' GPU time, or the CPU's issue time if that is longer.
  core::Seconds phase_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                           core::Precision precision) const;
  // The same phase's time by kernel class (KernelSplit; adds up to phase_time).
  KernelSplit phase_split(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                          core::Precision precision) const;
  // The constants in force for `gpu`: its architecture's row at FlashAttention
  // `flash_version` (with_flash_version; 0: the row's own), its calibration applied on top
  // (a calibrated attention_efficiency is what the user measured, whatever the version).
  KernelCosts costs_for(const GpuSpec& gpu, int flash_version = 0) const;

 private:
  std::map<std::string, Calibration> calibrations_;
  // Layer and logits times already computed, by GPU, model shape and work (the planner
  // asks for the same few shapes thousands of times). Shared by copies; thread-safe.
  struct Cache;
  std::shared_ptr<Cache> cache_;
};

}  // namespace hgsim::kernels
