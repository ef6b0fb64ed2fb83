#include "sim/chakra.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

#include "core/text.hpp"
#include "sim/collectives.hpp"

namespace hgsim::sim {

namespace {

constexpr std::uint32_t kNone = 0xffffffffu;

// ---- export ------------------------------------------------------------------------------

// The ranks a node is written on: a compute or delay on its device, a transfer on its
// sender (send) and its receiver (receive); a join on every rank that needs it (`joins`).
struct Placement {
  std::vector<std::uint32_t> first_id;   // compute/delay/send: its Chakra id; kNone: none
  std::vector<std::uint32_t> second_id;  // receive
  // Joins: the ranks each is written on and its id on each, sorted by rank.
  std::vector<std::vector<std::pair<std::int32_t, std::uint32_t>>> join_ids;
  std::vector<std::uint32_t> join_index;  // per node: index into join_ids, kNone if not a join
};

std::vector<NodeId> topological_order(const Graph& g) {
  auto pending = g.predecessor_counts();
  std::vector<NodeId> order;
  order.reserve(g.size());
  for (NodeId i = 0; i < g.size(); ++i)
    if (pending[i] == 0) order.push_back(i);
  for (std::size_t k = 0; k < order.size(); ++k)
    for (const NodeId* s = g.successors_begin(order[k]); s != g.successors_end(order[k]); ++s)
      if (--pending[*s] == 0) order.push_back(*s);
  if (order.size() != g.size())
    throw std::runtime_error("--export-chakra: the execution graph has a cycle");
  return order;
}

// Predecessor lists (compressed rows).
struct Predecessors {
  std::vector<std::uint64_t> offsets;
  std::vector<NodeId> ids;
  const NodeId* begin(NodeId n) const { return ids.data() + offsets[n]; }
  const NodeId* end(NodeId n) const { return ids.data() + offsets[n + 1]; }
};

Predecessors predecessors(const Graph& g) {
  Predecessors p;
  p.offsets.assign(g.size() + 1, 0);
  for (NodeId n = 0; n < g.size(); ++n)
    for (const NodeId* s = g.successors_begin(n); s != g.successors_end(n); ++s)
      ++p.offsets[*s + 1];
  for (std::size_t i = 1; i < p.offsets.size(); ++i) p.offsets[i] += p.offsets[i - 1];
  p.ids.resize(p.offsets.back());
  std::vector<std::uint64_t> fill(p.offsets.begin(), p.offsets.end() - 1);
  for (NodeId n = 0; n < g.size(); ++n)
    for (const NodeId* s = g.successors_begin(n); s != g.successors_end(n); ++s)
      p.ids[fill[*s]++] = n;
  return p;
}

// The ranks of a node that is not a join.
void ranks_of(const GraphNode& n, std::vector<std::int32_t>& out) {
  if (n.op == Op::transfer) {
    out.push_back(n.device);
    out.push_back(n.peer);
  } else if (n.op != Op::join) {
    out.push_back(n.device);
  }
}

std::optional<std::uint32_t> id_on(const Graph& g, const Placement& p, NodeId n, int rank) {
  const GraphNode& node = g.node(n);
  if (node.op == Op::join) {
    const auto& ids = p.join_ids[p.join_index[n]];
    auto it = std::lower_bound(ids.begin(), ids.end(), std::pair{rank, std::uint32_t{0}});
    if (it != ids.end() && it->first == rank) return it->second;
    return std::nullopt;
  }
  if (node.device == rank && p.first_id[n] != kNone) return p.first_id[n];
  if (node.op == Op::transfer && node.peer == rank) return p.second_id[n];
  return std::nullopt;
}

chakra::Node comp_node(std::uint64_t id, std::string name, double seconds, const GraphNode& n) {
  chakra::Node c;
  c.id = id;
  c.name = std::move(name);
  c.type = chakra::NodeType::comp;
  c.duration_micros = static_cast<std::uint64_t>(std::llround(seconds * 1e6));
  c.attrs.push_back(chakra::Attribute::boolean("is_cpu_op", false));
  c.attrs.push_back(chakra::Attribute::real64(kChakraSecondsAttr, seconds));
  if (n.op == Op::delay) c.attrs.push_back(chakra::Attribute::boolean(kChakraDelayAttr, true));
  if (n.work != Work::none)
    c.attrs.push_back(chakra::Attribute::string(kChakraWorkAttr, to_string(n.work)));
  return c;
}

}  // namespace

ChakraExportStats export_chakra(const Graph& g, const Platform& platform,
                                const std::string& prefix) {
  const int ranks = platform.device_count();
  for (const auto& d : platform.devices)
    if (d.gpus != 1)
      throw std::runtime_error("--export-chakra writes one file per GPU: the graph is folded (" +
                               d.name + " stands for several GPUs); use --fidelity full");
  const auto order = topological_order(g);
  const Predecessors preds = predecessors(g);

  // Which ranks each join is needed on: those of its successors, through joins.
  Placement p;
  p.first_id.assign(g.size(), kNone);
  p.second_id.assign(g.size(), kNone);
  p.join_index.assign(g.size(), kNone);
  for (NodeId n = 0; n < g.size(); ++n)
    if (g.node(n).op == Op::join) {
      p.join_index[n] = static_cast<std::uint32_t>(p.join_ids.size());
      p.join_ids.emplace_back();
    }
  std::vector<std::int32_t> scratch;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodeId n = *it;
    if (g.node(n).op != Op::join) continue;
    scratch.clear();
    for (const NodeId* s = g.successors_begin(n); s != g.successors_end(n); ++s) {
      if (g.node(*s).op == Op::join) {
        for (const auto& [rank, id] : p.join_ids[p.join_index[*s]]) scratch.push_back(rank);
      } else {
        ranks_of(g.node(*s), scratch);
      }
    }
    std::sort(scratch.begin(), scratch.end());
    scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
    auto& ids = p.join_ids[p.join_index[n]];
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

  // The dependencies of `n`'s instance on `rank`: its predecessors written on that rank.
  auto deps_on = [&](NodeId n, int rank, std::vector<std::uint64_t>& out) {
    out.clear();
    for (const NodeId* q = preds.begin(n); q != preds.end(n); ++q) {
      if (auto id = id_on(g, p, *q, rank))
        out.push_back(*id);
      else if (g.node(*q).op != Op::join)
        ++stats.dropped_dependencies;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  };
  auto emit = [&](int rank, chakra::Node& c) {
    writers[rank]->write(c);
    ++stats.nodes;
  };
  std::vector<std::uint64_t> deps;
  for (const NodeId n : order) {
    const GraphNode& node = g.node(n);
    const std::string label =
        node.label >= 0 ? g.label_text(node.label) : std::string(to_string(node.op));
    const std::string name =
        node.micro_batch >= 0 ? label + " mb " + std::to_string(node.micro_batch) : label;
    switch (node.op) {
      case Op::compute:
      case Op::delay: {
        const std::uint32_t id = next_id[node.device]++;
        p.first_id[n] = id;
        chakra::Node c = comp_node(id, name, node.amount, node);
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
        for (auto& [rank, id] : p.join_ids[p.join_index[n]]) {
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
  double bytes = 0;
  int type = 0;  // collectives: comm_type
};

struct Group {
  std::vector<int> ranks;                          // by attribute; else the ranks that hold it
  std::vector<std::vector<std::size_t>> per_rank;  // indices into the collectives, in order
};

using P2pKey = std::tuple<int, int, std::int64_t>;  // src, dst, tag

void lower_collectives(Graph& g, const Platform& platform, core::GradSyncAlgorithm algorithm,
                       const std::vector<Pending>& pending, std::map<std::string, Group>& groups,
                       const std::vector<std::string>& files, std::uint64_t& lowered) {
  const Sender sender{g, platform, nullptr, nullptr, Work::dp_comm, -1, nullptr};
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
      Collective c;
      c.members = members;
      c.bytes = first.bytes;
      c.name = "chakra " + chakra::to_string(static_cast<chakra::CommType>(first.type));
      for (int r : members) {
        const Pending& mine = pending[group.per_rank[r][k]];
        if (mine.type != first.type || mine.bytes != first.bytes)
          throw ChakraError(at_node(files[r], mine.id) + "collective " + std::to_string(k) +
                            " of group (" + key + ") is " +
                            chakra::to_string(static_cast<chakra::CommType>(mine.type)) + " of " +
                            core::shortest_decimal(mine.bytes) + " bytes, where rank " +
                            std::to_string(first.rank) + "'s (node " + std::to_string(first.id) +
                            ") is " + chakra::to_string(static_cast<chakra::CommType>(first.type)) +
                            " of " + core::shortest_decimal(first.bytes) + " bytes");
        c.ready.push_back(mine.entry);
      }
      std::vector<NodeId> done;
      if (members.size() == 1) {
        done = c.ready;
      } else {
        switch (static_cast<chakra::CommType>(first.type)) {
          case chakra::CommType::all_reduce: {
            std::map<int, std::vector<int>> by_cluster;
            for (int r : members) by_cluster[platform.devices[r].cluster].push_back(r);
            if (by_cluster.size() > 1) {
              std::vector<std::vector<int>> per_cluster;
              for (auto& [cluster, list] : by_cluster) per_cluster.push_back(list);
              // Ring order: cluster by cluster, as the hierarchical all-reduce expects.
              c.members.clear();
              for (const auto& list : per_cluster)
                c.members.insert(c.members.end(), list.begin(), list.end());
              std::vector<NodeId> ready;
              for (int r : c.members)
                ready.push_back(
                    c.ready[std::find(members.begin(), members.end(), r) - members.begin()]);
              c.ready = ready;
              auto by_member = hierarchical_all_reduce(sender, c, per_cluster);
              done.resize(members.size());
              for (std::size_t i = 0; i < c.members.size(); ++i)
                done[std::find(members.begin(), members.end(), c.members[i]) - members.begin()] =
                    by_member[i];
            } else {
              done = all_reduce(algorithm, sender, c);
            }
            break;
          }
          case chakra::CommType::all_gather:
            done = ring_all_gather(sender, c);
            break;
          case chakra::CommType::reduce_scatter:
          case chakra::CommType::reduce_scatter_block:
            done = ring_reduce_scatter(sender, c);
            break;
          case chakra::CommType::broadcast:
            done = tree_broadcast(sender, c);
            break;
          case chakra::CommType::barrier: {
            const NodeId all = g.join();
            for (NodeId r : c.ready) g.edge(r, all);
            done.assign(members.size(), all);
            break;
          }
          default:
            throw ChakraError(at_node(files[first.rank], first.id) + "comm_type " +
                              chakra::to_string(static_cast<chakra::CommType>(first.type)) +
                              " is not simulated (hgsim lowers ALL_REDUCE, ALL_GATHER, "
                              "REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, BROADCAST, BARRIER)");
        }
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
                           core::GradSyncAlgorithm algorithm, const chakra::ReadLimits& limits) {
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
            sends[{src, dst, tag}].push_back({rank, n.id, e.entry, e.exit, double(size), 0});
          } else {
            // A transfer starts once both its send's and its receive's dependencies are met
            // (NCCL's send/recv: both sides call); the receive ends with the transfer.
            e.entry = g.join();
            e.exit = g.join();
            g.edge(e.entry, e.exit);
            receives[{src, dst, tag}].push_back({rank, n.id, e.entry, e.exit, double(size), 0});
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
          e.entry = g.join();
          e.exit = g.join();
          collectives.push_back({rank, n.id, e.entry, e.exit, double(size), int(*type)});
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
  lower_collectives(g, platform, algorithm, collectives, groups, files, out.collectives);
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
                                          core::Diagnostics& diags) {
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
      ChakraImport trace = import_chakra(prefix, platform, core::GradSyncAlgorithm::ring);
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
      return {{"iteration_time_s", times.makespan},
              {"ranks", ranks},
              {"chakra_nodes", trace.nodes},
              {"collectives", trace.collectives},
              {"transfers", trace.transfers},
              {"graph_nodes", trace.graph.size()},
              {"devices", devices}};
    });
    return out;
  } catch (const std::exception& e) {
    diags.error({}, "chakra", e.what());
    return std::nullopt;
  }
}

}  // namespace hgsim::sim
