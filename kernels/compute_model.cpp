#include "kernels/compute_model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <tuple>

#include "core/document.hpp"
#include "models/transformer.hpp"

namespace hgsim::embedded {
extern const std::string_view kernel_costs_yaml;  // kernels/kernel_costs.yaml
}  // namespace hgsim::embedded

namespace hgsim::kernels {

using core::Bytes;
using core::Diagnostics;
using core::Node;
using core::Seconds;

// ---- the constants file ---------------------------------------------------------------------

namespace {

std::optional<KernelCosts::Tile> parse_tile(const Node& n, const std::string& path,
                                            Diagnostics& diags) {
  if (!n.is_sequence() || n.items.size() != 2) {
    diags.error(n.where, path, "expected a tile [rows, columns], found " + n.describe());
    return std::nullopt;
  }
  auto m = core::as_positive_count(n.items[0], core::index_path(path, 0), diags);
  auto c = core::as_positive_count(n.items[1], core::index_path(path, 1), diags);
  if (!m || !c) return std::nullopt;
  return KernelCosts::Tile{double(*m), double(*c)};
}

std::optional<double> parse_fraction(const Node* n, const std::string& path, Diagnostics& diags) {
  if (n == nullptr) return std::nullopt;
  auto v = core::as_number(*n, path, diags);
  if (v && (*v <= 0 || *v > 1)) {
    diags.error(n->where, path,
                "an efficiency is a fraction in (0, 1], found " + core::excerpt(n->text));
    return std::nullopt;
  }
  return v;
}

std::optional<Seconds> parse_seconds(const Node* n, const std::string& path, Diagnostics& diags) {
  if (n == nullptr) return std::nullopt;
  if (!n->is_scalar()) {
    diags.error(n->where, path, "expected a duration such as 2us, found " + n->describe());
    return std::nullopt;
  }
  auto parsed = core::parse_duration(n->text);
  if (!parsed) diags.error(n->where, path, parsed.error);
  return parsed.value;
}

// A number in [low, high] (`what` says what it is in the error).
std::optional<double> parse_ranged(const Node* n, const std::string& path, Diagnostics& diags,
                                   double low, double high, const char* what) {
  if (n == nullptr) return std::nullopt;
  auto v = core::as_number(*n, path, diags);
  if (v && (*v < low || *v > high)) {
    diags.error(n->where, path,
                std::string("expected ") + what + ", found " + core::excerpt(n->text));
    return std::nullopt;
  }
  return v;
}

const std::vector<std::string>& memory_class_names() {
  static const std::vector<std::string> names{"norm", "rope", "swiglu", "gelu", "add"};
  return names;
}

// `memory_ops: {norm: {efficiency, l2_efficiency, row_bandwidth, overhead}, ...}`.
void parse_memory_ops(const Node& n, const std::string& path, KernelCosts& c, Diagnostics& diags) {
  if (!n.is_mapping()) {
    diags.error(n.where, path, "expected a mapping of op classes, found " + n.describe());
    return;
  }
  core::Fields classes(n, path, diags);
  if (!classes.ok()) return;
  for (std::size_t i = 0; i < memory_class_names().size(); ++i) {
    const std::string& name = memory_class_names()[i];
    const Node* entry = classes.optional(name);
    if (entry == nullptr) continue;
    core::Fields f(*entry, classes.path_of(name), diags);
    if (!f.ok()) continue;
    KernelCosts::MemoryOp& op = c.memory_ops[i];
    if (auto v = parse_fraction(f.required("efficiency"), f.path_of("efficiency"), diags))
      op.efficiency = *v;
    // Bytes found in L2 may move faster than HBM's datasheet rate.
    if (auto v = parse_ranged(f.required("l2_efficiency"), f.path_of("l2_efficiency"), diags, 0.01,
                              3, "a share of the HBM bandwidth in [0.01, 3]"))
      op.l2_efficiency = *v;
    if (const Node* b = f.optional("row_bandwidth")) {
      if (!b->is_scalar()) {
        diags.error(b->where, f.path_of("row_bandwidth"),
                    "expected a bandwidth such as 6GB/s, found " + b->describe());
      } else {
        auto parsed = core::parse_bandwidth(b->text);
        if (!parsed) diags.error(b->where, f.path_of("row_bandwidth"), parsed.error);
        if (parsed.value) op.row_bandwidth = *parsed.value;
      }
    }
    if (auto s = parse_seconds(f.required("overhead"), f.path_of("overhead"), diags))
      op.overhead = *s;
    f.reject_unknown();
  }
  classes.reject_unknown();
}

KernelCosts parse_row(const Node& row, const std::string& path, Diagnostics& diags) {
  KernelCosts c;
  core::Fields f(row, path, diags);
  if (!f.ok()) return c;
  static const std::vector<std::string> names{"volta", "turing", "ampere", "ada", "hopper"};
  if (const Node* n = f.required("architecture"))
    if (auto a = core::as_choice(*n, f.path_of("architecture"), diags, names, "architecture"))
      c.architecture =
          static_cast<Architecture>(std::find(names.begin(), names.end(), *a) - names.begin());
  auto fraction = [&](const char* key, double& out) {
    if (auto v = parse_fraction(f.required(key), f.path_of(key), diags)) out = *v;
  };
  fraction("gemm_efficiency", c.gemm_efficiency);
  if (auto v = parse_fraction(f.optional("gemm_efficiency_fp8"), f.path_of("gemm_efficiency_fp8"),
                              diags))
    c.gemm_efficiency_fp8 = *v;
  if (auto v = parse_ranged(f.required("gemm_half_rows"), f.path_of("gemm_half_rows"), diags, 0,
                            1e6, "a number of rows in [0, 1e6]"))
    c.gemm_half_rows = *v;
  if (const Node* n = f.required("gemm_wave_tile"))
    if (auto t = parse_tile(*n, f.path_of("gemm_wave_tile"), diags)) c.gemm_wave_tile = *t;
  if (auto v = parse_ranged(f.required("gemm_wave_loss"), f.path_of("gemm_wave_loss"), diags, 0, 1,
                            "a share in [0, 1]"))
    c.gemm_wave_loss = *v;
  fraction("gemm_memory_efficiency", c.gemm_memory_efficiency);
  if (auto s = parse_seconds(f.required("gemm_overhead"), f.path_of("gemm_overhead"), diags))
    c.gemm_overhead = *s;
  if (auto v = parse_fraction(f.optional("gemm_in_step"), f.path_of("gemm_in_step"), diags))
    c.gemm_in_step = *v;
  if (auto v = parse_ranged(f.optional("overlap_slowdown"), f.path_of("overlap_slowdown"), diags, 1,
                            3, "a slowdown in [1, 3]"))
    c.overlap_slowdown = *v;
  fraction("attention_forward_efficiency", c.attention_forward_efficiency);
  fraction("attention_backward_efficiency", c.attention_backward_efficiency);
  if (const Node* n = f.required("attention_version"))
    if (auto v = core::as_positive_count(*n, f.path_of("attention_version"), diags)) {
      if (*v != 2 && *v != 3)
        diags.error(n->where, f.path_of("attention_version"),
                    "expected 2 or 3, found " + core::excerpt(n->text));
      c.attention_version = static_cast<int>(*v);
    }
  c.attention_fa2_forward_efficiency =
      parse_fraction(f.optional("attention_fa2_forward_efficiency"),
                     f.path_of("attention_fa2_forward_efficiency"), diags);
  c.attention_fa2_backward_efficiency =
      parse_fraction(f.optional("attention_fa2_backward_efficiency"),
                     f.path_of("attention_fa2_backward_efficiency"), diags);
  if (c.attention_version == 3 &&
      !(c.attention_fa2_forward_efficiency && c.attention_fa2_backward_efficiency))
    diags.error(row.where, path,
                "a row whose attention figures are FlashAttention-3's also gives "
                "attention_fa2_forward_efficiency and attention_fa2_backward_efficiency");
  fraction("memory_efficiency", c.memory_efficiency);
  fraction("nvlink_efficiency", c.nvlink_efficiency);
  fraction("pcie_efficiency", c.pcie_efficiency);
  if (const Node* n = f.required("attention_block"))
    if (auto b = core::as_positive_count(*n, f.path_of("attention_block"), diags))
      c.attention_block = *b;
  if (auto s = parse_seconds(f.required("kernel_overhead"), f.path_of("kernel_overhead"), diags))
    c.kernel_overhead = *s;
  if (auto s = parse_seconds(f.required("host_dispatch"), f.path_of("host_dispatch"), diags))
    c.host_dispatch = *s;
  // Classes the row does not give run as `other`: memory_efficiency, kernel_overhead.
  for (KernelCosts::MemoryOp& op : c.memory_ops)
    op = {c.memory_efficiency, c.memory_efficiency, core::BytesPerSecond(0), c.kernel_overhead};
  if (const Node* n = f.optional("l2_resident")) {
    if (!n->is_scalar()) {
      diags.error(n->where, f.path_of("l2_resident"),
                  "expected a size such as 20MB, found " + n->describe());
    } else {
      auto parsed = core::parse_size(n->text);
      if (!parsed) diags.error(n->where, f.path_of("l2_resident"), parsed.error);
      if (parsed.value) c.l2_resident = *parsed.value;
    }
  }
  if (const Node* n = f.optional("memory_ops"))
    parse_memory_ops(*n, f.path_of("memory_ops"), c, diags);
  if (const Node* n = f.required("source"))
    c.source = core::as_string(*n, f.path_of("source"), diags).value_or("");
  f.reject_unknown();
  return c;
}

}  // namespace

std::vector<KernelCosts> parse_kernel_costs(std::string_view yaml_text, const std::string& file,
                                            Diagnostics& diags) {
  std::vector<KernelCosts> rows;
  std::optional<Node> document = core::parse_yaml(yaml_text, file, diags);
  if (!document) return rows;
  core::Fields top(*document, "", diags);
  const Node* list = top.required("architectures");
  top.reject_unknown();
  if (list == nullptr) return rows;
  if (!list->is_sequence()) {
    diags.error(list->where, "architectures", "expected a list, found " + list->describe());
    return rows;
  }
  for (std::size_t i = 0; i < list->items.size(); ++i)
    rows.push_back(parse_row(list->items[i], core::index_path("architectures", i), diags));
  return rows;
}

const std::vector<KernelCosts>& kernel_costs() {
  static const std::vector<KernelCosts> rows = [] {
    Diagnostics diags;
    auto parsed =
        parse_kernel_costs(embedded::kernel_costs_yaml, "kernels/kernel_costs.yaml", diags);
    if (diags.has_errors())
      throw std::logic_error("the embedded kernels/kernel_costs.yaml is invalid:\n" +
                             diags.format());
    return parsed;
  }();
  return rows;
}

const KernelCosts& kernel_costs_for(Architecture architecture) {
  for (const KernelCosts& c : kernel_costs())
    if (c.architecture == architecture) return c;
  throw std::logic_error("kernels/kernel_costs.yaml has no row for " + to_string(architecture));
}

std::map<std::string, Calibration> calibrations_of(const core::Scenario& s) {
  std::map<std::string, Calibration> out;
  for (const core::Cluster& c : s.clusters) {
    if (c.calibration.empty()) continue;
    if (const GpuSpec* g = find_gpu(c.gpu)) out.emplace(g->name, c.calibration);
  }
  return out;
}

// ---- efficiencies -----------------------------------------------------------------------------

double compute_beside_collective(double compute_s, double collective_s, double slowdown) {
  if (compute_s <= 0 || collective_s <= 0 || slowdown <= 1) return compute_s;
  return compute_s + std::min(collective_s, slowdown * compute_s) * (1 - 1 / slowdown);
}

double CollectiveStream::compute(double compute_s) {
  const double seconds = compute_beside_collective(compute_s, backlog_s_, slowdown_);
  pass(seconds);
  return seconds;
}

double gemm_ceiling(const KernelCosts& costs, core::Precision precision) {
  if (precision == core::Precision::fp8 && costs.gemm_efficiency_fp8)
    return *costs.gemm_efficiency_fp8;
  return costs.gemm_efficiency;
}

double flash_attention_work(const OpCall& op) {
  // op.flops: 4 s^2 d per head and sequence forward, twice that backward, no causal discount
  // (layer_ops.cpp). FlashAttention's benchmark halves causal work exactly and counts the
  // backward as 2.5 forwards (it recomputes the scores: five GEMMs to the forward's two).
  const bool backward = op.op == "attention_backward";
  return op.flops / 2 * (backward ? 2.5 / 2 : 1);
}

double wave_efficiency(double blocks, int sms, double loss) {
  if (sms <= 0 || blocks <= 0) return 1;
  const double waves = blocks / sms;
  return waves / ((1 - loss) * waves + loss * std::ceil(waves));
}

double gemm_efficiency(const GpuSpec& gpu, const KernelCosts& costs, double m, double n, double k,
                       core::Precision precision) {
  const double ceiling = gemm_ceiling(costs, precision);
  if (m <= 0 || n <= 0 || k <= 0) return ceiling;
  const double rows = m / (m + costs.gemm_half_rows);
  const double tiles =
      std::ceil(m / costs.gemm_wave_tile.m) * std::ceil(n / costs.gemm_wave_tile.n);
  return ceiling * rows * wave_efficiency(tiles, gpu.sms, costs.gemm_wave_loss);
}

const char* to_string(MemoryClass c) {
  switch (c) {
    case MemoryClass::norm:
      return "norm";
    case MemoryClass::rope:
      return "rope";
    case MemoryClass::swiglu:
      return "swiglu";
    case MemoryClass::gelu:
      return "gelu";
    case MemoryClass::add:
      return "add";
    case MemoryClass::other:
      break;
  }
  return "other";
}

MemoryClass memory_class(const std::string& op) {
  if (op == "layernorm" || op == "rmsnorm" || op == "layernorm_backward" ||
      op == "rmsnorm_backward")
    return MemoryClass::norm;
  if (op == "rope") return MemoryClass::rope;
  if (op == "swiglu" || op == "swiglu_backward") return MemoryClass::swiglu;
  if (op == "gelu" || op == "gelu_backward") return MemoryClass::gelu;
  if (op == "add") return MemoryClass::add;
  return MemoryClass::other;
}

Seconds memory_op_time(const GpuSpec& gpu, const KernelCosts& costs,
                       const KernelCosts::MemoryOp& op, double bytes, double row_bytes) {
  const double bandwidth = gpu.memory_bandwidth.value();
  const double cached = std::min(bytes, costs.l2_resident.value());
  double seconds =
      cached / (op.l2_efficiency * bandwidth) + (bytes - cached) / (op.efficiency * bandwidth);
  if (row_bytes > 0 && op.row_bandwidth.value() > 0)
    seconds = std::max(seconds, row_bytes / op.row_bandwidth.value());
  return Seconds(seconds) + op.overhead;
}

double attention_efficiency(const GpuSpec& gpu, const KernelCosts& costs, double sequences,
                            double heads, double seq_len, bool backward) {
  const double base =
      backward ? costs.attention_backward_efficiency : costs.attention_forward_efficiency;
  const double blocks = sequences * heads * std::ceil(seq_len / costs.attention_block);
  // FlashAttention's blocks are of one length: a partial wave loses its idle SMs whole.
  return base * wave_efficiency(blocks, gpu.sms, 1);
}

// ---- the model ----------------------------------------------------------------------------------

namespace {

core::FlopsPerSecond rate_for(const GpuSpec& gpu, core::Precision precision) {
  const auto rate = math_rate(gpu, precision);
  if (!rate) {
    // resolve_gpus refuses such scenarios before anything is costed.
    throw std::invalid_argument(gpu.name + " cannot run " + core::to_string(precision));
  }
  return rate->rate;
}

bool is_gemm(const std::string& op) {
  return op == "gemm" || op == "gemm_dgrad" || op == "gemm_wgrad";
}

LayerShape shape_of(const LayerWork& work) {
  LayerShape shape;
  shape.model = work.model;
  shape.sequences = work.sequences;
  shape.seq_len = work.seq_len;
  shape.tp = work.tp;
  shape.sequence_parallel = work.sequence_parallel;
  shape.precision = work.precision;
  shape.attention = work.attention;
  return shape;
}

}  // namespace

// ---- the cache -----------------------------------------------------------------------------

namespace {

// Everything a layer's or the logits' time depends on, by value: what varies between the
// planner's lookups first, so that comparing two keys rarely reaches the GPU's name.
using WorkKey = std::tuple<double, int, bool, int, bool, int, int, int, int, int, int, int, int,
                           int, int, int, int, bool, bool, bool, std::string>;

WorkKey work_key(const GpuSpec& gpu, const LayerWork& w, bool logits) {
  const core::ModelConfig& m = *w.model;
  return {w.sequences,
          w.tp,
          w.sequence_parallel,
          static_cast<int>(w.recompute),
          logits,
          w.seq_len,
          static_cast<int>(w.precision),
          static_cast<int>(w.attention),
          w.flash_version,
          m.hidden,
          m.heads,
          m.kv_heads,
          m.ffn_hidden,
          m.vocab,
          m.max_positions,
          static_cast<int>(m.activation),
          static_cast<int>(m.norm),
          m.bias,
          m.dropout,
          m.tied_embeddings,
          gpu.name};
}

}  // namespace

// Read far more often than written (the planner asks for a few hundred shapes a few hundred
// thousand times, from several threads): readers share the lock, and each thread keeps a copy
// of what it read from the cache it used last (`id`: never reused, so a copy cannot outlive
// its model's meaning), so that a thread takes the lock once per shape.
struct KernelModel::Cache {
  std::uint64_t id = next_id();
  std::shared_mutex mutex;
  std::map<WorkKey, PhaseTimes> times;

  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> ids{0};
    return ++ids;
  }
  struct ThreadCopy {
    std::uint64_t id = 0;
    std::map<WorkKey, PhaseTimes> times;
  };
  // This thread's copy of this cache's entries it has read.
  std::map<WorkKey, PhaseTimes>& thread_copy() const {
    thread_local ThreadCopy copy;
    if (copy.id != id) {
      copy.times.clear();
      copy.id = id;
    }
    return copy.times;
  }
  std::optional<PhaseTimes> find(const WorkKey& key) {
    auto& local = thread_copy();
    if (auto it = local.find(key); it != local.end()) return it->second;
    std::shared_lock<std::shared_mutex> lock(mutex);
    const auto it = times.find(key);
    if (it == times.end()) return std::nullopt;
    local.emplace(key, it->second);
    return it->second;
  }
  void add(const WorkKey& key, const PhaseTimes& t) {
    thread_copy().emplace(key, t);
    std::unique_lock<std::shared_mutex> lock(mutex);
    times.emplace(key, t);
  }
};

KernelModel::KernelModel() : cache_(std::make_shared<Cache>()) {}

KernelModel::KernelModel(std::map<std::string, Calibration> calibrations)
    : calibrations_(std::move(calibrations)), cache_(std::make_shared<Cache>()) {}

KernelCosts KernelModel::costs_for(const GpuSpec& gpu, int flash_version) const {
  KernelCosts c = with_flash_version(kernel_costs_for(gpu.architecture), flash_version);
  const auto it = calibrations_.find(gpu.name);
  if (it == calibrations_.end()) return c;
  const Calibration& cal = it->second;
  if (cal.gemm_efficiency) c.gemm_efficiency = *cal.gemm_efficiency;
  if (cal.gemm_efficiency_fp8) c.gemm_efficiency_fp8 = *cal.gemm_efficiency_fp8;
  if (cal.attention_efficiency)
    c.attention_forward_efficiency = c.attention_backward_efficiency = *cal.attention_efficiency;
  // A measured element-wise rate or per-kernel cost replaces every class's (GEMMs' too for
  // the cost): the user's figure is for their stack, whatever the class.
  if (cal.memory_efficiency) {
    c.memory_efficiency = *cal.memory_efficiency;
    for (KernelCosts::MemoryOp& op : c.memory_ops)
      op.efficiency = op.l2_efficiency = *cal.memory_efficiency;
  }
  if (cal.kernel_overhead) {
    c.kernel_overhead = c.gemm_overhead = *cal.kernel_overhead;
    for (KernelCosts::MemoryOp& op : c.memory_ops) op.overhead = *cal.kernel_overhead;
  }
  if (cal.host_dispatch) c.host_dispatch = *cal.host_dispatch;
  return c;
}

KernelCosts with_flash_version(KernelCosts costs, int version) {
  if (version == 0 || version == costs.attention_version) return costs;
  if (version == 2 && costs.attention_fa2_forward_efficiency &&
      costs.attention_fa2_backward_efficiency) {
    costs.attention_forward_efficiency = *costs.attention_fa2_forward_efficiency;
    costs.attention_backward_efficiency = *costs.attention_fa2_backward_efficiency;
    costs.attention_version = 2;
    return costs;
  }
  // resolve_gpus refuses FlashAttention-3 on GPUs that cannot run it.
  throw std::invalid_argument("FlashAttention-" + std::to_string(version) +
                              " has no figures for this GPU architecture");
}

double intra_node_efficiency(const core::Cluster& c) {
  if (c.calibration.nvlink_efficiency) return *c.calibration.nvlink_efficiency;
  // The planner's closed forms ask for the same few GPU names millions of times, in turn:
  // the catalog lookup (a name normalised, then a map) is done once per name and thread.
  thread_local std::vector<std::pair<std::string, double>> seen;
  for (const auto& [name, efficiency] : seen)
    if (name == c.gpu) return efficiency;
  const GpuSpec& gpu = gpu_of(c.gpu);
  const KernelCosts& costs = kernel_costs_for(gpu.architecture);
  const double efficiency =
      gpu.nvlink_bandwidth_total ? costs.nvlink_efficiency : costs.pcie_efficiency;
  if (seen.size() >= 64) seen.clear();  // a bound, whatever names a long process meets
  seen.emplace_back(c.gpu, efficiency);
  return efficiency;
}

namespace {

// The bytes of one row (token) of a memory-bound op whose shape starts with its tokens
// (norms, rope, SwiGLU, cross-entropy; kernels/layer_ops.hpp), 0 for flat ones.
double row_bytes(const OpCall& op) {
  if (op.shape.size() < 2 || op.shape[0] <= 0) return 0;
  return op.bytes / op.shape[0];
}

// One kernel's GPU time under `costs` (the function every other one sums).
double kernel_seconds(const GpuSpec& gpu, const KernelCosts& costs, const OpCall& op,
                      core::Precision precision) {
  if (op.bound == Bound::memory) {
    if (op.kernels == 0) {
      // Written by the kernel before it (fp8 casts): its bytes, no launch of its own.
      return op.bytes / (costs.memory_efficiency * gpu.memory_bandwidth.value());
    }
    const KernelCosts::MemoryOp& constants = costs.memory_op(memory_class(op.op));
    const double one =
        memory_op_time(gpu, costs, constants, op.bytes / op.kernels, row_bytes(op) / op.kernels)
            .value();
    return one * op.kernels;
  }
  const auto& s = op.shape;
  if (is_gemm(op.op) || op.op == "bmm") {
    // fp8 training (Transformer Engine) keeps attention's batched GEMMs in 16-bit.
    const auto gemm_precision =
        op.op == "bmm" && precision == core::Precision::fp8 ? core::Precision::bf16 : precision;
    const double rate = rate_for(gpu, gemm_precision).value();
    const double efficiency =
        op.op == "bmm" ? gemm_efficiency(gpu, costs, s[0] * s[1], s[2], s[3], gemm_precision)
                       : gemm_efficiency(gpu, costs, s[0], s[1], s[2], gemm_precision);
    const double in_step = is_gemm(op.op) ? costs.gemm_in_step : 1.0;
    const double math = op.flops / (rate * efficiency * in_step);
    const double memory = op.bytes / (costs.gemm_memory_efficiency * gpu.memory_bandwidth.value());
    return std::max(math, memory) + op.kernels * costs.gemm_overhead.value();
  }
  // FlashAttention; fp8 training keeps attention in 16-bit.
  const auto attention_precision =
      precision == core::Precision::fp8 ? core::Precision::bf16 : precision;
  const double rate = rate_for(gpu, attention_precision).value();
  const bool backward = op.op == "attention_backward";
  const double math = flash_attention_work(op) /
                      (rate * attention_efficiency(gpu, costs, s[0], s[1], s[3], backward));
  const double memory = op.bytes / (costs.memory_efficiency * gpu.memory_bandwidth.value());
  return std::max(math, memory) + op.kernels * costs.kernel_overhead.value();
}

// The fixed GPU-side cost inside one op's kernel_seconds: what its kernels cost whatever
// their size.
double fixed_overhead(const KernelCosts& costs, const OpCall& op) {
  if (op.bound == Bound::memory) {
    if (op.kernels == 0) return 0;
    return op.kernels * costs.memory_op(memory_class(op.op)).overhead.value();
  }
  if (is_gemm(op.op) || op.op == "bmm") return op.kernels * costs.gemm_overhead.value();
  return op.kernels * costs.kernel_overhead.value();
}

// A phase priced once: its time (the kernels' GPU time, or the CPU's issue time if longer)
// and where that time goes. The one place both come from.
struct PricedPhase {
  double seconds = 0;
  KernelSplit split;
};

PricedPhase price_phase(const GpuSpec& gpu, const KernelCosts& costs,
                        const std::vector<OpCall>& ops, core::Precision precision) {
  double gpu_time = 0, kernels = 0;
  PricedPhase out;
  for (const OpCall& op : ops) {
    const double seconds = kernel_seconds(gpu, costs, op, precision);
    const double overhead = std::min(seconds, fixed_overhead(costs, op));
    gpu_time += seconds;
    kernels += op.kernels;
    out.split += op_split(op, seconds - overhead);
    out.split.overhead_s += overhead;
  }
  out.seconds = std::max(gpu_time, kernels * costs.host_dispatch.value());
  // A host-bound phase: the GPU waits for the CPU to issue its kernels.
  out.split.overhead_s += out.seconds - gpu_time;
  return out;
}

double phase_seconds(const GpuSpec& gpu, const KernelCosts& costs, const std::vector<OpCall>& ops,
                     core::Precision precision) {
  return price_phase(gpu, costs, ops, precision).seconds;
}

}  // namespace

KernelSplit op_split(const OpCall& op, double seconds) {
  KernelSplit out;
  if (op.role == "attention")
    out.attention_s = seconds;
  else if (is_gemm(op.op))
    out.gemm_s = seconds;
  else
    out.memory_s = seconds;
  return out;
}

Seconds KernelModel::op_time(const GpuSpec& gpu, const OpCall& op, core::Precision precision,
                             Timing timing) const {
  KernelCosts costs = costs_for(gpu);
  if (timing == Timing::isolated) costs.gemm_in_step = 1;
  return Seconds(kernel_seconds(gpu, costs, op, precision));
}

Seconds KernelModel::roofline_time(const GpuSpec& gpu, double flops, double bytes,
                                   core::Precision precision) const {
  const KernelCosts costs = costs_for(gpu);
  const double math = flops / (rate_for(gpu, precision).value() * gemm_ceiling(costs, precision));
  const double memory = bytes / (costs.memory_efficiency * gpu.memory_bandwidth.value());
  return Seconds(std::max(math, memory) + costs.gemm_overhead.value());
}

Seconds KernelModel::phase_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                                core::Precision precision) const {
  return Seconds(phase_seconds(gpu, costs_for(gpu), ops, precision));
}

KernelSplit KernelModel::phase_split(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                                     core::Precision precision) const {
  return price_phase(gpu, costs_for(gpu), ops, precision).split;
}

PhaseTimes KernelModel::layer(const GpuSpec& gpu, const LayerWork& work) const {
  const WorkKey key = work_key(gpu, work, false);
  if (auto hit = cache_->find(key)) return *hit;
  const KernelCosts costs = costs_for(gpu, work.flash_version);
  const PhaseOps ops = layer_ops(shape_of(work));
  PhaseTimes t;
  const PricedPhase forward = price_phase(gpu, costs, ops.forward, work.precision);
  const PricedPhase backward = price_phase(gpu, costs, ops.backward, work.precision);
  t.forward = Seconds(forward.seconds);
  t.backward = Seconds(backward.seconds);
  t.forward_split = forward.split;
  t.backward_split = backward.split;
  const PricedPhase recompute =
      price_phase(gpu, costs, recompute_ops(ops.forward, work.recompute), work.precision);
  t.recompute = Seconds(recompute.seconds);
  t.recompute_split = recompute.split;
  t.attention_forward =
      Seconds(phase_seconds(gpu, costs, attention_core_ops(ops.forward, false), work.precision));
  t.attention_backward =
      Seconds(phase_seconds(gpu, costs, attention_core_ops(ops.backward, true), work.precision));
  cache_->add(key, t);
  return t;
}

PhaseTimes KernelModel::logits(const GpuSpec& gpu, const LayerWork& work) const {
  const WorkKey key = work_key(gpu, work, true);
  if (auto hit = cache_->find(key)) return *hit;
  const KernelCosts costs = costs_for(gpu);
  const PhaseOps ops = logits_ops(shape_of(work));
  const core::Precision precision = logits_precision(work.precision);
  const PricedPhase forward = price_phase(gpu, costs, ops.forward, precision);
  const PricedPhase backward = price_phase(gpu, costs, ops.backward, precision);
  PhaseTimes t{Seconds(forward.seconds), Seconds(backward.seconds), Seconds(0)};
  t.forward_split = forward.split;
  t.backward_split = backward.split;
  cache_->add(key, t);
  return t;
}

PhaseCounts layer_counts(const LayerWork& work) {
  const PhaseOps ops = layer_ops(shape_of(work));
  return {counts_of(ops.forward), counts_of(ops.backward),
          counts_of(recompute_ops(ops.forward, work.recompute))};
}

PhaseCounts logits_counts(const LayerWork& work) {
  const PhaseOps ops = logits_ops(shape_of(work));
  return {counts_of(ops.forward), counts_of(ops.backward), {}};
}

namespace {

// The update reads the gradient and the optimizer state and writes the state and the
// weights back: the state twice, the gradient and the weights once each.
Bytes optimizer_traffic(double parameters, core::Precision precision, core::Optimizer optimizer) {
  const auto per_parameter = models::bytes_per_parameter(precision, optimizer);
  return Bytes(parameters *
               (2 * per_parameter.optimizer + per_parameter.gradients + per_parameter.weights));
}

}  // namespace

std::optional<OpCounts> optimizer_counts(double parameters, core::Precision precision,
                                         core::Optimizer optimizer) {
  if (optimizer == core::Optimizer::sgd) return std::nullopt;
  return OpCounts{optimizer_op(parameters).flops,
                  optimizer_traffic(parameters, precision, optimizer).value()};
}

Seconds KernelModel::optimizer_step(const GpuSpec& gpu, double parameters,
                                    core::Precision precision, core::Optimizer optimizer) const {
  const KernelCosts costs = costs_for(gpu);
  return optimizer_traffic(parameters, precision, optimizer) /
             (costs.memory_efficiency * gpu.memory_bandwidth) +
         costs.kernel_overhead;
}

std::string KernelModel::provenance(const GpuSpec& gpu) const {
  return calibrations_.count(gpu.name) ? "calibrated" : "estimated";
}

}  // namespace hgsim::kernels
