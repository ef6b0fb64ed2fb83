// Reading a Plan (the `strategy:` mapping, or a plan file) and checking that it adds up
// against a scenario: clusters exist, tensor-parallel groups fit in a node, GPUs are not
// over-used, layers and batch add up. Where the groups go is sim::place_groups's job (the
// one placement), which refuses what no node has room for.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>

#include "core/enum_names.hpp"
#include "core/limits.hpp"
#include "core/scenario.hpp"
#include "core/text.hpp"

namespace hgsim::core {
namespace {

std::string plural(long long n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

template <class T, class Convert>
void read_optional(Fields& f, std::string_view key, T& target, Convert convert) {
  if (const Node* n = f.optional(key))
    if (auto v = convert(*n, f.path_of(key))) target = *v;
}

std::optional<Stage> read_stage(const Node& n, const std::string& path, Diagnostics& d) {
  Fields f(n, path, d);
  if (!f.ok()) return std::nullopt;
  Stage st;
  auto count = [&](const Node& v, const std::string& p) { return as_positive_count(v, p, d); };
  if (const Node* c = f.required("cluster"))
    if (auto name = as_name(*c, f.path_of("cluster"), d)) st.cluster = *name;
  read_optional(f, "tp", st.tp, count);
  read_optional(f, "dp", st.dp, count);
  read_optional(f, "cp", st.cp, count);
  if (const Node* l = f.required("layers"))
    if (auto v = count(*l, f.path_of("layers"))) st.layers = *v;
  f.reject_unknown();
  return st;
}

std::optional<Pipeline> read_pipeline(const Node& n, const std::string& path, Diagnostics& d) {
  Fields f(n, path, d);
  if (!f.ok()) return std::nullopt;
  Pipeline p;
  auto count = [&](const Node& v, const std::string& q) { return as_positive_count(v, q, d); };
  read_optional(f, "replicas", p.replicas, count);
  if (const Node* m = f.required("micro_batches"))
    if (auto v = count(*m, f.path_of("micro_batches"))) p.micro_batches = *v;
  if (const Node* stages = f.required("stages")) {
    std::string spath = f.path_of("stages");
    if (!stages->is_sequence() || stages->items.empty()) {
      d.error(stages->where, spath,
              "expected a list of at least one stage, found " + stages->describe());
    } else {
      for (std::size_t i = 0; i < stages->items.size(); ++i)
        if (auto st = read_stage(stages->items[i], index_path(spath, i), d))
          p.stages.push_back(*st);
    }
  }
  f.reject_unknown();
  return p;
}

}  // namespace

std::optional<Plan> parse_plan(const Node& document, const std::string& path, Diagnostics& d) {
  Fields f(document, path, d);
  if (!f.ok()) return std::nullopt;
  Plan plan;
  auto count = [&](const Node& v, const std::string& p) { return as_positive_count(v, p, d); };
  read_optional(f, "schedule", plan.schedule, [&](const Node& v, const std::string& p) {
    return detail::as_enum<Schedule>(v, p, d, "schedule");
  });
  read_optional(f, "micro_batch", plan.micro_batch, count);
  read_optional(f, "virtual_stages", plan.virtual_stages, count);
  read_optional(f, "sequence_parallel", plan.sequence_parallel,
                [&](const Node& v, const std::string& p) { return as_bool(v, p, d); });
  read_optional(f, "grad_reduce", plan.grad_reduce, [&](const Node& v, const std::string& p) {
    return detail::as_enum<GradReduce>(v, p, d, "gradient reduction");
  });
  read_optional(f, "tp_comm_overlap", plan.tp_comm_overlap,
                [&](const Node& v, const std::string& p) { return as_bool(v, p, d); });
  read_optional(
      f, "zero", plan.zero, [&](const Node& v, const std::string& p) -> std::optional<int> {
        auto n = as_integer(v, p, d);
        if (n && (*n < 0 || *n > 3)) {
          d.error(v.where, p, "zero is a ZeRO stage 0, 1, 2 or 3, found " + excerpt(v.text),
                  "1 shards the optimizer state (Megatron's distributed optimizer), 2 also the "
                  "gradients, 3 also the weights");
          return std::nullopt;
        }
        if (!n) return std::nullopt;
        return static_cast<int>(*n);
      });
  if (const Node* pipelines = f.required("pipelines")) {
    std::string ppath = f.path_of("pipelines");
    if (!pipelines->is_sequence() || pipelines->items.empty()) {
      d.error(pipelines->where, ppath,
              "expected a list of at least one pipeline, found " + pipelines->describe());
    } else {
      for (std::size_t i = 0; i < pipelines->items.size(); ++i)
        if (auto p = read_pipeline(pipelines->items[i], index_path(ppath, i), d))
          plan.pipelines.push_back(*p);
    }
  }
  if (const Node* gs = f.optional("grad_sync")) {
    Fields g(*gs, f.path_of("grad_sync"), d);
    read_optional(g, "algorithm", plan.grad_sync.algorithm,
                  [&](const Node& v, const std::string& p) {
                    return detail::as_enum<GradSyncAlgorithm>(v, p, d, "grad-sync algorithm");
                  });
    read_optional(g, "bucket", plan.grad_sync.bucket,
                  [&](const Node& v, const std::string& p) -> std::optional<Bytes> {
                    if (!v.is_scalar()) {
                      d.error(v.where, p, "expected a size such as 25MB, found " + v.describe());
                      return std::nullopt;
                    }
                    auto parsed = parse_size(v.text);
                    if (!parsed)
                      d.error(v.where, p, parsed.error);
                    else if (parsed.value->value() <= 0) {
                      d.error(v.where, p, "a bucket must be larger than zero");
                      return std::nullopt;
                    }
                    return parsed.value;
                  });
    g.reject_unknown();
  }
  read_optional(f, "recompute", plan.recompute, [&](const Node& v, const std::string& p) {
    return detail::as_enum<Recompute>(v, p, d, "recompute mode");
  });
  if (const Node* c = f.optional("compression"))
    plan.compression = parse_compression(*c, f.path_of("compression"), d);
  if (const Node* o = f.optional("outer_sync"))
    if (auto outer = parse_outer_sync(*o, f.path_of("outer_sync"), d)) plan.outer_sync = *outer;
  f.reject_unknown();
  if (plan.virtual_stages > 1 && plan.schedule != Schedule::interleaved)
    d.error(f.optional("virtual_stages")->where, f.path_of("virtual_stages"),
            "virtual_stages > 1 needs the interleaved schedule, not " + to_string(plan.schedule),
            "use schedule: interleaved, or drop virtual_stages");
  return plan;
}

std::optional<Plan> load_plan(const std::string& path, Diagnostics& diags) {
  auto document = load_document(path, diags);
  if (!document) return std::nullopt;
  return parse_plan(*document, "", diags);
}

namespace {

// Where a key path of the plan was written: in the scenario for an inline plan; for a
// plan file we have no positions, only the path.
SourceLocation plan_location(const Scenario& s, const std::string& path,
                             const std::string& prefix) {
  if (prefix == "strategy") return s.where(path);
  return {};
}

// replicas x tp x dp x cp, or nullopt when it would not fit in 64 bits.
std::optional<std::int64_t> stage_gpu_count(std::int64_t replicas, const Stage& st) {
  auto m = checked_mul(checked_mul(replicas, st.tp).value_or(-1), st.dp);
  if (!m || *m < 0) return std::nullopt;
  m = checked_mul(*m, st.cp);
  if (!m || *m < 0) return std::nullopt;
  return m;
}

// Context parallelism (cp > 1 on a stage) as Megatron-core runs it: every sequence is cut
// into 2 cp chunks and rank i holds chunks i and 2 cp - 1 - i (the causal mask's work then
// falls equally on every rank), so 2 cp must divide the sequence, and with sequence
// parallelism each rank's s / cp tokens are split again over tp; the attention is ring
// attention on FlashAttention-style kernels (Transformer Engine), never the unfused path.
// (With sequence parallelism tp must divide s / cp: models::check_plan_against_model.)
void check_context_parallel(const Scenario& s, const Stage& st, const std::string& path,
                            const std::function<SourceLocation(const std::string&)>& at,
                            Diagnostics& d) {
  const std::int64_t seq = s.training.seq_len;
  if (seq > 0 && seq % (2 * std::int64_t{st.cp}) != 0) {
    d.error(
        at(path), path,
        "cp " + std::to_string(st.cp) + " does not split the sequence of " + std::to_string(seq) +
            " tokens into 2 x cp = " + std::to_string(2 * std::int64_t{st.cp}) + " equal chunks",
        "context parallelism gives each rank two chunks of s / (2 cp) tokens (load-balanced "
        "causal attention): pick a cp with 2 cp dividing training.seq_len");
    return;
  }
  if (s.training.attention != Attention::flash)
    d.error(at(path), path,
            "context parallelism runs ring attention on fused (flash) attention kernels, but "
            "training.attention is standard",
            "set training.attention: flash, or cp: 1");
}

}  // namespace

void check_plan(const Plan& plan, const Scenario& s, int model_layers, const std::string& prefix,
                Diagnostics& d) {
  std::vector<std::string> names;
  for (const Cluster& c : s.clusters) names.push_back(c.name);
  auto at = [&](const std::string& path) { return plan_location(s, path, prefix); };
  const std::string pipelines_path = child_path(prefix, "pipelines");

  std::map<std::string, std::int64_t> gpus_used;  // per cluster
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const Pipeline& p = plan.pipelines[pi];
    const std::string ppath = index_path(pipelines_path, pi);
    std::int64_t layers = 0;
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const Stage& st = p.stages[si];
      const std::string spath = index_path(child_path(ppath, "stages"), si);
      layers += st.layers;
      const Cluster* c = s.find_cluster(st.cluster);
      if (c == nullptr) {
        if (!st.cluster.empty())
          d.error(at(child_path(spath, "cluster")), child_path(spath, "cluster"),
                  "unknown cluster '" + excerpt(st.cluster) + "'", did_you_mean(st.cluster, names));
        continue;
      }
      if (st.tp > c->gpus_per_node && c->gpus_per_node > 0) {
        const std::string tp_path = child_path(spath, "tp");
        if (st.tp % c->gpus_per_node != 0)
          d.error(at(tp_path), tp_path,
                  "tp " + std::to_string(st.tp) + " is larger than a node of '" + c->name + "' (" +
                      plural(c->gpus_per_node, "GPU") + ") but not a whole number of nodes",
                  "a tensor-parallel group stays inside a node or holds whole nodes: use tp <= " +
                      std::to_string(c->gpus_per_node) + " or a multiple of " +
                      std::to_string(c->gpus_per_node));
        else
          d.warning(at(tp_path), tp_path,
                    "tp " + std::to_string(st.tp) + " spans " +
                        std::to_string(st.tp / c->gpus_per_node) + " nodes of '" + c->name +
                        "': its collectives, two per block and micro-batch, cross the NIC (" +
                        human_bandwidth(c->nic.bandwidth) + ") instead of NVLink (" +
                        human_bandwidth(c->nvlink.bandwidth) + ")",
                    "Megatron-LM keeps tp <= " + std::to_string(c->gpus_per_node) +
                        " (one node); span nodes only when a stage does not fit otherwise");
      }
      if (plan.micro_batch % st.dp != 0)
        d.error(at(child_path(spath, "dp")), child_path(spath, "dp"),
                "dp " + std::to_string(st.dp) + " does not divide micro_batch " +
                    std::to_string(plan.micro_batch),
                "dp splits each micro-batch: pick a dp that divides " +
                    std::to_string(plan.micro_batch));
      if (st.cp > 1) check_context_parallel(s, st, child_path(spath, "cp"), at, d);
      // Checked: replicas x tp x dp x cp of hostile sizes must not wrap into a small count.
      const auto stage_gpus = stage_gpu_count(p.replicas, st);
      const auto used = checked_add(gpus_used[st.cluster], stage_gpus.value_or(-1));
      if (!stage_gpus || *stage_gpus < 0 || !used || *used > c->gpu_count()) {
        gpus_used[st.cluster] = std::int64_t{c->gpu_count()} + 1;  // reported below
        continue;
      }
      gpus_used[st.cluster] = *used;
    }
    if (model_layers > 0 && layers != model_layers && !p.stages.empty())
      d.error(at(child_path(ppath, "stages")), child_path(ppath, "stages"),
              "the stages hold " + plural(layers, "layer") + ", the model has " +
                  std::to_string(model_layers),
              "the layers of each pipeline's stages must add up to the model's layers");
    if (plan.schedule == Schedule::interleaved &&
        p.micro_batches % static_cast<int>(p.stages.size()) != 0)
      d.error(at(child_path(ppath, "micro_batches")), child_path(ppath, "micro_batches"),
              "the interleaved schedule needs micro_batches divisible by the number of stages (" +
                  std::to_string(p.stages.size()) + "), found " + std::to_string(p.micro_batches),
              "Megatron-LM's interleaved 1F1B runs micro-batches in groups of one per stage");
  }

  for (const Cluster& c : s.clusters) {
    if (c.nodes <= 0 || c.gpus_per_node <= 0) continue;  // refused where it is written
    auto used = gpus_used.find(c.name);
    const std::int64_t n = used == gpus_used.end() ? 0 : used->second;
    if (n > c.gpu_count()) {
      std::int64_t wanted = 0;  // what the plan asks, saturated rather than wrapped
      for (const Pipeline& p : plan.pipelines)
        for (const Stage& st : p.stages)
          if (st.cluster == c.name)
            wanted = checked_add(wanted, stage_gpu_count(p.replicas, st).value_or(INT64_MAX))
                         .value_or(INT64_MAX);
      d.error(
          at(pipelines_path), pipelines_path,
          "the plan uses " +
              (wanted == INT64_MAX ? std::string("more than 2^63 GPUs") : plural(wanted, "GPU")) +
              " of cluster '" + c.name + "', which has " + std::to_string(c.gpu_count()) + " (" +
              std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node) + ")",
          "count replicas x tp x dp x cp of every stage in '" + excerpt(c.name) + "'");
    } else if (n < c.gpu_count() && !plan.pipelines.empty()) {
      d.warning(at(pipelines_path), pipelines_path,
                "the plan uses " + std::to_string(n) + " of the " + std::to_string(c.gpu_count()) +
                    " GPUs of '" + excerpt(c.name) + "'; the rest stay idle");
    }
  }

  check_outer_sync(plan, s, model_layers, prefix, d);
  // Checked: micro_batch x micro_batches x replicas may not wrap around to a valid batch.
  std::int64_t batch = 0;  // -1: more than 2^63
  for (const Pipeline& p : plan.pipelines) {
    const auto sequences =
        checked_mul(checked_mul(p.replicas, p.micro_batches).value_or(-1), plan.micro_batch);
    const auto total = checked_add(batch, sequences.value_or(-1));
    batch = batch < 0 || !sequences || *sequences < 0 || !total ? -1 : *total;
  }
  // A global_batch of 0 is one the scenario reader refused (or found missing) and
  // reported; comparing with it would be a second error about the same value.
  if (!plan.pipelines.empty() && s.training.global_batch > 0 && batch != s.training.global_batch) {
    std::string sum;
    for (const Pipeline& p : plan.pipelines)
      sum += (sum.empty() ? "" : " + ") + std::to_string(p.replicas) + " x " +
             std::to_string(p.micro_batches) + " x " + std::to_string(plan.micro_batch);
    d.error(at(pipelines_path), pipelines_path,
            "the pipelines process " + sum + " = " +
                (batch >= 0 ? std::to_string(batch) : std::string("more than 2^63")) +
                " sequences per iteration, but training.global_batch is " +
                std::to_string(s.training.global_batch),
            "global_batch = sum over pipelines of replicas x micro_batches x micro_batch");
  }

  // Every two clusters the plan uses must be joined by a path of WAN links.
  std::vector<std::string> used;
  for (const Pipeline& p : plan.pipelines)
    for (const Stage& st : p.stages)
      if (s.find_cluster(st.cluster) != nullptr &&
          std::find(used.begin(), used.end(), st.cluster) == used.end())
        used.push_back(st.cluster);
  if (used.size() > 1) {
    const auto component = wan_components(s);
    for (std::size_t k = 1; k < used.size(); ++k)
      if (component.at(used[k]) != component.at(used[0])) {
        d.error(s.where("wan"), "wan",
                "no WAN path joins clusters '" + excerpt(used[0]) + "' and '" + excerpt(used[k]) +
                    "', but the plan uses both",
                "add a wan link (between: [" + used[0] + ", " + used[k] +
                    "]) or a path through other clusters");
        break;
      }
  }
}

std::map<std::string, int> wan_components(const Scenario& s) {
  std::map<std::string, int> component;
  for (std::size_t i = 0; i < s.clusters.size(); ++i)
    component[s.clusters[i].name] = static_cast<int>(i);
  // Union by relabelling: clusters are few (a scenario has tens at most).
  for (bool changed = true; changed;) {
    changed = false;
    for (const WanLink& w : s.wan) {
      auto a = component.find(w.from);
      auto b = component.find(w.to);
      if (a == component.end() || b == component.end() || a->second == b->second) continue;
      const int from = std::max(a->second, b->second);
      const int to = std::min(a->second, b->second);
      for (auto& [name, c] : component)
        if (c == from) c = to;
      changed = true;
    }
  }
  return component;
}

}  // namespace hgsim::core
