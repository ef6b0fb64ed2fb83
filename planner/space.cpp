#include "planner/space.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>

#include "models/transformer.hpp"

namespace hgsim::planner {

std::vector<int> tp_options(const Context& ctx, int cluster) {
  const auto& m = *ctx.model;
  std::vector<int> out;
  const int per_node = ctx.scenario->clusters[cluster].gpus_per_node;
  for (int tp = 1; tp <= per_node; ++tp)
    if (per_node % tp == 0 && m.heads % tp == 0 && m.kv_heads % tp == 0 && m.ffn_hidden % tp == 0)
      out.push_back(tp);
  return out;
}

std::vector<int> cp_options(const Context& ctx) {
  std::vector<int> out{1};
  const auto& t = ctx.scenario->training;
  if (t.attention != core::Attention::flash) return out;
  for (int cp = 2; 2 * cp <= t.seq_len; cp *= 2)
    if (t.seq_len % (2 * cp) == 0) out.push_back(cp);
  return out;
}

std::vector<int> dp_options(int micro_batch) {
  std::vector<int> out;
  for (int dp = 1; dp <= micro_batch; ++dp)
    if (micro_batch % dp == 0) out.push_back(dp);
  return out;
}

// Powers of two and three times powers of two (1, 2, 3, 4, 6, 8, 12, ...): replica counts
// that divide common node and cluster sizes; from 2 on each is at most 1.5x the one before.
std::vector<int> replica_options(int max) {
  std::vector<int> out;
  for (int base : {1, 3})
    for (int r = base; r <= max; r *= 2) out.push_back(r);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Orders of clusters along a pipeline are ranked by the time one gigabyte takes across each
// boundary (latency + bytes / bandwidth): a stage boundary carries hundreds of megabytes to a
// few gigabytes per iteration, so bandwidth dominates and latency breaks ties.
constexpr double order_probe_bytes = 1e9;
// Every order of up to this many clusters is tried (10! = 3.6 million, about a tenth of a
// second); a longer path (the pipeline-uniform baseline over every cluster) takes the
// greedy order from each starting cluster instead (next the cheapest crossing not yet
// taken), since 11! orders and more take minutes to hours.
constexpr std::size_t every_order_clusters = 10;

namespace {

// The crossing cost of `order`, or nullopt when two consecutive clusters are not joined.
std::optional<double> order_cost(const Context& ctx, const std::vector<int>& order) {
  double cost = 0;
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const int a = order[k], b = order[k + 1];
    if (!ctx.connected[a][b]) return std::nullopt;
    cost += ctx.latency[a][b] + order_probe_bytes / ctx.wan_bandwidth[a][b];
  }
  return cost;
}

// From each cluster in turn: next the joined cluster not yet taken with the cheapest
// crossing (the lowest index among equals).
std::vector<std::vector<int>> greedy_orders(const Context& ctx, const std::vector<int>& clusters) {
  std::vector<std::vector<int>> out;
  for (int start : clusters) {
    std::vector<int> order{start};
    std::vector<int> left;
    for (int c : clusters)
      if (c != start) left.push_back(c);
    while (!left.empty()) {
      const int a = order.back();
      auto next = left.end();
      for (auto it = left.begin(); it != left.end(); ++it)
        if (ctx.connected[a][*it] &&
            (next == left.end() ||
             ctx.latency[a][*it] + order_probe_bytes / ctx.wan_bandwidth[a][*it] <
                 ctx.latency[a][*next] + order_probe_bytes / ctx.wan_bandwidth[a][*next]))
          next = it;
      if (next == left.end()) break;
      order.push_back(*next);
      left.erase(next);
    }
    if (left.empty()) out.push_back(std::move(order));
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> pipeline_orders(const Context& ctx, const std::vector<int>& clusters,
                                              int limit) {
  std::vector<int> order = clusters;
  std::sort(order.begin(), order.end());
  // Only the `limit` cheapest are held (ties in enumeration order), never every joined order:
  // ten clusters have 3.6 million.
  std::vector<std::pair<double, std::vector<int>>> found;
  if (limit < 1) return {};
  auto consider = [&](const std::vector<int>& candidate) {
    const auto cost = order_cost(ctx, candidate);
    if (!cost) return;
    if (static_cast<int>(found.size()) >= limit && *cost >= found.back().first) return;
    const auto at = std::upper_bound(found.begin(), found.end(), *cost,
                                     [](double c, const auto& f) { return c < f.first; });
    found.emplace(at, *cost, candidate);
    if (static_cast<int>(found.size()) > limit) found.pop_back();
  };
  if (order.size() > every_order_clusters) {
    for (const auto& greedy : greedy_orders(ctx, order)) consider(greedy);
  } else {
    do consider(order);
    while (std::next_permutation(order.begin(), order.end()));
  }
  std::vector<std::vector<int>> out;
  for (auto& [cost, o] : found) out.push_back(std::move(o));
  return out;
}

std::vector<ClusterShape> cluster_shapes(const Context& ctx, int cluster, int gpus, int micro_batch,
                                         int max_stages, int limit, bool wide) {
  struct Scored {
    ClusterShape shape;
    double throughput;
  };
  std::vector<Scored> all;
  const std::vector<int> cps = wide ? cp_options(ctx) : std::vector<int>{1};
  std::vector<int> dps = dp_options(micro_batch);
  if (!wide && dps.size() > 2) dps = {1, micro_batch};
  for (int tp : tp_options(ctx, cluster))
    for (int dp : dps)
      for (int cp : cps) {
        // A ring inside one node (NVLink): a ring across nodes exposes its exchanges on the
        // NIC, and the search does not try it.
        if (tp * cp > ctx.scenario->clusters[cluster].gpus_per_node) break;
        const int stages = gpus / (tp * dp * cp);
        if (stages < 1 || stages > max_stages) continue;
        const LayerCost c =
            layer_cost(ctx, cluster, tp, dp, micro_batch, search_tp_comm_overlap, cp);
        all.push_back({{cluster, tp, dp, stages, cp}, stages / (c.forward_s + c.backward_s)});
      }
  if (all.empty()) return {};
  std::vector<ClusterShape> out;
  std::stable_sort(all.begin(), all.end(),
                   [](const Scored& a, const Scored& b) { return a.throughput > b.throughput; });
  for (int k = 0; k < std::min<int>(limit - 1, all.size()); ++k) out.push_back(all[k].shape);
  const auto fewest =
      std::min_element(all.begin(), all.end(), [](const Scored& a, const Scored& b) {
        return a.shape.stages < b.shape.stages ||
               (a.shape.stages == b.shape.stages && a.throughput > b.throughput);
      });
  bool have = false;
  for (const auto& s : out)
    have =
        have || (s.tp == fewest->shape.tp && s.dp == fewest->shape.dp && s.cp == fewest->shape.cp);
  if (!have) out.push_back(fewest->shape);
  return out;
}

// boost::hash_combine's mixing over the key's fields.
std::size_t MemoryLimits::KeyHash::operator()(const Key& key) const {
  std::size_t h = 0;
  for (std::uint64_t field : key)
    h ^= std::hash<std::uint64_t>{}(field) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

int MemoryLimits::max_layers(int cluster, const models::StageSpec& spec) {
  const int in_flight = models::micro_batches_in_flight(spec);
  const bool first = spec.stage_index == 0;
  const bool last = spec.stage_index == spec.stages - 1;
  const Key key = {std::uint64_t(cluster),
                   std::uint64_t(spec.tp),
                   std::uint64_t(spec.dp),
                   std::uint64_t(spec.cp),
                   std::uint64_t(spec.micro_batch),
                   std::uint64_t(spec.schedule),
                   std::uint64_t(spec.virtual_stages),
                   std::uint64_t(in_flight),
                   std::uint64_t(first),
                   std::uint64_t(last),
                   std::uint64_t(spec.zero),
                   std::uint64_t(spec.zero_shards),
                   std::uint64_t(spec.sequence_parallel)};
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const double capacity = ctx_.gpus[cluster]->memory.value();
  auto fits = [&](int layers) {
    models::StageSpec s = spec;
    s.layers = layers;
    return models::stage_memory(*ctx_.model, ctx_.scenario->training, s).total.value() <= capacity;
  };
  int lo = 0, hi = ctx_.model->layers;
  if (fits(hi)) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
  }
  memo_[key] = lo;
  return lo;
}

std::vector<PartitionedPipeline> make_pipelines(const Context& ctx, MemoryLimits& limits,
                                                const GroupConfig& group, int micro_batch,
                                                core::Schedule schedule, int virtual_stages,
                                                int micro_batches) {
  core::Pipeline pipeline;
  pipeline.replicas = group.replicas;
  pipeline.micro_batches = micro_batches;
  int p = 0;
  for (const auto& shape : group.path) p += shape.stages;
  std::vector<StageShape> shapes;
  std::vector<models::StageSpec> specs;  // what each stage's memory depends on
  std::vector<int> clusters;
  shapes.reserve(p);
  const int v = schedule == core::Schedule::interleaved ? virtual_stages : 1;
  for (const auto& shape : group.path) {
    const LayerCost c = layer_cost(ctx, shape.cluster, shape.tp, shape.dp, micro_batch,
                                   search_tp_comm_overlap, shape.cp);
    for (int k = 0; k < shape.stages; ++k) {
      models::StageSpec spec;
      spec.schedule = schedule;
      spec.stages = p;
      spec.stage_index = static_cast<int>(shapes.size());
      spec.micro_batches = micro_batches;
      spec.virtual_stages = v;
      spec.tp = shape.tp;
      spec.dp = shape.dp;
      spec.cp = shape.cp;
      spec.micro_batch = micro_batch;
      // As plan_skeleton chooses: no sequence parallelism (choose_recompute_and_codecs tries
      // it on the best candidates); the ZeRO stage is set per partition below.
      spec.zero_shards = group.replicas * shape.dp * shape.cp;
      StageShape s;
      s.per_layer_s = c.forward_s + c.backward_s;
      if (spec.stage_index == p - 1)
        s.extra_s = logits_cost(ctx, shape.cluster, shape.tp, shape.dp, micro_batch);
      shapes.push_back(s);
      specs.push_back(spec);
      clusters.push_back(shape.cluster);
      pipeline.stages.push_back(
          {ctx.scenario->clusters[shape.cluster].name, shape.tp, shape.dp, 0, shape.cp});
    }
  }
  // Least sharding first: a higher stage's partition is kept only when its slowest stage
  // is faster than every partition before it (its memory limits let faster GPUs take more
  // layers), and tried only while memory binds the partition before it; where the layers
  // fit as well under ZeRO-1 the group gets one pipeline, as before ZeRO was searched.
  std::vector<PartitionedPipeline> out;
  double slowest_so_far = std::numeric_limits<double>::infinity();
  for (int zero = least_zero; zero <= most_zero; ++zero) {
    bool limits_moved = zero == least_zero;
    for (int s = 0; s < p; ++s) {
      specs[s].zero = zero;
      const int cap = limits.max_layers(clusters[s], specs[s]);
      limits_moved = limits_moved || cap != shapes[s].max_layers;
      shapes[s].max_layers = cap;
    }
    if (!limits_moved) continue;
    const auto layers = partition_layers(shapes, ctx.model->layers, v);
    if (layers.empty()) continue;
    const double slowest = slowest_stage(shapes, layers);
    if (slowest < slowest_so_far) {
      slowest_so_far = slowest;
      PartitionedPipeline partitioned{pipeline, zero};
      for (int s = 0; s < p; ++s) partitioned.pipeline.stages[s].layers = layers[s];
      out.push_back(std::move(partitioned));
    }
    if (!memory_binds(shapes, layers, v)) break;
  }
  return out;
}

std::vector<core::Pipeline> share_batch(const std::vector<core::Pipeline>& groups,
                                        const std::vector<double>& fill,
                                        const std::vector<double>& period, int total) {
  const std::size_t n = groups.size();
  std::vector<int> share(n, 0);
  int given = 0;
  for (std::size_t g = 0; g < n; ++g) {
    share[g] = groups[g].replicas;
    given += share[g];
  }
  if (given > total) return {};
  if (n == 1) share[0] = given = total;  // what the loop below would give, at once
  auto finish = [&](std::size_t g, int q) {
    const int per_replica = (q + groups[g].replicas - 1) / groups[g].replicas;
    return fill[g] + (per_replica - 1) * period[g];
  };
  // One micro-batch at a time to the group that would still end first (the first such group
  // among equals). The group chosen keeps that end for its next micro-batches until each of
  // its replicas has one more, and stays the first group of the least end meanwhile, so the
  // loop gives it that whole row at once: the same shares, one step per row.
  while (given < total) {
    std::size_t best = 0;
    double best_end = std::numeric_limits<double>::infinity();
    for (std::size_t g = 0; g < n; ++g) {
      const double end = finish(g, share[g] + 1);
      if (end < best_end) {
        best_end = end;
        best = g;
      }
    }
    const int row_left = groups[best].replicas - share[best] % groups[best].replicas;
    const int step = std::min(row_left, total - given);
    share[best] += step;
    given += step;
  }
  std::vector<core::Pipeline> out;
  for (std::size_t g = 0; g < n; ++g) {
    const int r = groups[g].replicas;
    const int base = share[g] / r;
    const int extra = share[g] % r;
    if (r - extra > 0) {
      core::Pipeline p = groups[g];
      p.replicas = r - extra;
      p.micro_batches = base;
      out.push_back(std::move(p));
    }
    if (extra > 0) {
      core::Pipeline p = groups[g];
      p.replicas = extra;
      p.micro_batches = base + 1;
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace hgsim::planner
