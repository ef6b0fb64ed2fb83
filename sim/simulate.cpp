#include "sim/simulate.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "kernels/gpu_catalog.hpp"
#include "models/transformer.hpp"
#include "sim/engine.hpp"
#include "sim/trace.hpp"
#include "sim/workload.hpp"

namespace hgsim::sim {

namespace {

using Interval = std::pair<double, double>;

// Length of the union of intervals (sorted in place).
double union_length(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end());
  double total = 0, start = 0, end = -1;
  for (const auto& [a, b] : v) {
    if (a > end) {
      if (end > start) total += end - start;
      start = a;
      end = b;
    } else {
      end = std::max(end, b);
    }
  }
  if (end > start) total += end - start;
  return total;
}

// Gaps of [lo, hi) not covered by the (sorted, merged on the fly) intervals.
std::vector<Interval> gaps(std::vector<Interval> v, double lo, double hi) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  double at = lo;
  for (const auto& [a, b] : v) {
    if (a > at) out.emplace_back(at, std::min(a, hi));
    at = std::max(at, b);
    if (at >= hi) break;
  }
  if (at < hi) out.emplace_back(at, hi);
  return out;
}

core::Json diagnostics_json(const core::Diagnostics& diags) {
  core::Json out = core::Json::array();
  for (const auto& d : diags.all())
    out.push_back({{"severity", d.severity == core::Severity::error ? "error" : "warning"},
                   {"file", d.where.file},
                   {"line", d.where.line},
                   {"column", d.where.column},
                   {"key_path", d.key_path},
                   {"message", d.message},
                   {"hint", d.hint}});
  return out;
}

void replay_diagnostics(const core::Json& list, core::Diagnostics& diags) {
  for (const auto& d : list) {
    core::SourceLocation where{d.value("file", ""), d.value("line", 0), d.value("column", 0)};
    if (d.value("severity", "error") == "error")
      diags.error(where, d.value("key_path", ""), d.value("message", ""), d.value("hint", ""));
    else
      diags.warning(where, d.value("key_path", ""), d.value("message", ""), d.value("hint", ""));
  }
}

std::vector<const kernels::GpuSpec*> cluster_gpus(const core::Scenario& s) {
  std::vector<const kernels::GpuSpec*> gpus;
  for (const auto& c : s.clusters) {
    const auto* gpu = kernels::find_gpu(c.gpu);
    if (!gpu) throw std::invalid_argument("unknown GPU " + c.gpu);
    gpus.push_back(gpu);
  }
  return gpus;
}

core::Fidelity chosen_fidelity(const ResolvedPlan& r, const SimulationOptions& options) {
  core::Fidelity f = options.fidelity_from_cli ? options.fidelity : r.scenario->simulation.fidelity;
  if (f != core::Fidelity::automatic) return f;
  return automatic_fidelity(r.gpus_used);
}

// The most flows at once, from (time, +flows at a start / -flows at an end) events; an end
// and a start at one instant do not overlap.
int most_at_once(std::vector<std::pair<double, int>> events) {
  std::sort(events.begin(), events.end());
  int now = 0, most = 0;
  for (const auto& [t, change] : events) {
    now += change;
    most = std::max(most, now);
  }
  return most;
}

// Per link: bytes moved and time busy; per WAN link also the most one TCP flow can carry
// (the best route crossing it: window / round-trip time) and the most flows at once.
std::vector<LinkResult> link_results(
    const Platform& p, const std::vector<double>& bytes, std::vector<std::vector<Interval>>& busy,
    const std::vector<std::vector<std::pair<double, int>>>& flows) {
  std::vector<double> cap(p.links.size(), 0);
  for (const auto& from : p.wan_routes)
    for (const auto& route : from) {
      if (route.empty()) continue;
      const double one_flow = p.links[route.back().link].bytes_per_s;
      for (const Hop& h : route)
        if (p.links[h.link].kind == LinkKind::wan) cap[h.link] = std::max(cap[h.link], one_flow);
    }
  std::vector<LinkResult> out;
  for (std::size_t l = 0; l < p.links.size(); ++l) {
    const Link& link = p.links[l];
    if (link.kind == LinkKind::tcp_window || link.kind == LinkKind::fabric) continue;
    LinkResult result;
    result.name = link.name;
    result.kind = link.kind == LinkKind::uplink ? "nic" : to_string(link.kind);
    result.bytes = bytes[l];
    result.busy_s = union_length(busy[l]);
    result.bytes_per_s = link.bytes_per_s;
    if (link.kind == LinkKind::wan) {
      result.flow_cap_bytes_per_s = cap[l];
      result.max_flows = most_at_once(flows[l]);
    }
    out.push_back(result);
  }
  return out;
}

// A warning for every WAN link that carried traffic but whose flows, each capped by the TCP
// window, could not fill it even all at once: the link, the cap, the flows and the window
// that would fill it.
std::vector<std::string> window_warnings(const std::vector<LinkResult>& links,
                                         const core::Scenario& s) {
  std::vector<std::string> out;
  for (const LinkResult& l : links) {
    if (l.kind != "wan" || l.bytes <= 0 || !l.flow_cap_bytes_per_s || l.max_flows < 1) continue;
    const double cap = *l.flow_cap_bytes_per_s;
    if (l.max_flows * cap >= l.bytes_per_s) continue;
    // The window this link's flows have, as the scenario sets it.
    double window = s.simulation.tcp_window.value();
    std::string setting = "simulation.tcp_window";
    for (std::size_t k = 0; k < s.wan.size(); ++k) {
      const auto& w = s.wan[k];
      if (l.name != "wan:" + w.from + "->" + w.to && l.name != "wan:" + w.to + "->" + w.from)
        continue;
      if (w.tcp_window) window = w.tcp_window->value();
      setting = "wan[" + std::to_string(k) + "].tcp_window";
    }
    const double needed = window * l.bytes_per_s / (cap * l.max_flows);
    out.push_back(
        "WAN link " + l.name + " (" + core::format_bandwidth(core::BytesPerSecond(l.bytes_per_s)) +
        ") is not filled: at most " + std::to_string(l.max_flows) + " flow" +
        (l.max_flows == 1 ? "" : "s") + " at once, each capped by the TCP window at " +
        core::format_bandwidth(core::BytesPerSecond(cap)) + " (window / round trip); " + setting +
        ": " + core::format_size(core::Bytes(std::ceil(needed))) + " would fill it");
  }
  return out;
}

// The whole simulation, inside the child process.
core::Json run_child(const SimulationInput& in, const ResolvedPlan& r,
                     const SimulationOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  core::Diagnostics diags;
  const core::Scenario& s = *r.scenario;
  const core::Plan& plan = r.plan;
  const auto fidelity = chosen_fidelity(r, options);

  WorkloadInput w;
  w.plan = &r;
  w.compute = in.compute;
  w.gpus = cluster_gpus(s);
  w.folded = fidelity == core::Fidelity::folded;
  Workload work = build_workload(w, diags);
  if (!diags.has_errors()) work.graph.check(work.platform.device_count(), diags);
  if (diags.has_errors()) return {{"diagnostics", diagnostics_json(diags)}};

  std::vector<std::string> device_names;
  for (const auto& d : work.platform.devices) device_names.push_back(d.name);
  if (!options.platform_path.empty()) {
    std::ofstream out(options.platform_path);
    if (!out) throw std::runtime_error("cannot write the platform to " + options.platform_path);
    out << platform_xml(work.platform);
  }
  if (!options.graph_path.empty()) work.graph.write_json(options.graph_path, device_names);
  const double graph_bytes = static_cast<double>(work.graph.memory_bytes());

  std::unique_ptr<ChromeTraceWriter> trace;
  if (!options.trace_path.empty()) {
    std::vector<int> stages;
    for (const DeviceRole& role : work.roles) stages.push_back(role.stage);
    trace = std::make_unique<ChromeTraceWriter>(options.trace_path, work.graph, work.platform,
                                                std::move(stages), options.trace_filter);
  }
  const NodeTimes times = execute(work.graph, work.platform, trace.get());
  const double T = times.makespan;

  // ---- per device ----
  const auto& graph = work.graph;
  const int devices = work.platform.device_count();
  std::vector<std::vector<Interval>> compute(devices), comm(devices);
  std::vector<double> pipe_start(devices, T), pipe_end(devices, 0);
  std::vector<double> link_bytes(work.platform.links.size(), 0);
  std::vector<std::vector<Interval>> link_busy(work.platform.links.size());
  std::vector<std::vector<std::pair<double, int>>> link_flows(work.platform.links.size());
  double codec_seconds = 0;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const GraphNode& n = graph.node(id);
    const double a = times.start[id], b = times.end[id];
    if (n.op == Op::compute) {
      compute[n.device].emplace_back(a, b);
      if (n.work == Work::codec) codec_seconds += b - a;
      if (n.work == Work::forward || n.work == Work::backward || n.work == Work::recompute) {
        pipe_start[n.device] = std::min(pipe_start[n.device], a);
        pipe_end[n.device] = std::max(pipe_end[n.device], b);
      }
    } else if (n.op == Op::delay) {
      comm[n.device].emplace_back(a, b);
    } else if (n.op == Op::transfer) {
      comm[n.device].emplace_back(a, b);
      comm[n.peer].emplace_back(a, b);
      for (const Hop& h : work.platform.route(n.device, n.peer)) {
        link_bytes[h.link] += n.amount;
        link_busy[h.link].emplace_back(a, b);
        if (work.platform.links[h.link].kind == LinkKind::wan) {
          link_flows[h.link].emplace_back(a, n.flows);
          link_flows[h.link].emplace_back(b, -n.flows);
        }
      }
    }
  }
  std::vector<std::vector<Interval>> bubbles(devices);
  std::vector<DeviceResult> device_list;
  for (int d = 0; d < devices; ++d) {
    const Device& dev = work.platform.devices[d];
    const DeviceRole& role = work.roles[d];
    auto busy = compute[d];
    busy.insert(busy.end(), comm[d].begin(), comm[d].end());
    const double compute_s = union_length(compute[d]);
    const double busy_s = union_length(busy);
    double bubble_s = 0;
    if (pipe_end[d] > pipe_start[d]) {
      bubbles[d] = gaps(busy, pipe_start[d], pipe_end[d]);
      for (const auto& [a, b] : bubbles[d]) bubble_s += b - a;
    }
    const auto& cluster = *work.platform.clusters[dev.cluster].spec;
    const auto& gpu = *work.platform.clusters[dev.cluster].gpu;
    const auto memory =
        models::stage_memory(*in.model, r.choices.training, plan, role.pipeline, role.stage);
    const double capacity = gpu.memory.value();
    for (int position : work.gpus[d])
      device_list.push_back({gpu_name(cluster, position), cluster.name, gpu.name, role.pipeline,
                             role.stage, compute_s, busy_s - compute_s, bubble_s,
                             std::max(0.0, T - busy_s - bubble_s), memory.total.value(), capacity,
                             memory.total.value() <= capacity});
  }
  if (trace) trace->finish(bubbles);

  // ---- links, and the WAN links the plan's flows cannot fill ----
  std::vector<LinkResult> links = link_results(work.platform, link_bytes, link_busy, link_flows);
  Results result;
  result.warnings = window_warnings(links, s);
  result.links = std::move(links);

  // ---- totals ----
  const double sequences = plan.global_batch();
  const double tokens = sequences * s.training.seq_len;
  result.model_flops =
      models::training_flops(*in.model, sequences, s.training.seq_len, core::Recompute::none)
          .value();
  result.hardware_flops =
      models::training_flops(*in.model, sequences, s.training.seq_len, r.choices.recompute).value();
  double peak_used = 0, peak_available = 0;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) {
      const auto* gpu = kernels::find_gpu(s.find_cluster(st.cluster)->gpu);
      peak_used +=
          p.replicas * st.tp * st.dp * kernels::math_rate(*gpu, r.choices.precision)->rate.value();
      result.compute_provenance[gpu->name] = in.compute->provenance(*gpu);
    }
  for (std::size_t c = 0; c < s.clusters.size(); ++c)
    peak_available += s.clusters[c].gpu_count() *
                      kernels::math_rate(*w.gpus[c], r.choices.precision)->rate.value();

  result.scenario = s.name;
  result.plan = plan;
  result.iteration_time_s = T;
  result.tokens_per_s = tokens / T;
  result.gpus_used = r.gpus_used;
  result.gpus_available = r.gpus_available;
  result.model_tflops_per_gpu = result.model_flops / T / r.gpus_used / 1e12;
  result.mfu = result.model_flops / T / peak_used;
  result.mfu_available = result.model_flops / T / peak_available;
  result.devices = std::move(device_list);
  auto codec = [&](const compress::CodecSpec& spec, const CodecStats& stats) {
    return CodecResult{compress::describe(spec), stats.wan_raw_bytes, stats.wan_wire_bytes};
  };
  result.wan_activations = codec(r.choices.codecs.wan_activations, work.activation_codec);
  result.wan_gradients = codec(r.choices.codecs.wan_gradients, work.gradient_codec);
  result.codec_time_s = codec_seconds;
  const bool roofline =
      std::all_of(result.compute_provenance.begin(), result.compute_provenance.end(),
                  [](const auto& kv) { return kv.second == "estimated"; });
  result.compute_model =
      roofline ? "estimated: roofline on datasheet peaks (kernels/compute_model.hpp: matmuls "
                 "at 70% of peak FLOP/s, element-wise traffic at 80% of memory bandwidth)"
               : "measured profiles where named, roofline transfer elsewhere";
  result.codec_provenance =
      "estimated: compress::code_transfer (encoded sizes; codec time on datasheet memory "
      "bandwidth)";
  result.memory_provenance =
      "analytic: models::stage_memory (weights, gradients, optimizer, activations)";
  result.network_provenance = std::string("SimGrid ") + "3.32, " +
                              (s.simulation.network_model == core::NetworkModel::lv08
                                   ? "LV08 model (latency x 13.01, bandwidth x 0.97)"
                                   : "CM02 flow model (latency and bandwidth as written)") +
                              ", TCP window " + core::format_size(s.simulation.tcp_window) +
                              " per WAN flow unless the link sets one";
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  result.simulator = {core::to_string(fidelity), core::to_string(s.simulation.network_model),
                      static_cast<double>(graph.size()), static_cast<double>(graph.edge_count()),
                      static_cast<double>(times.activities)};
  core::Json out{{"result", to_json(result)}};
  out["stats"] = {
      {"wall_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count()},
      {"peak_rss_bytes", static_cast<double>(usage.ru_maxrss) * 1024},
      {"graph_nodes", graph.size()},
      {"graph_bytes", graph_bytes},
      {"activities", times.activities}};
  if (!diags.empty()) out["diagnostics"] = diagnostics_json(diags);
  return out;
}

bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) return false;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

// Refuses a plan that does not fit, naming the stage, what it needs and what would help.
void check_memory(const SimulationInput& in, const ResolvedPlan& r, core::Diagnostics& diags) {
  const auto& s = *r.scenario;
  const auto& plan = r.plan;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    for (std::size_t st = 0; st < plan.pipelines[i].stages.size(); ++st) {
      const auto& stage = plan.pipelines[i].stages[st];
      const auto* gpu = kernels::find_gpu(s.find_cluster(stage.cluster)->gpu);
      const auto m = models::stage_memory(*in.model, r.choices.training, plan, i, st);
      if (m.total.value() <= gpu->memory.value()) continue;
      const std::string path = (in.plan_path.empty() ? "" : in.plan_path + ".") + "pipelines[" +
                               std::to_string(i) + "].stages[" + std::to_string(st) + "]";
      diags.error(s.where(path), path,
                  "does not fit in memory: each GPU needs " + core::human_size(m.total) +
                      " (weights " + core::human_size(m.weights) + ", gradients " +
                      core::human_size(m.gradients) + ", optimizer " +
                      core::human_size(m.optimizer) + ", activations " +
                      core::human_size(m.activations) + "), a " + gpu->name + " has " +
                      core::human_size(gpu->memory),
                  "give the stage fewer layers or more tp, turn on recompute, or pass --allow-oom "
                  "to simulate it anyway");
    }
}

}  // namespace

core::Json run_isolated(const std::function<core::Json()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("cannot start the simulator: pipe() failed");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("cannot start the simulator: fork() failed");
  if (pid == 0) {
    ::close(fds[0]);
    core::Json out;
    try {
      out = {{"value", body()}};
    } catch (const std::exception& e) {
      out = {{"failure", e.what()}};
    }
    write_all(fds[1], out.dump());
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty()) {
    const std::string why = WIFSIGNALED(status)
                                ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                : "exited with status " + std::to_string(WEXITSTATUS(status));
    throw std::runtime_error("the simulator process " + why +
                             " before giving a result (a bug in hgsim: please report it)");
  }
  core::Json out = core::Json::parse(text);
  if (out.contains("failure")) throw std::runtime_error(out["failure"].get<std::string>());
  return out["value"];
}

std::optional<Results> simulate(const SimulationInput& in, const SimulationOptions& options,
                                core::Diagnostics& diags, SimulationStats* stats) {
  // The plan's own choices (recompute, codecs) applied, its GPUs placed: the one model of
  // the plan that the planner and the live runner read too.
  const auto resolved =
      resolve_plan(*in.scenario, *in.model, in.compression, *in.plan, in.plan_path, diags);
  if (!resolved) return std::nullopt;
  if (!options.allow_oom) check_memory(in, *resolved, diags);
  if (diags.has_errors()) return std::nullopt;
  core::Json out;
  try {
    out = run_isolated([&] { return run_child(in, *resolved, options); });
  } catch (const std::exception& e) {
    diags.error({}, "", std::string("simulation failed: ") + e.what());
    return std::nullopt;
  }
  if (out.contains("diagnostics")) replay_diagnostics(out["diagnostics"], diags);
  if (!out.contains("result")) return std::nullopt;
  if (stats) {
    const auto& st = out["stats"];
    stats->wall_s = st["wall_s"];
    stats->peak_rss_bytes = st["peak_rss_bytes"];
    stats->graph_nodes = st["graph_nodes"];
    stats->activities = st["activities"];
    stats->graph_bytes = st["graph_bytes"];
  }
  return results_from_json(out["result"]);
}

}  // namespace hgsim::sim
