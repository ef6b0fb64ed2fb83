// The ops of a transformer layer on the CPU, forward and backward, in fp32.
//
// Two versions of each op (llm.c's habit, STYLE.md):
//  - `ref::`  the plain-loop reference, accumulating in double: obviously right, slow;
//  - `fast::` the version the profiler times: Eigen (GEMMs through Eigen's blocked GEMM,
//    element-wise ops as Eigen array expressions). tests/test_kernel_ops.cpp checks every
//    fast op against its reference on fresh random inputs, and a few backward ops against
//    finite differences.
//
// All tensors are row-major fp32. bf16 on the CPU: `round_to_bf16` rounds fp32 values to
// bf16 precision (Eigen::bfloat16, round-to-nearest-even); the CPU profile measures fp32
// only, because the CPU has no bf16 math unit and a converted bf16 GEMM would time the
// conversion, not a bf16 unit. Eigen runs single-threaded (Eigen::setNbThreads(1), see
// `use_one_thread`), so a profile measures one core.
//
// Attention is batched GEMM + softmax with the scores materialised (not fused): S = Q K^T /
// sqrt(d), causal mask, P = softmax(S), O = P V; backward from the saved P. Grouped-query
// attention: query head i reads kv head i / (heads / kv_heads).
#pragma once

#include <cstdint>
#include <span>

namespace hgsim::kernels::cpu {

// Eigen on one thread: profiles time one core, tests are reproducible.
void use_one_thread();

// Rounds every value to the nearest bf16 (kept in fp32 storage).
void round_to_bf16(std::span<float> values);

struct GemmShape {
  int m = 0, n = 0, k = 0;  // C[m,n] = op(A)[m,k] op(B)[k,n]
  bool trans_a = false;     // A is stored [k,m]
  bool trans_b = false;     // B is stored [n,k]
  bool accumulate = false;  // C += instead of C =
};

struct AttentionShape {
  int batch = 1;  // sequences
  int heads = 1;  // query heads (on this GPU)
  int kv_heads = 1;
  int seq = 1;
  int head_dim = 1;
  // q [batch, heads, seq, head_dim]; k, v [batch, kv_heads, seq, head_dim];
  // p (saved probabilities) [batch, heads, seq, seq]; o like q.
  std::int64_t q_size() const { return std::int64_t(batch) * heads * seq * head_dim; }
  std::int64_t kv_size() const { return std::int64_t(batch) * kv_heads * seq * head_dim; }
  std::int64_t p_size() const { return std::int64_t(batch) * heads * seq * seq; }
};

struct AdamSettings {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;  // 1-based, for bias correction
};

// The ops, with the same signatures in both namespaces (one list, two implementations).
#define HGSIM_CPU_OPS                                                                              \
  void gemm(const GemmShape& s, const float* a, const float* b, float* c);                         \
  void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,  \
                         float* p, float* o);                                                      \
  void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, \
                          const float* p, const float* d_o, float* dq, float* dk, float* dv);      \
  /* LayerNorm over the last dimension; saves mean and 1/std per row. */                           \
  void layernorm_forward(int rows, int cols, const float* x, const float* gamma,                   \
                         const float* beta, float* y, float* mean, float* rstd);                   \
  void layernorm_backward(int rows, int cols, const float* x, const float* gamma,                  \
                          const float* mean, const float* rstd, const float* dy, float* dx,        \
                          float* dgamma, float* dbeta);                                            \
  void rmsnorm_forward(int rows, int cols, const float* x, const float* gamma, float* y,           \
                       float* rstd);                                                               \
  void rmsnorm_backward(int rows, int cols, const float* x, const float* gamma, const float* rstd, \
                        const float* dy, float* dx, float* dgamma);                                \
  /* GELU, tanh approximation (GPT-2). */                                                          \
  void gelu_forward(std::int64_t n, const float* x, float* y);                                     \
  void gelu_backward(std::int64_t n, const float* x, const float* dy, float* dx);                  \
  /* SwiGLU: x [rows, 2 cols] = [gate | up]; y [rows, cols] = silu(gate) * up. */                  \
  void swiglu_forward(int rows, int cols, const float* x, float* y);                               \
  void swiglu_backward(int rows, int cols, const float* x, const float* dy, float* dx);            \
  /* Row-wise softmax. */                                                                          \
  void softmax_forward(int rows, int cols, const float* x, float* y);                              \
  void softmax_backward(int rows, int cols, const float* y, const float* dy, float* dx);           \
  /* y = a + b (the residual; its backward is the same add of two gradients). */                   \
  void add(std::int64_t n, const float* a, const float* b, float* y);                              \
  /* Rotary embedding in place on x [tokens, heads, head_dim], token t at position t % seq;        \
     `inverse` rotates back (the backward). Pairs (2i, 2i+1), theta 10000. */                      \
  void rope(int tokens, int seq, int heads, int head_dim, float* x, bool inverse);                 \
  /* Embedding: y[t] = table[ids[t]] (+ positions[t % seq] when given). */                         \
  void embedding_forward(int tokens, int hidden, const std::int32_t* ids, const float* table,      \
                         float* y);                                                                \
  void embedding_backward(int tokens, int hidden, const std::int32_t* ids, const float* dy,        \
                          float* dtable);                                                          \
  /* Cross-entropy of logits [rows, vocab] against targets: mean loss; dlogits =                   \
     (softmax - onehot) / rows. Returns the loss. */                                               \
  float cross_entropy(int rows, int vocab, const float* logits, const std::int32_t* targets,       \
                      float* dlogits);                                                             \
  /* AdamW update in place. */                                                                     \
  void adam(std::int64_t n, const AdamSettings& s, float* params, const float* grads, float* m,    \
            float* v);

namespace ref {
HGSIM_CPU_OPS
}  // namespace ref
namespace fast {
HGSIM_CPU_OPS
}  // namespace fast
#undef HGSIM_CPU_OPS

}  // namespace hgsim::kernels::cpu
