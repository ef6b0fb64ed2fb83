// The baselines the planner is compared with, each planned in its own restricted space
// with the same analytic model, then simulated on the real scenario:
//
//   megatron          homogeneous 3-D parallelism (Narayanan et al. 2021): one tp for all,
//                     pp dividing the layers, uniform layers, dp replicas; ranks laid out in
//                     scenario order as Megatron-LM does (tp innermost, then dp, then pp:
//                     stage k holds ranks [k dp tp, (k + 1) dp tp), its replicas in
//                     whichever clusters those GPUs are); 1F1B; no compression.
//                     Grid-tuned as Yuan et al. 2022 tuned it (§4, "Baselines": every
//                     tp x pp x dp that runs, the fastest kept): every (tp, pp, dp) with
//                     tp | node, pp | layers, dp = GPUs / (tp pp), each micro-batch
//                     size and recomputation, costed by the analytic model on the real
//                     network and GPUs.
//   dp-only           data parallelism only, no pipeline: every replica holds the whole
//                     model on the smallest tensor-parallel group inside a node that fits
//                     it (tp 1 when one GPU does; clusters where no node does stay idle),
//                     equal micro-batch shares, no compression; and dp-only+codec, with
//                     the scenario's gradient codec.
//   pipeline-uniform  one pipeline across all clusters along the WAN, uniform layers (as
//                     even as the stage count allows), the scenario's codecs.
//   metis-like        heterogeneous stages and unequal shares (Um et al. 2024, Metis), but
//                     blind to the WAN: planned by the same search with every WAN link
//                     taken as free (no latency, no bandwidth limit), no compression.
//   dtfm              Yuan et al. 2022, "Decentralized Training of Foundation Models in
//                     Heterogeneous Environments" (NeurIPS 2022, arXiv 2206.01288): a
//                     tasklet is (pipeline stage, data-parallel replica), one per GPU, layers
//                     uniform, no tensor parallelism, GPipe, no compression. Its scheduler
//                     (§3) is run as the paper defines it, on its own cost model (§3.1,
//                     dtfm::schedule below): the GPUs are cut into P balanced groups of D (each
//                     group holds one stage's D replicas: a data-parallel group), the groups
//                     are ordered by an open-loop travelling-salesman tour over the groups'
//                     pipeline costs, and the cut is searched by a seeded, bounded
//                     evolutionary search with a local search (§3.2). The tasklet shape
//                     (P stages x D replicas) is the user's in the paper; its runs use 8
//                     stages x 8 replicas, micro-batch 1 and full recomputation (the
//                     authors' scripts, see baselines.cpp), which the baseline plays wherever
//                     8 stages divide the layers, GPUs and batch; elsewhere every shape with
//                     P | layers and P D = GPUs is scheduled and the fastest kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "planner/cost_model.hpp"
#include "planner/planner.hpp"

namespace hgsim::planner {

struct Baseline {
  std::string name;
  bool feasible = false;
  std::string why;  // when infeasible
  std::optional<core::Plan> plan;
  compress::CompressionSpecs compression;  // what it was simulated with
  double analytic_s = 0;
  double simulated_s = 0;
  std::string description;
  sim::Results result;
};

std::vector<Baseline> run_baselines(const Context& ctx, const Options& options);

// DT-FM's scheduler (Yuan et al. 2022 §3; the authors' code: github DS3Lab/DT-FM, commit
// 69f05e5, scheduler/heuristic_evolutionary_solver/scheduler.py), exposed for its tests.
namespace dtfm {

// The devices (one GPU each: DT-FM has no tensor parallelism) and the delay alpha and
// bandwidth beta between two of them (§3.1: the communication graph G): NVLink inside a
// node, the cluster's NIC hop between nodes, the WAN route (ctx.latency, the narrowest of
// ctx.wan_bandwidth and both NICs) between clusters; no route: infinite cost.
struct Network {
  const Context* ctx = nullptr;
  std::vector<int> cluster;  // per device
  std::vector<int> node;     // per device, inside its cluster
  int size() const { return static_cast<int>(cluster.size()); }
  double delay_s(int a, int b) const;
  double bytes_per_s(int a, int b) const;
  // alpha + bytes / beta (0 from a device to itself).
  double transfer_s(int a, int b, double bytes) const;
};
Network network(const Context& ctx);

// The smallest largest entry of a perfect matching of rows to columns of a square cost matrix
// (the bottleneck assignment, §3.1: the pipeline cost between two data-parallel groups is
// the slowest of the D transfers once each device of one is matched to one of the other);
// `match[r]` is row r's column.
double bottleneck_matching(const std::vector<std::vector<double>>& cost, std::vector<int>& match);

// The shortest open path visiting every node once (the open-loop travelling salesman, §3.1:
// the pipeline's order over the groups); exact (Held-Karp) up to 12 nodes, beyond that the
// best nearest-neighbour tour from every start improved by 2-opt. `length` gets its cost.
std::vector<int> open_loop_tour(const std::vector<std::vector<double>>& cost, double& length);

// What one stage's tasklets send: the activations of a pipeline's share of the batch
// forward (and their gradients back), and one stage's gradients (§3.1's c_PP and c_DP).
struct Payload {
  double activation_bytes = 0;
  double gradient_bytes = 0;
};

struct Schedule {
  // P groups of D devices in pipeline order (groups[s]: stage s's data-parallel group).
  std::vector<std::vector<int>> groups;
  // D chains of P devices: pipeline r runs stage s on pipelines[r][s].
  std::vector<std::vector<int>> pipelines;
  double data_parallel_s = 0;  // DataPCost: the slowest device's gradient exchange
  double pipeline_s = 0;       // PipelinePCost: the tour's length (one direction)
  double cost_s() const { return data_parallel_s + 2 * pipeline_s; }  // forward and backward
  long evaluated = 0;                                                 // cuts costed
};

// DT-FM's scheduler for P stages x D replicas on `net` (net.size() == P D): deterministic
// for a given seed, bounded (population and generations fixed, see baselines.cpp).
Schedule schedule(const Network& net, int stages, int replicas, const Payload& payload,
                  std::uint32_t seed);

}  // namespace dtfm

// The planner's guarantee: if a feasible baseline simulated faster than the best plan, its
// plan is simulated with the scenario's codecs and adopted when it is faster there too.
// Returns the name of the adopted baseline, or "".
std::string adopt_faster_baselines(const Context& ctx, const Options& options,
                                   const std::vector<Baseline>& baselines, SearchResult& result);

}  // namespace hgsim::planner
