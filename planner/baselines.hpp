// The baselines the planner is compared with, each planned in its own restricted space
// with the same analytic model, then simulated on the real scenario:
//
//   megatron          homogeneous 3-D parallelism (Narayanan et al. 2021): one tp for all,
//                     pp dividing the layers, uniform layers, dp replicas; planned as if
//                     every GPU were the slowest type with the least memory and the WAN
//                     were as fast as the fabric; ranks laid out in scenario order (tp
//                     innermost, then dp, then pp, as Megatron-LM does); no compression.
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
//   dtfm              Yuan et al. 2022 (decentralized training of foundation models): a
//                     tasklet is (pipeline stage, data-parallel replica), layers uniform;
//                     an evolutionary search (swap mutations, elitism) assigns tasklets to
//                     clusters to minimise the iteration time on the real network; one tp
//                     for all, no compression. Simplified: DT-FM's cost model is replaced by
//                     ours, and tasklets are placed on clusters (our plans' stages live in
//                     one cluster), not on individual GPUs.
#pragma once

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

// The planner's guarantee: if a feasible baseline simulated faster than the best plan, its
// plan is simulated with the scenario's codecs and adopted when it is faster there too.
// Returns the name of the adopted baseline, or "".
std::string adopt_faster_baselines(const Context& ctx, const Options& options,
                                   const std::vector<Baseline>& baselines, SearchResult& result);

}  // namespace hgsim::planner
