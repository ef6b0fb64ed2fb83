#include "sim/chakra.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

#include "core/files.hpp"
#include "core/text.hpp"
#include "sim/collectives.hpp"

namespace hgsim::sim {

namespace {

constexpr std::uint32_t kNone = 0xffffffffu;

// ---- export ------------------------------------------------------------------------------

// The steps the export walks: a node of the graph, or a collective span standing for every
// node its lowering added (a COMM_COLL_NODE on each member). Steps 0 .. size-1 are nodes,
// size + k is span k.
struct Steps {
  const Graph& g;
  const std::vector<CollectiveSpan>& spans;
  std::vector<std::uint32_t> span_of;  // per node: its span, kNone if in none

  explicit Steps(const Graph& graph)
      : g(graph), spans(graph.collectives()), span_of(graph.size(), kNone) {
    for (std::size_t k = 0; k < spans.size(); ++k)
      for (NodeId n = spans[k].first; n < spans[k].end; ++n)
        span_of[n] = static_cast<std::uint32_t>(k);
  }
  std::uint64_t count() const { return g.size() + spans.size(); }
  std::uint64_t of(NodeId n) const { return span_of[n] == kNone ? n : g.size() + span_of[n]; }
  bool is_span(std::uint64_t step) const { return step >= g.size(); }
  // A node inside a span is no step of its own.
  bool is_step(std::uint64_t step) const { return is_span(step) || span_of[step] == kNone; }
  const CollectiveSpan& span(std::uint64_t step) const { return spans[step - g.size()]; }
  // Calls visit(node) for every node the step stands for.
  template <class Visit>
  void for_each_node(std::uint64_t step, Visit&& visit) const {
    if (!is_span(step)) return visit(static_cast<NodeId>(step));
    for (NodeId n = span(step).first; n < span(step).end; ++n) visit(n);
  }
  // Calls visit(successor step) for each edge out of the step (edges inside a span skipped).
  template <class Visit>
  void for_each_successor(std::uint64_t step, Visit&& visit) const {
    for_each_node(step, [&](NodeId n) {
      for (const NodeId* s = g.successors_begin(n); s != g.successors_end(n); ++s)
        if (of(*s) != step) visit(of(*s));
    });
  }
};

std::vector<std::uint64_t> topological_order(const Steps& steps) {
  std::vector<std::uint32_t> pending(steps.count(), 0);
  for (std::uint64_t u = 0; u < steps.count(); ++u)
    if (steps.is_step(u)) steps.for_each_successor(u, [&](std::uint64_t s) { ++pending[s]; });
  std::vector<std::uint64_t> order;
  order.reserve(steps.count());
  for (std::uint64_t u = 0; u < steps.count(); ++u)
    if (pending[u] == 0 && steps.is_step(u)) order.push_back(u);
  for (std::size_t k = 0; k < order.size(); ++k)
    steps.for_each_successor(order[k], [&](std::uint64_t s) {
      if (--pending[s] == 0) order.push_back(s);
    });
  std::uint64_t expected = 0;
  for (std::uint64_t u = 0; u < steps.count(); ++u) expected += steps.is_step(u);
  if (order.size() != expected)
    throw std::runtime_error(
        "--export-chakra: the execution graph, each collective taken as one step, has a cycle");
  return order;
}

// Predecessor steps (compressed rows), each once.
struct Predecessors {
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> ids;
  const std::uint64_t* begin(std::uint64_t u) const { return ids.data() + offsets[u]; }
  const std::uint64_t* end(std::uint64_t u) const { return ids.data() + offsets[u + 1]; }
};

Predecessors predecessors(const Steps& steps) {
  Predecessors p;
  p.offsets.assign(steps.count() + 1, 0);
  for (std::uint64_t u = 0; u < steps.count(); ++u)
    if (steps.is_step(u)) steps.for_each_successor(u, [&](std::uint64_t s) { ++p.offsets[s + 1]; });
  for (std::size_t i = 1; i < p.offsets.size(); ++i) p.offsets[i] += p.offsets[i - 1];
  p.ids.resize(p.offsets.back());
  std::vector<std::uint64_t> fill(p.offsets.begin(), p.offsets.end() - 1);
  for (std::uint64_t u = 0; u < steps.count(); ++u)
    if (steps.is_step(u))
      steps.for_each_successor(u, [&](std::uint64_t s) { p.ids[fill[s]++] = u; });
  for (std::uint64_t u = 0; u < steps.count(); ++u) {
    auto* b = p.ids.data() + p.offsets[u];
    auto* e = p.ids.data() + p.offsets[u + 1];
    std::sort(b, e);
    std::fill(std::unique(b, e), e, kNone);  // duplicates become kNone, skipped when read
  }
  return p;
}

// The ranks a step is written on: a compute or delay on its device, a transfer on its
// sender (send) and its receiver (receive), a collective on each member; a join on every
// rank that needs it.
struct Placement {
  std::vector<std::uint32_t> first_id;   // per step: compute/delay/send: its id; kNone: none
  std::vector<std::uint32_t> second_id;  // receive
  // Joins and collectives: the ranks each is written on and its id on each, sorted by rank.
  std::vector<std::vector<std::pair<std::int32_t, std::uint32_t>>> shared_ids;
  std::vector<std::uint32_t> shared_index;  // per step: index into shared_ids, or kNone
};

void ranks_of(const Steps& steps, const Placement& p, std::uint64_t u,
              std::vector<std::int32_t>& out) {
  if (p.shared_index[u] != kNone) {
    for (const auto& [rank, id] : p.shared_ids[p.shared_index[u]]) out.push_back(rank);
    return;
  }
  const GraphNode& n = steps.g.node(static_cast<NodeId>(u));
  if (n.op == Op::transfer) {
    out.push_back(n.device);
    out.push_back(n.peer);
  } else if (n.op != Op::join) {
    out.push_back(n.device);
  }
}

std::optional<std::uint32_t> id_on(const Steps& steps, const Placement& p, std::uint64_t u,
                                   int rank) {
  if (p.shared_index[u] != kNone) {
    const auto& ids = p.shared_ids[p.shared_index[u]];
    auto it = std::lower_bound(ids.begin(), ids.end(), std::pair{rank, std::uint32_t{0}});
    if (it != ids.end() && it->first == rank) return it->second;
    return std::nullopt;
  }
  const GraphNode& node = steps.g.node(static_cast<NodeId>(u));
  if (node.device == rank && p.first_id[u] != kNone) return p.first_id[u];
  if (node.op == Op::transfer && node.peer == rank) return p.second_id[u];
  return std::nullopt;
}

// `ops`: the node's FLOPs and bytes where the graph counted them (Graph::op_counts), written
// as Chakra's num_ops and tensor_size (et_def.proto's attribute names, what ASTRA-sim's
// roofline and hgsim's --reprice read).
chakra::Node comp_node(std::uint64_t id, std::string name, double seconds, const GraphNode& n,
                       const kernels::OpCounts* ops = nullptr) {
  chakra::Node c;
  c.id = id;
  c.name = std::move(name);
  c.type = chakra::NodeType::comp;
  c.duration_micros = static_cast<std::uint64_t>(std::llround(seconds * 1e6));
  c.attrs.push_back(chakra::Attribute::boolean("is_cpu_op", false));
  c.attrs.push_back(chakra::Attribute::real64(kChakraSecondsAttr, seconds));
  if (n.op == Op::delay) c.attrs.push_back(chakra::Attribute::boolean(kChakraDelayAttr, true));
  if (ops) {
    c.attrs.push_back(chakra::Attribute::int64("num_ops", std::llround(ops->flops)));
    c.attrs.push_back(chakra::Attribute::uint64(
        "tensor_size", static_cast<std::uint64_t>(std::llround(ops->bytes))));
  }
  if (n.work != Work::none)
    c.attrs.push_back(chakra::Attribute::string(kChakraWorkAttr, to_string(n.work)));
  return c;
}

chakra::CommType comm_type_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return chakra::CommType::all_reduce;
    case CollectiveKind::reduce_scatter:
      return chakra::CommType::reduce_scatter;
    case CollectiveKind::all_gather:
      return chakra::CommType::all_gather;
    case CollectiveKind::broadcast:
      return chakra::CommType::broadcast;
  }
  return chakra::CommType::all_reduce;
}

// comm_size as ASTRA-sim reads it (astra-sim/system/astraccl/native_collectives/
// collective_algorithm/Ring.cc @518bd51: an all-gather's final size is comm_size x ranks,
// every other collective's is comm_size): an all-gather's per-rank share, else the tensor.
double comm_size_of(chakra::CommType type, double bytes, std::size_t members) {
  return type == chakra::CommType::all_gather ? bytes / static_cast<double>(members) : bytes;
}

// Process groups as ASTRA-sim names them: pg_name "0" is every rank, any other a key of the
// communicator-group file (--comm-group-configuration: {"1": [ranks], ...}, read by
// astra-sim/workload/Workload.cc initialize_comm_groups @518bd51).
struct ProcessGroups {
  int ranks = 0;
  std::map<std::vector<int>, int> ids;
  int id_of(std::vector<int> members) {
    std::sort(members.begin(), members.end());
    if (static_cast<int>(members.size()) == ranks) return 0;
    return ids.emplace(std::move(members), static_cast<int>(ids.size()) + 1).first->second;
  }
  core::Json to_json() const {
    core::Json groups = core::Json::object();
    std::vector<std::pair<int, const std::vector<int>*>> by_id;
    for (const auto& [members, id] : ids) by_id.push_back({id, &members});
    std::sort(by_id.begin(), by_id.end());
    for (const auto& [id, members] : by_id) groups[std::to_string(id)] = *members;
    return groups;
  }
};

}  // namespace

std::string chakra_comm_groups_path(const std::string& prefix) {
  return prefix + ".comm_groups.json";
}

ChakraExportStats export_chakra(const Graph& g, const Platform& platform,
                                const std::string& prefix) {
  const int ranks = platform.device_count();
  for (const auto& d : platform.devices)
    if (d.gpus != 1)
      throw std::runtime_error("--export-chakra writes one file per GPU: the graph is folded (" +
                               d.name + " stands for several GPUs); use --fidelity full");
  const Steps steps(g);
  const auto order = topological_order(steps);
  const Predecessors preds = predecessors(steps);

  Placement p;
  p.first_id.assign(steps.count(), kNone);
  p.second_id.assign(steps.count(), kNone);
  p.shared_index.assign(steps.count(), kNone);
  for (std::uint64_t u = 0; u < steps.count(); ++u) {
    const bool join = !steps.is_span(u) && steps.span_of[u] == kNone &&
                      g.node(static_cast<NodeId>(u)).op == Op::join;
    if (!join && !steps.is_span(u)) continue;
    p.shared_index[u] = static_cast<std::uint32_t>(p.shared_ids.size());
    p.shared_ids.emplace_back();
    if (!steps.is_span(u)) continue;
    auto& ids = p.shared_ids.back();
    for (int m : steps.span(u).members) ids.push_back({m, kNone});
    std::sort(ids.begin(), ids.end());
  }
  // Which ranks each join is needed on: those of its successors, through joins.
  std::vector<std::int32_t> scratch;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const std::uint64_t u = *it;
    if (p.shared_index[u] == kNone || steps.is_span(u)) continue;
    scratch.clear();
    const NodeId n = static_cast<NodeId>(u);
    for (const NodeId* s = g.successors_begin(n); s != g.successors_end(n); ++s) {
      // Into a collective: the ranks of the nodes it feeds there (a member's ready feeds
      // that member's first sends), not every member.
      const bool inner = steps.span_of[*s] != kNone && g.node(*s).op != Op::join;
      ranks_of(steps, p, inner ? *s : steps.of(*s), scratch);
    }
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
    auto& ids = p.shared_ids[p.shared_index[u]];
    for (auto r : scratch) ids.push_back({r, kNone});
  }

  const std::filesystem::path folder = std::filesystem::path(prefix).parent_path();
  if (!folder.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
  }
  chakra::GlobalMetadata meta;
  meta.version = "0.0.4";
  meta.attrs.push_back(chakra::Attribute::string("generator", "hgsim"));
  std::vector<std::unique_ptr<chakra::TraceWriter>> writers;
  for (int r = 0; r < ranks; ++r) {
    chakra::GlobalMetadata m = meta;
    m.attrs.push_back(chakra::Attribute::string("hgsim_device", platform.devices[r].name));
    writers.push_back(std::make_unique<chakra::TraceWriter>(chakra::trace_path(prefix, r), m));
  }
  std::vector<std::uint32_t> next_id(ranks, 0);
  ChakraExportStats stats;
  stats.ranks = ranks;
  ProcessGroups groups{ranks, {}};

  // The dependencies of `u`'s instance on `rank`: its predecessors written on that rank. A
  // collective's members wait for each other inside it: its inputs on other ranks are the
  // collective's own, not dropped.
  auto deps_on = [&](std::uint64_t u, int rank, std::vector<std::uint64_t>& out) {
    out.clear();
    for (const std::uint64_t* q = preds.begin(u); q != preds.end(u); ++q) {
      if (*q == kNone) continue;
      if (auto id = id_on(steps, p, *q, rank))
        out.push_back(*id);
      else if (p.shared_index[*q] == kNone && !steps.is_span(u))
        ++stats.dropped_dependencies;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  };
  auto emit = [&](int rank, chakra::Node& c) {
    writers[rank]->write(c);
    ++stats.nodes;
  };
  auto name_of = [&](int label, int micro_batch, const std::string& fallback) {
    const std::string text = label >= 0 ? g.label_text(label) : fallback;
    return micro_batch >= 0 ? text + " mb " + std::to_string(micro_batch) : text;
  };
  std::vector<std::uint64_t> deps;
  for (const std::uint64_t u : order) {
    if (steps.is_span(u)) {
      const CollectiveSpan& span = steps.span(u);
      const chakra::CommType type = comm_type_of(span.kind);
      const std::string pg = std::to_string(groups.id_of(span.members));
      const std::string name = name_of(span.label, span.micro_batch, to_string(span.kind));
      std::vector<std::int64_t> members(span.members.begin(), span.members.end());
      for (auto& [rank, id] : p.shared_ids[p.shared_index[u]]) {
        id = next_id[rank]++;
        chakra::Node c;
        c.id = id;
        c.name = name;
        c.type = chakra::NodeType::comm_coll;
        c.attrs.push_back(chakra::Attribute::boolean("is_cpu_op", false));
        c.attrs.push_back(chakra::Attribute::int64("comm_type", static_cast<std::int64_t>(type)));
        c.attrs.push_back(chakra::Attribute::int64(
            "comm_size", std::llround(comm_size_of(type, span.bytes, members.size()))));
        c.attrs.push_back(chakra::Attribute::string("pg_name", pg));
        c.attrs.push_back(chakra::Attribute::int64_list(kChakraGroupAttr, members));
        c.attrs.push_back(chakra::Attribute::real64(kChakraBytesAttr, span.bytes));
        c.attrs.push_back(chakra::Attribute::string(kChakraLoweringAttr, to_string(span.lowering)));
        if (span.work != Work::none)
          c.attrs.push_back(chakra::Attribute::string(kChakraWorkAttr, to_string(span.work)));
        deps_on(u, rank, c.data_deps);
        emit(rank, c);
      }
      ++stats.collectives;
      continue;
    }
    const NodeId n = static_cast<NodeId>(u);
    const GraphNode& node = g.node(n);
    const std::string name = name_of(node.label, node.micro_batch, to_string(node.op));
    switch (node.op) {
      case Op::compute:
      case Op::delay: {
        const std::uint32_t id = next_id[node.device]++;
        p.first_id[n] = id;
        chakra::Node c = comp_node(id, name, node.amount, node, g.op_counts(n));
        deps_on(n, node.device, c.data_deps);
        emit(node.device, c);
        break;
      }
      case Op::transfer: {
        const double bytes = node.amount;
        for (int side = 0; side < 2; ++side) {
          const int rank = side == 0 ? node.device : node.peer;
          const std::uint32_t id = next_id[rank]++;
          (side == 0 ? p.first_id : p.second_id)[n] = id;
          chakra::Node c;
          c.id = id;
          c.name = name;
          c.type = side == 0 ? chakra::NodeType::comm_send : chakra::NodeType::comm_recv;
          c.attrs.push_back(chakra::Attribute::boolean("is_cpu_op", false));
          c.attrs.push_back(chakra::Attribute::int32("comm_src", node.device));
          c.attrs.push_back(chakra::Attribute::int32("comm_dst", node.peer));
          c.attrs.push_back(chakra::Attribute::int64("comm_size", std::llround(bytes)));
          c.attrs.push_back(chakra::Attribute::int32("comm_tag", static_cast<std::int32_t>(n)));
          if (node.flows > 1)
            c.attrs.push_back(chakra::Attribute::int64("hgsim_flows", node.flows));
          if (node.work != Work::none)
            c.attrs.push_back(chakra::Attribute::string(kChakraWorkAttr, to_string(node.work)));
          deps_on(n, rank, c.data_deps);
          emit(rank, c);
        }
        break;
      }
      case Op::join: {
        for (auto& [rank, id] : p.shared_ids[p.shared_index[n]]) {
          id = next_id[rank]++;
          chakra::Node c = comp_node(id, name, 0, node);
          deps_on(n, rank, c.data_deps);
          emit(rank, c);
        }
        break;
      }
    }
  }
  for (auto& w : writers) {
    w->close();
    stats.bytes += w->bytes_written();
  }
  if (auto e = core::write_file_atomically(chakra_comm_groups_path(prefix),
                                           groups.to_json().dump(1) + "\n"))
    throw std::runtime_error(*e);
  return stats;
}

}  // namespace hgsim::sim

// ---- import ------------------------------------------------------------------------------

namespace hgsim::sim {

namespace {

struct ChakraError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string at_node(const std::string& file, std::uint64_t id) {
  return file + ": node " + std::to_string(id) + ": ";
}

std::optional<std::int64_t> integer_attr(const chakra::Node& n, const char* name,
                                         const std::string& file) {
  const chakra::Attribute* a = n.attr(name);
  if (!a) return std::nullopt;
  if (!a->is_integer())
    throw ChakraError(at_node(file, n.id) + name + " is not an integer attribute (field " +
                      std::to_string(a->field) + ")");
  return a->integer;
}

Work work_of(const chakra::Node& n, Work fallback) {
  const chakra::Attribute* a = n.attr(kChakraWorkAttr);
  if (!a || !a->is_string()) return fallback;
  for (int w = 0; w <= static_cast<int>(Work::none); ++w)
    if (to_string(static_cast<Work>(w)) == a->text) return static_cast<Work>(w);
  return fallback;
}

// A collective or point-to-point node of one rank, waiting for its peers.
struct Pending {
  int rank = 0;
  std::uint64_t id = 0;
  NodeId entry = 0;  // its dependencies end here (send: the transfer itself)
  NodeId exit = 0;   // its successors start here
  double bytes = 0;  // collectives: hgsim's Collective::bytes (an all-gather's gathered size)
  int type = 0;      // collectives: comm_type
  std::optional<Lowering> lowering;  // hgsim_lowering: the one the exporter played
  Work work = Work::dp_comm;
  int label = -1;
  bool share = false;  // bytes is an all-gather's per-member share (comm_size)
};

struct Group {
  std::vector<int> ranks;                          // by attribute; else the ranks that hold it
  std::vector<std::vector<std::size_t>> per_rank;  // indices into the collectives, in order
};

using P2pKey = std::tuple<int, int, std::int64_t>;  // src, dst, tag

template <class Ends>
Pending point_to_point(int rank, std::uint64_t id, const Ends& e) {
  Pending p;
  p.rank = rank;
  p.id = id;
  p.entry = e.entry;
  p.exit = e.exit;
  return p;
}

std::optional<Lowering> lowering_of(const chakra::Node& n, const std::string& file) {
  const chakra::Attribute* a = n.attr(kChakraLoweringAttr);
  if (!a) return std::nullopt;
  for (Lowering l : {Lowering::ring, Lowering::tree, Lowering::halving_doubling,
                     Lowering::hierarchical, Lowering::channel})
    if (a->is_string() && a->text == to_string(l)) return l;
  throw ChakraError(at_node(file, n.id) + kChakraLoweringAttr + " is not one of ring, tree, " +
                    "halving_doubling, hierarchical, channel");
}

// The members grouped as the lowering needs them (indices into `members`, in order): by the
// key `of` gives each, groups in the order their first member comes.
template <class Key>
std::vector<std::vector<int>> grouped(const std::vector<int>& members, Key&& of) {
  std::vector<int> keys;
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    const int k = of(members[i]);
    auto it = std::find(keys.begin(), keys.end(), k);
    if (it == keys.end()) {
      keys.push_back(k);
      groups.emplace_back();
      it = keys.end() - 1;
    }
    groups[it - keys.begin()].push_back(i);
  }
  return groups;
}

// One collective, lowered as the exporter played it (`lowering`), or without it as an
// all-reduce by `algorithm` inside a cluster and hierarchical across clusters, rings for
// the others, a tree for a broadcast. Returns each member's done node.
std::vector<NodeId> lower_one(const Sender& sender, Collective c, chakra::CommType type,
                              std::optional<Lowering> lowering, core::GradSyncAlgorithm algorithm) {
  const Platform& platform = sender.platform;
  auto by_cluster = grouped(c.members, [&](int r) { return platform.devices[r].cluster; });
  if (!lowering) {
    lowering = type == chakra::CommType::broadcast                      ? Lowering::tree
               : type != chakra::CommType::all_reduce                   ? Lowering::ring
               : by_cluster.size() > 1                                  ? Lowering::hierarchical
               : algorithm == core::GradSyncAlgorithm::tree             ? Lowering::tree
               : algorithm == core::GradSyncAlgorithm::halving_doubling ? Lowering::halving_doubling
                                                                        : Lowering::ring;
  }
  const RingKind kind = type == chakra::CommType::all_gather       ? RingKind::all_gather
                        : type == chakra::CommType::reduce_scatter ? RingKind::reduce_scatter
                                                                   : RingKind::all_reduce;
  switch (*lowering) {
    case Lowering::channel: {
      // As NCCL's channels inside one cluster (sim::channel_collective), members by node.
      const core::Cluster& cluster =
          *platform.clusters[platform.devices[c.members[0]].cluster].spec;
      std::map<int, std::vector<int>> nodes;  // by node number, as the workload groups them
      for (int i = 0; i < static_cast<int>(c.members.size()); ++i)
        nodes[platform.devices[c.members[i]].node].push_back(i);
      std::vector<std::vector<int>> by_node;
      for (auto& [node, list] : nodes) by_node.push_back(std::move(list));
      return channel_collective(sender, c, cluster, by_node, kind);
    }
    case Lowering::hierarchical: {
      if (kind != RingKind::all_reduce) break;
      std::vector<std::vector<int>> devices;
      for (const auto& members : by_cluster) {
        devices.emplace_back();
        for (int i : members) devices.back().push_back(c.members[i]);
      }
      return hierarchical_all_reduce(sender, c, devices);
    }
    case Lowering::tree:
      if (type == chakra::CommType::broadcast) return tree_broadcast(sender, c);
      if (kind == RingKind::all_reduce) return tree_all_reduce(sender, c);
      break;
    case Lowering::halving_doubling:
      if (kind == RingKind::all_reduce) return halving_doubling_all_reduce(sender, c);
      break;
    case Lowering::ring:
      break;
  }
  return kind == RingKind::all_reduce       ? ring_all_reduce(sender, c)
         : kind == RingKind::reduce_scatter ? ring_reduce_scatter(sender, c)
                                            : ring_all_gather(sender, c);
}

void lower_collectives(Graph& g, const Platform& platform, const ChakraImportOptions& options,
                       const std::vector<Pending>& pending, std::map<std::string, Group>& groups,
                       const std::vector<std::string>& files, std::uint64_t& lowered) {
  for (auto& [key, group] : groups) {
    std::vector<int> members = group.ranks;
    if (members.empty())
      for (int r = 0; r < static_cast<int>(group.per_rank.size()); ++r)
        if (!group.per_rank[r].empty()) members.push_back(r);
    if (key == "all") {
      members.clear();
      for (int r = 0; r < static_cast<int>(group.per_rank.size()); ++r) members.push_back(r);
    }
    const std::size_t count = group.per_rank[members.front()].size();
    for (int r : members)
      if (group.per_rank[r].size() != count) {
        const int other = members.front();
        throw ChakraError(files[r] + ": " + std::to_string(group.per_rank[r].size()) +
                          " collectives in group (" + key + ") where " + files[other] + " has " +
                          std::to_string(count) +
                          ": every member must take part in every collective of its group");
      }
    for (std::size_t k = 0; k < count; ++k) {
      const Pending& first = pending[group.per_rank[members.front()][k]];
      const auto type = static_cast<chakra::CommType>(first.type);
      Collective c;
      c.members = members;
      c.bytes = first.share ? first.bytes * static_cast<double>(members.size()) : first.bytes;
      c.name = first.label >= 0 ? g.label_text(first.label) : "chakra " + chakra::to_string(type);
      for (int r : members) {
        const Pending& mine = pending[group.per_rank[r][k]];
        if (mine.type != first.type || mine.bytes != first.bytes)
          throw ChakraError(
              at_node(files[r], mine.id) + "collective " + std::to_string(k) + " of group (" + key +
              ") is " + chakra::to_string(static_cast<chakra::CommType>(mine.type)) + " of " +
              core::shortest_decimal(mine.bytes) + " bytes, where rank " +
              std::to_string(first.rank) + "'s (node " + std::to_string(first.id) + ") is " +
              chakra::to_string(type) + " of " + core::shortest_decimal(first.bytes) + " bytes");
        c.ready.push_back(mine.entry);
      }
      std::vector<NodeId> done;
      if (members.size() == 1) {
        done = c.ready;
      } else if (type == chakra::CommType::barrier) {
        const NodeId all = g.join();
        for (NodeId r : c.ready) g.edge(r, all);
        done.assign(members.size(), all);
      } else if (type == chakra::CommType::all_reduce || type == chakra::CommType::all_gather ||
                 type == chakra::CommType::reduce_scatter ||
                 type == chakra::CommType::reduce_scatter_block ||
                 type == chakra::CommType::broadcast) {
        Sender sender{g, platform, nullptr, nullptr, first.work, -1, nullptr};
        sender.granularity = options.granularity;
        done = lower_one(sender, c,
                         type == chakra::CommType::reduce_scatter_block
                             ? chakra::CommType::reduce_scatter
                             : type,
                         first.lowering, options.algorithm);
      } else {
        throw ChakraError(at_node(files[first.rank], first.id) + "comm_type " +
                          chakra::to_string(type) +
                          " is not simulated (hgsim lowers ALL_REDUCE, ALL_GATHER, "
                          "REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, BROADCAST, BARRIER)");
      }
      for (std::size_t i = 0; i < members.size(); ++i)
        g.edge(done[i], pending[group.per_rank[members[i]][k]].exit);
      ++lowered;
    }
  }
}

}  // namespace

int chakra_rank_count(const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  while (n < core::limits().gpus && std::filesystem::exists(chakra::trace_path(prefix, n), ec)) ++n;
  return n;
}

ChakraImport import_chakra(const std::string& prefix, const Platform& platform,
                           const ChakraImportOptions& options, const chakra::ReadLimits& limits) {
  ChakraImport out;
  const int ranks = chakra_rank_count(prefix);
  if (ranks == 0)
    throw ChakraError(chakra::trace_path(prefix, 0) +
                      ": no such file (a Chakra trace is one file per rank: PREFIX.0.et, "
                      "PREFIX.1.et, ...)");
  if (ranks != platform.device_count())
    throw ChakraError(prefix + ": the trace has " + std::to_string(ranks) +
                      " ranks and the scenario places " + std::to_string(platform.device_count()) +
                      " GPUs for them");
  out.ranks = ranks;
  Graph& g = out.graph;
  std::vector<std::pair<int, std::uint64_t>> origin;  // per graph node, to name a cycle's
  auto note = [&](NodeId n, int rank, std::uint64_t id) {
    if (origin.size() <= n) origin.resize(n + 1, {-1, 0});
    origin[n] = {rank, id};
  };
  std::vector<Pending> collectives;
  std::map<std::string, Group> groups;
  std::map<P2pKey, std::deque<Pending>> sends, receives;
  std::vector<std::string> files;
  const int send_label = g.label("chakra send");

  for (int rank = 0; rank < ranks; ++rank) {
    const std::string file = chakra::trace_path(prefix, rank);
    files.push_back(file);
    struct Ends {
      NodeId entry, exit;
    };
    std::unordered_map<std::uint64_t, Ends> ends;
    std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> deps;
    auto on_node = [&](const chakra::Node& n) {
      if (ends.count(n.id)) throw ChakraError(at_node(file, n.id) + "a second node with this id");
      ++out.nodes;
      Ends e{};
      switch (n.type) {
        case chakra::NodeType::comp: {
          double seconds = static_cast<double>(n.duration_micros) * 1e-6;
          if (const auto* a = n.attr(kChakraSecondsAttr); a && a->is_real()) seconds = a->real;
          const auto flops = options.price ? integer_attr(n, "num_ops", file) : std::nullopt;
          if (flops) {
            const auto bytes = integer_attr(n, "tensor_size", file).value_or(0);
            if (*flops < 0 || bytes < 0)
              throw ChakraError(at_node(file, n.id) + "num_ops or tensor_size is negative");
            seconds = options.price(rank, static_cast<double>(*flops), static_cast<double>(bytes));
            ++out.repriced;
          }
          if (!std::isfinite(seconds) || seconds < 0)
            throw ChakraError(at_node(file, n.id) + "duration is not a finite, non-negative time");
          const auto* delay = n.attr(kChakraDelayAttr);
          const int label = g.label(n.name.empty() ? "chakra compute" : n.name);
          if (seconds == 0)
            e.entry = g.join();
          else if (delay && delay->integer)
            e.entry = g.delay(rank, seconds, work_of(n, Work::none), label);
          else
            e.entry = g.compute(rank, seconds, work_of(n, Work::forward), label);
          e.exit = e.entry;
          break;
        }
        case chakra::NodeType::metadata:
        case chakra::NodeType::mem_load:
        case chakra::NodeType::mem_store:
          e.entry = e.exit = g.join();  // no cost in hgsim's model (docs/chakra.md)
          break;
        case chakra::NodeType::comm_send:
        case chakra::NodeType::comm_recv: {
          const bool send = n.type == chakra::NodeType::comm_send;
          const char* peer_attr = send ? "comm_dst" : "comm_src";
          const auto peer = integer_attr(n, peer_attr, file);
          if (!peer)
            throw ChakraError(at_node(file, n.id) + chakra::to_string(n.type) + " without " +
                              peer_attr);
          if (*peer < 0 || *peer >= ranks || *peer == rank)
            throw ChakraError(at_node(file, n.id) + peer_attr + " " + std::to_string(*peer) +
                              " is not another rank (0 to " + std::to_string(ranks - 1) + ")");
          const std::int64_t tag = integer_attr(n, "comm_tag", file).value_or(0);
          const std::int64_t size = integer_attr(n, "comm_size", file).value_or(0);
          if (size < 0) throw ChakraError(at_node(file, n.id) + "comm_size is negative");
          const int src = send ? rank : static_cast<int>(*peer);
          const int dst = send ? static_cast<int>(*peer) : rank;
          if (send) {
            const auto flows = std::clamp<std::int64_t>(
                integer_attr(n, "hgsim_flows", file).value_or(1), 1, max_transfer_flows);
            e.entry = e.exit =
                g.transfer(src, dst, static_cast<double>(size), work_of(n, Work::pp_comm),
                           send_label, -1, static_cast<int>(flows));
            sends[{src, dst, tag}].push_back(point_to_point(rank, n.id, e));
          } else {
            // A transfer starts once both its send's and its receive's dependencies are met
            // (NCCL's send/recv: both sides call); the receive ends with the transfer.
            e.entry = g.join();
            e.exit = g.join();
            g.edge(e.entry, e.exit);
            receives[{src, dst, tag}].push_back(point_to_point(rank, n.id, e));
          }
          break;
        }
        case chakra::NodeType::comm_coll: {
          const auto type = integer_attr(n, "comm_type", file);
          if (!type) throw ChakraError(at_node(file, n.id) + "COMM_COLL_NODE without comm_type");
          if (*type < 0 || *type > 9)
            throw ChakraError(at_node(file, n.id) + "unknown comm_type " + std::to_string(*type));
          const std::int64_t size = integer_attr(n, "comm_size", file).value_or(0);
          if (size < 0) throw ChakraError(at_node(file, n.id) + "comm_size is negative");
          const auto comm_type = static_cast<chakra::CommType>(*type);
          std::string key = "all";
          std::vector<int> members;
          if (const auto* a = n.attr(kChakraGroupAttr)) {
            if (!a->is_integer_list() || a->integers.empty())
              throw ChakraError(at_node(file, n.id) + kChakraGroupAttr + " is not a list of ranks");
            for (auto r : a->integers) {
              if (r < 0 || r >= ranks)
                throw ChakraError(at_node(file, n.id) + kChakraGroupAttr + " names rank " +
                                  std::to_string(r) + ", not one of 0 to " +
                                  std::to_string(ranks - 1));
              if (std::find(members.begin(), members.end(), r) != members.end())
                throw ChakraError(at_node(file, n.id) + kChakraGroupAttr + " names rank " +
                                  std::to_string(r) + " twice");
              members.push_back(static_cast<int>(r));
            }
            if (std::find(members.begin(), members.end(), rank) == members.end())
              throw ChakraError(at_node(file, n.id) + kChakraGroupAttr +
                                " does not hold this rank (" + std::to_string(rank) + ")");
            key = "ranks";
            for (int r : members) key += " " + std::to_string(r);
          } else if (const auto* pg = n.attr("pg_name"); pg && pg->is_string()) {
            key = "pg " + pg->text;  // its members: the ranks whose files hold the group
          }
          // hgsim's exact bytes when it wrote them; else comm_size, an all-gather's per-rank
          // share (comm_size_of), gathered once the group's size is known.
          double bytes = static_cast<double>(size);
          bool share = comm_type == chakra::CommType::all_gather;
          if (const auto* exact = n.attr(kChakraBytesAttr); exact && exact->is_real()) {
            if (!std::isfinite(exact->real) || exact->real < 0)
              throw ChakraError(at_node(file, n.id) + kChakraBytesAttr +
                                " is not a finite, non-negative size");
            bytes = exact->real;
            share = false;
          }
          e.entry = g.join();
          e.exit = g.join();
          collectives.push_back({rank, n.id, e.entry, e.exit, bytes, int(*type),
                                 lowering_of(n, file), work_of(n, Work::dp_comm),
                                 n.name.empty() ? -1 : g.label(n.name), share});
          Group& group = groups[key];
          group.ranks = members;
          if (group.per_rank.empty()) group.per_rank.resize(ranks);
          group.per_rank[rank].push_back(collectives.size() - 1);
          break;
        }
        default:
          throw ChakraError(at_node(file, n.id) + "unknown node type " +
                            std::to_string(static_cast<int>(n.type)) +
                            " (hgsim reads COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE and "
                            "COMM_COLL_NODE, and takes METADATA, MEM_LOAD and MEM_STORE as "
                            "no-ops)");
      }
      note(e.entry, rank, n.id);
      note(e.exit, rank, n.id);
      ends.emplace(n.id, e);
      if (!n.data_deps.empty() || !n.ctrl_deps.empty()) {
        std::vector<std::uint64_t> all = n.data_deps;
        all.insert(all.end(), n.ctrl_deps.begin(), n.ctrl_deps.end());
        deps.emplace_back(n.id, std::move(all));
      }
    };
    try {
      chakra::read_trace(
          file, limits, [](const chakra::GlobalMetadata&) {}, on_node);
    } catch (const GraphTooLarge& e) {
      throw ChakraError(file + ": " + e.what());
    }
    for (const auto& [id, list] : deps) {
      const Ends& to = ends.at(id);
      for (std::uint64_t d : list) {
        auto it = ends.find(d);
        if (it == ends.end())
          throw ChakraError(at_node(file, id) + "depends on node " + std::to_string(d) +
                            ", which the file does not hold");
        g.edge(it->second.exit, to.entry);
      }
    }
  }

  // Sends meet their receives: the k-th send from src to dst with a tag, the k-th receive.
  for (auto& [key, list] : sends) {
    auto& other = receives[key];
    const auto [src, dst, tag] = key;
    if (other.size() != list.size()) {
      const Pending& extra = list.size() > other.size() ? list[other.size()] : other[list.size()];
      throw ChakraError(
          at_node(files[extra.rank], extra.id) +
          (list.size() > other.size() ? "COMM_SEND_NODE" : "COMM_RECV_NODE") + " from rank " +
          std::to_string(src) + " to " + std::to_string(dst) + " tag " + std::to_string(tag) +
          " has no matching " +
          (list.size() > other.size() ? "receive in " + files[dst] : "send in " + files[src]));
    }
    for (std::size_t k = 0; k < list.size(); ++k) {
      g.edge(other[k].entry, list[k].entry);
      g.edge(list[k].exit, other[k].exit);
      ++out.transfers;
    }
    receives.erase(key);
  }
  for (auto& [key, list] : receives)
    if (!list.empty()) {
      const auto [src, dst, tag] = key;
      throw ChakraError(at_node(files[list.front().rank], list.front().id) +
                        "COMM_RECV_NODE from rank " + std::to_string(src) + " tag " +
                        std::to_string(tag) + " has no matching send in " + files[src]);
    }
  lower_collectives(g, platform, options, collectives, groups, files, out.collectives);
  g.finish();

  // A cycle: name a Chakra node on it (one never released by Kahn's algorithm).
  auto pending = g.predecessor_counts();
  std::vector<NodeId> ready;
  for (NodeId i = 0; i < g.size(); ++i)
    if (pending[i] == 0) ready.push_back(i);
  std::size_t released = 0;
  while (!ready.empty()) {
    const NodeId n = ready.back();
    ready.pop_back();
    ++released;
    for (auto s = g.successors_begin(n); s != g.successors_end(n); ++s)
      if (--pending[*s] == 0) ready.push_back(*s);
  }
  if (released != g.size()) {
    for (NodeId i = 0; i < g.size(); ++i)
      if (pending[i] > 0 && i < origin.size() && origin[i].first >= 0)
        throw ChakraError(at_node(files[origin[i].first], origin[i].second) +
                          "lies on or behind a dependency cycle (" +
                          std::to_string(g.size() - released) + " graph nodes can never start)");
    throw ChakraError(prefix + ": the trace has a dependency cycle");
  }
  return out;
}

}  // namespace hgsim::sim

// ---- simulation --------------------------------------------------------------------------

#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "sim/engine.hpp"
#include "sim/simulate.hpp"

namespace hgsim::sim {

namespace {

// Rank r's GPU: the one its file's metadata names (hgsim_device, what export writes) when
// every file names one of the scenario's, else the scenario's GPUs in order.
std::vector<DeviceRequest> place_ranks(const core::Scenario& s, const std::string& prefix,
                                       int ranks) {
  std::vector<DeviceRequest> all;
  std::map<std::string, std::size_t> by_name;
  for (std::size_t c = 0; c < s.clusters.size(); ++c) {
    const core::Cluster& cluster = s.clusters[c];
    for (int gpu = 0; gpu < cluster.gpu_count(); ++gpu) {
      by_name[cluster.name + "/n" + std::to_string(gpu / cluster.gpus_per_node) + "/g" +
              std::to_string(gpu % cluster.gpus_per_node)] = all.size();
      all.push_back({static_cast<int>(c), gpu, 1});
    }
  }
  if (ranks > static_cast<int>(all.size()))
    throw ChakraError(prefix + ": the trace has " + std::to_string(ranks) +
                      " ranks and the scenario " + std::to_string(all.size()) +
                      " GPUs: give a scenario with at least one GPU per rank");
  std::vector<DeviceRequest> named;
  for (int r = 0; r < ranks; ++r) {
    const auto meta = chakra::read_metadata(chakra::trace_path(prefix, r));
    std::string device;
    for (const auto& a : meta.attrs)
      if (a.name == "hgsim_device" && a.is_string()) device = a.text;
    auto it = by_name.find(device);
    if (it == by_name.end()) {
      named.clear();
      break;
    }
    named.push_back(all[it->second]);
  }
  if (!named.empty()) return named;
  all.resize(ranks);
  return all;
}

}  // namespace

std::optional<core::Json> simulate_chakra(const core::Scenario& scenario, const std::string& prefix,
                                          core::Diagnostics& diags, bool reprice) {
  try {
    const core::Json out = run_isolated([&]() -> core::Json {
      const int ranks = chakra_rank_count(prefix);
      if (ranks == 0)
        throw ChakraError(chakra::trace_path(prefix, 0) +
                          ": no such file (a Chakra trace is one file per rank: PREFIX.0.et, "
                          "PREFIX.1.et, ...)");
      const auto requests = place_ranks(scenario, prefix, ranks);
      std::vector<const kernels::GpuSpec*> gpus;
      for (const auto& c : scenario.clusters) gpus.push_back(&kernels::gpu_of(c.gpu));
      core::Diagnostics platform_diags;
      const Platform platform = build_platform(scenario, gpus, requests, platform_diags);
      if (platform_diags.has_errors()) throw ChakraError(platform_diags.format());
      ChakraImportOptions options;
      options.granularity = scenario.simulation.collectives;
      const kernels::KernelModel model;
      if (reprice)
        options.price = [&](int rank, double flops, double bytes) {
          const kernels::GpuSpec& gpu = *platform.clusters[platform.devices[rank].cluster].gpu;
          return model.roofline_time(gpu, flops, bytes, scenario.training.precision).value();
        };
      ChakraImport trace = import_chakra(prefix, platform, options);
      core::Diagnostics graph_diags;
      trace.graph.check(platform.device_count(), graph_diags);
      if (graph_diags.has_errors()) throw ChakraError(graph_diags.format());
      const NodeTimes times = execute(trace.graph, platform);
      std::vector<double> compute(ranks, 0);
      for (NodeId n = 0; n < trace.graph.size(); ++n) {
        const GraphNode& node = trace.graph.node(n);
        if (node.op == Op::compute) compute[node.device] += node.amount;
      }
      core::Json devices = core::Json::array();
      for (int r = 0; r < ranks; ++r)
        devices.push_back(
            {{"rank", r}, {"gpu", platform.devices[r].name}, {"compute_s", compute[r]}});
      return {{"iteration_time_s", times.makespan}, {"ranks", ranks},
              {"chakra_nodes", trace.nodes},        {"collectives", trace.collectives},
              {"transfers", trace.transfers},       {"repriced", trace.repriced},
              {"graph_nodes", trace.graph.size()},  {"devices", devices},
              {"simulator", {{"simgrid", simgrid_version().text()},
                             {"collectives", core::to_string(options.granularity)}}},
              {"compute_provenance",
               reprice ? "the trace's durations, and its nodes with FLOPs repriced by the "
                         "kernel model's roofline on datasheet peaks"
                       : "the trace's durations"}};
    });
    return out;
  } catch (const std::exception& e) {
    // A trace the scenario names (workload.chakra): the error points at that key.
    const bool by_key = !scenario.workload_chakra.empty() && prefix == scenario.workload_chakra;
    if (by_key)
      diags.error(scenario.where("workload.chakra"), "workload.chakra", e.what());
    else
      diags.error({}, "chakra", e.what());
    return std::nullopt;
  }
}

}  // namespace hgsim::sim
