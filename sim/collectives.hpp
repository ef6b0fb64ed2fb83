// Collectives lowered to point-to-point transfers, each written as its textbook steps,
// and their closed forms (used by folded fidelity and checked against the lowering).
//
// Every collective runs among `members` (devices), starts for member i once `ready[i]`
// has completed, and returns for each member the node after which it holds its result.
// Reduction arithmetic is not costed (it hides under the transfers on GPUs).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/nccl_costs.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

// The one place a transfer crossing the WAN gets its codec: bytes on the wire and codec
// time at both ends come from compress::code_transfer.
struct WanCodec {
  compress::CodecSpec spec;
  core::Precision dtype = core::Precision::bf16;
  int columns = 1;  // the tensor's last dimension (hidden size), for codecs that need a shape
  bool active() const { return spec.kind != compress::CodecKind::none; }
};

struct CodecStats {
  double wan_raw_bytes = 0;   // what WAN transfers would have carried uncompressed
  double wan_wire_bytes = 0;  // what they carried
};

// What a transfer of `bytes` crossing the WAN becomes under `codec` when `flows` parallel
// senders each code their own share (a tensor of rows x codec.columns): bytes on the wire (all
// flows), encode seconds on `src`'s GPU and decode seconds on `dst`'s (compress::code_transfer).
// Sender::send uses it; so does the planner's closed form of the outer sync.
struct CodedTransfer {
  double wire_bytes = 0;
  double encode_s = 0;
  double decode_s = 0;
};
CodedTransfer code_wan_transfer(const WanCodec& codec, double bytes, int flows,
                                const kernels::GpuSpec& src, const kernels::GpuSpec& dst);

// Sends `bytes` from `src` to `dst` after `after`; returns the node after which `dst` has
// the data. Crossing the WAN with an active codec: encode on `src`, the encoded bytes on
// the wire, decode on `dst`. `flows`: parallel TCP flows the transfer stands for.
struct Sender {
  Graph& graph;
  const Platform& platform;
  const WanCodec* codec = nullptr;  // nullptr or inactive: raw bytes
  CodecStats* stats = nullptr;
  Work work = Work::none;
  int micro_batch = -1;
  // Point-to-point messages between one pair of GPUs go one after another, in the order they
  // are sent (NCCL's and gloo's send/recv on one stream or connection: measured on the live
  // runner, validation/live.md), instead of sharing the link. When set, each transfer from
  // src to dst starts after the previous one on that pair: the last transfer per pair.
  std::map<std::pair<int, int>, NodeId>* fifo = nullptr;
  // simulation.collectives: ring and tree collectives as their steps, or as the flows NCCL
  // keeps in flight (pipelined_flows).
  core::CollectiveGranularity granularity = core::CollectiveGranularity::steps;
  // NCCL's send/recv kernel (pipeline transfers): a transfer inside a cluster first waits
  // send_recv_extra_s of its route's latency, the kernel's fixed cost beyond it.
  bool send_recv_cost = false;

  NodeId send(int src, int dst, double bytes, NodeId after, int label, int flows = 1) const;
  // The same, starting after both `after` and `also_after`. With `left` set, also a delay
  // (Work::pacing) that starts with the transfer and ends when its bytes would have left at
  // the route's rate with the links to itself: *left is that node.
  NodeId send(int src, int dst, double bytes, NodeId after, NodeId also_after, int label, int flows,
              NodeId* left = nullptr) const;
};

struct Collective {
  std::vector<int> members;   // devices, in ring order
  std::vector<NodeId> ready;  // per member: the node its data is ready after
  double bytes = 0;           // the tensor each member holds (all-reduce, reduce-scatter input)
  std::string name;           // "dp bucket 3", shown in labels
  int flows = 1;              // folded fidelity: parallel rings each transfer stands for
};

// ---- pipelined: the flows NCCL keeps in flight (simulation.collectives: pipelined) --------
//
// NCCL does not run a ring as lock-step phases: it cuts the buffer into chunks and keeps
// every edge of the ring busy at once, so a ring runs at its slowest edge's rate and pays
// the latency of its steps once each (NCCL's tuning model: steps x hop latency + bytes /
// bus bandwidth). Lowered that way, a collective is one flow per edge, all starting once
// every member is ready, each carrying what crosses that edge over the whole collective,
// on the real route (contention, WAN links, asymmetric hops are SimGrid's); after its flow
// each edge waits out the rest of the steps' latency: max(0, steps x mean edge latency -
// its own route latency, which the flow paid). Every member holds the result once every
// edge is done. On a uniform, uncontended ring that is exactly the closed form,
// steps (a + bytes_per_edge / steps / B).
struct PipelinedEdge {
  int from = 0;  // indices into Collective::members
  int to = 0;
};
std::vector<NodeId> pipelined_flows(const Sender& s, const Collective& c,
                                    const std::vector<PipelinedEdge>& edges, double edge_bytes,
                                    int steps, const std::string& phase);
// A ring of `steps` steps of `chunk` bytes, pipelined: edge i -> i+1 carries steps x chunk.
std::vector<NodeId> pipelined_ring(const Sender& s, const Collective& c, int steps, double chunk,
                                   const std::string& phase);

// Ring: reduce-scatter then all-gather, 2(n-1) steps of bytes/n.
std::vector<NodeId> ring_all_reduce(const Sender& s, const Collective& c);
// Ring reduce-scatter: n-1 steps; member i ends with the reduced chunk i.
std::vector<NodeId> ring_reduce_scatter(const Sender& s, const Collective& c);
// Ring all-gather: n-1 steps; c.bytes is the gathered size, each member starts with bytes/n.
std::vector<NodeId> ring_all_gather(const Sender& s, const Collective& c);
// Binomial-tree broadcast of c.bytes from members[0]: ceil(log2 n) rounds.
std::vector<NodeId> tree_broadcast(const Sender& s, const Collective& c);
// Binomial-tree reduce to members[0], then the broadcast back: 2 ceil(log2 n) rounds of c.bytes.
std::vector<NodeId> tree_all_reduce(const Sender& s, const Collective& c);
// Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling;
// log2 n rounds each, sizes bytes/2, bytes/4, ... For n a power of two; otherwise the ring.
std::vector<NodeId> halving_doubling_all_reduce(const Sender& s, const Collective& c);

// The lanes of an all-reduce across clusters of these sizes (members per cluster): one per
// member of the largest, so that every member of every cluster has a shard crossing the WAN
// and starts its all-gather only once that shard is reduced. A smaller cluster's member
// serves several lanes: lane j runs on its member hierarchical_lane_member(j, lanes, size).
// (With the fewest members' count instead, the larger cluster's other members never waited
// for the WAN, and the curve of time against WAN bandwidth could rise.)
int hierarchical_lanes(const std::vector<int>& sizes);
// The member of a cluster of `size` members that carries lane `lane` of `lanes`:
// floor(lane x size / lanes), so each member serves lanes / size lanes when size divides it.
int hierarchical_lane_member(int lane, int lanes, int size);

// Hierarchical all-reduce for members in several clusters (groups[k] = the members of one
// cluster, in ring order): reduce-scatter inside each cluster, all-reduce of the shards
// across clusters (hierarchical_lanes lanes, each a ring over bytes / lanes joining
// hierarchical_lane_member of every cluster), all-gather inside each cluster once every lane
// a member serves is reduced.
std::vector<NodeId> hierarchical_all_reduce(const Sender& s, const Collective& c,
                                            const std::vector<std::vector<int>>& groups);

std::vector<NodeId> all_reduce(core::GradSyncAlgorithm algorithm, const Sender& s,
                               const Collective& c);

// ---- closed forms on a uniform ring: every hop has bandwidth B (bytes/s) and latency a ----

struct Hop2 {
  double bytes_per_s = 0;
  double latency_s = 0;
};
double ring_all_reduce_time(int n, double bytes, Hop2 hop);      // 2(n-1)/n S/B + 2(n-1) a
double ring_reduce_scatter_time(int n, double bytes, Hop2 hop);  // (n-1)/n S/B + (n-1) a
double ring_all_gather_time(int n, double bytes, Hop2 hop);      // (n-1)/n S/B + (n-1) a
double tree_broadcast_time(int n, double bytes, Hop2 hop);       // ceil(log2 n)(S/B + a)
double tree_all_reduce_time(int n, double bytes, Hop2 hop);      // 2 ceil(log2 n)(S/B + a)
double halving_doubling_all_reduce_time(int n, double bytes,
                                        Hop2 hop);  // 2(n-1)/n S/B + 2 log2(n) a
double all_reduce_time(core::GradSyncAlgorithm algorithm, int n, double bytes, Hop2 hop);

bool is_power_of_two(int n);

// ---- the hops of a cluster, for the closed forms ------------------------------------------

// What NCCL moves per GPU and direction inside a node: `nvlink.bandwidth` as written (the
// datasheet's rate) times kernels::intra_node_efficiency (NCCL's per-link model, or the
// user's calibration). The simulator's NVLink links and every closed form use it.
double nvlink_bytes_per_s(const core::Cluster& c);
// Inside a node: NVLink out and in.
Hop2 nvlink_hop(const core::Cluster& c);
// Between nodes of one cluster: NIC out, fabric, NIC in. With an oversubscribed fabric, or
// fewer NICs than GPUs (nics_per_node), every GPU of the node is taken to be sending at once
// (the node's NICs and uplink shared by all of them: nic.bandwidth x nic_share /
// oversubscription).
Hop2 nic_hop(const core::Cluster& c);
// A ring whose hops are not alike: `crossings` of its `members` hops leave a node (the NIC
// hop), the others stay inside one (NVLink). A tensor-parallel group larger than a node holds
// whole nodes (placement: tp a multiple of gpus_per_node) and its ring leaves each of them
// once, so crossings = its nodes.
struct RingHops {
  int members = 1;
  int crossings = 0;
  Hop2 inside;
  Hop2 across;
};
// One step of such a ring, every member sending a chunk to the next at once: a member sends
// step k + 1 once step k has arrived, so the chain of steps goes round the ring at the pace
// of its mean hop (latency + chunk / bandwidth averaged over the hops), unless the slowest
// hop cannot carry one chunk per step in that time (chunk / its bandwidth):
//   max(chunk / B_across, mean over hops of (a + chunk / B)).
// Without crossings it is a + chunk / B of the uniform ring. The full-fidelity ring plays
// the same steps transfer by transfer (tests/test_resolved_plan.cpp holds the two together
// in the latency- and in the bandwidth-bound regime).
double ring_step_time(double chunk_bytes, const RingHops& ring);
double ring_all_reduce_time(double bytes, const RingHops& ring);  // 2(n-1) step(S/n)
double ring_all_gather_time(double bytes, const RingHops& ring);  // (n-1) step(S/n)

// A data-parallel ring inside one cluster as NCCL builds it: its members grouped by node,
// and one channel per NIC it can use. NCCL gives every GPU its own NIC and builds several
// rings ("channels") over the same ranks, each entering and leaving a node through a
// different GPU, so that a ring with k members on every one of its nodes moves data
// between nodes through k NICs per node, not one (NCCL's all-reduce bus bandwidth across
// DGX nodes is the sum of the node's NICs). Channel j takes each node's members rotated by
// j, so its exit GPU differs from every other channel's; each channel reduces bytes / k.
struct ChannelRing {
  int members = 1;      // ring members (one GPU of each tensor-parallel group)
  int nodes = 1;        // nodes they sit on
  int channels = 1;     // parallel rings: the fewest members of any of its nodes (1 in one node)
  int nvlink_load = 0;  // most channels whose in-node hop one GPU's NVLink port carries
};
// Whether a data-parallel sync inside one cluster runs as such rings (ring, and hierarchical,
// which is the ring inside a cluster).
bool runs_as_channel_rings(core::GradSyncAlgorithm algorithm);
// From the members the ring has on each of its nodes (entries > 0).
ChannelRing channel_ring(const std::vector<int>& members_per_node);
// The hops of one channel in cluster c: crossings = nodes (NIC hop, as nic_hop), the other
// hops NVLink shared by nvlink_load channels (bandwidth / load).
RingHops channel_ring_hops(const core::Cluster& c, const ChannelRing& ring);
// All-reduce of `bytes` over the channels at once: ring_all_reduce_time(bytes / channels,
// channel_ring_hops): 2(n-1) max(chunk / B_nic, mean hop) with chunk = bytes / (k n). In one
// node: the uniform NVLink ring. Plus NCCL's protocol and fixed cost (channel_ring_plan).
double channel_ring_all_reduce_time(const core::Cluster& c, const ChannelRing& ring, double bytes);
// The member order of each channel: `by_node` holds each node's members in ring order;
// channel j visits the nodes in that order, each node's members rotated by j.
std::vector<std::vector<int>> channel_orders(const std::vector<std::vector<int>>& by_node,
                                             int channels);

// ---- NCCL's protocols and fixed cost per collective ---------------------------------------

// The ring's own latency terms over `steps` steps: steps x the mean hop latency.
double ring_latency_s(const RingHops& ring, int steps);

enum class RingKind { all_reduce, reduce_scatter, all_gather };
// Steps of one ring of n members: 2(n-1) for an all-reduce, n-1 for the others.
int ring_kind_steps(RingKind kind, int n);

// How NCCL runs one collective over the channel rings of `ring` in cluster `c`: the protocol
// its tuning model picks (LL, LL128 or Simple, the fastest by the closed form), what each
// byte costs on the wire under it (1 / its share of the bus bandwidth: LL 2, LL128 1/0.92,
// Simple 1), and the latency it adds to the ring's own: every protocol p prices
//   rings(bytes x wire_p / channels) + max(0, fixed(n) + latency_p - the ring's own latency),
// rings the channel rings' steps on channel_ring_hops, fixed(n) the kernel's fixed cost
// (kernels::collective_fixed_cost_s), latency_p NCCL's ring latency for p
// (kernels::nccl_ring_latency_s): NCCL pipelines the steps' latencies under its own, so a
// collective pays the larger of the two. The closed forms take time_s; the full-fidelity
// lowering plays the same choice (channel_collective).
struct ChannelPlan {
  kernels::NcclProtocol protocol = kernels::NcclProtocol::simple;
  double wire_factor = 1;
  double extra_s = 0;
  double time_s = 0;
};
ChannelPlan channel_ring_plan(const core::Cluster& c, const ChannelRing& ring, double bytes,
                              RingKind kind);
// channel_ring_plan's time.
//   all-reduce: 2(n-1) step(S w / (k n)) + extra; reduce-scatter, all-gather: (n-1) step + extra.
double channel_ring_time(const core::Cluster& c, const ChannelRing& ring, double bytes,
                         RingKind kind);
// Full fidelity, the same collective: channel_ring_plan's extra as a delay on each member
// (label "<name> nccl fixed cost (<protocol>)"), then one ring per channel (channel_orders of
// `by_node`, each node's member indices into c.members) over c.bytes x wire / channels; a
// member is done when all its channels are.
std::vector<NodeId> channel_collective(const Sender& s, const Collective& c,
                                       const core::Cluster& cluster,
                                       const std::vector<std::vector<int>>& by_node, RingKind kind);

// One send/recv between two GPUs of cluster `c` (same node: NVLink, else the NIC hop):
// max(hop latency, NCCL's send/recv fixed cost) + bytes / the hop's bandwidth. The
// planner's pipeline transfers pay send_recv_latency_s for the hop's latency; the simulator
// delays each transfer inside a cluster by send_recv_extra_s before it leaves.
double send_recv_time(const core::Cluster& c, bool same_node, double bytes);
double send_recv_latency_s(const core::Cluster& c, double hop_latency_s);
double send_recv_extra_s(const core::Cluster& c, double hop_latency_s);

// ---- tensor parallelism, as NCCL runs it -----------------------------------------------------

// The channel rings of a tensor-parallel group of `tp` GPUs of cluster `c`. Inside one node,
// one NVLink ring. A group larger than a node holds whole nodes (placement: tp a multiple
// of gpus_per_node) and NCCL runs one channel per GPU of a node, each leaving the node
// through its own GPU's NIC (channel_ring of gpus_per_node members on each node).
ChannelRing tensor_parallel_channels(const core::Cluster& c, int tp);
// The tensor-parallel collective after a block of `bytes` (the all-reduce's input): an
// all-reduce, or with sequence parallelism a reduce-scatter and an all-gather (two kernels,
// each with its fixed cost). The simulator's folded fidelity and the planner both use it.
double tensor_parallel_block_time(const core::Cluster& c, int tp, double bytes,
                                  bool sequence_parallel);
// The all-gather of `bytes` (the gathered size) across a tensor-parallel group.
double tensor_parallel_all_gather_time(const core::Cluster& c, int tp, double bytes);
// Full fidelity: the same collectives over the group's devices (consecutive GPUs of the
// cluster from `first_gpu`, in ring order).
std::vector<NodeId> tensor_parallel_collective(const Sender& s, const Collective& c,
                                               const core::Cluster& cluster, int first_gpu,
                                               RingKind kind);

}  // namespace hgsim::sim
