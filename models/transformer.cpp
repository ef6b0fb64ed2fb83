#include "models/transformer.hpp"

#include <algorithm>

#include "models/schedule.hpp"

namespace hgsim::models {

using core::Activation;
using core::Bytes;
using core::Flops;
using core::ModelConfig;
using core::Norm;
using core::Precision;
using core::Recompute;
using core::Schedule;

namespace {

double hidden(const ModelConfig& m) {
  return m.hidden;
}

// Width of K and V under grouped-query attention: k heads of h / a each (Ainslie et al.
// 2023). Equal to h without GQA.
double kv_width(const ModelConfig& m) {
  return hidden(m) * m.kv_heads / m.heads;
}

// Matrices the MLP multiplies by: two (up, down) for GeLU/ReLU, three (gate, up, down) for
// SwiGLU (Shazeer 2020).
int mlp_matrices(const ModelConfig& m) {
  return m.activation == Activation::swiglu ? 3 : 2;
}

// LayerNorm has a gain and, when the model has biases, a bias; RMSNorm only a gain
// (Zhang & Sennrich 2019).
double norm_parameters(const ModelConfig& m) {
  const bool has_bias = m.norm == Norm::layernorm && m.bias;
  return hidden(m) * (has_bias ? 2 : 1);
}

// One bias per output column: Q, K, V and output projections; up (and gate) and down.
double layer_bias_parameters(const ModelConfig& m) {
  if (!m.bias) return 0;
  const double h = hidden(m);
  const double attention = h + 2 * kv_width(m) + h;
  const double mlp = (mlp_matrices(m) - 1) * double(m.ffn_hidden) + h;
  return attention + mlp;
}

}  // namespace

// ---- parameters -----------------------------------------------------------------------

double attention_matmul_parameters(const ModelConfig& m) {
  const double h = hidden(m);
  return h * (h + 2 * kv_width(m)) + h * h;  // Q, K, V projections, then the output
}

double mlp_matmul_parameters(const ModelConfig& m) {
  return mlp_matrices(m) * hidden(m) * m.ffn_hidden;
}

double layer_matmul_parameters(const ModelConfig& m) {
  return attention_matmul_parameters(m) + mlp_matmul_parameters(m);
}

// Per layer: h (h + 2 h k / a) + h^2 for attention, 2 h f (GeLU) or 3 h f (SwiGLU) for the
// MLP, biases, and two norms (pre-attention and pre-MLP). With a = k, f = 4h, biases and
// LayerNorm this is GPT-2/3's 12 h^2 + 13 h (Narayanan et al. 2021, appendix).
double layer_parameters(const ModelConfig& m) {
  return layer_matmul_parameters(m) + layer_bias_parameters(m) + 2 * norm_parameters(m);
}

double embedding_parameters(const ModelConfig& m) {
  return double(m.vocab) * m.hidden + double(m.max_positions) * m.hidden;
}

double final_norm_parameters(const ModelConfig& m) {
  return norm_parameters(m);
}

double lm_head_parameters(const ModelConfig& m) {
  return m.tied_embeddings ? 0 : double(m.vocab) * m.hidden;
}

double parameter_count(const ModelConfig& m) {
  return m.layers * layer_parameters(m) + embedding_parameters(m) + final_norm_parameters(m) +
         lm_head_parameters(m);
}

// ---- FLOPs ----------------------------------------------------------------------------
//
// The convention of Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
// on GPU Clusters Using Megatron-LM", sec. 5.1 and appendix): a multiply-add is 2 FLOPs, a
// matrix product of b s tokens by a weight of P parameters is 2 b s P, attention scores
// and their product with values are 2 b s^2 h each with no causal discount, backward is
// twice forward, element-wise work (norms, softmax, activations) is not counted. For GPT
// (12 h^2 matrix parameters per layer) this gives their 24 b s h^2 + 4 b s^2 h per layer.

Flops attention_core_forward_flops(const ModelConfig& m, double sequences, int seq_len) {
  const double s = seq_len;
  return Flops(4 * sequences * s * s * hidden(m));
}

Flops layer_forward_flops(const ModelConfig& m, double sequences, int seq_len) {
  const double tokens = sequences * seq_len;
  return Flops(2 * tokens * layer_matmul_parameters(m)) +
         attention_core_forward_flops(m, sequences, seq_len);
}

Flops layer_backward_flops(const ModelConfig& m, double sequences, int seq_len) {
  return 2 * layer_forward_flops(m, sequences, seq_len);
}

// Full recomputation runs each layer's forward again before its backward; selective
// recomputation (Korthikanti et al. 2022, sec. 5) only the attention core.
double attention_share_of_layer(const ModelConfig& m, int seq_len) {
  // Per token: 2 x matrix parameters, plus 4 s h for the attention core.
  const double attention = 2 * attention_matmul_parameters(m) + 4.0 * seq_len * hidden(m);
  const double mlp = 2 * mlp_matmul_parameters(m);
  return attention / (attention + mlp);
}

Flops layer_recompute_flops(const ModelConfig& m, double sequences, int seq_len,
                            Recompute recompute) {
  switch (recompute) {
    case Recompute::none:
      return Flops(0);
    case Recompute::selective:
      return attention_core_forward_flops(m, sequences, seq_len);
    case Recompute::full:
      return layer_forward_flops(m, sequences, seq_len);
  }
  return Flops(0);
}

Flops logits_forward_flops(const ModelConfig& m, double sequences, int seq_len) {
  return Flops(2 * sequences * seq_len * hidden(m) * m.vocab);
}

Flops logits_backward_flops(const ModelConfig& m, double sequences, int seq_len) {
  return 2 * logits_forward_flops(m, sequences, seq_len);
}

// Without recomputation and with GPT's shapes this is Narayanan et al.'s
// 72 B s l h^2 (1 + s / 6h + V / 12 l h); with full recomputation their
// 96 B s l h^2 (1 + s / 6h + V / 16 l h).
Flops training_flops(const ModelConfig& m, double sequences, int seq_len, Recompute recompute) {
  const Flops per_layer = layer_forward_flops(m, sequences, seq_len) +
                          layer_backward_flops(m, sequences, seq_len) +
                          layer_recompute_flops(m, sequences, seq_len, recompute);
  return m.layers * per_layer + logits_forward_flops(m, sequences, seq_len) +
         logits_backward_flops(m, sequences, seq_len);
}

// ---- communication ----------------------------------------------------------------------

Bytes pipeline_boundary_bytes(const ModelConfig& m, double sequences, int seq_len,
                              Precision precision, int shards) {
  const double elements = sequences * seq_len * hidden(m);
  return Bytes(elements * core::element_bytes(precision) / std::max(shards, 1));
}

Bytes context_exchange_bytes(const ModelConfig& m, double sequences, int seq_len, int tp,
                             Precision precision) {
  const int t = std::max(tp, 1);
  const double kv_heads = std::max(1.0, static_cast<double>(m.kv_heads) / t);
  const double head_dim = hidden(m) / m.heads;
  return Bytes(2 * sequences * seq_len * kv_heads * head_dim * core::element_bytes(precision));
}

// ---- activation memory ----------------------------------------------------------------
//
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", sec. 4.1, counts what one layer keeps for backward, in bytes for 16-bit
// activations (e = 2) and 1-byte dropout masks:
//
//   attention  QKV input 2sbh, Q and K 4sbh, softmax output 2as^2b, its dropout mask
//              as^2b and output 2as^2b, V 2sbh, output-projection input 2sbh, dropout
//              mask sbh                                          = 11sbh + 5as^2b
//   MLP        first linear's input 2sbh, GeLU input 8sbh, GeLU output 8sbh, dropout
//              mask sbh                                          = 19sbh
//   norms      two LayerNorm inputs                              = 4sbh
//   total      sbh (34 + 5as/h)
//
// Generalised here, with e = element_bytes(precision):
//   - grouped-query attention: K and V are s b h k / a elements each;
//   - the MLP keeps, per hidden unit of width f: GeLU/ReLU its input and output (2 e s b f;
//     16sbh for f = 4h, e = 2); SwiGLU the gate and up projections' outputs and their
//     product SiLU(gate) * up, the down projection's input (3 e s b f; 6sbf in 16-bit),
//     SiLU(gate) itself being recomputed from the gate in backward as fused kernels do;
//   - dropout masks and the dropout output of the attention probabilities exist only
//     when the model trains with dropout; without it the softmax output is both what the
//     softmax backward and the A V product need, kept once (2as^2b);
//   - RMSNorm keeps its input like LayerNorm;
//   - fp8 training (Transformer Engine): every linear layer keeps its input for the weight
//     gradient as the fp8 copy it multiplied (1 byte; TE's `_Linear.forward` saves
//     `inputmat` / `inputmat_t` after `fp8_cast_transpose_fused` under the default recipe),
//     the QKV, output-projection, first and second MLP inputs; what the attention core and
//     the activation function keep stays 16-bit. For GPT (f = 4h) that is 7sbh less per
//     layer than bf16's 34sbh.
//
// Tensor parallelism (sec. 4.2) splits what lies between the column- and row-parallel
// matrices (Q, K, V, attention core, output-projection input, MLP hidden) over t; the rest
// (norm inputs, the inputs of the QKV and first MLP matrices, dropout masks after the
// row-parallel matrices) is replicated, unless sequence parallelism (sec. 4.2.2) splits it
// over t along the sequence. Selective recomputation (sec. 5) drops the attention core;
// full recomputation keeps only the layer's input (sec. 4.3). FlashAttention (the default
// attention) never stores the score matrix: the attention core costs only its row
// statistics, which makes the no-recomputation figure about that of selective
// recomputation. With `attention: standard`, for GPT this reproduces
// Table 2: sbh(34 + 5as/h); sbh(10 + 24/t + 5as/ht); sbh/t (34 + 5as/h); sbh(10 + 24/t);
// 34sbh/t; 2sbh (2sbh/t with sequence parallelism).

namespace {

struct LayerActivationBytes {
  double replicated = 0;       // over the tp group, unless sequence-parallel
  double tensor_parallel = 0;  // split over t
  double attention_core = 0;   // split over t; dropped by selective recomputation
};

constexpr double kMaskBytes = 1;  // a dropout mask keeps one byte per element

// e: bytes of a 16-bit (or fp32) activation; g: of a linear layer's saved input (e, or 1
// under fp8).
LayerActivationBytes layer_activation_parts(const ModelConfig& m, double sequences, int seq_len,
                                            double e, double g) {
  const double s = seq_len;
  const double sbh = s * sequences * hidden(m);
  const double sbf = s * sequences * m.ffn_hidden;
  const double key_or_value = sbh * m.kv_heads / m.heads;  // K or V under GQA
  const double scores = double(m.heads) * s * s * sequences;
  const double masks = m.dropout ? kMaskBytes : 0;

  LayerActivationBytes parts;
  parts.replicated = 2 * e * sbh         // the two norms' inputs
                     + g * sbh           // QKV projection input (first norm's output)
                     + g * sbh           // first MLP matrix input (second norm's output)
                     + 2 * masks * sbh;  // dropout masks after attention and after the MLP
  // The activation function's own inputs (16-bit) and the second matrix's input (g).
  const double mlp_hidden = ((m.activation == Activation::swiglu ? 2 : 1) * e + g) * sbf;
  parts.tensor_parallel = e * sbh                 // Q
                          + 2 * e * key_or_value  // K and V
                          + g * sbh               // output projection input
                          + mlp_hidden;
  parts.attention_core = e * scores                                      // softmax output
                         + (m.dropout ? (kMaskBytes + e) * scores : 0);  // mask, output
  return parts;
}

}  // namespace

Bytes activation_bytes_per_layer(const ModelConfig& m, double sequences, int seq_len,
                                 const ActivationSetup& setup) {
  const double e = core::element_bytes(setup.precision);
  const double t = std::max(setup.tp, 1);
  const double replicated_share = setup.sequence_parallel ? 1 / t : 1;
  if (setup.recompute == Recompute::full) {
    return Bytes(e * seq_len * sequences * hidden(m) * replicated_share);
  }
  const double g = setup.precision == Precision::fp8 ? 1 : e;
  const LayerActivationBytes parts = layer_activation_parts(m, sequences, seq_len, e, g);
  // FlashAttention keeps only the softmax's fp32 log-sum-exp per query row and head (it
  // regenerates dropout from the RNG state): 4 a s b bytes, split over t.
  const double flash_statistics = 4.0 * m.heads * seq_len * sequences;
  double attention_core =
      setup.attention == core::Attention::flash ? flash_statistics : parts.attention_core;
  if (setup.recompute == Recompute::selective) attention_core = 0;
  return Bytes(parts.replicated * replicated_share + (parts.tensor_parallel + attention_core) / t);
}

// fp8 training (Transformer Engine): each linear layer of the transformer layers keeps an
// fp8 copy of its weight and of its transpose between micro-batches (`weight_fp8`,
// `weight_t_fp8`, cast once per iteration at the first micro-batch), 2 bytes per matrix
// parameter of this GPU's layers; the LM head stays 16-bit.
Bytes fp8_weight_copies_bytes(const ModelConfig& m, const StageSpec& stage, Precision precision) {
  if (precision != Precision::fp8) return Bytes(0);
  return Bytes(2.0 * stage.layers * layer_matmul_parameters(m) / std::max(stage.tp, 1));
}

// Megatron-LM computes the vocabulary-parallel cross-entropy in fp32: each of the t ranks
// keeps s b V / t logits of 4 bytes from the forward until the backward of the LM head.
Bytes logits_buffer_bytes(const ModelConfig& m, double sequences, int seq_len, int tp) {
  return Bytes(4.0 * seq_len * sequences * m.vocab / std::max(tp, 1));
}

// ---- weights, gradients, optimizer state ------------------------------------------------

namespace {

bool mixed_precision(Precision precision) {
  return precision == Precision::fp16 || precision == Precision::bf16 ||
         precision == Precision::fp8;
}

}  // namespace

// ZeRO (Rajbhandari et al. 2020, sec. 3.1): mixed-precision training keeps 16-bit weights
// and gradients (2 + 2 bytes) and, for the optimizer, an fp32 master copy (4) and Adam's
// two fp32 moments (4 + 4): K = 12. Plain fp32 (and TF32, which stores fp32) needs no
// master copy: 4 + 4 + 8. SGD with momentum keeps one moment: 2 + 2 + (4 + 4) mixed,
// 4 + 4 + 4 in fp32. FP8 training (Transformer Engine) still keeps 16-bit weights, fp32
// main gradients and fp32 optimizer state, as bf16 does; its fp8 weight copies are
// counted apart (fp8_weight_copies_bytes).
Precision gradient_precision(const core::Training& training) {
  if (training.grad_dtype) return *training.grad_dtype;
  return training.precision == Precision::fp16 ? Precision::fp16 : Precision::fp32;
}

BytesPerParameter bytes_per_parameter(const core::Training& training) {
  const bool mixed = mixed_precision(training.precision);
  const double moments = training.optimizer == core::Optimizer::sgd ? 1 : 2;
  const double state = core::element_bytes(training.optimizer_state);
  BytesPerParameter per;
  per.weights = mixed ? 2 : 4;
  per.gradients = core::element_bytes(gradient_precision(training));
  per.optimizer = (mixed ? state : 0) + state * moments;
  return per;
}

BytesPerParameter bytes_per_parameter(Precision precision, core::Optimizer optimizer) {
  core::Training training;
  training.precision = precision;
  training.optimizer = optimizer;
  return bytes_per_parameter(training);
}

Bytes weight_bytes(double parameters, Precision precision) {
  return Bytes(parameters * bytes_per_parameter(precision, core::Optimizer::adam).weights);
}

Bytes gradient_bytes(double parameters, Precision precision) {
  return Bytes(parameters * bytes_per_parameter(precision, core::Optimizer::adam).weights);
}

Bytes gradient_sync_bytes(double parameters, const core::Training& training, int zero) {
  const BytesPerParameter per = bytes_per_parameter(training);
  if (zero <= 0) return Bytes(parameters * per.gradients);
  // A reduce-scatter of the gradients and 2 f - 1 all-gathers of the weights, each half an
  // all-reduce (f = zero_traffic_factor: 1 gather under ZeRO-1 and -2, 2 under ZeRO-3).
  const double weight_gathers = 2 * zero_traffic_factor(zero) - 1;
  return Bytes(parameters * (per.gradients + weight_gathers * per.weights) / 2);
}

Bytes optimizer_bytes(double parameters, Precision precision, core::Optimizer optimizer) {
  return Bytes(parameters * bytes_per_parameter(precision, optimizer).optimizer);
}

double zero_traffic_factor(int zero) {
  return zero >= 3 ? 1.5 : 1.0;
}

// ---- memory of a pipeline stage -------------------------------------------------------

StageSpec stage_spec(const core::Plan& plan, std::size_t pipeline, std::size_t stage) {
  const core::Pipeline& line = plan.pipelines.at(pipeline);
  const core::Stage& st = line.stages.at(stage);
  StageSpec spec;
  spec.schedule = plan.schedule;
  spec.stages = static_cast<int>(line.stages.size());
  spec.stage_index = static_cast<int>(stage);
  spec.micro_batches = line.micro_batches;
  spec.virtual_stages = plan.schedule == Schedule::interleaved ? plan.virtual_stages : 1;
  spec.layers = st.layers;
  spec.tp = st.tp;
  spec.dp = st.dp;
  spec.cp = st.cp;
  spec.micro_batch = plan.micro_batch;
  spec.sequence_parallel = plan.sequence_parallel;
  spec.zero = plan.zero;
  // Megatron's distributed optimizer shards over data- and context-parallel ranks alike:
  // both hold the same weights.
  spec.zero_shards = st.dp * st.cp * line.replicas;
  return spec;
}

// The peak of the schedule the stage plays (models/schedule.hpp), in (micro-batch, model
// chunk) pairs.
int micro_batches_in_flight(const StageSpec& stage) {
  return peak_in_flight(stage.schedule, stage.stages, stage.stage_index, stage.micro_batches,
                        std::max(stage.virtual_stages, 1));
}

double layer_activations_in_flight(const StageSpec& stage) {
  const double layers_per_chunk = stage.schedule == Schedule::interleaved
                                      ? double(stage.layers) / std::max(stage.virtual_stages, 1)
                                      : double(stage.layers);
  return micro_batches_in_flight(stage) * layers_per_chunk;
}

// Megatron-LM keeps the word embedding on the first stage and, when it is tied and the
// model is pipelined, a copy on the last stage for the LM head (its gradient is all-reduced
// between the two). Everything is divided by t: Megatron splits the vocabulary and every
// matrix over the tp group; the norms and row-parallel biases it replicates are a few h
// per layer, which we neglect.
double stage_parameters(const ModelConfig& m, const StageSpec& stage) {
  double params = stage.layers * layer_parameters(m);
  const bool first = stage.stage_index == 0;
  const bool last = stage.stage_index == stage.stages - 1;
  if (first) params += embedding_parameters(m);
  if (last) {
    const bool needs_head_copy = m.tied_embeddings && !first;
    params += final_norm_parameters(m) + lm_head_parameters(m) +
              (needs_head_copy ? double(m.vocab) * m.hidden : 0);
  }
  return params / std::max(stage.tp, 1);
}

double optimizer_step_parameters(const ModelConfig& m, const StageSpec& stage) {
  const double shards = stage.zero >= 1 ? std::max(stage.zero_shards, 1) : 1;
  return stage_parameters(m, stage) / shards;
}

// Peak memory of one GPU: weights, gradients and optimizer state of its parameters (sharded
// as the plan's ZeRO stage says), the activations of the layers in flight for a micro-batch of
// micro_batch / dp sequences, and on the last stage the fp32 logits of one micro-batch
// (the last stage runs each micro-batch's backward right after its forward). Not counted:
// the embedding's and the first stage's input activations, temporary buffers (the
// recomputed layer's activations under full recomputation, communication buffers,
// workspace) and allocator fragmentation.
StageMemory stage_memory(const ModelConfig& m, const core::Training& training,
                         const StageSpec& stage) {
  const double params = stage_parameters(m, stage);
  // Context parallelism keeps s / cp tokens of each sequence: as many activations as
  // 1 / cp of the sequences (flash attention's are linear in tokens; check_plan refuses cp
  // with the standard path's s^2 score matrix).
  const double sequences =
      double(stage.micro_batch) / std::max(stage.dp, 1) / std::max(stage.cp, 1);
  ActivationSetup setup;
  setup.precision = training.precision;
  setup.recompute = training.recompute;
  setup.tp = stage.tp;
  setup.sequence_parallel = stage.sequence_parallel;
  setup.attention = training.attention;

  // ZeRO shards over the stage's data-parallel copies; stage 3 also holds the gathered
  // weights of the layer it computes and of the one it prefetches.
  const BytesPerParameter per = bytes_per_parameter(training);
  const double shards = std::max(stage.zero_shards, 1);
  const double layer_params = layer_parameters(m) / std::max(stage.tp, 1);
  StageMemory memory;
  memory.weights = Bytes(params * per.weights / (stage.zero >= 3 ? shards : 1) +
                         (stage.zero >= 3 ? 2 * layer_params * per.weights : 0) +
                         fp8_weight_copies_bytes(m, stage, training.precision).value());
  memory.gradients = Bytes(params * per.gradients / (stage.zero >= 2 ? shards : 1));
  memory.optimizer = Bytes(params * per.optimizer / (stage.zero >= 1 ? shards : 1));
  memory.activations = activation_bytes_per_layer(m, sequences, training.seq_len, setup) *
                       layer_activations_in_flight(stage);
  if (stage.stage_index == stage.stages - 1) {
    memory.activations += logits_buffer_bytes(m, sequences, training.seq_len, stage.tp);
  }
  memory.total = memory.weights + memory.gradients + memory.optimizer + memory.activations;
  return memory;
}

StageMemory stage_memory(const ModelConfig& m, const core::Training& training,
                         const core::Plan& plan, std::size_t pipeline, std::size_t stage) {
  return stage_memory(m, training, stage_spec(plan, pipeline, stage));
}

}  // namespace hgsim::models
