// The search space and how a point of it becomes a Plan.
//
// A candidate is a set of pipeline groups over disjoint sets of clusters (clusters in no
// group stay idle). A group is a path of clusters along the WAN graph (the order of its
// stages), a replica count R, and per cluster of the path a stage shape: tp (a divisor of
// gpus_per_node that divides the model's heads, kv heads and FFN width), dp inside the
// stage (a divisor of the micro-batch), cp (context
// parallelism, cp_options), and how many stages the cluster holds (its GPUs / R /
// (tp dp)). One group over every cluster is a pipeline across clusters; one group per
// cluster is data parallelism across clusters (each with its own pipeline); anything
// between is a mixture. Layers are partitioned per group by partition_layers (memory-
// feasible under ZeRO-1, or under ZeRO-2 or -3 where their sharding lets the layers balance
// better: make_pipelines; slowest stage minimised), the micro-batches of the global batch
// are shared among groups so that their pipelines end together (slow replicas take fewer),
// and within a group as evenly as the replica count allows (two pipeline entries when it
// does not divide). Plus: micro-batch size, schedule (1F1B, GPipe, interleaved inside a cluster).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/scenario.hpp"
#include "models/transformer.hpp"
#include "planner/cost_model.hpp"
#include "planner/partition.hpp"

namespace hgsim::planner {

struct ClusterShape {
  int cluster = 0;
  int tp = 1;
  int dp = 1;
  int stages = 1;
  int cp = 1;  // context parallelism: each sequence split over cp tensor-parallel groups
};

// Tensor-parallel collectives overlapped with their GEMMs (plan key tp_comm_overlap) in every
// plan the search builds: a block then costs max(compute, collective) instead of their sum,
// in the model (cost_model.cpp) and in the simulator (sim/workload.cpp) alike, and memory is
// unchanged, so the key off can only lose (tests/test_planner.cpp
// PlannerSearch.TpCommOverlapNeverLoses). Set where a stage has tp > 1 (search_plan_choices).
constexpr bool search_tp_comm_overlap = true;
// Context-parallel degrees a stage may use: 1, and powers of two with 2 cp dividing the
// sequence when the attention is flash (core::check_plan's rules); cluster_shapes keeps
// tp x cp within a node.
std::vector<int> cp_options(const Context& ctx);
// dp degrees inside a stage for this micro-batch: its divisors.
std::vector<int> dp_options(int micro_batch);

struct GroupConfig {
  std::vector<ClusterShape> path;  // clusters in pipeline order
  int replicas = 1;
};

// tp degrees a stage in cluster c may use.
std::vector<int> tp_options(const Context& ctx, int cluster);
// Replica counts worth trying up to `max`: 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
std::vector<int> replica_options(int max);
// Orders of `clusters` in which consecutive clusters are joined by the WAN, cheapest
// crossings first (sum of latency + 1 GB / bandwidth along the path), at most `limit`; every
// order of up to 10 clusters, the greedy order from each cluster beyond (space.cpp).
std::vector<std::vector<int>> pipeline_orders(const Context& ctx, const std::vector<int>& clusters,
                                              int limit);
// Stage shapes for `gpus` GPUs of cluster c per replica, at most `limit`: the ones with
// the highest layer throughput (stages / per-layer time) and the one with fewest stages.
// `wide` (hgsim plan --exhaustive): every dp dividing the micro-batch and every cp of
// cp_options; else dp 1 or the micro-batch and cp 1 (the default search's pruning).
std::vector<ClusterShape> cluster_shapes(const Context& ctx, int cluster, int gpus, int micro_batch,
                                         int max_stages, int limit, bool wide = false);

// Largest layer count that fits a stage in memory, memoised.
class MemoryLimits {
 public:
  explicit MemoryLimits(const Context& ctx) : ctx_(ctx) {}
  int max_layers(int cluster, const models::StageSpec& spec);

 private:
  // Everything of a stage that its memory depends on, besides its layer count: the exact
  // fields, so that two stage shapes can never share an entry.
  using Key = std::array<std::uint64_t, 13>;
  struct KeyHash {
    std::size_t operator()(const Key& key) const;
  };
  const Context& ctx_;
  // Hashed: the search looks a stage up once per ZeRO stage it tries, a few hundred thousand
  // times on four clusters of 64 GPUs (an ordered map's compares take 8% of the search).
  std::unordered_map<Key, int, KeyHash> memo_;
};

// The ZeRO stages the planner chooses among (core::Plan::zero), least sharding first. 1
// (Megatron's distributed optimizer) and 2 (the gradients sharded too) cost no time in
// hgsim's model: their reduce-scatter + all-gather move what the all-reduce they replace
// moves (models::zero_traffic_factor 1). 3 (the weights too, FSDP's full shard) gathers the
// weights once more: 1.5x the data-parallel traffic. 0 (nothing sharded) is never faster
// than 1 and holds more, so the planner does not offer it.
constexpr int least_zero = 1;
constexpr int most_zero = 3;

// A group's pipeline with its layers partitioned, and the least ZeRO stage under which
// every stage holds its layers.
struct PartitionedPipeline {
  core::Pipeline pipeline;
  int zero = least_zero;
};

// The group's pipeline with its layers partitioned, for `micro_batches` per replica (the
// memory of 1F1B depends on it): the partition under ZeRO-1's memory limits, then under
// each higher stage's limits when they let the slowest stage get faster (more layers on the
// faster GPUs); a model that fits only with its gradients or weights sharded gets its
// partitions this way. Least sharding first; empty when no partition fits even under
// ZeRO-3.
std::vector<PartitionedPipeline> make_pipelines(const Context& ctx, MemoryLimits& limits,
                                                const GroupConfig& group, int micro_batch,
                                                core::Schedule schedule, int virtual_stages,
                                                int micro_batches);

// Shares `total` micro-batches among groups (each a pipeline with `replicas` set) so that
// the slowest replica ends first: group g with q micro-batches takes fill_g + (ceil(q /
// R_g) - 1) period_g. Returns the pipeline entries (a group whose replicas do not divide
// its share becomes two entries, m and m + 1), or empty when there are more replicas than
// micro-batches. `quantum[g]`: micro-batches per replica must be a multiple (interleaved).
std::vector<core::Pipeline> share_batch(const std::vector<core::Pipeline>& groups,
                                        const std::vector<double>& fill,
                                        const std::vector<double>& period, int total);

}  // namespace hgsim::planner
