#include "sim/outer_sync.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "models/transformer.hpp"
#include "sim/workload.hpp"

namespace hgsim::sim {

std::pair<int, int> fragment_layers(int layers, int fragment, int fragments) {
  const auto at = [&](int f) {
    return static_cast<int>(static_cast<long long>(f) * layers / std::max(fragments, 1));
  };
  return {at(fragment), at(fragment + 1)};
}

double fragment_stage_parameters(const core::ModelConfig& m, const std::vector<int>& stage_layers,
                                 int stage, int tp, int fragment, int fragments) {
  const auto [frag_begin, frag_end] = fragment_layers(m.layers, fragment, fragments);
  int stage_begin = 0;
  for (int s = 0; s < stage; ++s) stage_begin += stage_layers[s];
  const int stage_end = stage_begin + stage_layers[stage];
  const int overlap =
      std::max(0, std::min(frag_end, stage_end) - std::max(frag_begin, stage_begin));
  // The stage's own parameters (models::stage_parameters) beyond its layers: embeddings on
  // the first stage, final norm and head on the last; they go with the first and the last
  // fragment.
  models::StageSpec spec;
  spec.stages = static_cast<int>(stage_layers.size());
  spec.stage_index = stage;
  spec.layers = stage_layers[stage];
  spec.tp = 1;
  const double extra =
      models::stage_parameters(m, spec) - spec.layers * models::layer_parameters(m);
  double params = overlap * models::layer_parameters(m);
  const bool first_stage = stage == 0;
  const bool last_stage = stage + 1 == spec.stages;
  const double embeddings = first_stage ? models::embedding_parameters(m) : 0;
  if (fragment == 0) params += embeddings;
  if (fragment == fragments - 1 && last_stage) params += extra - embeddings;
  return params / std::max(tp, 1);
}

core::Bytes outer_state_bytes(double parameters_per_gpu) {
  return core::Bytes(outer_state_bytes_per_parameter * parameters_per_gpu);
}

std::vector<NodeId> outer_all_reduce(Graph& graph, const Platform& platform,
                                     const OuterSyncInput& in, const std::vector<NodeId>& ready,
                                     CodecStats* stats) {
  const core::Plan& plan = *in.plan;
  const auto& roles = *in.roles;
  const int islands = static_cast<int>(plan.pipelines.size());
  std::vector<NodeId> done = ready;
  WanCodec codec{in.codec, in.precision, in.model->hidden};
  Sender sender{graph, platform, &codec, stats, Work::dp_comm, -1};
  const std::string name = "outer sync fragment " + std::to_string(in.fragment);
  for (const OuterShard& piece :
       outer_shards(plan, *in.model, in.precision, in.fragment, in.fragments)) {
    const std::size_t st = static_cast<std::size_t>(piece.stage);
    const int tp = piece.tp;
    const double shard = piece.bytes;
    for (int t = 0; t < tp; ++t) {
      // The holders of shard (st, t) in each island, in (replica, dp rank) order.
      std::vector<std::vector<int>> holders(islands);
      for (std::size_t d = 0; d < roles.size(); ++d)
        if (roles[d].stage == static_cast<int>(st) && roles[d].tp_rank == t)
          holders[roles[d].pipeline].push_back(static_cast<int>(d));
      std::vector<int> sizes;
      for (const auto& h : holders) sizes.push_back(static_cast<int>(h.size()));
      if (*std::min_element(sizes.begin(), sizes.end()) == 0) continue;
      const int lanes = hierarchical_lanes(sizes);
      const std::string shard_name =
          name + " stage " + std::to_string(st) + (tp > 1 ? " tp " + std::to_string(t) : "");
      // 1. Across islands, lane by lane (sim::hierarchical_lanes); a holder serving several
      // lanes (a smaller island's) has its piece once all of them are reduced.
      std::vector<std::vector<NodeId>> have(islands);
      for (int i = 0; i < islands; ++i)
        for (std::size_t k = 0; k < holders[i].size(); ++k)
          have[i].push_back(sizes[i] < lanes ? graph.join() : NodeId{});
      for (int lane = 0; lane < lanes; ++lane) {
        Collective across{{},
                          {},
                          shard / static_cast<double>(lanes),
                          shard_name + " lane " + std::to_string(lane),
                          1};
        std::vector<int> member(islands);
        for (int i = 0; i < islands; ++i) {
          member[i] = hierarchical_lane_member(lane, lanes, sizes[i]);
          across.members.push_back(holders[i][member[i]]);
          across.ready.push_back(ready[holders[i][member[i]]]);
        }
        const auto reduced = ring_all_reduce(sender, across);
        for (int i = 0; i < islands; ++i) {
          if (sizes[i] < lanes)
            graph.edge(reduced[i], have[i][member[i]]);
          else
            have[i][member[i]] = reduced[i];
        }
      }
      // 2. Inside each island, the holders all-gather the reduced pieces.
      for (int i = 0; i < islands; ++i) {
        Collective local{holders[i], have[i], shard, shard_name + " gather", 1};
        const auto gathered = ring_all_gather(sender, local);
        for (std::size_t k = 0; k < holders[i].size(); ++k) done[holders[i][k]] = gathered[k];
      }
    }
  }
  return done;
}

std::vector<OuterShard> outer_shards(const core::Plan& plan, const core::ModelConfig& model,
                                     core::Precision precision, int fragment, int fragments) {
  std::vector<OuterShard> out;
  if (plan.pipelines.empty()) return out;
  const auto& stages = plan.pipelines[0].stages;
  std::vector<int> stage_layers;
  for (const auto& st : stages) stage_layers.push_back(st.layers);
  for (std::size_t st = 0; st < stages.size(); ++st) {
    OuterShard shard;
    shard.stage = static_cast<int>(st);
    shard.tp = stages[st].tp;
    const double params =
        fragment_stage_parameters(model, stage_layers, shard.stage, shard.tp, fragment, fragments);
    shard.bytes = models::gradient_bytes(params, precision).value();
    if (shard.bytes <= 0) continue;
    for (const auto& p : plan.pipelines) {
      const int slices = st < p.stages.size() ? p.stages[st].slices() : 0;
      shard.holders.push_back(p.replicas * slices);
    }
    shard.lanes = *std::min_element(shard.holders.begin(), shard.holders.end()) > 0
                      ? hierarchical_lanes(shard.holders)
                      : 0;
    out.push_back(std::move(shard));
  }
  return out;
}

double outer_lane_time(int islands, double lane_bytes, Hop2 lane_hop, double wire_ratio,
                       double codec_s) {
  if (islands <= 1) return 0;
  return ring_all_reduce_time(islands, wire_ratio * lane_bytes, lane_hop) +
         2.0 * (islands - 1) * codec_s;
}

double outer_all_reduce_time(int islands, int holders_per_island, double shard_bytes, Hop2 wan,
                             Hop2 intra) {
  const int lanes = std::max(holders_per_island, 1);
  const Hop2 lane_hop{wan.bytes_per_s / lanes, wan.latency_s};
  return outer_lane_time(islands, shard_bytes / lanes, lane_hop) +
         ring_all_gather_time(holders_per_island, shard_bytes, intra);
}

}  // namespace hgsim::sim
