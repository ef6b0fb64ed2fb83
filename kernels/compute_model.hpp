// The compute-time model: how long one GPU takes for the work of one layer, the logits
// layer and the optimizer step. The one source of truth for compute time: the simulator's
// workload generator and the planner's cost model both call it.
//
// RooflineModel is the estimate used where no measured profile exists: each phase costs
// its matmul FLOPs at a fixed fraction of the GPU's datasheet math rate plus its memory
// traffic at a fixed fraction of the datasheet memory bandwidth (kernels run one after
// another, so the two add rather than overlap). Results built on it say "estimated".
// Measured profiles (issue #4) implement the same interface.
#pragma once

#include <string>

#include "core/scenario.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"

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
};

struct PhaseTimes {
  core::Seconds forward;
  core::Seconds backward;   // without recomputation
  core::Seconds recompute;  // forward work repeated before the backward (0 without)
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

struct RooflineEfficiency {
  // Fraction of the datasheet math rate that large transformer matmuls reach. 0.7 is
  // between what cuBLAS reaches on large bf16 GEMMs on A100/H100 (75-85%) and the ~55% MFU
  // of Megatron-LM's end-to-end runs, which also pay communication and bubbles.
  double matmul = 0.7;
  // Fraction of the datasheet memory bandwidth that element-wise kernels reach.
  double memory = 0.8;
};

class RooflineModel final : public ComputeModel {
 public:
  explicit RooflineModel(RooflineEfficiency efficiency = {}) : efficiency_(efficiency) {}
  PhaseTimes layer(const GpuSpec& gpu, const LayerWork& work) const override;
  PhaseTimes logits(const GpuSpec& gpu, const LayerWork& work) const override;
  core::Seconds optimizer_step(const GpuSpec& gpu, double parameters, core::Precision precision,
                               core::Optimizer optimizer) const override;
  std::string provenance(const GpuSpec&) const override { return "estimated"; }
  const RooflineEfficiency& efficiency() const { return efficiency_; }

 private:
  RooflineEfficiency efficiency_;
};

}  // namespace hgsim::kernels
