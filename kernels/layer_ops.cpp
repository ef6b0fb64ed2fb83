#include "kernels/layer_ops.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <stdexcept>

namespace hgsim::kernels {

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names{"gemm",
                                              "gemm_dgrad",
                                              "gemm_wgrad",
                                              "attention",
                                              "attention_backward",
                                              "bmm",
                                              "softmax",
                                              "softmax_backward",
                                              "dropout",
                                              "dropout_backward",
                                              "layernorm",
                                              "layernorm_backward",
                                              "rmsnorm",
                                              "rmsnorm_backward",
                                              "gelu",
                                              "gelu_backward",
                                              "swiglu",
                                              "swiglu_backward",
                                              "add",
                                              "rope",
                                              "fp8_cast_transpose",
                                              "cross_entropy",
                                              "adam"};
  return names;
}

OpCall make_op(const std::string& op, std::vector<double> shape, double e) {
  auto need = [&](std::size_t rank) {
    if (shape.size() != rank)
      throw std::invalid_argument("op " + op + " takes a shape of " + std::to_string(rank) +
                                  " numbers, got " + std::to_string(shape.size()));
  };
  OpCall c{op, shape, 0, 0, Bound::memory, 1};
  const auto& s = shape;
  if (op == "gemm" || op == "gemm_dgrad" || op == "gemm_wgrad") {
    need(3);
    c.bound = Bound::compute;
    c.flops = 2 * s[0] * s[1] * s[2];
    c.bytes = e * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]);
  } else if (op == "attention" || op == "attention_backward") {
    need(5);  // sequences, heads, kv_heads, seq, head_dim
    c.bound = Bound::compute;
    const double q = s[0] * s[1] * s[3] * s[4], kv = s[0] * s[2] * s[3] * s[4];
    const bool backward = op == "attention_backward";
    // FLOPs by the papers' convention (no causal discount); FlashAttention reads Q, K, V
    // and writes O (forward), reads Q, K, V, O, dO and writes dQ, dK, dV (backward), plus
    // the fp32 row statistics, 4 bytes per query row and head.
    const double rows = s[0] * s[1] * s[3];
    c.flops = 4 * s[0] * s[1] * s[3] * s[3] * s[4] * (backward ? 2 : 1);
    c.bytes = backward ? e * (6 * q + 4 * kv) + 8 * rows : e * (2 * q + 2 * kv) + 4 * rows;
    c.kernels = backward ? 3 : 1;
  } else if (op == "bmm") {
    need(4);  // batch, m, n, k
    c.bound = Bound::compute;
    c.flops = 2 * s[0] * s[1] * s[2] * s[3];
    c.bytes = e * s[0] * (s[1] * s[3] + s[3] * s[2] + s[1] * s[2]);
  } else if (op == "softmax" || op == "dropout") {
    need(1);
    c.flops = (op == "softmax" ? 5 : 1) * s[0];
    // read the scores, write the result (and, for dropout, a one-byte mask)
    c.bytes = 2 * e * s[0] + (op == "dropout" ? s[0] : 0);
  } else if (op == "softmax_backward" || op == "dropout_backward") {
    need(1);
    c.flops = (op == "softmax_backward" ? 4 : 1) * s[0];
    c.bytes = op == "softmax_backward" ? 3 * e * s[0] : 2 * e * s[0] + s[0];
  } else if (op == "layernorm" || op == "rmsnorm") {
    need(2);
    c.flops = 7 * s[0] * s[1];
    c.bytes = e * 2 * s[0] * s[1];
  } else if (op == "layernorm_backward" || op == "rmsnorm_backward") {
    need(2);
    c.flops = 12 * s[0] * s[1];
    c.bytes = e * 3 * s[0] * s[1];
  } else if (op == "gelu" || op == "gelu_backward") {
    need(1);
    c.flops = (op == "gelu" ? 10 : 16) * s[0];
    c.bytes = e * (op == "gelu" ? 2 : 3) * s[0];
  } else if (op == "swiglu" || op == "swiglu_backward") {
    need(2);
    c.flops = (op == "swiglu" ? 6 : 12) * s[0] * s[1];
    c.bytes = e * (op == "swiglu" ? 3 : 5) * s[0] * s[1];
  } else if (op == "add") {
    need(1);
    c.flops = s[0];
    c.bytes = e * 3 * s[0];
  } else if (op == "rope") {
    need(4);  // tokens, heads, head_dim, seq
    c.flops = 6 * s[0] * s[1] * s[2] / 2;
    c.bytes = e * 2 * s[0] * s[1] * s[2];
  } else if (op == "fp8_cast_transpose") {
    need(1);
    // Transformer Engine's fp8 GEMMs take their operands as fp8, and Hopper's fp8 tensor
    // cores need the wgrad/dgrad operands transposed: every GEMM input in the forward and
    // every output gradient in the backward is written twice more, as fp8 and as
    // transposed fp8 (1 byte each). The read is fused into the kernel that produced the
    // tensor (TE's LayerNorm, GeLU and dbias/dgelu kernels emit the fp8 copies), so the op
    // is those writes and launches no kernel of its own.
    c.flops = s[0];
    c.bytes = 2.0 * s[0];
    c.kernels = 0;
  } else if (op == "cross_entropy") {
    need(2);
    c.flops = 5 * s[0] * s[1];
    c.bytes = e * 2 * s[0] * s[1];
  } else if (op == "adam") {
    need(1);
    c.flops = 12 * s[0];
    // fp32 master weights and moments, fp32 gradient: read 4 arrays, write 3.
    c.bytes = 4.0 * 7 * s[0];
  } else {
    throw std::invalid_argument("unknown op '" + core::excerpt(op) + "'");
  }
  return c;
}

namespace {

struct Dims {
  double tokens, hidden, heads, kv_heads, head_dim, ffn;
  double sequences, seq;
};

Dims dims(const LayerShape& l) {
  const core::ModelConfig& m = *l.model;
  const int tp = std::max(l.tp, 1);
  Dims d{};
  d.sequences = l.sequences;
  d.seq = l.seq_len;
  d.tokens = l.sequences * l.seq_len;
  d.hidden = m.hidden;
  d.heads = double(m.heads) / tp;
  d.kv_heads = std::max(double(m.kv_heads) / tp, 1.0);
  d.head_dim = double(m.hidden) / m.heads;
  d.ffn = double(m.ffn_hidden) / tp;
  return d;
}

}  // namespace

PhaseOps layer_ops(const LayerShape& l) {
  const core::ModelConfig& m = *l.model;
  const double e = double(core::element_bytes(l.precision));
  const Dims d = dims(l);
  const std::string norm = m.norm == core::Norm::rmsnorm ? "rmsnorm" : "layernorm";
  const bool swiglu = m.activation == core::Activation::swiglu;
  const bool rotary = m.max_positions == 0;
  const double qkv = (d.heads + 2 * d.kv_heads) * d.head_dim;
  const double up = swiglu ? 2 * d.ffn : d.ffn;
  PhaseOps ops;
  // The role of the ops pushed next (OpCall::role).
  std::string role;
  auto fwd = [&](const std::string& op, std::vector<double> shape) {
    ops.forward.push_back(make_op(op, std::move(shape), e));
    ops.forward.back().role = role;
  };
  auto bwd = [&](const std::string& op, std::vector<double> shape) {
    ops.backward.push_back(make_op(op, std::move(shape), e));
    ops.backward.back().role = role;
  };
  // fp8 training (Transformer Engine): each GEMM's input (forward) or output gradient
  // (backward) is also written as fp8 and transposed fp8: m x k or m x n elements.
  const bool fp8 = l.precision == core::Precision::fp8;
  auto cast_input = [&](const std::vector<double>& gemm) {
    if (!fp8) return;
    fwd("fp8_cast_transpose", {gemm[0] * gemm[2]});
    ops.forward.back().role = "fp8_cast";
  };
  auto cast_gradient = [&](const std::vector<double>& gemm) {
    if (!fp8) return;
    bwd("fp8_cast_transpose", {gemm[0] * gemm[1]});
    ops.backward.back().role = "fp8_cast";
  };
  auto linear_backward = [&](std::vector<double> shape) {
    cast_gradient(shape);
    bwd("gemm_dgrad", shape);
    bwd("gemm_wgrad", shape);
  };
  const std::vector<double> qkv_gemm{d.tokens, qkv, d.hidden};
  const std::vector<double> out_gemm{d.tokens, d.hidden, d.heads * d.head_dim};
  const std::vector<double> up_gemm{d.tokens, up, d.hidden};
  const std::vector<double> down_gemm{d.tokens, d.hidden, d.ffn};
  const std::vector<double> attention{d.sequences, d.heads, d.kv_heads, d.seq, d.head_dim};
  const std::vector<double> rope{d.tokens, d.heads + d.kv_heads, d.head_dim, d.seq};
  const double norm_tokens = l.sequence_parallel ? d.tokens / std::max(l.tp, 1) : d.tokens;

  // Forward, in the order the layer runs.
  role = "input_norm";
  fwd(norm, {norm_tokens, d.hidden});
  role = "qkv_proj";
  cast_input(qkv_gemm);
  fwd("gemm", qkv_gemm);
  role = "rope";
  if (rotary) fwd("rope", rope);
  const double batch_heads = d.sequences * d.heads;
  const double scores = batch_heads * d.seq * d.seq;
  const bool flash = l.attention == core::Attention::flash;
  const bool attention_dropout = m.dropout;
  role = "attention";
  if (flash) {
    fwd("attention", attention);
  } else {
    fwd("bmm", {batch_heads, d.seq, d.seq, d.head_dim});  // Q K^T
    fwd("softmax", {scores});
    if (attention_dropout) fwd("dropout", {scores});
    fwd("bmm", {batch_heads, d.seq, d.head_dim, d.seq});  // P V
  }
  role = "out_proj";
  cast_input(out_gemm);
  fwd("gemm", out_gemm);
  role = "attn_residual";
  fwd("add", {norm_tokens * d.hidden});
  role = "post_norm";
  fwd(norm, {norm_tokens, d.hidden});
  role = "up_proj";
  cast_input(up_gemm);
  fwd("gemm", up_gemm);
  role = "act";
  if (swiglu)
    fwd("swiglu", {d.tokens, d.ffn});
  else
    fwd("gelu", {d.tokens * d.ffn});
  role = "down_proj";
  cast_input(down_gemm);
  fwd("gemm", down_gemm);
  role = "mlp_residual";
  fwd("add", {norm_tokens * d.hidden});

  // Backward, in reverse: the residual gradient flows past each block and is added to the
  // block's input gradient after the block's norm.
  role = "down_proj";
  linear_backward(down_gemm);
  role = "act";
  if (swiglu)
    bwd("swiglu_backward", {d.tokens, d.ffn});
  else
    bwd("gelu_backward", {d.tokens * d.ffn});
  role = "up_proj";
  linear_backward(up_gemm);
  role = "post_norm";
  bwd(norm + "_backward", {norm_tokens, d.hidden});
  role = "attn_residual";
  bwd("add", {norm_tokens * d.hidden});
  role = "out_proj";
  linear_backward(out_gemm);
  role = "attention";
  if (flash) {
    bwd("attention_backward", attention);
  } else {
    bwd("bmm", {batch_heads, d.seq, d.seq, d.head_dim});  // dP = dO V^T
    bwd("bmm", {batch_heads, d.seq, d.head_dim, d.seq});  // dV = P^T dO
    if (attention_dropout) bwd("dropout_backward", {scores});
    bwd("softmax_backward", {scores});
    bwd("bmm", {batch_heads, d.seq, d.head_dim, d.seq});  // dQ = dS K
    bwd("bmm", {batch_heads, d.seq, d.head_dim, d.seq});  // dK = dS^T Q
  }
  role = "rope";
  if (rotary) bwd("rope", rope);
  role = "qkv_proj";
  linear_backward(qkv_gemm);
  role = "input_norm";
  bwd(norm + "_backward", {norm_tokens, d.hidden});
  role = "mlp_residual";
  bwd("add", {norm_tokens * d.hidden});
  return ops;
}

PhaseOps logits_ops(const LayerShape& l) {
  const core::ModelConfig& m = *l.model;
  const double e = double(core::element_bytes(l.precision));
  const Dims d = dims(l);
  const std::string norm = m.norm == core::Norm::rmsnorm ? "rmsnorm" : "layernorm";
  const double vocab = double(m.vocab) / std::max(l.tp, 1);
  const std::vector<double> head{d.tokens, vocab, d.hidden};
  PhaseOps ops;
  auto add = [](std::vector<OpCall>& phase, OpCall op, const char* role) {
    op.role = role;
    phase.push_back(std::move(op));
  };
  add(ops.forward, make_op(norm, {d.tokens, d.hidden}, e), "final_norm");
  add(ops.forward, make_op("gemm", head, e), "lm_head");
  // The logits and their gradient are fp32 (as in Megatron-LM's cross-entropy).
  add(ops.forward, make_op("cross_entropy", {d.tokens, vocab}, 4), "loss");
  add(ops.backward, make_op("gemm_dgrad", head, e), "lm_head");
  add(ops.backward, make_op("gemm_wgrad", head, e), "lm_head");
  add(ops.backward, make_op(norm + "_backward", {d.tokens, d.hidden}, e), "final_norm");
  return ops;
}

core::Precision logits_precision(core::Precision training) {
  return training == core::Precision::fp8 ? core::Precision::bf16 : training;
}

OpCall optimizer_op(double parameters) {
  return make_op("adam", {parameters}, 4);
}

OpCounts counts_of(const std::vector<OpCall>& ops) {
  OpCounts total;
  for (const OpCall& op : ops) {
    total.flops += op.flops;
    total.bytes += op.bytes;
  }
  return total;
}

std::vector<OpCall> recompute_ops(const std::vector<OpCall>& forward, core::Recompute recompute) {
  switch (recompute) {
    case core::Recompute::full:
      return forward;
    case core::Recompute::selective:
      return attention_core_ops(forward, false);
    case core::Recompute::none:
      break;
  }
  return {};
}

std::vector<OpCall> attention_core_ops(const std::vector<OpCall>& ops, bool backward) {
  auto core = [&](const std::string& op) {
    if (op == "bmm") return true;
    return backward
               ? op == "attention_backward" || op == "softmax_backward" || op == "dropout_backward"
               : op == "attention" || op == "softmax" || op == "dropout";
  };
  std::vector<OpCall> out;
  for (const OpCall& c : ops)
    if (core(c.op)) out.push_back(c);
  return out;
}

}  // namespace hgsim::kernels
