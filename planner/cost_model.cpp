#include "planner/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "compress/codec_cost.hpp"
#include "models/transformer.hpp"
#include "sim/collectives.hpp"
#include "sim/context_parallel.hpp"
#include "sim/program.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim::planner {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();
// A port time below any real transfer's, dividing in its place when a port is idle (0 s).
constexpr double no_division_by_zero_s = 1e-30;

double slice_bytes(const Context& ctx, const sim::PlanChoices& choices, int slices,
                   int micro_batch) {
  return sim::boundary_bytes(*ctx.model, choices, static_cast<double>(micro_batch) / slices);
}

// One layer's phases under a plan's choices, as the workload's emit_op plays them
// (sim/workload.cpp): each phase's compute, what a context-parallel stage's ring exchanges
// leave exposed (`ring`, cp = 1: none; sim/context_parallel.hpp), the collective of a
// tensor-parallel block (an all-reduce, or with sequence parallelism a reduce-scatter and an
// all-gather, as the workload's tp_comm plays it), the attention's share of a block, and the
// GPU's slowdown beside a collective (kernels::compute_beside_collective).
struct LayerParts {
  kernels::PhaseTimes times;
  sim::ContextExposure cx;
  double all_reduce = 0;
  double share = 0;
  double slowdown = 1;
  int tp = 1;
  bool full_recompute = false;
  bool overlap = false;  // tp_comm_overlap on a stage of tp > 1
};

LayerParts layer_parts(const Context& ctx, const sim::PlanChoices& choices, int cluster, int tp,
                       int dp, int micro_batch, const sim::ContextRing& ring = {}) {
  const int cp = ring.cp;
  const auto work = sim::layer_work(*ctx.model, choices, micro_batch, tp, dp, cp);
  LayerParts p;
  p.times = ctx.compute->layer(*ctx.gpus[cluster], work);
  p.cx = sim::context_exposure(p.times, ring, work.recompute);
  p.all_reduce = sim::tensor_parallel_block_time(ctx.scenario->clusters[cluster], tp,
                                                 slice_bytes(ctx, choices, dp * cp, micro_batch),
                                                 choices.sequence_parallel);
  p.share = models::attention_share_of_layer(*ctx.model, choices.training.seq_len);
  p.slowdown = kernels::kernel_costs_for(ctx.gpus[cluster]->architecture).overlap_slowdown;
  p.tp = tp;
  p.full_recompute = work.recompute == core::Recompute::full;
  p.overlap = choices.tp_comm_overlap && tp > 1;
  return p;
}

// Per-layer forward and backward under a plan's choices (layer_cost is the scenario's), with
// what a context-parallel stage's ring exchanges leave exposed.
LayerCost layer_cost_under(const Context& ctx, const sim::PlanChoices& choices, int cluster, int tp,
                           int dp, int micro_batch, const sim::ContextRing& ring = {}) {
  const LayerParts p = layer_parts(ctx, choices, cluster, tp, dp, micro_batch, ring);
  const sim::ContextExposure& cx = p.cx;
  const double all_reduce = p.all_reduce;
  const bool full = p.full_recompute;
  const double forward = p.times.forward.value();
  const double backward = p.times.backward.value();
  const double recompute = p.times.recompute.value();
  if (!p.overlap)
    return {forward + cx.forward + 2 * all_reduce,
            backward + cx.backward + recompute + cx.recompute + (full ? 4 : 2) * all_reduce,
            recompute + cx.recompute + (full ? 2 : 0) * all_reduce};
  // tp_comm_overlap: each block (attention, MLP) runs beside the collective it feeds and
  // costs the longer of the two, its compute slowed while they overlap, as the workload's
  // `block` plays it (sim/workload.cpp).
  auto beside = [&](double compute) {
    return std::max(kernels::compute_beside_collective(compute, all_reduce, p.slowdown),
                    all_reduce);
  };
  auto blocks = [&](double seconds) {
    return beside(p.share * seconds) + beside((1 - p.share) * seconds);
  };
  const double recomputed = (full ? blocks(recompute) : recompute) + cx.recompute;
  return {blocks(forward) + cx.forward, recomputed + blocks(backward) + cx.backward, recomputed};
}

// The last micro-batch's backward of one chunk of a stage beside the data-parallel buckets
// it hands over (`buckets`: sim::buckets_beside_backward), as the workload's emit_op plays it
// layer by layer from the top, with one kernels::CollectiveStream: per local layer, how much
// longer than alone it runs (its compute slowed while the bucket stream has work left).
std::vector<double> backward_beside_buckets(const LayerParts& p,
                                            const std::vector<double>& buckets) {
  std::vector<double> extra(buckets.size(), 0.0);
  kernels::CollectiveStream stream(p.slowdown);
  double played = 0, alone = 0;  // of the layer being played
  auto compute = [&](double seconds) {
    played += stream.compute(seconds);
    alone += seconds;
  };
  auto wait = [&](double seconds) {
    stream.pass(seconds);
    played += seconds;
    alone += seconds;
  };
  auto block = [&](double seconds) {
    if (!p.overlap) {
      compute(seconds);
      if (p.tp > 1) wait(p.all_reduce);
      return;
    }
    const double beside = kernels::compute_beside_collective(seconds, p.all_reduce, p.slowdown);
    const double charged = stream.compute(beside);
    stream.pass(std::max(p.all_reduce - charged, 0.0));
    played += std::max(charged, p.all_reduce);
    alone += std::max(beside, p.all_reduce);
  };
  const double backward = p.times.backward.value();
  const double recompute = p.times.recompute.value();
  for (int l = static_cast<int>(buckets.size()) - 1; l >= 0; --l) {
    played = alone = 0;
    if (p.tp > 1) {
      if (p.full_recompute) {
        block(p.share * recompute);
        wait(p.cx.recompute);
        block((1 - p.share) * recompute);
      } else if (recompute > 0) {
        compute(recompute);
        wait(p.cx.recompute);
      }
      block((1 - p.share) * backward);
      block(p.share * backward);
    } else {
      compute(backward);  // the stage recomputed all its layers before (no bucket yet)
    }
    wait(p.cx.backward);
    extra[l] = played - alone;
    stream.queue(buckets[l]);
  }
  return extra;
}

// Per-layer cost of stage `st` of pipeline i as placed: its context ring's exchanges
// included.
LayerCost stage_layer_cost(const Context& ctx, const sim::ResolvedPlan& r, int i, int st,
                           int cluster) {
  const core::Stage& stage = r.stage(i, st);
  return layer_cost_under(ctx, r.choices, cluster, stage.tp, stage.dp, r.plan.micro_batch,
                          sim::context_ring(r, i, st));
}

// The codec of one traffic class applied to `share` bytes sent by a GPU of cluster `from`
// to one of cluster `to`: wire bytes, encode and decode seconds (compress::code_transfer).
struct Coded {
  double wire = 0;
  double encode = 0;
  double decode = 0;
};

Coded code(const Context& ctx, const compress::CodecSpec& spec, core::Precision dtype, double share,
           int from, int to) {
  // One sender coding `share` bytes, as the simulator's Sender codes each flow's share.
  const sim::WanCodec codec{spec, dtype, ctx.model->hidden};
  const sim::CodedTransfer c =
      sim::code_wan_transfer(codec, share, 1, *ctx.gpus[from], *ctx.gpus[to]);
  return {c.wire_bytes, c.encode_s, c.decode_s};
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
  const int n_from = a.slices() * a.tp;
  const int n_to = b.slices() * b.tp;
  Transfer x;
  x.from = ca;
  x.to = cb;
  // Without sequence parallelism the receiver all-gathers its slice across tp.
  if (!r.choices.sequence_parallel && b.tp > 1)
    x.seconds += sim::tensor_parallel_all_gather_time(cluster_b, b.tp, r.slice_bytes(b));
  const double ports = std::min(n_from, n_to);
  if (ca == cb) {
    const bool same_node = ra.single() && rb.single() && ra.first == rb.first;
    const auto hop = same_node ? nvlink_hop(cluster_b) : nic_hop(cluster_b);
    const double latency = sim::send_recv_latency_s(cluster_b, hop.latency_s);
    x.serial = total / ports / hop.bytes_per_s;
    x.port = x.serial;
    x.fixed = x.seconds + latency;
    x.seconds += latency + x.serial;
    return x;
  }
  const int pieces = static_cast<int>(reshard.size());
  const Coded c = code(ctx, r.choices.codecs.wan_activations, r.choices.training.precision,
                       total / pieces, ca, cb);
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
  if (const auto c = scenario->cluster_index(name)) return *c;
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
    ctx.gpus.push_back(&kernels::gpu_of(s.clusters[c].gpu));
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

LayerCost layer_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch,
                     bool tp_comm_overlap, int cp) {
  sim::PlanChoices choices = sim::scenario_choices(*ctx.scenario, ctx.compression);
  choices.tp_comm_overlap = tp_comm_overlap;
  sim::ContextRing ring;  // infinitely fast hops and no bytes: the exchanges cost nothing
  ring.cp = cp;
  ring.hops.inside.bytes_per_s = infinity;
  return layer_cost_under(ctx, choices, cluster, tp, dp, micro_batch, ring);
}

double logits_cost(const Context& ctx, int cluster, int tp, int dp, int micro_batch) {
  const auto work = sim::layer_work(
      *ctx.model, sim::scenario_choices(*ctx.scenario, ctx.compression), micro_batch, tp, dp);
  const auto times = ctx.compute->logits(*ctx.gpus[cluster], work);
  return times.forward.value() + times.backward.value();
}

namespace {

// ---- the estimate, formula by formula (the list in cost_model.hpp) ----------------------

// Transfers of one pipeline: sends[s] carries one micro-batch from stage s to s + 1 (X_s);
// with v > 1 model chunks sends[p - 1] carries it from the last stage back to stage 0's
// next chunk. A stage without a successor keeps an empty Transfer.
using Sends = std::vector<Transfer>;

// X_s of every boundary of every pipeline, before any sharing (stage_transfer).
std::vector<Sends> stage_transfers(const Context& ctx, const sim::ResolvedPlan& r,
                                   const std::vector<std::vector<NodeRange>>& nodes) {
  std::vector<Sends> all(r.plan.pipelines.size());
  for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
    const auto& pipeline = r.plan.pipelines[i];
    const int p = static_cast<int>(pipeline.stages.size());
    Sends& sends = all[i];
    sends.resize(p);
    for (int st = 0; st + 1 < p; ++st)
      sends[st] = stage_transfer(ctx, r, pipeline, pipeline.stages[st], pipeline.stages[st + 1],
                                 r.reshard[i][st], nodes[i][st], nodes[i][st + 1]);
    if (r.chunks > 1 && p > 1)  // the last stage hands chunk k to stage 0's chunk k + 1
      sends[p - 1] = stage_transfer(ctx, r, pipeline, pipeline.stages[p - 1], pipeline.stages[0],
                                    r.reshard[i][p - 1], nodes[i][p - 1], nodes[i][0]);
  }
  return all;
}

// WAN sharing between pipelines: pipelines whose stages cross the same WAN link in the same
// direction run side by side, micro-batch for micro-batch, so in one step link l carries
// the wire bytes of all of them:
//   link_X = max over the links l of X's route of (sum of wire bytes on l) / bandwidth_l;
// when that exceeds X's own link time, X = fixed + max(link_X, port_X).
void share_wan_links(const Context& ctx, std::vector<Sends>& all) {
  std::vector<double> step_load(ctx.wan_link_bandwidth.size(), 0);
  for (const Sends& sends : all)
    for (const Transfer& x : sends)
      if (x.wire > 0)
        for (int l : ctx.wan_links[x.from][x.to]) step_load[l] += x.wire;
  for (Sends& sends : all)
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
}

// Port sharing inside a pipeline: a stage sends activations forward and gradients backward
// through the same port (NIC or NVLink) and receives both through the other direction.
// When X_s outlasts the gap between the two sends (the shorter of the stage's forward and
// backward, gap = layers x min(f, b)), the two overlap for the fraction
//   overlap = clamp((port_X - gap) / port_X, 0, 1)   and   X = fixed + max(link_X, port_X (1 +
//   overlap)).
void share_ports(const Context& ctx, const sim::ResolvedPlan& r, int pipeline_index,
                 const std::vector<NodeRange>& nodes, Sends& sends) {
  const core::Pipeline& pipeline = r.plan.pipelines[pipeline_index];
  const int p = static_cast<int>(pipeline.stages.size());
  for (int st = 0; st + 1 < p; ++st) {
    Transfer& x = sends[st];
    const bool sender_busy = st > 0 && sends[st - 1].port > 0;
    const bool receiver_busy = st + 2 < p && sends[st + 1].port > 0;
    if (!sender_busy && !receiver_busy) continue;
    const auto& stage = pipeline.stages[st];
    const LayerCost lc = stage_layer_cost(ctx, r, pipeline_index, st, nodes[st].cluster);
    const double gap = stage.layers * std::min(lc.forward_s, lc.backward_s);
    const double overlap =
        std::clamp((x.port - gap) / std::max(x.port, no_division_by_zero_s), 0.0, 1.0);
    x.seconds = x.fixed + std::max(x.link, x.port * (1 + overlap));
  }
}

// The per-stage costs of one micro-batch on stage s of pipeline i:
//   F_s = layers_s x f + [logits forward, last stage] + encode(X_s) + decode(X_{s-1})
//   B_s = layers_s x b + [logits backward, last stage] + encode(X_{s-1}) + decode(X_s)
// (f and b per layer: recomputation and the tensor-parallel all-reduces included; X_{-1}
// is the wrap-around transfer of the last chunk when v > 1), X_s as send_s, the stage's
// memory against its GPUs' capacity, and its optimizer step.
StageEstimate stage_costs(const Context& ctx, const sim::ResolvedPlan& r, std::size_t i, int st,
                          const NodeRange& range, const Sends& sends) {
  const auto& pipeline = r.plan.pipelines[i];
  const int p = static_cast<int>(pipeline.stages.size());
  const auto& stage = pipeline.stages[st];
  const int c = range.cluster;
  const LayerCost lc = stage_layer_cost(ctx, r, static_cast<int>(i), st, c);
  StageEstimate se;
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
      st > 0 ? &sends[st - 1] : (r.chunks > 1 && p > 1 ? &sends[p - 1] : nullptr);
  se.forward_s += out_x.encode + (in_x ? in_x->decode : 0);
  se.backward_s += (in_x ? in_x->encode : 0) + out_x.decode;
  se.send_s = out_x.seconds;
  const auto spec = models::stage_spec(r.plan, i, st);
  se.memory_bytes = models::stage_memory(*ctx.model, r.choices.training, spec).total.value();
  se.capacity_bytes = ctx.gpus[c]->memory.value();
  se.optimizer_s =
      ctx.compute
          ->optimizer_step(*ctx.gpus[c], models::optimizer_step_parameters(*ctx.model, spec),
                           r.choices.training.precision, r.choices.training.optimizer)
          .value();
  return se;
}

// The sums and maxima over a pipeline's stages that the schedules' closed forms read.
struct StageTotals {
  double sum_fb = 0, max_fb = 0;  // sum and max of F_s + B_s
  double sum_f = 0, max_f = 0;
  double sum_b = 0, max_b = 0;
  double sum_x = 0;       // sum of the X_s that are sent (v > 1: the wrap-around too)
  double max_serial = 0;  // the busiest port or link: max_s (port_{s-1} + port_s, serial_s)
};

// `in_order`: the messages between one pair of GPUs go one after another, each starting when
// the previous one has arrived (simulation.pipeline_messages, NCCL's send/recv on one stream:
// sim/workload.cpp's pipeline FIFO), so a boundary's channel is busy for a message's whole
// time, its latency included, and that bounds the period as a busy link does. Under `shared`
// (and interleaved, whose transfers the simulator does not chain) only the link's busy time
// does.
StageTotals stage_totals(const std::vector<StageEstimate>& stages, const Sends& sends, int chunks,
                         bool in_order) {
  const int p = static_cast<int>(stages.size());
  StageTotals t;
  for (int st = 0; st < p; ++st) {
    const StageEstimate& se = stages[st];
    const double fb = se.forward_s + se.backward_s;
    t.sum_fb += fb;
    t.max_fb = std::max(t.max_fb, fb);
    t.sum_f += se.forward_s;
    t.sum_b += se.backward_s;
    t.max_f = std::max(t.max_f, se.forward_s);
    t.max_b = std::max(t.max_b, se.backward_s);
    // The stage's port carries its activations out and its gradients back.
    const Transfer& out_x = sends[st];
    if (st > 0) t.max_serial = std::max(t.max_serial, out_x.port + sends[st - 1].port);
    if (st + 1 < p || chunks > 1) {
      t.sum_x += out_x.seconds;
      t.max_serial = std::max(t.max_serial, in_order ? out_x.seconds : out_x.serial);
    }
  }
  return t;
}

// The activation and gradient bytes of one iteration on each WAN link: every sent X_s
// crosses its route m x v times each way (wire bytes of all replicas).
void add_pipeline_wan_bytes(const Context& ctx, const Sends& sends, int m, int chunks,
                            std::vector<double>& wan_bytes) {
  const int p = static_cast<int>(sends.size());
  for (int st = 0; st < p; ++st) {
    const Transfer& x = sends[st];
    if ((st + 1 < p || chunks > 1) && x.wire > 0) {
      const double per_link = x.wire * m * chunks;
      for (int l : ctx.wan_links[x.from][x.to]) wan_bytes[l] += per_link;
      for (int l : ctx.wan_links[x.to][x.from]) wan_bytes[l] += per_link;
    }
  }
}

// The steady-state period's in-flight bound, shared by 1F1B and interleaved. 1F1B
// alternates strictly: stage s runs F(k), B(k - (p - s - 1)), F(k + 1), ... and stage
// s + d holds d fewer micro-batches in flight, so the backward stage s runs d ops after
// F(k) needs F(k) to travel to s + d and its B to come back. Over every window [s, s + d]
// with d + 1 <= m:
//   period >= (sum_{j=s..s+d} (F_j + B_j) + 2 v sum_{j=s..s+d-1} X_j) / (d + 1)
// (d = p - 1 from s = 0: the whole round trip over p micro-batches in flight; d = 1: X_s +
// the mean F + B of the two stages; v transfers per boundary when interleaved). With
// m <= d + 1 every micro-batch is in flight at once: no such wait.
double in_flight_period(const std::vector<StageEstimate>& stages, int m, int chunks,
                        double period) {
  const int p = static_cast<int>(stages.size());
  for (int first = 0; first < p; ++first) {
    double window = 0;
    for (int last = first; last < p; ++last) {
      window += stages[last].forward_s + stages[last].backward_s;
      if (last > first) window += 2 * chunks * stages[last - 1].send_s;
      if (last - first + 1 > m) break;
      period = std::max(period, window / (last - first + 1));
    }
  }
  return period;
}

// 1F1B: fill = sum (F_s + B_s) + 2 sum X_s; period = max(max (F_s + B_s), max serial,
// in-flight bound); pipeline = fill + (m - 1) period ((m + p - 1)(t_f + t_b) balanced).
double one_f_one_b(PipelineEstimate& pe, const StageTotals& t, int m) {
  pe.fill_s = t.sum_fb + 2 * t.sum_x;
  pe.period_s = in_flight_period(pe.stages, m, 1, std::max(t.max_fb, t.max_serial));
  return pe.fill_s + (m - 1) * pe.period_s;
}

// GPipe: all forwards, then all backwards, each a pipeline of its own:
//   forward = sum F_s + sum X_s + (m - 1) max(max F_s, max serial), backward likewise with B.
double gpipe(PipelineEstimate& pe, const StageTotals& t, int m) {
  const double forward = t.sum_f + t.sum_x + (m - 1) * std::max(t.max_f, t.max_serial);
  const double backward = t.sum_b + t.sum_x + (m - 1) * std::max(t.max_b, t.max_serial);
  pe.fill_s = t.sum_fb + 2 * t.sum_x;
  pe.period_s = std::max(t.max_f, t.max_serial) + std::max(t.max_b, t.max_serial);
  return forward + backward;
}

// Interleaved over v chunks: every micro-batch crosses every boundary v times each way;
//   fill = max (F_s + B_s) + (sum - max) / v + 2 v sum X_s,
//   period = max(max (F_s + B_s), v max serial, in-flight bound with v X per boundary),
//   pipeline = fill + (m - 1) period ((m + (p - 1)/v)(t_f + t_b) balanced).
double interleaved(PipelineEstimate& pe, const StageTotals& t, int m, int chunks) {
  pe.fill_s = t.max_fb + (t.sum_fb - t.max_fb) / chunks + 2 * chunks * t.sum_x;
  pe.period_s = in_flight_period(pe.stages, m, chunks, std::max(t.max_fb, chunks * t.max_serial));
  return pe.fill_s + (m - 1) * pe.period_s;
}

double schedule_time(core::Schedule schedule, PipelineEstimate& pe, const StageTotals& t, int m,
                     int chunks) {
  switch (schedule) {
    case core::Schedule::one_f_one_b:
      return one_f_one_b(pe, t, m);
    case core::Schedule::gpipe:
      return gpipe(pe, t, m);
    case core::Schedule::interleaved:
      return interleaved(pe, t, m, chunks);
  }
  return 0;
}

// When each stage ends its last backward: stage 0 at the pipeline's end T, stage s
// sum_{j<s} (B_j + X_j) / v before it.
std::vector<double> stage_finish(const PipelineEstimate& pe, int chunks) {
  std::vector<double> finish(pe.stages.size(), pe.pipeline_s);
  double behind = 0;
  for (std::size_t st = 0; st < pe.stages.size(); ++st) {
    finish[st] = pe.pipeline_s - behind / chunks;
    behind += pe.stages[st].backward_s + pe.stages[st].send_s;
  }
  return finish;
}

// ---- gradient sync ----------------------------------------------------------------------

// Who syncs a segment: per pipeline the holding stage, and per cluster its members (tp
// groups: replicas x dp x cp).
struct SyncGroup {
  std::vector<int> holder;    // per pipeline: the stage holding the segment
  std::vector<int> members;   // per cluster
  std::vector<int> clusters;  // the clusters with members, in scenario order
};

SyncGroup sync_group(const sim::ResolvedPlan& r, const sim::Segment& seg,
                     const std::vector<std::vector<NodeRange>>& nodes) {
  const std::size_t n = r.scenario->clusters.size();
  SyncGroup g;
  for (const auto& holder : seg.holders) g.holder.push_back(holder.first);
  g.members.assign(n, 0);
  for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
    const auto& st = r.plan.pipelines[i].stages[g.holder[i]];
    g.members[nodes[i][g.holder[i]].cluster] += r.plan.pipelines[i].replicas * st.slices();
  }
  for (std::size_t c = 0; c < n; ++c)
    if (g.members[c] > 0) g.clusters.push_back(static_cast<int>(c));
  return g;
}

// One bucket across clusters, hierarchically: a reduce-scatter inside each cluster, a ring
// of the k cluster leaders over the WAN, an all-gather inside:
//   bucket = 2 max_c RS_c + 2 (k - 1) step,
//   step = max over ring edges a->b of latency_ab + encode + decode + max(wire / (flows x
//          flow_cap_ab), max over WAN links l of the edge (ring load on l) / bandwidth_l),
// with flows = lanes x rings (lanes: sim::hierarchical_lanes, one per member of the
// largest cluster), each carrying bytes x rings / k / flows through the gradient codec. Adds
// the segment's WAN bytes (2 (k - 1) steps of every bucket) to `sync_bytes`.
double hierarchical_bucket_time(const Context& ctx, const sim::ResolvedPlan& r,
                                const sim::Segment& seg, const SyncGroup& g,
                                std::vector<double>& sync_bytes) {
  const double bytes = seg.bucket_bytes;
  std::vector<int> sizes;
  double inside = 0;
  for (int c : g.clusters) {
    sizes.push_back(g.members[c]);
    inside = std::max(inside, sim::ring_reduce_scatter_time(g.members[c], bytes,
                                                            sim::segment_ring_hop(r, seg, c)));
  }
  const int k = static_cast<int>(g.clusters.size());
  const double flows = static_cast<double>(sim::hierarchical_lanes(sizes)) * seg.rings;
  const double chunk = bytes * seg.rings / k;
  std::vector<double> load(ctx.wan_link_bandwidth.size(), 0);
  std::vector<Coded> coded(k);
  for (int j = 0; j < k; ++j) {
    const int a = g.clusters[j], b = g.clusters[(j + 1) % k];
    coded[j] = code(ctx, r.choices.codecs.wan_gradients,
                    models::gradient_precision(r.choices.training), chunk / flows, a, b);
    for (int l : ctx.wan_links[a][b]) load[l] += coded[j].wire * flows;
  }
  double step = 0;
  for (int j = 0; j < k; ++j) {
    const int a = g.clusters[j], b = g.clusters[(j + 1) % k];
    const double wire = coded[j].wire * flows;
    double t = wire / (flows * ctx.flow_cap[a][b]);
    for (int l : ctx.wan_links[a][b]) t = std::max(t, load[l] / ctx.wan_link_bandwidth[l]);
    step = std::max(step, ctx.latency[a][b] + t + coded[j].encode + coded[j].decode);
  }
  for (double& l : load) l *= 2.0 * (k - 1) * seg.buckets;
  for (std::size_t l = 0; l < load.size(); ++l) sync_bytes[l] += load[l];
  return 2 * inside + 2.0 * (k - 1) * step;
}

// A segment's sync: buckets x one bucket's all-reduce, in closed form (the plan's algorithm
// inside one cluster; hierarchical across clusters). 0 when nothing is synced.
double segment_sync_time(const Context& ctx, const sim::ResolvedPlan& r, const sim::Segment& seg,
                         const SyncGroup& g, std::vector<double>& sync_bytes) {
  if (seg.buckets <= 0) return 0;
  // Inside one cluster: NCCL's channel rings or the plan's algorithm, as the simulator.
  const double bucket_time =
      g.clusters.size() == 1 ? sim::segment_bucket_time(r, seg, g.clusters[0],
                                                        g.members[g.clusters[0]], seg.bucket_bytes)
                             : hierarchical_bucket_time(ctx, r, seg, g, sync_bytes);
  return seg.buckets * bucket_time;
}

// The backward time of one layer of pipeline i's stage holding `seg`, as it runs after the
// recomputation is done (tp = 1: the stage recomputes all its layers before their backward;
// tp > 1: layer by layer, recomputation included) -- what a bucket waits for per layer
// below it (bucket_ready).
double layer_backward_after(const Context& ctx, const sim::ResolvedPlan& r, const sim::Segment& seg,
                            std::size_t i, const NodeRange& where) {
  const core::Stage& stage = r.plan.pipelines[i].stages[seg.holders[i].first];
  const LayerCost lc =
      stage_layer_cost(ctx, r, static_cast<int>(i), seg.holders[i].first, where.cluster);
  return stage.tp <= 1 ? lc.backward_s - lc.recompute_s : lc.backward_s;
}

// Per pipeline, stage and chunk: the extra seconds of the last micro-batch's backward beside
// the buckets it hands over, as prefix sums over its local layers (prefix[k]: layers below k).
using BesideBuckets = std::vector<std::vector<std::vector<std::vector<double>>>>;

// Pipeline i's stages, each chunk's last backward beside its buckets
// (backward_beside_buckets over sim::buckets_beside_backward); empty where none overlaps.
std::vector<std::vector<std::vector<double>>> stages_beside_buckets(
    const Context& ctx, const sim::ResolvedPlan& r, int i, const std::vector<NodeRange>& nodes) {
  std::vector<std::vector<std::vector<double>>> out(r.plan.pipelines[i].stages.size());
  for (std::size_t st = 0; st < out.size(); ++st) {
    const core::Stage& stage = r.stage(i, static_cast<int>(st));
    for (int c = 0; c < r.chunks; ++c) {
      const auto buckets = sim::buckets_beside_backward(r, i, static_cast<int>(st), c);
      std::vector<double> prefix(buckets.size() + 1, 0.0);
      if (std::any_of(buckets.begin(), buckets.end(), [](double b) { return b > 0; })) {
        const LayerParts parts =
            layer_parts(ctx, r.choices, nodes[st].cluster, stage.tp, stage.dp, r.plan.micro_batch,
                        sim::context_ring(r, i, static_cast<int>(st)));
        const auto extra = backward_beside_buckets(parts, buckets);
        for (std::size_t k = 0; k < extra.size(); ++k) prefix[k + 1] = prefix[k] + extra[k];
      }
      out[st].push_back(std::move(prefix));
    }
  }
  return out;
}

// When bucket `bucket` of segment `seg` is ready on the holding stage of pipeline i, which
// ends its last backward at `finish`. grad_reduce: overlap (one chunk per stage): once the
// last micro-batch's backward has finished the bucket's lowest layer, as the workload
// generator hands it over (sim::bucket_lowest_layer), and the stage still runs the backward
// of the layers below, each as long as alone plus what the buckets beside it add:
//   ready = finish - (lowest - first layer of the stage) x layer_backward_after
//                  - (their extra beside the buckets: `extra_below`, prefix sums by layer).
// after_backward, or interleaved chunks: ready = finish.
// `lowest` is the bucket's lowest layer.
double bucket_ready(const sim::ResolvedPlan& r, const sim::Segment& seg, int lowest, std::size_t i,
                    double per_layer, const std::vector<double>& extra_below, double finish) {
  if (r.choices.grad_reduce != core::GradReduce::overlap || r.chunks > 1) return finish;
  const auto [stage_index, chunk] = seg.holders[i];
  const int below = lowest - r.layers[i][stage_index][chunk].first;
  if (below <= 0) return finish;
  const double extra = below < int(extra_below.size()) ? extra_below[below] : 0.0;
  return finish - below * per_layer - extra;
}

// Gradient sync, segment by segment in backward order, bucket by bucket. A bucket's
// all-reduce starts when it is ready on every holder (bucket_ready) and the holders'
// previous sync is done, so sync overlaps the backward (of the stage itself with
// grad_reduce: overlap, of earlier stages always):
//   start = max_i max(stream_i(holder_i), ready_i),   stream_i(holder_i) = start + bucket time.
// `stream` starts as each stage's finish and ends as each stage's last sync; the WAN bytes
// of the syncs go to `sync_bytes` and the earliest cross-cluster start to `first_sync`.
void gradient_sync(const Context& ctx, const sim::ResolvedPlan& r,
                   const std::vector<std::vector<NodeRange>>& nodes, const BesideBuckets& beside,
                   std::vector<std::vector<double>>& stream, Estimate& out,
                   std::vector<double>& sync_bytes, double& first_sync) {
  const std::vector<std::vector<double>> finish = stream;
  std::vector<std::vector<double>> busy;  // when each stage's sync stream is free
  for (const auto& f : finish) busy.emplace_back(f.size(), 0.0);
  for (auto seg = r.segments.rbegin(); seg != r.segments.rend(); ++seg) {
    const SyncGroup g = sync_group(r, *seg, nodes);
    const double seg_time = segment_sync_time(ctx, r, *seg, g, sync_bytes);
    if (seg_time <= 0) continue;
    const double bucket_time = seg_time / seg->buckets;
    std::vector<double> per_layer(r.plan.pipelines.size());
    for (std::size_t i = 0; i < per_layer.size(); ++i)
      per_layer[i] = layer_backward_after(ctx, r, *seg, i, nodes[i][g.holder[i]]);
    // Buckets of one lowest layer (a run, sim::bucket_runs) are ready together. The run's
    // first bucket starts once ready and once every holder's stream is free; each later one
    // right after the one before it (which ended after `ready`), so a run costs one
    // readiness and one addition per bucket.
    double end = 0;
    for (const sim::BucketRun& run :
         sim::bucket_runs(seg->first_layer, seg->layers, seg->buckets)) {
      double start = 0;
      for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
        const auto [holder, chunk] = seg->holders[i];
        start = std::max(start, bucket_ready(r, *seg, run.lowest, i, per_layer[i],
                                             beside[i][holder][chunk], finish[i][g.holder[i]]));
      }
      if (run.first == 0)
        for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i)
          start = std::max(start, busy[i][g.holder[i]]);
      else
        start = std::max(start, end);
      if (g.clusters.size() > 1) first_sync = std::min(first_sync, start);
      end = start + bucket_time;
      for (int k = run.first + 1; k <= run.last; ++k) end += bucket_time;
    }
    if (seg->buckets > 0)
      for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) busy[i][g.holder[i]] = end;
    for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i)
      out.pipelines[i].stages[g.holder[i]].sync_s += seg_time;
  }
  for (std::size_t i = 0; i < stream.size(); ++i)
    for (std::size_t st = 0; st < stream[i].size(); ++st)
      stream[i][st] = std::max(finish[i][st], busy[i][st]);
}

// ---- the bound --------------------------------------------------------------------------

// The iteration: the latest optimizer end, max over stages of (last sync end + optimizer),
// and no WAN link carries its bytes faster than its bandwidth:
//   T >= (activation bytes_l + sync bytes_l) / bandwidth_l, and, since the syncs of all
//   segments share the phase after the first cross-cluster sync starts,
//   T >= first_sync + sync bytes_l / bandwidth_l.
double iteration_bound(const Context& ctx, const Estimate& out,
                       const std::vector<std::vector<double>>& stream,
                       const std::vector<double>& wan_bytes, const std::vector<double>& sync_bytes,
                       double first_sync) {
  double T = 0;
  for (std::size_t i = 0; i < stream.size(); ++i)
    for (std::size_t st = 0; st < stream[i].size(); ++st)
      T = std::max(T, stream[i][st] + out.pipelines[i].stages[st].optimizer_s);
  for (std::size_t l = 0; l < wan_bytes.size(); ++l) {
    T = std::max(T, (wan_bytes[l] + sync_bytes[l]) / ctx.wan_link_bandwidth[l]);
    if (sync_bytes[l] > 0) T = std::max(T, first_sync + sync_bytes[l] / ctx.wan_link_bandwidth[l]);
  }
  return T;
}

}  // namespace

Estimate estimate(const Context& ctx, const core::Plan& plan) {
  // The plan's own choices (recompute, codecs, sequence parallelism) and placement, as the
  // simulator resolves them.
  core::Diagnostics diags;
  const auto resolved =
      sim::resolve_plan(*ctx.scenario, *ctx.model, ctx.compression, plan, "", diags);
  Estimate out;
  if (!resolved) {
    out.iteration_s = infinity;
    out.fits = false;
    out.not_fitting = "the plan (it cannot be resolved: " + diags.format() + ")";
    return out;
  }
  const sim::ResolvedPlan& r = *resolved;
  const auto nodes = placement(r);

  std::vector<Sends> all_sends = stage_transfers(ctx, r, nodes);
  share_wan_links(ctx, all_sends);

  std::vector<double> wan_bytes(ctx.wan_link_bandwidth.size(), 0);
  // finish[i][s]: when stage s of pipeline i ends its last backward.
  std::vector<std::vector<double>> finish;
  BesideBuckets beside;
  for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
    const auto& pipeline = r.plan.pipelines[i];
    const int p = static_cast<int>(pipeline.stages.size());
    Sends& sends = all_sends[i];
    share_ports(ctx, r, static_cast<int>(i), nodes[i], sends);
    PipelineEstimate pe;
    for (int st = 0; st < p; ++st) {
      pe.stages.push_back(stage_costs(ctx, r, i, st, nodes[i][st], sends));
      const StageEstimate& se = pe.stages.back();
      if (se.memory_bytes > se.capacity_bytes && out.fits) {
        out.fits = false;
        out.not_fitting = "pipelines[" + std::to_string(i) + "].stages[" + std::to_string(st) +
                          "] (" + pipeline.stages[st].cluster + ")";
      }
    }
    add_pipeline_wan_bytes(ctx, sends, pipeline.micro_batches, r.chunks, wan_bytes);
    const bool in_order =
        ctx.scenario->simulation.pipeline_messages == core::PipelineMessages::in_order &&
        r.chunks == 1;
    const StageTotals totals = stage_totals(pe.stages, sends, r.chunks, in_order);
    pe.pipeline_s = schedule_time(r.plan.schedule, pe, totals, pipeline.micro_batches, r.chunks);
    // The last backward of each stage runs longer beside the buckets it hands over; the
    // cool-down chains the stages' last backwards (stage_finish), so stage s ends later by its
    // own extra and those of the stages after it, and the pipeline by all of them.
    beside.push_back(stages_beside_buckets(ctx, r, static_cast<int>(i), nodes[i]));
    std::vector<double> extra;
    for (const auto& chunks : beside.back()) {
      extra.push_back(0);
      for (const auto& prefix : chunks) extra.back() += prefix.back();
    }
    pe.pipeline_s += std::accumulate(extra.begin(), extra.end(), 0.0);
    std::vector<double> stage_ends = stage_finish(pe, r.chunks);
    for (std::size_t st = 1; st < stage_ends.size(); ++st)
      stage_ends[st] -= std::accumulate(extra.begin(), extra.begin() + st, 0.0);
    finish.push_back(std::move(stage_ends));
    out.pipelines.push_back(std::move(pe));
  }

  std::vector<std::vector<double>> stream = std::move(finish);  // each stage's sync stream
  // The syncs of all segments run after the backward, so a WAN link carries them all in
  // that phase (a bound on its length).
  std::vector<double> sync_bytes(ctx.wan_link_bandwidth.size(), 0);
  double first_sync = infinity;
  gradient_sync(ctx, r, nodes, beside, stream, out, sync_bytes, first_sync);
  out.iteration_s = iteration_bound(ctx, out, stream, wan_bytes, sync_bytes, first_sync);
  return out;
}

}  // namespace hgsim::planner
