// The engine: plays an execution graph on a platform with SimGrid and returns when every
// node ran.
//
// It launches activities lazily (DESIGN.md, measured): it keeps its own count of
// unfinished predecessors per node and starts a node's SimGrid activity from the
// completion of its last predecessor, holding the activity only while it runs. Building
// the whole DAG in SimGrid first is quadratic; this is linear.
//
// SimGrid allows one engine per process: execute() may be called once per process. Use
// sim::simulate() (simulate.hpp), which runs it in a child process.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

// Receives every node as it completes, in completion order (for streamed traces).
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void completed(NodeId id, double start_s, double end_s) = 0;
};

struct NodeTimes {
  std::vector<double> start;  // seconds since the iteration began
  std::vector<double> end;
  double makespan = 0;
  // Activities played: computations, delays and transfers with a cost (a multi-flow transfer
  // counts each flow; delays and computations alone on their device run as kernel timers).
  std::size_t activities = 0;
};

// The SimGrid library that plays the simulations, as its sg_version_get() says (not the
// headers the build saw): {3, 32, 0} on Debian 12, {4, 0, 0} on Debian 13.
struct SimgridVersion {
  int major = 0, minor = 0, patch = 0;
  std::string text() const;  // "3.32.0"
};
SimgridVersion simgrid_version();

// Plays `graph` (finished) on `platform`. Throws std::logic_error when called twice in
// one process, std::runtime_error when nodes are left unfinished (a cycle).
NodeTimes execute(const Graph& graph, const Platform& platform, CompletionSink* sink = nullptr);

// Plays graphs one after another on one simulated clock (links, bandwidth traces and
// their phase carry over): graphs[order[0]], then graphs[order[1]] once every node of the
// one before has completed, and so on. The first starts `start_time_s` into the bandwidth
// traces. `on_phase(k, times)` receives each phase's times, in seconds since that phase
// began, as soon as it ends (they are not kept). `first_phase_sink` sees the first phase.
// Same rules as execute(): once per process.
void execute_phases(const std::vector<const Graph*>& graphs, const std::vector<int>& order,
                    const Platform& platform, double start_time_s,
                    const std::function<void(std::size_t, const NodeTimes&)>& on_phase,
                    CompletionSink* first_phase_sink = nullptr);
// The same, the graph of phase k being next(k), asked once phase k - 1 has been handed to
// on_phase (so that what a phase showed can choose the next one); nullptr ends the play.
using NextPhase = std::function<const Graph*(std::size_t)>;
void execute_phases(const NextPhase& next, const Platform& platform, double start_time_s,
                    const std::function<void(std::size_t, const NodeTimes&)>& on_phase,
                    CompletionSink* first_phase_sink = nullptr);

// SimGrid 3.32's LV08 network model (network/model: LV08, its default), calibrated on TCP:
// every flow's latency is multiplied by this and its bandwidth by that (SimGrid's
// network/latency-factor and network/bandwidth-factor defaults for LV08). The engine leaves
// them at SimGrid's values; these name them for the results' provenance.
constexpr double lv08_latency_factor = 13.01;
constexpr double lv08_bandwidth_factor = 0.97;

}  // namespace hgsim::sim
