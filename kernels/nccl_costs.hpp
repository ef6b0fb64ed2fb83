// NCCL's costs per collective beyond the bytes, per GPU architecture: its tuning model's
// per-protocol latencies (NVIDIA/nccl src/graph/tuning.cc) and the figures of
// kernels/nccl_costs.yaml fitted to kernel-level NCCL measurements (the file says which).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"

namespace hgsim::kernels {

// One architecture's row of kernels/nccl_costs.yaml.
struct NcclCosts {
  Architecture architecture = Architecture::ampere;
  // The GPU time of one collective kernel beyond NCCL's own latency model, at 2 and at 8
  // ranks (linear between, held beyond 8).
  core::Seconds fixed_cost_at_two_ranks{0};
  core::Seconds fixed_cost_at_eight_ranks{0};
  double latency_scale = 1;               // on NCCL's protocol latencies (nccl_ring_latency_s)
  core::Seconds send_recv_fixed_cost{0};  // one send/recv pair, beyond its hop's latency
  std::string source;
};

std::vector<NcclCosts> parse_nccl_costs(std::string_view yaml_text, const std::string& file,
                                        core::Diagnostics& diags);
// The embedded kernels/nccl_costs.yaml, parsed once (throws std::logic_error if invalid).
const std::vector<NcclCosts>& nccl_costs();
const NcclCosts& nccl_costs_for(Architecture architecture);

// The figures for cluster `c`: its GPU's row, with the cluster's calibration
// (nccl_fixed_cost_2_ranks, nccl_fixed_cost_8_ranks, nccl_latency_scale,
// nccl_send_recv_fixed_cost) in their place.
struct NcclFigures {
  Architecture architecture = Architecture::ampere;
  double fixed_cost_at_two_ranks_s = 0;
  double fixed_cost_at_eight_ranks_s = 0;
  double latency_scale = 1;
  double send_recv_fixed_cost_s = 0;
};
NcclFigures nccl_figures(const core::Cluster& c);

// The GPU time of one NCCL collective kernel over `ranks` GPUs of cluster `c` beyond NCCL's
// latency model, that does not shrink with the message: fixed_cost_at_two_ranks at 2,
// fixed_cost_at_eight_ranks from 8 on, linear between; 0 for one rank.
double collective_fixed_cost_s(const core::Cluster& c, int ranks);

// ---- NCCL's protocols, as its tuning model prices a ring ------------------------------------
//
// NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027, src/graph/tuning.cc
// (ncclTunerConstantsDefaults, ncclTopoTuneModel, ncclTopoGetAlgoTime): NCCL prices each
// (algorithm, protocol) as latency + bytes / bandwidth and runs the cheapest. LL sends 8-byte
// lines of 4 data bytes and a flag (half the bus bandwidth, the lowest latency), LL128
// 128-byte lines of 120 (0.92), Simple the data in large chunks (the full bus bandwidth, the
// highest latency).
enum class NcclProtocol { ll, ll128, simple };
std::string to_string(NcclProtocol protocol);

struct NcclProtocolFigures {
  NcclProtocol protocol = NcclProtocol::simple;
  double base_latency_s = 0;           // baseLatencies[RING][p]
  double nvlink_step_s = 0;            // hwLatencies[NVLINK][RING][p], per step inside a node
  double net_step_s = 0;               // hwLatencies[NET][RING][p], per step between nodes
  double net_step_one_per_node_s = 0;  // hwLatencies[NET][TREE][p]: one rank a node
  double bus_fraction = 1;             // of the bus bandwidth: LL .5, LL128 .92, Simple 1
};
const std::array<NcclProtocolFigures, 3>& nccl_ring_protocols();

// NCCL's latency of one ring collective of `steps` steps over `ranks` ranks on `nodes` nodes
// (`inter_steps` of them between nodes), for protocol `p`, times the cluster's latency_scale:
//   base + (steps - inter_steps) x intra + inter_steps x inter,
// intra the NVLink step (at least NCCL's net overhead, 1us, 3us for Simple, across nodes),
// inter the NET step (the one-rank-a-node figure when ranks == nodes); an all-reduce across
// nodes under Simple pays 1.4x that (1.9x before Ampere: the "plateau effect of ring").
double nccl_ring_latency_s(const core::Cluster& c, const NcclProtocolFigures& p, int steps,
                           int inter_steps, int ranks, int nodes, bool all_reduce);

// One send/recv pair's fixed cost on cluster `c` (send_recv_fixed_cost), beyond the latency
// of its hop.
double send_recv_fixed_cost_s(const core::Cluster& c);

}  // namespace hgsim::kernels
