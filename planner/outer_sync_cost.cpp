#include "planner/outer_sync_cost.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "compress/codec_cost.hpp"
#include "models/transformer.hpp"
#include "sim/collectives.hpp"
#include "sim/outer_sync.hpp"
#include "sim/program.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::planner {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

// The cluster holding stage `stage` of pipeline `pipeline`.
int stage_cluster(const Context& ctx, const core::Plan& plan, std::size_t pipeline,
                  std::size_t stage) {
  return ctx.cluster_index(plan.pipelines[pipeline].stages[stage].cluster);
}

// One outer all-reduce of fragment `fragment`: every shard's lanes cross the WAN at once.
double fragment_time(const Context& ctx, const sim::ResolvedPlan& r, int fragment) {
  const auto& s = *ctx.scenario;
  const core::Plan& plan = r.plan;
  const int islands = static_cast<int>(plan.pipelines.size());
  const core::OuterSync& o = plan.outer_sync;
  const auto shards =
      sim::outer_shards(plan, *ctx.model, s.training.precision, fragment, o.fragments);
  const sim::WanCodec codec{r.choices.outer_sync_codec, s.training.precision, ctx.model->hidden};
  // Per WAN link, the bytes one ring step puts on it: every lane of every shard, each ring
  // edge (island i to i + 1) crossing its route's links.
  std::vector<double> step_load(ctx.wan_link_bandwidth.size(), 0);
  struct Edge {
    int from = 0, to = 0;
    sim::CodedTransfer coded;
  };
  std::vector<std::vector<Edge>> edges(shards.size());
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const auto& shard = shards[k];
    if (shard.lanes == 0) continue;
    const double chunk = shard.bytes / shard.lanes / islands;  // one ring step of one lane
    for (int i = 0; i < islands; ++i) {
      Edge e;
      e.from = stage_cluster(ctx, plan, i, shard.stage);
      e.to = stage_cluster(ctx, plan, (i + 1) % islands, shard.stage);
      e.coded = e.from == e.to
                    ? sim::CodedTransfer{chunk, 0, 0}
                    : sim::code_wan_transfer(codec, chunk, 1, *ctx.gpus[e.from], *ctx.gpus[e.to]);
      for (int l : ctx.wan_links[e.from][e.to])
        step_load[l] += e.coded.wire_bytes * shard.lanes * shard.tp;
      edges[k].push_back(e);
    }
  }
  double slowest = 0;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const auto& shard = shards[k];
    if (edges[k].empty()) continue;
    const double lane_bytes = shard.bytes / shard.lanes;
    // The ring's slowest edge sets its pace: its latency, its share of the route and the
    // codec at both ends.
    sim::Hop2 hop{infinity, 0};
    double ratio = 0, codec_s = 0;
    for (const Edge& e : edges[k]) {
      const double chunk = lane_bytes / islands;
      if (e.from == e.to) {
        const sim::Hop2 inside = nic_hop(s.clusters[e.from]);
        hop.bytes_per_s = std::min(hop.bytes_per_s, inside.bytes_per_s);
        hop.latency_s = std::max(hop.latency_s, inside.latency_s);
        continue;
      }
      double share = ctx.flow_cap[e.from][e.to];
      for (int l : ctx.wan_links[e.from][e.to])
        share = std::min(share, ctx.wan_link_bandwidth[l] * e.coded.wire_bytes / step_load[l]);
      hop.bytes_per_s = std::min(hop.bytes_per_s, share);
      hop.latency_s = std::max(hop.latency_s, ctx.latency[e.from][e.to]);
      ratio = std::max(ratio, e.coded.wire_bytes / chunk);
      codec_s = std::max(codec_s, e.coded.encode_s + e.coded.decode_s);
    }
    if (ratio == 0) ratio = 1;  // no edge crosses the WAN: nothing is coded
    double gather = 0;
    for (int i = 0; i < islands; ++i)
      // Inside island i the holders of the shard all-gather it, on the hop the placement
      // gives their ring (sim::stage_ring_hop).
      gather = std::max(gather, sim::ring_all_gather_time(shard.holders[i], shard.bytes,
                                                          sim::stage_ring_hop(r, i, shard.stage)));
    slowest =
        std::max(slowest, sim::outer_lane_time(islands, lane_bytes, hop, ratio, codec_s) + gather);
  }
  return slowest;
}

}  // namespace

OuterSyncEstimate estimate_outer_sync(const Context& ctx, const core::Plan& plan) {
  OuterSyncEstimate out;
  const core::OuterSync& o = plan.outer_sync;
  out.inner.fits = true;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    core::Plan island = plan;
    island.outer_sync = core::OuterSync{};
    island.pipelines = {plan.pipelines[i]};
    Estimate e = estimate(ctx, island);
    out.inner_s = std::max(out.inner_s, e.iteration_s);
    if (!e.fits && out.inner.fits) {
      out.inner.fits = false;
      out.inner.not_fitting = e.not_fitting;
    }
    // Memory: the outer state (parameter snapshot and momentum) on every GPU of the island.
    for (std::size_t st = 0; st < e.pipelines.front().stages.size() && !e.pipelines.empty(); ++st) {
      StageEstimate& se = e.pipelines.front().stages[st];
      se.memory_bytes += sim::outer_state_bytes(
                             models::stage_parameters(*ctx.model, models::stage_spec(plan, i, st)))
                             .value();
      if (se.memory_bytes > se.capacity_bytes && out.inner.fits) {
        out.inner.fits = false;
        out.inner.not_fitting = "pipelines[" + std::to_string(i) + "].stages[" +
                                std::to_string(st) + "] (with DiLoCo's outer state)";
      }
    }
    for (auto& pe : e.pipelines) out.inner.pipelines.push_back(std::move(pe));
  }
  const int H = std::max(o.inner_steps, 1);
  // The placement and the outer-sync codec, as the simulator resolves them.
  core::Diagnostics diags;
  const auto resolved =
      sim::resolve_plan(*ctx.scenario, *ctx.model, ctx.compression, plan, "", diags);
  for (int f = 0; f < o.fragments; ++f) {
    const double t = resolved ? fragment_time(ctx, *resolved, f) : infinity;
    out.fragment_s.push_back(t);
    out.exposed_per_round_s +=
        o.fragments == 1 ? t : std::max(0.0, t - o.overlap_steps * out.inner_s);
  }
  out.iteration_s = out.inner_s + out.exposed_per_round_s / H;
  out.inner.iteration_s = out.iteration_s;
  return out;
}

Estimate estimate_plan(const Context& ctx, const core::Plan& plan) {
  if (!plan.outer_sync.enabled()) return estimate(ctx, plan);
  return estimate_outer_sync(ctx, plan).inner;
}

std::vector<core::Plan> outer_sync_variants(const Context& ctx, const core::Plan& plan) {
  const core::Scenario& s = *ctx.scenario;
  const core::PlannerSettings& settings = s.planner;
  if (!settings.allows_diloco() || plan.pipelines.size() < 2 || plan.outer_sync.enabled())
    return {};
  // The simulator plays outer sync at full fidelity only.
  const core::Fidelity fidelity = s.simulation.fidelity == core::Fidelity::automatic
                                      ? sim::automatic_fidelity(sim::used_gpus(plan))
                                      : s.simulation.fidelity;
  if (fidelity != core::Fidelity::full) return {};
  // Islands are places: pipelines sharing a cluster (a group whose replicas split into two
  // entries) are not two islands.
  std::vector<std::set<std::string>> used(plan.pipelines.size());
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    for (const auto& st : plan.pipelines[i].stages) used[i].insert(st.cluster);
    for (std::size_t j = 0; j < i; ++j)
      for (const auto& c : used[i])
        if (used[j].count(c)) return {};
  }
  core::Diagnostics check;
  core::Plan probe = plan;
  probe.outer_sync.method = core::OuterSyncMethod::diloco;
  core::check_outer_sync(probe, s, ctx.model->layers, "", check);
  if (check.has_errors()) return {};
  std::vector<core::Plan> out;
  for (int H : settings.inner_steps)
    for (int F : settings.fragments) {
      if (H % F != 0 || F > ctx.model->layers) continue;
      core::Plan v = plan;
      v.outer_sync.method = core::OuterSyncMethod::diloco;
      v.outer_sync.inner_steps = H;
      v.outer_sync.fragments = F;
      v.outer_sync.overlap_steps = F > 1 ? std::min(settings.overlap_steps, H / F) : 1;
      // Pseudo-gradients cross the WAN as the scenario lets gradients cross it (none with
      // hgsim plan --no-compression).
      if (ctx.compression.wan_gradients.kind != compress::CodecKind::none)
        v.outer_sync.codec = s.compression.wan_gradients;
      out.push_back(std::move(v));
    }
  return out;
}

double token_efficiency(const Context& ctx, const core::Plan& plan) {
  return plan.outer_sync.enabled() ? ctx.scenario->planner.diloco_token_efficiency : 1.0;
}

std::string token_efficiency_source(const Context& ctx) {
  return core::diloco_token_efficiency_source(*ctx.scenario);
}

}  // namespace hgsim::planner
