#include "sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "models/schedule.hpp"
#include "models/transformer.hpp"
#include "sim/context_parallel.hpp"
#include "sim/program.hpp"

namespace hgsim::sim {

namespace {

// One tensor-parallel group of one stage: (pipeline, replica, stage, dp rank, cp rank).
struct Group {
  int pipeline = 0;
  int replica = 0;
  int stage = 0;
  int dp_rank = 0;
  int cp_rank = 0;
  int cluster = 0;
  int first_gpu = 0;         // placement inside the cluster (the full-fidelity position)
  std::vector<int> devices;  // tp devices (full) or the folded device
  int fold = 1;              // identical groups it stands for
};

// Per (group, op): where the op starts and ends.
struct OpNodes {
  NodeId entry = 0;  // a join: the op may start once its inputs arrived
  NodeId done = 0;   // the op's last node on every device of the group
};

class Builder {
 public:
  Builder(const WorkloadInput& in, core::Diagnostics& diags)
      : in_(in), d_(diags), r_(*in.plan), s_(*in.plan->scenario) {
    plan_ = &r_.plan;
    model_ = r_.model;
    chunks_ = r_.chunks;
    if (in.max_graph_nodes > 0) w_.graph.set_node_budget(in.max_graph_nodes);
    if (in.count_only) w_.graph.count_only();
    if (in.record_collectives) w_.graph.record_collectives();
    if (in.record_op_counts) w_.graph.record_op_counts();
    w_.graph.set_folded(in.folded);
  }

  Workload build() {
    place();
    if (d_.has_errors()) return std::move(w_);
    for (std::size_t i = 0; i < plan_->pipelines.size(); ++i) build_pipeline(i);
    sync_gradients();
    optimizer_steps();
    w_.graph.finish();
    return std::move(w_);
  }

 private:
  // ---- placement ------------------------------------------------------------------------

  // The resolved plan's placement (sim/resolved_plan.hpp): full fidelity makes a device of
  // every GPU; folded one device per stage of each pipeline, standing for all of its GPUs.
  void place() {
    context_rings_ = context_rings(r_);
    std::vector<DeviceRequest> requests;
    for (const PlacedGroup& placed : r_.groups) {
      Group group{placed.pipeline,
                  placed.replica,
                  placed.stage,
                  placed.dp_rank,
                  placed.cp_rank,
                  placed.cluster,
                  placed.first_gpu,
                  {},
                  1};
      placed_.push_back(group);
      const auto& pipeline = plan_->pipelines[placed.pipeline];
      if (in_.folded && (placed.replica > 0 || placed.dp_rank > 0 || placed.cp_rank > 0)) continue;
      if (in_.folded) {
        group.fold = pipeline.replicas * stage_slices(placed);
        w_.gpus.emplace_back();
        group.devices.push_back(static_cast<int>(requests.size()));
        requests.push_back({placed.cluster, placed.first_gpu, placed.tp * group.fold});
        w_.roles.push_back({group.pipeline, group.stage, 0, 0, 0});
      } else {
        for (int t = 0; t < placed.tp; ++t) {
          group.devices.push_back(static_cast<int>(requests.size()));
          requests.push_back({placed.cluster, placed.first_gpu + t, 1});
          w_.gpus.push_back({placed.first_gpu + t});
          w_.roles.push_back(
              {group.pipeline, group.stage, placed.replica, placed.dp_rank, t, placed.cp_rank});
        }
      }
      groups_.push_back(std::move(group));
    }
    if (in_.folded)
      for (std::size_t k = 0; k < groups_.size(); ++k)
        for (const Group& g : placed_)
          if (g.pipeline == groups_[k].pipeline && g.stage == groups_[k].stage)
            for (int t = 0; t < plan_->pipelines[g.pipeline].stages[g.stage].tp; ++t)
              w_.gpus[groups_[k].devices[0]].push_back(g.first_gpu + t);
    w_.platform = build_platform(s_, in_.gpus, requests, d_);
  }

  int stage_slices(const PlacedGroup& g) const { return r_.stage(g.pipeline, g.stage).slices(); }

  std::vector<int> groups_of(int pipeline, int replica, int stage) const {
    std::vector<int> out;
    for (std::size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].pipeline == pipeline && groups_[g].replica == replica &&
          groups_[g].stage == stage)
        out.push_back(static_cast<int>(g));
    return out;
  }

  // ---- costs ----------------------------------------------------------------------------

  const kernels::GpuSpec& gpu_of(const Group& g) const { return *in_.gpus[g.cluster]; }
  int group_index(const Group& g) const { return static_cast<int>(&g - groups_.data()); }

  kernels::LayerWork layer_work(const core::Stage& stage) const { return r_.layer_work(stage); }

  // The activation tensor of one dp slice of a micro-batch (what a tp collective moves).
  double slice_bytes(const core::Stage& stage) const { return r_.slice_bytes(stage); }

  // A hop inside one node: NVLink port out, NVLink port in.
  Hop2 nvlink_hop(int cluster) const { return sim::nvlink_hop(s_.clusters[cluster]); }
  Hop2 nic_hop(int cluster) const { return sim::nic_hop(s_.clusters[cluster]); }

  // ---- one pipeline -----------------------------------------------------------------------

  struct OpKey {
    int group;
    bool forward;
    int micro_batch;
    int chunk;
    auto operator<=>(const OpKey&) const = default;
  };

  void build_pipeline(std::size_t i) {
    const auto& pipeline = plan_->pipelines[i];
    const int p = static_cast<int>(pipeline.stages.size());
    const int replicas = in_.folded ? 1 : pipeline.replicas;
    for (int r = 0; r < replicas; ++r) {
      // 1. Every stage's ops, in its schedule's order, chained on its devices.
      for (int st = 0; st < p; ++st) {
        const auto order =
            models::schedule_for(plan_->schedule, p, st, pipeline.micro_batches, chunks_);
        for (int g : groups_of(static_cast<int>(i), r, st)) {
          std::vector<NodeId> stream(groups_[g].devices.size(), w_.graph.join());
          for (const models::PipeOp& op : order) {
            OpNodes nodes = emit_op(groups_[g], pipeline.stages[st], op, st == p - 1, stream);
            ops_[{g, op.forward, op.micro_batch, op.chunk}] = nodes;
            if (!op.forward) {
              last_backward_[{g, op.chunk}] = nodes.done;
              final_backward_[g] = nodes.done;  // ops come in schedule order
            }
          }
          last_op_[g] = stream;
        }
      }
      // 2. Activations forward and gradients backward between consecutive model chunks.
      for (int c = 0; c < chunks_; ++c)
        for (int st = 0; st < p; ++st) {
          const bool last_chunk_stage = st == p - 1 && c == chunks_ - 1;
          for (int mb = 0; mb < pipeline.micro_batches; ++mb) {
            // B of (st, c) needs its own F (activations kept from the forward).
            for (int g : groups_of(static_cast<int>(i), r, st))
              w_.graph.edge(ops_.at({g, true, mb, c}).done, ops_.at({g, false, mb, c}).entry);
            if (last_chunk_stage) continue;
            const int next_stage = st + 1 < p ? st + 1 : 0;
            const int next_chunk = st + 1 < p ? c : c + 1;
            connect(static_cast<int>(i), r, st, c, next_stage, next_chunk, mb, true);
            connect(static_cast<int>(i), r, next_stage, next_chunk, st, c, mb, false);
          }
        }
    }
  }

  // One op of one group: per layer, compute and tensor-parallel collectives. Full fidelity
  // lowers the collectives; folded charges their closed form as a delay.
  OpNodes emit_op(const Group& g, const core::Stage& stage, const models::PipeOp& op,
                  bool last_stage, std::vector<NodeId>& stream) {
    Graph& graph = w_.graph;
    const auto work = layer_work(stage);
    const auto times = in_.compute->layer(gpu_of(g), work);
    const ContextExposure cx =
        context_exposure(times, context_rings_[g.pipeline][g.stage], work.recompute);
    const int layers = stage.layers / chunks_;
    const bool logits = last_stage && op.chunk == chunks_ - 1;
    const auto logit_times = logits ? in_.compute->logits(gpu_of(g), work) : kernels::PhaseTimes{};
    // What each phase's kernels do, for the Chakra export (kernels::layer_counts).
    const bool count = graph.records_op_counts();
    const auto counts = count ? kernels::layer_counts(work) : kernels::PhaseCounts{};
    const auto logit_counts =
        count && logits ? kernels::logits_counts(work) : kernels::PhaseCounts{};
    const std::string what = std::string(op.forward ? "F" : "B") + " stage " +
                             std::to_string(g.stage) +
                             (chunks_ > 1 ? " chunk " + std::to_string(op.chunk) : "");
    OpNodes nodes;
    nodes.entry = graph.join();
    for (std::size_t d = 0; d < stream.size(); ++d) {
      graph.edge(stream[d], nodes.entry);
    }
    std::vector<NodeId> at(stream.size(), nodes.entry);
    const int mb = op.micro_batch;
    const double slowdown = kernels::kernel_costs_for(gpu_of(g).architecture).overlap_slowdown;
    // The last micro-batch's backward hands each layer's gradients to the data-parallel
    // buckets as it finishes the layer (grad_reduce: overlap), and the buckets' NCCL
    // kernels then run beside the layers below on the same GPUs: the compute issued while
    // the bucket stream has work left is slowed for the overlap (kernels::CollectiveStream,
    // over the buckets' closed-form times, sim::buckets_beside_backward). Backlog left when
    // the op ends overlaps nothing more here (for one chunk the op is the stage's last).
    const bool last_micro_batch = op.micro_batch == plan_->pipelines[g.pipeline].micro_batches - 1;
    const std::vector<double> buckets =
        !op.forward && last_micro_batch ? buckets_beside_backward(r_, g.pipeline, g.stage, op.chunk)
                                        : std::vector<double>{};
    kernels::CollectiveStream dp_buckets(slowdown);
    auto hand_over = [&](int layer) {
      if (layer < int(buckets.size())) dp_buckets.queue(buckets[layer]);
    };
    // `split`: the kernel classes of the phase `seconds` is (a share of) the time of;
    // `ops`: the FLOPs and bytes of that share. Returns the seconds charged (beside the
    // buckets' backlog).
    auto compute = [&](double seconds, Work kind, const std::string& label,
                       const kernels::KernelSplit& split, const kernels::OpCounts& ops) {
      seconds = dp_buckets.compute(seconds);
      const int l = graph.label(label);
      for (std::size_t d = 0; d < at.size(); ++d) {
        note_layer_split(g.devices[d], seconds, split);
        NodeId n = graph.compute(g.devices[d], seconds, kind, l, mb);
        graph.set_op_counts(n, ops);
        graph.edge(at[d], n);
        at[d] = n;
      }
      return seconds;
    };
    // What context parallelism's ring exchanges leave exposed after the attention core
    // (sim/context_parallel.hpp): a wait on every GPU of the group.
    auto exchange = [&](double seconds, const std::string& label) {
      if (seconds <= 0) return;
      dp_buckets.pass(seconds);
      const int l = graph.label(label + " cp ring exchange");
      for (std::size_t d = 0; d < at.size(); ++d) {
        NodeId n = graph.delay(g.devices[d], seconds, Work::cp_comm, l, mb);
        graph.edge(at[d], n);
        at[d] = n;
      }
    };
    const double share = models::attention_share_of_layer(*model_, s_.training.seq_len);
    const double bytes = slice_bytes(stage);
    // A block's compute and the tensor-parallel collective after it. With tp_comm_overlap
    // they run side by side (Megatron-core splits the GEMM and pipelines the collective
    // with it): the block costs the longer of the two, its compute slowed while the
    // collective's kernels share the GPU (kernels::compute_beside_collective, over the
    // collective's closed-form time).
    const double collective_s = tensor_parallel_block_time(s_.clusters[g.cluster], stage.tp, bytes,
                                                           r_.choices.sequence_parallel);
    auto block = [&](double seconds, Work kind, const std::string& label,
                     const kernels::KernelSplit& split, const kernels::OpCounts& ops) {
      if (!r_.choices.tp_comm_overlap || stage.tp <= 1) {
        compute(seconds, kind, label, split, ops);
        if (stage.tp > 1) {
          tp_comm(g, stage, bytes, false, label, mb, at);
          dp_buckets.pass(collective_s);
        }
        return;
      }
      std::vector<NodeId> comm = at;
      const double charged =
          compute(kernels::compute_beside_collective(seconds, collective_s, slowdown), kind, label,
                  split, ops);
      dp_buckets.pass(std::max(collective_s - charged, 0.0));  // the block: the longer one
      tp_comm(g, stage, bytes, false, label, mb, comm);
      for (std::size_t d = 0; d < at.size(); ++d) {
        NodeId j = graph.join();
        graph.edge(at[d], j);
        graph.edge(comm[d], j);
        at[d] = j;
      }
    };

    if (op.forward) {
      if (stage.tp <= 1) {
        compute(layers * times.forward.value(), Work::forward, what, times.forward_split,
                counts.forward.scaled(layers));
        exchange(layers * cx.forward, what);
      } else {
        for (int l = 0; l < layers; ++l) {
          const std::string layer = what + " layer " + std::to_string(l);
          block(share * times.forward.value(), Work::forward, layer + " attention",
                times.forward_split, counts.forward.scaled(share));
          exchange(cx.forward, layer);
          block((1 - share) * times.forward.value(), Work::forward, layer + " mlp",
                times.forward_split, counts.forward.scaled(1 - share));
        }
      }
      if (logits)
        compute(logit_times.forward.value(), Work::forward, what + " logits",
                logit_times.forward_split, logit_counts.forward);
    } else {
      if (logits)
        compute(logit_times.backward.value(), Work::backward, what + " logits",
                logit_times.backward_split, logit_counts.backward);
      const bool full_recompute = work.recompute == core::Recompute::full;
      // The last micro-batch's backward hands each layer's gradients to the data-parallel
      // buckets as it finishes the layer (grad_reduce: overlap): keep where each layer ends.
      auto& layer_ends = layer_ends_[{group_index(g), op.chunk}];
      if (last_micro_batch) layer_ends.assign(layers, {});
      if (stage.tp <= 1) {
        if (times.recompute.value() > 0) {
          compute(layers * times.recompute.value(), Work::recompute, what + " recompute",
                  times.recompute_split, counts.recompute.scaled(layers));
          exchange(layers * cx.recompute, what + " recompute");
        }
        if (!last_micro_batch) {
          compute(layers * times.backward.value(), Work::backward, what, times.backward_split,
                  counts.backward.scaled(layers));
          exchange(layers * cx.backward, what);
        } else {
          for (int l = layers - 1; l >= 0; --l) {
            const std::string layer = what + " layer " + std::to_string(l);
            compute(times.backward.value(), Work::backward, layer, times.backward_split,
                    counts.backward);
            exchange(cx.backward, layer);
            layer_ends[l] = at;
            hand_over(l);
          }
        }
      } else {
        for (int l = layers - 1; l >= 0; --l) {
          const std::string layer = what + " layer " + std::to_string(l);
          if (full_recompute) {
            block(share * times.recompute.value(), Work::recompute, layer + " recompute attention",
                  times.recompute_split, counts.recompute.scaled(share));
            exchange(cx.recompute, layer + " recompute");
            block((1 - share) * times.recompute.value(), Work::recompute, layer + " recompute mlp",
                  times.recompute_split, counts.recompute.scaled(1 - share));
          } else if (times.recompute.value() > 0) {
            compute(times.recompute.value(), Work::recompute, layer + " recompute",
                    times.recompute_split, counts.recompute);
            exchange(cx.recompute, layer + " recompute");
          }
          block((1 - share) * times.backward.value(), Work::backward, layer + " mlp",
                times.backward_split, counts.backward.scaled(1 - share));
          block(share * times.backward.value(), Work::backward, layer + " attention",
                times.backward_split, counts.backward.scaled(share));
          exchange(cx.backward, layer);
          if (last_micro_batch) layer_ends[l] = at;
          hand_over(l);
        }
      }
    }
    nodes.done = graph.join();
    for (NodeId n : at) graph.edge(n, nodes.done);
    std::fill(stream.begin(), stream.end(), nodes.done);
    return nodes;
  }

  // `seconds` of a phase's compute on `device`, split as the phase's `split` is.
  void note_layer_split(int device, double seconds, const kernels::KernelSplit& split) {
    const double total = split.total();
    if (total <= 0) return;
    if (w_.layer_split.size() <= static_cast<std::size_t>(device))
      w_.layer_split.resize(device + 1);
    w_.layer_split[device] += split.scaled(seconds / total);
  }

  // The tensor-parallel collective after a block: an all-reduce of the block's output, or
  // with sequence parallelism a reduce-scatter and (before the next block) an all-gather,
  // which together move what the all-reduce moves.
  void tp_comm(const Group& g, const core::Stage& stage, double bytes, bool,
               const std::string& label, int mb, std::vector<NodeId>& at) {
    Graph& graph = w_.graph;
    const std::string name =
        label + (r_.choices.sequence_parallel ? " tp reduce-scatter+all-gather" : " tp all-reduce");
    const core::Cluster& cluster = s_.clusters[g.cluster];
    if (in_.folded) {
      const double seconds =
          tensor_parallel_block_time(cluster, stage.tp, bytes, r_.choices.sequence_parallel);
      NodeId n = graph.delay(g.devices[0], seconds, Work::tp_comm, graph.label(name), mb);
      graph.edge(at[0], n);
      at[0] = n;
      return;
    }
    Sender sender{graph, w_.platform, nullptr, nullptr, Work::tp_comm, mb};
    sender.granularity = s_.simulation.collectives;
    Collective c{g.devices, at, bytes, name, 1};
    if (r_.choices.sequence_parallel) {
      c.ready =
          tensor_parallel_collective(sender, c, cluster, g.first_gpu, RingKind::reduce_scatter);
      at = tensor_parallel_collective(sender, c, cluster, g.first_gpu, RingKind::all_gather);
    } else {
      at = tensor_parallel_collective(sender, c, cluster, g.first_gpu, RingKind::all_reduce);
    }
  }

  // Sends the output of op (from_stage, from_chunk) of micro-batch mb to the op that needs
  // it: activations forward, or their gradients backward. The tensor is split into the
  // pieces where the sender's dp x tp slices and the receiver's overlap (resharding);
  // receivers without sequence parallelism then all-gather their slice across tp.
  void connect(int i, int r, int from_stage, int from_chunk, int to_stage, int to_chunk, int mb,
               bool forward) {
    const auto& pipeline = plan_->pipelines[i];
    const auto& from = pipeline.stages[from_stage];
    const auto& to = pipeline.stages[to_stage];
    // Forward: F(from) -> F(to). Backward (called with from/to as the forward pair): the
    // gradient goes from B(from) to B(to).
    const auto senders = groups_of(i, r, from_stage);
    const auto receivers = groups_of(i, r, to_stage);
    const double total = r_.boundary_bytes();
    // The pieces of the forward boundary (sender's slices against receiver's); backward
    // the same pieces go the other way.
    const auto& pieces = r_.reshard[i][forward ? from_stage : to_stage];
    Graph& graph = w_.graph;
    const int label = graph.label(std::string(forward ? "activations" : "gradients") + " stage " +
                                  std::to_string(from_stage) + " -> " + std::to_string(to_stage));
    WanCodec codec{r_.choices.codecs.wan_activations, s_.training.precision, model_->hidden};
    Sender sender{graph, w_.platform, &codec, &w_.activation_codec, Work::pp_comm, mb};
    sender.send_recv_cost = true;
    // simulation.pipeline_messages: in_order. Not for the interleaved schedule: its transfers
    // are built chunk by chunk, not in the order they are sent.
    if (s_.simulation.pipeline_messages == core::PipelineMessages::in_order && chunks_ == 1)
      sender.fifo = &pipeline_fifo_;

    std::vector<std::vector<NodeId>> arrived(receivers.size());
    if (in_.folded) {
      const Group& a = groups_[senders[0]];
      const Group& b = groups_[receivers[0]];
      const int flows = static_cast<int>(pieces.size()) * pipeline.replicas;
      const NodeId ready = ops_.at({senders[0], forward, mb, from_chunk}).done;
      const double bytes = total * pipeline.replicas;
      arrived[0].push_back(sender.send(a.devices[0], b.devices[0], bytes, ready, label, flows));
      if (!r_.choices.sequence_parallel && to.tp > 1) {
        const double seconds =
            tensor_parallel_all_gather_time(s_.clusters[b.cluster], to.tp, slice_bytes(to));
        NodeId n = graph.delay(b.devices[0], seconds, Work::pp_comm,
                               graph.label("gather activations across tp"), mb);
        graph.edge(arrived[0].back(), n);
        arrived[0] = {n};
      }
    } else {
      // Sender slices: dp rank major, then cp rank, tp rank minor; receiver slices likewise.
      std::vector<std::vector<NodeId>> per_device(to.slices() * to.tp);
      for (const ReshardPiece& piece : pieces) {
        const int s = forward ? piece.from_slice : piece.to_slice;
        const int t = forward ? piece.to_slice : piece.from_slice;
        const Group& a = groups_[senders[s / from.tp]];
        const Group& b = groups_[receivers[t / to.tp]];
        const NodeId ready = ops_.at({senders[s / from.tp], forward, mb, from_chunk}).done;
        const double bytes = total * static_cast<double>(piece.end - piece.begin) / piece.units;
        const int src = a.devices[s % from.tp];
        const int dst = b.devices[t % to.tp];
        if (src == dst)
          per_device[t].push_back(ready);
        else
          per_device[t].push_back(sender.send(src, dst, bytes, ready, label));
      }
      for (std::size_t k = 0; k < receivers.size(); ++k) {
        const Group& b = groups_[receivers[k]];
        std::vector<NodeId> have;
        for (int t = 0; t < to.tp; ++t) {
          NodeId j = graph.join();
          for (NodeId n : per_device[k * to.tp + t]) graph.edge(n, j);
          have.push_back(j);
        }
        if (!r_.choices.sequence_parallel && to.tp > 1) {
          Sender local{graph, w_.platform, nullptr, nullptr, Work::pp_comm, mb};
          have = tensor_parallel_collective(
              local, {b.devices, have, slice_bytes(to), "gather activations across tp", 1},
              s_.clusters[b.cluster], b.first_gpu, RingKind::all_gather);
        }
        arrived[k] = have;
      }
    }
    for (std::size_t k = 0; k < receivers.size(); ++k) {
      const NodeId entry = ops_.at({receivers[k], forward, mb, to_chunk}).entry;
      for (NodeId n : arrived[k]) graph.edge(n, entry);
    }
  }

  // ---- gradient synchronisation ---------------------------------------------------------

  void sync_gradients() {
    // Backward order: the last layers' gradients are ready first.
    int bucket_number = 0;
    for (auto seg_it = r_.segments.rbegin(); seg_it != r_.segments.rend(); ++seg_it) {
      const Segment& seg = *seg_it;
      if (seg.buckets == 0) continue;  // held by one group: nothing to sync
      // Holder groups, ordered by cluster so that rings cross the WAN as little as possible.
      std::vector<int> holders;
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        const auto [stage, chunk] = seg.holders[groups_[g].pipeline];
        if (groups_[g].stage == stage) holders.push_back(static_cast<int>(g));
      }
      std::stable_sort(holders.begin(), holders.end(),
                       [&](int a, int b) { return groups_[a].cluster < groups_[b].cluster; });
      // With outer sync (DiLoCo) every step synchronises inside each island (pipeline) only.
      for (const auto& members : islands(holders)) sync_segment(seg, members, bucket_number);
    }
  }

  std::vector<std::vector<int>> islands(const std::vector<int>& holders) const {
    if (!plan_->outer_sync.enabled()) return {holders};
    std::map<int, std::vector<int>> by_pipeline;
    for (int g : holders) by_pipeline[groups_[g].pipeline].push_back(g);
    std::vector<std::vector<int>> out;
    for (auto& [pipeline, members] : by_pipeline) out.push_back(std::move(members));
    return out;
  }

  // The buckets of a segment among `holders` (all of them, or one island's), numbered on:
  // without outer sync exactly the resolved plan's segment buckets.
  void sync_segment(const Segment& seg, const std::vector<int>& holders, int& bucket_number) {
    int members = 0;
    for (int g : holders) members += groups_[g].fold;
    if (members <= 1) return;
    int rings = std::numeric_limits<int>::max();
    for (int g : holders) rings = std::min(rings, stage_of(groups_[g]).tp);
    const GradientBuckets buckets =
        gradient_buckets(seg.parameters, rings, r_.choices, plan_->grad_sync.bucket);
    buckets_ = buckets.count;
    for (int b = 0; b < buckets.count; ++b, ++bucket_number) {
      bucket_ = b;
      sync_bucket(seg, holders, rings, buckets.bytes_per_ring, bucket_number);
    }
  }

  const core::Stage& stage_of(const Group& g) const {
    return plan_->pipelines[g.pipeline].stages[g.stage];
  }

  // When bucket `bucket_` of `buckets_` of the segment is ready on one device of group g.
  // overlap: once the last micro-batch's backward has finished the bucket's lowest layer
  // (buckets fill from the segment's last layer down); after_backward: once the stage's
  // whole backward is done.
  NodeId ready_node(int g, const Segment& seg, int device_index) {
    const auto [stage, chunk] = seg.holders[groups_[g].pipeline];
    NodeId ready = last_backward_.at({g, chunk});
    if (r_.choices.grad_reduce == core::GradReduce::overlap) {
      const int chunk_first = r_.layers[groups_[g].pipeline][stage][chunk].first;
      const int lowest = bucket_lowest_layer(seg.first_layer, seg.layers, buckets_, bucket_);
      const auto it = layer_ends_.find({g, chunk});
      const int local = lowest - chunk_first;
      if (it != layer_ends_.end() && local >= 0 && local < int(it->second.size()) &&
          device_index < int(it->second[local].size()))
        ready = it->second[local][device_index];
    }
    NodeId j = w_.graph.join();
    w_.graph.edge(ready, j);
    // after_backward: no bucket leaves before the stage's whole backward is done.
    if (r_.choices.grad_reduce == core::GradReduce::after_backward)
      w_.graph.edge(final_backward_.at(g), j);
    const int device = groups_[g].devices[device_index];
    if (auto it = dp_stream_.find(device); it != dp_stream_.end()) w_.graph.edge(it->second, j);
    return j;
  }

  void sync_bucket(const Segment& seg, const std::vector<int>& holders, int rings, double bytes,
                   int bucket) {
    Graph& graph = w_.graph;
    const std::string name = "dp bucket " + std::to_string(bucket);
    WanCodec codec{r_.choices.codecs.wan_gradients, models::gradient_precision(r_.choices.training),
                   model_->hidden};
    Sender sender{graph, w_.platform, &codec, &w_.gradient_codec, Work::dp_comm, -1};
    sender.granularity = s_.simulation.collectives;
    const auto algorithm = plan_->grad_sync.algorithm;
    std::vector<int> clusters;
    for (int g : holders)
      if (std::find(clusters.begin(), clusters.end(), groups_[g].cluster) == clusters.end())
        clusters.push_back(groups_[g].cluster);

    if (!in_.folded) {
      for (int ring = 0; ring < rings; ++ring) {
        Collective c{{}, {}, bytes, name + (rings > 1 ? " ring " + std::to_string(ring) : ""), 1};
        std::vector<std::vector<int>> by_cluster(clusters.size());
        std::map<int, std::vector<int>> by_node;  // member indices, by node of the group
        for (int g : holders) {
          const int tp = stage_of(groups_[g]).tp;
          const int index = ring * tp / rings;
          by_node[groups_[g].first_gpu / s_.clusters[groups_[g].cluster].gpus_per_node].push_back(
              static_cast<int>(c.members.size()));
          c.members.push_back(groups_[g].devices[index]);
          c.ready.push_back(ready_node(g, seg, index));
          const auto k =
              std::find(clusters.begin(), clusters.end(), groups_[g].cluster) - clusters.begin();
          by_cluster[k].push_back(groups_[g].devices[index]);
        }
        if (clusters.size() == 1 && runs_as_channel_rings(algorithm)) {
          channel_all_reduce(sender, c, clusters[0], by_node);
          continue;
        }
        auto done = clusters.size() > 1 && algorithm == core::GradSyncAlgorithm::hierarchical
                        ? hierarchical_all_reduce(sender, c, by_cluster)
                        : all_reduce(algorithm, sender, c);
        for (std::size_t m = 0; m < done.size(); ++m) dp_stream_[c.members[m]] = done[m];
      }
      return;
    }

    // Folded: the members folded into one device reduce among themselves in closed form.
    if (clusters.size() > 1 && algorithm != core::GradSyncAlgorithm::hierarchical) {
      if (!warned_flat_) {
        d_.error(s_.where("strategy.grad_sync.algorithm"), "strategy.grad_sync.algorithm",
                 "folded fidelity cannot fold a " + core::to_string(algorithm) +
                     " all-reduce whose members span clusters",
                 "use algorithm: hierarchical, or --fidelity full");
        warned_flat_ = true;
      }
      return;
    }
    // Per cluster: the members, the devices that hold them, and one leader device.
    for (int c : clusters) {
      std::vector<int> here;
      int n = 0;
      for (int g : holders)
        if (groups_[g].cluster == c) {
          here.push_back(g);
          n += groups_[g].fold;
        }
      cluster_members_[c] = n;
      NodeId all_ready = graph.join();
      for (int g : here) graph.edge(ready_node(g, seg, 0), all_ready);
      cluster_ready_[c] = all_ready;
      cluster_groups_[c] = here;
    }
    if (clusters.size() == 1) {
      const int c = clusters[0];
      const double seconds = segment_bucket_time(r_, seg, c, cluster_members_[c], bytes);
      for (int g : cluster_groups_[c]) {
        NodeId n = graph.delay(groups_[g].devices[0], seconds, Work::dp_comm, graph.label(name));
        graph.edge(cluster_ready_[c], n);
        dp_stream_[groups_[g].devices[0]] = n;
      }
      return;
    }
    // Hierarchical across clusters: reduce-scatter inside (closed form), the lanes' ring
    // across clusters between the leaders (transfers), all-gather inside (closed form).
    std::vector<int> sizes;
    for (int c : clusters) sizes.push_back(cluster_members_[c]);
    const int lanes = hierarchical_lanes(sizes);
    Collective across{{}, {}, bytes * rings, name + " inter", lanes * rings};
    std::map<int, NodeId> scattered;
    for (int c : clusters) {
      const double seconds =
          ring_reduce_scatter_time(cluster_members_[c], bytes, segment_ring_hop(r_, seg, c));
      NodeId leader_done = graph.join();
      for (int g : cluster_groups_[c]) {
        NodeId n = graph.delay(groups_[g].devices[0], seconds, Work::dp_comm,
                               graph.label(name + " intra reduce-scatter"));
        graph.edge(cluster_ready_[c], n);
        graph.edge(n, leader_done);
      }
      across.members.push_back(groups_[cluster_groups_[c][0]].devices[0]);
      across.ready.push_back(leader_done);
    }
    // bytes * rings over `lanes * rings` flows: each flow carries one lane of one ring.
    across.bytes = bytes / static_cast<double>(lanes) * lanes * rings;
    auto reduced = ring_all_reduce(sender, across);
    for (std::size_t k = 0; k < clusters.size(); ++k) {
      const int c = clusters[k];
      const double seconds =
          ring_all_gather_time(cluster_members_[c], bytes, segment_ring_hop(r_, seg, c));
      for (int g : cluster_groups_[c]) {
        NodeId n = graph.delay(groups_[g].devices[0], seconds, Work::dp_comm,
                               graph.label(name + " intra all-gather"));
        graph.edge(reduced[k], n);
        dp_stream_[groups_[g].devices[0]] = n;
      }
    }
  }

  // A data-parallel ring inside one cluster, as NCCL plays it (sim::channel_collective): one
  // channel per NIC it can use, channel j over each node's members rotated by j, each
  // reducing bytes / channels, after NCCL's fixed cost; a member's bucket is done when all
  // its channels are.
  void channel_all_reduce(const Sender& sender, const Collective& c, int cluster,
                          const std::map<int, std::vector<int>>& by_node) {
    std::vector<std::vector<int>> nodes;
    for (const auto& [node, members] : by_node) nodes.push_back(members);
    const auto done =
        channel_collective(sender, c, s_.clusters[cluster], nodes, RingKind::all_reduce);
    for (std::size_t m = 0; m < done.size(); ++m) dp_stream_[c.members[m]] = done[m];
  }

  // ---- optimizer ------------------------------------------------------------------------

  void optimizer_steps() {
    Graph& graph = w_.graph;
    const auto& t = r_.choices.training;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const Group& group = groups_[g];
      const auto spec = models::stage_spec(*plan_, group.pipeline, group.stage);
      const double params = models::optimizer_step_parameters(*model_, spec);
      const double seconds =
          in_.compute->optimizer_step(gpu_of(group), params, t.precision, t.optimizer).value();
      const int label = graph.label("optimizer stage " + std::to_string(group.stage));
      const auto counts = graph.records_op_counts()
                              ? kernels::optimizer_counts(params, t.precision, t.optimizer)
                              : std::nullopt;
      for (std::size_t d = 0; d < group.devices.size(); ++d) {
        const int device = group.devices[d];
        NodeId n = graph.compute(device, seconds, Work::optimizer, label);
        if (counts) graph.set_op_counts(n, *counts);
        graph.edge(last_op_.at(static_cast<int>(g))[d], n);
        if (auto it = dp_stream_.find(device); it != dp_stream_.end()) graph.edge(it->second, n);
      }
    }
  }

  const WorkloadInput& in_;
  core::Diagnostics& d_;
  const ResolvedPlan& r_;
  const core::Scenario& s_;  // as written: the plan's choices are r_.choices
  const core::Plan* plan_ = nullptr;
  const core::ModelConfig* model_ = nullptr;
  int chunks_ = 1;
  Workload w_;
  std::vector<Group> groups_;
  std::vector<Group> placed_;  // every group of the full placement (folded or not)
  std::vector<std::vector<ContextRing>> context_rings_;  // [pipeline][stage]
  std::map<OpKey, OpNodes> ops_;
  std::map<std::pair<int, int>, NodeId> last_backward_;  // (group, chunk)
  std::map<int, NodeId> final_backward_;                 // group: its last backward op
  // (group, chunk): per local layer, where the last micro-batch's backward of it ends on
  // each device of the group.
  std::map<std::pair<int, int>, std::vector<std::vector<NodeId>>> layer_ends_;
  int bucket_ = 0, buckets_ = 1;  // the bucket sync_bucket is building, of its segment's
  std::map<int, std::vector<NodeId>> last_op_;  // group -> per device
  std::map<int, NodeId> dp_stream_;             // device -> last gradient sync node
  std::map<int, int> cluster_members_;
  std::map<int, NodeId> cluster_ready_;
  std::map<int, std::vector<int>> cluster_groups_;
  bool warned_flat_ = false;
  std::map<std::pair<int, int>, NodeId> pipeline_fifo_;  // last pipeline transfer per GPU pair
};

}  // namespace

Workload build_workload(const WorkloadInput& in, core::Diagnostics& diags) {
  return Builder(in, diags).build();
}

}  // namespace hgsim::sim
