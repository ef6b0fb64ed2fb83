// Chrome trace (the JSON Trace Event Format Perfetto and chrome://tracing open), streamed to
// disk while the engine runs: one process per cluster with two tracks per device (its
// compute stream and its communication), one process for the WAN with a track per WAN
// link, and the pipeline bubbles of every device appended at the end.
//
// Perfetto keeps only slices that nest or are disjoint on their track. Times are integer
// nanoseconds (each start and end rounded once, so slices that touch in the simulation touch
// in the trace and rounding never makes them overlap), and a slice that would overlap
// another on its track (a device sending two transfers at once, two transfers sharing a WAN
// link) goes to the track's next lane: a thread of its own named "<track> (lane k)", k >= 2.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/files.hpp"
#include "sim/engine.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

// The lanes of a trace's tracks, the one rule of the simulator's trace and the live runner's
// (runtime/hgsim_runtime/trace.py, through _hgsim.trace_lanes): each slice goes to the first
// lane of its track whose last slice ends at or before the slice starts, and opens a new lane
// when none does. Given the slices of a track in order of their starts (or, as the simulator
// streams them, of their ends), no two slices of a lane overlap. Lane k >= 1 of track (pid,
// tid) is thread lane_thread(tid, k) of the same process, named lane_name(track name, k).
class TrackLanes {
 public:
  // The lane of slice [start, end) on track (pid, tid); `opened` is set when it is a new one.
  std::size_t place(int pid, int tid, double start, double end, bool& opened);

 private:
  std::map<std::pair<int, int>, std::vector<double>> ends_;  // per track, per lane
};
constexpr int kLaneStride = 1 << 20;
int lane_thread(int tid, std::size_t lane);
std::string lane_name(const std::string& track_name, std::size_t lane);

// `--trace-filter cluster=beijing,stage=0,kind=pp_comm`: keeps the slices of devices in one
// of the named clusters, working for one of the named stages, of one of the named kinds
// (forward, backward, recompute, optimizer, codec, tp_comm, cp_comm, pp_comm, dp_comm,
// bubble); a key not given keeps everything. WAN link tracks keep a transfer when its
// sender is kept.
struct TraceFilter {
  std::set<std::string> clusters;
  std::set<int> stages;
  std::set<std::string> kinds;
  // tracks=wan: only the WAN links' tracks, no device slice and no bubble (what `hgsim run
  // --plot` draws from; the whole trace of a 32-GPU run is 800 MB).
  bool wan_only = false;
  // The filter as the user gave it ("" for run --plot's own tracks=wan): one that keeps
  // nothing of the plan's trace is then refused (the writer throws TraceFilterMatchesNothing).
  std::string given;
  bool empty() const { return clusters.empty() && stages.empty() && kinds.empty() && !wan_only; }
};
// Parses the filter; problems (an unknown key or kind, a stage that is not a number) go to
// `diags` at `option`.
TraceFilter parse_trace_filter(const std::string& text, const std::string& option,
                               core::Diagnostics& diags);
// What parsing cannot know: every cluster named is one of the scenario's, every stage one of
// the plan's, and some named stage runs in a named cluster (a filter that matches nothing
// would write an empty trace, silently). Kinds and tracks=wan are checked against the
// simulation's graph when the trace is opened (ChromeTraceWriter).

void check_trace_filter(const TraceFilter& filter, const core::Scenario& s, const core::Plan& plan,
                        const std::string& option, core::Diagnostics& diags);

// A user's filter that keeps no slice of the graph's trace (kind=codec where nothing is
// compressed, tracks=wan with a stage that sends nothing over the WAN).
struct TraceFilterMatchesNothing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ChromeTraceWriter final : public CompletionSink {
 public:
  // `stages`: the stage each device works for. Throws std::runtime_error (core::WriteError)
  // when `path` cannot be written, TraceFilterMatchesNothing (before writing anything) when
  // a filter the user gave keeps nothing of `graph`.
  ChromeTraceWriter(const std::string& path, const Graph& graph, const Platform& platform,
                    std::vector<int> stages, TraceFilter filter = {});
  void completed(NodeId id, double start_s, double end_s) override;
  // Appends bubbles (per device: [start, end) gaps) and closes the file.
  void finish(const std::vector<std::vector<std::pair<double, double>>>& bubbles);
  std::size_t events() const { return events_; }

 private:
  // A slice on a track (pid, base tid): placed on the first lane free at its start.
  void slice(const std::string& name, const std::string& category, int pid, int tid,
             long long start_ns, long long end_ns, const std::string& args_json);
  void write(const std::string& name, const std::string& category, int pid, int tid,
             long long start_ns, long long end_ns, const std::string& args_json);
  void meta(const char* what, int pid, int tid, const std::string& name);
  bool kept(int device, const std::string& kind) const;
  // Whether node `n` leaves a slice in the trace (if it takes any time).
  bool writes(const GraphNode& n) const;
  core::AtomicFile file_;  // renamed to the trace's name when finish() completes
  std::ostream& out_;
  const Graph& graph_;
  const Platform& platform_;
  std::vector<int> stages_;
  TraceFilter filter_;
  std::vector<int> wan_track_;  // link -> track in the WAN process, -1 if not a WAN link
  std::map<std::pair<int, int>, std::string> track_names_;           // (pid, tid) -> name
  TrackLanes lanes_;
  std::size_t events_ = 0;
  bool first_ = true;
};

}  // namespace hgsim::sim
