// Reading a scenario: structure, types and units. The arithmetic of an explicit plan is
// in plan.cpp, sweeps in sweep.cpp.
#include "core/scenario.hpp"

#include "core/enum_names.hpp"
#include "core/files.hpp"
#include "core/limits.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>
#include <sstream>
#include <stdexcept>

namespace hgsim::core {

// ---- enumerations ------------------------------------------------------------------------

using detail::as_enum;
using detail::name_of;

std::string to_string(Precision v) {
  return name_of(v);
}
std::string to_string(Optimizer v) {
  return name_of(v);
}
std::string to_string(Recompute v) {
  return name_of(v);
}
std::string to_string(Attention v) {
  return name_of(v);
}
std::string to_string(GradReduce v) {
  return name_of(v);
}
std::string to_string(Schedule v) {
  return name_of(v);
}
std::string to_string(GradSyncAlgorithm v) {
  return name_of(v);
}
std::string to_string(Activation v) {
  return name_of(v);
}
std::string to_string(Norm v) {
  return name_of(v);
}
std::string to_string(NetworkModel v) {
  return name_of(v);
}
std::string to_string(Fidelity v) {
  return name_of(v);
}
std::string to_string(PipelineMessages v) {
  return name_of(v);
}
std::string to_string(CollectiveGranularity v) {
  return name_of(v);
}

int element_bytes(Precision p) {
  switch (p) {
    case Precision::fp32:
    case Precision::tf32:
      return 4;
    case Precision::fp16:
    case Precision::bf16:
    case Precision::fp8:  // fp8 GEMMs, 16-bit tensors between layers (Transformer Engine)
      return 2;
  }
  return 4;
}

// ---- small value types -------------------------------------------------------------------

bool CodecConfig::operator==(const CodecConfig& o) const {
  if (codec != o.codec || params.size() != o.params.size()) return false;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].first != o.params[i].first ||
        to_json(params[i].second) != to_json(o.params[i].second))
      return false;
  return true;
}

bool SweepAxis::operator==(const SweepAxis& o) const {
  if (path != o.path || zip_group != o.zip_group || values.size() != o.values.size()) return false;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (to_json(values[i]) != to_json(o.values[i])) return false;
  return true;
}

int Plan::global_batch() const {
  int total = 0;
  for (const Pipeline& p : pipelines) total += p.replicas * p.micro_batches * micro_batch;
  return total;
}

SourceLocation Scenario::where(const std::string& key_path) const {
  // The deepest recorded prefix: a default value that was never written is reported
  // where its enclosing mapping is.
  std::string path = key_path;
  while (true) {
    auto it = locations.find(path);
    if (it != locations.end()) return it->second;
    auto cut = path.find_last_of(".[");
    if (cut == std::string::npos) break;
    path.resize(cut);
  }
  auto root = locations.find("");
  return root != locations.end() ? root->second : SourceLocation{source_file, 0, 0};
}

const Cluster* Scenario::find_cluster(const std::string& cluster_name) const {
  const auto c = cluster_index(cluster_name);
  return c ? &clusters[*c] : nullptr;
}

std::optional<int> Scenario::cluster_index(const std::string& cluster_name) const {
  for (std::size_t c = 0; c < clusters.size(); ++c)
    if (clusters[c].name == cluster_name) return static_cast<int>(c);
  return std::nullopt;
}

const Cluster& Scenario::cluster(const std::string& cluster_name) const {
  if (const Cluster* c = find_cluster(cluster_name)) return *c;
  throw std::invalid_argument("scenario '" + name + "' has no cluster named '" + cluster_name +
                              "' (a checked plan names only its clusters: this is a bug)");
}

int Scenario::total_gpus() const {
  int total = 0;
  for (const Cluster& c : clusters) total += c.gpu_count();
  return total;
}

bool Scenario::operator==(const Scenario& o) const {
  return name == o.name && description == o.description && model == o.model &&
         training == o.training && clusters == o.clusters && wan == o.wan &&
         strategy == o.strategy && compression == o.compression && simulation == o.simulation &&
         sweep == o.sweep && planner == o.planner && workload_chakra == o.workload_chakra;
}

// ---- the reader --------------------------------------------------------------------------

namespace {

template <class Q>
std::optional<Q> as_quantity(const Node& n, const std::string& path, Diagnostics& d,
                             Parsed<Q> (*parse)(std::string_view), std::string_view what) {
  if (!n.is_scalar()) {
    d.error(n.where, path, "expected " + std::string(what) + ", found " + n.describe());
    return std::nullopt;
  }
  Parsed<Q> p = parse(n.text);
  if (!p) {
    d.error(n.where, path, p.error);
    return std::nullopt;
  }
  return p.value;
}

class ScenarioReader {
 public:
  ScenarioReader(Scenario& s, Diagnostics& d) : s_(s), d_(d) {}

  void read(const Node& root);

 private:
  void read_model(const Node& n);
  void read_training(const Node& n);
  FailureModel read_failures(const Node& n);
  void read_storage_dtypes(Fields& f, Training& t);
  void read_clusters(const Node& n);
  void read_wan(const Node& n);
  void warn_unjoined_clusters(const Node& at, const std::string& key_path);
  void read_wan_link(const Node& n, const std::string& path);
  void read_trace(WanLink& link, const Node& n, const std::string& path);
  void read_compression(const Node& n);
  void read_simulation(const Node& n);
  void read_workload(const Node& n);
  void read_sweep(const Node& n);
  std::optional<LinkSpec> read_link(const Node& n, const std::string& path);
  ComputeCalibration read_calibration(const Node& n, const std::string& path);

  // Sets `target` from `fields[key]` when present and valid.
  template <class T, class Convert>
  void set(Fields& f, std::string_view key, T& target, Convert convert) {
    if (const Node* n = f.optional(key))
      if (auto v = convert(*n, f.path_of(key))) target = *v;
  }
  template <class T, class Convert>
  void set_required(Fields& f, std::string_view key, T& target, Convert convert) {
    if (const Node* n = f.required(key))
      if (auto v = convert(*n, f.path_of(key))) target = *v;
  }

  auto count() {
    return [this](const Node& n, const std::string& p) { return as_positive_count(n, p, d_); };
  }
  // A count with a ceiling: what the sizes derived from it (4 x hidden, layer x micro-batch
  // graphs) need to stay computable; `what` says why.
  auto count_up_to(int max, std::string what) {
    return [this, max, what](const Node& n, const std::string& p) -> std::optional<int> {
      auto c = as_positive_count(n, p, d_);
      if (c && *c > max) {
        d_.error(n.where, p, "at most " + std::to_string(max) + ", found " + excerpt(n.text), what);
        return std::nullopt;
      }
      return c;
    };
  }
  auto text() {
    return [this](const Node& n, const std::string& p) { return as_string(n, p, d_); };
  }
  auto name() {
    return [this](const Node& n, const std::string& p) { return as_name(n, p, d_); };
  }
  auto cluster_name() {
    return [this](const Node& n, const std::string& p) { return as_cluster_name(n, p, d_); };
  }
  auto boolean() {
    return [this](const Node& n, const std::string& p) { return as_bool(n, p, d_); };
  }
  template <class E>
  auto choice(std::string_view what) {
    return [this, what](const Node& n, const std::string& p) { return as_enum<E>(n, p, d_, what); };
  }
  auto size() {
    return [this](const Node& n, const std::string& p) {
      return as_quantity(n, p, d_, parse_size, "a size such as 25MB");
    };
  }
  // A TCP window: a size of at least 1 KiB (0 would mean no cap at all to the simulator,
  // and a smaller window than one segment does not exist).
  auto tcp_window() {
    return [this](const Node& n, const std::string& p) -> std::optional<Bytes> {
      auto b = as_quantity(n, p, d_, parse_size, "a size such as 4MiB");
      if (b && b->value() < 1024) {
        d_.error(n.where, p, "a TCP window is at least 1KiB, found " + excerpt(n.text),
                 "the receive window of the WAN's TCP connections, e.g. 4MiB");
        return std::nullopt;
      }
      return b;
    };
  }
  auto bandwidth() {
    return [this](const Node& n, const std::string& p) {
      return as_quantity(n, p, d_, parse_bandwidth, "a bandwidth such as 10Gbps");
    };
  }
  auto duration() {
    return [this](const Node& n, const std::string& p) {
      return as_quantity(n, p, d_, parse_duration, "a duration such as 15ms");
    };
  }
  auto long_duration() {
    return [this](const Node& n, const std::string& p) {
      return as_quantity(n, p, d_, parse_long_duration, "a duration such as 50000h");
    };
  }

  Scenario& s_;
  Diagnostics& d_;
};

void ScenarioReader::read(const Node& root) {
  Fields f(root, "", d_);
  if (!f.ok()) return;
  set_required(f, "name", s_.name, name());
  set(f, "description", s_.description, text());
  if (const Node* n = f.required("model")) read_model(*n);
  if (const Node* n = f.required("training")) read_training(*n);
  if (const Node* n = f.required("clusters")) read_clusters(*n);
  if (const Node* n = f.optional("wan")) read_wan(*n);
  if (const Node* n = f.optional("clusters")) {
    const Node* wan = f.optional("wan");
    warn_unjoined_clusters(wan ? *wan : *n, wan ? "wan" : "clusters");
  }
  if (const Node* n = f.required("strategy")) {
    if (n->is_scalar() && n->text == "auto") {
      s_.strategy.automatic = true;
    } else if (n->is_mapping()) {
      s_.strategy.automatic = false;
      if (auto plan = parse_plan(*n, "strategy", d_)) s_.strategy.plan = *plan;
    } else {
      d_.error(n->where, "strategy",
               "expected 'auto' or a plan (a mapping with schedule, pipelines, ...), found " +
                   n->describe());
    }
  }
  if (const Node* n = f.optional("compression")) read_compression(*n);
  if (const Node* n = f.optional("simulation")) read_simulation(*n);
  if (const Node* n = f.optional("sweep")) read_sweep(*n);
  if (const Node* n = f.optional("planner")) s_.planner = parse_planner_settings(*n, "planner", d_);
  if (const Node* n = f.optional("workload")) read_workload(*n);
  f.reject_unknown();
}

// `workload: {chakra: PREFIX}`: a Chakra trace's file prefix, relative to the scenario. Its
// files are read when it runs (sim/chakra.hpp), whose errors name them and this key.
void ScenarioReader::read_workload(const Node& n) {
  Fields f(n, "workload", d_);
  if (!f.ok()) return;
  if (const Node* c = f.required("chakra")) {
    const std::string path = f.path_of("chakra");
    if (auto written = as_string(*c, path, d_)) {
      if (written->empty()) {
        d_.error(c->where, path, "a Chakra trace prefix is a path, found an empty string",
                 "PREFIX of the files PREFIX.0.et, PREFIX.1.et, ...; relative to the scenario");
      } else {
        std::filesystem::path prefix(*written);
        if (prefix.is_relative() && !s_.source_file.empty())
          prefix = std::filesystem::path(s_.source_file).parent_path() / prefix;
        s_.workload_chakra = prefix.string();
      }
    }
  }
  f.reject_unknown();
}

void ScenarioReader::read_model(const Node& n) {
  if (n.is_scalar()) {
    if (auto zoo_name = as_name(n, "model", d_)) s_.model.zoo_name = *zoo_name;
    return;
  }
  if (!n.is_mapping()) {
    d_.error(n.where, "model",
             "expected a zoo model name (e.g. llama2-7b) or a mapping describing a model, found " +
                 n.describe());
    return;
  }
  ModelConfig m;
  Fields f(n, "model", d_);
  set_required(f, "name", m.name, name());
  // Ceilings 100x above the largest published models (hidden 25 600, 128 layers, vocab
  // 256 000), so that derived sizes (ffn_hidden = 4 x hidden) fit in an int.
  constexpr int kMaxWidth = 1 << 24;
  const std::string wider = "100x wider than any published model";
  set_required(f, "layers", m.layers, count_up_to(100'000, "the simulator builds every layer"));
  set_required(f, "hidden", m.hidden, count_up_to(kMaxWidth, wider));
  set_required(f, "heads", m.heads, count_up_to(kMaxWidth, wider));
  set_required(f, "vocab", m.vocab, count_up_to(kMaxWidth, wider));
  m.kv_heads = m.heads;
  set(f, "kv_heads", m.kv_heads, count_up_to(kMaxWidth, wider));
  m.ffn_hidden = 4 * m.hidden;
  set(f, "ffn_hidden", m.ffn_hidden, count_up_to(4 * kMaxWidth, wider));
  set(f, "activation", m.activation, choice<Activation>("activation"));
  set(f, "norm", m.norm, choice<Norm>("norm"));
  set(f, "tied_embeddings", m.tied_embeddings, boolean());
  set(f, "bias", m.bias, boolean());
  set(f, "dropout", m.dropout, boolean());
  std::string positions = "learned";
  if (const Node* p = f.optional("positions"))
    if (auto v = as_choice(*p, "model.positions", d_, {"learned", "rotary"}, "position encoding"))
      positions = *v;
  m.max_positions = -1;  // learned, length from training.seq_len unless given
  set(f, "max_positions", m.max_positions, count());
  if (positions == "rotary") {
    if (f.has("max_positions"))
      d_.error(f.optional("max_positions")->where, "model.max_positions",
               "rotary positions have no position table",
               "remove max_positions or use positions: learned");
    m.max_positions = 0;
  }
  f.reject_unknown();
  s_.model.inline_config = m;
}

void ScenarioReader::read_training(const Node& n) {
  Training& t = s_.training;
  Fields f(n, "training", d_);
  set_required(f, "global_batch", t.global_batch, count());
  set_required(f, "seq_len", t.seq_len, count());
  set_required(f, "precision", t.precision, choice<Precision>("precision"));
  set(f, "optimizer", t.optimizer, choice<Optimizer>("optimizer"));
  set(f, "recompute", t.recompute, choice<Recompute>("recompute mode"));
  set(f, "attention", t.attention, choice<Attention>("attention kernel"));
  if (const Node* v = f.optional("flash_version")) {
    const auto version = as_positive_count(*v, f.path_of("flash_version"), d_);
    if (version && *version != 2 && *version != 3)
      d_.error(v->where, f.path_of("flash_version"),
               "FlashAttention's version is 2 or 3, found " + excerpt(v->text),
               "2: FlashAttention-2 (any GPU it runs on); 3: FlashAttention-3 (Hopper); leave it "
               "out for the GPU's own");
    else if (version && t.attention != Attention::flash)
      d_.error(v->where, f.path_of("flash_version"),
               "flash_version applies to training.attention: flash, but it is standard",
               "remove flash_version, or set training.attention: flash");
    else if (version)
      t.flash_version = static_cast<int>(*version);
  }
  read_storage_dtypes(f, t);
  if (const Node* v = f.optional("tokens"))
    t.tokens = parse_token_count(*v, f.path_of("tokens"), d_);
  if (const Node* v = f.optional("iterations"))
    if (auto c = as_positive_count(*v, f.path_of("iterations"), d_)) t.iterations = *c;
  if (t.tokens && t.iterations)
    d_.error(f.optional("iterations")->where, f.path_of("iterations"),
             "training.tokens and training.iterations both say how long training is",
             "keep one of them");
  if (const Node* v = f.optional("failures")) t.failures = read_failures(*v);
  f.reject_unknown();
}

// training.grad_dtype and training.optimizer_state: the dtypes gradients and optimizer
// state are kept in, each restricted to what a training stack offers.
void ScenarioReader::read_storage_dtypes(Fields& f, Training& t) {
  if (const Node* v = f.optional("grad_dtype")) {
    const auto dtype = as_enum<Precision>(*v, f.path_of("grad_dtype"), d_, "gradient dtype");
    if (dtype && *dtype != Precision::fp32 && *dtype != Precision::bf16 &&
        *dtype != Precision::fp16)
      d_.error(v->where, f.path_of("grad_dtype"),
               "gradients are kept in fp32, bf16 or fp16, found " + excerpt(v->text),
               "fp32: Megatron-LM's main gradients under bf16; bf16: --grad-reduce-in-bf16 or "
               "NeMo's grad_sync_dtype: bf16; leave it out for the precision's default");
    else if (dtype)
      t.grad_dtype = *dtype;
  }
  if (const Node* v = f.optional("optimizer_state")) {
    const auto dtype =
        as_enum<Precision>(*v, f.path_of("optimizer_state"), d_, "optimizer state dtype");
    if (dtype && *dtype != Precision::fp32 && *dtype != Precision::bf16)
      d_.error(v->where, f.path_of("optimizer_state"),
               "the optimizer's state is kept in fp32 or bf16, found " + excerpt(v->text),
               "fp32: master weights and moments in fp32 (the default); bf16: as NeMo's "
               "distributed_fused_adam with dtype: bf16");
    else if (dtype == Precision::bf16 &&
             (t.precision == Precision::fp32 || t.precision == Precision::tf32))
      d_.error(v->where, f.path_of("optimizer_state"),
               "a bf16 optimizer state needs 16-bit training, but training.precision is " +
                   to_string(t.precision),
               "set training.precision: bf16 (or fp16, fp8), or remove optimizer_state");
    else if (dtype)
      t.optimizer_state = *dtype;
  }
}

FailureModel ScenarioReader::read_failures(const Node& n) {
  FailureModel m;
  Fields f(n, "training.failures", d_);
  if (!f.ok()) return m;
  // One of the two ways to give the rate: MTBF per GPU, or failures per GPU-hour.
  if (f.has("gpu_mtbf") == f.has("failures_per_gpu_hour"))
    d_.error(n.where, "training.failures",
             f.has("gpu_mtbf") ? "gpu_mtbf and failures_per_gpu_hour both give the failure rate"
                               : "no failure rate",
             "give gpu_mtbf (a duration, e.g. 50000h) or failures_per_gpu_hour (e.g. 2e-5)");
  // A duration that must be positive (`zero` false) or may be zero.
  auto read = [&](const Node* v, const char* key, Seconds& out, bool zero) {
    if (v == nullptr) return false;
    const auto t = long_duration()(*v, f.path_of(key));
    if (!t) return false;
    if (!zero && !(t->value() > 0)) {
      d_.error(v->where, f.path_of(key),
               std::string(key) + " must be positive, found " + excerpt(v->text));
      return false;
    }
    out = *t;
    return true;
  };
  read(f.optional("gpu_mtbf"), "gpu_mtbf", m.gpu_mtbf, false);
  if (const Node* v = f.optional("failures_per_gpu_hour"))
    if (auto rate = as_number(*v, f.path_of("failures_per_gpu_hour"), d_)) {
      if (!(*rate > 0) || *rate >= 1)
        d_.error(v->where, f.path_of("failures_per_gpu_hour"),
                 "a failure rate per GPU-hour is in (0, 1), found " + excerpt(v->text),
                 "e.g. 2e-5 (one failure per 50 000 GPU-hours)");
      else
        m.gpu_mtbf = Seconds(3600 / *rate);
    }
  const bool interval =
      read(f.required("checkpoint_interval"), "checkpoint_interval", m.checkpoint_interval, false);
  read(f.optional("restart_time"), "restart_time", m.restart_time, true);
  const bool cost = read(f.optional("checkpoint_cost"), "checkpoint_cost", m.checkpoint_cost, true);
  if (interval && cost && m.checkpoint_cost >= m.checkpoint_interval)
    d_.error(f.optional("checkpoint_cost")->where, f.path_of("checkpoint_cost"),
             "writing a checkpoint (" + format_duration(m.checkpoint_cost) +
                 ") takes the whole interval between checkpoints (" +
                 format_duration(m.checkpoint_interval) + ")",
             "checkpoint less often, or give the time one checkpoint stalls training");
  f.reject_unknown();
  return m;
}

std::optional<LinkSpec> ScenarioReader::read_link(const Node& n, const std::string& path) {
  Fields f(n, path, d_);
  if (!f.ok()) return std::nullopt;
  LinkSpec link;
  set_required(f, "bandwidth", link.bandwidth, bandwidth());
  set_required(f, "latency", link.latency, duration());
  f.reject_unknown();
  return link;
}

void ScenarioReader::read_clusters(const Node& n) {
  if (!n.is_sequence() || n.items.empty()) {
    d_.error(n.where, "clusters", "expected a list of at least one cluster, found " + n.describe());
    return;
  }
  std::map<std::string, std::string> first_path_of_name;
  std::int64_t total_gpus = 0;  // GPUs of the clusters so far
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    std::string path = index_path("clusters", i);
    Cluster c;
    Fields f(n.items[i], path, d_);
    if (!f.ok()) continue;
    set_required(f, "name", c.name, cluster_name());
    set_required(f, "gpu", c.gpu, name());
    set_required(f, "nodes", c.nodes, count());
    set_required(f, "gpus_per_node", c.gpus_per_node, count());
    if (const Node* l = f.required("nvlink"))
      if (auto link = read_link(*l, f.path_of("nvlink"))) c.nvlink = *link;
    if (const Node* l = f.required("nic"))
      if (auto link = read_link(*l, f.path_of("nic"))) c.nic = *link;
    if (const Node* o = f.optional("oversubscription")) {
      auto v = as_number(*o, f.path_of("oversubscription"), d_);
      if (v && !(*v >= 1))
        d_.error(o->where, f.path_of("oversubscription"),
                 "oversubscription must be at least 1, found " + excerpt(o->text),
                 "1 is a non-blocking fabric; 2 means a node's uplink carries half of what its "
                 "NICs can send");
      else if (v)
        c.oversubscription = *v;
    }
    if (const Node* k = f.optional("nics_per_node")) {
      const auto v = as_positive_count(*k, f.path_of("nics_per_node"), d_);
      if (v && c.gpus_per_node > 0 && *v > c.gpus_per_node)
        d_.error(k->where, f.path_of("nics_per_node"),
                 "nics_per_node is at most gpus_per_node (" + std::to_string(c.gpus_per_node) +
                     "), found " + excerpt(k->text),
                 "a DGX A100 or H100 node has 8 NICs, one a GPU (the default); a node whose GPUs "
                 "share one NIC has 1; nic.bandwidth is one NIC's rate");
      else if (v)
        c.nics_per_node = static_cast<int>(*v);
    }
    if (const Node* cal = f.optional("calibration"))
      c.calibration = read_calibration(*cal, f.path_of("calibration"));
    f.reject_unknown();
    if (c.nodes > 0 && c.gpus_per_node > 0) {
      const auto gpus = checked_mul(c.nodes, c.gpus_per_node);
      const auto total = checked_add(total_gpus, gpus.value_or(0));
      const double limit = static_cast<double>(limits().gpus);
      if (!gpus || !total || static_cast<double>(*total) > limit) {
        d_.error(f.optional("nodes")->where, f.path_of("nodes"),
                 "the clusters hold " +
                     (gpus && total ? std::to_string(*total) : std::string("more than 2^63")) +
                     " GPUs (" + std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node) +
                     " here), more than hgsim simulates",
                 limit_hint("HGSIM_MAX_GPUS", limit));
        c.nodes = 0;  // so that no later count multiplies it
      } else {
        total_gpus = *total;
      }
    }
    if (!c.name.empty()) {
      auto [it, fresh] = first_path_of_name.emplace(c.name, path);
      if (!fresh)
        d_.error(f.optional("name")->where, f.path_of("name"),
                 "duplicate cluster name '" + excerpt(c.name) + "'",
                 "already used by " + it->second + "; cluster names must be unique");
    }
    s_.clusters.push_back(c);
  }
}

ComputeCalibration ScenarioReader::read_calibration(const Node& n, const std::string& path) {
  ComputeCalibration cal;
  Fields f(n, path, d_);
  if (!f.ok()) return cal;
  // 1 % of a datasheet figure is already far below any GPU kernel or link measured; less
  // is a slip of the exponent, and would turn one iteration into centuries.
  auto fraction = [&](const Node& v, const std::string& p) -> std::optional<double> {
    auto x = as_number(v, p, d_);
    if (x && !(*x >= 0.01 && *x <= 1)) {
      d_.error(v.where, p, "an efficiency is a fraction from 0.01 to 1, found " + excerpt(v.text),
               "the fraction of the datasheet figure (peak rate, memory or link bandwidth) your "
               "kernels or transfers reach, e.g. 0.62");
      return std::nullopt;
    }
    return x;
  };
  // A kernel launch or a dispatch costs microseconds; 1 s is far beyond any.
  auto duration = [&](const Node& v, const std::string& p) -> std::optional<Seconds> {
    auto t = as_quantity(v, p, d_, parse_duration, "a duration such as 6us");
    if (t && !(t->value() >= 0 && t->value() <= 1)) {
      d_.error(v.where, p, "a per-kernel time is from 0 to 1s, found " + excerpt(v.text));
      return std::nullopt;
    }
    return t;
  };
  set(f, "gemm_efficiency", cal.gemm_efficiency, fraction);
  set(f, "gemm_efficiency_fp8", cal.gemm_efficiency_fp8, fraction);
  set(f, "attention_efficiency", cal.attention_efficiency, fraction);
  set(f, "memory_efficiency", cal.memory_efficiency, fraction);
  set(f, "kernel_overhead", cal.kernel_overhead, duration);
  set(f, "host_dispatch", cal.host_dispatch, duration);
  set(f, "nvlink_efficiency", cal.nvlink_efficiency, fraction);
  set(f, "nccl_fixed_cost_2_ranks", cal.nccl_fixed_cost_2_ranks, duration);
  set(f, "nccl_fixed_cost_8_ranks", cal.nccl_fixed_cost_8_ranks, duration);
  auto scale = [&](const Node& v, const std::string& p) -> std::optional<double> {
    auto x = as_number(v, p, d_);
    if (x && !(*x >= 0 && *x <= 100)) {
      d_.error(v.where, p, "a scale on NCCL's latencies is from 0 to 100, found " + excerpt(v.text),
               "1 is NCCL's own tuning model");
      return std::nullopt;
    }
    return x;
  };
  set(f, "nccl_latency_scale", cal.nccl_latency_scale, scale);
  set(f, "nccl_send_recv_fixed_cost", cal.nccl_send_recv_fixed_cost, duration);
  f.reject_unknown();
  return cal;
}

void ScenarioReader::read_wan(const Node& n) {
  if (!n.is_sequence()) {
    d_.error(n.where, "wan", "expected a list of links, found " + n.describe());
    return;
  }
  std::map<std::pair<std::string, std::string>, std::string> first_path_of_pair;
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    const std::string path = index_path("wan", i);
    const std::size_t before = s_.wan.size();
    read_wan_link(n.items[i], path);
    if (s_.wan.size() == before) continue;
    const WanLink& w = s_.wan.back();
    if (w.from.empty() || w.to.empty() || w.from == w.to) continue;
    auto pair = std::minmax(w.from, w.to);
    auto [it, fresh] = first_path_of_pair.emplace(pair, path);
    if (!fresh)
      d_.error(n.items[i].where, path + ".between",
               "a second WAN link between '" + excerpt(w.from) + "' and '" + excerpt(w.to) + "'",
               "already joined by " + it->second +
                   "; one link per pair of clusters (reverse_bandwidth makes it asymmetric)");
  }
}

// Clusters that no chain of WAN links joins can never be in one plan: the planner
// searches each group on its own and a plan that uses two is refused later, so the
// scenario says so up front, naming the groups.
void ScenarioReader::warn_unjoined_clusters(const Node& at, const std::string& key_path) {
  const std::size_t n = s_.clusters.size();
  std::vector<std::size_t> group(n);
  for (std::size_t c = 0; c < n; ++c) group[c] = c;
  auto root = [&](std::size_t c) {
    while (group[c] != c) c = group[c] = group[group[c]];
    return c;
  };
  auto index = [&](const std::string& name) {
    for (std::size_t c = 0; c < n; ++c)
      if (s_.clusters[c].name == name) return c;
    return n;
  };
  for (const WanLink& w : s_.wan) {
    const std::size_t a = index(w.from), b = index(w.to);
    if (a < n && b < n) group[root(a)] = root(b);
  }
  std::vector<std::vector<std::string>> groups;
  std::map<std::size_t, std::size_t> group_of_root;
  for (std::size_t c = 0; c < n; ++c) {
    auto [it, fresh] = group_of_root.emplace(root(c), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(s_.clusters[c].name);
  }
  if (groups.size() < 2) return;
  auto listed = [](const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size() && i < 8; ++i)
      out += (i ? ", " : "") + ("'" + excerpt(names[i]) + "'");
    if (names.size() > 8) out += " and " + std::to_string(names.size() - 8) + " more";
    return "{" + out + "}";
  };
  std::string all;
  for (std::size_t g = 0; g < groups.size() && g < 8; ++g)
    all += (g ? ", " : "") + listed(groups[g]);
  if (groups.size() > 8) all += " and " + std::to_string(groups.size() - 8) + " more groups";
  const std::string& a = groups[0].front();
  const std::string& b = groups[1].front();
  d_.warning(at.where, key_path,
             "no WAN path joins clusters '" + excerpt(a) + "' and '" + excerpt(b) +
                 "': a plan can use one of these groups only: " + all,
             "add a wan link (between: [" + excerpt(a) + ", " + excerpt(b) +
                 "], bandwidth: ..., latency: ...) to let a plan span them");
}

void ScenarioReader::read_wan_link(const Node& n, const std::string& path) {
  Fields f(n, path, d_);
  if (!f.ok()) return;
  WanLink link;
  std::vector<std::string> names;
  for (const Cluster& c : s_.clusters) names.push_back(c.name);
  if (const Node* between = f.required("between")) {
    std::string bpath = f.path_of("between");
    if (!between->is_sequence() || between->items.size() != 2) {
      d_.error(between->where, bpath,
               "expected two cluster names, [a, b], found " + between->describe());
    } else {
      for (std::size_t k = 0; k < 2; ++k) {
        auto name = as_string(between->items[k], index_path(bpath, k), d_);
        if (!name) continue;
        (k == 0 ? link.from : link.to) = *name;
        if (s_.find_cluster(*name) == nullptr)
          d_.error(between->items[k].where, index_path(bpath, k),
                   "unknown cluster '" + excerpt(*name) + "'", did_you_mean(*name, names));
      }
      if (!link.from.empty() && link.from == link.to)
        d_.error(
            between->where, bpath,
            "a WAN link joins two different clusters, found '" + excerpt(link.from) + "' twice");
    }
  }
  set_required(f, "bandwidth", link.bandwidth, bandwidth());
  if (const Node* r = f.optional("reverse_bandwidth"))
    link.reverse_bandwidth = bandwidth()(*r, f.path_of("reverse_bandwidth"));
  set_required(f, "latency", link.latency, duration());
  if (const Node* w = f.optional("tcp_window"))
    link.tcp_window = tcp_window()(*w, f.path_of("tcp_window"));
  if (const Node* t = f.optional("trace")) read_trace(link, *t, f.path_of("trace"));
  f.reject_unknown();
  s_.wan.push_back(link);
}

// A bandwidth trace: CSV rows "time_s,bandwidth", '#' comments, an optional header row.
// Only a regular .csv file is read (never a device, FIFO or some other file named by
// mistake or malice), with at most limits().trace_rows rows at least
// limits().trace_min_step_s apart; messages quote at most an excerpt of a row.
void ScenarioReader::read_trace(WanLink& link, const Node& n, const std::string& path) {
  auto written = as_string(n, path, d_);
  if (!written) return;
  link.trace = *written;
  std::filesystem::path file(*written);
  if (written->empty() || file.extension() != ".csv") {
    d_.error(n.where, path, "a bandwidth trace is a .csv file, found " + n.describe(),
             "rows 'time_s,bandwidth' such as '0,10Gbps'; the path is relative to the scenario");
    return;
  }
  if (file.is_relative() && !s_.source_file.empty())
    file = std::filesystem::path(s_.source_file).parent_path() / file;
  const std::string csv = file.string();
  const auto text = read_input_file(csv, "bandwidth trace", d_, n.where, path);
  if (!text) return;
  const int errors_before = d_.error_count();
  link.trace_steps = parse_bandwidth_trace(*text, csv, path, d_);
  if (link.trace_steps.empty() && d_.error_count() == errors_before)
    d_.error(n.where, path, "bandwidth trace '" + path_excerpt(csv) + "' has no rows");
}

void ScenarioReader::read_simulation(const Node& n) {
  Simulation& sim = s_.simulation;
  Fields f(n, "simulation", d_);
  if (!f.ok()) return;
  set(f, "network_model", sim.network_model, choice<NetworkModel>("network model"));
  set(f, "tcp_window", sim.tcp_window, tcp_window());
  set(f, "fidelity", sim.fidelity, choice<Fidelity>("fidelity"));
  set(f, "pipeline_messages", sim.pipeline_messages,
      choice<PipelineMessages>("pipeline message order"));
  set(f, "collectives", sim.collectives, choice<CollectiveGranularity>("collective granularity"));
  set(f, "iterations", sim.iterations, count());
  if (sim.iterations > max_simulated_iterations) {
    d_.error(f.optional("iterations")->where, f.path_of("iterations"),
             "at most " + std::to_string(max_simulated_iterations) +
                 " iterations are simulated in one run, found " + std::to_string(sim.iterations),
             "simulate a window (a day of a trace is a few thousand iterations) and let "
             "training.tokens extrapolate");
    sim.iterations = 1;
  }
  set(f, "start_time", sim.start_time, duration());
  f.reject_unknown();
}

void ScenarioReader::read_compression(const Node& n) {
  s_.compression = parse_compression(n, "compression", d_);
}

void ScenarioReader::read_sweep(const Node& n) {
  Fields f(n, "sweep", d_);
  if (!f.ok()) return;
  int groups = 0;
  auto read_axis = [&](const std::string& key, const Node& values, const std::string& prefix,
                       int group) {
    if (!values.is_sequence() || values.items.empty()) {
      d_.error(values.where, child_path(prefix, key),
               "expected a list of values to sweep, found " + values.describe());
      return;
    }
    s_.sweep.push_back({key, values.items, group});
  };
  auto read_group = [&](const Node& g, const std::string& path) {
    if (!g.is_mapping() || g.entries.empty()) {
      d_.error(g.where, path,
               "expected a zip group (a mapping of key paths to lists of equal length), found " +
                   g.describe(),
               std::string("e.g. ") + kSweepZipExample);
      return;
    }
    for (const auto& [key, values] : g.entries) read_axis(key, values, path, groups);
    ++groups;
  };
  for (std::size_t i = 0; i < n.entries.size(); ++i) {
    const auto& [key, values] = n.entries[i];
    if (key != "zip") {
      read_axis(key, values, "sweep", -1);
      continue;
    }
    if (values.is_sequence()) {
      for (std::size_t g = 0; g < values.items.size(); ++g)
        read_group(values.items[g], "sweep.zip[" + std::to_string(g) + "]");
    } else {
      read_group(values, "sweep.zip");
    }
  }
}

}  // namespace

std::vector<BandwidthStep> parse_bandwidth_trace(std::string_view text, const std::string& csv,
                                                 const std::string& path, Diagnostics& diags) {
  std::vector<BandwidthStep> steps;
  if (auto at = first_invalid_utf8(text, csv)) {
    diags.error(*at, path, "the bandwidth trace is not UTF-8 text");
    return {};
  }
  const Limits& limit = limits();
  // A byte-order mark (spreadsheets write one) is not part of the first row, as in YAML.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::istringstream in{std::string(text)};
  std::string line;
  int line_number = 0;
  // Errors stop at kMaxRowErrors: a damaged 100 000-row trace needs a few lines, not one
  // per row. A row after a refused one is not held to being the first at time 0.
  constexpr int kMaxRowErrors = 20;
  const int errors_before = diags.error_count();
  bool row_refused = false;
  auto trimmed = [](std::string t) {
    const auto first = t.find_first_not_of(" \t\r");
    if (first == std::string::npos) return std::string();
    t.erase(t.find_last_not_of(" \t\r") + 1);
    return t.substr(first);
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (diags.error_count() - errors_before >= kMaxRowErrors) {
      diags.error({csv, line_number, 1}, path,
                  "more than " + std::to_string(kMaxRowErrors) +
                      " rows refused; the rows from here on were not checked");
      return steps;
    }
    if (diags.error_count() != errors_before) row_refused = true;
    std::string row = line.substr(0, line.find('#'));
    if (row.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto comma = row.find(',');
    SourceLocation at{csv, line_number, 1};
    if (comma == std::string::npos) {
      diags.error(at, path, "expected 'time_s,bandwidth', found '" + excerpt(trimmed(row)) + "'");
      continue;
    }
    std::string time_text = trimmed(row.substr(0, comma));
    std::string rate_text = row.substr(comma + 1);
    if (time_text.find("time") != std::string::npos) continue;  // header row
    if (static_cast<std::int64_t>(steps.size()) >= limit.trace_rows) {
      diags.error(at, path,
                  "the bandwidth trace has more than " + std::to_string(limit.trace_rows) + " rows",
                  limit_hint("HGSIM_MAX_TRACE_ROWS", static_cast<double>(limit.trace_rows)));
      return steps;
    }
    if (time_text.empty()) {
      diags.error(at, path, "the row has no time before the comma",
                  "each row is 'time_s,bandwidth', e.g. '30,2Gbps'");
      continue;
    }
    Node time_node;
    time_node.kind = Node::Kind::scalar;
    time_node.text = time_text;
    time_node.where = at;
    auto seconds = as_number(time_node, path, diags);
    auto rate = parse_bandwidth(rate_text);
    if (!rate) diags.error({csv, line_number, static_cast<int>(comma) + 2}, path, rate.error);
    if (!seconds || !rate) continue;
    if (*seconds < 0 || (!steps.empty() && *seconds <= steps.back().at.value())) {
      diags.error(
          at, path,
          "times must start at 0 or later and increase strictly, found " + excerpt(time_node.text));
      continue;
    }
    // The step as written in decimal: 0.009 - 0.008 is 0.0009999999999999992 in binary.
    if (!steps.empty() &&
        *seconds - steps.back().at.value() < limit.trace_min_step_s * (1 - 1e-9)) {
      diags.error(at, path,
                  "rows " + shortest_decimal(*seconds - steps.back().at.value()) +
                      " s apart; the shortest step hgsim simulates is " +
                      shortest_decimal(limit.trace_min_step_s) + " s",
                  "every step is an event for the simulator, and the trace repeats; set "
                  "HGSIM_MIN_TRACE_STEP_S to lower the limit (docs/limits.md)");
      continue;
    }
    if (steps.empty() && *seconds != 0 && !row_refused)
      diags.error(at, path, "the first row must be at time 0, found " + excerpt(time_node.text));
    steps.push_back(BandwidthStep{Seconds(*seconds), *rate.value});
  }
  return steps;
}

std::optional<Scenario> parse_scenario(const Node& document, const std::string& source_file,
                                       Diagnostics& diags) {
  Scenario s;
  s.source_file = source_file;
  record_locations(document, "", s.locations);
  ScenarioReader(s, diags).read(document);
  if (!document.is_mapping()) return std::nullopt;
  if (s.model.inline_config && s.model.inline_config->max_positions < 0)
    s.model.inline_config->max_positions = s.training.seq_len;
  return s;
}

std::optional<Scenario> load_scenario(const std::string& path, Diagnostics& diags) {
  auto document = load_document(path, diags);
  if (!document) return std::nullopt;
  return parse_scenario(*document, path, diags);
}

// ---- the JSON form -----------------------------------------------------------------------

namespace {

Json link_json(const LinkSpec& l) {
  return Json{{"bandwidth", format_bandwidth(l.bandwidth)},
              {"latency", format_duration(l.latency)}};
}

Json codec_json(const CodecConfig& c) {
  if (c.params.empty()) return c.codec;
  Json out{{"codec", c.codec}};
  for (const auto& [k, v] : c.params) out[k] = to_json(v);
  return out;
}

Json model_json(const ModelRef& m) {
  if (m.zoo_name) return *m.zoo_name;
  const ModelConfig& c = *m.inline_config;
  Json out{{"name", c.name},
           {"layers", c.layers},
           {"hidden", c.hidden},
           {"heads", c.heads},
           {"kv_heads", c.kv_heads},
           {"vocab", c.vocab},
           {"ffn_hidden", c.ffn_hidden},
           {"activation", to_string(c.activation)},
           {"norm", to_string(c.norm)},
           {"positions", c.max_positions > 0 ? "learned" : "rotary"}};
  if (c.max_positions > 0) out["max_positions"] = c.max_positions;
  out["tied_embeddings"] = c.tied_embeddings;
  out["bias"] = c.bias;
  out["dropout"] = c.dropout;
  return out;
}

}  // namespace

Json plan_to_json(const Plan& plan) {
  Json pipelines = Json::array();
  for (const Pipeline& p : plan.pipelines) {
    Json stages = Json::array();
    for (const Stage& st : p.stages) {
      Json stage{{"cluster", st.cluster}, {"tp", st.tp}, {"dp", st.dp}, {"layers", st.layers}};
      if (st.cp > 1) stage["cp"] = st.cp;
      stages.push_back(stage);
    }
    pipelines.push_back(
        {{"replicas", p.replicas}, {"micro_batches", p.micro_batches}, {"stages", stages}});
  }
  Json out{{"schedule", to_string(plan.schedule)},
           {"micro_batch", plan.micro_batch},
           {"virtual_stages", plan.virtual_stages},
           {"sequence_parallel", plan.sequence_parallel},
           {"pipelines", pipelines},
           {"grad_sync",
            {{"algorithm", to_string(plan.grad_sync.algorithm)},
             {"bucket", format_size(plan.grad_sync.bucket)}}}};
  if (plan.zero) out["zero"] = plan.zero;
  if (plan.grad_reduce != GradReduce::overlap) out["grad_reduce"] = to_string(plan.grad_reduce);
  if (plan.tp_comm_overlap) out["tp_comm_overlap"] = true;
  if (plan.recompute) out["recompute"] = to_string(*plan.recompute);
  if (plan.compression)
    out["compression"] = {{"wan_activations", codec_json(plan.compression->wan_activations)},
                          {"wan_gradients", codec_json(plan.compression->wan_gradients)}};
  if (plan.outer_sync.enabled()) out["outer_sync"] = outer_sync_json(plan.outer_sync);
  return out;
}

std::optional<CodecConfig> parse_codec(const Node& c, const std::string& codec_path,
                                       Diagnostics& d) {
  if (c.is_scalar()) return CodecConfig{c.text, {}};
  if (!c.is_mapping()) {
    d.error(c.where, codec_path,
            "expected a codec name (int8) or a mapping ({codec: topk, ratio: 0.01}), found " +
                c.describe());
    return std::nullopt;
  }
  const Node* name = c.find("codec");
  if (name == nullptr || !name->is_scalar()) {
    d.error(c.where, child_path(codec_path, "codec"), "missing key 'codec'",
            "e.g. {codec: topk, ratio: 0.01}");
    return std::nullopt;
  }
  CodecConfig out{name->text, {}};
  for (const auto& [k, v] : c.entries)
    if (k != "codec") out.params.emplace_back(k, v);
  return out;
}

CompressionPolicy parse_compression(const Node& n, const std::string& path, Diagnostics& d) {
  CompressionPolicy policy;
  Fields f(n, path, d);
  if (!f.ok()) return policy;
  auto read_codec = [&](std::string_view key, CodecConfig& out) {
    const Node* c = f.optional(key);
    if (c == nullptr) return;
    if (auto config = parse_codec(*c, f.path_of(key), d)) out = *config;
  };
  read_codec("wan_activations", policy.wan_activations);
  read_codec("wan_gradients", policy.wan_gradients);
  f.reject_unknown();
  return policy;
}

Json scenario_to_json(const Scenario& s) {
  Json out{{"name", s.name}};
  if (!s.description.empty()) out["description"] = s.description;
  out["model"] = model_json(s.model);
  out["training"] = {{"global_batch", s.training.global_batch},
                     {"seq_len", s.training.seq_len},
                     {"precision", to_string(s.training.precision)},
                     {"optimizer", to_string(s.training.optimizer)},
                     {"recompute", to_string(s.training.recompute)},
                     {"attention", to_string(s.training.attention)}};
  if (s.training.flash_version) out["training"]["flash_version"] = s.training.flash_version;
  if (s.training.grad_dtype) out["training"]["grad_dtype"] = to_string(*s.training.grad_dtype);
  if (s.training.optimizer_state != Precision::fp32)
    out["training"]["optimizer_state"] = to_string(s.training.optimizer_state);
  Json clusters = Json::array();
  for (const Cluster& c : s.clusters)
    clusters.push_back({{"name", c.name},
                        {"gpu", c.gpu},
                        {"nodes", c.nodes},
                        {"gpus_per_node", c.gpus_per_node},
                        {"nvlink", link_json(c.nvlink)},
                        {"nic", link_json(c.nic)}});
  for (std::size_t i = 0; i < s.clusters.size(); ++i) {
    if (s.clusters[i].oversubscription != 1)
      clusters[i]["oversubscription"] = s.clusters[i].oversubscription;
    if (s.clusters[i].nics_per_node > 0) clusters[i]["nics_per_node"] = s.clusters[i].nics_per_node;
    const ComputeCalibration& cal = s.clusters[i].calibration;
    if (cal.empty()) continue;
    Json j = Json::object();
    if (cal.gemm_efficiency) j["gemm_efficiency"] = *cal.gemm_efficiency;
    if (cal.gemm_efficiency_fp8) j["gemm_efficiency_fp8"] = *cal.gemm_efficiency_fp8;
    if (cal.attention_efficiency) j["attention_efficiency"] = *cal.attention_efficiency;
    if (cal.memory_efficiency) j["memory_efficiency"] = *cal.memory_efficiency;
    if (cal.kernel_overhead) j["kernel_overhead"] = format_duration(*cal.kernel_overhead);
    if (cal.host_dispatch) j["host_dispatch"] = format_duration(*cal.host_dispatch);
    if (cal.nvlink_efficiency) j["nvlink_efficiency"] = *cal.nvlink_efficiency;
    if (cal.nccl_fixed_cost_2_ranks)
      j["nccl_fixed_cost_2_ranks"] = format_duration(*cal.nccl_fixed_cost_2_ranks);
    if (cal.nccl_fixed_cost_8_ranks)
      j["nccl_fixed_cost_8_ranks"] = format_duration(*cal.nccl_fixed_cost_8_ranks);
    if (cal.nccl_latency_scale) j["nccl_latency_scale"] = *cal.nccl_latency_scale;
    if (cal.nccl_send_recv_fixed_cost)
      j["nccl_send_recv_fixed_cost"] = format_duration(*cal.nccl_send_recv_fixed_cost);
    clusters[i]["calibration"] = j;
  }
  out["clusters"] = clusters;
  Json wan = Json::array();
  for (const WanLink& w : s.wan) {
    Json link{{"between", {w.from, w.to}}, {"bandwidth", format_bandwidth(w.bandwidth)}};
    if (w.reverse_bandwidth) link["reverse_bandwidth"] = format_bandwidth(*w.reverse_bandwidth);
    link["latency"] = format_duration(w.latency);
    if (w.tcp_window) link["tcp_window"] = format_size(*w.tcp_window);
    if (!w.trace.empty()) link["trace"] = w.trace;
    wan.push_back(link);
  }
  out["wan"] = wan;
  out["strategy"] = s.strategy.automatic ? Json("auto") : plan_to_json(s.strategy.plan);
  out["compression"] = {{"wan_activations", codec_json(s.compression.wan_activations)},
                        {"wan_gradients", codec_json(s.compression.wan_gradients)}};
  out["simulation"] = {{"network_model", to_string(s.simulation.network_model)},
                       {"tcp_window", format_size(s.simulation.tcp_window)},
                       {"fidelity", to_string(s.simulation.fidelity)},
                       {"pipeline_messages", to_string(s.simulation.pipeline_messages)},
                       {"collectives", to_string(s.simulation.collectives)},
                       {"iterations", s.simulation.iterations},
                       {"start_time", format_duration(s.simulation.start_time)}};
  if (!s.workload_chakra.empty()) out["workload"] = {{"chakra", s.workload_chakra}};
  if (s.training.tokens) out["training"]["tokens"] = *s.training.tokens;
  if (s.training.iterations) out["training"]["iterations"] = *s.training.iterations;
  if (const auto& m = s.training.failures)
    out["training"]["failures"] = {{"gpu_mtbf", format_duration(m->gpu_mtbf)},
                                   {"checkpoint_interval", format_duration(m->checkpoint_interval)},
                                   {"checkpoint_cost", format_duration(m->checkpoint_cost)},
                                   {"restart_time", format_duration(m->restart_time)}};
  if (!(s.planner == PlannerSettings{})) out["planner"] = planner_settings_json(s.planner);
  if (!s.sweep.empty()) {
    Json sweep = Json::object();
    Json zips = Json::array();
    for (const SweepAxis& axis : s.sweep) {
      Json values = Json::array();
      for (const Node& v : axis.values) values.push_back(to_json(v));
      if (axis.zip_group < 0) {
        sweep[axis.path] = values;
        continue;
      }
      while (zips.size() <= static_cast<std::size_t>(axis.zip_group))
        zips.push_back(Json::object());
      zips[axis.zip_group][axis.path] = values;
    }
    if (zips.size() == 1) sweep["zip"] = zips.front();
    if (zips.size() > 1) sweep["zip"] = zips;
    out["sweep"] = sweep;
  }
  return out;
}

}  // namespace hgsim::core
