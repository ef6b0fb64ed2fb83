#include "sim/graph.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "core/document.hpp"
#include "core/files.hpp"
#include "core/units.hpp"

namespace hgsim::sim {

std::string to_string(Op op) {
  switch (op) {
    case Op::compute:
      return "compute";
    case Op::delay:
      return "delay";
    case Op::transfer:
      return "transfer";
    case Op::join:
      return "join";
  }
  return "?";
}

std::string to_string(Work work) {
  switch (work) {
    case Work::forward:
      return "forward";
    case Work::backward:
      return "backward";
    case Work::recompute:
      return "recompute";
    case Work::optimizer:
      return "optimizer";
    case Work::codec:
      return "codec";
    case Work::tp_comm:
      return "tp_comm";
    case Work::cp_comm:
      return "cp_comm";
    case Work::pp_comm:
      return "pp_comm";
    case Work::dp_comm:
      return "dp_comm";
    case Work::pacing:
      return "pacing";
    case Work::none:
      return "none";
  }
  return "?";
}

NodeId Graph::add(GraphNode n) {
  if (finished_) throw std::logic_error("Graph: node added after finish()");
  if (static_cast<std::int64_t>(size()) >= max_nodes_) throw too_large();
  if (counting_) return static_cast<NodeId>(counted_++);
  nodes_.push_back(n);
  return static_cast<NodeId>(nodes_.size() - 1);
}

void Graph::set_node_budget(std::int64_t nodes) {
  max_nodes_ = std::min(nodes, core::limits().graph_nodes);
}

GraphTooLarge Graph::too_large() const {
  const double limit = static_cast<double>(max_nodes_);
  return GraphTooLarge(
      "the execution graph grows past " + core::shortest_decimal(limit) + " nodes (about " +
      core::human_size(core::Bytes(limit * sizeof(GraphNode) * 3)) + "); " +
      (folded_ ? std::string("it is folded already: use fewer micro-batches or layers; ")
               : std::string("use --fidelity folded (simulation.fidelity: folded) to simulate "
                             "identical replicas and tensor-parallel groups once, or fewer "
                             "micro-batches; ")) +
      core::limit_hint("HGSIM_MAX_GRAPH_NODES", limit));
}

NodeId Graph::compute(int device, double seconds, Work work, int label, int micro_batch) {
  return add({seconds, device, -1, label, micro_batch, 1, Op::compute, work});
}

NodeId Graph::delay(int device, double seconds, Work work, int label, int micro_batch) {
  return add({seconds, device, -1, label, micro_batch, 1, Op::delay, work});
}

NodeId Graph::transfer(int src, int dst, double bytes, Work work, int label, int micro_batch,
                       int flows) {
  if (flows > max_transfer_flows)
    throw std::length_error("a transfer of " + std::to_string(flows) +
                            " parallel flows: one stands for at most " +
                            std::to_string(max_transfer_flows));
  return add(
      {bytes, src, dst, label, micro_batch, static_cast<std::uint16_t>(flows), Op::transfer, work});
}

NodeId Graph::join() {
  return add({});
}

void Graph::edge(NodeId before, NodeId after) {
  if (finished_) throw std::logic_error("Graph: edge added after finish()");
  if (!counting_) edges_.push_back({before, after});
}

int Graph::label(const std::string& text) {
  if (counting_) return -1;
  auto [it, fresh] = label_index_.emplace(text, static_cast<int>(labels_.size()));
  if (fresh) labels_.push_back(text);
  return it->second;
}

const std::string& Graph::label_text(int label) const {
  static const std::string none;
  return label >= 0 && label < static_cast<int>(labels_.size()) ? labels_[label] : none;
}

void Graph::finish() {
  if (finished_) return;
  if (counting_) {
    finished_ = true;
    return;
  }
  offsets_.assign(nodes_.size() + 1, 0);
  for (const auto& [from, to] : edges_)
    if (from < nodes_.size() && to < nodes_.size()) ++offsets_[from + 1];
  for (std::size_t i = 0; i < nodes_.size(); ++i) offsets_[i + 1] += offsets_[i];
  successors_.resize(offsets_.back());
  std::vector<std::uint32_t> fill(offsets_.begin(), offsets_.end() - 1);
  for (const auto& [from, to] : edges_)
    if (from < nodes_.size() && to < nodes_.size()) successors_[fill[from]++] = to;
  if (successors_.size() != edges_.size()) {
    // Dangling edges stay visible to check(): keep the list until then.
    finished_ = true;
    return;
  }
  edges_.release();
  finished_ = true;
}

std::vector<std::uint32_t> Graph::predecessor_counts() const {
  std::vector<std::uint32_t> counts(nodes_.size(), 0);
  for (NodeId s : successors_) ++counts[s];
  return counts;
}

void Graph::check(int devices, core::Diagnostics& diags) const {
  const core::SourceLocation nowhere;
  for (const auto& [from, to] : edges_)
    if (from >= nodes_.size() || to >= nodes_.size())
      diags.error(nowhere, "graph",
                  "edge " + std::to_string(from) + " -> " + std::to_string(to) +
                      " names a node that does not exist (" + std::to_string(nodes_.size()) +
                      " nodes)");
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode& n = nodes_[i];
    const std::string where = "graph node " + std::to_string(i) + " (" + label_text(n.label) + ")";
    if (!std::isfinite(n.amount) || n.amount < 0)
      diags.error(
          nowhere, "graph",
          where + ": amount " + std::to_string(n.amount) + " is not a finite, non-negative number");
    if (n.op == Op::join) continue;
    if (n.device < 0 || n.device >= devices)
      diags.error(nowhere, "graph",
                  where + ": device " + std::to_string(n.device) + " does not exist");
    if (n.op == Op::transfer && (n.peer < 0 || n.peer >= devices || n.peer == n.device))
      diags.error(nowhere, "graph",
                  where + ": a transfer needs two different devices, found " +
                      std::to_string(n.device) + " -> " + std::to_string(n.peer));
  }
  if (!finished_ || !edges_.empty()) return;
  // Kahn's algorithm: nodes never released lie on or behind a cycle.
  auto pending = predecessor_counts();
  std::vector<NodeId> ready;
  for (NodeId i = 0; i < nodes_.size(); ++i)
    if (pending[i] == 0) ready.push_back(i);
  std::size_t released = 0;
  while (!ready.empty()) {
    NodeId n = ready.back();
    ready.pop_back();
    ++released;
    for (auto s = successors_begin(n); s != successors_end(n); ++s)
      if (--pending[*s] == 0) ready.push_back(*s);
  }
  if (released == nodes_.size()) return;
  // A node never released has a predecessor never released: walking predecessors from
  // one must come back to a node already seen, and the walk since then is a cycle.
  std::vector<std::vector<NodeId>> stuck_predecessors(nodes_.size());
  for (NodeId i = 0; i < nodes_.size(); ++i)
    if (pending[i] > 0)
      for (auto s = successors_begin(i); s != successors_end(i); ++s)
        if (pending[*s] > 0) stuck_predecessors[*s].push_back(i);
  NodeId at = 0;
  while (pending[at] == 0) ++at;
  std::vector<int> seen(nodes_.size(), -1);
  std::vector<NodeId> path;
  while (seen[at] < 0) {
    seen[at] = static_cast<int>(path.size());
    path.push_back(at);
    at = stuck_predecessors[at].front();
  }
  std::string cycle;
  for (std::size_t i = path.size(); i-- > static_cast<std::size_t>(seen[at]);)
    cycle += std::to_string(path[i]) + " (" + label_text(nodes_[path[i]].label) + ") -> ";
  cycle += std::to_string(path[seen[at]]);
  diags.error(nowhere, "graph",
              std::to_string(nodes_.size() - released) +
                  " nodes can never run: the graph has a cycle: " + cycle);
}

void Graph::write_json(const std::string& path,
                       const std::vector<std::string>& device_names) const {
  core::AtomicFile file(path);  // throws core::WriteError, a std::runtime_error
  std::ostream& out = file.stream();
  auto device = [&](int d) -> core::Json {
    if (d < 0) return nullptr;
    if (d < static_cast<int>(device_names.size())) return device_names[d];
    return d;
  };
  out << "{\"nodes\": [\n";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode& n = nodes_[i];
    core::Json j{{"id", i}, {"op", to_string(n.op)}, {"work", to_string(n.work)}};
    if (n.op != Op::join) j["device"] = device(n.device);
    if (n.op == Op::transfer) {
      j["peer"] = device(n.peer);
      j["bytes"] = n.amount;
      if (n.flows > 1) j["flows"] = n.flows;
    } else if (n.op != Op::join) {
      j["seconds"] = n.amount;
    }
    if (n.label >= 0) j["label"] = labels_[n.label];
    if (n.micro_batch >= 0) j["micro_batch"] = n.micro_batch;
    // Each edge once: a join waiting on two paths from one node lists that node's edge
    // twice in the graph (its pending count counts both), but it is one dependency.
    core::Json next = core::Json::array();
    if (finished_) {
      std::vector<NodeId> listed(successors_begin(i), successors_end(i));
      std::sort(listed.begin(), listed.end());
      listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
      for (NodeId s : listed) next.push_back(s);
    }
    j["successors"] = next;
    out << "  " << j.dump(-1, ' ', false, core::Json::error_handler_t::replace)
        << (i + 1 < nodes_.size() ? ",\n" : "\n");
  }
  out << "]}\n";
  file.commit();
}

std::size_t Graph::memory_bytes() const {
  std::size_t bytes = nodes_.capacity() * sizeof(GraphNode) +
                      edges_.capacity() * sizeof(std::pair<NodeId, NodeId>) +
                      offsets_.capacity() * sizeof(std::uint32_t) +
                      successors_.capacity() * sizeof(NodeId) +
                      op_counts_.capacity() * sizeof(op_counts_[0]);
  for (const auto& l : labels_) bytes += l.capacity() + sizeof(l) + 32;
  return bytes;
}

std::string to_string(CollectiveKind kind) {
  static const char* const names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast"};
  return names[static_cast<int>(kind)];
}

std::string to_string(Lowering lowering) {
  static const char* const names[] = {"ring", "tree", "halving_doubling", "hierarchical",
                                      "channel"};
  return names[static_cast<int>(lowering)];
}

bool Graph::enter_collective() {
  if (!recording_ || counting_) return false;
  return collective_depth_++ == 0;
}

void Graph::leave_collective(bool record, CollectiveSpan span, NodeId first) {
  if (!recording_ || counting_) return;
  --collective_depth_;
  if (!record) return;
  span.first = first;
  span.end = static_cast<NodeId>(nodes_.size());
  if (span.end > span.first) spans_.push_back(std::move(span));
}

void Graph::set_op_counts(NodeId node, const kernels::OpCounts& counts) {
  if (!records_op_counts()) return;
  if (!op_counts_.empty() && op_counts_.back().first >= node)
    throw std::logic_error(
        "Graph::set_op_counts: nodes must be counted in the order they are added");
  op_counts_.emplace_back(node, counts);
}

const kernels::OpCounts* Graph::op_counts(NodeId node) const {
  auto it = std::lower_bound(op_counts_.begin(), op_counts_.end(), node,
                             [](const auto& entry, NodeId n) { return entry.first < n; });
  return it != op_counts_.end() && it->first == node ? &it->second : nullptr;
}

}  // namespace hgsim::sim
