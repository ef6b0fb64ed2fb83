#include "sim/breakdown.hpp"

#include <algorithm>
#include <numeric>

namespace hgsim::sim {

const char* to_string(Part part) {
  switch (part) {
    case Part::gemm:
      return "gemm";
    case Part::attention:
      return "attention";
    case Part::memory:
      return "memory";
    case Part::overhead:
      return "overhead";
    case Part::optimizer:
      return "optimizer";
    case Part::codec:
      return "codec";
    case Part::tp_comm:
      return "tp_comm";
    case Part::cp_comm:
      return "cp_comm";
    case Part::pp_comm:
      return "pp_comm";
    case Part::dp_comm:
      return "dp_comm";
    case Part::bubble:
      break;
  }
  return "bubble";
}

double Breakdown::total() const {
  return std::accumulate(seconds.begin(), seconds.end(), 0.0);
}

bool activity_of(Op op, Work work, Activity& out) {
  if (op == Op::compute) {
    out = work == Work::optimizer ? Activity::optimizer
          : work == Work::codec   ? Activity::codec
                                  : Activity::layers;
    return true;
  }
  if (op != Op::delay && op != Op::transfer) return false;
  switch (work) {
    case Work::tp_comm:
      out = Activity::tp_comm;
      return true;
    case Work::cp_comm:
      out = Activity::cp_comm;
      return true;
    case Work::pp_comm:
      out = Activity::pp_comm;
      return true;
    case Work::dp_comm:
      out = Activity::dp_comm;
      return true;
    default:
      return false;
  }
}

namespace {

bool is_compute(Activity a) {
  return a == Activity::layers || a == Activity::optimizer || a == Activity::codec;
}

}  // namespace

void attribute(std::vector<TimedActivity>& intervals, double weight,
               std::array<double, kActivities>& seconds) {
  struct Event {
    double at;
    int change;  // +1 at a start, -1 at an end
    Activity activity;
  };
  std::vector<Event> events;
  events.reserve(2 * intervals.size());
  for (const TimedActivity& i : intervals) {
    if (!(i.end > i.start)) continue;
    events.push_back({i.start, +1, i.activity});
    events.push_back({i.end, -1, i.activity});
  }
  std::sort(events.begin(), events.end(),
            [](const Event& x, const Event& y) { return x.at < y.at; });
  std::array<int, kActivities> active{};
  int computing = 0, communicating = 0;
  for (std::size_t e = 0; e < events.size();) {
    const double at = events[e].at;
    for (; e < events.size() && events[e].at == at; ++e) {
      active[static_cast<int>(events[e].activity)] += events[e].change;
      (is_compute(events[e].activity) ? computing : communicating) += events[e].change;
    }
    if (e == events.size()) break;
    const double length = weight * (events[e].at - at);
    // Compute hides communication; several activities of the kind in front share alike.
    const int sharing = computing > 0 ? computing : communicating;
    if (sharing == 0) continue;
    for (int a = 0; a < kActivities; ++a)
      if (active[a] > 0 && is_compute(static_cast<Activity>(a)) == (computing > 0))
        seconds[a] += length * active[a] / sharing;
  }
}

Breakdown device_breakdown(const std::array<double, kActivities>& activity,
                           const kernels::KernelSplit& layers, double iteration_s) {
  Breakdown b;
  const double layer_s = activity[static_cast<int>(Activity::layers)];
  const double split = layers.total();
  if (split > 0) {
    const kernels::KernelSplit share = layers.scaled(layer_s / split);
    b[Part::gemm] = share.gemm_s;
    b[Part::attention] = share.attention_s;
    b[Part::memory] = share.memory_s;
    b[Part::overhead] = share.overhead_s;
  } else {
    b[Part::gemm] = layer_s;  // a compute model that prices no kernels (a test's fixed times)
  }
  b[Part::optimizer] = activity[static_cast<int>(Activity::optimizer)];
  b[Part::codec] = activity[static_cast<int>(Activity::codec)];
  b[Part::tp_comm] = activity[static_cast<int>(Activity::tp_comm)];
  b[Part::cp_comm] = activity[static_cast<int>(Activity::cp_comm)];
  b[Part::pp_comm] = activity[static_cast<int>(Activity::pp_comm)];
  b[Part::dp_comm] = activity[static_cast<int>(Activity::dp_comm)];
  b[Part::bubble] = std::max(0.0, iteration_s - b.total());
  return b;
}

}  // namespace hgsim::sim
