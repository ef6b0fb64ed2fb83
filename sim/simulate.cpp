#include "sim/simulate.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "compress/codec_cost.hpp"
#include "core/files.hpp"
#include "core/limits.hpp"
#include "core/process.hpp"
#include "kernels/gpu_catalog.hpp"
#include "models/transformer.hpp"
#include "sim/engine.hpp"
#include "sim/iterations.hpp"
#include "sim/outer_sync.hpp"
#include "sim/trace.hpp"
#include "sim/workload.hpp"

namespace hgsim::sim {

namespace {

std::string gpu_name_at(const core::Cluster& c, int position) {
  return c.name + "/n" + std::to_string(position / c.gpus_per_node) + "/g" +
         std::to_string(position % c.gpus_per_node);
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

int used_gpus(const core::Plan& plan) {
  int n = 0;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) n += p.replicas * st.tp * st.dp;
  return n;
}

core::Fidelity chosen_fidelity(const SimulationInput& in, const SimulationOptions& options) {
  core::Fidelity f =
      options.fidelity_from_cli ? options.fidelity : in.scenario->simulation.fidelity;
  if (f != core::Fidelity::automatic) return f;
  return used_gpus(*in.plan) <= full_fidelity_max_gpus ? core::Fidelity::full
                                                       : core::Fidelity::folded;
}

// Peak memory of one GPU of a stage: the memory model's, plus DiLoCo's parameter snapshot
// and outer momentum when the plan has outer sync.
models::StageMemory plan_stage_memory(const SimulationInput& in, int pipeline, int stage,
                                      core::Bytes* outer_state) {
  auto m = models::stage_memory(*in.model, in.scenario->training, *in.plan, pipeline, stage);
  core::Bytes extra(0);
  if (in.plan->outer_sync.enabled())
    extra = outer_state_bytes(
        models::stage_parameters(*in.model, models::stage_spec(*in.plan, pipeline, stage)));
  m.total = core::Bytes(m.total.value() + extra.value());
  if (outer_state) *outer_state = extra;
  return m;
}

double stage_memory_bytes(const SimulationInput& in, int pipeline, int stage) {
  return plan_stage_memory(in, pipeline, stage, nullptr).total.value();
}

// The whole simulation, inside the child process.
core::Json run_child(const SimulationInput& in, const SimulationOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  core::Diagnostics diags;
  const core::Scenario& s = *in.scenario;
  const core::Plan& plan = *in.plan;
  const auto fidelity = chosen_fidelity(in, options);

  WorkloadInput w;
  w.scenario = &s;
  w.plan = &plan;
  w.model = in.model;
  w.wan_activations = in.compression.wan_activations;
  w.wan_gradients = in.compression.wan_gradients;
  w.compute = in.compute;
  w.gpus = cluster_gpus(s);
  w.folded = fidelity == core::Fidelity::folded;
  Workload work = build_workload(w, diags);
  if (!diags.has_errors()) work.graph.check(work.platform.device_count(), diags);
  if (diags.has_errors()) return {{"diagnostics", diagnostics_json(diags)}};

  std::optional<compress::CodecSpec> outer_codec = compress::CodecSpec{};
  if (plan.outer_sync.enabled()) {
    const std::string path = (in.plan_path.empty() ? "" : in.plan_path + ".") + "outer_sync";
    if (fidelity == core::Fidelity::folded)
      diags.error(s.where(path), path,
                  "outer sync is simulated at full fidelity only (up to " +
                      std::to_string(full_fidelity_max_gpus) + " GPUs with fidelity: auto)",
                  "use --fidelity full (or simulation.fidelity: full)");
    outer_codec = compress::resolve_codec(plan.outer_sync.codec, s, path + ".codec", diags);
  }
  if (diags.has_errors()) return {{"diagnostics", diagnostics_json(diags)}};

  std::vector<std::string> device_names;
  for (const auto& d : work.platform.devices) device_names.push_back(d.name);
  if (!options.platform_path.empty()) {
    if (auto e = core::write_file_atomically(options.platform_path, platform_xml(work.platform)))
      throw std::runtime_error(*e);
  }
  if (!options.graph_path.empty()) work.graph.write_json(options.graph_path, device_names);

  // The iterations: steps, and DiLoCo's outer all-reduces between them (sim/iterations.hpp).
  std::map<int, CodecStats> outer_stats;  // per fragment, one all-reduce
  OuterSyncInput outer;
  outer.plan = &plan;
  outer.model = in.model;
  outer.precision = s.training.precision;
  outer.codec = *outer_codec;
  outer.roles = &work.roles;
  outer.fragments = plan.outer_sync.fragments;
  const int iterations = s.simulation.iterations;
  const IterationPlan phases = plan_iterations(
      std::move(work.graph), iterations, plan.outer_sync,
      [&](Graph& g, NodeId ready, int fragment) {
        OuterSyncInput o = outer;
        o.fragment = fragment;
        const std::vector<NodeId> all_ready(work.platform.device_count(), ready);
        // Blocking DiLoCo (one fragment) syncs the whole model: fragment 0 of 1.
        return outer_all_reduce(g, work.platform, o, all_ready, &outer_stats[fragment]);
      });
  // The trace records the first phase played.
  const auto& graph = phases.phases[phases.order.front()].graph;
  double graph_bytes = 0;
  for (const auto& p : phases.phases) graph_bytes += static_cast<double>(p.graph.memory_bytes());

  std::unique_ptr<ChromeTraceWriter> trace;
  if (!options.trace_path.empty())
    trace = std::make_unique<ChromeTraceWriter>(options.trace_path, graph, work.platform);
  const bool varying = time_varying(work.platform);
  const Totals totals =
      play_iterations(phases, work.platform, varying, s.simulation.start_time.value(), trace.get());
  const double T = totals.time_s / iterations;  // the mean iteration

  // ---- per device: means over the iterations ----
  const int devices = work.platform.device_count();
  core::Json device_list = core::Json::array();
  for (int d = 0; d < devices; ++d) {
    const Device& dev = work.platform.devices[d];
    const DeviceRole& role = work.roles[d];
    const double compute_s = totals.compute_s[d] / iterations;
    const double busy_s = totals.busy_s[d] / iterations;
    const double bubble_s = totals.bubble_s[d] / iterations;
    const auto& cluster = *work.platform.clusters[dev.cluster].spec;
    const auto& gpu = *work.platform.clusters[dev.cluster].gpu;
    const double memory = stage_memory_bytes(in, role.pipeline, role.stage);
    const double capacity = gpu.memory.value();
    for (int position : work.gpus[d]) {
      device_list.push_back(
          {{"id", gpu_name_at(cluster, position)},
           {"cluster", cluster.name},
           {"gpu", gpu.name},
           {"pipeline", role.pipeline},
           {"stage", role.stage},
           {"compute_s", compute_s},
           {"comm_exposed_s", busy_s - compute_s},
           {"bubble_s", bubble_s},
           {"idle_s", std::max(0.0, T - busy_s - bubble_s)},
           {"memory",
            {{"peak_bytes", memory}, {"capacity_bytes", capacity}, {"fits", memory <= capacity}}}});
    }
  }
  if (trace) trace->finish(totals.first_bubbles);

  core::Json link_list = core::Json::array();
  for (std::size_t l = 0; l < work.platform.links.size(); ++l) {
    const Link& link = work.platform.links[l];
    if (link.kind == LinkKind::tcp_window || link.kind == LinkKind::fabric) continue;
    const std::string kind = link.kind == LinkKind::uplink ? "nic" : to_string(link.kind);
    link_list.push_back({{"name", link.name},
                         {"kind", kind},
                         {"bytes", totals.link_bytes[l] / iterations},
                         {"busy_s", totals.link_busy_s[l] / iterations}});
  }
  const double codec_seconds = totals.codec_s / iterations;

  // ---- totals ----
  const double sequences = plan.global_batch();
  const double tokens = sequences * s.training.seq_len;
  const double model_flops =
      models::training_flops(*in.model, sequences, s.training.seq_len, core::Recompute::none)
          .value();
  const int gpus = used_gpus(plan);
  double peak = 0;
  std::map<std::string, std::string> compute_provenance;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) {
      const auto* gpu = kernels::find_gpu(s.find_cluster(st.cluster)->gpu);
      peak +=
          p.replicas * st.tp * st.dp * kernels::math_rate(*gpu, s.training.precision)->rate.value();
      compute_provenance[gpu->name] = in.compute->provenance(*gpu);
    }

  core::Json result;
  result["scenario"] = s.name;
  result["iteration_time_s"] = T;
  add_iteration_results(result, totals, iterations, varying);
  std::vector<OuterBytes> per_sync(plan.outer_sync.fragments);
  for (const auto& [fragment, stats] : outer_stats)
    per_sync[fragment] = {stats.wan_raw_bytes, stats.wan_wire_bytes};
  add_outer_sync_results(result, plan.outer_sync, totals, per_sync, phases,
                         compress::describe(*outer_codec));
  add_time_to_train(result, s.training, tokens, T, iterations);
  result["tokens_per_s"] = tokens / T;
  result["model_tflops_per_gpu"] = model_flops / T / gpus / 1e12;
  result["mfu"] = model_flops / T / peak;
  result["gpus"] = gpus;
  result["devices"] = device_list;
  result["links"] = link_list;
  auto codec_json = [&](const compress::CodecSpec& spec, const CodecStats& stats) {
    return core::Json{{"codec", compress::describe(spec)},
                      {"wan_raw_bytes", stats.wan_raw_bytes},
                      {"wan_wire_bytes", stats.wan_wire_bytes},
                      {"bytes_saved", stats.wan_raw_bytes - stats.wan_wire_bytes}};
  };
  result["compression"] = {
      {"wan_activations", codec_json(in.compression.wan_activations, work.activation_codec)},
      {"wan_gradients", codec_json(in.compression.wan_gradients, work.gradient_codec)},
      {"codec_time_s", codec_seconds}};
  const bool estimated_only = std::all_of(compute_provenance.begin(), compute_provenance.end(),
                                          [](const auto& kv) { return kv.second == "estimated"; });
  result["provenance"] = {
      {"compute", compute_provenance},
      {"compute_model",
       estimated_only
           ? "estimated: kernel-level model on datasheet peaks (kernels/compute_model.hpp "
             "KernelModel: per kernel max(FLOP time at a tile- and wave-quantized "
             "efficiency, memory time) + launch overhead; constants and their sources in "
             "kernels/kernel_costs.yaml)"
           : "per GPU type as in provenance.compute (measured profile, calibration, or "
             "the kernel-level model on datasheet peaks)"},
      {"codec",
       "estimated: compress::code_transfer (encoded sizes; codec time on datasheet "
       "memory bandwidth)"},
      {"memory",
       "analytic: models::stage_memory (weights, gradients, optimizer, activations)" +
           std::string(plan.outer_sync.enabled()
                           ? " + sim::outer_state_bytes (DiLoCo's fp32 parameter snapshot and "
                             "outer momentum, 8 bytes per parameter)"
                           : "")},
      {"iterations", iterations == 1
                         ? "one iteration, from t = 0"
                         : std::to_string(iterations) +
                               " consecutive iterations on one simulated clock, each starting when "
                               "every GPU has finished the one before (sim/iterations.hpp)"},
      {"network", std::string("SimGrid ") + "3.32, " +
                      (s.simulation.network_model == core::NetworkModel::lv08
                           ? "LV08 model (latency x 13.01, bandwidth x 0.97)"
                           : "CM02 flow model (latency and bandwidth as written)") +
                      ", TCP window " + core::format_size(s.simulation.tcp_window) +
                      " per WAN flow unless the link sets one"}};
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  result["simulator"] = {{"fidelity", core::to_string(fidelity)},
                         {"network_model", core::to_string(s.simulation.network_model)},
                         {"graph_nodes", graph.size()},
                         {"graph_edges", graph.edge_count()},
                         {"activities", totals.activities},
                         {"iterations_played", totals.phases_played}};
  core::Json out{{"result", result}};
  out["stats"] = {
      {"wall_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count()},
      {"peak_rss_bytes", static_cast<double>(usage.ru_maxrss) * 1024},
      {"graph_nodes", graph.size()},
      {"graph_bytes", graph_bytes},
      {"activities", totals.activities}};
  if (!diags.empty()) out["diagnostics"] = diagnostics_json(diags);
  return out;
}

// Refuses a plan that does not fit, naming the stage, what it needs and what would help.
void check_memory(const SimulationInput& in, core::Diagnostics& diags) {
  const auto& s = *in.scenario;
  const auto& plan = *in.plan;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    for (std::size_t st = 0; st < plan.pipelines[i].stages.size(); ++st) {
      const auto& stage = plan.pipelines[i].stages[st];
      const auto* gpu = kernels::find_gpu(s.find_cluster(stage.cluster)->gpu);
      core::Bytes outer_state(0);
      const auto m = plan_stage_memory(in, static_cast<int>(i), static_cast<int>(st), &outer_state);
      if (m.total.value() <= gpu->memory.value()) continue;
      const std::string path = (in.plan_path.empty() ? "" : in.plan_path + ".") + "pipelines[" +
                               std::to_string(i) + "].stages[" + std::to_string(st) + "]";
      diags.error(s.where(path), path,
                  "does not fit in memory: each GPU needs " + core::human_size(m.total) +
                      " (weights " + core::human_size(m.weights) + ", gradients " +
                      core::human_size(m.gradients) + ", optimizer " +
                      core::human_size(m.optimizer) + ", activations " +
                      core::human_size(m.activations) +
                      (outer_state.value() > 0
                           ? ", outer-sync snapshot and momentum " + core::human_size(outer_state)
                           : std::string()) +
                      "), a " + gpu->name + " has " + core::human_size(gpu->memory),
                  "give the stage fewer layers or more tp, turn on recompute, or pass --allow-oom "
                  "to simulate it anyway");
    }
}

}  // namespace

namespace {

// The child's side of run_isolated: under the memory limit, `body`'s value or why it failed,
// as JSON text.
std::string isolated_body(const std::function<core::Json()>& body) {
  // The child may not take more than the memory limit: past it an allocation fails
  // (reported below) instead of the machine swapping. Address-sanitized builds reserve
  // terabytes of address space, so they run without it.
#if !defined(__SANITIZE_ADDRESS__)
  // On top of what the process already maps (a Python process with torch maps GBs).
  unsigned long long mapped_pages = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%llu", &mapped_pages) != 1) mapped_pages = 0;
    std::fclose(statm);
  }
  const auto limit = static_cast<rlim_t>(core::limits().memory_bytes) +
                     static_cast<rlim_t>(mapped_pages) * ::sysconf(_SC_PAGESIZE);
  struct rlimit memory {
    limit, limit
  };
  ::setrlimit(RLIMIT_AS, &memory);
#endif
  core::Json out;
  try {
    out = {{"value", body()}};
  } catch (const std::bad_alloc&) {
    const double limit_bytes = core::limits().memory_bytes;
    out = {{"failure", "the simulation ran out of memory (it may use " +
                           core::human_size(core::Bytes(limit_bytes)) +
                           "); use --fidelity folded to simulate identical replicas and "
                           "tensor-parallel groups once; " +
                           core::limit_hint("HGSIM_MAX_MEMORY_BYTES", limit_bytes)}};
  } catch (const std::exception& e) {
    out = {{"failure", e.what()}};
  }
  // Text that is not UTF-8 (a name from a damaged input) is replaced, never thrown on.
  return out.dump(-1, ' ', false, core::Json::error_handler_t::replace);
}

core::Child start_isolated(const std::function<core::Json()>& body) {
  try {
    return core::start_child([&body] { return isolated_body(body); });
  } catch (const core::ChildFailed& e) {
    throw std::runtime_error(e.what());
  }
}

core::Json finish_isolated(core::Child child) {
  std::string text;
  try {
    text = core::finish_child(child);
  } catch (const core::ChildFailed& e) {
    throw std::runtime_error(std::string(e.what()) +
                             " before giving a result (a bug in hgsim: please report it)");
  }
  if (text.empty()) throw std::runtime_error("the simulator process gave no result");
  core::Json out = core::Json::parse(text);
  if (out.contains("failure")) throw std::runtime_error(out["failure"].get<std::string>());
  return out["value"];
}

}  // namespace

core::Json run_isolated(const std::function<core::Json()>& body) {
  return finish_isolated(start_isolated(body));
}

std::vector<IsolatedResult> run_isolated_all(const std::vector<std::function<core::Json()>>& bodies,
                                             int jobs) {
  jobs = std::max(jobs, 1);
  std::vector<IsolatedResult> results(bodies.size());
  std::vector<core::Child> running(bodies.size());
  std::size_t started = 0;
  auto start_next = [&] {
    try {
      running[started] = start_isolated(bodies[started]);
    } catch (const std::exception& e) {
      results[started].failure = e.what();
    }
    ++started;
  };
  while (started < bodies.size() && static_cast<int>(started) < jobs) start_next();
  // Collected in order; a child that finishes early waits on its pipe until read.
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    if (running[i].pid >= 0) {
      try {
        results[i].value = finish_isolated(running[i]);
      } catch (const std::exception& e) {
        results[i].failure = e.what();
      }
    }
    if (started < bodies.size()) start_next();
  }
  return results;
}

namespace {

std::optional<core::Json> interpret(const core::Json& out, core::Diagnostics& diags,
                                    SimulationStats* stats) {
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
  return out["result"];
}

}  // namespace

std::optional<core::Json> simulate(const SimulationInput& in, const SimulationOptions& options,
                                   core::Diagnostics& diags, SimulationStats* stats) {
  if (!options.allow_oom) check_memory(in, diags);
  if (diags.has_errors()) return std::nullopt;
  core::Json out;
  try {
    out = run_isolated([&] { return run_child(in, options); });
  } catch (const std::exception& e) {
    diags.error({}, "", std::string("simulation failed: ") + e.what());
    return std::nullopt;
  }
  return interpret(out, diags, stats);
}

std::vector<std::optional<core::Json>> simulate_all(const std::vector<SimulationInput>& inputs,
                                                    const std::vector<SimulationOptions>& options,
                                                    std::vector<core::Diagnostics>& diags,
                                                    int jobs) {
  diags.resize(inputs.size());
  std::vector<std::optional<core::Json>> results(inputs.size());
  std::vector<std::function<core::Json()>> bodies;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!options[i].allow_oom) check_memory(inputs[i], diags[i]);
    if (diags[i].has_errors()) continue;
    bodies.push_back([&, i] { return run_child(inputs[i], options[i]); });
    which.push_back(i);
  }
  const auto outs = run_isolated_all(bodies, jobs);
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const std::size_t i = which[k];
    if (!outs[k].failure.empty()) {
      diags[i].error({}, "", "simulation failed: " + outs[k].failure);
      continue;
    }
    results[i] = interpret(outs[k].value, diags[i], nullptr);
  }
  return results;
}

std::string format_results(const core::Json& r) {
  std::ostringstream out;
  char line[512];
  const double T = r["iteration_time_s"].get<double>();
  std::snprintf(line, sizeof line,
                "%s: one iteration takes %s (simulated, %s fidelity; compute %s)\n",
                r["scenario"].get<std::string>().c_str(),
                (core::human_duration(core::Seconds(T)) +
                 (r.value("iterations_simulated", 1) > 1 ? " on average" : ""))
                    .c_str(),
                r["simulator"]["fidelity"].get<std::string>().c_str(),
                r["provenance"]["compute_model"].get<std::string>().rfind("estimated", 0) == 0
                    ? "estimated from datasheets"
                    : "from measured profiles");
  out << line;
  std::snprintf(line, sizeof line,
                "  %.0f tokens/s, %.1f model TFLOP/s per GPU, MFU %.1f%%, %d GPUs\n\n",
                r["tokens_per_s"].get<double>(), r["model_tflops_per_gpu"].get<double>(),
                100 * r["mfu"].get<double>(), r["gpus"].get<int>());
  out << line;
  out << format_iterations(r);
  // One row per (pipeline, stage): the mean over its GPUs.
  struct Row {
    std::string cluster, gpu;
    int gpus = 0;
    double compute = 0, comm = 0, bubble = 0, idle = 0, memory = 0, capacity = 0;
    bool fits = true;
  };
  std::map<std::pair<int, int>, Row> rows;
  for (const auto& d : r["devices"]) {
    Row& row = rows[{d["pipeline"].get<int>(), d["stage"].get<int>()}];
    row.cluster = d["cluster"];
    row.gpu = d["gpu"];
    ++row.gpus;
    row.compute += d["compute_s"].get<double>();
    row.comm += d["comm_exposed_s"].get<double>();
    row.bubble += d["bubble_s"].get<double>();
    row.idle += d["idle_s"].get<double>();
    row.memory = d["memory"]["peak_bytes"].get<double>();
    row.capacity = d["memory"]["capacity_bytes"].get<double>();
    row.fits = row.fits && d["memory"]["fits"].get<bool>();
  }
  std::snprintf(line, sizeof line, "  %-8s %-12s %-16s %5s %9s %9s %9s %9s  %s\n", "stage",
                "cluster", "gpu", "GPUs", "compute", "comm", "bubble", "idle", "memory per GPU");
  out << line;
  for (const auto& [key, row] : rows) {
    auto pct = [&](double v) { return 100 * v / row.gpus / T; };
    const std::string stage = "p" + std::to_string(key.first) + " s" + std::to_string(key.second);
    std::snprintf(line, sizeof line,
                  "  %-8s %-12s %-16s %5d %8.1f%% %8.1f%% %8.1f%% %8.1f%%  %s of %s%s\n",
                  stage.c_str(), row.cluster.c_str(), row.gpu.c_str(), row.gpus, pct(row.compute),
                  pct(row.comm), pct(row.bubble), pct(row.idle),
                  core::human_size(core::Bytes(row.memory)).c_str(),
                  core::human_size(core::Bytes(row.capacity)).c_str(), row.fits ? "" : " (OOM)");
    out << line;
  }
  bool wan_header = false;
  for (const auto& l : r["links"]) {
    if (l["kind"] != "wan" || l["bytes"].get<double>() <= 0) continue;
    if (!wan_header) out << "\n  WAN link                         moved      busy\n";
    wan_header = true;
    std::snprintf(line, sizeof line, "  %-30s %9s %8.1f%%\n", l["name"].get<std::string>().c_str(),
                  core::human_size(core::Bytes(l["bytes"].get<double>())).c_str(),
                  100 * l["busy_s"].get<double>() / T);
    out << line;
  }
  const auto& c = r["compression"];
  const double saved = c["wan_activations"]["bytes_saved"].get<double>() +
                       c["wan_gradients"]["bytes_saved"].get<double>();
  if (saved > 0) {
    std::snprintf(line, sizeof line, "\n  compression saved %s on the WAN for %s of codec time\n",
                  core::human_size(core::Bytes(saved)).c_str(),
                  core::human_duration(core::Seconds(c["codec_time_s"].get<double>())).c_str());
    out << line;
  }
  out << "\n  compute, comm (exposed), bubble and idle are shares of the iteration per GPU.\n"
      << "  Sources: times simulated (" << r["provenance"]["network"].get<std::string>()
      << "); compute " << r["provenance"]["compute_model"].get<std::string>() << "; memory "
      << r["provenance"]["memory"].get<std::string>() << ".\n";
  return out.str();
}

}  // namespace hgsim::sim
