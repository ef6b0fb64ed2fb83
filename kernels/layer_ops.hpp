// The ops one GPU runs for one transformer layer, the logits layer and the optimizer step,
// with their shapes after tensor-parallel sharding: the list the profiler sweeps, the
// compute-time model sums, and the CPU layer (check-layers) executes.
//
// Op names and shapes (T = tokens = sequences x seq_len on this GPU, h hidden, d head_dim,
// a/k query/kv heads on this GPU = heads / tp, max(kv_heads / tp, 1), f = ffn_hidden / tp):
//   gemm, gemm_dgrad, gemm_wgrad   {m, n, k} of the forward Y[m,n] = X[m,k] W[k,n];
//                                  dgrad is dX = dY W^T, wgrad is dW = X^T dY (same FLOPs)
//   attention, attention_backward  {sequences, a, k, seq_len, d} (causal, FlashAttention:
//                                  the score matrix never leaves the SM; forward one kernel,
//                                  backward three: dO.O, the main kernel, dQ's conversion)
//   bmm                            {batch, m, n, k}: batched GEMM of standard attention
//                                  (scores Q K^T per head, and the scores times V)
//   softmax[_backward], dropout[_backward]  {elements}: standard attention's passes over
//                                  the score matrix (Megatron's fused scale-mask-softmax)
//   layernorm[_backward], rmsnorm[_backward]  {T, h}
//   gelu[_backward]                {T * f}      swiglu[_backward] {T, f}
//   add                            {elements}   (the residual, forward and backward)
//   rope                           {T, a + k, d, seq_len} (forward, and inverse in backward)
//   cross_entropy                  {T, vocab / tp} (forward and gradient in one pass)
//   adam                           {parameters}
// Shapes are doubles: a data-parallel slice may hold a fractional number of sequences.
// Kernels per layer (what the compute model charges a fixed overhead for) are the ops
// listed, each one kernel unless `kernels` says more: with FlashAttention and a GPT layer
// 10 forward (norm, QKV GEMM, attention, output GEMM, bias-dropout-add, norm, up GEMM,
// GeLU, down GEMM, bias-dropout-add; one more, rope, for rotary models) and 16 backward
// (two GEMMs per linear, three attention kernels, two norms, GeLU, two residual adds; rope
// again for rotary models), as Megatron-LM launches them with its fused
// bias-GeLU, bias-dropout-add and softmax kernels. Not modelled: the permutes between the
// QKV GEMM and attention, and the tensor-parallel collectives (the simulator costs those
// on its links).
#pragma once

#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace hgsim::kernels {

// How an op's time scales: with its FLOPs (GEMMs, attention) or with its bytes.
enum class Bound { compute, memory };

struct OpCall {
  std::string op;
  std::vector<double> shape;
  double flops = 0;
  double bytes = 0;  // bytes read and written once, at `element_bytes` per element
  Bound bound = Bound::memory;
  int kernels = 1;  // kernels the op launches
  // What the op is in its layer (layer_ops and logits_ops set it): "input_norm",
  // "qkv_proj", "rope", "attention", "out_proj", "attn_residual", "post_norm", "up_proj",
  // "act", "down_proj", "mlp_residual", "final_norm", "lm_head", "loss", "fp8_cast" (the
  // backward ops carry the role of the forward op they differentiate); "" elsewhere.
  std::string role;
  double work() const { return bound == Bound::compute ? flops : bytes; }
};

// What a list of ops does, each op's FLOPs and bytes as make_op counts them: what a Chakra
// trace's COMP_NODE carries as num_ops and tensor_size for the compute that list is.
struct OpCounts {
  double flops = 0;
  double bytes = 0;
  OpCounts scaled(double k) const { return {k * flops, k * bytes}; }
};
OpCounts counts_of(const std::vector<OpCall>& ops);

// One op with its FLOPs and bytes from its name and shape (throws std::invalid_argument
// for an unknown op or a shape of the wrong rank).
OpCall make_op(const std::string& op, std::vector<double> shape, double element_bytes);

struct LayerShape {
  const core::ModelConfig* model = nullptr;
  double sequences = 1;
  int seq_len = 0;
  int tp = 1;
  // Megatron sequence parallelism: norms and residual adds run on tokens / tp.
  bool sequence_parallel = false;
  core::Precision precision = core::Precision::bf16;
  core::Attention attention = core::Attention::flash;
};

struct PhaseOps {
  std::vector<OpCall> forward;
  std::vector<OpCall> backward;
};

PhaseOps layer_ops(const LayerShape& shape);
// The attention core's ops of a phase's list (forward: flash attention, or standard
// attention's batched GEMMs, softmax and dropout; backward: their gradients): what selective
// recomputation repeats and what context parallelism's exchanges overlap with.
std::vector<OpCall> attention_core_ops(const std::vector<OpCall>& ops, bool backward);
// The forward ops recomputation runs again before the backward: all of them (full), the
// attention core (selective: Korthikanti et al. 2022, sec. 5) or none.
std::vector<OpCall> recompute_ops(const std::vector<OpCall>& forward, core::Recompute recompute);
// Final norm, LM head GEMM (vocab split over tp) and cross-entropy.
PhaseOps logits_ops(const LayerShape& shape);
// The precision the logits layer runs in: fp8 training keeps the LM head in 16-bit
// (Transformer Engine's fp8 autocast covers the transformer layers' linear layers; Megatron
// and NeMo build the output layer outside it).
core::Precision logits_precision(core::Precision training);
OpCall optimizer_op(double parameters);

// Every op name, forward and backward.
const std::vector<std::string>& op_names();

}  // namespace hgsim::kernels
