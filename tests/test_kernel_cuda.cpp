// The CUDA ops (kernels/ops_cuda.hpp) against the CPU references on fresh random inputs.
// Skipped, with the reason, where there is no CUDA device (the build machines have none;
// kernels/measure_gpu.sh runs these first on a GPU machine).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda_devices.hpp"
#include "kernels/ops_cpu.hpp"
#include "kernels/ops_cuda.hpp"

using namespace hgsim::kernels;
namespace ref = hgsim::kernels::cpu::ref;

namespace {

class KernelCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (local_cuda_devices(&why).empty()) GTEST_SKIP() << "no CUDA device: " << why;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::cout << "[ seed     ] " << seed_ << "\n";
  }
  std::vector<float> floats(std::size_t n, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  // Runs the op on the GPU and returns its outputs.
  std::vector<std::vector<float>> gpu(const std::string& op, const std::vector<int>& shape,
                                      const std::vector<std::vector<float>>& inputs,
                                      const std::string& dtype = "fp32") {
    std::vector<std::vector<float>> out;
    std::string error;
    EXPECT_TRUE(gpu::cuda_run_op(op, shape, dtype, inputs, &out, &error)) << op << ": " << error;
    return out;
  }
  static void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                           double tolerance, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      worst = std::max(
          worst, std::abs(double(got[i]) - want[i]) / std::max(1.0, std::abs(double(want[i]))));
    EXPECT_LE(worst, tolerance) << what;
  }
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

}  // namespace

TEST_F(KernelCuda, GemmsMatchReferenceInEveryDtype) {
  const int m = 96, n = 80, k = 136;
  for (const char* dtype : {"fp32", "tf32", "fp16", "bf16"}) {
    // bf16 keeps 8 bits of mantissa: sums of 136 rounded products drift by ~0.1.
    const std::string d(dtype);
    const double tolerance = d == "fp32" ? 1e-4 : d == "bf16" ? 0.2 : 0.05;
    const auto a = floats(std::size_t(m) * k), b = floats(std::size_t(k) * n);
    std::vector<float> c(std::size_t(m) * n);
    ref::gemm({m, n, k}, a.data(), b.data(), c.data());
    expect_close(gpu("gemm", {m, n, k}, {a, b}, dtype).at(0), c, tolerance, dtype);
    // dgrad: dX[m,k] = dY[m,n] W^T with W [k,n].
    const auto dy = floats(std::size_t(m) * n);
    std::vector<float> dx(std::size_t(m) * k);
    ref::gemm({m, k, n, false, true}, dy.data(), b.data(), dx.data());
    expect_close(gpu("gemm_dgrad", {m, n, k}, {dy, b}, dtype).at(0), dx, tolerance, dtype);
    // wgrad: dW[k,n] = X^T dY with X [m,k].
    std::vector<float> dw(std::size_t(k) * n);
    ref::gemm({k, n, m, true, false}, a.data(), dy.data(), dw.data());
    expect_close(gpu("gemm_wgrad", {m, n, k}, {a, dy}, dtype).at(0), dw, tolerance, dtype);
  }
}

TEST_F(KernelCuda, AttentionMatchesReference) {
  for (int kv : {4, 2}) {
    const cpu::AttentionShape s{2, 4, kv, 40, 16};
    const auto q = floats(s.q_size()), k = floats(s.kv_size()), v = floats(s.kv_size());
    std::vector<float> p(s.p_size()), o(s.q_size());
    ref::attention_forward(s, q.data(), k.data(), v.data(), p.data(), o.data());
    const std::vector<int> shape{s.batch, s.heads, s.kv_heads, s.seq, s.head_dim};
    const auto out = gpu("attention", shape, {q, k, v});
    expect_close(out.at(0), p, 1e-4, "attention p");
    expect_close(out.at(1), o, 1e-4, "attention o");
    const auto d_o = floats(s.q_size());
    std::vector<float> dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
    ref::attention_backward(s, q.data(), k.data(), v.data(), p.data(), d_o.data(), dq.data(),
                            dk.data(), dv.data());
    const auto back = gpu("attention_backward", shape, {q, k, v, p, d_o});
    expect_close(back.at(0), dq, 1e-4, "attention dq");
    expect_close(back.at(1), dk, 1e-4, "attention dk");
    expect_close(back.at(2), dv, 1e-4, "attention dv");
  }
}

TEST_F(KernelCuda, NormsMatchReference) {
  const int rows = 33, cols = 300;
  const auto x = floats(std::size_t(rows) * cols, -2, 2), g = floats(cols), b = floats(cols),
             dy = floats(std::size_t(rows) * cols);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(cols), db(cols);
  ref::layernorm_forward(rows, cols, x.data(), g.data(), b.data(), y.data(), mean.data(),
                         rstd.data());
  auto out = gpu("layernorm", {rows, cols}, {x, g, b});
  expect_close(out.at(0), y, 1e-4, "layernorm y");
  expect_close(out.at(2), rstd, 1e-4, "layernorm rstd");
  ref::layernorm_backward(rows, cols, x.data(), g.data(), mean.data(), rstd.data(), dy.data(),
                          dx.data(), dg.data(), db.data());
  out = gpu("layernorm_backward", {rows, cols}, {x, g, mean, rstd, dy});
  expect_close(out.at(0), dx, 1e-4, "layernorm dx");
  expect_close(out.at(1), dg, 1e-3, "layernorm dgamma");
  expect_close(out.at(2), db, 1e-3, "layernorm dbeta");
  ref::rmsnorm_forward(rows, cols, x.data(), g.data(), y.data(), rstd.data());
  out = gpu("rmsnorm", {rows, cols}, {x, g});
  expect_close(out.at(0), y, 1e-4, "rmsnorm y");
  ref::rmsnorm_backward(rows, cols, x.data(), g.data(), rstd.data(), dy.data(), dx.data(),
                        dg.data());
  out = gpu("rmsnorm_backward", {rows, cols}, {x, g, rstd, dy});
  expect_close(out.at(0), dx, 1e-4, "rmsnorm dx");
  expect_close(out.at(1), dg, 1e-3, "rmsnorm dgamma");
}

TEST_F(KernelCuda, ElementwiseOpsMatchReference) {
  const int n = 5000, rows = 17, cols = 150;
  const auto x = floats(n, -4, 4), y = floats(n);
  std::vector<float> want(n);
  ref::gelu_forward(n, x.data(), want.data());
  expect_close(gpu("gelu", {n}, {x}).at(0), want, 1e-5, "gelu");
  ref::gelu_backward(n, x.data(), y.data(), want.data());
  expect_close(gpu("gelu_backward", {n}, {x, y}).at(0), want, 1e-5, "gelu backward");
  ref::add(n, x.data(), y.data(), want.data());
  expect_close(gpu("add", {n}, {x, y}).at(0), want, 1e-6, "add");
  const auto sx = floats(std::size_t(rows) * 2 * cols, -3, 3),
             sdy = floats(std::size_t(rows) * cols);
  std::vector<float> sy(sdy.size()), sdx(sx.size());
  ref::swiglu_forward(rows, cols, sx.data(), sy.data());
  expect_close(gpu("swiglu", {rows, cols}, {sx}).at(0), sy, 1e-5, "swiglu");
  ref::swiglu_backward(rows, cols, sx.data(), sdy.data(), sdx.data());
  expect_close(gpu("swiglu_backward", {rows, cols}, {sx, sdy}).at(0), sdx, 1e-5, "swiglu bwd");
  const int tokens = 64, heads = 3, dim = 32, seq = 32;
  auto r = floats(std::size_t(tokens) * heads * dim);
  const auto r_in = r;
  ref::rope(tokens, seq, heads, dim, r.data(), false);
  expect_close(gpu("rope", {tokens, heads, dim, seq}, {r_in}).at(0), r, 1e-4, "rope");
}

TEST_F(KernelCuda, CrossEntropyAndAdamMatchReference) {
  const int rows = 9, vocab = 1000;
  const auto logits = floats(std::size_t(rows) * vocab, -5, 5);
  std::vector<std::int32_t> targets(rows);
  std::vector<float> targets_f(rows);
  for (int r = 0; r < rows; ++r) targets_f[r] = float(targets[r] = (r * 7919) % vocab);
  std::vector<float> d(logits.size());
  ref::cross_entropy(rows, vocab, logits.data(), targets.data(), d.data());
  expect_close(gpu("cross_entropy", {rows, vocab}, {logits, targets_f}).at(0), d, 1e-6,
               "cross-entropy");
  const int n = 4000;
  auto p = floats(n), g = floats(n), m = floats(n, -0.1f, 0.1f), v = floats(n, 0, 0.1f);
  const auto p0 = p, m0 = m, v0 = v;
  ref::adam(n, cpu::AdamSettings{}, p.data(), g.data(), m.data(), v.data());
  const auto out = gpu("adam", {n}, {p0, g, m0, v0});
  expect_close(out.at(0), p, 1e-5, "adam params");
  expect_close(out.at(1), m, 1e-6, "adam m");
  expect_close(out.at(2), v, 1e-6, "adam v");
}
