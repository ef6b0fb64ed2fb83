// Chrome trace (the JSON Trace Event Format Perfetto and chrome://tracing open), streamed to
// disk while the engine runs: one process per cluster with two tracks per device (its
// compute stream and its communication), one process for the WAN with a track per WAN
// link, and the pipeline bubbles of every device appended at the end.
#pragma once

#include <string>
#include <vector>

#include "core/files.hpp"
#include "sim/engine.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

class ChromeTraceWriter final : public CompletionSink {
 public:
  // Throws std::runtime_error (core::WriteError) when `path` cannot be written.
  ChromeTraceWriter(const std::string& path, const Graph& graph, const Platform& platform);
  void completed(NodeId id, double start_s, double end_s) override;
  // Appends bubbles (per device: [start, end) gaps) and closes the file.
  void finish(const std::vector<std::vector<std::pair<double, double>>>& bubbles);
  std::size_t events() const { return events_; }

 private:
  void event(const std::string& name, const std::string& category, int pid, int tid, double start_s,
             double end_s, const std::string& args_json);
  core::AtomicFile file_;  // renamed to the trace's name when finish() completes
  std::ostream& out_;
  const Graph& graph_;
  const Platform& platform_;
  std::vector<int> wan_track_;  // link -> track in the WAN process, -1 if not a WAN link
  std::size_t events_ = 0;
  bool first_ = true;
};

}  // namespace hgsim::sim
