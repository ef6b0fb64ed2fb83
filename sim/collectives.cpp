#include "sim/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compress/codec_cost.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/nccl_costs.hpp"
#include "sim/engine.hpp"

namespace hgsim::sim {

bool is_power_of_two(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

namespace {

int ceil_log2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}

NodeId join_of(Graph& g, std::initializer_list<NodeId> nodes) {
  NodeId j = g.join();
  for (NodeId n : nodes) g.edge(n, j);
  return j;
}

// While a collective's lowering runs, it is one span of the graph (Graph::record_collectives,
// for the Chakra export's COMM_COLL_NODE); a lowering inside another is part of the outer.
class Recorded {
 public:
  Recorded(const Sender& s, const Collective& c, CollectiveKind kind, Lowering lowering)
      : graph_(s.graph),
        first_(static_cast<NodeId>(s.graph.size())),
        outermost_(s.graph.enter_collective()) {
    if (outermost_)
      span_ = {0,      0,        kind, lowering, c.bytes, s.graph.label(c.name), s.micro_batch,
               s.work, c.members};
  }
  ~Recorded() { graph_.leave_collective(outermost_, std::move(span_), first_); }
  Recorded(const Recorded&) = delete;
  Recorded& operator=(const Recorded&) = delete;

 private:
  Graph& graph_;
  NodeId first_;
  bool outermost_;
  CollectiveSpan span_;
};

int step_label(const Sender& s, const Collective& c, const char* phase, int step) {
  return s.graph.label(c.name + " " + phase + " step " + std::to_string(step));
}

// The rate a transfer from src to dst gets with its links to itself: the route's narrowest
// link, a WAN route's TCP window once per parallel flow (the engine's split of a transfer),
// a link with a bandwidth trace at its trace's highest step (so that a pacing delay is never
// longer than the transmission it stands for, whenever the transfer runs).
double uncontended_rate(const Platform& p, int src, int dst, int flows) {
  const int f = transfer_flows(p, src, dst, flows);
  double rate = std::numeric_limits<double>::infinity();
  p.for_each_hop(src, dst, [&](const Hop& h) {
    const Link& l = p.links[h.link];
    double peak = l.bytes_per_s;
    for (const auto& step : l.trace) peak = std::max(peak, step.second);
    rate = std::min(rate, l.kind == LinkKind::tcp_window ? f * peak : peak);
  });
  return rate;
}

// `steps` ring steps of `chunk` bytes: at each step member i sends to member i+1 what it
// received at the step before, combined with its own data.
// As in NCCL's ring, a member sends nothing before its own data is ready, and its sends
// leave one after another: the next leaves when the previous one's transmission ends,
// which a transfer's own end does not say (SimGrid pays a transfer's latency first, then
// its bytes). Two rules, each exact where it is used:
// - every hop of the ring has the same latency: the next send waits for the previous one's
//   arrival. With every member ready at once this never waits (a member's previous send
//   arrives when what it forwards does); a member ready late sends its backlog one step at
//   a time, as NCCL does, and holds the ring up at every step that passes through it;
// - hops of different latencies (NVLink and NIC, a WAN hop in a flat ring): waiting for
//   arrivals would make each step the slowest hop, where NCCL's ring pipelines its steps at
//   the ring's mean hop (its own latency model: the sum of its intra- and inter-node
//   steps). The next send waits instead for a pacing delay that ends when the previous
//   one's bytes have left at the route's rate: with every member ready at once it never
//   waits (the data it forwards comes later), and a late member's backlog leaves one step
//   after another at the link's full rate instead of all at once sharing it (which held
//   every first arrival back, and the ring with it). Under contention from other traffic
//   the delay is shorter than the transmission, and consecutive sends overlap a little.
// `sent` holds, per member, the node its next send must wait for (its data ready before its
// first).
std::vector<NodeId> ring_steps(const Sender& s, const Collective& c, std::vector<NodeId> have,
                               std::vector<NodeId>& sent, int steps, double chunk,
                               const char* phase) {
  const int n = static_cast<int>(c.members.size());
  double shortest = std::numeric_limits<double>::infinity(), longest = 0;
  for (int i = 0; i < n; ++i) {
    const double latency = s.platform.route_latency(c.members[i], c.members[(i + 1) % n]);
    shortest = std::min(shortest, latency);
    longest = std::max(longest, latency);
  }
  const bool one_latency = longest - shortest <= 1e-12 * longest;
  for (int step = 0; step < steps; ++step) {
    std::vector<NodeId> arrived(n);
    const int label = step_label(s, c, phase, step);
    std::vector<NodeId> left(n);
    for (int i = 0; i < n; ++i) {
      const int next = (i + 1) % n;
      arrived[next] = s.send(c.members[i], c.members[next], chunk, have[i], sent[i], label, c.flows,
                             one_latency ? nullptr : &left[i]);
    }
    for (int i = 0; i < n; ++i) sent[i] = one_latency ? arrived[(i + 1) % n] : left[i];
    have = std::move(arrived);
  }
  return have;
}

}  // namespace

CodedTransfer code_wan_transfer(const WanCodec& codec, double bytes, int flows,
                                const kernels::GpuSpec& src, const kernels::GpuSpec& dst) {
  if (!codec.active()) return {bytes, 0, 0};
  // Each of the `flows` parallel senders codes its own share.
  const double share = bytes / std::max(flows, 1);
  const double elements = share / core::element_bytes(codec.dtype);
  const auto shape = compress::wan_codec_shape(elements, codec.columns);
  const auto at_src = compress::code_transfer(codec.spec, shape, codec.dtype, src);
  const auto at_dst = compress::code_transfer(codec.spec, shape, codec.dtype, dst);
  return {at_src.wire_bytes.value() * std::max(flows, 1), at_src.encode.value(),
          at_dst.decode.value()};
}

NodeId Sender::send(int src, int dst, double bytes, NodeId after, int label, int flows) const {
  return send(src, dst, bytes, after, after, label, flows);
}

NodeId Sender::send(int src, int dst, double bytes, NodeId after, NodeId also_after, int label,
                    int flows, NodeId* left) const {
  const bool wan = platform.crosses_wan(src, dst);
  const bool coded = wan && codec && codec->active();
  double wire = bytes;
  if (send_recv_cost && !wan) {
    const core::Cluster& cluster = *platform.clusters[platform.devices[src].cluster].spec;
    const double extra = send_recv_extra_s(cluster, platform.route_latency(src, dst));
    if (extra > 0) {
      const NodeId cost = graph.delay(src, extra, work, label, micro_batch);
      graph.edge(after, cost);
      if (also_after != after) graph.edge(also_after, cost);
      after = also_after = cost;
    }
  }
  NodeId start = after;
  double decode_s = 0;
  if (coded) {
    const auto& src_gpu = *platform.clusters[platform.devices[src].cluster].gpu;
    const auto& dst_gpu = *platform.clusters[platform.devices[dst].cluster].gpu;
    const CodedTransfer c = code_wan_transfer(*codec, bytes, flows, src_gpu, dst_gpu);
    decode_s = c.decode_s;
    wire = c.wire_bytes;
    start =
        graph.compute(src, c.encode_s, Work::codec,
                      graph.label("encode " + compress::to_string(codec->spec.kind)), micro_batch);
    graph.edge(after, start);
  }
  // The send's first node (the encoding, else the transfer) also waits for `also_after`: an
  // edge, where a join would be a node per send.
  if (coded && also_after != after) graph.edge(also_after, start);
  if (wan && stats) {
    stats->wan_raw_bytes += bytes;
    stats->wan_wire_bytes += wire;
  }
  const NodeId t = graph.transfer(src, dst, wire, work, label, micro_batch, flows);
  graph.edge(start, t);
  if (!coded && also_after != after) graph.edge(also_after, t);
  if (left) {
    *left = graph.delay(src, wire / uncontended_rate(platform, src, dst, flows), Work::pacing,
                        label, micro_batch);
    graph.edge(start, *left);
    if (!coded && also_after != after) graph.edge(also_after, *left);
  }
  if (fifo) {
    auto [previous, first] = fifo->try_emplace({src, dst}, t);
    if (!first) {
      graph.edge(previous->second, t);
      previous->second = t;
    }
  }
  if (!coded) return t;
  const NodeId decoded =
      graph.compute(dst, decode_s, Work::codec,
                    graph.label("decode " + compress::to_string(codec->spec.kind)), micro_batch);
  graph.edge(t, decoded);
  return decoded;
}

// ---- pipelined ------------------------------------------------------------------------------

std::vector<NodeId> pipelined_flows(const Sender& s, const Collective& c,
                                    const std::vector<PipelinedEdge>& edges, double edge_bytes,
                                    int steps, const std::string& phase) {
  const int n = static_cast<int>(c.members.size());
  if (n <= 1 || edges.empty()) return c.ready;
  // A transfer pays its route's latency times the network model's factor (engine.hpp).
  const double factor =
      s.platform.network_model == core::NetworkModel::lv08 ? lv08_latency_factor : 1.0;
  std::vector<double> latency(edges.size());
  double mean = 0;
  for (std::size_t e = 0; e < edges.size(); ++e) {
    latency[e] =
        factor * s.platform.route_latency(c.members[edges[e].from], c.members[edges[e].to]);
    mean += latency[e] / static_cast<double>(edges.size());
  }
  const NodeId start = s.graph.join();
  for (NodeId r : c.ready) s.graph.edge(r, start);
  const int label = s.graph.label(c.name + " " + phase + " pipelined");
  const NodeId done = s.graph.join();
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const int dst = c.members[edges[e].to];
    const NodeId arrived = s.send(c.members[edges[e].from], dst, edge_bytes, start, label, c.flows);
    const double rest = steps * mean - latency[e];
    if (rest <= 1e-12 * steps * mean) {
      s.graph.edge(arrived, done);
      continue;
    }
    const NodeId waited = s.graph.delay(dst, rest, s.work, label, s.micro_batch);
    s.graph.edge(arrived, waited);
    s.graph.edge(waited, done);
  }
  return std::vector<NodeId>(n, done);
}

std::vector<NodeId> pipelined_ring(const Sender& s, const Collective& c, int steps, double chunk,
                                   const std::string& phase) {
  const int n = static_cast<int>(c.members.size());
  std::vector<PipelinedEdge> edges;
  for (int i = 0; i < n; ++i) edges.push_back({i, (i + 1) % n});
  return pipelined_flows(s, c, edges, steps * chunk, steps, phase);
}

namespace {
bool pipelined(const Sender& s) {
  return s.granularity == core::CollectiveGranularity::pipelined;
}
}  // namespace

std::vector<NodeId> ring_all_reduce(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::all_reduce, Lowering::ring);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  if (pipelined(s)) return pipelined_ring(s, c, 2 * (n - 1), c.bytes / n, "all-reduce");
  const double chunk = c.bytes / n;
  std::vector<NodeId> sent = c.ready;
  auto have = ring_steps(s, c, c.ready, sent, n - 1, chunk, "reduce-scatter");
  return ring_steps(s, c, have, sent, n - 1, chunk, "all-gather");
}

std::vector<NodeId> ring_reduce_scatter(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::reduce_scatter, Lowering::ring);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  if (pipelined(s)) return pipelined_ring(s, c, n - 1, c.bytes / n, "reduce-scatter");
  std::vector<NodeId> sent = c.ready;
  return ring_steps(s, c, c.ready, sent, n - 1, c.bytes / n, "reduce-scatter");
}

std::vector<NodeId> ring_all_gather(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::all_gather, Lowering::ring);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  if (pipelined(s)) return pipelined_ring(s, c, n - 1, c.bytes / n, "all-gather");
  std::vector<NodeId> sent = c.ready;
  return ring_steps(s, c, c.ready, sent, n - 1, c.bytes / n, "all-gather");
}

namespace {
// The binomial tree's edges, parent to child: at round r member i < 2^r sends to i + 2^r.
std::vector<PipelinedEdge> binomial_tree_edges(int n) {
  std::vector<PipelinedEdge> edges;
  for (int mask = 1; mask < n; mask <<= 1)
    for (int i = 0; i < mask && i + mask < n; ++i) edges.push_back({i, i + mask});
  return edges;
}
}  // namespace

std::vector<NodeId> tree_broadcast(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::broadcast, Lowering::tree);
  const int n = static_cast<int>(c.members.size());
  // Pipelined: every edge of the tree carries the whole tensor at once (a parent's children
  // share its link), ceil(log2 n) rounds of latency.
  if (pipelined(s))
    return pipelined_flows(s, c, binomial_tree_edges(n), c.bytes, ceil_log2(n), "broadcast");
  std::vector<NodeId> have = c.ready;
  std::vector<NodeId> sent = c.ready;  // a member's sends go one after another
  for (int round = 0, mask = 1; mask < n; ++round, mask <<= 1) {
    const int label = step_label(s, c, "broadcast", round);
    for (int i = 0; i < mask && i + mask < n; ++i) {
      const NodeId after = join_of(s.graph, {have[i], sent[i]});
      const NodeId arrived =
          s.send(c.members[i], c.members[i + mask], c.bytes, after, label, c.flows);
      have[i + mask] = join_of(s.graph, {have[i + mask], arrived});
      sent[i] = arrived;
    }
  }
  return have;
}

std::vector<NodeId> tree_all_reduce(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::all_reduce, Lowering::tree);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  if (pipelined(s)) {
    std::vector<PipelinedEdge> up = binomial_tree_edges(n);
    for (PipelinedEdge& e : up) std::swap(e.from, e.to);
    const auto reduced = pipelined_flows(s, c, up, c.bytes, ceil_log2(n), "reduce");
    return tree_broadcast(s, {c.members, reduced, c.bytes, c.name, c.flows});
  }
  // Reduce: at round r, every member whose index is an odd multiple of 2^r sends its
  // partial sum to the member 2^r below it.
  std::vector<NodeId> have = c.ready;
  for (int round = 0, mask = 1; mask < n; ++round, mask <<= 1) {
    const int label = step_label(s, c, "reduce", round);
    for (int i = mask; i < n; i += 2 * mask) {
      const NodeId arrived =
          s.send(c.members[i], c.members[i - mask], c.bytes, have[i], label, c.flows);
      have[i - mask] = join_of(s.graph, {have[i - mask], arrived});
    }
  }
  // Broadcast the sum from members[0] back to everyone.
  return tree_broadcast(s, {c.members, have, c.bytes, c.name, c.flows});
}

std::vector<NodeId> halving_doubling_all_reduce(const Sender& s, const Collective& c) {
  const Recorded recorded(s, c, CollectiveKind::all_reduce, Lowering::halving_doubling);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  if (!is_power_of_two(n)) return ring_all_reduce(s, c);
  std::vector<NodeId> have = c.ready;
  auto exchange = [&](int distance, double bytes, const char* phase, int round) {
    const int label = step_label(s, c, phase, round);
    std::vector<NodeId> next(n);
    for (int i = 0; i < n; ++i) {
      const int partner = i ^ distance;
      next[partner] = s.send(c.members[i], c.members[partner], bytes, have[i], label, c.flows);
    }
    for (int i = 0; i < n; ++i) have[i] = join_of(s.graph, {have[i], next[i]});
  };
  // Reduce-scatter by recursive halving: exchange half of what is left with a partner
  // n/2, n/4, ... away.
  int round = 0;
  double bytes = c.bytes;
  for (int distance = n / 2; distance >= 1; distance /= 2, ++round) {
    bytes /= 2;
    exchange(distance, bytes, "halving", round);
  }
  // All-gather by recursive doubling: partners 1, 2, 4, ... away, the piece doubling.
  bytes = c.bytes / n;
  round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    exchange(distance, bytes, "doubling", round);
    bytes *= 2;
  }
  return have;
}

int hierarchical_lanes(const std::vector<int>& sizes) {
  int lanes = 0;
  for (int n : sizes) lanes = std::max(lanes, n);
  return lanes;
}

int hierarchical_lane_member(int lane, int lanes, int size) {
  return static_cast<int>(static_cast<long long>(lane) * size / lanes);
}

std::vector<NodeId> hierarchical_all_reduce(const Sender& s, const Collective& c,
                                            const std::vector<std::vector<int>>& groups) {
  const Recorded recorded(s, c, CollectiveKind::all_reduce, Lowering::hierarchical);
  if (groups.size() <= 1) return ring_all_reduce(s, c);
  std::vector<NodeId> done(c.members.size());
  std::vector<std::size_t> index_of(groups.size());
  // Positions of each group's members inside c.members.
  std::vector<std::vector<std::size_t>> position(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (int device : groups[g])
      position[g].push_back(std::find(c.members.begin(), c.members.end(), device) -
                            c.members.begin());

  // 1. Reduce-scatter inside each cluster.
  std::vector<std::vector<NodeId>> shard(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Collective local{groups[g], {}, c.bytes, c.name + " intra", c.flows};
    for (std::size_t p : position[g]) local.ready.push_back(c.ready[p]);
    shard[g] = ring_reduce_scatter(s, local);
  }
  // 2. All-reduce across clusters, lane by lane; a member's shard is reduced once all the
  // lanes it serves are.
  std::vector<int> sizes;
  for (const auto& g : groups) sizes.push_back(static_cast<int>(g.size()));
  const int lanes = hierarchical_lanes(sizes);
  // A member serving several lanes (a smaller cluster's) holds its shard once all are done.
  std::vector<std::vector<NodeId>> reduced_shard = shard;
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (sizes[g] < lanes)
      for (NodeId& have : reduced_shard[g]) have = s.graph.join();
  for (int lane = 0; lane < lanes; ++lane) {
    Collective across{{},
                      {},
                      c.bytes / static_cast<double>(lanes),
                      c.name + " inter lane " + std::to_string(lane),
                      c.flows};
    std::vector<int> member(groups.size());
    for (std::size_t g = 0; g < groups.size(); ++g) {
      member[g] = hierarchical_lane_member(lane, lanes, sizes[g]);
      across.members.push_back(groups[g][member[g]]);
      across.ready.push_back(shard[g][member[g]]);
    }
    const auto reduced = ring_all_reduce(s, across);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (sizes[g] < lanes)
        s.graph.edge(reduced[g], reduced_shard[g][member[g]]);
      else
        reduced_shard[g][member[g]] = reduced[g];
    }
  }
  shard = std::move(reduced_shard);
  // 3. All-gather inside each cluster.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    Collective local{groups[g], shard[g], c.bytes, c.name + " intra", c.flows};
    auto gathered = ring_all_gather(s, local);
    for (std::size_t k = 0; k < gathered.size(); ++k) done[position[g][k]] = gathered[k];
  }
  return done;
}

std::vector<NodeId> all_reduce(core::GradSyncAlgorithm algorithm, const Sender& s,
                               const Collective& c) {
  switch (algorithm) {
    case core::GradSyncAlgorithm::tree:
      return tree_all_reduce(s, c);
    case core::GradSyncAlgorithm::halving_doubling:
      return halving_doubling_all_reduce(s, c);
    case core::GradSyncAlgorithm::ring:
    case core::GradSyncAlgorithm::hierarchical:
      break;
  }
  return ring_all_reduce(s, c);
}

// ---- closed forms -----------------------------------------------------------------------

double nvlink_bytes_per_s(const core::Cluster& c) {
  return c.nvlink.bandwidth.value() * kernels::intra_node_efficiency(c);
}

Hop2 nvlink_hop(const core::Cluster& c) {
  return {nvlink_bytes_per_s(c), 2 * c.nvlink.latency.value()};
}

Hop2 nic_hop(const core::Cluster& c) {
  return {c.nic.bandwidth.value() * c.nic_share() / std::max(1.0, c.oversubscription),
          2 * c.nic.latency.value()};
}

double send_recv_extra_s(const core::Cluster& c, double hop_latency_s) {
  return std::max(0.0, kernels::send_recv_fixed_cost_s(c) - hop_latency_s);
}

double send_recv_latency_s(const core::Cluster& c, double hop_latency_s) {
  return hop_latency_s + send_recv_extra_s(c, hop_latency_s);
}

double send_recv_time(const core::Cluster& c, bool same_node, double bytes) {
  const Hop2 hop = same_node ? nvlink_hop(c) : nic_hop(c);
  return send_recv_latency_s(c, hop.latency_s) + bytes / hop.bytes_per_s;
}

double ring_step_time(double chunk_bytes, const RingHops& ring) {
  const Hop2& in = ring.inside;
  if (ring.crossings == 0) return chunk_bytes / in.bytes_per_s + in.latency_s;
  const Hop2& out = ring.across;
  const double n = ring.members;
  const double k = ring.crossings;
  const double mean = ((n - k) * (in.latency_s + chunk_bytes / in.bytes_per_s) +
                       k * (out.latency_s + chunk_bytes / out.bytes_per_s)) /
                      n;
  return std::max(chunk_bytes / out.bytes_per_s, mean);
}

double ring_all_reduce_time(double bytes, const RingHops& ring) {
  const int n = ring.members;
  if (ring.crossings == 0) return ring_all_reduce_time(n, bytes, ring.inside);
  return 2.0 * (n - 1) * ring_step_time(bytes / n, ring);
}

double ring_all_gather_time(double bytes, const RingHops& ring) {
  const int n = ring.members;
  if (ring.crossings == 0) return ring_all_gather_time(n, bytes, ring.inside);
  return (n - 1.0) * ring_step_time(bytes / n, ring);
}

double ring_all_reduce_time(int n, double bytes, Hop2 hop) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / hop.bytes_per_s + 2.0 * (n - 1) * hop.latency_s;
}

double ring_reduce_scatter_time(int n, double bytes, Hop2 hop) {
  if (n <= 1) return 0;
  return 1.0 * (n - 1) / n * bytes / hop.bytes_per_s + (n - 1) * hop.latency_s;
}

double ring_all_gather_time(int n, double bytes, Hop2 hop) {
  return ring_reduce_scatter_time(n, bytes, hop);
}

double tree_broadcast_time(int n, double bytes, Hop2 hop) {
  if (n <= 1) return 0;
  return ceil_log2(n) * (bytes / hop.bytes_per_s + hop.latency_s);
}

double tree_all_reduce_time(int n, double bytes, Hop2 hop) {
  return 2 * tree_broadcast_time(n, bytes, hop);
}

double halving_doubling_all_reduce_time(int n, double bytes, Hop2 hop) {
  if (n <= 1) return 0;
  if (!is_power_of_two(n)) return ring_all_reduce_time(n, bytes, hop);
  return 2.0 * (n - 1) / n * bytes / hop.bytes_per_s + 2.0 * ceil_log2(n) * hop.latency_s;
}

bool runs_as_channel_rings(core::GradSyncAlgorithm algorithm) {
  return algorithm == core::GradSyncAlgorithm::ring ||
         algorithm == core::GradSyncAlgorithm::hierarchical;
}

ChannelRing channel_ring(const std::vector<int>& members_per_node) {
  ChannelRing ring;
  ring.members = 0;
  ring.nodes = 0;
  int fewest = std::numeric_limits<int>::max(), most = 0;
  for (int m : members_per_node) {
    if (m <= 0) continue;
    ring.members += m;
    ring.nodes += 1;
    fewest = std::min(fewest, m);
    most = std::max(most, m);
  }
  if (ring.nodes == 0) return ChannelRing{};
  ring.channels = ring.nodes >= 2 ? fewest : 1;
  // A GPU that is no channel's exit carries every channel's in-node hop; where every node
  // has exactly `channels` members each GPU is one channel's exit.
  ring.nvlink_load = most == ring.channels ? ring.channels - 1 : ring.channels;
  if (ring.nodes == 1) ring.nvlink_load = 1;
  return ring;
}

RingHops channel_ring_hops(const core::Cluster& c, const ChannelRing& ring) {
  RingHops hops;
  hops.members = ring.members;
  hops.inside = nvlink_hop(c);
  hops.inside.bytes_per_s /= std::max(ring.nvlink_load, 1);
  if (ring.nodes < 2) return hops;
  hops.crossings = ring.nodes;
  hops.across = nic_hop(c);
  return hops;
}

double channel_ring_all_reduce_time(const core::Cluster& c, const ChannelRing& ring, double bytes) {
  return channel_ring_time(c, ring, bytes, RingKind::all_reduce);
}

std::vector<std::vector<int>> channel_orders(const std::vector<std::vector<int>>& by_node,
                                             int channels) {
  std::vector<std::vector<int>> orders(std::max(channels, 1));
  for (int j = 0; j < int(orders.size()); ++j)
    for (const std::vector<int>& node : by_node) {
      const int m = static_cast<int>(node.size());
      for (int i = 0; i < m; ++i) orders[j].push_back(node[(i + j) % m]);
    }
  return orders;
}

// ---- NCCL's fixed cost per collective ------------------------------------------------------

double ring_latency_s(const RingHops& ring, int steps) {
  const double n = ring.members;
  const double k = ring.crossings;
  const double mean = ((n - k) * ring.inside.latency_s + k * ring.across.latency_s) / n;
  return steps * mean;
}

int ring_kind_steps(RingKind kind, int n) {
  return kind == RingKind::all_reduce ? 2 * (n - 1) : n - 1;
}

ChannelPlan channel_ring_plan(const core::Cluster& c, const ChannelRing& ring, double bytes,
                              RingKind kind) {
  ChannelPlan best;
  if (ring.members <= 1) return best;
  const RingHops hops = channel_ring_hops(c, ring);
  const int steps = ring_kind_steps(kind, ring.members);
  const int inter_steps = ring.nodes <= 1                ? 0
                          : kind == RingKind::all_reduce ? 2 * (ring.nodes - 1)
                                                         : ring.nodes - 1;
  const double own_latency = ring_latency_s(hops, steps);
  const double fixed = kernels::collective_fixed_cost_s(c, ring.members);
  best.time_s = std::numeric_limits<double>::infinity();
  for (const kernels::NcclProtocolFigures& p : kernels::nccl_ring_protocols()) {
    const double wire = 1 / p.bus_fraction;
    const double share = bytes * wire / ring.channels;
    const double rings = kind == RingKind::all_reduce ? ring_all_reduce_time(share, hops)
                                                      : ring_all_gather_time(share, hops);
    const double latency =
        fixed + kernels::nccl_ring_latency_s(c, p, steps, inter_steps, ring.members, ring.nodes,
                                             kind == RingKind::all_reduce);
    const double extra = std::max(0.0, latency - own_latency);
    if (rings + extra < best.time_s) best = {p.protocol, wire, extra, rings + extra};
  }
  return best;
}

double channel_ring_time(const core::Cluster& c, const ChannelRing& ring, double bytes,
                         RingKind kind) {
  return channel_ring_plan(c, ring, bytes, kind).time_s;
}

std::vector<NodeId> channel_collective(const Sender& s, const Collective& c,
                                       const core::Cluster& cluster,
                                       const std::vector<std::vector<int>>& by_node,
                                       RingKind kind) {
  const Recorded recorded(s, c,
                          kind == RingKind::all_reduce       ? CollectiveKind::all_reduce
                          : kind == RingKind::reduce_scatter ? CollectiveKind::reduce_scatter
                                                             : CollectiveKind::all_gather,
                          Lowering::channel);
  std::vector<int> counts;
  for (const auto& node : by_node) counts.push_back(static_cast<int>(node.size()));
  const ChannelRing ring = channel_ring(counts);
  const int n = static_cast<int>(c.members.size());
  if (n <= 1) return c.ready;
  const ChannelPlan plan = channel_ring_plan(cluster, ring, c.bytes, kind);
  std::vector<NodeId> ready = c.ready;
  if (plan.extra_s > 0) {
    const int label =
        s.graph.label(c.name + " nccl fixed cost (" + kernels::to_string(plan.protocol) + ")");
    for (int m = 0; m < n; ++m) {
      ready[m] = s.graph.delay(c.members[m], plan.extra_s, s.work, label, s.micro_batch);
      s.graph.edge(c.ready[m], ready[m]);
    }
  }
  std::vector<NodeId> done(n);
  for (NodeId& d : done) d = s.graph.join();
  const auto orders = channel_orders(by_node, ring.channels);
  for (std::size_t j = 0; j < orders.size(); ++j) {
    Collective channel{{},
                       {},
                       c.bytes * plan.wire_factor / ring.channels,
                       c.name + (ring.channels > 1 ? " channel " + std::to_string(j) : ""),
                       c.flows};
    for (int m : orders[j]) {
      channel.members.push_back(c.members[m]);
      channel.ready.push_back(ready[m]);
    }
    const auto finished = kind == RingKind::all_reduce       ? ring_all_reduce(s, channel)
                          : kind == RingKind::reduce_scatter ? ring_reduce_scatter(s, channel)
                                                             : ring_all_gather(s, channel);
    for (std::size_t i = 0; i < finished.size(); ++i) s.graph.edge(finished[i], done[orders[j][i]]);
  }
  return done;
}

// ---- tensor parallelism, as NCCL runs it -----------------------------------------------------

ChannelRing tensor_parallel_channels(const core::Cluster& c, int tp) {
  if (tp <= c.gpus_per_node) return channel_ring({tp});
  return channel_ring(std::vector<int>(tp / c.gpus_per_node, c.gpus_per_node));
}

double tensor_parallel_block_time(const core::Cluster& c, int tp, double bytes,
                                  bool sequence_parallel) {
  if (tp <= 1) return 0;
  const ChannelRing ring = tensor_parallel_channels(c, tp);
  if (!sequence_parallel) return channel_ring_time(c, ring, bytes, RingKind::all_reduce);
  return channel_ring_time(c, ring, bytes, RingKind::reduce_scatter) +
         channel_ring_time(c, ring, bytes, RingKind::all_gather);
}

double tensor_parallel_all_gather_time(const core::Cluster& c, int tp, double bytes) {
  if (tp <= 1) return 0;
  return channel_ring_time(c, tensor_parallel_channels(c, tp), bytes, RingKind::all_gather);
}

std::vector<NodeId> tensor_parallel_collective(const Sender& s, const Collective& c,
                                               const core::Cluster& cluster, int first_gpu,
                                               RingKind kind) {
  std::map<int, std::vector<int>> nodes;
  for (int m = 0; m < static_cast<int>(c.members.size()); ++m)
    nodes[(first_gpu + m) / cluster.gpus_per_node].push_back(m);
  std::vector<std::vector<int>> by_node;
  for (auto& [node, members] : nodes) by_node.push_back(std::move(members));
  return channel_collective(s, c, cluster, by_node, kind);
}

double all_reduce_time(core::GradSyncAlgorithm algorithm, int n, double bytes, Hop2 hop) {
  switch (algorithm) {
    case core::GradSyncAlgorithm::tree:
      return tree_all_reduce_time(n, bytes, hop);
    case core::GradSyncAlgorithm::halving_doubling:
      return halving_doubling_all_reduce_time(n, bytes, hop);
    case core::GradSyncAlgorithm::ring:
    case core::GradSyncAlgorithm::hierarchical:
      break;
  }
  return ring_all_reduce_time(n, bytes, hop);
}

}  // namespace hgsim::sim
