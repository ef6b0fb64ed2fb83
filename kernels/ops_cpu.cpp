// The fast CPU ops of kernels/ops_cpu.hpp: Eigen GEMMs (single-threaded) and Eigen array
// expressions for the element-wise ops. tests/test_kernel_ops.cpp checks each against the
// plain-loop reference (ops_cpu_ref.cpp).
#include "kernels/ops_cpu.hpp"

#include <cmath>
#include <vector>

#include <Eigen/Core>

namespace hgsim::kernels::cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMatrix = Eigen::Map<RowMatrix>;
using ConstMapMatrix = Eigen::Map<const RowMatrix>;
using ArrayX = Eigen::Array<float, Eigen::Dynamic, 1>;
using MapArray = Eigen::Map<ArrayX>;
using ConstMapArray = Eigen::Map<const ArrayX>;
using RowArray = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRowArray = Eigen::Map<RowArray>;
using ConstMapRowArray = Eigen::Map<const RowArray>;

void use_one_thread() {
  Eigen::setNbThreads(1);
}

void round_to_bf16(std::span<float> values) {
  for (float& v : values) v = static_cast<float>(Eigen::bfloat16(v));
}

namespace fast {

namespace {
constexpr float kGeluC = 0.7978845608028654f;
}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  MapMatrix out(c, s.m, s.n);
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (s.accumulate)
      out.noalias() += lhs * rhs;
    else
      out.noalias() = lhs * rhs;
  };
  ConstMapMatrix a_mk(a, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k);
  ConstMapMatrix b_kn(b, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n);
  if (s.trans_a && s.trans_b) return run(a_mk.transpose(), b_kn.transpose());
  if (s.trans_a) return run(a_mk.transpose(), b_kn);
  if (s.trans_b) return run(a_mk, b_kn.transpose());
  run(a_mk, b_kn);
}

namespace {
std::int64_t q_offset(const AttentionShape& s, int b, int h) {
  return (std::int64_t(b) * s.heads + h) * s.seq * s.head_dim;
}
std::int64_t kv_offset(const AttentionShape& s, int b, int h) {
  return (std::int64_t(b) * s.kv_heads + h / (s.heads / s.kv_heads)) * s.seq * s.head_dim;
}
std::int64_t p_offset(const AttentionShape& s, int b, int h) {
  return (std::int64_t(b) * s.heads + h) * s.seq * s.seq;
}
}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* p, float* o) {
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      ConstMapMatrix qh(q + q_offset(s, b, h), s.seq, s.head_dim);
      ConstMapMatrix kh(k + kv_offset(s, b, h), s.seq, s.head_dim);
      ConstMapMatrix vh(v + kv_offset(s, b, h), s.seq, s.head_dim);
      MapMatrix ph(p + p_offset(s, b, h), s.seq, s.seq);
      ph.noalias() = (qh * kh.transpose()) * scale;
      for (int i = 0; i < s.seq; ++i) {
        auto visible = ph.row(i).head(i + 1).array();
        const float mx = visible.maxCoeff();
        visible = (visible - mx).exp();
        visible /= visible.sum();
        ph.row(i).tail(s.seq - i - 1).setZero();
      }
      MapMatrix(o + q_offset(s, b, h), s.seq, s.head_dim).noalias() = ph * vh;
    }
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* p, const float* d_o, float* dq, float* dk, float* dv) {
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  MapArray(dk, s.kv_size()).setZero();
  MapArray(dv, s.kv_size()).setZero();
  RowMatrix ds(s.seq, s.seq);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      ConstMapMatrix qh(q + q_offset(s, b, h), s.seq, s.head_dim);
      ConstMapMatrix kh(k + kv_offset(s, b, h), s.seq, s.head_dim);
      ConstMapMatrix vh(v + kv_offset(s, b, h), s.seq, s.head_dim);
      ConstMapMatrix ph(p + p_offset(s, b, h), s.seq, s.seq);
      ConstMapMatrix doh(d_o + q_offset(s, b, h), s.seq, s.head_dim);
      MapMatrix(dv + kv_offset(s, b, h), s.seq, s.head_dim).noalias() += ph.transpose() * doh;
      ds.noalias() = doh * vh.transpose();  // dP
      const Eigen::VectorXf row = (ph.array() * ds.array()).rowwise().sum();
      ds = (ph.array() * (ds.array().colwise() - row.array()) * scale).matrix();
      MapMatrix(dq + q_offset(s, b, h), s.seq, s.head_dim).noalias() = ds * kh;
      MapMatrix(dk + kv_offset(s, b, h), s.seq, s.head_dim).noalias() += ds.transpose() * qh;
    }
}

void layernorm_forward(int rows, int cols, const float* x, const float* gamma, const float* beta,
                       float* y, float* mean, float* rstd) {
  ConstMapRowArray xa(x, rows, cols);
  MapRowArray ya(y, rows, cols);
  ConstMapArray g(gamma, cols), bt(beta, cols);
  for (int r = 0; r < rows; ++r) {
    const float mu = xa.row(r).mean();
    const float var = (xa.row(r) - mu).square().mean();
    const float rs = 1.0f / std::sqrt(var + 1e-5f);
    ya.row(r) = (xa.row(r) - mu) * rs * g.transpose() + bt.transpose();
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layernorm_backward(int rows, int cols, const float* x, const float* gamma, const float* mean,
                        const float* rstd, const float* dy, float* dx, float* dgamma,
                        float* dbeta) {
  ConstMapRowArray xa(x, rows, cols), dya(dy, rows, cols);
  MapRowArray dxa(dx, rows, cols);
  ConstMapArray g(gamma, cols);
  MapArray dg(dgamma, cols), db(dbeta, cols);
  dg.setZero();
  db.setZero();
  Eigen::Array<float, 1, Eigen::Dynamic> xhat(cols), dn(cols);
  for (int r = 0; r < rows; ++r) {
    xhat = (xa.row(r) - mean[r]) * rstd[r];
    dn = dya.row(r) * g.transpose();
    const float mean_dn = dn.mean();
    const float mean_dn_xhat = (dn * xhat).mean();
    dg += (dya.row(r) * xhat).transpose();
    db += dya.row(r).transpose();
    dxa.row(r) = (dn - mean_dn - xhat * mean_dn_xhat) * rstd[r];
  }
}

void rmsnorm_forward(int rows, int cols, const float* x, const float* gamma, float* y,
                     float* rstd) {
  ConstMapRowArray xa(x, rows, cols);
  MapRowArray ya(y, rows, cols);
  ConstMapArray g(gamma, cols);
  for (int r = 0; r < rows; ++r) {
    const float rs = 1.0f / std::sqrt(xa.row(r).square().mean() + 1e-5f);
    ya.row(r) = xa.row(r) * rs * g.transpose();
    rstd[r] = rs;
  }
}

void rmsnorm_backward(int rows, int cols, const float* x, const float* gamma, const float* rstd,
                      const float* dy, float* dx, float* dgamma) {
  ConstMapRowArray xa(x, rows, cols), dya(dy, rows, cols);
  MapRowArray dxa(dx, rows, cols);
  ConstMapArray g(gamma, cols);
  MapArray dg(dgamma, cols);
  dg.setZero();
  Eigen::Array<float, 1, Eigen::Dynamic> xhat(cols), dn(cols);
  for (int r = 0; r < rows; ++r) {
    xhat = xa.row(r) * rstd[r];
    dn = dya.row(r) * g.transpose();
    const float mean_dn_xhat = (dn * xhat).mean();
    dg += (dya.row(r) * xhat).transpose();
    dxa.row(r) = (dn - xhat * mean_dn_xhat) * rstd[r];
  }
}

void gelu_forward(std::int64_t n, const float* x, float* y) {
  ConstMapArray xa(x, n);
  MapArray(y, n) = 0.5f * xa * (1.0f + (kGeluC * (xa + 0.044715f * xa.cube())).tanh());
}

void gelu_backward(std::int64_t n, const float* x, const float* dy, float* dx) {
  ConstMapArray xa(x, n), dya(dy, n);
  const ArrayX t = (kGeluC * (xa + 0.044715f * xa.cube())).tanh();
  MapArray(dx, n) = dya * (0.5f * (1.0f + t) + 0.5f * xa * (1.0f - t.square()) * kGeluC *
                                                   (1.0f + 3.0f * 0.044715f * xa.square()));
}

void swiglu_forward(int rows, int cols, const float* x, float* y) {
  ConstMapRowArray xa(x, rows, 2 * cols);
  MapRowArray ya(y, rows, cols);
  const auto g = xa.leftCols(cols);
  ya = g / (1.0f + (-g).exp()) * xa.rightCols(cols);
}

void swiglu_backward(int rows, int cols, const float* x, const float* dy, float* dx) {
  ConstMapRowArray xa(x, rows, 2 * cols), dya(dy, rows, cols);
  MapRowArray dxa(dx, rows, 2 * cols);
  const auto g = xa.leftCols(cols);
  const auto u = xa.rightCols(cols);
  const RowArray sig = 1.0f / (1.0f + (-g).exp());
  dxa.leftCols(cols) = dya * u * sig * (1.0f + g * (1.0f - sig));
  dxa.rightCols(cols) = dya * g * sig;
}

void softmax_forward(int rows, int cols, const float* x, float* y) {
  ConstMapRowArray xa(x, rows, cols);
  MapRowArray ya(y, rows, cols);
  for (int r = 0; r < rows; ++r) {
    ya.row(r) = (xa.row(r) - xa.row(r).maxCoeff()).exp();
    ya.row(r) /= ya.row(r).sum();
  }
}

void softmax_backward(int rows, int cols, const float* y, const float* dy, float* dx) {
  ConstMapRowArray ya(y, rows, cols), dya(dy, rows, cols);
  MapRowArray dxa(dx, rows, cols);
  for (int r = 0; r < rows; ++r) {
    const float dot = (ya.row(r) * dya.row(r)).sum();
    dxa.row(r) = ya.row(r) * (dya.row(r) - dot);
  }
}

void add(std::int64_t n, const float* a, const float* b, float* y) {
  MapArray(y, n) = ConstMapArray(a, n) + ConstMapArray(b, n);
}

void rope(int tokens, int seq, int heads, int head_dim, float* x, bool inverse) {
  const int half = head_dim / 2;
  // The rotation of every position, computed once per call.
  std::vector<float> cos_t(std::size_t(seq) * half), sin_t(std::size_t(seq) * half);
  for (int pos = 0; pos < seq; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / head_dim) * (inverse ? -1 : 1);
      cos_t[std::size_t(pos) * half + i] = float(std::cos(angle));
      sin_t[std::size_t(pos) * half + i] = float(std::sin(angle));
    }
  for (int t = 0; t < tokens; ++t) {
    const float* c = cos_t.data() + std::size_t(t % seq) * half;
    const float* sn = sin_t.data() + std::size_t(t % seq) * half;
    for (int h = 0; h < heads; ++h) {
      float* row = x + (std::int64_t(t) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = row[2 * i], b = row[2 * i + 1];
        row[2 * i] = a * c[i] - b * sn[i];
        row[2 * i + 1] = a * sn[i] + b * c[i];
      }
    }
  }
}

void embedding_forward(int tokens, int hidden, const std::int32_t* ids, const float* table,
                       float* y) {
  for (int t = 0; t < tokens; ++t)
    MapArray(y + std::int64_t(t) * hidden, hidden) =
        ConstMapArray(table + std::int64_t(ids[t]) * hidden, hidden);
}

void embedding_backward(int tokens, int hidden, const std::int32_t* ids, const float* dy,
                        float* dtable) {
  for (int t = 0; t < tokens; ++t)
    MapArray(dtable + std::int64_t(ids[t]) * hidden, hidden) +=
        ConstMapArray(dy + std::int64_t(t) * hidden, hidden);
}

float cross_entropy(int rows, int vocab, const float* logits, const std::int32_t* targets,
                    float* dlogits) {
  ConstMapRowArray la(logits, rows, vocab);
  MapRowArray da(dlogits, rows, vocab);
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    const float mx = la.row(r).maxCoeff();
    da.row(r) = (la.row(r) - mx).exp();
    const float sum = da.row(r).sum();
    loss += std::log(double(sum)) + mx - la(r, targets[r]);
    da.row(r) *= 1.0f / (sum * rows);
    da(r, targets[r]) -= 1.0f / rows;
  }
  return float(loss / rows);
}

void adam(std::int64_t n, const AdamSettings& s, float* params, const float* grads, float* m,
          float* v) {
  const float c1 = 1.0f - std::pow(s.beta1, float(s.step));
  const float c2 = 1.0f - std::pow(s.beta2, float(s.step));
  MapArray p(params, n), ma(m, n), va(v, n);
  ConstMapArray g(grads, n);
  ma = s.beta1 * ma + (1 - s.beta1) * g;
  va = s.beta2 * va + (1 - s.beta2) * g.square();
  p -= s.lr * ((ma / c1) / ((va / c2).sqrt() + s.eps) + s.weight_decay * p);
}

}  // namespace fast
}  // namespace hgsim::kernels::cpu
