// NCCL's fixed cost per collective kernel, per GPU architecture (kernels/nccl_costs.yaml,
// fitted to kernel-level NCCL measurements; the file says which).
#pragma once

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
  core::Seconds floor_at_two_ranks{40e-6};
  core::Seconds floor_per_rank{0};
  std::string source;
};

std::vector<NcclCosts> parse_nccl_costs(std::string_view yaml_text, const std::string& file,
                                        core::Diagnostics& diags);
// The embedded kernels/nccl_costs.yaml, parsed once (throws std::logic_error if invalid).
const std::vector<NcclCosts>& nccl_costs();
const NcclCosts& nccl_costs_for(Architecture architecture);

// The GPU time of one NCCL collective kernel over `ranks` GPUs of cluster `c` that does not
// shrink with the message: floor_at_two_ranks + floor_per_rank x (ranks - 2); 0 for one rank.
double collective_floor_s(const core::Cluster& c, int ranks);

}  // namespace hgsim::kernels
