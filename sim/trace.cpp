#include "sim/trace.hpp"

#include <cstdio>
#include <stdexcept>

#include "core/document.hpp"

namespace hgsim::sim {

namespace {

std::string quoted(const std::string& text) {
  return core::Json(text).dump();
}

// Microseconds with nanosecond resolution: what the trace format counts in.
std::string micros(double seconds) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.3f", seconds * 1e6);
  return buffer;
}

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(const std::string& path, const Graph& graph,
                                     const Platform& platform)
    : file_(path), out_(file_.stream()), graph_(graph), platform_(platform) {
  out_ << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  auto meta = [&](const char* what, int pid, int tid, const std::string& name) {
    out_ << (first_ ? "" : ",\n") << "{\"ph\": \"M\", \"name\": \"" << what
         << "\", \"pid\": " << pid << ", \"tid\": " << tid
         << ", \"args\": {\"name\": " << quoted(name) << "}}";
    first_ = false;
  };
  for (std::size_t c = 0; c < platform.clusters.size(); ++c)
    meta("process_name", static_cast<int>(c), 0, "cluster " + platform.clusters[c].spec->name);
  for (std::size_t d = 0; d < platform.devices.size(); ++d) {
    const Device& dev = platform.devices[d];
    meta("thread_name", dev.cluster, static_cast<int>(2 * d), dev.name + " compute");
    meta("thread_name", dev.cluster, static_cast<int>(2 * d + 1), dev.name + " comm");
  }
  const int wan_pid = static_cast<int>(platform.clusters.size());
  meta("process_name", wan_pid, 0, "WAN");
  wan_track_.assign(platform.links.size(), -1);
  int track = 0;
  for (std::size_t l = 0; l < platform.links.size(); ++l)
    if (platform.links[l].kind == LinkKind::wan) {
      wan_track_[l] = track;
      meta("thread_name", wan_pid, track++, platform.links[l].name);
    }
}

void ChromeTraceWriter::event(const std::string& name, const std::string& category, int pid,
                              int tid, double start_s, double end_s, const std::string& args_json) {
  out_ << (first_ ? "" : ",\n") << "{\"ph\": \"X\", \"name\": " << quoted(name) << ", \"cat\": \""
       << category << "\", \"pid\": " << pid << ", \"tid\": " << tid
       << ", \"ts\": " << micros(start_s) << ", \"dur\": " << micros(end_s - start_s);
  if (!args_json.empty()) out_ << ", \"args\": " << args_json;
  out_ << "}";
  first_ = false;
  ++events_;
}

void ChromeTraceWriter::completed(NodeId id, double start_s, double end_s) {
  const GraphNode& n = graph_.node(id);
  if (n.op == Op::join || end_s <= start_s) return;
  std::string name = graph_.label_text(n.label);
  if (n.micro_batch >= 0) name += " mb " + std::to_string(n.micro_batch);
  const std::string category = to_string(n.work);
  const Device& dev = platform_.devices[n.device];
  if (n.op == Op::compute) {
    event(name, category, dev.cluster, 2 * n.device, start_s, end_s, "");
    return;
  }
  if (n.op == Op::delay) {
    event(name, category, dev.cluster, 2 * n.device + 1, start_s, end_s, "{\"closed_form\": true}");
    return;
  }
  const std::string args = "{\"bytes\": " + core::shortest_decimal(n.amount) +
                           ", \"to\": " + quoted(platform_.devices[n.peer].name) + "}";
  event(name, category, dev.cluster, 2 * n.device + 1, start_s, end_s, args);
  if (!platform_.crosses_wan(n.device, n.peer)) return;
  const int wan_pid = static_cast<int>(platform_.clusters.size());
  for (const Hop& h : platform_.route(n.device, n.peer))
    if (wan_track_[h.link] >= 0)
      event(name, category, wan_pid, wan_track_[h.link], start_s, end_s, args);
}

void ChromeTraceWriter::finish(const std::vector<std::vector<std::pair<double, double>>>& bubbles) {
  for (std::size_t d = 0; d < bubbles.size(); ++d)
    for (const auto& [start, end] : bubbles[d])
      event("bubble", "bubble", platform_.devices[d].cluster, static_cast<int>(2 * d), start, end,
            "");
  out_ << "\n]}\n";
  file_.commit();
}

}  // namespace hgsim::sim
