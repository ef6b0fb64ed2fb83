#include "kernels/compute_model.hpp"

#include <algorithm>
#include <stdexcept>

#include "models/transformer.hpp"

namespace hgsim::kernels {

using core::Bytes;
using core::Flops;
using core::Seconds;

namespace {

core::FlopsPerSecond matmul_rate(const GpuSpec& gpu, core::Precision precision) {
  const auto rate = math_rate(gpu, precision);
  if (!rate) {
    // resolve_gpus refuses such scenarios before anything is costed.
    throw std::invalid_argument(gpu.name + " cannot run " + core::to_string(precision));
  }
  return rate->rate;
}

// Element-wise traffic of one layer's forward: every stored activation is written once
// and read once more by the next kernel. Counted without the attention scores (flash-style
// attention never materialises them), which is the `selective` activation set.
Bytes forward_memory_traffic(const LayerWork& work) {
  models::ActivationSetup setup;
  setup.precision = work.precision;
  setup.recompute = core::Recompute::selective;
  setup.tp = work.tp;
  setup.sequence_parallel = work.sequence_parallel;
  const Bytes activations =
      models::activation_bytes_per_layer(*work.model, work.sequences, work.seq_len, setup);
  const Bytes weights = models::weight_bytes(
      models::layer_parameters(*work.model) / std::max(work.tp, 1), work.precision);
  return 2.0 * activations + weights;
}

}  // namespace

PhaseTimes RooflineModel::layer(const GpuSpec& gpu, const LayerWork& work) const {
  const auto rate = efficiency_.matmul * matmul_rate(gpu, work.precision);
  const auto bandwidth = efficiency_.memory * gpu.memory_bandwidth;
  const double t = std::max(work.tp, 1);
  const Flops forward_flops =
      models::layer_forward_flops(*work.model, work.sequences, work.seq_len) / t;
  const Flops recompute_flops =
      models::layer_recompute_flops(*work.model, work.sequences, work.seq_len, work.recompute) / t;
  const Bytes traffic = forward_memory_traffic(work);
  const Seconds forward = forward_flops / rate + traffic / bandwidth;
  // Backward: twice the FLOPs (input and weight gradients) and twice the traffic.
  const Seconds backward = 2.0 * forward;
  Seconds recompute(0);
  if (work.recompute == core::Recompute::full) recompute = forward;
  if (work.recompute == core::Recompute::selective) recompute = recompute_flops / rate;
  return {forward, backward, recompute};
}

PhaseTimes RooflineModel::logits(const GpuSpec& gpu, const LayerWork& work) const {
  const auto rate = efficiency_.matmul * matmul_rate(gpu, work.precision);
  const auto bandwidth = efficiency_.memory * gpu.memory_bandwidth;
  const double t = std::max(work.tp, 1);
  const Flops forward_flops =
      models::logits_forward_flops(*work.model, work.sequences, work.seq_len) / t;
  // The fp32 logits are written, read by the softmax and written back as gradients.
  const Bytes traffic =
      3.0 * models::logits_buffer_bytes(*work.model, work.sequences, work.seq_len, work.tp);
  const Seconds forward = forward_flops / rate + traffic / bandwidth;
  return {forward, 2.0 * forward, Seconds(0)};
}

Seconds RooflineModel::optimizer_step(const GpuSpec& gpu, double parameters,
                                      core::Precision precision, core::Optimizer optimizer) const {
  // The update reads the gradient and the optimizer state and writes the state and the
  // weights back: the state twice, the gradient and the weights once each.
  const auto per_parameter = models::bytes_per_parameter(precision, optimizer);
  const Bytes traffic(
      parameters * (2 * per_parameter.optimizer + per_parameter.gradients + per_parameter.weights));
  return traffic / (efficiency_.memory * gpu.memory_bandwidth);
}

}  // namespace hgsim::kernels
