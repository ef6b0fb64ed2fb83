// The execution graph of one training iteration: compute, delay and transfer nodes with
// dependencies (MLCommons Chakra in spirit). The workload generator builds it, the engine
// plays it on a platform, the results and the trace read it back.
//
// A node is 32 bytes; edges are kept as successor lists (4 bytes per edge), so a graph of
// N nodes and E edges costs about 32 N + 4 (N + E) bytes before the engine runs it.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/limits.hpp"
#include "core/scenario.hpp"
#include "kernels/layer_ops.hpp"

namespace hgsim::sim {

using NodeId = std::uint32_t;

enum class Op : std::uint8_t {
  compute,   // GPU work on `device` for `amount` seconds (shares the GPU with other compute)
  delay,     // time charged to `device` without using it: a collective costed in closed form
  transfer,  // `amount` bytes from `device` to `peer` over the platform's route
  join,      // no cost: a point where several dependencies meet
};

// What the time is spent on (the results' breakdown and the trace's colours).
enum class Work : std::uint8_t {
  forward,
  backward,
  recompute,
  optimizer,
  codec,    // compression or decompression of a WAN transfer
  tp_comm,  // tensor-parallel collectives inside a layer
  cp_comm,  // context parallelism's ring-attention exchanges, what the attention leaves exposed
  pp_comm,  // activations and their gradients between pipeline stages
  dp_comm,  // data-parallel gradient synchronisation
  // A delay that paces one sender's sends (sim/collectives.cpp ring_steps): it ends when the
  // sender's previous send has left at its route's rate. Inside that send's own interval, so
  // the results and the trace leave it out.
  pacing,
  none,
};
std::string to_string(Op op);
std::string to_string(Work work);

struct GraphNode {
  double amount = 0;         // seconds (compute, delay) or bytes (transfer)
  std::int32_t device = -1;  // compute/delay: the device; transfer: the sender
  std::int32_t peer = -1;    // transfer: the receiver
  std::int32_t label = -1;   // index into Graph::labels ("forward L0-19", "dp ring step 3")
  std::int32_t micro_batch = -1;
  std::uint16_t flows = 1;  // transfer: parallel TCP flows it stands for (folded fidelity)
  Op op = Op::join;
  Work work = Work::none;
};

// The most parallel flows one transfer can stand for (what GraphNode::flows holds).
constexpr int max_transfer_flows = std::numeric_limits<decltype(GraphNode::flows)>::max();

// An array that grows by appending into fixed-size chunks, so that what it holds never
// moves: a std::vector of 18 M graph nodes copied itself at every doubling and touched twice
// the memory (bench/bench_sim.cpp, GraphAppend, compares the two). The first chunk grows like a
// vector, so that a small graph stays small.
template <class T>
class ChunkedArray {
 public:
  static constexpr std::size_t chunk_bits = 15;
  static constexpr std::size_t chunk_size = std::size_t{1} << chunk_bits;

  void push_back(const T& value) {
    if (chunks_.empty() || chunks_.back().size() == chunk_size) {
      chunks_.emplace_back();
      if (chunks_.size() > 1) chunks_.back().reserve(chunk_size);
    }
    chunks_.back().push_back(value);
    ++size_;
  }
  const T& operator[](std::size_t i) const {
    return chunks_[i >> chunk_bits][i & (chunk_size - 1)];
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::size_t capacity() const {
    std::size_t total = 0;
    for (const auto& c : chunks_) total += c.capacity();
    return total;
  }
  void release() {
    std::vector<std::vector<T>>().swap(chunks_);
    size_ = 0;
  }

  class const_iterator {
   public:
    const_iterator(const ChunkedArray* a, std::size_t i) : a_(a), i_(i) {}
    const T& operator*() const { return (*a_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const ChunkedArray* a_;
    std::size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  std::vector<std::vector<T>> chunks_;
  std::size_t size_ = 0;
};

// A collective as the workload asked for it, before its lowering into transfers: what the
// Chakra export writes as one COMM_COLL_NODE per member (Graph::record_collectives).
enum class CollectiveKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };
// The lowering that played it (sim/collectives.hpp): the import replays the same one.
enum class Lowering : std::uint8_t { ring, tree, halving_doubling, hierarchical, channel };
std::string to_string(CollectiveKind kind);
std::string to_string(Lowering lowering);  // "ring", ..., "channel"

struct CollectiveSpan {
  NodeId first = 0;  // the nodes its lowering added: [first, end)
  NodeId end = 0;
  CollectiveKind kind = CollectiveKind::all_reduce;
  Lowering lowering = Lowering::ring;
  double bytes = 0;         // sim::Collective::bytes: the tensor; an all-gather's gathered size
  std::int32_t label = -1;  // the collective's name
  std::int32_t micro_batch = -1;
  Work work = Work::none;
  std::vector<int> members;  // devices, in ring order
};

// A graph grew past its node limit (limits().graph_nodes, or a lower budget).
struct GraphTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Graph {
 public:
  NodeId compute(int device, double seconds, Work work, int label, int micro_batch = -1);
  NodeId delay(int device, double seconds, Work work, int label, int micro_batch = -1);
  // Throws std::length_error when `flows` exceeds max_transfer_flows.
  NodeId transfer(int src, int dst, double bytes, Work work, int label, int micro_batch = -1,
                  int flows = 1);
  NodeId join();
  // `after` runs only once `before` has completed.
  void edge(NodeId before, NodeId after);
  int label(const std::string& text);  // interned

  std::size_t size() const { return counting_ ? counted_ : nodes_.size(); }
  std::size_t edge_count() const { return finished_ ? successors_.size() : edges_.size(); }
  const GraphNode& node(NodeId id) const { return nodes_[id]; }
  const std::string& label_text(int label) const;

  // Turns the edge list into successor lists; call once, after the last edge.
  void finish();
  bool finished() const { return finished_; }
  // Successors of `id` (after finish()).
  const NodeId* successors_begin(NodeId id) const { return &successors_[offsets_[id]]; }
  const NodeId* successors_end(NodeId id) const { return &successors_[offsets_[id + 1]]; }
  std::vector<std::uint32_t> predecessor_counts() const;

  // Structural checks: every edge joins existing nodes, transfers name two different
  // devices below `devices`, amounts are finite and not negative, and there is no cycle
  // (the first cycle found is reported with the labels of its nodes).
  void check(int devices, core::Diagnostics& diags) const;

  // {"nodes": [{"id", "op", "work", "device", "peer", "amount", "label", "micro_batch",
  //   "successors"}], "labels": [...]} -- streamed to `path`, complete or not at all. Each
  //   dependency once, in increasing id order (the graph may hold an edge twice, a join
  //   reached by two paths from one node; its pending count counts both). About 230
  //   bytes a node.
  void write_json(const std::string& path, const std::vector<std::string>& device_names) const;

  std::size_t memory_bytes() const;  // what the graph holds, capacity included

  // Collectives: from now on each outermost collective's lowering is recorded as a span of
  // the nodes it adds (a hierarchical all-reduce's rings are part of it). Off by default:
  // only the Chakra export reads them.
  void record_collectives() { recording_ = true; }
  // Called by each collective's lowering around its work (sim/collectives.cpp): enter
  // returns whether this one is the outermost and recorded, leave records `span` (first
  // and end filled in here) when `record` is set and the lowering added nodes.
  bool enter_collective();
  void leave_collective(bool record, CollectiveSpan span, NodeId first);
  const std::vector<CollectiveSpan>& collectives() const { return spans_; }

  // Compute nodes' FLOPs and bytes (kernels::OpCounts): from now on set_op_counts keeps
  // them. Off by default: only the Chakra export reads them (num_ops, tensor_size), and
  // builders skip counting while it is off.
  void record_op_counts() { recording_counts_ = true; }
  bool records_op_counts() const { return recording_counts_ && !counting_; }
  // The work compute `node` does, nodes in the order they were added; ignored unless
  // records_op_counts().
  void set_op_counts(NodeId node, const kernels::OpCounts& counts);
  // What set_op_counts kept for `node`, or nullptr.
  const kernels::OpCounts* op_counts(NodeId node) const;

  // Lowers the node limit to `nodes` (never above limits().graph_nodes): growing past it
  // throws GraphTooLarge. fidelity: auto counts the full graph under such a budget
  // (sim::full_fidelity_max_graph_nodes).
  void set_node_budget(std::int64_t nodes);
  // From now on nodes are only counted (size() and the limit as before) and neither stored
  // nor linked nor labelled: what a builder would make, measured without its memory. A
  // counting graph is for size() alone.
  void count_only() { counting_ = true; }
  // Whether the graph is the folded one: the limit's message then does not suggest folding.
  void set_folded(bool folded) { folded_ = folded; }

 private:
  NodeId add(GraphNode n);
  GraphTooLarge too_large() const;
  // Refused past this many nodes (limits().graph_nodes), long before memory runs out.
  std::int64_t max_nodes_ = core::limits().graph_nodes;
  ChunkedArray<GraphNode> nodes_;
  ChunkedArray<std::pair<NodeId, NodeId>> edges_;  // until finish()
  std::vector<std::uint32_t> offsets_;
  std::vector<NodeId> successors_;
  std::vector<std::string> labels_;
  std::unordered_map<std::string, int> label_index_;
  bool finished_ = false;
  bool counting_ = false;
  bool folded_ = false;
  std::size_t counted_ = 0;  // nodes added while counting
  bool recording_ = false;
  int collective_depth_ = 0;
  std::vector<CollectiveSpan> spans_;
  bool recording_counts_ = false;
  std::vector<std::pair<NodeId, kernels::OpCounts>> op_counts_;  // by increasing node
};

}  // namespace hgsim::sim
