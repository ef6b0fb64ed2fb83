#include "sim/trace.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include "core/document.hpp"

namespace hgsim::sim {

namespace {


std::string quoted(const std::string& text) {
  return core::Json(text).dump();
}

long long nanos(double seconds) {
  return std::llround(seconds * 1e9);
}

// Microseconds with exactly three decimals: integer nanoseconds in the unit the trace
// format counts in.
std::string micros(long long ns) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%lld.%03lld", ns / 1000, ns % 1000);
  return buffer;
}

const std::set<std::string>& kinds() {
  static const std::set<std::string> all{"forward", "backward", "recompute", "optimizer", "codec",
                                         "tp_comm", "cp_comm",  "pp_comm",   "dp_comm",   "bubble"};
  return all;
}

}  // namespace

TraceFilter parse_trace_filter(const std::string& text, const std::string& option,
                               core::Diagnostics& diags) {
  TraceFilter filter;
  filter.given = core::excerpt(text);
  std::size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const std::size_t comma = text.find(',', at);
    const std::string item =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const std::string hint = "e.g. --trace-filter cluster=beijing,stage=0,kind=pp_comm";
    // Values are quoted short and escaped: they come from the command line.
    const std::string shown_item = core::excerpt(item), shown = core::excerpt(value);
    if (eq == std::string::npos || value.empty()) {
      diags.error({}, option,
                  "'" + shown_item + "' is not KEY=VALUE (cluster, stage, kind or tracks)", hint);
    } else if (key == "cluster") {
      filter.clusters.insert(value);  // checked against the scenario: check_trace_filter
    } else if (key == "stage") {
      char* end = nullptr;
      errno = 0;
      const long stage = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || stage < 0 || errno == ERANGE || stage > 1'000'000)
        diags.error({}, option, "stage=" + shown + ": expected a stage number (0, 1, ...)", hint);
      else
        filter.stages.insert(static_cast<int>(stage));
    } else if (key == "tracks") {
      if (value != "wan")
        diags.error({}, option, "tracks=" + shown + ": only tracks=wan (the WAN links' tracks)",
                    hint);
      else
        filter.wan_only = true;
    } else if (key == "kind") {
      if (!kinds().count(value)) {
        std::string list;
        for (const auto& k : kinds()) list += (list.empty() ? "" : ", ") + k;
        diags.error({}, option, "kind=" + shown + ": no such kind", "one of " + list);
      } else {
        filter.kinds.insert(value);
      }
    } else {
      diags.error({}, option, "unknown key '" + core::excerpt(key) + "'",
                  "cluster, stage, kind or tracks; " + hint);
    }
  }
  return filter;
}

void check_trace_filter(const TraceFilter& filter, const core::Scenario& s, const core::Plan& plan,
                        const std::string& option, core::Diagnostics& diags) {
  std::vector<std::string> names;
  for (const auto& c : s.clusters) names.push_back(c.name);
  for (const std::string& c : filter.clusters)
    if (!s.find_cluster(c))
      diags.error({}, option, "cluster=" + core::excerpt(c) + ": no such cluster",
                  core::did_you_mean(c, names));
  std::size_t stages = 0;
  for (const auto& p : plan.pipelines) stages = std::max(stages, p.stages.size());
  bool each_known = true;
  for (int stage : filter.stages)
    if (static_cast<std::size_t>(stage) >= stages) {
      each_known = false;
      diags.error({}, option,
                  "stage=" + std::to_string(stage) + ": the plan has " + std::to_string(stages) +
                      " stage" + (stages == 1 ? "" : "s") + " (0 to " +
                      std::to_string(stages == 0 ? 0 : stages - 1) + ")");
    }
  if (!each_known || filter.clusters.empty() || filter.stages.empty()) return;
  // Each key matches something alone; together, some named stage must run in a named cluster.
  std::map<std::string, std::set<int>> stages_in;  // cluster -> the stages it runs
  for (const auto& p : plan.pipelines)
    for (std::size_t si = 0; si < p.stages.size(); ++si)
      stages_in[p.stages[si].cluster].insert(static_cast<int>(si));
  std::string runs;
  for (const std::string& c : filter.clusters) {
    if (!s.find_cluster(c)) return;  // reported above
    for (int stage : stages_in[c])
      if (filter.stages.count(stage)) return;
    std::string list;
    for (int stage : stages_in[c]) list += (list.empty() ? "" : ", ") + std::to_string(stage);
    runs += (runs.empty() ? "" : "; ") + ("cluster " + core::excerpt(c) + " runs ") +
            (list.empty() ? std::string("no stage") : "stage " + list);
  }
  diags.error({}, option,
              filter.given +
                  ": no stage named runs in a cluster named, so the trace would be "
                  "empty (" +
                  runs + ")",
              "name a stage that runs in the cluster, or drop one of the two keys");
}

ChromeTraceWriter::ChromeTraceWriter(const std::string& path, const Graph& graph,
                                     const Platform& platform, std::vector<int> stages,
                                     TraceFilter filter)
    : file_(path),
      out_(file_.stream()),
      graph_(graph),
      platform_(platform),
      stages_(std::move(stages)),
      filter_(std::move(filter)) {
  out_ << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
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
  if (filter_.given.empty()) return;
  // Bubbles are written at the end (finish) for every device the filter keeps.
  if (!filter_.wan_only)
    for (std::size_t d = 0; d < platform.devices.size(); ++d)
      if (kept(static_cast<int>(d), "bubble")) return;
  for (std::size_t id = 0; id < graph.size(); ++id)
    if (writes(graph.node(static_cast<NodeId>(id)))) return;
  throw TraceFilterMatchesNothing(
      "--trace-filter " + filter_.given +
      ": the plan's trace has no slice these keys keep together (" +
      (filter_.wan_only ? "tracks=wan keeps only transfers that cross a WAN link; "
                        : std::string()) +
      (filter_.kinds.count("codec") ? "kind=codec needs a WAN transfer the plan compresses; "
                                    : std::string()) +
      "no trace was written)");
}

bool ChromeTraceWriter::writes(const GraphNode& n) const {
  if (n.op == Op::join || n.work == Work::pacing) return false;
  if (!kept(n.device, to_string(n.work))) return false;
  if (!filter_.wan_only) return true;
  return n.op != Op::compute && n.op != Op::delay && platform_.crosses_wan(n.device, n.peer);
}

void ChromeTraceWriter::meta(const char* what, int pid, int tid, const std::string& name) {
  out_ << (first_ ? "" : ",\n") << "{\"ph\": \"M\", \"name\": \"" << what << "\", \"pid\": " << pid
       << ", \"tid\": " << tid << ", \"args\": {\"name\": " << quoted(name) << "}}";
  first_ = false;
  if (std::string(what) == "thread_name") track_names_[{pid, tid}] = name;
}

bool ChromeTraceWriter::kept(int device, const std::string& kind) const {
  if (filter_.empty()) return true;
  const Device& dev = platform_.devices[device];
  if (!filter_.clusters.empty() &&
      !filter_.clusters.count(platform_.clusters[dev.cluster].spec->name))
    return false;
  if (!filter_.stages.empty() && !filter_.stages.count(stages_[device])) return false;
  return filter_.kinds.empty() || filter_.kinds.count(kind);
}

void ChromeTraceWriter::write(const std::string& name, const std::string& category, int pid,
                              int tid, long long start_ns, long long end_ns,
                              const std::string& args_json) {
  out_ << (first_ ? "" : ",\n") << "{\"ph\": \"X\", \"name\": " << quoted(name) << ", \"cat\": \""
       << category << "\", \"pid\": " << pid << ", \"tid\": " << tid
       << ", \"ts\": " << micros(start_ns) << ", \"dur\": " << micros(end_ns - start_ns);
  if (!args_json.empty()) out_ << ", \"args\": " << args_json;
  out_ << "}";
  first_ = false;
  ++events_;
}

void ChromeTraceWriter::slice(const std::string& name, const std::string& category, int pid,
                              int tid, long long start_ns, long long end_ns,
                              const std::string& args_json) {
  // Slices arrive as they complete, so in order of their ends: a slice that starts after
  // the last end on a lane is disjoint from every slice on it. Integer nanoseconds are exact
  // as doubles (below 2^53 ns, 104 days).
  bool opened = false;
  const std::size_t lane = lanes_.place(pid, tid, static_cast<double>(start_ns),
                                        static_cast<double>(end_ns), opened);
  if (opened && lane > 0)
    meta("thread_name", pid, lane_thread(tid, lane), lane_name(track_names_[{pid, tid}], lane));
  write(name, category, pid, lane_thread(tid, lane), start_ns, end_ns, args_json);
}

std::size_t TrackLanes::place(int pid, int tid, double start, double end, bool& opened) {
  auto& ends = ends_[{pid, tid}];
  std::size_t lane = 0;
  while (lane < ends.size() && ends[lane] > start) ++lane;
  opened = lane == ends.size();
  if (opened) ends.push_back(start);
  ends[lane] = end;
  return lane;
}

int lane_thread(int tid, std::size_t lane) {
  return tid + static_cast<int>(lane) * kLaneStride;
}

std::string lane_name(const std::string& track_name, std::size_t lane) {
  return lane == 0 ? track_name : track_name + " (lane " + std::to_string(lane + 1) + ")";
}

void ChromeTraceWriter::completed(NodeId id, double start_s, double end_s) {
  const GraphNode& n = graph_.node(id);
  const long long start = nanos(start_s), end = nanos(end_s);
  if (end <= start || !writes(n)) return;  // the one rule of what the trace keeps
  const std::string category = to_string(n.work);
  std::string name = graph_.label_text(n.label);
  if (n.micro_batch >= 0) name += " mb " + std::to_string(n.micro_batch);
  const Device& dev = platform_.devices[n.device];
  const bool device_slices = !filter_.wan_only;
  if (n.op == Op::compute) {
    slice(name, category, dev.cluster, 2 * n.device, start, end, "");
    return;
  }
  if (n.op == Op::delay) {
    slice(name, category, dev.cluster, 2 * n.device + 1, start, end, "{\"closed_form\": true}");
    return;
  }
  const std::string args = "{\"bytes\": " + core::shortest_decimal(n.amount) +
                           ", \"to\": " + quoted(platform_.devices[n.peer].name) + "}";
  if (device_slices) slice(name, category, dev.cluster, 2 * n.device + 1, start, end, args);
  if (!platform_.crosses_wan(n.device, n.peer)) return;
  const int wan_pid = static_cast<int>(platform_.clusters.size());
  for (const Hop& h : platform_.route(n.device, n.peer))
    if (wan_track_[h.link] >= 0)
      slice(name, category, wan_pid, wan_track_[h.link], start, end, args);
}

void ChromeTraceWriter::finish(const std::vector<std::vector<std::pair<double, double>>>& bubbles) {
  // Bubbles are the gaps between a device's compute and communication: disjoint from every
  // compute slice, so they share the compute track's first lane.
  for (std::size_t d = 0; d < bubbles.size() && !filter_.wan_only; ++d) {
    if (!kept(static_cast<int>(d), "bubble")) continue;
    for (const auto& [start, end] : bubbles[d])
      if (nanos(end) > nanos(start))
        write("bubble", "bubble", platform_.devices[d].cluster, static_cast<int>(2 * d),
              nanos(start), nanos(end), "");
  }
  out_ << "\n]}\n";
  file_.commit();
}

}  // namespace hgsim::sim
