#include "planner/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "compress/codec_cost.hpp"
#include "models/transformer.hpp"
#include "sim/collectives.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::planner {

sim::Hop2 nvlink_hop(const core::Cluster& c) {
  return {c.nvlink.bandwidth.value(), 2 * c.nvlink.latency.value()};
}

// As the simulator's workload generator: with an oversubscribed fabric every GPU of the
// node is taken to be sending at once.
sim::Hop2 nic_hop(const core::Cluster& c) {
  return {c.nic.bandwidth.value() / std::max(1.0, c.oversubscription), 2 * c.nic.latency.value()};
}

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

double slice_bytes(const Context& ctx, const sim::PlanChoices& choices, int dp, int micro_batch) {
  return sim::boundary_bytes(*ctx.model, choices, static_cast<double>(micro_batch) / dp);
}

// Per-layer forward and backward under a plan's choices (layer_cost is the scenario's).
LayerCost layer_cost_under(const Context& ctx, const sim::PlanChoices& choices, int cluster, int tp,
                           int dp, int micro_batch) {
  const auto work = sim::layer_work(*ctx.model, choices, micro_batch, tp, dp);
  const auto times = ctx.compute->layer(*ctx.gpus[cluster], work);
  // With or without sequence parallelism a tensor-parallel block moves the same bytes: an
  // all-reduce, or a reduce-scatter and an all-gather (sim/workload.cpp tp_comm).
  double all_reduce = 0;
  if (tp > 1)
    all_reduce = sim::ring_all_reduce_time(tp, slice_bytes(ctx, choices, dp, micro_batch),
                                           nvlink_hop(ctx.scenario->clusters[cluster]));
  const bool full = work.recompute == core::Recompute::full;
  return {times.forward.value() + 2 * all_reduce,
          times.backward.value() + times.recompute.value() + (full ? 4 : 2) * all_reduce};
}

// The codec of one traffic class applied to `share` bytes sent by a GPU of cluster `from`
// to one of cluster `to`: wire bytes, encode and decode seconds (compress::code_transfer).
struct Coded {
  double wire = 0;
  double encode = 0;
  double decode = 0;
};

Coded code(const Context& ctx, const compress::CodecSpec& spec, double share, int from, int to) {
  if (spec.kind == compress::CodecKind::none) return {share, 0, 0};
  const auto dtype = ctx.scenario->training.precision;
  const double elements = share / core::element_bytes(dtype);
  const std::int64_t columns = std::max(ctx.model->hidden, 1);
  const auto rows = static_cast<std::int64_t>(std::ceil(elements / columns));
  const std::vector<std::int64_t> shape{std::max<std::int64_t>(rows, 1), columns};
  const auto at_src = compress::code_transfer(spec, shape, dtype, *ctx.gpus[from]);
  const auto at_dst = compress::code_transfer(spec, shape, dtype, *ctx.gpus[to]);
  return {at_src.wire_bytes.value(), at_src.encode.value(), at_dst.decode.value()};
}

// Which nodes of its cluster each (pipeline, stage) occupies, and the cluster: from the
// resolved plan's placement (sim/resolved_plan.hpp), the simulator's.
struct NodeRange {
  int cluster = 0;
  int first = std::numeric_limits<int>::max();
  int last = -1;
  bool single() const { return first == last; }
};

std::vector<std::vector<NodeRange>> placement(const sim::ResolvedPlan& r) {
  std::vector<std::vector<NodeRange>> out(r.plan.pipelines.size());
  for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i)
    out[i].resize(r.plan.pipelines[i].stages.size());
  for (const sim::PlacedGroup& g : r.groups) {
    NodeRange& range = out[g.pipeline][g.stage];
    const int per_node = r.scenario->clusters[g.cluster].gpus_per_node;
    range.cluster = g.cluster;
    range.first = std::min(range.first, g.first_gpu / per_node);
    range.last = std::max(range.last, (g.first_gpu + g.tp - 1) / per_node);
  }
  return out;
}

struct Transfer {
  double seconds = 0;  // latency + bytes / bandwidth (+ receiver's tp all-gather)
  double port = 0;     // of which the GPUs' NIC (or NVLink) ports are busy
  double fixed = 0;    // latency and the receiver's all-gather
  double link = 0;     // the WAN's share (bytes / min(bandwidth, flows x window / RTT))
  double serial = 0;   // how long the link is busy with it (period bound)
  double encode = 0;   // at the sender, per micro-batch
  double decode = 0;   // at the receiver
  double wire = 0;     // bytes on the WAN (all replicas), 0 inside a cluster
  int from = 0, to = 0;
};

// One micro-batch's activations from stage a to stage b of pipeline i (the same bytes go
// back as gradients), all replicas at once.
Transfer stage_transfer(const Context& ctx, const sim::ResolvedPlan& r,
                        const core::Pipeline& pipeline, const core::Stage& a, const core::Stage& b,
                        const std::vector<sim::ReshardPiece>& reshard, const NodeRange& ra,
                        const NodeRange& rb) {
  const double total = r.boundary_bytes();
  const int ca = ra.cluster;
  const int cb = rb.cluster;
  const auto& cluster_b = ctx.scenario->clusters[cb];
  const int n_from = a.dp * a.tp;
  const int n_to = b.dp * b.tp;
  Transfer x;
  x.from = ca;
  x.to = cb;
  // Without sequence parallelism the receiver all-gathers its slice across tp.
  if (!r.choices.sequence_parallel && b.tp > 1)
    x.seconds += sim::ring_all_gather_time(b.tp, r.slice_bytes(b), nvlink_hop(cluster_b));
  const double ports = std::min(n_from, n_to);
  if (ca == cb) {
    const bool same_node = ra.single() && rb.single() && ra.first == rb.first;
    const auto hop = same_node ? nvlink_hop(cluster_b) : nic_hop(cluster_b);
    x.serial = total / ports / hop.bytes_per_s;
    x.port = x.serial;
    x.fixed = x.seconds + hop.latency_s;
    x.seconds += hop.latency_s + x.serial;
    return x;
  }
  const int pieces = static_cast<int>(reshard.size());
  const Coded c = code(ctx, r.choices.codecs.wan_activations, total / pieces, ca, cb);
  const double flows = static_cast<double>(pipeline.replicas) * pieces;
  x.wire = c.wire * flows;
  const double nic =
      std::min(ctx.scenario->clusters[ca].nic.bandwidth.value(), cluster_b.nic.bandwidth.value());
  const double bandwidth = std::min(
      {ctx.wan_bandwidth[ca][cb], flows * ctx.flow_cap[ca][cb], pipeline.replicas * ports * nic});
  x.serial = x.wire / std::min(ctx.wan_bandwidth[ca][cb], pipeline.replicas * ports * nic);
  x.port = x.wire / (pipeline.replicas * ports * nic);
  x.link = x.wire / std::min(ctx.wan_bandwidth[ca][cb], flows * ctx.flow_cap[ca][cb]);
  x.fixed = x.seconds + ctx.latency[ca][cb];
  x.seconds += ctx.latency[ca][cb] + x.wire / bandwidth;
  x.encode = c.encode;
  x.decode = c.decode;
  return x;
}

}  // namespace

int Context::cluster_index(const std::string& name) const {
  for (std::size_t c = 0; c < scenario->clusters.size(); ++c)
    if (scenario->clusters[c].name == name) return static_cast<int>(c);
  throw std::invalid_argument("planner: no cluster named '" + name + "' (a plan check_plan " +
                              "would have refused)");
}

Context make_context(const core::Scenario& s, const core::ModelConfig& model,
                     const compress::CompressionSpecs& compression,
                     const kernels::ComputeModel& compute) {
  Context ctx;
  ctx.scenario = &s;
  ctx.model = &model;
  ctx.compression = compression;
  ctx.compute = &compute;
  std::vector<sim::DeviceRequest> requests;
  for (std::size_t c = 0; c < s.clusters.size(); ++c) {
    const auto* gpu = kernels::find_gpu(s.clusters[c].gpu);
    if (!gpu) throw std::invalid_argument("unknown GPU " + s.clusters[c].gpu);
    ctx.gpus.push_back(gpu);
    requests.push_back({static_cast<int>(c), 0, 1});
  }
  core::Diagnostics ignored;  // clusters the WAN does not join are marked unconnected
  const sim::Platform platform = sim::build_platform(s, ctx.gpus, requests, ignored);
  const std::size_t n = s.clusters.size();
  ctx.latency.assign(n, std::vector<double>(n, 0));
  ctx.wan_bandwidth.assign(n, std::vector<double>(n, infinity));
  ctx.flow_cap.assign(n, std::vector<double>(n, infinity));
  ctx.wan_links.assign(n, std::vector<std::vector<int>>(n));
  ctx.connected.assign(n, std::vector<bool>(n, true));
  std::vector<int> link_index(platform.links.size(), -1);
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      const bool joined = a < platform.connected.size() && b < platform.connected[a].size() &&
                          platform.connected[a][b];
      ctx.connected[a][b] = joined;
      if (!joined) {
        ctx.latency[a][b] = infinity;
        ctx.wan_bandwidth[a][b] = 0;
        ctx.flow_cap[a][b] = 0;
        continue;
      }
      ctx.latency[a][b] = platform.route_latency(static_cast<int>(a), static_cast<int>(b));
      ctx.flow_cap[a][b] = platform.flow_cap(static_cast<int>(a), static_cast<int>(b));
      for (const sim::Hop& h : platform.wan_routes[a][b]) {
        const sim::Link& link = platform.links[h.link];
        if (link.kind != sim::LinkKind::wan) continue;
        if (link_index[h.link] < 0) {
          link_index[h.link] = static_cast<int>(ctx.wan_link_bandwidth.size());
          ctx.wan_link_bandwidth.push_back(link.bytes_per_s);
        }
        ctx.wan_links[a][b].push_back(link_index[h.link]);
        ctx.wan_bandwidth[a][b] = std::min(ctx.wan_bandwidth[a][b], link.bytes_per_s);
      }
    }
  return ctx;
}

LayerCost layer_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch) {
  return layer_cost_under(ctx, sim::scenario_choices(*ctx.scenario, ctx.compression), cluster, tp,
                          dp, micro_batch);
}

double logits_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch) {
  const auto work = sim::layer_work(
      *ctx.model, sim::scenario_choices(*ctx.scenario, ctx.compression), micro_batch, tp, dp);
  const auto times = ctx.compute->logits(*ctx.gpus[cluster], work);
  return times.forward.value() + times.backward.value();
}

Estimate estimate(const Context& ctx, const core::Plan& plan) {
  const auto& s = *ctx.scenario;
  // The plan's own choices (recompute, codecs, sequence parallelism) and placement, as the
  // simulator resolves them.
  core::Diagnostics diags;
  const auto resolved = sim::resolve_plan(s, *ctx.model, ctx.compression, plan, "", diags);
  Estimate out;
  if (!resolved) {
    out.iteration_s = infinity;
    out.fits = false;
    out.not_fitting = "the plan (it cannot be resolved: " + diags.format() + ")";
    return out;
  }
  const sim::ResolvedPlan& r = *resolved;
  const auto& training = r.choices.training;
  const int chunks = r.chunks;
  const auto nodes = placement(r);
  std::vector<double> wan_bytes(ctx.wan_link_bandwidth.size(), 0);
  // finish[i][s]: when stage s of pipeline i ends its last backward.
  std::vector<std::vector<double>> finish(plan.pipelines.size());

  // Every pipeline's transfers first: pipelines whose stages cross the same WAN link in
  // the same direction share it (they run side by side, micro-batch for micro-batch).
  std::vector<std::vector<Transfer>> all_sends(plan.pipelines.size());
  std::vector<double> step_load(ctx.wan_link_bandwidth.size(), 0);
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& pipeline = plan.pipelines[i];
    const int p = static_cast<int>(pipeline.stages.size());
    auto& sends = all_sends[i];
    sends.resize(p);
    for (int st = 0; st + 1 < p; ++st)
      sends[st] = stage_transfer(ctx, r, pipeline, pipeline.stages[st], pipeline.stages[st + 1],
                                 r.reshard[i][st], nodes[i][st], nodes[i][st + 1]);
    if (chunks > 1 && p > 1)  // the last stage hands chunk k to stage 0's chunk k + 1
      sends[p - 1] = stage_transfer(ctx, r, pipeline, pipeline.stages[p - 1], pipeline.stages[0],
                                    r.reshard[i][p - 1], nodes[i][p - 1], nodes[i][0]);
    for (const Transfer& x : sends)
      if (x.wire > 0)
        for (int l : ctx.wan_links[x.from][x.to]) step_load[l] += x.wire;
  }
  for (auto& sends : all_sends)
    for (Transfer& x : sends) {
      if (x.wire <= 0) continue;
      double shared = 0;
      for (int l : ctx.wan_links[x.from][x.to])
        shared = std::max(shared, step_load[l] / ctx.wan_link_bandwidth[l]);
      if (shared <= x.link) continue;
      x.link = shared;
      x.serial = std::max(x.serial, shared);
      x.seconds = x.fixed + std::max(x.link, x.port);
    }

  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& pipeline = plan.pipelines[i];
    const int p = static_cast<int>(pipeline.stages.size());
    const int m = pipeline.micro_batches;
    PipelineEstimate pe;
    pe.stages.resize(p);
    std::vector<Transfer>& sends = all_sends[i];
    // A stage inside the pipeline sends activations forward and gradients backward
    // through the same port (NIC or NVLink), and receives both through the other
    // direction: when a transfer outlasts the op between the two sends, they overlap and
    // share the port.
    for (int st = 0; st + 1 < p; ++st) {
      Transfer& x = sends[st];
      const bool sender_busy = st > 0 && sends[st - 1].port > 0;
      const bool receiver_busy = st + 2 < p && sends[st + 1].port > 0;
      if (!sender_busy && !receiver_busy) continue;
      const auto& stage = pipeline.stages[st];
      const LayerCost lc = layer_cost_under(ctx, r.choices, nodes[i][st].cluster, stage.tp,
                                            stage.dp, plan.micro_batch);
      const double gap = stage.layers * std::min(lc.forward_s, lc.backward_s);
      const double overlap = std::clamp((x.port - gap) / std::max(x.port, 1e-30), 0.0, 1.0);
      x.seconds = x.fixed + std::max(x.link, x.port * (1 + overlap));
    }
    double sum_fb = 0, max_fb = 0, sum_f = 0, sum_b = 0, max_f = 0, max_b = 0;
    double sum_x = 0, max_serial = 0;
    for (int st = 0; st < p; ++st) {
      const auto& stage = pipeline.stages[st];
      const int c = nodes[i][st].cluster;
      const LayerCost lc =
          layer_cost_under(ctx, r.choices, c, stage.tp, stage.dp, plan.micro_batch);
      StageEstimate& se = pe.stages[st];
      se.forward_s = stage.layers * lc.forward_s;
      se.backward_s = stage.layers * lc.backward_s;
      if (st == p - 1) {
        const auto times = ctx.compute->logits(*ctx.gpus[c], r.layer_work(stage));
        se.forward_s += times.forward.value();
        se.backward_s += times.backward.value();
      }
      // Codec work on this stage's GPUs: encode what it sends, decode what it receives.
      const Transfer& out_x = sends[st];
      const Transfer* in_x =
          st > 0 ? &sends[st - 1] : (chunks > 1 && p > 1 ? &sends[p - 1] : nullptr);
      se.forward_s += out_x.encode + (in_x ? in_x->decode : 0);
      se.backward_s += (in_x ? in_x->encode : 0) + out_x.decode;
      se.send_s = out_x.seconds;
      const auto spec = models::stage_spec(plan, i, st);
      se.memory_bytes = models::stage_memory(*ctx.model, training, spec).total.value();
      se.capacity_bytes = ctx.gpus[c]->memory.value();
      if (se.memory_bytes > se.capacity_bytes && out.fits) {
        out.fits = false;
        out.not_fitting = "pipelines[" + std::to_string(i) + "].stages[" + std::to_string(st) +
                          "] (" + stage.cluster + ")";
      }
      se.optimizer_s =
          ctx.compute
              ->optimizer_step(*ctx.gpus[c], models::stage_parameters(*ctx.model, spec),
                               training.precision, training.optimizer)
              .value();
      const double fb = se.forward_s + se.backward_s;
      sum_fb += fb;
      max_fb = std::max(max_fb, fb);
      sum_f += se.forward_s;
      sum_b += se.backward_s;
      max_f = std::max(max_f, se.forward_s);
      max_b = std::max(max_b, se.backward_s);
      // The stage's port carries its activations out and its gradients back.
      if (st > 0) max_serial = std::max(max_serial, out_x.port + sends[st - 1].port);
      if (st + 1 < p || chunks > 1) {
        sum_x += out_x.seconds;
        max_serial = std::max(max_serial, out_x.serial);
        if (out_x.wire > 0) {
          const double per_link = out_x.wire * m * chunks;
          for (int l : ctx.wan_links[out_x.from][out_x.to]) wan_bytes[l] += per_link;
          for (int l : ctx.wan_links[out_x.to][out_x.from]) wan_bytes[l] += per_link;
        }
      }
    }
    double T = 0;
    switch (plan.schedule) {
      case core::Schedule::one_f_one_b: {
        double period = std::max(max_fb, max_serial);
        // 1F1B alternates strictly: stage s runs F(k), B(k - (p - s - 1)), F(k + 1), ...
        // and stage s + d holds d fewer micro-batches in flight, so the backward stage s
        // runs d ops after F(k) needs F(k) to travel to s + d and its B to come back.
        // Over the window [s, s + d]: (d + 1) periods >= sum of F + B in the window plus
        // twice the transfers inside it (d = p - 1 from s = 0: the whole round trip over
        // p micro-batches in flight; d = 1: X_s + the mean F + B of the two stages).
        for (int first = 0; first < p; ++first) {
          double window = 0;
          for (int last = first; last < p; ++last) {
            window += pe.stages[last].forward_s + pe.stages[last].backward_s;
            if (last > first) window += 2 * pe.stages[last - 1].send_s;
            // With m <= d + 1 every micro-batch is in flight at once: no such wait.
            if (last - first + 1 > m) break;
            period = std::max(period, window / (last - first + 1));
          }
        }
        pe.fill_s = sum_fb + 2 * sum_x;
        pe.period_s = period;
        T = pe.fill_s + (m - 1) * period;
        break;
      }
      case core::Schedule::gpipe: {
        const double forward = sum_f + sum_x + (m - 1) * std::max(max_f, max_serial);
        const double backward = sum_b + sum_x + (m - 1) * std::max(max_b, max_serial);
        pe.fill_s = sum_fb + 2 * sum_x;
        pe.period_s = std::max(max_f, max_serial) + std::max(max_b, max_serial);
        T = forward + backward;
        break;
      }
      case core::Schedule::interleaved: {
        // Every micro-batch crosses every boundary v times each way; the same windows as
        // 1F1B bound the period, with v transfers per boundary.
        double period = std::max(max_fb, chunks * max_serial);
        for (int first = 0; first < p; ++first) {
          double window = 0;
          for (int last = first; last < p; ++last) {
            window += pe.stages[last].forward_s + pe.stages[last].backward_s;
            if (last > first) window += 2 * chunks * pe.stages[last - 1].send_s;
            if (last - first + 1 > m) break;
            period = std::max(period, window / (last - first + 1));
          }
        }
        pe.fill_s = max_fb + (sum_fb - max_fb) / chunks + 2 * chunks * sum_x;
        pe.period_s = period;
        T = pe.fill_s + (m - 1) * pe.period_s;
        break;
      }
    }
    pe.pipeline_s = T;
    finish[i].assign(p, T);
    double behind = 0;
    for (int st = 0; st < p; ++st) {
      finish[i][st] = T - behind / chunks;
      behind += pe.stages[st].backward_s + pe.stages[st].send_s;
    }
    out.pipelines.push_back(std::move(pe));
  }

  // ---- gradient sync, segment by segment in backward order ----
  std::vector<std::vector<double>> stream = finish;  // when each stage's sync stream is free
  // WAN bytes of gradient sync: the syncs of all segments run at once after the
  // backward, so a WAN link carries them all in that phase (a bound on its length).
  std::vector<double> sync_bytes(ctx.wan_link_bandwidth.size(), 0);
  double first_sync = std::numeric_limits<double>::infinity();
  for (auto seg = r.segments.rbegin(); seg != r.segments.rend(); ++seg) {
    std::vector<int> h;  // per pipeline: the holding stage
    for (const auto& holder : seg->holders) h.push_back(holder.first);
    // Members per cluster (tp groups), one node or not.
    std::vector<int> members(s.clusters.size(), 0);
    std::vector<int> node(s.clusters.size(), -2);  // -2 none yet, -1 several nodes
    for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
      const auto& st = plan.pipelines[i].stages[h[i]];
      const NodeRange& range = nodes[i][h[i]];
      const int c = range.cluster;
      members[c] += plan.pipelines[i].replicas * st.dp;
      if (!range.single() || (node[c] != -2 && node[c] != range.first))
        node[c] = -1;
      else
        node[c] = range.first;
    }
    std::vector<int> clusters;
    for (std::size_t c = 0; c < members.size(); ++c)
      if (members[c] > 0) clusters.push_back(static_cast<int>(c));
    double seg_time = 0;
    if (seg->buckets > 0) {
      const int rings = seg->rings;
      const int buckets = seg->buckets;
      const double bytes = seg->bucket_bytes;
      auto hop = [&](int c) {
        return node[c] >= 0 ? nvlink_hop(s.clusters[c]) : nic_hop(s.clusters[c]);
      };
      double bucket_time = 0;
      if (clusters.size() == 1) {
        const int c = clusters[0];
        bucket_time = sim::all_reduce_time(plan.grad_sync.algorithm, members[c], bytes, hop(c));
      } else {
        // Hierarchical: reduce-scatter inside, the leaders' ring over the WAN, all-gather.
        int lanes = std::numeric_limits<int>::max();
        double inside = 0;
        for (int c : clusters) {
          lanes = std::min(lanes, members[c]);
          inside = std::max(inside, sim::ring_reduce_scatter_time(members[c], bytes, hop(c)));
        }
        const int k = static_cast<int>(clusters.size());
        const double flows = static_cast<double>(lanes) * rings;
        const double chunk = bytes * rings / k;
        std::vector<double> load(ctx.wan_link_bandwidth.size(), 0);
        std::vector<Coded> coded(k);
        for (int j = 0; j < k; ++j) {
          const int a = clusters[j], b = clusters[(j + 1) % k];
          coded[j] = code(ctx, r.choices.codecs.wan_gradients, chunk / flows, a, b);
          for (int l : ctx.wan_links[a][b]) load[l] += coded[j].wire * flows;
        }
        double step = 0;
        for (int j = 0; j < k; ++j) {
          const int a = clusters[j], b = clusters[(j + 1) % k];
          const double wire = coded[j].wire * flows;
          double t = wire / (flows * ctx.flow_cap[a][b]);
          for (int l : ctx.wan_links[a][b]) t = std::max(t, load[l] / ctx.wan_link_bandwidth[l]);
          step = std::max(step, ctx.latency[a][b] + t + coded[j].encode + coded[j].decode);
        }
        for (double& l : load) l *= 2.0 * (k - 1) * buckets;
        for (std::size_t l = 0; l < load.size(); ++l) sync_bytes[l] += load[l];
        bucket_time = 2 * inside + 2.0 * (k - 1) * step;
      }
      seg_time = buckets * bucket_time;
    }
    if (seg_time > 0) {
      double start = 0;
      for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
        start = std::max(start, stream[i][h[i]]);
      if (clusters.size() > 1) first_sync = std::min(first_sync, start);
      for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
        stream[i][h[i]] = start + seg_time;
        out.pipelines[i].stages[h[i]].sync_s += seg_time;
      }
    }
  }

  double T = 0;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    for (std::size_t st = 0; st < plan.pipelines[i].stages.size(); ++st)
      T = std::max(T, stream[i][st] + out.pipelines[i].stages[st].optimizer_s);
  for (std::size_t l = 0; l < wan_bytes.size(); ++l) {
    T = std::max(T, (wan_bytes[l] + sync_bytes[l]) / ctx.wan_link_bandwidth[l]);
    if (sync_bytes[l] > 0) T = std::max(T, first_sync + sync_bytes[l] / ctx.wan_link_bandwidth[l]);
  }
  out.iteration_s = T;
  return out;
}

}  // namespace hgsim::planner
