// The arithmetic of a decoder-only transformer: parameters, FLOPs, the bytes that cross a
// pipeline boundary, activation memory, and the memory of one pipeline stage.
//
// This is the one source of truth for these numbers: the planner's cost model, the
// simulator's workload generator and the reports all call these functions.
//
// Notation (as in the papers cited below): b sequences (a micro-batch) of s tokens,
// h = hidden, a = heads, k = kv_heads, f = ffn_hidden, V = vocab, l = layers, t = tensor-
// parallel degree, p = pipeline stages, m = micro-batches, v = virtual stages.
// Parameter counts are doubles: they are integers far below 2^53, so they stay exact.
#pragma once

#include <cstddef>

#include "core/scenario.hpp"
#include "core/units.hpp"

namespace hgsim::models {

// ---- parameters -----------------------------------------------------------------------

// Q, K, V and output projections (grouped-query attention narrows K and V).
double attention_matmul_parameters(const core::ModelConfig& m);
// Up and down (and gate, for SwiGLU) projections.
double mlp_matmul_parameters(const core::ModelConfig& m);
// Weights of the attention and MLP matrices of one layer, without biases and norms: the
// parameters every token multiplies (what FLOPs are counted on).
double layer_matmul_parameters(const core::ModelConfig& m);
// All parameters of one transformer layer: matrices, biases, two norms.
double layer_parameters(const core::ModelConfig& m);
// Token embedding (V h) plus learned position embeddings (max_positions h).
double embedding_parameters(const core::ModelConfig& m);
// The norm after the last layer.
double final_norm_parameters(const core::ModelConfig& m);
// The output projection to the vocabulary; 0 when it is tied to the token embedding.
double lm_head_parameters(const core::ModelConfig& m);
// Everything: l layers, embeddings, final norm, LM head.
double parameter_count(const core::ModelConfig& m);

// ---- FLOPs ----------------------------------------------------------------------------

// Attention scores Q K^T and their product with V for b sequences of s tokens:
// 2 b s^2 h each, 4 b s^2 h forward, with no discount for the causal mask.
core::Flops attention_core_forward_flops(const core::ModelConfig& m, double sequences, int seq_len);
// One layer forward: 2 b s (matrix parameters) + 4 b s^2 h.
core::Flops layer_forward_flops(const core::ModelConfig& m, double sequences, int seq_len);
// One layer backward: twice the forward (gradients of inputs and of weights).
core::Flops layer_backward_flops(const core::ModelConfig& m, double sequences, int seq_len);
// The attention block's share of a layer's forward FLOPs (projections and the attention
// core), the rest being the MLP's: how a layer's time splits around its two
// tensor-parallel collectives.
double attention_share_of_layer(const core::ModelConfig& m, int seq_len);
// Forward work repeated in backward: full = a whole layer, selective = the attention core.
core::Flops layer_recompute_flops(const core::ModelConfig& m, double sequences, int seq_len,
                                  core::Recompute recompute);
// The logits (LM head) layer: 2 b s h V forward, twice that backward; never recomputed.
core::Flops logits_forward_flops(const core::ModelConfig& m, double sequences, int seq_len);
core::Flops logits_backward_flops(const core::ModelConfig& m, double sequences, int seq_len);
// One training iteration of the whole model on b sequences: l layers forward, backward
// and recompute, plus the logits layer forward and backward.
core::Flops training_flops(const core::ModelConfig& m, double sequences, int seq_len,
                           core::Recompute recompute);

// ---- communication ----------------------------------------------------------------------

// The hidden-state tensor one pipeline stage sends the next, b s h elements, per sender
// when `shards` ranks each send an equal slice (tensor parallelism with Megatron-LM's
// scatter/gather optimisation, or sequence parallelism: shards = t).
core::Bytes pipeline_boundary_bytes(const core::ModelConfig& m, double sequences, int seq_len,
                                    core::Precision precision, int shards = 1);

// K and V of one context-parallel rank's tokens on one tensor-parallel rank: what each step
// of ring attention sends its neighbour in the forward, 2 b s k d e / t bytes for the rank's
// b s tokens (k kv heads of d = h / a, at least one per tp rank; e = element bytes).
core::Bytes context_exchange_bytes(const core::ModelConfig& m, double sequences, int seq_len,
                                   int tp, core::Precision precision);

// ---- activation memory ----------------------------------------------------------------

struct ActivationSetup {
  core::Precision precision = core::Precision::bf16;
  core::Recompute recompute = core::Recompute::none;
  int tp = 1;                      // tensor-parallel degree t
  bool sequence_parallel = false;  // Megatron sequence parallelism inside the tp group
  // FlashAttention keeps no score matrix, only its fp32 row statistics (4 a s b bytes).
  core::Attention attention = core::Attention::flash;
};

// Bytes one GPU keeps from the forward of one layer until its backward, for b sequences of
// s tokens (Korthikanti et al. 2022, sec. 4, generalised; see transformer.cpp).
core::Bytes activation_bytes_per_layer(const core::ModelConfig& m, double sequences, int seq_len,
                                       const ActivationSetup& setup);
// The fp32 logits the cross-entropy keeps on the last stage: 4 s b V / t bytes.
core::Bytes logits_buffer_bytes(const core::ModelConfig& m, double sequences, int seq_len, int tp);

// ---- weights, gradients, optimizer state ------------------------------------------------

struct BytesPerParameter {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;  // master weights (mixed precision) and the optimizer's moments
  double total() const { return weights + gradients + optimizer; }
};

// The dtype a run keeps its main gradients in, which is also what its data-parallel
// reduction moves: training.grad_dtype where the scenario says, else Megatron-LM's rule
// (megatron/training/arguments.py, "bfloat16 requires gradient accumulation and all-reduce to
// be done in fp32"): bf16 and fp8 training accumulate and reduce in fp32, fp16 in fp16
// (accumulate_allreduce_grads_in_fp32 off by default), fp32 and tf32 in fp32.
core::Precision gradient_precision(const core::Training& training);

// Bytes each parameter costs in training, as Megatron-LM keeps them (theoretical_memory_usage.py:
// 18 bytes per parameter for bf16 Adam): 2 bytes of bf16 weights, 4 of fp32 main gradients
// (gradient_precision) and 12 of optimizer state (fp32 master copy and two moments,
// Rajbhandari et al. 2020, sec. 3.1). fp16 keeps 16-bit gradients: 2 + 2 + 12 = 16. fp32
// Adam 4 + 4 + 8; SGD with momentum keeps one moment. AdamW is Adam. fp8 (Transformer
// Engine) keeps bf16 weights, fp32 main gradients and state as bf16 does (its fp8 weight
// copies: fp8_weight_copies_bytes). training.optimizer_state: bf16 keeps the master copy and
// the moments in 2 bytes each (apex's DistributedFusedAdam with dtype bf16, as NeMo runs it:
// 2 + 2 + 2 = 6 bytes of state).
BytesPerParameter bytes_per_parameter(const core::Training& training);
// The same for a training of this precision and optimizer with every other dtype at its
// default.
BytesPerParameter bytes_per_parameter(core::Precision precision, core::Optimizer optimizer);
core::Bytes weight_bytes(double parameters, core::Precision precision);
// Bytes of one 16-bit or 32-bit element per parameter in the training precision (what a
// DiLoCo pseudo-gradient shard carries).
core::Bytes gradient_bytes(double parameters, core::Precision precision);

// The bytes a data-parallel step moves, in units of a ring all-reduce (2 (n - 1) / n of them
// per member): plain data parallelism all-reduces the main gradients (gradient_precision);
// ZeRO-1 and -2 reduce-scatter them and all-gather the updated weights in the training
// precision, (n - 1) / n each (Megatron's distributed optimizer: fp32 gradients out, bf16
// weights back); ZeRO-3 all-gathers the weights once more (forward and backward each
// gather them). With gradients and weights of one size these are 1, 1 and 1.5 times the
// gradients (zero_traffic_factor).
core::Bytes gradient_sync_bytes(double parameters, const core::Training& training, int zero);

// Data-parallel traffic per step under a ZeRO stage, in units of a ring all-reduce of the
// gradients (2 (n - 1) / n of their bytes per member). ZeRO-1 and -2 reduce-scatter the
// gradients and all-gather the updated weights: (n - 1) / n each, the all-reduce's volume
// (1). ZeRO-3 all-gathers the weights once more (forward and backward each gather them;
// the post-step gather is not needed): RS + 2 AG = 1.5 all-reduces.
double zero_traffic_factor(int zero);
core::Bytes optimizer_bytes(double parameters, core::Precision precision,
                            core::Optimizer optimizer);

// ---- memory of a pipeline stage -------------------------------------------------------

// One stage of one pipeline, as the memory model needs it.
struct StageSpec {
  core::Schedule schedule = core::Schedule::one_f_one_b;
  int stages = 1;          // p, stages of this pipeline
  int stage_index = 0;     // 0-based position of this stage
  int micro_batches = 1;   // m, per replica per iteration
  int virtual_stages = 1;  // v, model chunks per GPU (interleaved only)
  int layers = 0;          // this stage's layers, all of its chunks together
  int tp = 1;
  int dp = 1;           // splits each micro-batch inside the stage
  int cp = 1;           // splits each sequence inside the stage (context parallelism)
  int micro_batch = 1;  // sequences per micro-batch, before the dp split
  bool sequence_parallel = false;
  // ZeRO stage (0-3) and the data-parallel copies of this stage's parameters it shards
  // over: 1 the optimizer state (Megatron's distributed optimizer), 2 the gradients too,
  // 3 the weights too (FSDP full shard).
  int zero = 0;
  int zero_shards = 1;
};

// The spec of stage `stage` of pipeline `pipeline` of a plan.
StageSpec stage_spec(const core::Plan& plan, std::size_t pipeline, std::size_t stage);

// Micro-batches whose activations a stage holds at its peak: the peak of the schedule it
// plays (models::peak_in_flight): GPipe m; 1F1B min(p - r, m);
// interleaved min(warm-up + 1, m v) with Megatron-LM's warm-up (p - r - 1) 2 + (v - 1) p,
// all m v of them when m = p, counted in (micro-batch, model chunk) pairs of layers / v
// layers each.
int micro_batches_in_flight(const StageSpec& stage);
// The same peak in units of one layer's activations for one micro-batch.
double layer_activations_in_flight(const StageSpec& stage);

struct StageMemory {
  core::Bytes weights;  // with ZeRO-3: this GPU's shard plus two gathered layers
  core::Bytes gradients;
  core::Bytes optimizer;
  core::Bytes activations;  // layer activations in flight, plus the logits on the last stage
  core::Bytes total;
};

// fp8 training's extra weight memory (Transformer Engine's fp8 copy of every linear
// layer's weight and of its transpose, kept between micro-batches): 2 bytes per matrix
// parameter of the stage's layers on this GPU; 0 for other precisions.
core::Bytes fp8_weight_copies_bytes(const core::ModelConfig& m, const StageSpec& stage,
                                    core::Precision precision);

// Parameters one GPU of the stage holds: its layers, the embeddings on the first stage,
// the final norm and the LM head (or the tied embedding's copy) on the last, over t.
double stage_parameters(const core::ModelConfig& m, const StageSpec& stage);

// Parameters one GPU of the stage updates in the optimizer step: all it holds, or under ZeRO
// >= 1 its 1 / zero_shards slice (Megatron-LM's distributed optimizer and FSDP step only the
// shard of the optimizer state a rank owns; the gathered weights come back by all-gather,
// counted with the gradient sync's traffic: zero_traffic_factor).
double optimizer_step_parameters(const core::ModelConfig& m, const StageSpec& stage);

// Peak memory of one GPU of the stage (see transformer.cpp for what is and is not counted).
StageMemory stage_memory(const core::ModelConfig& m, const core::Training& training,
                         const StageSpec& stage);
StageMemory stage_memory(const core::ModelConfig& m, const core::Training& training,
                         const core::Plan& plan, std::size_t pipeline, std::size_t stage);

}  // namespace hgsim::models
