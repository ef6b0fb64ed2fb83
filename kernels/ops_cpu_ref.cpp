// The plain-loop references of kernels/ops_cpu.hpp: one obvious loop nest per op,
// accumulating in double. Slow on purpose; only tests call them.
#include <cmath>
#include <vector>

#include "kernels/ops_cpu.hpp"

namespace hgsim::kernels::cpu::ref {

namespace {
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double sum = s.accumulate ? c[std::int64_t(i) * s.n + j] : 0.0;
      for (int l = 0; l < s.k; ++l) {
        const float av = s.trans_a ? a[std::int64_t(l) * s.m + i] : a[std::int64_t(i) * s.k + l];
        const float bv = s.trans_b ? b[std::int64_t(j) * s.k + l] : b[std::int64_t(l) * s.n + j];
        sum += double(av) * bv;
      }
      c[std::int64_t(i) * s.n + j] = float(sum);
    }
}

namespace {
// Offsets of head h of sequence b in q/o, and of its kv head in k/v.
std::int64_t q_offset(const AttentionShape& s, int b, int h) {
  return (std::int64_t(b) * s.heads + h) * s.seq * s.head_dim;
}
std::int64_t kv_offset(const AttentionShape& s, int b, int h) {
  const int group = s.heads / s.kv_heads;
  return (std::int64_t(b) * s.kv_heads + h / group) * s.seq * s.head_dim;
}
std::int64_t p_offset(const AttentionShape& s, int b, int h) {
  return (std::int64_t(b) * s.heads + h) * s.seq * s.seq;
}
}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* p, float* o) {
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  const int d = s.head_dim;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const float* qh = q + q_offset(s, b, h);
      const float* kh = k + kv_offset(s, b, h);
      const float* vh = v + kv_offset(s, b, h);
      float* ph = p + p_offset(s, b, h);
      float* oh = o + q_offset(s, b, h);
      for (int i = 0; i < s.seq; ++i) {
        std::vector<double> score(s.seq, 0.0);
        double max_score = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int x = 0; x < d; ++x) dot += double(qh[i * d + x]) * kh[j * d + x];
          score[j] = dot * scale;
          max_score = std::max(max_score, score[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(score[j] - max_score);
        for (int j = 0; j < s.seq; ++j)
          ph[std::int64_t(i) * s.seq + j] =
              j <= i ? float(std::exp(score[j] - max_score) / sum) : 0;
        for (int x = 0; x < d; ++x) {
          double acc = 0;
          for (int j = 0; j <= i; ++j)
            acc += double(ph[std::int64_t(i) * s.seq + j]) * vh[j * d + x];
          oh[i * d + x] = float(acc);
        }
      }
    }
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* p, const float* d_o, float* dq, float* dk, float* dv) {
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  const int d = s.head_dim;
  std::fill(dk, dk + s.kv_size(), 0.0f);
  std::fill(dv, dv + s.kv_size(), 0.0f);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const float* qh = q + q_offset(s, b, h);
      const float* kh = k + kv_offset(s, b, h);
      const float* vh = v + kv_offset(s, b, h);
      const float* ph = p + p_offset(s, b, h);
      const float* doh = d_o + q_offset(s, b, h);
      float* dqh = dq + q_offset(s, b, h);
      float* dkh = dk + kv_offset(s, b, h);
      float* dvh = dv + kv_offset(s, b, h);
      for (int i = 0; i < s.seq; ++i) {
        // dP[i, j] = dO[i] . V[j]; dS = P * (dP - sum_j P dP).
        std::vector<double> dp(s.seq, 0.0);
        double row = 0;
        for (int j = 0; j <= i; ++j) {
          for (int x = 0; x < d; ++x) dp[j] += double(doh[i * d + x]) * vh[j * d + x];
          row += dp[j] * ph[std::int64_t(i) * s.seq + j];
        }
        for (int x = 0; x < d; ++x) dqh[i * d + x] = 0;
        for (int j = 0; j <= i; ++j) {
          const double pij = ph[std::int64_t(i) * s.seq + j];
          const double ds = pij * (dp[j] - row) * scale;
          for (int x = 0; x < d; ++x) {
            dqh[i * d + x] += float(ds * kh[j * d + x]);
            dkh[j * d + x] += float(ds * qh[i * d + x]);
            dvh[j * d + x] += float(pij * doh[i * d + x]);
          }
        }
      }
    }
}

void layernorm_forward(int rows, int cols, const float* x, const float* gamma, const float* beta,
                       float* y, float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::int64_t(r) * cols;
    double mu = 0, var = 0;
    for (int c = 0; c < cols; ++c) mu += xr[c];
    mu /= cols;
    for (int c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= cols;
    const double rs = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < cols; ++c)
      y[std::int64_t(r) * cols + c] = float((xr[c] - mu) * rs * gamma[c] + beta[c]);
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
}

void layernorm_backward(int rows, int cols, const float* x, const float* gamma, const float* mean,
                        const float* rstd, const float* dy, float* dx, float* dgamma,
                        float* dbeta) {
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::int64_t(r) * cols;
    const float* dyr = dy + std::int64_t(r) * cols;
    double mean_dn = 0, mean_dn_xhat = 0;
    for (int c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean[r]) * double(rstd[r]);
      const double dn = double(dyr[c]) * gamma[c];
      mean_dn += dn;
      mean_dn_xhat += dn * xhat;
      dg[c] += dyr[c] * xhat;
      db[c] += dyr[c];
    }
    mean_dn /= cols;
    mean_dn_xhat /= cols;
    for (int c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean[r]) * double(rstd[r]);
      const double dn = double(dyr[c]) * gamma[c];
      dx[std::int64_t(r) * cols + c] = float((dn - mean_dn - xhat * mean_dn_xhat) * rstd[r]);
    }
  }
  for (int c = 0; c < cols; ++c) {
    dgamma[c] = float(dg[c]);
    dbeta[c] = float(db[c]);
  }
}

void rmsnorm_forward(int rows, int cols, const float* x, const float* gamma, float* y,
                     float* rstd) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::int64_t(r) * cols;
    double ms = 0;
    for (int c = 0; c < cols; ++c) ms += double(xr[c]) * xr[c];
    const double rs = 1.0 / std::sqrt(ms / cols + 1e-5);
    for (int c = 0; c < cols; ++c) y[std::int64_t(r) * cols + c] = float(xr[c] * rs * gamma[c]);
    rstd[r] = float(rs);
  }
}

void rmsnorm_backward(int rows, int cols, const float* x, const float* gamma, const float* rstd,
                      const float* dy, float* dx, float* dgamma) {
  std::vector<double> dg(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::int64_t(r) * cols;
    const float* dyr = dy + std::int64_t(r) * cols;
    double mean_dn_xhat = 0;
    for (int c = 0; c < cols; ++c) {
      const double xhat = xr[c] * double(rstd[r]);
      mean_dn_xhat += double(dyr[c]) * gamma[c] * xhat;
      dg[c] += dyr[c] * xhat;
    }
    mean_dn_xhat /= cols;
    for (int c = 0; c < cols; ++c) {
      const double xhat = xr[c] * double(rstd[r]);
      dx[std::int64_t(r) * cols + c] =
          float((double(dyr[c]) * gamma[c] - xhat * mean_dn_xhat) * rstd[r]);
    }
  }
  for (int c = 0; c < cols; ++c) dgamma[c] = float(dg[c]);
}

void gelu_forward(std::int64_t n, const float* x, float* y) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = float(0.5 * v * (1 + std::tanh(kGeluC * (v + 0.044715 * v * v * v))));
  }
}

void gelu_backward(std::int64_t n, const float* x, const float* dy, float* dx) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kGeluC * (v + 0.044715 * v * v * v);
    const double t = std::tanh(u);
    const double du = kGeluC * (1 + 3 * 0.044715 * v * v);
    dx[i] = float(dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du));
  }
}

void swiglu_forward(int rows, int cols, const float* x, float* y) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double g = x[std::int64_t(r) * 2 * cols + c];
      const double u = x[std::int64_t(r) * 2 * cols + cols + c];
      y[std::int64_t(r) * cols + c] = float(g / (1 + std::exp(-g)) * u);
    }
}

void swiglu_backward(int rows, int cols, const float* x, const float* dy, float* dx) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double g = x[std::int64_t(r) * 2 * cols + c];
      const double u = x[std::int64_t(r) * 2 * cols + cols + c];
      const double sig = 1 / (1 + std::exp(-g));
      const double d = dy[std::int64_t(r) * cols + c];
      dx[std::int64_t(r) * 2 * cols + c] = float(d * u * sig * (1 + g * (1 - sig)));
      dx[std::int64_t(r) * 2 * cols + cols + c] = float(d * g * sig);
    }
}

void softmax_forward(int rows, int cols, const float* x, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + std::int64_t(r) * cols;
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < cols; ++c) mx = std::max(mx, double(xr[c]));
    for (int c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    for (int c = 0; c < cols; ++c)
      y[std::int64_t(r) * cols + c] = float(std::exp(xr[c] - mx) / sum);
  }
}

void softmax_backward(int rows, int cols, const float* y, const float* dy, float* dx) {
  for (int r = 0; r < rows; ++r) {
    const std::int64_t o = std::int64_t(r) * cols;
    double dot = 0;
    for (int c = 0; c < cols; ++c) dot += double(y[o + c]) * dy[o + c];
    for (int c = 0; c < cols; ++c) dx[o + c] = float(y[o + c] * (dy[o + c] - dot));
  }
}

void add(std::int64_t n, const float* a, const float* b, float* y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void rope(int tokens, int seq, int heads, int head_dim, float* x, bool inverse) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < head_dim / 2; ++i) {
        const double freq = std::pow(10000.0, -2.0 * i / head_dim);
        const double angle = (t % seq) * freq * (inverse ? -1 : 1);
        float* pair = x + (std::int64_t(t) * heads + h) * head_dim + 2 * i;
        const double a = pair[0], b = pair[1];
        pair[0] = float(a * std::cos(angle) - b * std::sin(angle));
        pair[1] = float(a * std::sin(angle) + b * std::cos(angle));
      }
}

void embedding_forward(int tokens, int hidden, const std::int32_t* ids, const float* table,
                       float* y) {
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < hidden; ++c)
      y[std::int64_t(t) * hidden + c] = table[std::int64_t(ids[t]) * hidden + c];
}

void embedding_backward(int tokens, int hidden, const std::int32_t* ids, const float* dy,
                        float* dtable) {
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < hidden; ++c)
      dtable[std::int64_t(ids[t]) * hidden + c] += dy[std::int64_t(t) * hidden + c];
}

float cross_entropy(int rows, int vocab, const float* logits, const std::int32_t* targets,
                    float* dlogits) {
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    const float* lr = logits + std::int64_t(r) * vocab;
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < vocab; ++c) mx = std::max(mx, double(lr[c]));
    for (int c = 0; c < vocab; ++c) sum += std::exp(lr[c] - mx);
    loss += std::log(sum) + mx - lr[targets[r]];
    for (int c = 0; c < vocab; ++c) {
      const double prob = std::exp(lr[c] - mx) / sum;
      dlogits[std::int64_t(r) * vocab + c] = float((prob - (c == targets[r] ? 1 : 0)) / rows);
    }
  }
  return float(loss / rows);
}

void adam(std::int64_t n, const AdamSettings& s, float* params, const float* grads, float* m,
          float* v) {
  const double c1 = 1 - std::pow(double(s.beta1), s.step);
  const double c2 = 1 - std::pow(double(s.beta2), s.step);
  for (std::int64_t i = 0; i < n; ++i) {
    const double mi = s.beta1 * double(m[i]) + (1 - double(s.beta1)) * grads[i];
    const double vi = s.beta2 * double(v[i]) + (1 - double(s.beta2)) * double(grads[i]) * grads[i];
    m[i] = float(mi);
    v[i] = float(vi);
    const double update = (mi / c1) / (std::sqrt(vi / c2) + s.eps) + s.weight_decay * params[i];
    params[i] = float(params[i] - s.lr * update);
  }
}

}  // namespace hgsim::kernels::cpu::ref
