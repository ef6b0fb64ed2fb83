// The layer partition of one pipeline: how many layers each stage holds so that the
// slowest stage is as fast as it can be, with every stage fitting in its GPUs' memory.
//
// Stage s holding k layers takes k x per_layer_s + extra_s (extra: the logits on the last
// stage, codec work at WAN boundaries) and may hold at most max_layers. Layers are
// identical, so the cost of a stage depends only on how many it holds: the minimum over
// partitions of the maximum stage time is a min-max knapsack. partition_layers_dp is the
// dynamic programme over (stage, layers given so far), O(p L^2); partition_layers finds
// the same optimum by bisection on the stage time, O(p log), and is what the search uses
// (a test checks that both agree).
#pragma once

#include <vector>

namespace hgsim::planner {

struct StageShape {
  double per_layer_s = 0;
  double extra_s = 0;
  int max_layers = 0;  // memory-feasible maximum (in layers)
};

// Layers per stage (each >= unit, multiples of `unit`, summing to `layers`), minimising
// the slowest stage; empty when no partition fits.
std::vector<int> partition_layers(const std::vector<StageShape>& stages, int layers, int unit = 1);
std::vector<int> partition_layers_dp(const std::vector<StageShape>& stages, int layers,
                                     int unit = 1);

// The slowest stage of a partition.
double slowest_stage(const std::vector<StageShape>& stages, const std::vector<int>& layers);

// Whether more memory could make an optimal partition (as partition_layers returns) faster:
// some stage could hold `unit` layers more than its max_layers (and fewer than all) and
// still end within the slowest stage's time. When not, no partition under higher
// max_layers has a faster slowest stage (each of its stages would hold no more than it may
// already), so the search need not try the memory limits of more sharding
// (space.hpp make_pipelines).
bool memory_binds(const std::vector<StageShape>& stages, const std::vector<int>& layers,
                  int unit = 1);

}  // namespace hgsim::planner
