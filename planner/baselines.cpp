#include "planner/baselines.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "models/transformer.hpp"
#include "planner/space.hpp"

namespace hgsim::planner {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();
// "As fast as the fabric" for the baselines planned blind to the WAN (megatron, metis-like):
// 1 PB/s, far above any NIC or NVLink, yet finite so that bytes / bandwidth stays a number.
constexpr double free_link_bytes_per_s = 1e15;
// DT-FM's evolutionary search: a fixed seed (any fixed value: the baseline's plan must be the
// same run to run), a population of 8 (the uniform assignment and 7 shuffles), 20 generations,
// each keeping the 4 fittest and adding one mutated child of each (1 to 3 swaps).
constexpr std::uint32_t dtfm_seed = 20220601;
constexpr int dtfm_shuffled = 7;
constexpr int dtfm_generations = 20;
constexpr std::size_t dtfm_elite = 4;
constexpr int dtfm_max_swaps = 3;

compress::CompressionSpecs no_compression() {
  return {};
}

// Records the baseline's plan; run_baselines() simulates every recorded plan side by side
// (under the baseline's own `compression`) and fills in the results.
void record(Baseline& b, const core::Plan& plan, double analytic_s) {
  b.plan = plan;
  b.analytic_s = analytic_s;
  b.description = describe(plan);
}

std::vector<int> uniform_layers(int layers, int stages) {
  std::vector<int> out(stages, layers / stages);
  for (int s = 0; s < layers % stages; ++s) ++out[stages - 1 - s];
  return out;
}

bool fits(const Context& ctx, const core::Plan& plan) {
  return estimate(ctx, plan).fits;
}

// ---- megatron ---------------------------------------------------------------------------

Baseline megatron(const Context& ctx, const Options& options) {
  Baseline b;
  b.name = "megatron";
  b.compression = no_compression();
  const auto& s = *ctx.scenario;
  // The slowest GPU type with the least memory, everywhere; the WAN as fast as the fabric.
  const kernels::GpuSpec* slowest = ctx.gpus[0];
  double least_memory = infinity;
  for (const auto* g : ctx.gpus) {
    const double rate = kernels::math_rate(*g, s.training.precision)->rate.value();
    if (rate < kernels::math_rate(*slowest, s.training.precision)->rate.value()) slowest = g;
    least_memory = std::min(least_memory, g->memory.value());
  }
  kernels::GpuSpec homogeneous = *slowest;
  homogeneous.memory = core::Bytes(least_memory);
  Context naive = ctx;
  naive.compression = no_compression();
  for (auto& g : naive.gpus) g = &homogeneous;
  for (auto& row : naive.latency) std::fill(row.begin(), row.end(), 0.0);
  for (auto& row : naive.wan_bandwidth) std::fill(row.begin(), row.end(), free_link_bytes_per_s);
  for (auto& row : naive.flow_cap) std::fill(row.begin(), row.end(), free_link_bytes_per_s);
  for (auto& l : naive.wan_link_bandwidth) l = free_link_bytes_per_s;

  int common_node = 0;
  for (const auto& c : s.clusters) common_node = std::gcd(common_node, c.gpus_per_node);
  const int L = ctx.model->layers;
  std::vector<int> gpus;  // per cluster
  int total = 0;
  for (const auto& c : s.clusters) {
    gpus.push_back(c.gpu_count());
    total += c.gpu_count();
  }
  double best = infinity;
  core::Plan best_plan;
  for (int tp : tp_options(ctx, 0)) {
    if (common_node % tp != 0) continue;
    for (int pp = 1; pp <= L; ++pp) {
      if (L % pp != 0) continue;
      for (int dp = total / (tp * pp); dp >= 1; --dp) {
        // Stage k takes GPUs [k dp tp, (k + 1) dp tp) in scenario order; it must not
        // straddle two clusters.
        core::Pipeline pipeline;
        pipeline.replicas = dp;
        int cluster = 0, offset = 0;
        bool ok = true;
        for (int k = 0; k < pp && ok; ++k) {
          while (cluster < static_cast<int>(gpus.size()) && offset + dp * tp > gpus[cluster]) {
            if (offset > 0 && offset < gpus[cluster]) ok = false;
            ++cluster;
            offset = 0;
          }
          if (cluster >= static_cast<int>(gpus.size())) ok = false;
          if (!ok) break;
          pipeline.stages.push_back({s.clusters[cluster].name, tp, 1, L / pp});
          offset += dp * tp;
        }
        if (!ok) continue;
        for (int mb : options.micro_batches) {
          if (s.training.global_batch % (mb * dp) != 0) continue;
          core::Plan plan = plan_skeleton(core::Schedule::one_f_one_b, mb, 1);
          pipeline.micro_batches = s.training.global_batch / (mb * dp);
          plan.pipelines = {pipeline};
          const Estimate e = estimate(naive, plan);
          if (e.fits && e.iteration_s < best) {
            best = e.iteration_s;
            best_plan = plan;
          }
        }
        break;  // the largest dp that places is Megatron's choice for this tp and pp
      }
    }
  }
  if (best == infinity) {
    b.why =
        "no uniform tp x pp x dp layout fits in the smallest GPU memory with uniform layers "
        "and stages inside clusters";
    return b;
  }
  if (!fits(ctx, best_plan)) {
    b.why = "its plan does not fit in memory";
    return b;
  }
  record(b, best_plan, estimate(ctx, best_plan).iteration_s);
  return b;
}

// ---- dp-only ----------------------------------------------------------------------------

Baseline dp_only(const Context& ctx, const Options& options, bool codec) {
  Baseline b;
  b.name = codec ? "dp-only+codec" : "dp-only";
  b.compression = no_compression();
  if (codec) b.compression.wan_gradients = ctx.compression.wan_gradients;
  Context with = ctx;
  with.compression = b.compression;
  const auto& s = *ctx.scenario;
  const int L = ctx.model->layers;
  MemoryLimits limits(ctx);
  double best = infinity;
  core::Plan best_plan;
  std::string why = "no micro-batch size divides the global batch";
  for (int mb : options.micro_batches) {
    if (s.training.global_batch % mb != 0) continue;
    // Per cluster: replicas of the whole model, each the smallest tensor-parallel group
    // inside a node that holds it; a cluster where none does stays idle. The plan runs
    // Megatron's distributed optimizer (plan_skeleton's zero), so the group is sized with
    // its optimizer state sharded over the cluster's replicas; sharing the batch can leave
    // an entry fewer replicas than that, so the group sized without sharding is costed too
    // and the faster plan that fits is kept.
    for (const int sized_zero : {least_zero, 0}) {
      std::vector<core::Pipeline> groups;
      std::string too_small;
      for (std::size_t c = 0; c < s.clusters.size(); ++c) {
        for (int tp : tp_options(ctx, static_cast<int>(c))) {
          models::StageSpec spec;
          spec.layers = L;
          spec.tp = tp;
          spec.micro_batch = mb;
          spec.zero = sized_zero;
          spec.zero_shards = s.clusters[c].gpu_count() / tp;
          if (limits.max_layers(static_cast<int>(c), spec) < L) continue;
          core::Pipeline p;
          p.replicas = s.clusters[c].gpu_count() / tp;
          p.stages = {{s.clusters[c].name, tp, 1, L}};
          groups.push_back(p);
          break;
        }
        if (groups.empty() || groups.back().stages[0].cluster != s.clusters[c].name)
          too_small += (too_small.empty() ? "" : ", ") + s.clusters[c].name;
      }
      if (groups.empty()) {
        why = "no node of any cluster holds the whole model and its training state (" + too_small +
              ": even tp = gpus_per_node does not fit)";
        continue;
      }
      core::Plan plan = plan_skeleton(core::Schedule::one_f_one_b, mb, 1);
      plan.pipelines =
          share_batch(groups, std::vector<double>(groups.size(), 0),
                      std::vector<double>(groups.size(), 1), s.training.global_batch / mb);
      if (plan.pipelines.empty()) continue;  // more replicas than micro-batches of this size
      const Estimate e = estimate(with, plan);
      if (e.fits && e.iteration_s < best) {
        best = e.iteration_s;
        best_plan = plan;
      }
    }
  }
  if (best == infinity) {
    b.why = why;
    return b;
  }
  record(b, best_plan, best);
  return b;
}

// ---- pipeline-uniform -------------------------------------------------------------------

Baseline pipeline_uniform(const Context& ctx, const Options& options) {
  Baseline b;
  b.name = "pipeline-uniform";
  b.compression = ctx.compression;
  const auto& s = *ctx.scenario;
  std::vector<int> all(s.clusters.size());
  std::iota(all.begin(), all.end(), 0);
  const auto orders = pipeline_orders(ctx, all, 1);
  if (orders.empty()) {
    b.why = "the WAN does not join the clusters in a path";
    return b;
  }
  const int L = ctx.model->layers;
  int min_gpus = 1 << 30;
  for (const auto& c : s.clusters) min_gpus = std::min(min_gpus, c.gpu_count());
  double best = infinity;
  core::Plan best_plan;
  for (int mb : options.micro_batches) {
    if (s.training.global_batch % mb != 0) continue;
    const int total = s.training.global_batch / mb;
    for (int R : replica_options(min_gpus)) {
      if (R > total) break;
      // The same tp everywhere (the largest that divides every node), dp 1.
      std::vector<ClusterShape> path;
      int p = 0;
      for (int c : orders[0]) {
        for (int tp : tp_options(ctx, c)) {
          const int stages = s.clusters[c].gpu_count() / R / tp;
          if (stages < 1) continue;
          path.push_back({c, tp, 1, stages});
          break;  // smallest tp: as many stages as the GPUs give
        }
      }
      for (auto& sh : path) p += sh.stages;
      if (path.size() != orders[0].size()) continue;
      while (p > L) {  // fewer stages on the biggest cluster until they fit the layers
        auto big = std::max_element(path.begin(), path.end(), [](const auto& a, const auto& c) {
          return a.stages < c.stages;
        });
        if (big->stages <= 1) break;
        --big->stages;
        --p;
      }
      if (p > L) continue;
      core::Pipeline pipeline;
      pipeline.replicas = R;
      const auto layers = uniform_layers(L, p);
      int k = 0;
      for (const auto& sh : path)
        for (int j = 0; j < sh.stages; ++j)
          pipeline.stages.push_back({s.clusters[sh.cluster].name, sh.tp, 1, layers[k++]});
      core::Plan plan = plan_skeleton(core::Schedule::one_f_one_b, mb, 1);
      plan.pipelines = share_batch({pipeline}, {0.0}, {1.0}, total);
      if (plan.pipelines.empty()) continue;
      const Estimate e = estimate(ctx, plan);
      if (e.fits && e.iteration_s < best) {
        best = e.iteration_s;
        best_plan = plan;
      }
    }
  }
  if (best == infinity) {
    b.why = "no pipeline over every cluster with uniform layers fits in memory";
    return b;
  }
  record(b, best_plan, best);
  return b;
}

// ---- metis-like -------------------------------------------------------------------------

Baseline metis_like(const Context& ctx, const Options& options) {
  Baseline b;
  b.name = "metis-like";
  b.compression = no_compression();
  Context blind = ctx;
  blind.compression = no_compression();
  for (auto& row : blind.latency)
    for (double& v : row) v = std::isinf(v) ? v : 0.0;
  for (auto& row : blind.wan_bandwidth)
    for (double& v : row) v = v > 0 ? free_link_bytes_per_s : 0.0;
  for (auto& row : blind.flow_cap)
    for (double& v : row) v = v > 0 ? free_link_bytes_per_s : 0.0;
  for (auto& l : blind.wan_link_bandwidth) l = free_link_bytes_per_s;
  Options quick = options;
  quick.progress = nullptr;
  const SearchResult r = search(blind, quick);
  if (r.ranked.empty()) {
    b.why = "no heterogeneous plan fits in memory";
    return b;
  }
  const core::Plan& plan = r.ranked.front().plan;
  Context real = ctx;
  real.compression = no_compression();
  record(b, plan, estimate(real, plan).iteration_s);
  return b;
}

// ---- dtfm -------------------------------------------------------------------------------

Baseline dtfm(const Context& ctx, const Options& options) {
  Baseline b;
  b.name = "dtfm";
  b.compression = no_compression();
  Context real = ctx;
  real.compression = no_compression();
  const auto& s = *ctx.scenario;
  const int L = ctx.model->layers;
  std::mt19937 rng(dtfm_seed);
  double best = infinity;
  core::Plan best_plan;
  const auto start = std::chrono::steady_clock::now();
  int common_node = 0;
  for (const auto& c : s.clusters) common_node = std::gcd(common_node, c.gpus_per_node);
  for (int tp : tp_options(ctx, 0)) {
    if (common_node % tp != 0) continue;
    std::vector<int> slots;  // one entry per tp group of every cluster
    for (std::size_t c = 0; c < s.clusters.size(); ++c)
      for (int k = 0; k < s.clusters[c].gpu_count() / tp; ++k) slots.push_back(static_cast<int>(c));
    for (int p = 1; p <= L; ++p) {
      if (L % p != 0) continue;
      const int D = static_cast<int>(slots.size()) / p;
      if (D < 1 || s.training.global_batch % D != 0) continue;
      // Genome: a permutation of the slots; tasklet (d, st) runs on slot d p + st.
      auto plan_of = [&](const std::vector<int>& genome) {
        core::Plan plan = plan_skeleton(core::Schedule::one_f_one_b, 1, 1);
        for (int d = 0; d < D; ++d) {
          core::Pipeline pipeline;
          pipeline.micro_batches = s.training.global_batch / D;
          for (int st = 0; st < p; ++st)
            pipeline.stages.push_back({s.clusters[genome[d * p + st]].name, tp, 1, L / p});
          plan.pipelines.push_back(std::move(pipeline));
        }
        return plan;
      };
      auto fitness = [&](const std::vector<int>& genome) {
        const Estimate e = estimate(real, plan_of(genome));
        return e.fits ? e.iteration_s : infinity;
      };
      std::vector<std::pair<double, std::vector<int>>> population;
      population.emplace_back(fitness(slots), slots);
      if (population.front().first == infinity) continue;  // uniform stages do not fit
      for (int k = 0; k < dtfm_shuffled; ++k) {
        auto g = slots;
        std::shuffle(g.begin(), g.end(), rng);
        population.emplace_back(fitness(g), g);
      }
      for (int generation = 0; generation < dtfm_generations; ++generation) {
        std::sort(population.begin(), population.end());
        population.resize(dtfm_elite);
        for (std::size_t child = 0; child < dtfm_elite; ++child) {
          auto g = population[child].second;
          std::uniform_int_distribution<std::size_t> pick(0, g.size() - 1);
          for (int swaps = 1 + static_cast<int>(child) % dtfm_max_swaps; swaps > 0; --swaps)
            std::swap(g[pick(rng)], g[pick(rng)]);
          population.emplace_back(fitness(g), g);
        }
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            options.time_budget_s)
          break;
      }
      std::sort(population.begin(), population.end());
      if (population.front().first < best) {
        best = population.front().first;
        best_plan = plan_of(population.front().second);
      }
    }
  }
  if (best == infinity) {
    b.why = "no uniform assignment of tasklets fits in memory";
    return b;
  }
  record(b, best_plan, best);
  return b;
}

}  // namespace

std::vector<Baseline> run_baselines(const Context& ctx, const Options& options) {
  std::vector<Baseline> out;
  out.push_back(megatron(ctx, options));
  out.push_back(dp_only(ctx, options, false));
  if (ctx.compression.wan_gradients.kind != compress::CodecKind::none)
    out.push_back(dp_only(ctx, options, true));
  out.push_back(pipeline_uniform(ctx, options));
  out.push_back(metis_like(ctx, options));
  out.push_back(dtfm(ctx, options));
  // Every baseline that found a plan is simulated, side by side.
  std::vector<Context> contexts;
  std::vector<Candidate> candidates;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Baseline& b = out[i];
    if (!b.plan || !b.why.empty()) continue;
    Context with = ctx;
    with.compression = b.compression;
    contexts.push_back(with);
    candidates.push_back({*b.plan, b.analytic_s, b.description});
    which.push_back(i);
  }
  std::vector<const Context*> context_of;
  for (const Context& c : contexts) context_of.push_back(&c);
  std::vector<core::Diagnostics> diags;
  auto results = simulate_candidates(context_of, candidates, options, diags);
  for (std::size_t k = 0; k < which.size(); ++k) {
    Baseline& b = out[which[k]];
    if (!results[k]) {
      b.feasible = false;
      b.why = "cannot be simulated: " + diags[k].format();
      continue;
    }
    b.feasible = true;
    b.simulated_s = results[k]->simulated_s;
    b.result = std::move(results[k]->result);
  }
  return out;
}

std::string adopt_faster_baselines(const Context& ctx, const Options& options,
                                   const std::vector<Baseline>& baselines, SearchResult& result) {
  // Every baseline faster than the best plan is simulated with the scenario's codecs, side
  // by side; then they are taken in order, as one at a time would.
  std::vector<Candidate> candidates;
  std::vector<const Baseline*> of;
  for (const Baseline& b : baselines) {
    if (!b.feasible || !b.plan) continue;
    if (result.best && b.simulated_s >= result.best->effective_s()) continue;
    candidates.push_back({*b.plan, estimate(ctx, *b.plan).iteration_s, describe(*b.plan)});
    of.push_back(&b);
  }
  std::vector<core::Diagnostics> diags;
  auto results = simulate_candidates(ctx, candidates, options, diags);
  std::string adopted;
  for (std::size_t k = 0; k < of.size(); ++k) {
    // Baselines are synchronous: their time is their time to the same progress.
    if (result.best && of[k]->simulated_s >= result.best->effective_s()) continue;
    if (!results[k]) continue;
    if (!result.best || results[k]->simulated_s < result.best->effective_s()) {
      result.best_synchronous.reset();  // the best is synchronous now
      result.verified.push_back(*results[k]);
      result.best = std::move(*results[k]);
      adopted = of[k]->name;
    }
  }
  return adopted;
}

}  // namespace hgsim::planner
