// Where a device's iteration goes: its time split into parts that add up to the iteration.
//
//   gemm, attention, memory, overhead  its layers' compute by kernel class, in the
//                          proportions the compute model priced them (kernels::KernelSplit)
//   optimizer, codec       its optimizer step and its compression kernels
//   tp_comm, cp_comm, pp_comm, dp_comm  communication of each class while it computes
//                          nothing (exposed)
//   bubble                 the rest: the device waits (the pipeline's bubbles, and before its
//                          first op and after its last: the results' bubble_s + idle_s)
//
// Two activities at once share the time equally: compute that overlaps other compute (a
// codec kernel beside a layer), or exposed communication of two classes at once (a
// pipeline send during a gradient all-reduce). Compute hides communication whole.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/compute_model.hpp"
#include "sim/graph.hpp"

namespace hgsim::sim {

enum class Part : std::uint8_t {
  gemm,
  attention,
  memory,
  overhead,
  optimizer,
  codec,
  tp_comm,
  cp_comm,
  pp_comm,
  dp_comm,
  bubble,
};
inline constexpr int kParts = 11;
// "gemm", "attention", ..., "bubble": the JSON's keys without their "_s".
const char* to_string(Part part);

struct Breakdown {
  std::array<double, kParts> seconds{};
  double& operator[](Part p) { return seconds[static_cast<int>(p)]; }
  double operator[](Part p) const { return seconds[static_cast<int>(p)]; }
  double total() const;
};

// What a device is busy with, as the played graph says (the kernel classes come later).
enum class Activity : std::uint8_t { layers, optimizer, codec, tp_comm, cp_comm, pp_comm, dp_comm };
inline constexpr int kActivities = 7;
// The activity of a compute, delay or transfer node's work (pacing and none: none).
bool activity_of(Op op, Work work, Activity& out);

struct TimedActivity {
  double start = 0;
  double end = 0;
  Activity activity = Activity::layers;
};

// Per activity, the seconds of `intervals` it takes (compute first, then exposed
// communication; overlaps shared equally), times `weight`, added to `seconds`.
// The compute activities add up to the union of the compute intervals, the communication
// ones to the rest of the union of all.
void attribute(std::vector<TimedActivity>& intervals, double weight,
               std::array<double, kActivities>& seconds);

// A device's breakdown over an iteration of `iteration_s`: `activity` (seconds per
// iteration) with its layers split as `layers` (the kernel classes of the layer compute it
// was given; none given: all GEMM) and the rest of the iteration its bubble.
Breakdown device_breakdown(const std::array<double, kActivities>& activity,
                           const kernels::KernelSplit& layers, double iteration_s);

}  // namespace hgsim::sim
