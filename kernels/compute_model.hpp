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

struct PhaseTimes {
  core::Seconds forward;
  core::Seconds backward;   // without recomputation
  core::Seconds recompute;  // forward work repeated before the backward (0 without)
  // The attention core's kernels, part of forward and backward: what context parallelism's
  // ring exchanges overlap with (sim/context_parallel.hpp).
  core::Seconds attention_forward{0};
  core::Seconds attention_backward{0};
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

// One architecture's kernel constants (a row of kernels/kernel_costs.yaml).
struct KernelCosts {
  Architecture architecture = Architecture::ampere;
  double gemm_efficiency = 0.8;  // sustained best-shape GEMM rate / datasheet peak
  // The same for fp8 GEMMs against the fp8 peak, where it was measured (else
  // gemm_efficiency applies to fp8 too).
  std::optional<double> gemm_efficiency_fp8;
  struct Tile {
    double m = 128, n = 128;
  };
  std::vector<Tile> tiles;  // the GEMM library's tile sizes
  Tile tile_saturation;     // tiles at least this intense run at gemm_efficiency
  double attention_forward_efficiency = 0.6;
  double attention_backward_efficiency = 0.5;
  // The FlashAttention version those two figures are for (what the GPU runs by default),
  // and FlashAttention-2's figures on a GPU whose default is 3 (Hopper).
  int attention_version = 2;
  std::optional<double> attention_fa2_forward_efficiency;
  std::optional<double> attention_fa2_backward_efficiency;
  double attention_block = 128;  // query rows per FlashAttention thread block
  double memory_efficiency = 0.85;
  // What NCCL moves over one GPU's NVLink (PCIe for GPUs without it), per direction, as a
  // share of the datasheet rate: NCCL's own per-link model (src/graph/topo.h).
  double nvlink_efficiency = 0.8;
  double pcie_efficiency = 0.75;
  core::Seconds kernel_overhead{2e-6};  // GPU-side fixed cost per kernel
  core::Seconds host_dispatch{5e-6};    // CPU time to issue one kernel
  std::string source;
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

// The efficiency a GEMM of m x n x k reaches on `gpu` (tile and wave quantization, times the
// architecture's best-shape efficiency for the GEMM's precision): what validation/compute.md
// plots.
double gemm_efficiency(const GpuSpec& gpu, const KernelCosts& costs, double m, double n, double k,
                       core::Precision precision = core::Precision::bf16);
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

  // One kernel's time on the GPU (without host dispatch): the unit everything sums.
  core::Seconds op_time(const GpuSpec& gpu, const OpCall& op, core::Precision precision) const;
  // A phase: the kernels' GPU time, or the CPU's issue time if that is longer.
  core::Seconds phase_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
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
