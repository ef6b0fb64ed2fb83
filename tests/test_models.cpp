// models/: the zoo against published parameter counts, FLOPs against the closed forms of
// Narayanan et al. 2021 and Kaplan et al. 2020, activation memory against Korthikanti et
// al. 2022 Table 2, stage memory against hand computations, and the diagnostics of
// resolve_model and check_plan_against_model.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "models/schedule.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"

namespace hgsim::models {
namespace {

using core::Precision;
using core::Recompute;
using core::Schedule;

const core::ModelConfig& zoo_model(const std::string& name) {
  const ZooEntry* entry = find_model(name);
  if (entry == nullptr) throw std::runtime_error("no zoo model " + name);
  return entry->config;
}

// The GPT architecture of Korthikanti et al. and Narayanan et al.: f = 4h, no GQA,
// GeLU, LayerNorm, biases, dropout.
core::ModelConfig gpt(int layers, int hidden, int heads, int vocab = 50257) {
  core::ModelConfig m;
  m.name = "gpt-test";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.vocab = vocab;
  m.ffn_hidden = 4 * hidden;
  m.max_positions = 2048;
  return m;
}

// ---- the zoo ------------------------------------------------------------------------------

TEST(ModelZoo, HoldsTheNamedModels) {
  const std::vector<std::string> expected = {
      "gpt2-124m", "gpt2-355m",  "gpt2-774m",  "gpt2-1.5b", "gpt3-125m",  "gpt3-350m",
      "gpt3-760m", "gpt3-1.3b",  "gpt3-2.7b",  "gpt3-6.7b", "gpt3-13b",   "gpt3-175b",
      "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "nemotron-4-340b"};
  EXPECT_EQ(model_names(), expected);
  for (const ZooEntry& entry : zoo()) {
    EXPECT_FALSE(entry.source.empty()) << entry.config.name;
    EXPECT_EQ(entry.config.hidden % entry.config.heads, 0) << entry.config.name;
    EXPECT_EQ(entry.config.heads % entry.config.kv_heads, 0) << entry.config.name;
  }
}

TEST(ModelZoo, FindsNamesAndAliasesIgnoringCase) {
  EXPECT_EQ(find_model("GPT2")->config.name, "gpt2-124m");
  EXPECT_EQ(find_model("gpt3-xl")->config.name, "gpt3-1.3b");
  EXPECT_EQ(find_model("Llama-2-7B")->config.name, "llama2-7b");
  EXPECT_EQ(find_model("llama3-70b")->config.name, "llama3-70b");
  EXPECT_EQ(find_model("gpt4"), nullptr);
}

TEST(ModelZoo, Gpt3TableMisprintsAreCorrected) {
  // Table 2.1 prints d_model 5140 for 13B; its 40 heads of 128 make 5120.
  const core::ModelConfig& m13 = zoo_model("gpt3-13b");
  EXPECT_EQ(m13.hidden, 5120);
  EXPECT_EQ(m13.hidden / m13.heads, 128);
  // It prints 24 heads of 128 for XL, whose d_model is 2048: 16 heads of 128.
  const core::ModelConfig& xl = zoo_model("gpt3-xl");
  EXPECT_EQ(xl.hidden, 2048);
  EXPECT_EQ(xl.heads, 16);
}

TEST(ModelZoo, LlamaArchitecture) {
  for (const char* name : {"llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b"}) {
    const core::ModelConfig& m = zoo_model(name);
    EXPECT_EQ(m.activation, core::Activation::swiglu) << name;
    EXPECT_EQ(m.norm, core::Norm::rmsnorm) << name;
    EXPECT_EQ(m.max_positions, 0) << name;
    EXPECT_FALSE(m.tied_embeddings) << name;
    EXPECT_FALSE(m.bias) << name;
    EXPECT_FALSE(m.dropout) << name;
  }
  EXPECT_EQ(zoo_model("llama2-70b").kv_heads, 8);
  EXPECT_EQ(zoo_model("llama3-8b").kv_heads, 8);
  EXPECT_EQ(zoo_model("llama3-8b").vocab, 128256);
  EXPECT_EQ(zoo_model("llama3-70b").ffn_hidden, 28672);
}

TEST(ModelZoo, BrokenZooIsAProgrammingError) {
  const std::string broken = R"(models:
  - name: tiny
    layers: 2
    hidden: 64
    heads: 4
    kv_heads: 4
    vocab: 100
    ffn_hidden: 256
    activation: geglu
    norm: layernorm
    max_positions: 0
    tied_embeddings: true
    bias: true
    dropout: false
    published_params: 1
    published_params_rounding: 0
    source: test
)";
  try {
    parse_zoo(broken, "broken.yaml");
    FAIL() << "a broken zoo must throw";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broken.yaml:9"), std::string::npos) << what;
    EXPECT_NE(what.find("models[0].activation"), std::string::npos) << what;
  }
  EXPECT_THROW(parse_zoo("models:\n  - {name: a}\n", "short.yaml"), std::logic_error);
}

// ---- parameters ---------------------------------------------------------------------------

TEST(Parameters, EveryZooModelMatchesItsPublishedCount) {
  for (const ZooEntry& entry : zoo()) {
    const double computed = parameter_count(entry.config);
    const double tolerance = 0.01 * entry.published_params + entry.published_params_rounding / 2;
    EXPECT_LE(std::abs(computed - entry.published_params), tolerance)
        << entry.config.name << ": computed " << computed << ", published "
        << entry.published_params;
  }
}

TEST(Parameters, ReleasedCheckpointsMatchExactly) {
  // Exact counts of the released checkpoints, not just within 1%.
  for (const ZooEntry& entry : zoo()) {
    if (entry.published_params_rounding != 0) continue;
    EXPECT_EQ(parameter_count(entry.config), entry.published_params) << entry.config.name;
  }
  EXPECT_EQ(parameter_count(zoo_model("gpt2")), 124439808);
  EXPECT_EQ(parameter_count(zoo_model("llama2-70b")), 68976648192);
  EXPECT_EQ(parameter_count(zoo_model("llama3-8b")), 8030261248);
}

TEST(Parameters, GptLayerIsTwelveHSquaredPlusThirteenH) {
  const core::ModelConfig m = gpt(96, 12288, 96);
  const double h = 12288;
  EXPECT_EQ(layer_parameters(m), 12 * h * h + 13 * h);
  EXPECT_EQ(layer_matmul_parameters(m), 12 * h * h);
  EXPECT_EQ(embedding_parameters(m), 50257 * h + 2048 * h);
  EXPECT_EQ(lm_head_parameters(m), 0);  // tied
}

TEST(Parameters, GroupedQueryAttentionShrinksKeyAndValue) {
  // LLaMA-2-70B: h (h + 2 h k / a) + h^2 = 8192 (8192 + 2048) + 8192^2.
  const core::ModelConfig& m = zoo_model("llama2-70b");
  const double h = 8192;
  const double attention = h * (h + 2 * h * 8 / 64) + h * h;
  const double mlp = 3 * h * 28672;
  EXPECT_EQ(layer_matmul_parameters(m), attention + mlp);
  EXPECT_EQ(layer_parameters(m), attention + mlp + 2 * h);  // two RMSNorm gains
  EXPECT_EQ(lm_head_parameters(m), 32000 * h);
}

// ---- FLOPs --------------------------------------------------------------------------------

// Narayanan et al. 2021, sec. 5.1: one iteration of B sequences without recomputation
// (three passes' worth: forward, and backward at twice the forward)...
double narayanan_flops_without_recompute(const core::ModelConfig& m, double B, double s) {
  const double l = m.layers, h = m.hidden, V = m.vocab;
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * h * l));
}
// ...and with full recomputation (a second forward of every layer, not of the logits).
double narayanan_flops_full_recompute(const core::ModelConfig& m, double B, double s) {
  const double l = m.layers, h = m.hidden, V = m.vocab;
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

TEST(Flops, MatchNarayananClosedFormsForGpt3) {
  const double B = 1536, s = 2048;
  for (const char* name : {"gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b",
                           "gpt3-6.7b", "gpt3-13b", "gpt3-175b"}) {
    const core::ModelConfig& m = zoo_model(name);
    const double plain = training_flops(m, B, s, Recompute::none).value();
    const double full = training_flops(m, B, s, Recompute::full).value();
    EXPECT_NEAR(plain / narayanan_flops_without_recompute(m, B, s), 1.0, 1e-12) << name;
    EXPECT_NEAR(full / narayanan_flops_full_recompute(m, B, s), 1.0, 1e-12) << name;
  }
}

TEST(Flops, MatchKaplanSixNDForGpt3_175b) {
  // Kaplan et al. 2020: C = 6 N D for the non-embedding parameters N and D tokens, plus
  // attention, counted as here (4 s h per token per layer forward, no causal discount).
  const core::ModelConfig& m = zoo_model("gpt3-175b");
  const double sequences = 1536, s = 2048, tokens = sequences * s;
  const double non_embedding = parameter_count(m) - embedding_parameters(m);
  const double kaplan = 6 * non_embedding * tokens + 12.0 * m.layers * m.hidden * s * tokens;
  const double ours = training_flops(m, sequences, s, Recompute::none).value();
  EXPECT_NEAR(ours / kaplan, 1.0, 0.02);
}

TEST(Flops, PerLayerPiecesFollowTheConvention) {
  const core::ModelConfig m = gpt(24, 2048, 16);
  const double b = 4, s = 1024, h = 2048;
  const double forward = 24 * b * s * h * h + 4 * b * s * s * h;
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s).value(), forward);
  EXPECT_DOUBLE_EQ(layer_backward_flops(m, b, s).value(), 2 * forward);
  EXPECT_DOUBLE_EQ(layer_recompute_flops(m, b, s, Recompute::none).value(), 0);
  EXPECT_DOUBLE_EQ(layer_recompute_flops(m, b, s, Recompute::selective).value(), 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(layer_recompute_flops(m, b, s, Recompute::full).value(), forward);
  EXPECT_DOUBLE_EQ(logits_forward_flops(m, b, s).value(), 2 * b * s * h * 50257);
  EXPECT_DOUBLE_EQ(logits_backward_flops(m, b, s).value(), 4 * b * s * h * 50257);
  // Selective recomputation adds exactly the attention core of every layer.
  EXPECT_DOUBLE_EQ(training_flops(m, b, s, Recompute::selective).value() -
                       training_flops(m, b, s, Recompute::none).value(),
                   24 * 4 * b * s * s * h);
}

TEST(Flops, SwigluAndGqaCountTheirMatrices) {
  const core::ModelConfig& m = zoo_model("llama3-8b");
  const double b = 1, s = 8192, h = 4096;
  const double matrices = h * (h + 2 * 1024) + h * h + 3 * h * 14336;
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s).value(), 2 * b * s * matrices + 4 * b * s * s * h);
}

// ---- pipeline boundary ----------------------------------------------------------------------

TEST(Communication, PipelineBoundaryIsBshElements) {
  const core::ModelConfig& m = zoo_model("gpt3-175b");
  EXPECT_EQ(pipeline_boundary_bytes(m, 1, 2048, Precision::fp16).value(), 2048.0 * 12288 * 2);
  EXPECT_EQ(pipeline_boundary_bytes(m, 2, 2048, Precision::fp32).value(), 2 * 2048.0 * 12288 * 4);
  EXPECT_EQ(pipeline_boundary_bytes(m, 1, 2048, Precision::bf16, 8).value(),
            2048.0 * 12288 * 2 / 8);
}

// ---- activation memory: Korthikanti et al. 2022, Table 2 ---------------------------------

struct Shape {
  double s, b, h, a, t;
};

class ActivationTable2 : public ::testing::TestWithParam<Shape> {
 protected:
  core::ModelConfig model() const {
    const Shape& x = GetParam();
    return gpt(1, static_cast<int>(x.h), static_cast<int>(x.a));
  }
  double bytes(Recompute recompute, int tp, bool sequence_parallel) const {
    const Shape& x = GetParam();
    ActivationSetup setup;
    setup.precision = Precision::fp16;
    setup.recompute = recompute;
    setup.tp = tp;
    setup.sequence_parallel = sequence_parallel;
    setup.attention = core::Attention::standard;  // Korthikanti et al. store the scores
    return activation_bytes_per_layer(model(), x.b, static_cast<int>(x.s), setup).value();
  }
};

TEST_P(ActivationTable2, ReproducesEveryRow) {
  const auto [s, b, h, a, t] = GetParam();
  const int tp = static_cast<int>(t);
  const double sbh = s * b * h;
  // No parallelism: sbh (34 + 5as/h).
  EXPECT_DOUBLE_EQ(bytes(Recompute::none, 1, false), sbh * (34 + 5 * a * s / h));
  // Tensor parallelism: sbh (10 + 24/t + 5as/(ht)).
  EXPECT_DOUBLE_EQ(bytes(Recompute::none, tp, false), sbh * (10 + 24 / t + 5 * a * s / (h * t)));
  // Tensor and sequence parallelism: sbh/t (34 + 5as/h).
  EXPECT_DOUBLE_EQ(bytes(Recompute::none, tp, true), sbh / t * (34 + 5 * a * s / h));
  // Tensor parallelism with selective recomputation: sbh (10 + 24/t).
  EXPECT_DOUBLE_EQ(bytes(Recompute::selective, tp, false), sbh * (10 + 24 / t));
  // Tensor and sequence parallelism with selective recomputation: 34 sbh / t.
  EXPECT_DOUBLE_EQ(bytes(Recompute::selective, tp, true), 34 * sbh / t);
  // Full recomputation: 2 sbh, and 2 sbh / t with sequence parallelism.
  EXPECT_DOUBLE_EQ(bytes(Recompute::full, tp, false), 2 * sbh);
  EXPECT_DOUBLE_EQ(bytes(Recompute::full, tp, true), 2 * sbh / t);
}

INSTANTIATE_TEST_SUITE_P(Korthikanti, ActivationTable2,
                         ::testing::Values(Shape{2048, 1, 12288, 96, 8},   // GPT-3 175B
                                           Shape{2048, 1, 20480, 128, 8},  // 530B
                                           Shape{1024, 4, 768, 12, 2}, Shape{2048, 2, 4096, 32, 4},
                                           Shape{512, 8, 1024, 16, 1},
                                           Shape{4096, 3, 6144, 48, 6}));

TEST(Activations, SwigluGqaWithoutDropout) {
  // Per layer, 16-bit, no parallelism: norms 4sbh, QKV and MLP inputs 4sbh, Q 2sbh, K and V
  // 2 * 2sbh k/a, output-projection input 2sbh, SwiGLU 6sbf, softmax output 2as^2b (no
  // dropout: no masks, no dropout output).
  const core::ModelConfig& m = zoo_model("llama3-8b");
  const double s = 4096, b = 2, h = 4096, a = 32, k = 8, f = 14336;
  const double sbh = s * b * h;
  const double expected =
      4 * sbh + 4 * sbh + 2 * sbh + 4 * sbh * k / a + 2 * sbh + 6 * s * b * f + 2 * a * s * s * b;
  ActivationSetup setup;
  setup.attention = core::Attention::standard;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 4096, setup).value(), expected);
  setup.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 4096, setup).value(),
                   expected - 2 * a * s * s * b);
  // FlashAttention keeps the fp32 log-sum-exp of each query row and head instead.
  setup.recompute = Recompute::none;
  setup.attention = core::Attention::flash;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 4096, setup).value(),
                   expected - 2 * a * s * s * b + 4 * a * s * b);
}

// Megatron-LM's compute_activation_memory (theoretical_memory_usage.py, "Table 2 of
// Korthikanti et al." with sequence parallelism and selective recomputation):
// s b h (18 + 4 f / h) per layer, divided by t. Written out independently here.
TEST(Activations, MegatronTheoreticalFormulaWithSequenceParallelism) {
  for (const auto& [h, a, t, s, b] : std::vector<std::tuple<int, int, int, int, int>>{
           {12288, 96, 8, 2048, 1}, {4096, 32, 2, 4096, 2}, {2048, 16, 4, 2048, 4}}) {
    const core::ModelConfig m = gpt(1, h, a);
    ActivationSetup setup;
    setup.precision = Precision::bf16;
    setup.tp = t;
    setup.sequence_parallel = true;
    setup.recompute = Recompute::selective;
    const double megatron = double(s) * b * h * (18 + 4.0 * m.ffn_hidden / h) / t;
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, s, setup).value(), megatron) << h;
    // With FlashAttention and no recomputation only the 4 a s b / t statistics are added.
    setup.recompute = Recompute::none;
    EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, s, setup).value(),
                     megatron + 4.0 * a * s * b / t)
        << h;
  }
}

TEST(Activations, Fp32DoublesEveryTensorButNotTheMasks) {
  const core::ModelConfig m = gpt(1, 1024, 16);
  const double s = 512, b = 2, h = 1024, a = 16;
  ActivationSetup setup;
  setup.precision = Precision::fp32;
  setup.attention = core::Attention::standard;
  // 16-bit: 32sbh + 4as^2b in tensors, 2sbh + as^2b in masks.
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 512, setup).value(),
                   2 * (32 * s * b * h + 4 * a * s * s * b) + 2 * s * b * h + a * s * s * b);
}

// fp8 training as Transformer Engine keeps it: each linear layer saves its input as the
// fp8 copy it multiplied, 1 byte instead of 2. For GPT (f = 4h, standard attention with
// dropout): QKV input, output-projection input, first MLP input (sbh each) and the GeLU
// output (4sbh) take 7sbh instead of 14sbh, the rest is bf16's sbh (34 + 5as/h). SwiGLU
// keeps gate and up in 16-bit, their product (the down projection's input) in fp8.
TEST(Activations, Fp8KeepsTheLinearLayersInputsInOneByte) {
  const core::ModelConfig m = gpt(1, 1024, 16);
  const double s = 512, b = 2, h = 1024, a = 16, sbh = s * b * h;
  ActivationSetup setup;
  setup.precision = Precision::fp8;
  setup.attention = core::Attention::standard;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 512, setup).value(),
                   sbh * (34 + 5 * a * s / h) - 7 * sbh);
  // Tensor and sequence parallelism split the same parts as in bf16.
  setup.tp = 4;
  setup.sequence_parallel = true;
  setup.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(m, b, 512, setup).value(),
                   (sbh * (18 + 4.0 * 4) - 7 * sbh) / 4);
  const core::ModelConfig& llama = zoo_model("llama3-8b");
  const double f = 14336, k = 8, H = 4096, A = 32, S = 4096, sbH = S * b * H;
  ActivationSetup flash;
  flash.precision = Precision::fp8;
  const double bf16_bytes =
      4 * sbH + 4 * sbH + 2 * sbH + 4 * sbH * k / A + 2 * sbH + 6 * S * b * f + 4 * A * S * b;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(llama, b, 4096, flash).value(),
                   bf16_bytes - 3 * sbH - S * b * f);
}

// Transformer Engine's fp8 weight copies: the weight and its transpose in fp8, 2 bytes per
// matrix parameter (12h^2 per GPT layer) over t; the LM head and embeddings have none.
TEST(StageMemory, Fp8AddsTheWeightsFp8CopyAndItsTranspose) {
  const core::ModelConfig m = gpt(4, 1024, 16);
  StageSpec spec;
  spec.layers = 4;
  spec.tp = 2;
  core::Training bf16;
  bf16.seq_len = 512;
  core::Training fp8 = bf16;
  fp8.precision = Precision::fp8;
  const double h = 1024;
  EXPECT_DOUBLE_EQ(
      stage_memory(m, fp8, spec).weights.value() - stage_memory(m, bf16, spec).weights.value(),
      2.0 * 4 * 12 * h * h / 2);
  EXPECT_EQ(fp8_weight_copies_bytes(m, spec, Precision::bf16).value(), 0);
}

TEST(Activations, LogitsBufferIsFp32AndVocabParallel) {
  const core::ModelConfig& m = zoo_model("llama2-7b");
  EXPECT_EQ(logits_buffer_bytes(m, 2, 4096, 1).value(), 4.0 * 4096 * 2 * 32000);
  EXPECT_EQ(logits_buffer_bytes(m, 2, 4096, 8).value(), 4.0 * 4096 * 2 * 32000 / 8);
}

// ---- weights, gradients, optimizer ----------------------------------------------------------

TEST(OptimizerState, MegatronAndZeroPaperBytesPerParameter) {
  // Megatron-LM's theoretical_memory_usage.py: 18 bytes per parameter for bf16 (fp32 main
  // gradients); the ZeRO paper's 16 (2 + 2 + 12) for fp16.
  const BytesPerParameter adam_mixed = bytes_per_parameter(Precision::bf16, core::Optimizer::adam);
  EXPECT_EQ(adam_mixed.weights, 2);
  EXPECT_EQ(adam_mixed.gradients, 4);
  EXPECT_EQ(adam_mixed.optimizer, 12);
  EXPECT_EQ(adam_mixed.total(), 18);
  EXPECT_EQ(bytes_per_parameter(Precision::fp16, core::Optimizer::adamw).total(), 16);
  const BytesPerParameter adam_fp32 = bytes_per_parameter(Precision::fp32, core::Optimizer::adam);
  EXPECT_EQ(adam_fp32.weights, 4);
  EXPECT_EQ(adam_fp32.gradients, 4);
  EXPECT_EQ(adam_fp32.optimizer, 8);
  EXPECT_EQ(bytes_per_parameter(Precision::bf16, core::Optimizer::sgd).optimizer, 8);
  EXPECT_EQ(bytes_per_parameter(Precision::fp32, core::Optimizer::sgd).optimizer, 4);

  const double params = 7e9;
  EXPECT_EQ(weight_bytes(params, Precision::bf16).value(), 14e9);
  EXPECT_EQ(gradient_bytes(params, Precision::fp16).value(), 14e9);
  EXPECT_EQ(optimizer_bytes(params, Precision::bf16, core::Optimizer::adam).value(), 84e9);
  EXPECT_EQ(weight_bytes(params, Precision::fp32).value(), 28e9);
}

// The dtype of the main gradients: Megatron-LM's rule (arguments.py: bf16 accumulates and
// all-reduces gradients in fp32; fp16 keeps them in fp16) unless training.grad_dtype says.
TEST(OptimizerState, GradientDtypeFollowsMegatronUnlessTheScenarioSays) {
  core::Training t;
  const std::pair<Precision, Precision> defaults[] = {{Precision::bf16, Precision::fp32},
                                                      {Precision::fp8, Precision::fp32},
                                                      {Precision::fp16, Precision::fp16},
                                                      {Precision::fp32, Precision::fp32},
                                                      {Precision::tf32, Precision::fp32}};
  for (auto [precision, gradients] : defaults) {
    t.precision = precision;
    EXPECT_EQ(gradient_precision(t), gradients) << core::to_string(precision);
  }
  t.precision = Precision::bf16;
  t.grad_dtype = Precision::bf16;
  EXPECT_EQ(gradient_precision(t), Precision::bf16);
  EXPECT_EQ(bytes_per_parameter(t).gradients, 2);
}

// NeMo's distributed_fused_adam with `dtype: bf16` and `grad_sync_dtype: bf16` (apex's
// DistributedFusedAdam: master weights and both moments in the state dtype): 2 bytes of
// weights, 2 of gradients and 3 x 2 of state, against Megatron's 2 + 4 + 12.
TEST(OptimizerState, Bf16StateAndGradientsAsNemoKeepsThem) {
  core::Training t;
  t.precision = Precision::bf16;
  t.grad_dtype = Precision::bf16;
  t.optimizer_state = Precision::bf16;
  const BytesPerParameter per = bytes_per_parameter(t);
  EXPECT_EQ(per.weights, 2);
  EXPECT_EQ(per.gradients, 2);
  EXPECT_EQ(per.optimizer, 6);
  t.optimizer = core::Optimizer::sgd;  // one moment and the master copy
  EXPECT_EQ(bytes_per_parameter(t).optimizer, 4);
}

// What a data-parallel step moves, in all-reduce units of bytes: the gradients in their dtype
// (ZeRO 0), a reduce-scatter of them plus an all-gather of the 16-bit weights (ZeRO 1, 2:
// Megatron's distributed optimizer), plus a second gather (ZeRO 3). With gradients and weights
// of one size it is zero_traffic_factor times the gradients.
TEST(OptimizerState, GradientSyncBytesCountEachDtypeOnTheWire) {
  const double params = 1e9;
  core::Training bf16;
  bf16.precision = Precision::bf16;
  EXPECT_EQ(gradient_sync_bytes(params, bf16, 0).value(), 4e9);              // fp32 all-reduce
  EXPECT_EQ(gradient_sync_bytes(params, bf16, 1).value(), (4e9 + 2e9) / 2);  // RS 4, AG 2
  EXPECT_EQ(gradient_sync_bytes(params, bf16, 3).value(), (4e9 + 2 * 2e9) / 2);
  core::Training fp16;
  fp16.precision = Precision::fp16;
  for (int zero : {0, 1, 2, 3})
    EXPECT_DOUBLE_EQ(gradient_sync_bytes(params, fp16, zero).value(),
                     2e9 * zero_traffic_factor(zero))
        << "ZeRO " << zero;
}

// Nemotron-4 340B on 128 H100 as NVIDIA benchmarked it (NVIDIA/dgxc-benchmarking
// nemotron/README_340b.md and nemotron4-340b-synth.yaml @8f5cbb37: TP 8, PP 8, VP 12, DP 2,
// micro-batch 1, global batch 32, sequence 4096, selective recomputation, sequence
// parallelism, distributed_fused_adam with `dtype: bf16` and `grad_sync_dtype: bf16`): it
// ran (4.61 s per step), so its first stage fits in 80 GB. Under Megatron-LM's own defaults
// (fp32 main gradients and state, distributed optimizer) it does not, by Megatron's own
// count: theoretical_memory_usage.py gives the first stage's weights and optimizer as
// (12 layers + embedding) / tp parameters x (6 + 12 / dp) bytes.
TEST(StageMemory, Nemotron4On128H100FitsAsNemoRanItAndNotAsMegatronDefaults) {
  const core::ModelConfig m = zoo_model("nemotron-4-340b");
  StageSpec first;
  first.schedule = Schedule::interleaved;
  first.stages = 8;
  first.stage_index = 0;
  first.micro_batches = 16;
  first.virtual_stages = 12;
  first.layers = 12;
  first.tp = 8;
  first.sequence_parallel = true;
  first.zero_shards = 2;
  core::Training t;
  t.global_batch = 32;
  t.seq_len = 4096;
  t.precision = Precision::bf16;
  t.recompute = Recompute::selective;

  // Megatron's count, written from its formula: attention 2 h^2 (1 + g / a) (head dim
  // h / a), MLP 2 h f, two layer norms of 2 h each; the untied input embedding on stage 0.
  const double h = 18432, f = 73728, a = 96, g = 8, V = 256000;
  const double layer = 2 * h * h * (1 + g / a) + 2 * h * f + 2 * 2 * h;
  const double shard = (12 * layer + V * h) / 8;
  const double gib = 1024.0 * 1024 * 1024;

  first.zero = 1;
  const StageMemory megatron = stage_memory(m, t, first);
  const double states = (megatron.weights + megatron.gradients + megatron.optimizer).value();
  EXPECT_NEAR(states / (shard * (6 + 12.0 / 2)), 1.0, 1e-3);
  EXPECT_GT(megatron.total.value(), 80 * gib);

  first.zero = 2;  // apex's DistributedFusedAdam shards the gradients too (ZeRO-2)
  t.grad_dtype = Precision::bf16;
  t.optimizer_state = Precision::bf16;
  const StageMemory nemo = stage_memory(m, t, first);
  EXPECT_NEAR(nemo.weights.value() + nemo.gradients.value() + nemo.optimizer.value(),
              shard * (2 + 2.0 / 2 + 6.0 / 2), 1e-3 * shard);
  EXPECT_LT(nemo.total.value(), 80 * gib);
}

// ---- pipeline stage memory ------------------------------------------------------------------

TEST(StageMemory, InFlightMicroBatchesPerSchedule) {
  StageSpec stage;
  stage.stages = 4;
  stage.micro_batches = 8;
  stage.layers = 6;
  stage.schedule = Schedule::one_f_one_b;
  for (int r = 0; r < 4; ++r) {
    stage.stage_index = r;
    EXPECT_EQ(micro_batches_in_flight(stage), 4 - r);  // the first stage holds p
  }
  stage.micro_batches = 2;  // fewer micro-batches than stages
  stage.stage_index = 0;
  EXPECT_EQ(micro_batches_in_flight(stage), 2);

  stage.schedule = Schedule::gpipe;
  stage.micro_batches = 8;
  for (int r = 0; r < 4; ++r) {
    stage.stage_index = r;
    EXPECT_EQ(micro_batches_in_flight(stage), 8);
    EXPECT_EQ(layer_activations_in_flight(stage), 8 * 6);
  }

  // Interleaved, p = 4, v = 2: warm-up (p - r - 1) 2 + (v - 1) p chunks, then one more.
  stage.schedule = Schedule::interleaved;
  stage.virtual_stages = 2;
  stage.stage_index = 0;
  EXPECT_EQ(micro_batches_in_flight(stage), 3 * 2 + 4 + 1);
  EXPECT_EQ(layer_activations_in_flight(stage), 11 * 3.0);  // chunks of 6 / 2 layers
  stage.stage_index = 3;
  EXPECT_EQ(micro_batches_in_flight(stage), 0 + 4 + 1);
  stage.micro_batches = 2;  // capped at all m v chunks
  stage.stage_index = 0;
  EXPECT_EQ(micro_batches_in_flight(stage), 4);
}

// Megatron-LM runs every forward as a warm-up one when m = p under the interleaved schedule
// ("all_warmup_microbatches"): p = 4, m = 4, v = 2 holds all 8 chunk-micro-batches on every
// stage, which the memory model must count as the simulator plays it.
TEST(StageMemory, InterleavedWithMicroBatchesEqualToStagesHoldsEveryChunk) {
  StageSpec stage;
  stage.stages = 4;
  stage.micro_batches = 4;
  stage.virtual_stages = 2;
  stage.layers = 4;
  stage.schedule = Schedule::interleaved;
  for (int r = 0; r < 4; ++r) {
    stage.stage_index = r;
    const auto ops = interleaved(4, r, 4, 2);
    ASSERT_EQ(ops.size(), 16u);
    for (int k = 0; k < 8; ++k) EXPECT_TRUE(ops[k].forward) << "stage " << r << " op " << k;
    EXPECT_EQ(micro_batches_in_flight(stage), 8) << "stage " << r;
    EXPECT_EQ(layer_activations_in_flight(stage), 8 * 2.0);
  }
}

// The memory model's in-flight count is the peak of the op order the stage plays, for every
// schedule, stage and micro-batch count (fewer, as many as and more micro-batches than stages).
TEST(StageMemory, InFlightIsThePeakOfThePlayedSchedule) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 3, 4, 5, 8})
        for (int v : {1, 2, 3}) {
          if (schedule != Schedule::interleaved && v > 1) continue;
          // Megatron-LM's interleaved schedule needs m a multiple of p.
          if (schedule == Schedule::interleaved && m % p != 0) continue;
          for (int r = 0; r < p; ++r) {
            StageSpec stage;
            stage.schedule = schedule;
            stage.stages = p;
            stage.stage_index = r;
            stage.micro_batches = m;
            stage.virtual_stages = v;
            const auto ops = schedule_for(schedule, p, r, m, v);
            EXPECT_EQ(micro_batches_in_flight(stage), peak_in_flight(ops))
                << "schedule " << int(schedule) << " p " << p << " m " << m << " v " << v
                << " stage " << r;
          }
        }
}

// A tiny GPT worked by hand: l = 4, h = 64, a = 4, f = 256, V = 100, 32 learned positions,
// tied embeddings; two 1F1B stages of 2 layers, m = 4, micro-batches of 2 sequences of 16.
class TinyPipeline : public ::testing::Test {
 protected:
  core::ModelConfig model = [] {
    core::ModelConfig m = gpt(4, 64, 4, 100);
    m.max_positions = 32;
    return m;
  }();
  core::Training training = [] {
    core::Training t;
    t.seq_len = 16;
    t.precision = Precision::bf16;
    t.optimizer = core::Optimizer::adam;
    t.recompute = Recompute::none;
    t.attention = core::Attention::standard;  // the scores are kept (5as^2b below)
    return t;
  }();
  StageSpec stage(int index) const {
    StageSpec spec;
    spec.schedule = Schedule::one_f_one_b;
    spec.stages = 2;
    spec.stage_index = index;
    spec.micro_batches = 4;
    spec.layers = 2;
    spec.micro_batch = 2;
    return spec;
  }
  static constexpr double kLayerParams = 12 * 64 * 64 + 13 * 64;  // 49984
  static constexpr double kSbh = 16 * 2 * 64;                     // 2048
  // sbh (34 + 5as/h) = 34 * 2048 + 5 * 4 * 16 * 16 * 2
  static constexpr double kLayerActivations = 34 * kSbh + 5 * 4 * 16 * 16 * 2;  // 79872
};

TEST_F(TinyPipeline, FirstStageHoldsEmbeddingsAndTwoMicroBatches) {
  const double params = 2 * kLayerParams + 100 * 64 + 32 * 64;  // layers, tokens, positions
  EXPECT_EQ(params, 108416);
  EXPECT_EQ(stage_parameters(model, stage(0)), params);
  const StageMemory memory = stage_memory(model, training, stage(0));
  EXPECT_EQ(memory.weights.value(), 2 * params);
  EXPECT_EQ(memory.gradients.value(), 4 * params);  // fp32 main gradients
  EXPECT_EQ(memory.optimizer.value(), 12 * params);
  // p - r = 2 micro-batches in flight through 2 layers.
  EXPECT_EQ(memory.activations.value(), 2 * 2 * kLayerActivations);
  EXPECT_EQ(memory.total.value(), 18 * params + 4 * kLayerActivations);
  EXPECT_EQ(memory.total.value(), 2270976);
}

TEST_F(TinyPipeline, LastStageHoldsHeadCopyFinalNormAndLogits) {
  // Tied embeddings: the last stage keeps a copy of the 100 x 64 word embedding.
  const double params = 2 * kLayerParams + 2 * 64 + 100 * 64;
  EXPECT_EQ(stage_parameters(model, stage(1)), params);
  const StageMemory memory = stage_memory(model, training, stage(1));
  const double logits = 4.0 * 16 * 2 * 100;  // fp32 s b V
  EXPECT_EQ(memory.activations.value(), 1 * 2 * kLayerActivations + logits);
  EXPECT_EQ(memory.total.value(), 18 * params + 2 * kLayerActivations + logits);
  EXPECT_EQ(memory.total.value(), 1876480 + 2 * params);
}

TEST_F(TinyPipeline, TensorAndDataParallelSplitTheStage) {
  StageSpec spec = stage(0);
  spec.tp = 2;
  spec.dp = 2;
  spec.micro_batch = 4;  // 2 sequences per GPU after the dp split
  const double params = (2 * kLayerParams + 100 * 64 + 32 * 64) / 2;
  // sbh (10 + 24/t) + 5as^2b/t with t = 2.
  const double layer = kSbh * (10 + 12) + 5 * 4 * 16 * 16 * 2 / 2.0;
  const StageMemory memory = stage_memory(model, training, spec);
  EXPECT_EQ(memory.weights.value(), 2 * params);
  EXPECT_EQ(memory.activations.value(), 2 * 2 * layer);
}

TEST_F(TinyPipeline, PlanGivesTheSameStages) {
  core::Plan plan;
  plan.micro_batch = 2;
  core::Pipeline pipeline;
  pipeline.micro_batches = 4;
  pipeline.stages = {core::Stage{"lab", 1, 1, 2}, core::Stage{"lab", 1, 1, 2}};
  plan.pipelines = {pipeline};
  EXPECT_EQ(stage_memory(model, training, plan, 0, 0).total.value(), 2270976);
  EXPECT_EQ(stage_memory(model, training, plan, 0, 1).total.value(),
            stage_memory(model, training, stage(1)).total.value());
}

// Megatron-LM's compute_weight_and_optimizer_memory: 18 bytes per parameter, or
// 6 + 12 / d with the distributed optimizer (ZeRO-1) over d data-parallel ranks.
TEST_F(TinyPipeline, ZeroStagesShardOverTheDataParallelCopies) {
  StageSpec spec = stage(0);
  spec.dp = 4;
  spec.micro_batch = 8;
  spec.zero_shards = 4;
  const double params = stage_parameters(model, spec);
  auto state = [&](int zero) {
    spec.zero = zero;
    const StageMemory m = stage_memory(model, training, spec);
    return m.weights.value() + m.gradients.value() + m.optimizer.value();
  };
  EXPECT_DOUBLE_EQ(state(0), 18 * params);
  EXPECT_DOUBLE_EQ(state(1), (6 + 12.0 / 4) * params);
  EXPECT_DOUBLE_EQ(state(2), (2 + 16.0 / 4) * params);
  // ZeRO-3: every byte sharded, plus two gathered layers of bf16 weights.
  EXPECT_DOUBLE_EQ(state(3), 18.0 / 4 * params + 2 * 2 * kLayerParams);
}

TEST_F(TinyPipeline, PlanZeroReachesTheStage) {
  core::Plan plan;
  plan.micro_batch = 2;
  plan.zero = 1;
  core::Pipeline pipeline;
  pipeline.replicas = 3;
  pipeline.micro_batches = 4;
  pipeline.stages = {core::Stage{"lab", 1, 2, 2}, core::Stage{"lab", 1, 2, 2}};
  plan.pipelines = {pipeline};
  const StageSpec spec = stage_spec(plan, 0, 0);
  EXPECT_EQ(spec.zero, 1);
  EXPECT_EQ(spec.zero_shards, 6);  // dp 2 inside the stage, 3 replicas
}

TEST_F(TinyPipeline, SinglePipelineStageHoldsEverythingOnce) {
  StageSpec spec = stage(0);
  spec.stages = 1;
  spec.layers = 4;
  EXPECT_EQ(stage_parameters(model, spec), parameter_count(model));
}

// ---- resolve_model and check_plan_against_model ----------------------------------------

constexpr const char* kClusters = R"(clusters:
  - name: lab
    gpu: H100-80GB-SXM
    nodes: 2
    gpus_per_node: 8
    nvlink: {bandwidth: 450GB/s, latency: 1us}
    nic: {bandwidth: 400Gbps, latency: 2us}
)";

core::Scenario scenario(const std::string& model_yaml, int seq_len = 1024,
                        const std::string& strategy_yaml = "strategy: auto\n") {
  const std::string text = "name: test\n" + model_yaml +
                           "training: {global_batch: 8, seq_len: " + std::to_string(seq_len) +
                           ", precision: bf16}\n" + kClusters + strategy_yaml;
  core::Diagnostics diags;
  const std::optional<core::Node> document = core::parse_yaml(text, "test.yaml", diags);
  std::optional<core::Scenario> s = core::parse_scenario(document.value(), "test.yaml", diags);
  if (!s || diags.has_errors()) throw std::runtime_error("bad test scenario:\n" + diags.format());
  return *s;
}

const core::Diagnostic* find_error(const core::Diagnostics& diags, const std::string& key_path) {
  for (const core::Diagnostic& d : diags.all())
    if (d.severity == core::Severity::error && d.key_path == key_path) return &d;
  return nullptr;
}

TEST(ResolveModel, ZooNameGivesItsConfig) {
  core::Diagnostics diags;
  const auto m = resolve_model(scenario("model: LLaMA-2-7B\n", 4096), diags);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, zoo_model("llama2-7b"));
  EXPECT_TRUE(diags.empty());
}

TEST(ResolveModel, UnknownZooNameSuggestsTheClosest) {
  core::Diagnostics diags;
  EXPECT_FALSE(resolve_model(scenario("model: llama2-7bb\n"), diags).has_value());
  const core::Diagnostic* d = find_error(diags, "model");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_EQ(d->where.file, "test.yaml");
  EXPECT_EQ(d->where.line, 2);
  EXPECT_NE(d->message.find("llama2-7bb"), std::string::npos);
  EXPECT_NE(d->hint.find("llama2-7b"), std::string::npos) << d->hint;
}

TEST(ResolveModel, InlineHeadsMustDivideHidden) {
  core::Diagnostics diags;
  const auto s = scenario("model: {name: odd, layers: 2, hidden: 1000, heads: 12, vocab: 100}\n");
  EXPECT_FALSE(resolve_model(s, diags).has_value());
  const core::Diagnostic* d = find_error(diags, "model.heads");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_EQ(d->where.line, 2);
  // The divisors of 1000 around 12, and the hidden sizes around 1000 that 12 divides.
  EXPECT_NE(d->hint.find("8, 10, 20, 25"), std::string::npos) << d->hint;
  EXPECT_NE(d->hint.find("996 or 1008"), std::string::npos) << d->hint;
}

TEST(ResolveModel, InlineKvHeadsMustDivideHeads) {
  core::Diagnostics diags;
  const auto s = scenario(
      "model:\n  name: gqa\n  layers: 2\n  hidden: 4096\n  heads: 32\n  kv_heads: 6\n  vocab: "
      "100\n");
  EXPECT_FALSE(resolve_model(s, diags).has_value());
  const core::Diagnostic* d = find_error(diags, "model.kv_heads");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_EQ(d->where.line, 7);
  EXPECT_NE(d->hint.find("2, 4, 8, 16"), std::string::npos) << d->hint;
}

TEST(ResolveModel, InlineModelKeepsCoreDefaults) {
  core::Diagnostics diags;
  const auto m = resolve_model(
      scenario("model: {name: tiny, layers: 2, hidden: 256, heads: 4, vocab: 1000}\n"), diags);
  ASSERT_TRUE(m.has_value()) << diags.format();
  EXPECT_EQ(m->kv_heads, 4);
  EXPECT_EQ(m->ffn_hidden, 1024);
  EXPECT_FALSE(diags.has_errors());
}

TEST(ResolveModel, LearnedPositionsMustCoverTheSequence) {
  core::Diagnostics diags;
  const auto m = resolve_model(scenario("model: gpt2\n", 2048), diags);
  EXPECT_TRUE(m.has_value());  // the model is fine; the training setup is not
  const core::Diagnostic* d = find_error(diags, "training.seq_len");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_EQ(d->where.line, 3);
  EXPECT_NE(d->hint.find("1024"), std::string::npos);

  core::Diagnostics rotary;
  EXPECT_TRUE(resolve_model(scenario("model: llama2-7b\n", 32768), rotary).has_value());
  EXPECT_TRUE(rotary.empty()) << rotary.format();
}

constexpr const char* kTwoStagePlan = R"(strategy:
  schedule: 1f1b
  micro_batch: 1
  pipelines:
    - micro_batches: 8
      stages:
        - {cluster: lab, tp: 8, layers: 16}
        - {cluster: lab, tp: 16, layers: 16}
)";

TEST(CheckPlanAgainstModel, TensorParallelMustDivideKvHeads) {
  const core::Scenario s = scenario("model: llama3-8b\n", 4096, kTwoStagePlan);
  core::Diagnostics diags;
  check_plan_against_model(s.strategy.plan, zoo_model("llama3-8b"), s, "strategy", diags);
  EXPECT_EQ(diags.error_count(), 1) << diags.format();
  const core::Diagnostic* d = find_error(diags, "strategy.pipelines[0].stages[1].tp");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_EQ(d->where.line, s.where("strategy.pipelines[0].stages[1].tp").line);
  EXPECT_NE(d->message.find("kv_heads (8)"), std::string::npos) << d->message;
  EXPECT_NE(d->hint.find("1, 2, 4, 8"), std::string::npos) << d->hint;
}

TEST(CheckPlanAgainstModel, InterleavedLayersSplitIntoChunks) {
  const core::Scenario s = scenario("model: llama2-7b\n", 4096, R"(strategy:
  schedule: interleaved
  virtual_stages: 2
  micro_batch: 1
  pipelines:
    - micro_batches: 8
      stages:
        - {cluster: lab, tp: 4, layers: 15}
        - {cluster: lab, tp: 4, layers: 17}
)");
  core::Diagnostics diags;
  check_plan_against_model(s.strategy.plan, zoo_model("llama2-7b"), s, "strategy", diags);
  EXPECT_EQ(diags.error_count(), 2) << diags.format();
  const core::Diagnostic* d = find_error(diags, "strategy.pipelines[0].stages[0].layers");
  ASSERT_NE(d, nullptr) << diags.format();
  EXPECT_NE(d->hint.find("14 or 16"), std::string::npos) << d->hint;
  EXPECT_NE(find_error(diags, "strategy.pipelines[0].stages[1].layers"), nullptr);
}

TEST(CheckPlanAgainstModel, ValidPlanHasNoErrors) {
  const core::Scenario s = scenario("model: llama2-70b\n", 4096, R"(strategy:
  micro_batch: 1
  sequence_parallel: true
  pipelines:
    - micro_batches: 8
      stages:
        - {cluster: lab, tp: 8, layers: 40}
        - {cluster: lab, tp: 8, layers: 40}
)");
  core::Diagnostics diags;
  check_plan_against_model(s.strategy.plan, zoo_model("llama2-70b"), s, "strategy", diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
}

}  // namespace
}  // namespace hgsim::models
