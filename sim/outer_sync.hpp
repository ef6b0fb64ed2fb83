// DiLoCo's outer synchronisation (core::OuterSync), lowered to point-to-point transfers like
// sim/collectives.hpp, with its closed form beside it.
//
// Islands are the plan's pipelines (each with its replicas). Inside an island, gradients are
// all-reduced every inner step as without outer sync, so after the inner steps every replica
// of an island holds the same pseudo-gradient (parameters at the last outer sync minus
// parameters now). Every `inner_steps` steps the islands all-reduce it, shard by shard
// (stage s, tensor-parallel rank t), hierarchically:
//   1. across islands: L lanes (sim::hierarchical_lanes: one per holder of the island with
//      the most), lane j joining holder floor(j n_i / L) of every island i (an island with
//      fewer holders has each serve several); each lane all-reduces 1/L of the shard by a ring over
//      the islands (2 (I - 1) steps of S / (L I)), through the WAN, each transfer coded with
//      the outer-sync codec (compress::code_transfer: exact encoded sizes, codec time);
//   2. inside each island, once every lane a holder serves is reduced: its n holders
//      all-gather the L reduced pieces (ring, n - 1 steps of S / n).
// No reduce-scatter is needed inside an island: its replicas hold identical pseudo-gradients.
// The outer optimizer step (Nesterov) is element-wise on the shard, not costed (it hides
// under the transfers, as reductions do in sim/collectives.hpp).
//
// Streaming DiLoCo (fragments F > 1): fragment f is layers [f L / F, (f + 1) L / F) of the
// model (the embeddings go with the first fragment, the final norm and head with the last);
// its shard on a stage is the part of the stage's parameters in those layers.
#pragma once

#include <utility>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"
#include "sim/collectives.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

struct DeviceRole;  // sim/workload.hpp

// Layers [first, end) of fragment `fragment` of `fragments`: [f L / F, (f + 1) L / F). The
// embeddings go with fragment 0, the final norm and head with fragment F - 1.
std::pair<int, int> fragment_layers(int layers, int fragment, int fragments);

// Parameters of fragment `fragment` (of `fragments`) held by one GPU of stage `stage` of a
// pipeline whose stages hold `stage_layers` (tp-way sharded).
double fragment_stage_parameters(const core::ModelConfig& m, const std::vector<int>& stage_layers,
                                 int stage, int tp, int fragment, int fragments);

// Extra memory per GPU for DiLoCo: the snapshot of the parameters at the last outer sync and
// the outer optimizer's momentum, both fp32 (4 + 4 bytes per parameter the GPU holds).
constexpr double outer_state_bytes_per_parameter = 4 + 4;
core::Bytes outer_state_bytes(double parameters_per_gpu);

struct OuterSyncInput {
  const core::Plan* plan = nullptr;
  const core::ModelConfig* model = nullptr;
  core::Precision precision = core::Precision::bf16;  // pseudo-gradients travel as gradients do
  compress::CodecSpec codec;
  const std::vector<DeviceRole>* roles = nullptr;  // per device
  int fragment = 0;                                // which fragment syncs
  int fragments = 1;                               // F
};

// Builds the outer all-reduce of one fragment into `graph`: every device starts once
// `ready[device]` has completed; returns per device the node after which it holds the reduced
// pseudo-gradient. WAN bytes (raw and coded) go to `stats`.
std::vector<NodeId> outer_all_reduce(Graph& graph, const Platform& platform,
                                     const OuterSyncInput& in, const std::vector<NodeId>& ready,
                                     CodecStats* stats);

// One shard of a fragment's outer all-reduce: the fragment's part of stage `stage` on one
// tensor-parallel rank (each of the stage's `tp` ranks holds one such shard), `bytes` in the
// gradients' precision before the codec, held by `holders[i]` GPUs of island i (replicas x
// dp x cp); `lanes` = sim::hierarchical_lanes of the holders (0 when an island holds none).
struct OuterShard {
  int stage = 0;
  int tp = 1;
  double bytes = 0;
  std::vector<int> holders;
  int lanes = 0;
};
// The shards of fragment `fragment` (of `fragments`) of a plan whose islands cut the model alike
// (core::check_outer_sync), as outer_all_reduce moves them; stages without parameters in the
// fragment are left out.
std::vector<OuterShard> outer_shards(const core::Plan& plan, const core::ModelConfig& model,
                                     core::Precision precision, int fragment, int fragments);

// One lane of the outer all-reduce across islands: a ring all-reduce of `lane_bytes` over
// `islands` members on `lane_hop`, each of its 2 (I - 1) steps carrying `wire_ratio` of its
// chunk on the wire and paying `codec_s` (encode + decode) when the transfer is coded:
//   ring_all_reduce_time(I, wire_ratio x lane_bytes, lane_hop) + 2 (I - 1) codec_s.
double outer_lane_time(int islands, double lane_bytes, Hop2 lane_hop, double wire_ratio = 1,
                       double codec_s = 0);

// Closed form of outer_all_reduce for an uncoded shard of `shard_bytes`: I islands, each
// shard held by n GPUs per island (L = n lanes), lanes sharing the WAN hop `wan` (each lane
// gets wan.bytes_per_s / L), the intra-island all-gather on `intra`:
//   ring_all_reduce_time(I, S / L, {B / L, a}) + ring_all_gather_time(n, S, intra).
double outer_all_reduce_time(int islands, int holders_per_island, double shard_bytes, Hop2 wan,
                             Hop2 intra);

}  // namespace hgsim::sim
