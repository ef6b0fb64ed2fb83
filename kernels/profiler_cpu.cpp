// The CPU profiler and the whole-layer check (see profiler.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include <Eigen/Core>

#include "core/text.hpp"
#include "kernels/ops_cpu.hpp"
#include "kernels/profiler.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"

namespace hgsim::kernels {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the calling thread: on a core shared with other processes (the build
// machines are), the time slices the scheduler gives to others are not counted.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = std::size_t(std::floor(pos)), hi = std::size_t(std::ceil(pos));
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> random_ids(std::size_t n, int limit, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(0, limit - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int to_int(double x) {
  return int(std::lround(x));
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

TimingSamples time_function(const std::function<void()>& call, double seconds_per_entry) {
  // Warm-up: at least one call, more while under 20 ms.
  const double warm_start = thread_cpu_seconds();
  int warm_calls = 0;
  do {
    call();
    ++warm_calls;
  } while (thread_cpu_seconds() - warm_start < 0.02 && warm_calls < 1000);
  const double per_call = std::max((thread_cpu_seconds() - warm_start) / warm_calls, 1e-9);
  const int calls_per_sample = std::max(1, int(std::ceil(1e-3 / per_call)));
  const int repeats = std::clamp(int(seconds_per_entry / (per_call * calls_per_sample)), 5, 25);
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const double start = thread_cpu_seconds();
    for (int i = 0; i < calls_per_sample; ++i) call();
    samples.push_back((thread_cpu_seconds() - start) / calls_per_sample);
  }
  return {percentile(samples, 0.5), percentile(samples, 0.1), percentile(samples, 0.9), repeats};
}

core::ModelConfig scale_for_cpu(const core::ModelConfig& m, int hidden) {
  const double c = double(m.hidden) / hidden;
  core::ModelConfig s = m;
  s.name = m.name + "/cpu";
  s.hidden = hidden;
  // Heads: the power of two nearest heads / c, at least 2, dividing hidden.
  int heads = 2;
  while (heads * 2 <= hidden / 16 && std::abs(std::log2(heads * 2) - std::log2(m.heads / c)) <
                                         std::abs(std::log2(heads) - std::log2(m.heads / c)))
    heads *= 2;
  s.heads = heads;
  const int group = std::max(1, m.heads / std::max(m.kv_heads, 1));
  s.kv_heads = std::max(1, heads / group);
  s.ffn_hidden = std::max(16, int(std::lround(m.ffn_hidden / c / 16)) * 16);
  s.vocab = std::max(256, int(std::lround(m.vocab / c / 8 / 64)) * 64);
  s.layers = 1;
  return s;
}

std::vector<OpCall> sweep_ops(const CpuSweep& sweep) {
  std::vector<core::ModelConfig> configs;
  if (sweep.models.empty()) {
    for (const models::ZooEntry& e : models::zoo()) configs.push_back(e.config);
  } else {
    for (const std::string& name : sweep.models) {
      const models::ZooEntry* e = models::find_model(name);
      if (!e)
        throw std::invalid_argument("unknown model '" + core::excerpt(name) +
                                    "' (hgsim models lists them)");
      configs.push_back(e->config);
    }
  }
  std::vector<OpCall> calls;
  std::set<std::pair<std::string, std::vector<double>>> seen;
  auto add = [&](const OpCall& c) {
    if (seen.insert({c.op, c.shape}).second) calls.push_back(c);
  };
  for (const core::ModelConfig& zoo_model : configs) {
    const core::ModelConfig m =
        sweep.hidden > 0 ? scale_for_cpu(zoo_model, sweep.hidden) : zoo_model;
    const int seq_len =
        sweep.seq_len > 0 ? sweep.seq_len : (zoo_model.max_positions > 0 ? 1024 : 2048);
    for (int tp : sweep.tp) {
      if (m.heads % tp || m.kv_heads % tp || m.ffn_hidden % tp) continue;
      for (int mb : sweep.micro_batches) {
        const LayerShape shape{&m, double(mb), seq_len, tp, false, sweep.precision};
        for (const PhaseOps& ops : {layer_ops(shape), logits_ops(shape)}) {
          for (const OpCall& c : ops.forward) add(c);
          for (const OpCall& c : ops.backward) add(c);
        }
        add(optimizer_op(models::layer_parameters(m) / tp));
      }
    }
  }
  return calls;
}

namespace {

using Buffers = std::vector<std::vector<float>>;

// The op on buffers allocated into `buffers` (which must outlive the returned callable).
std::function<void()> op_on_buffers(const OpCall& call, unsigned seed, Buffers* buffers) {
  std::mt19937 rng(seed);
  const auto& s = call.shape;
  auto buffer = [&](double n, float lo = -1, float hi = 1) -> float* {
    buffers->push_back(random_floats(std::size_t(std::llround(n)), rng, lo, hi));
    return buffers->back().data();
  };
  const std::string& op = call.op;
  if (op == "gemm" || op == "gemm_dgrad" || op == "gemm_wgrad") {
    const int m = to_int(s[0]), n = to_int(s[1]), k = to_int(s[2]);
    cpu::GemmShape g{m, n, k};
    if (op == "gemm_dgrad") g = {m, k, n, false, true, false};
    if (op == "gemm_wgrad") g = {k, n, m, true, false, true};
    float* a = buffer(double(g.m) * g.k);
    float* b = buffer(double(g.k) * g.n);
    float* c = buffer(double(g.m) * g.n);
    return [g, a, b, c] { cpu::fast::gemm(g, a, b, c); };
  }
  if (op == "attention" || op == "attention_backward") {
    const cpu::AttentionShape a{to_int(s[0]), to_int(s[1]), to_int(s[2]), to_int(s[3]),
                                to_int(s[4])};
    float* q = buffer(a.q_size());
    float* k = buffer(a.kv_size());
    float* v = buffer(a.kv_size());
    float* p = buffer(a.p_size());
    float* o = buffer(a.q_size());
    cpu::fast::attention_forward(a, q, k, v, p, o);  // valid probabilities for the backward
    if (op == "attention")
      return [a, q, k, v, p, o] { cpu::fast::attention_forward(a, q, k, v, p, o); };
    float* dq = buffer(a.q_size());
    float* dk = buffer(a.kv_size());
    float* dv = buffer(a.kv_size());
    return [a, q, k, v, p, o, dq, dk, dv] {
      cpu::fast::attention_backward(a, q, k, v, p, o, dq, dk, dv);
    };
  }
  if (op == "layernorm" || op == "rmsnorm" || op == "layernorm_backward" ||
      op == "rmsnorm_backward") {
    const int rows = to_int(s[0]), cols = to_int(s[1]);
    float* x = buffer(double(rows) * cols);
    float* g = buffer(cols);
    float* b = buffer(cols);
    float* y = buffer(double(rows) * cols);
    float* mean = buffer(rows);
    float* rstd = buffer(rows, 0.5f, 2.0f);
    float* dx = buffer(double(rows) * cols);
    float* dg = buffer(cols);
    float* db = buffer(cols);
    if (op == "layernorm")
      return [=] { cpu::fast::layernorm_forward(rows, cols, x, g, b, y, mean, rstd); };
    if (op == "rmsnorm") return [=] { cpu::fast::rmsnorm_forward(rows, cols, x, g, y, rstd); };
    if (op == "layernorm_backward")
      return [=] { cpu::fast::layernorm_backward(rows, cols, x, g, mean, rstd, y, dx, dg, db); };
    return [=] { cpu::fast::rmsnorm_backward(rows, cols, x, g, rstd, y, dx, dg); };
  }
  if (op == "gelu" || op == "gelu_backward" || op == "add") {
    const std::int64_t n = std::llround(s[0]);
    float* x = buffer(double(n));
    float* y = buffer(double(n));
    float* z = buffer(double(n));
    if (op == "gelu") return [=] { cpu::fast::gelu_forward(n, x, y); };
    if (op == "add") return [=] { cpu::fast::add(n, x, y, z); };
    return [=] { cpu::fast::gelu_backward(n, x, y, z); };
  }
  if (op == "swiglu" || op == "swiglu_backward") {
    const int rows = to_int(s[0]), cols = to_int(s[1]);
    float* x = buffer(2.0 * rows * cols);
    float* y = buffer(double(rows) * cols);
    float* dx = buffer(2.0 * rows * cols);
    if (op == "swiglu") return [=] { cpu::fast::swiglu_forward(rows, cols, x, y); };
    return [=] { cpu::fast::swiglu_backward(rows, cols, x, y, dx); };
  }
  if (op == "rope") {
    const int tokens = to_int(s[0]), heads = to_int(s[1]), dim = to_int(s[2]), seq = to_int(s[3]);
    float* x = buffer(double(tokens) * heads * dim);
    return [=] { cpu::fast::rope(tokens, seq, heads, dim, x, false); };
  }
  if (op == "cross_entropy") {
    const int rows = to_int(s[0]), vocab = to_int(s[1]);
    float* logits = buffer(double(rows) * vocab);
    float* dlogits = buffer(double(rows) * vocab);
    auto targets = std::make_shared<std::vector<std::int32_t>>(random_ids(rows, vocab, rng));
    return [=] { cpu::fast::cross_entropy(rows, vocab, logits, targets->data(), dlogits); };
  }
  if (op == "adam") {
    const std::int64_t n = std::llround(s[0]);
    float* p = buffer(double(n));
    float* g = buffer(double(n));
    float* m = buffer(double(n));
    float* v = buffer(double(n), 0, 1);
    return [=] { cpu::fast::adam(n, cpu::AdamSettings{}, p, g, m, v); };
  }
  throw std::invalid_argument("no CPU runner for op '" + core::excerpt(op) + "'");
}

}  // namespace

std::function<void()> cpu_op_runner(const OpCall& call, unsigned seed) {
  auto buffers = std::make_shared<Buffers>();
  std::function<void()> run = op_on_buffers(call, seed, buffers.get());
  return [buffers, run] { run(); };
}

double measure_cpu_matrix_peak() {
  // Independent mul+add chains on the vector registers the build uses (GCC vector
  // extension, 4 floats): the most one core can do with the instructions Eigen emits.
  typedef float v4 __attribute__((vector_size(16)));
  constexpr int kChains = 12;
  const int iterations = 2'000'000;
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    v4 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = v4{1.0f + c, 1.0f, 1.0f, 1.0f};
    volatile float scale_in = 0.999999f, bias_in = 1e-7f;
    const v4 scale = v4{} + float(scale_in), bias = v4{} + float(bias_in);
    const double start = thread_cpu_seconds();
    for (int i = 0; i < iterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * scale + bias;
    const double t = thread_cpu_seconds() - start;
    float sink = 0;
    for (int c = 0; c < kChains; ++c) sink += acc[c][0] + acc[c][3];
    volatile float keep = sink;
    (void)keep;
    best = std::max(best, 2.0 * 4 * kChains * double(iterations) / t);
  }
  return best;
}

double measure_cpu_copy_bandwidth() {
  const std::size_t bytes = 64u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 0;
  for (int trial = 0; trial < 7; ++trial) {
    const double start = thread_cpu_seconds();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::max(best, 2.0 * double(bytes) / (thread_cpu_seconds() - start));
    src[trial] = dst[trial + 1];
  }
  return best;
}

Profile profile_cpu(const CpuSweep& sweep, const std::map<std::string, std::string>& conditions) {
  cpu::use_one_thread();
  const auto start = Clock::now();
  auto say = [&](const std::string& line) {
    if (sweep.progress) sweep.progress(line);
  };
  Profile p;
  p.device.kind = "cpu";
  p.device.name = cpu_device_name();
  p.device.driver = "-";
  p.device.toolkit = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                     std::to_string(EIGEN_MAJOR_VERSION) + "." +
                     std::to_string(EIGEN_MINOR_VERSION) + ", " + __VERSION__;
  p.device.conditions = conditions;
  p.device.conditions["threads"] = "1";
  p.device.conditions["timer"] = "thread CPU time (CLOCK_THREAD_CPUTIME_ID)";
  p.device.conditions["isa"] = "SSE2 (Release flags, no -march)";
  p.attention = "batched GEMM + softmax, scores materialised (Eigen), causal";
  p.created = utc_now();
  const std::vector<OpCall> calls = sweep_ops(sweep);  // unknown models fail here, first
  say("measuring the matrix peak and the copy bandwidth");
  p.device.peak_flops_per_s["fp32"] = measure_cpu_matrix_peak();
  p.device.copy_bandwidth_bytes_per_s = measure_cpu_copy_bandwidth();
  say(std::to_string(calls.size()) + " op shapes to time");
  unsigned seed = 1;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const OpCall& c = calls[i];
    const TimingSamples t = time_function(cpu_op_runner(c, seed++), sweep.seconds_per_entry);
    p.entries.push_back(
        {c.op, "fp32", c.shape, t.median_s, t.p10_s, t.p90_s, c.flops, c.bytes, t.repeats});
    if ((i + 1) % 50 == 0)
      say(std::to_string(i + 1) + "/" + std::to_string(calls.size()) + " after " +
          std::to_string(int(seconds_since(start))) + " s");
  }
  p.device.conditions["sweep_seconds"] = std::to_string(int(std::lround(seconds_since(start))));
  return p;
}

// ---- whole layers ---------------------------------------------------------------------------

namespace {

// One layer's weights and activations on the CPU, run with the fast ops in the order of
// layer_ops (so the two lists can be compared op by op).
class CpuLayer {
 public:
  CpuLayer(const core::ModelConfig& m, int sequences, int seq, int tp, unsigned seed) : rng_(seed) {
    b_ = sequences;
    s_ = seq;
    t_ = sequences * seq;
    h_ = m.hidden;
    a_ = m.heads / tp;
    k_ = std::max(m.kv_heads / tp, 1);
    d_ = m.hidden / m.heads;
    f_ = m.ffn_hidden / tp;
    swiglu_ = m.activation == core::Activation::swiglu;
    rms_ = m.norm == core::Norm::rmsnorm;
    rotary_ = m.max_positions == 0;
    qkv_ = (a_ + 2 * k_) * d_;
    up_ = swiglu_ ? 2 * f_ : f_;
    att_ = {b_, a_, k_, s_, d_};
    for (auto* v : {&x_, &ln1_, &res1_, &ln2_, &res2_, &proj_, &down_, &dres2_, &dres1_, &dln2_,
                    &dln1_, &dx_, &dproj_, &tmp_})
      *v = rand(std::size_t(t_) * h_);
    for (auto* v : {&g1_, &b1_, &g2_, &b2_, &dg_, &db_}) *v = rand(h_);
    for (auto* v : {&mean1_, &mean2_, &rstd1_, &rstd2_}) *v = rand(t_);
    wqkv_ = rand(std::size_t(h_) * qkv_);
    dwqkv_ = rand(wqkv_.size());
    qkv_out_ = rand(std::size_t(t_) * qkv_);
    dqkv_ = rand(qkv_out_.size());
    p_ = rand(att_.p_size());
    att_out_ = rand(att_.q_size());
    datt_ = rand(att_.q_size());
    wo_ = rand(std::size_t(a_) * d_ * h_);
    dwo_ = rand(wo_.size());
    wup_ = rand(std::size_t(h_) * up_);
    dwup_ = rand(wup_.size());
    up_out_ = rand(std::size_t(t_) * up_);
    dup_ = rand(up_out_.size());
    act_ = rand(std::size_t(t_) * f_);
    dact_ = rand(act_.size());
    wdown_ = rand(std::size_t(f_) * h_);
    dwdown_ = rand(wdown_.size());
  }

  void forward() {
    norm_forward(x_, g1_, b1_, ln1_, mean1_, rstd1_);
    gemm({t_, qkv_, h_}, ln1_.data(), wqkv_.data(), qkv_out_.data());
    if (rotary_) cpu::fast::rope(t_, s_, a_ + k_, d_, qkv_out_.data(), false);
    cpu::fast::attention_forward(att_, q(qkv_out_), k(qkv_out_), v(qkv_out_), p_.data(),
                                 att_out_.data());
    gemm({t_, h_, a_ * d_}, att_out_.data(), wo_.data(), proj_.data());
    cpu::fast::add(std::int64_t(t_) * h_, x_.data(), proj_.data(), res1_.data());
    norm_forward(res1_, g2_, b2_, ln2_, mean2_, rstd2_);
    gemm({t_, up_, h_}, ln2_.data(), wup_.data(), up_out_.data());
    if (swiglu_)
      cpu::fast::swiglu_forward(t_, f_, up_out_.data(), act_.data());
    else
      cpu::fast::gelu_forward(std::int64_t(t_) * f_, up_out_.data(), act_.data());
    gemm({t_, h_, f_}, act_.data(), wdown_.data(), down_.data());
    cpu::fast::add(std::int64_t(t_) * h_, res1_.data(), down_.data(), res2_.data());
  }

  void backward() {
    // d(down) = d(res2); the residual branch carries d(res2) to res1.
    linear_backward({t_, h_, f_}, act_.data(), wdown_.data(), dres2_.data(), dact_.data(),
                    dwdown_.data());
    if (swiglu_)
      cpu::fast::swiglu_backward(t_, f_, up_out_.data(), dact_.data(), dup_.data());
    else
      cpu::fast::gelu_backward(std::int64_t(t_) * f_, up_out_.data(), dact_.data(), dup_.data());
    linear_backward({t_, up_, h_}, ln2_.data(), wup_.data(), dup_.data(), dln2_.data(),
                    dwup_.data());
    norm_backward(res1_, g2_, mean2_, rstd2_, dln2_, tmp_);
    cpu::fast::add(std::int64_t(t_) * h_, dres2_.data(), tmp_.data(), dres1_.data());
    linear_backward({t_, h_, a_ * d_}, att_out_.data(), wo_.data(), dres1_.data(), datt_.data(),
                    dwo_.data());
    cpu::fast::attention_backward(att_, q(qkv_out_), k(qkv_out_), v(qkv_out_), p_.data(),
                                  datt_.data(), q(dqkv_), k(dqkv_), v(dqkv_));
    if (rotary_) cpu::fast::rope(t_, s_, a_ + k_, d_, dqkv_.data(), true);
    linear_backward({t_, qkv_, h_}, ln1_.data(), wqkv_.data(), dqkv_.data(), dln1_.data(),
                    dwqkv_.data());
    norm_backward(x_, g1_, mean1_, rstd1_, dln1_, tmp_);
    cpu::fast::add(std::int64_t(t_) * h_, dres1_.data(), tmp_.data(), dx_.data());
  }

 private:
  std::vector<float> rand(std::size_t n) { return random_floats(n, rng_); }
  float* q(std::vector<float>& buf) { return buf.data(); }
  float* k(std::vector<float>& buf) { return buf.data() + std::size_t(t_) * a_ * d_; }
  float* v(std::vector<float>& buf) { return buf.data() + std::size_t(t_) * (a_ + k_) * d_; }

  static void gemm(cpu::GemmShape g, const float* a, const float* b, float* c) {
    cpu::fast::gemm(g, a, b, c);
  }
  // Y[m,n] = X[m,k] W[k,n]: dX = dY W^T, dW += X^T dY.
  static void linear_backward(cpu::GemmShape fwd, const float* x, const float* w, const float* dy,
                              float* dx, float* dw) {
    cpu::fast::gemm({fwd.m, fwd.k, fwd.n, false, true, false}, dy, w, dx);
    cpu::fast::gemm({fwd.k, fwd.n, fwd.m, true, false, true}, x, dy, dw);
  }
  void norm_forward(const std::vector<float>& x, const std::vector<float>& g,
                    const std::vector<float>& b, std::vector<float>& y, std::vector<float>& mean,
                    std::vector<float>& rstd) {
    if (rms_)
      cpu::fast::rmsnorm_forward(t_, h_, x.data(), g.data(), y.data(), rstd.data());
    else
      cpu::fast::layernorm_forward(t_, h_, x.data(), g.data(), b.data(), y.data(), mean.data(),
                                   rstd.data());
  }
  void norm_backward(const std::vector<float>& x, const std::vector<float>& g,
                     const std::vector<float>& mean, const std::vector<float>& rstd,
                     const std::vector<float>& dy, std::vector<float>& dx) {
    if (rms_)
      cpu::fast::rmsnorm_backward(t_, h_, x.data(), g.data(), rstd.data(), dy.data(), dx.data(),
                                  dg_.data());
    else
      cpu::fast::layernorm_backward(t_, h_, x.data(), g.data(), mean.data(), rstd.data(), dy.data(),
                                    dx.data(), dg_.data(), db_.data());
  }

  std::mt19937 rng_;
  int b_, s_, t_, h_, a_, k_, d_, f_, qkv_, up_;
  bool swiglu_, rms_, rotary_;
  cpu::AttentionShape att_;
  std::vector<float> x_, ln1_, res1_, ln2_, res2_, proj_, down_, dres2_, dres1_, dln2_, dln1_, dx_,
      dproj_, tmp_, g1_, b1_, g2_, b2_, dg_, db_, mean1_, mean2_, rstd1_, rstd2_, wqkv_, dwqkv_,
      qkv_out_, dqkv_, p_, att_out_, datt_, wo_, dwo_, wup_, dwup_, up_out_, dup_, act_, dact_,
      wdown_, dwdown_;
};

}  // namespace

std::vector<LayerCheck> check_layers_cpu(const ComputeModel& model, const GpuSpec& device,
                                         const std::vector<core::ModelConfig>& models,
                                         const std::vector<int>& micro_batches,
                                         const std::vector<int>& tp, int seq_len,
                                         double seconds_per_entry,
                                         const std::function<void(const std::string&)>& progress) {
  cpu::use_one_thread();
  std::vector<LayerCheck> out;
  unsigned seed = 1000;
  for (const core::ModelConfig& m : models)
    for (int t : tp) {
      if (m.heads % t || m.kv_heads % t || m.ffn_hidden % t) continue;
      for (int mb : micro_batches) {
        if (progress)
          progress(m.name + " micro-batch " + std::to_string(mb) + " tp " + std::to_string(t));
        CpuLayer layer(m, mb, seq_len, t, seed++);
        LayerWork work;
        work.model = &m;
        work.sequences = mb;
        work.seq_len = seq_len;
        work.tp = t;
        work.precision = core::Precision::fp32;
        const PhaseTimes predicted = model.layer(device, work);
        layer.forward();  // buffers hold a forward's results before the first backward
        const TimingSamples fwd = time_function([&] { layer.forward(); }, seconds_per_entry * 3);
        const TimingSamples bwd = time_function([&] { layer.backward(); }, seconds_per_entry * 3);
        out.push_back({m.name, mb, t, "forward", predicted.forward.value(), fwd.median_s});
        out.push_back({m.name, mb, t, "backward", predicted.backward.value(), bwd.median_s});
      }
    }
  return out;
}

std::string cpu_device_name() {
  return cpu_model_name() + " (1 core)";
}

}  // namespace hgsim::kernels
