// The compute model against the committed kernel-level tables: every op of
// kernels/measured/vidur_<gpu>_<model>_mlp.csv (microsoft/vidur: forward time of each op of a
// Llama-style layer, fp16, 1-4096 tokens, tp 1-8, on an A100 and an H100 SXM; 650 rows, 5 824
// ops) priced by KernelModel::op_time, the mean |error| of each op class and GPU held under
// a threshold. validation/kernels.md is the full report; the thresholds are what the model
// reaches there plus a margin, so a change that loses accuracy on any class fails here.
// The same for the training table kernels/measured/sailor_aceso_training_ops.csv (sailor's
// Aceso profiler: forward and data-gradient GEMMs of Megatron-LM layers in a training step).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/layer_ops.hpp"

namespace hgsim::kernels {
namespace {

// vidur's column -> the role of the op in hgsim's layer and its class (validation/kernels.py).
struct Column {
  const char* op;
  const char* role;
  const char* cls;
};
const Column kColumns[] = {
    {"attn_pre_proj", "qkv_proj", "gemm"},
    {"attn_post_proj", "out_proj", "gemm"},
    {"mlp_up_proj", "up_proj", "gemm"},
    {"mlp_down_proj", "down_proj", "gemm"},
    {"input_layernorm", "input_norm", "norm"},
    {"post_attention_layernorm", "post_norm", "norm"},
    {"attn_rope", "rope", "rope"},
    {"mlp_act", "act", "act"},
    {"add", "attn_residual", "add"},
};

std::vector<std::string> split(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();  // the tables end lines in CRLF
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) out.push_back(cell);
  return out;
}

struct Errors {
  double sum = 0;
  int n = 0;
  double mean() const { return n ? sum / n : 0; }
};

// Mean |error| by "gpu class" over every table.
std::map<std::string, Errors> errors_of_tables() {
  const std::map<std::string, std::string> gpus{{"a100", "A100-80GB-SXM"},
                                                {"h100", "H100-80GB-SXM"}};
  const KernelModel model;
  std::map<std::string, Errors> out;
  const std::filesystem::path dir = std::filesystem::path(HGSIM_SOURCE_DIR) / "kernels/measured";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("vidur_", 0) != 0 || name.size() < 14 ||
        name.substr(name.size() - 8) != "_mlp.csv")
      continue;
    const std::string gpu_key = name.substr(6, 4);
    const GpuSpec& gpu = gpu_of(gpus.at(gpu_key));
    std::ifstream in(entry.path());
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = split(line);
    auto index = [&](const std::string& column) {
      for (std::size_t i = 0; i < header.size(); ++i)
        if (header[i] == column) return static_cast<int>(i);
      return -1;
    };
    while (std::getline(in, line)) {
      const std::vector<std::string> row = split(line);
      auto number = [&](const char* column) { return std::stod(row.at(index(column))); };
      core::ModelConfig m;
      m.hidden = static_cast<int>(number("n_embd"));
      m.heads = static_cast<int>(number("n_head"));
      m.kv_heads = static_cast<int>(number("n_kv_head"));
      m.ffn_hidden = static_cast<int>(number("n_expanded_embd"));
      const bool gated = row.at(index("use_gated_mlp")) == "True";
      m.activation = gated ? core::Activation::swiglu : core::Activation::gelu;
      m.norm = gated ? core::Norm::rmsnorm : core::Norm::layernorm;
      m.max_positions = 0;  // rotary
      m.bias = false;
      m.dropout = false;
      LayerShape shape;
      shape.model = &m;
      shape.sequences = 1;
      shape.seq_len = static_cast<int>(number("num_tokens"));
      shape.tp = static_cast<int>(number("num_tensor_parallel_workers"));
      shape.precision = core::Precision::fp16;
      const PhaseOps ops = layer_ops(shape);
      for (const Column& c : kColumns) {
        const int i = index(std::string(c.op) + "_median_ms");
        if (i < 0 || static_cast<std::size_t>(i) >= row.size() || row[i].empty()) continue;
        const double measured = std::stod(row[i]) * 1e-3;
        for (const OpCall& op : ops.forward) {
          if (op.role != c.role) continue;
          const double predicted =
              model.op_time(gpu, op, shape.precision, KernelModel::Timing::isolated).value();
          Errors& e = out[gpu_key + " " + c.cls];
          e.sum += std::abs(predicted - measured) / measured;
          ++e.n;
          break;
        }
      }
    }
  }
  return out;
}

TEST(KernelTables, EveryOpClassStaysWithinItsThreshold) {
  const std::map<std::string, Errors> errors = errors_of_tables();
  // Mean |error| in validation/kernels.md (fit of kernels/kernel_costs.yaml) plus ~2 points.
  // h100 add: 1-2 us kernels measured to 1 us, where a 1 us step is 50-100%.
  const std::map<std::string, std::pair<int, double>> expected{
      {"a100 gemm", {1508, 0.08}}, {"a100 norm", {741, 0.10}}, {"a100 rope", {377, 0.10}},
      {"a100 act", {377, 0.11}},   {"a100 add", {377, 0.10}},  {"h100 gemm", {1092, 0.09}},
      {"h100 norm", {533, 0.08}},  {"h100 rope", {273, 0.11}}, {"h100 act", {273, 0.12}},
      {"h100 add", {273, 0.19}},
  };
  for (const auto& [key, limit] : expected) {
    ASSERT_TRUE(errors.count(key)) << key << " (" << errors.size() << " classes read)";
    const Errors& e = errors.at(key);
    EXPECT_EQ(e.n, limit.first) << key;
    EXPECT_LE(e.mean(), limit.second) << key << ": mean |error| " << e.mean();
  }
}

// The training table's GEMM-only measurements of at least 0.1 TFLOP (below that its host
// timing holds the framework's per-op cost; validation/kernels.py reads it the same way),
// priced in a step: mean |error| and mean signed error by GPU.
struct Signed {
  Errors abs;
  double signed_sum = 0;
  double signed_mean() const { return abs.n ? signed_sum / abs.n : 0; }
};
std::map<std::string, Signed> errors_of_training_table() {
  // sailor's folder -> the catalog GPU (GH200: the H100's die, SMs and peak).
  const std::map<std::string, std::string> gpus{
      {"A100-40", "A100-40GB-SXM"}, {"GH-96", "H100-80GB-SXM"}, {"V100-16", "V100-16GB-SXM"}};
  // Aceso's op -> the role in hgsim's layer; column-parallel under Megatron's split.
  const std::map<std::string, std::pair<std::string, bool>> ops{
      {"enc-attention-qkv", {"qkv_proj", true}},
      {"enc-attention-dense", {"out_proj", false}},
      {"enc-MLP-GEMM-1", {"up_proj", true}},
      {"enc-MLP-GEMM-2", {"down_proj", false}}};
  const KernelModel model;
  std::map<std::string, Signed> out;
  std::ifstream in(std::filesystem::path(HGSIM_SOURCE_DIR) /
                   "kernels/measured/sailor_aceso_training_ops.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split(line);
  auto index = [&](const std::string& column) {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == column) return i;
    ADD_FAILURE() << "no column " << column;
    return std::size_t{0};
  };
  while (std::getline(in, line)) {
    const std::vector<std::string> row = split(line);
    auto number = [&](const char* column) { return std::stod(row.at(index(column))); };
    core::ModelConfig m;
    m.hidden = static_cast<int>(number("hidden"));
    m.heads = m.kv_heads = static_cast<int>(number("heads"));
    m.ffn_hidden = 4 * m.hidden;
    m.activation = core::Activation::gelu;
    m.norm = core::Norm::layernorm;
    m.max_positions = 2048;
    LayerShape shape;
    shape.model = &m;
    shape.sequences = number("micro_batch");
    shape.seq_len = static_cast<int>(number("seq_len"));
    shape.tp = static_cast<int>(number("tp"));
    shape.precision = core::Precision::fp16;
    const PhaseOps layer = layer_ops(shape);
    const auto& [role, column] = ops.at(row.at(index("op")));
    const std::string gpu_key = row.at(index("gpu"));
    // A column-parallel op's backward and a row-parallel op's forward hold an all-reduce at
    // tp > 1: not GEMM-only.
    for (const bool forward : {true, false}) {
      if (shape.tp > 1 && column != forward) continue;
      const double measured = number(forward ? "forward_us" : "backward_us") * 1e-6;
      for (const OpCall& op : forward ? layer.forward : layer.backward) {
        if (op.role != role || op.op != (forward ? "gemm" : "gemm_dgrad")) continue;
        if (op.flops < 1e11) break;
        const double e =
            (model.op_time(gpu_of(gpus.at(gpu_key)), op, shape.precision).value() - measured) /
            measured;
        Signed& s = out[gpu_key];
        s.abs.sum += std::abs(e);
        ++s.abs.n;
        s.signed_sum += e;
        break;
      }
    }
  }
  return out;
}

// In a step, the GH200's training GEMMs are priced without a side-bias beyond 5% (13% too
// fast when priced as GEMMs alone), the others within the model's reach of them; the
// thresholds are validation/kernels.md's figures plus ~2 points.
TEST(KernelTables, TrainingGemmsStayWithinTheirThreshold) {
  const std::map<std::string, Signed> errors = errors_of_training_table();
  // gpu -> (GEMMs, mean |error| limit, |signed| limit)
  const std::map<std::string, std::tuple<int, double, double>> expected{
      {"A100-40", {109, 0.14, 0.10}}, {"GH-96", {109, 0.15, 0.05}}, {"V100-16", {109, 0.10, 0.03}}};
  for (const auto& [gpu, limit] : expected) {
    ASSERT_TRUE(errors.count(gpu)) << gpu;
    const Signed& e = errors.at(gpu);
    EXPECT_EQ(e.abs.n, std::get<0>(limit)) << gpu;
    EXPECT_LE(e.abs.mean(), std::get<1>(limit)) << gpu << ": mean |error| " << e.abs.mean();
    EXPECT_LE(std::abs(e.signed_mean()), std::get<2>(limit))
        << gpu << ": mean signed error " << e.signed_mean();
  }
}

}  // namespace
}  // namespace hgsim::kernels
