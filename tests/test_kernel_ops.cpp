// Every CPU op of kernels/ops_cpu.hpp: the fast (Eigen) version against the plain-loop
// reference on fresh random inputs (the seed is printed, so a failure can be replayed with
// HGSIM_TEST_SEED), and a few backward ops against central finite differences.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops_cpu.hpp"

using namespace hgsim::kernels;
namespace ref = hgsim::kernels::cpu::ref;
namespace fast = hgsim::kernels::cpu::fast;

namespace {

unsigned fresh_seed() {
  if (const char* fixed = std::getenv("HGSIM_TEST_SEED")) return unsigned(std::stoul(fixed));
  return std::random_device{}();
}

class Random {
 public:
  Random() : seed_(fresh_seed()), rng_(seed_) {
    std::cout << "[ seed     ] HGSIM_TEST_SEED=" << seed_ << "\n";
  }
  std::vector<float> floats(std::size_t n, float lo = -1, float hi = 1) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  std::vector<std::int32_t> ids(std::size_t n, int limit) {
    std::uniform_int_distribution<int> d(0, limit - 1);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  unsigned seed() const { return seed_; }

 private:
  unsigned seed_;
  std::mt19937 rng_;
};

// Largest |a - b| relative to max(1, |b|).
void expect_close(const std::vector<float>& fast_out, const std::vector<float>& ref_out,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(fast_out.size(), ref_out.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref_out.size(); ++i) {
    const double err =
        std::abs(double(fast_out[i]) - ref_out[i]) / std::max(1.0, std::abs(double(ref_out[i])));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": element " << at << " fast " << fast_out[at]
                              << " reference " << ref_out[at];
}

// A dot product as the scalar loss of the finite-difference checks.
double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// d loss / d x[i] by central differences, for a few i.
void expect_gradient(std::vector<float> x, const std::vector<float>& analytic,
                     const std::function<double(const std::vector<float>&)>& loss, Random& rnd,
                     const std::string& what) {
  const float h = 1e-2f;
  for (int trial = 0; trial < 8; ++trial) {
    const std::size_t i = std::size_t(rnd.between(0, int(x.size()) - 1));
    const float keep = x[i];
    x[i] = keep + h;
    const double up = loss(x);
    x[i] = keep - h;
    const double down = loss(x);
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 2e-2 * std::max(1.0, std::abs(numeric)))
        << what << ": d/dx[" << i << "]";
  }
}

}  // namespace

TEST(KernelOps, GemmAllLayoutsMatchReference) {
  Random rnd;
  for (int layout = 0; layout < 8; ++layout) {
    cpu::GemmShape s{rnd.between(1, 70), rnd.between(1, 70), rnd.between(1, 90),
                     bool(layout & 1),   bool(layout & 2),   bool(layout & 4)};
    const auto a = rnd.floats(std::size_t(s.m) * s.k);
    const auto b = rnd.floats(std::size_t(s.k) * s.n);
    auto c_fast = rnd.floats(std::size_t(s.m) * s.n);
    auto c_ref = c_fast;
    fast::gemm(s, a.data(), b.data(), c_fast.data());
    ref::gemm(s, a.data(), b.data(), c_ref.data());
    expect_close(c_fast, c_ref, 1e-4,
                 "gemm m" + std::to_string(s.m) + " n" + std::to_string(s.n) + " k" +
                     std::to_string(s.k) + " layout " + std::to_string(layout));
  }
}

TEST(KernelOps, Bf16RoundingKeepsEightBitsOfMantissa) {
  Random rnd;
  auto v = rnd.floats(1000, -100, 100);
  const auto original = v;
  cpu::round_to_bf16(v);
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_LE(std::abs(v[i] - original[i]), std::abs(original[i]) * (1.0 / 256) + 1e-30);
}

TEST(KernelOps, AttentionForwardAndBackwardMatchReference) {
  Random rnd;
  for (int kv_heads : {4, 2, 1}) {  // multi-head, grouped-query, multi-query
    const cpu::AttentionShape s{rnd.between(1, 2), 4, kv_heads, rnd.between(3, 24),
                                2 * rnd.between(2, 8)};
    const auto q = rnd.floats(s.q_size()), k = rnd.floats(s.kv_size()), v = rnd.floats(s.kv_size());
    std::vector<float> p_fast(s.p_size()), p_ref(s.p_size()), o_fast(s.q_size()), o_ref(s.q_size());
    fast::attention_forward(s, q.data(), k.data(), v.data(), p_fast.data(), o_fast.data());
    ref::attention_forward(s, q.data(), k.data(), v.data(), p_ref.data(), o_ref.data());
    expect_close(p_fast, p_ref, 1e-5, "attention probabilities");
    expect_close(o_fast, o_ref, 1e-5, "attention output");

    const auto d_o = rnd.floats(s.q_size());
    std::vector<float> dq_f(s.q_size()), dk_f(s.kv_size()), dv_f(s.kv_size());
    std::vector<float> dq_r(s.q_size()), dk_r(s.kv_size()), dv_r(s.kv_size());
    fast::attention_backward(s, q.data(), k.data(), v.data(), p_ref.data(), d_o.data(), dq_f.data(),
                             dk_f.data(), dv_f.data());
    ref::attention_backward(s, q.data(), k.data(), v.data(), p_ref.data(), d_o.data(), dq_r.data(),
                            dk_r.data(), dv_r.data());
    expect_close(dq_f, dq_r, 1e-4, "attention dq");
    expect_close(dk_f, dk_r, 1e-4, "attention dk");
    expect_close(dv_f, dv_r, 1e-4, "attention dv");

    // dq against finite differences of sum(o * d_o).
    auto loss_q = [&](const std::vector<float>& qx) {
      std::vector<float> p(s.p_size()), o(s.q_size());
      ref::attention_forward(s, qx.data(), k.data(), v.data(), p.data(), o.data());
      return dot(o, d_o);
    };
    expect_gradient(q, dq_r, loss_q, rnd, "attention dq");
    auto loss_k = [&](const std::vector<float>& kx) {
      std::vector<float> p(s.p_size()), o(s.q_size());
      ref::attention_forward(s, q.data(), kx.data(), v.data(), p.data(), o.data());
      return dot(o, d_o);
    };
    expect_gradient(k, dk_r, loss_k, rnd, "attention dk");
  }
}

TEST(KernelOps, LayerNormMatchesReferenceAndFiniteDifferences) {
  Random rnd;
  const int rows = rnd.between(1, 9), cols = rnd.between(2, 64);
  const auto x = rnd.floats(std::size_t(rows) * cols, -2, 2), g = rnd.floats(cols),
             b = rnd.floats(cols), dy = rnd.floats(std::size_t(rows) * cols);
  std::vector<float> y_f(x.size()), y_r(x.size()), mean_f(rows), mean_r(rows), rstd_f(rows),
      rstd_r(rows);
  fast::layernorm_forward(rows, cols, x.data(), g.data(), b.data(), y_f.data(), mean_f.data(),
                          rstd_f.data());
  ref::layernorm_forward(rows, cols, x.data(), g.data(), b.data(), y_r.data(), mean_r.data(),
                         rstd_r.data());
  expect_close(y_f, y_r, 1e-5, "layernorm y");
  expect_close(rstd_f, rstd_r, 1e-5, "layernorm rstd");
  std::vector<float> dx_f(x.size()), dx_r(x.size()), dg_f(cols), dg_r(cols), db_f(cols), db_r(cols);
  fast::layernorm_backward(rows, cols, x.data(), g.data(), mean_r.data(), rstd_r.data(), dy.data(),
                           dx_f.data(), dg_f.data(), db_f.data());
  ref::layernorm_backward(rows, cols, x.data(), g.data(), mean_r.data(), rstd_r.data(), dy.data(),
                          dx_r.data(), dg_r.data(), db_r.data());
  expect_close(dx_f, dx_r, 1e-4, "layernorm dx");
  expect_close(dg_f, dg_r, 1e-4, "layernorm dgamma");
  expect_close(db_f, db_r, 1e-4, "layernorm dbeta");
  expect_gradient(
      x, dx_r,
      [&](const std::vector<float>& xx) {
        std::vector<float> y(xx.size()), m(rows), r(rows);
        ref::layernorm_forward(rows, cols, xx.data(), g.data(), b.data(), y.data(), m.data(),
                               r.data());
        return dot(y, dy);
      },
      rnd, "layernorm dx");
}

TEST(KernelOps, RmsNormMatchesReferenceAndFiniteDifferences) {
  Random rnd;
  const int rows = rnd.between(1, 9), cols = rnd.between(2, 64);
  const auto x = rnd.floats(std::size_t(rows) * cols, -2, 2), g = rnd.floats(cols),
             dy = rnd.floats(std::size_t(rows) * cols);
  std::vector<float> y_f(x.size()), y_r(x.size()), rstd_f(rows), rstd_r(rows);
  fast::rmsnorm_forward(rows, cols, x.data(), g.data(), y_f.data(), rstd_f.data());
  ref::rmsnorm_forward(rows, cols, x.data(), g.data(), y_r.data(), rstd_r.data());
  expect_close(y_f, y_r, 1e-5, "rmsnorm y");
  std::vector<float> dx_f(x.size()), dx_r(x.size()), dg_f(cols), dg_r(cols);
  fast::rmsnorm_backward(rows, cols, x.data(), g.data(), rstd_r.data(), dy.data(), dx_f.data(),
                         dg_f.data());
  ref::rmsnorm_backward(rows, cols, x.data(), g.data(), rstd_r.data(), dy.data(), dx_r.data(),
                        dg_r.data());
  expect_close(dx_f, dx_r, 1e-4, "rmsnorm dx");
  expect_close(dg_f, dg_r, 1e-4, "rmsnorm dgamma");
  expect_gradient(
      x, dx_r,
      [&](const std::vector<float>& xx) {
        std::vector<float> y(xx.size()), r(rows);
        ref::rmsnorm_forward(rows, cols, xx.data(), g.data(), y.data(), r.data());
        return dot(y, dy);
      },
      rnd, "rmsnorm dx");
}

TEST(KernelOps, GeluMatchesReferenceAndFiniteDifferences) {
  Random rnd;
  const std::int64_t n = rnd.between(1, 3000);
  const auto x = rnd.floats(n, -4, 4), dy = rnd.floats(n);
  std::vector<float> y_f(n), y_r(n), dx_f(n), dx_r(n);
  fast::gelu_forward(n, x.data(), y_f.data());
  ref::gelu_forward(n, x.data(), y_r.data());
  expect_close(y_f, y_r, 1e-5, "gelu");
  fast::gelu_backward(n, x.data(), dy.data(), dx_f.data());
  ref::gelu_backward(n, x.data(), dy.data(), dx_r.data());
  expect_close(dx_f, dx_r, 1e-5, "gelu backward");
  expect_gradient(
      x, dx_r,
      [&](const std::vector<float>& xx) {
        std::vector<float> y(n);
        ref::gelu_forward(n, xx.data(), y.data());
        return dot(y, dy);
      },
      rnd, "gelu dx");
}

TEST(KernelOps, SwigluMatchesReferenceAndFiniteDifferences) {
  Random rnd;
  const int rows = rnd.between(1, 9), cols = rnd.between(1, 80);
  const auto x = rnd.floats(std::size_t(rows) * 2 * cols, -3, 3),
             dy = rnd.floats(std::size_t(rows) * cols);
  std::vector<float> y_f(dy.size()), y_r(dy.size()), dx_f(x.size()), dx_r(x.size());
  fast::swiglu_forward(rows, cols, x.data(), y_f.data());
  ref::swiglu_forward(rows, cols, x.data(), y_r.data());
  expect_close(y_f, y_r, 1e-5, "swiglu");
  fast::swiglu_backward(rows, cols, x.data(), dy.data(), dx_f.data());
  ref::swiglu_backward(rows, cols, x.data(), dy.data(), dx_r.data());
  expect_close(dx_f, dx_r, 1e-5, "swiglu backward");
  expect_gradient(
      x, dx_r,
      [&](const std::vector<float>& xx) {
        std::vector<float> y(dy.size());
        ref::swiglu_forward(rows, cols, xx.data(), y.data());
        return dot(y, dy);
      },
      rnd, "swiglu dx");
}

TEST(KernelOps, SoftmaxMatchesReference) {
  Random rnd;
  const int rows = rnd.between(1, 9), cols = rnd.between(1, 300);
  const auto x = rnd.floats(std::size_t(rows) * cols, -8, 8), dy = rnd.floats(x.size());
  std::vector<float> y_f(x.size()), y_r(x.size()), dx_f(x.size()), dx_r(x.size());
  fast::softmax_forward(rows, cols, x.data(), y_f.data());
  ref::softmax_forward(rows, cols, x.data(), y_r.data());
  expect_close(y_f, y_r, 1e-6, "softmax");
  fast::softmax_backward(rows, cols, y_r.data(), dy.data(), dx_f.data());
  ref::softmax_backward(rows, cols, y_r.data(), dy.data(), dx_r.data());
  expect_close(dx_f, dx_r, 1e-6, "softmax backward");
}

TEST(KernelOps, ResidualAddMatchesReference) {
  Random rnd;
  const std::int64_t n = rnd.between(1, 5000);
  const auto a = rnd.floats(n), b = rnd.floats(n);
  std::vector<float> y_f(n), y_r(n);
  fast::add(n, a.data(), b.data(), y_f.data());
  ref::add(n, a.data(), b.data(), y_r.data());
  expect_close(y_f, y_r, 0, "add");
}

TEST(KernelOps, RopeMatchesReferenceAndInverseUndoesIt) {
  Random rnd;
  const int seq = rnd.between(1, 40), tokens = seq * rnd.between(1, 3), heads = rnd.between(1, 4),
            dim = 2 * rnd.between(1, 16);
  const auto x = rnd.floats(std::size_t(tokens) * heads * dim);
  auto x_f = x, x_r = x;
  fast::rope(tokens, seq, heads, dim, x_f.data(), false);
  ref::rope(tokens, seq, heads, dim, x_r.data(), false);
  expect_close(x_f, x_r, 1e-5, "rope");
  fast::rope(tokens, seq, heads, dim, x_f.data(), true);
  expect_close(x_f, x, 1e-5, "rope then inverse");
}

TEST(KernelOps, EmbeddingMatchesReference) {
  Random rnd;
  const int tokens = rnd.between(1, 50), hidden = rnd.between(1, 40), vocab = rnd.between(2, 30);
  const auto ids = rnd.ids(tokens, vocab);
  const auto table = rnd.floats(std::size_t(vocab) * hidden),
             dy = rnd.floats(std::size_t(tokens) * hidden);
  std::vector<float> y_f(dy.size()), y_r(dy.size());
  fast::embedding_forward(tokens, hidden, ids.data(), table.data(), y_f.data());
  ref::embedding_forward(tokens, hidden, ids.data(), table.data(), y_r.data());
  expect_close(y_f, y_r, 0, "embedding");
  auto dt_f = rnd.floats(table.size());
  auto dt_r = dt_f;
  fast::embedding_backward(tokens, hidden, ids.data(), dy.data(), dt_f.data());
  ref::embedding_backward(tokens, hidden, ids.data(), dy.data(), dt_r.data());
  expect_close(dt_f, dt_r, 1e-6, "embedding backward");
}

TEST(KernelOps, CrossEntropyMatchesReferenceAndFiniteDifferences) {
  Random rnd;
  const int rows = rnd.between(1, 8), vocab = rnd.between(2, 500);
  const auto logits = rnd.floats(std::size_t(rows) * vocab, -5, 5);
  const auto targets = rnd.ids(rows, vocab);
  std::vector<float> d_f(logits.size()), d_r(logits.size());
  const float loss_f = fast::cross_entropy(rows, vocab, logits.data(), targets.data(), d_f.data());
  const float loss_r = ref::cross_entropy(rows, vocab, logits.data(), targets.data(), d_r.data());
  EXPECT_NEAR(loss_f, loss_r, 1e-5 * std::max(1.0f, loss_r));
  expect_close(d_f, d_r, 1e-6, "cross-entropy gradient");
  std::vector<float> scratch(logits.size());
  expect_gradient(
      logits, d_r,
      [&](const std::vector<float>& l) {
        return double(ref::cross_entropy(rows, vocab, l.data(), targets.data(), scratch.data()));
      },
      rnd, "cross-entropy dlogits");
}

TEST(KernelOps, AdamMatchesReference) {
  Random rnd;
  const std::int64_t n = rnd.between(1, 4000);
  cpu::AdamSettings s;
  s.step = rnd.between(1, 100);
  s.weight_decay = 0.1f;
  const auto p = rnd.floats(n), g = rnd.floats(n), m = rnd.floats(n, -0.1f, 0.1f),
             v = rnd.floats(n, 0, 0.1f);
  auto p_f = p, m_f = m, v_f = v, p_r = p, m_r = m, v_r = v;
  fast::adam(n, s, p_f.data(), g.data(), m_f.data(), v_f.data());
  ref::adam(n, s, p_r.data(), g.data(), m_r.data(), v_r.data());
  expect_close(m_f, m_r, 1e-6, "adam m");
  expect_close(v_f, v_r, 1e-6, "adam v");
  expect_close(p_f, p_r, 1e-5, "adam params");
}
