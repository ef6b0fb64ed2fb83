#include "sim/simulate.hpp"

#include "sim/chakra.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "compress/codec_cost.hpp"
#include "core/files.hpp"
#include "core/limits.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "models/transformer.hpp"
#include "sim/engine.hpp"
#include "sim/iterations.hpp"
#include "sim/outer_sync.hpp"
#include "sim/plan_memory.hpp"
#include "sim/trace.hpp"
#include "sim/workload.hpp"

namespace hgsim::sim {

namespace {

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
    gpus.push_back(&kernels::gpu_of(c.gpu));
  }
  return gpus;
}

// The most nodes a full graph may have under fidelity auto.
std::int64_t full_graph_budget() {
  return std::min(full_fidelity_max_graph_nodes, core::limits().graph_nodes);
}

// Whether the full graph of `w` stays within full_graph_budget(): counted (nodes only:
// nothing stored, linked or labelled, so a graph past the budget costs its count, not its
// memory) before the fidelity the count chose is built.
bool full_graph_fits(WorkloadInput w) {
  w.folded = false;
  w.max_graph_nodes = full_graph_budget();
  w.count_only = true;
  try {
    core::Diagnostics reported_by_the_build;
    build_workload(w, reported_by_the_build);
  } catch (const GraphTooLarge&) {
    return false;
  }
  return true;
}

// The workload, at the fidelity asked for (`fidelity` gets the one used). fidelity: auto is
// full up to full_fidelity_max_gpus GPUs (automatic_fidelity) while the full graph stays
// within full_fidelity_max_graph_nodes (or HGSIM_MAX_GRAPH_NODES, if lower), folded past either (a
// plan folded fidelity cannot fold, or one with outer sync, stays full under the ordinary graph
// limit). The count is the graph's own, so the choice is exact and the same on every run.
Workload build_at_fidelity(const SimulationInput& in, const ResolvedPlan& r,
                           const SimulationOptions& options, core::Fidelity& fidelity,
                           core::Diagnostics& diags) {
  const core::Fidelity asked =
      options.fidelity_from_cli ? options.fidelity : r.scenario->simulation.fidelity;
  WorkloadInput w;
  w.plan = &r;
  w.compute = in.compute;
  w.gpus = cluster_gpus(*r.scenario);
  fidelity = asked == core::Fidelity::automatic ? automatic_fidelity(r.gpus_used) : asked;
  w.folded = fidelity == core::Fidelity::folded;
  w.record_collectives = !options.chakra_prefix.empty();
  w.record_op_counts = !options.chakra_prefix.empty();
  // Before anything is built: every micro-batch has a forward and a backward node on every
  // stage (of every replica, unless folded), so a plan whose count alone passes the graph
  // limit is refused at its micro_batches in no time and no memory (building such a graph
  // to find out costs seconds and gigabytes).
  const auto limit = static_cast<double>(core::limits().graph_nodes);
  for (std::size_t p = 0; p < r.plan.pipelines.size(); ++p) {
    const core::Pipeline& pipeline = r.plan.pipelines[p];
    const double copies = w.folded || asked == core::Fidelity::automatic ? 1 : pipeline.replicas;
    const double at_least = 2.0 * pipeline.micro_batches * pipeline.stages.size() * copies;
    if (at_least <= limit) continue;
    const core::Scenario& s = *r.scenario;
    const bool inline_plan = !s.strategy.automatic && s.strategy.plan == r.plan;
    const std::string key =
        (inline_plan ? "strategy." : "") + core::index_path("pipelines", p) + ".micro_batches";
    diags.error(
        inline_plan ? s.where(key) : core::SourceLocation{}, key,
        std::to_string(pipeline.micro_batches) + " micro-batches x " +
            std::to_string(pipeline.stages.size()) + " stages" +
            (copies > 1 ? " x " + std::to_string(pipeline.replicas) + " replicas" : "") +
            " make an execution graph of more than " + core::shortest_decimal(limit) +
            " nodes (a forward and a backward each)",
        (w.folded || copies == 1 ? std::string() : std::string("use --fidelity folded, or ")) +
            "use fewer micro-batches; " + core::limit_hint("HGSIM_MAX_GRAPH_NODES", limit));
    return Workload{};
  }
  if (asked != core::Fidelity::automatic || w.folded || r.plan.outer_sync.enabled())
    return build_workload(w, diags);
  const std::int64_t budget = full_graph_budget();
  if (full_graph_fits(w)) return build_workload(w, diags);
  core::Diagnostics folded_diags;
  w.folded = true;
  Workload folded = build_workload(w, folded_diags);
  if (folded_diags.has_errors()) {
    w.folded = false;
    return build_workload(w, diags);
  }
  fidelity = core::Fidelity::folded;
  diags.append(folded_diags);
  diags.warning({}, "simulation.fidelity",
                "fidelity auto: the full graph would have more than " + std::to_string(budget) +
                    " nodes, so identical replicas and tensor-parallel groups are simulated once "
                    "(folded)",
                "--fidelity full (simulation.fidelity: full) simulates every GPU");
  return folded;
}

// For every WAN link, the route whose flows its cap and window advice describe: the slowest
// (lowest per-flow cap) of the routes that carried traffic across it, since a flow's cap is
// its whole route's (window / that route's round trip), not that of the shortest route
// crossing the link; for a link no flow crossed, the fastest route crossing it (what one
// flow could reach there). nullptr for other links.
std::vector<const WanRouteTcp*> flow_routes(const Platform& p, const Totals& totals) {
  std::vector<const WanRouteTcp*> slowest_used(p.links.size(), nullptr);
  std::vector<const WanRouteTcp*> fastest(p.links.size(), nullptr);
  for (const auto& from : p.wan_tcp)
    for (const WanRouteTcp& route : from) {
      if (route.cap_link < 0) continue;
      const bool used = totals.link_bytes[route.cap_link] > 0;
      for (int l : route.wan_links) {
        if (!fastest[l] || route.flow_cap() > fastest[l]->flow_cap()) fastest[l] = &route;
        if (used && (!slowest_used[l] || route.flow_cap() < slowest_used[l]->flow_cap()))
          slowest_used[l] = &route;
      }
    }
  for (std::size_t l = 0; l < p.links.size(); ++l)
    if (!slowest_used[l]) slowest_used[l] = fastest[l];
  return slowest_used;
}

// Per link: bytes moved and time busy (means over the iterations); per WAN link also the
// most one TCP flow can carry (flow_routes' route: window / its round trip) and the most
// flows the plan had on it at once.
std::vector<LinkResult> link_results(const Platform& p, const Totals& totals, int iterations,
                                     const std::vector<const WanRouteTcp*>& routes) {
  std::vector<LinkResult> out;
  for (std::size_t l = 0; l < p.links.size(); ++l) {
    const Link& link = p.links[l];
    if (link.kind == LinkKind::tcp_window || link.kind == LinkKind::fabric) continue;
    LinkResult result;
    result.name = link.name;
    result.kind = link.kind == LinkKind::uplink ? "nic" : to_string(link.kind);
    result.bytes = totals.link_bytes[l] / iterations;
    result.busy_s = totals.link_busy_s[l] / iterations;
    result.bytes_per_s = link.bytes_per_s;
    if (link.kind == LinkKind::wan) {
      result.flow_cap_bytes_per_s = routes[l] ? routes[l]->flow_cap() : 0;
      result.max_flows = totals.link_max_flows[l];
    }
    out.push_back(result);
  }
  return out;
}

// A warning for every WAN link that carried traffic but whose flows, each capped by the TCP
// window of its route, could not fill it even all at once: the link, the cap, the flows and
// the window that would fill it. The window needed is the link's bandwidth times the
// route's round trip over the flows (tcp_flow_cap solved for the window); every WAN link of
// the route whose window is below it is named, since the smallest window along a route caps
// its flows.
std::vector<std::string> window_warnings(const Platform& p, const std::vector<LinkResult>& links,
                                         const std::vector<const WanRouteTcp*>& routes) {
  std::vector<std::string> out;
  for (const LinkResult& l : links) {
    if (l.kind != "wan" || l.bytes <= 0 || !l.flow_cap_bytes_per_s || l.max_flows < 1) continue;
    const double cap = *l.flow_cap_bytes_per_s;
    if (l.max_flows * cap >= l.bytes_per_s) continue;
    const auto link = std::find_if(p.links.begin(), p.links.end(),
                                   [&](const Link& candidate) { return candidate.name == l.name; });
    const WanRouteTcp* route = routes[link - p.links.begin()];
    if (!route) continue;
    // Rounded up to three significant digits: a setting to copy, not a 9-digit byte count.
    const double exact = l.bytes_per_s * route->round_trip_s / l.max_flows;
    const double step = std::pow(10.0, std::floor(std::log10(exact)) - 2);
    const double needed = std::ceil(exact / step) * step;
    std::vector<std::string> settings;
    for (std::size_t h = 0; h < route->wan_links.size(); ++h) {
      const std::string setting = "wan[" + std::to_string(route->scenario_wan[h]) + "].tcp_window";
      if (route->windows[h] < needed &&
          std::find(settings.begin(), settings.end(), setting) == settings.end())
        settings.push_back(setting);
    }
    std::sort(settings.begin(), settings.end());
    std::string setting_text;
    for (std::size_t i = 0; i < settings.size(); ++i)
      setting_text += (i == 0 ? "" : i + 1 == settings.size() ? " and " : ", ") + settings[i];
    const std::string via =
        route->wan_links.size() > 1 ? " on route " + p.links[route->cap_link].name.substr(4) : "";
    out.push_back(
        "WAN link " + l.name + " (" + core::format_bandwidth(core::BytesPerSecond(l.bytes_per_s)) +
        ") is not filled: at most " + std::to_string(l.max_flows) + " flow" +
        (l.max_flows == 1 ? "" : "s") + " at once, each capped by the TCP window at " +
        core::human_bandwidth(core::BytesPerSecond(cap)) + " (window / round trip" + via + "); " +
        setting_text + ": " + core::format_size(core::Bytes(needed)) + " would fill it");
  }
  return out;
}

// The outer-sync codec of a DiLoCo plan (resolved with the plan's choices; none without
// outer sync); outer sync at folded fidelity goes to `diags`.
std::optional<compress::CodecSpec> outer_sync_codec(const SimulationInput& in,
                                                    const ResolvedPlan& r, core::Fidelity fidelity,
                                                    core::Diagnostics& diags) {
  const core::Plan& plan = r.plan;
  if (!plan.outer_sync.enabled()) return compress::CodecSpec{};
  const core::Scenario& s = *r.scenario;
  const std::string path = (in.plan_path.empty() ? "" : in.plan_path + ".") + "outer_sync";
  if (fidelity == core::Fidelity::folded)
    diags.error(s.where(path), path,
                "outer sync is simulated at full fidelity only (up to " +
                    std::to_string(full_fidelity_max_gpus) + " GPUs with fidelity: auto)",
                "use --fidelity full (or simulation.fidelity: full)");
  return r.choices.outer_sync_codec;
}

// What --export-graph writes a node, measured: 4.0 M nodes of the `make demo` scenario
// (scenarios/examples/explicit-plan.yaml) took 927 MB, about 230 bytes each.
constexpr double kGraphJsonBytesPerNode = 230;

// The platform XML with a comment after its header saying at which fidelity it was built:
// a folded device ("east/n0/g0x8") stands for 8 GPUs, with 8 times one GPU's bandwidths.
std::string platform_xml_at(const Platform& platform, core::Fidelity fidelity) {
  std::string xml = platform_xml(platform);
  const std::size_t at = xml.find("<platform ");
  if (at == std::string::npos) return xml;
  int folded = 0;
  for (const Device& d : platform.devices) folded += d.gpus > 1;
  std::string note = "<!-- Fidelity: " + core::to_string(fidelity) + ".";
  if (fidelity == core::Fidelity::folded)
    note +=
        " Each stage of each pipeline is simulated once: a host named ...xN\n"
        "     (e.g. g0x8) is one folded device standing for N identical GPUs (the stage's\n"
        "     tp x dp GPUs of every replica), its NVLink and NIC links N times one GPU's\n"
        "     bandwidth, so that their summed traffic takes the time theirs takes.\n     " +
        std::to_string(folded) + " of the " + std::to_string(platform.devices.size()) +
        " hosts are folded.";
  else
    note += " Every host is one GPU.";
  return xml.insert(at, note + " -->\n");
}

// --export-platform and --export-graph. The graph is refused before it is written when
// its estimated size is more than the free space of its disk.
void export_workload(const SimulationOptions& options, const Workload& work,
                     core::Fidelity fidelity) {
  if (!options.platform_path.empty()) {
    if (auto e = core::write_file_atomically(options.platform_path,
                                             platform_xml_at(work.platform, fidelity)))
      throw std::runtime_error(*e);
  }
  if (!options.chakra_prefix.empty()) {
    if (fidelity == core::Fidelity::folded)
      throw std::runtime_error(
          "--export-chakra writes one file per GPU and the simulation is folded; use "
          "--fidelity full (simulation.fidelity: full)");
    export_chakra(work.graph, work.platform, options.chakra_prefix);
  }
  if (options.graph_path.empty()) return;
  const double estimate = kGraphJsonBytesPerNode * static_cast<double>(work.graph.size());
  std::error_code ec;
  const auto folder = std::filesystem::absolute(options.graph_path, ec).parent_path();
  const auto space = std::filesystem::space(folder, ec);
  // A device (/dev/null, /dev/stdout) takes the graph whatever its folder's disk holds.
  const auto kind = std::filesystem::status(options.graph_path).type();
  const bool device =
      kind == std::filesystem::file_type::character || kind == std::filesystem::file_type::fifo;
  if (!ec && !device && estimate > static_cast<double>(space.available))
    throw std::runtime_error("--export-graph " + core::path_excerpt(options.graph_path) +
                             ": the graph's " + std::to_string(work.graph.size()) +
                             " nodes take about " + core::human_size(core::Bytes(estimate)) +
                             " as JSON (about " + core::shortest_decimal(kGraphJsonBytesPerNode) +
                             " bytes a node), and its disk has " +
                             core::human_size(core::Bytes(static_cast<double>(space.available))) +
                             " free; nothing was written");
  std::vector<std::string> device_names;
  for (const auto& d : work.platform.devices) device_names.push_back(d.name);
  work.graph.write_json(options.graph_path, device_names);
}

// The iterations: the step's graph, and DiLoCo's outer all-reduces between steps
// (sim/iterations.hpp); `outer_stats` gets each fragment's codec bytes.
IterationPlan iteration_phases(const SimulationInput& in, const ResolvedPlan& r, Workload& work,
                               const compress::CodecSpec& outer_codec,
                               std::map<int, CodecStats>& outer_stats) {
  const core::Plan& plan = r.plan;
  OuterSyncInput outer;
  outer.plan = &plan;
  outer.model = in.model;
  outer.precision = r.scenario->training.precision;
  outer.codec = outer_codec;
  outer.roles = &work.roles;
  outer.fragments = plan.outer_sync.fragments;
  // The builder outlives this function (play_iterations grows Streaming DiLoCo windows with
  // it): `outer` is copied; a fragment built again records the same bytes, not twice.
  return plan_iterations(
      std::move(work.graph), r.scenario->simulation.iterations, plan.outer_sync,
      [outer, &work, &outer_stats](Graph& g, NodeId ready, int fragment) {
        OuterSyncInput o = outer;
        o.fragment = fragment;
        const std::vector<NodeId> all_ready(work.platform.device_count(), ready);
        // Blocking DiLoCo (one fragment) syncs the whole model: fragment 0 of 1.
        CodecStats stats;
        auto done = outer_all_reduce(g, work.platform, o, all_ready, &stats);
        outer_stats[fragment] = stats;
        return done;
      },
      time_varying(work.platform));
}

// Every GPU's times (means over the iterations of `iteration_s`), its stage's memory and
// its capacity; a folded device stands for several GPUs, each listed.
std::vector<DeviceResult> device_results(const CheckedPlan& checked, const Workload& work,
                                         const Totals& totals, int iterations, double iteration_s) {
  std::vector<DeviceResult> out;
  for (int d = 0; d < work.platform.device_count(); ++d) {
    const Device& dev = work.platform.devices[d];
    const DeviceRole& role = work.roles[d];
    const double compute_s = totals.compute_s[d] / iterations;
    const double busy_s = totals.busy_s[d] / iterations;
    const double bubble_s = totals.bubble_s[d] / iterations;
    const auto& cluster = *work.platform.clusters[dev.cluster].spec;
    const auto& gpu = *work.platform.clusters[dev.cluster].gpu;
    const double memory = checked.stage(role.pipeline, role.stage).memory.total.value();
    const double capacity = gpu.memory.value();
    std::array<double, kActivities> activity = totals.activity_s[d];
    for (double& seconds : activity) seconds /= iterations;
    const kernels::KernelSplit layers = static_cast<std::size_t>(d) < work.layer_split.size()
                                            ? work.layer_split[d]
                                            : kernels::KernelSplit{};
    const Breakdown breakdown = device_breakdown(activity, layers, iteration_s);
    for (int position : work.gpus[d])
      out.push_back({gpu_name(cluster, position), cluster.name, gpu.name, role.pipeline, role.stage,
                     compute_s, busy_s - compute_s, bubble_s,
                     std::max(0.0, iteration_s - busy_s - bubble_s), memory, capacity,
                     memory <= capacity, breakdown});
  }
  return out;
}

// FLOPs and their rates: model FLOPs (no recomputation) and hardware FLOPs (with the
// plan's), TFLOP/s per GPU used, MFU over the GPUs used and over all the scenario has; and
// each GPU type's compute provenance.
void add_flops(const SimulationInput& in, const CheckedPlan& checked, Results& result) {
  const ResolvedPlan& r = checked.resolved();
  const core::Scenario& s = *r.scenario;
  const double T = result.iteration_time_s;
  result.model_flops = checked.figures().model_flops.value();
  result.hardware_flops = checked.figures().hardware_flops.value();
  double peak_used = 0, peak_available = 0;
  for (const auto& p : r.plan.pipelines)
    for (const auto& st : p.stages) {
      const auto* gpu = &kernels::gpu_of(s.cluster(st.cluster).gpu);
      peak_used +=
          p.replicas * st.gpus() * kernels::math_rate(*gpu, r.choices.precision)->rate.value();
      result.compute_provenance[gpu->name] = in.compute->provenance(*gpu);
    }
  const auto gpus = cluster_gpus(s);
  for (std::size_t c = 0; c < s.clusters.size(); ++c)
    peak_available +=
        s.clusters[c].gpu_count() * kernels::math_rate(*gpus[c], r.choices.precision)->rate.value();
  result.model_tflops_per_gpu = result.model_flops / T / r.gpus_used / 1e12;
  result.mfu = result.model_flops / T / peak_used;
  result.mfu_available = result.model_flops / T / peak_available;
}
// Which share of each cluster's `nvlink.bandwidth` its intra-node links carry, and where
// the share comes from (kernels::intra_node_efficiency). Clusters of one share are named
// together, the first three of them ("c0, c1, c2 and 97 more 56%"), so that a scenario of
// a hundred clusters gives a line, not a page.
std::string intra_node_provenance(const core::Scenario& s) {
  struct Share {
    std::string figure;  // "56%", "61% calibrated"
    std::vector<std::string> clusters;
  };
  std::vector<Share> shares;
  for (const core::Cluster& cluster : s.clusters) {
    const std::string figure =
        core::shortest_decimal(std::round(1000 * kernels::intra_node_efficiency(cluster)) / 10) +
        "%" + (cluster.calibration.nvlink_efficiency ? " calibrated" : "");
    auto same = std::find_if(shares.begin(), shares.end(),
                             [&](const Share& share) { return share.figure == figure; });
    if (same == shares.end()) same = shares.insert(shares.end(), Share{figure, {}});
    same->clusters.push_back(cluster.name);
  }
  constexpr std::size_t kNamed = 3;
  const bool grouped = std::any_of(shares.begin(), shares.end(),
                                   [](const Share& share) { return share.clusters.size() > 1; });
  std::string out = "intra-node links carry NCCL's share of each nvlink.bandwidth (";
  for (std::size_t i = 0; i < shares.size(); ++i) {
    const std::vector<std::string>& names = shares[i].clusters;
    out += i ? (grouped ? "; " : ", ") : "";
    for (std::size_t n = 0; n < std::min(names.size(), kNamed); ++n)
      out += (n ? ", " : "") + names[n];
    if (names.size() > kNamed) out += " and " + std::to_string(names.size() - kNamed) + " more";
    out += " " + shares[i].figure;
  }
  return out +
         "; uncalibrated: NCCL's measured bus rate or per-link model, kernels/kernel_costs.yaml; "
         "each collective at least NCCL's measured fixed cost, kernels/nccl_costs.yaml)";
}

// Where the numbers come from: compute, codecs, memory, iterations and network.
void add_provenance(const ResolvedPlan& r, int iterations, Results& result) {
  const core::Scenario& s = *r.scenario;
  const bool estimated_only =
      std::all_of(result.compute_provenance.begin(), result.compute_provenance.end(),
                  [](const auto& kv) { return kv.second == "estimated"; });
  result.compute_model =
      estimated_only
          ? "estimated: kernel-level model on datasheet peaks (kernels/compute_model.hpp "
            "KernelModel: per kernel max(FLOP time at a tile- and wave-quantized "
            "efficiency, memory time) + launch overhead; constants and their sources in "
            "kernels/kernel_costs.yaml)"
          : "per GPU type as in provenance.compute (measured profile, calibration, or "
            "the kernel-level model on datasheet peaks)";
  result.codec_provenance =
      "estimated: compress::code_transfer (encoded sizes; codec time on datasheet memory "
      "bandwidth)";
  result.memory_provenance =
      "analytic: models::stage_memory (weights, gradients, optimizer, activations)" +
      std::string(r.plan.outer_sync.enabled()
                      ? " + sim::outer_state_bytes (DiLoCo's fp32 parameter snapshot and "
                        "outer momentum, " +
                            core::shortest_decimal(outer_state_bytes_per_parameter) +
                            " bytes per parameter)"
                      : std::string());
  result.iterations_provenance =
      iterations == 1 ? "one iteration, from t = 0"
                      : std::to_string(iterations) +
                            " consecutive iterations on one simulated clock, each starting when "
                            "every GPU has finished the one before (sim/iterations.hpp)";
  result.network_provenance =
      "SimGrid " + std::to_string(simgrid_version().major) + "." +
      std::to_string(simgrid_version().minor) + ", " +
      (s.simulation.network_model == core::NetworkModel::lv08
           ? "LV08 model (latency x " + core::shortest_decimal(lv08_latency_factor) +
                 ", bandwidth x " + core::shortest_decimal(lv08_bandwidth_factor) + ")"
           : std::string("CM02 flow model (latency and bandwidth as "
                         "written)")) +
      ", TCP window " + core::format_size(s.simulation.tcp_window) +
      " per WAN flow unless the link sets one; " + intra_node_provenance(s);
}

// The child's answer: the results, how long and how much memory the simulation took, and
// any warnings.
core::Json child_output(const Results& result, const Graph& graph, double graph_bytes,
                        const Totals& totals, std::chrono::steady_clock::time_point wall_start,
                        const core::Diagnostics& diags) {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  core::Json out{{"result", to_json(result)}};
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

// The whole simulation, inside the child process: the workload, the iterations played, and
// the results read off them.
core::Json run_child(const SimulationInput& in, const CheckedPlan& checked,
                     const SimulationOptions& options) {
  const ResolvedPlan& r = checked.resolved();
  const auto wall_start = std::chrono::steady_clock::now();
  core::Diagnostics diags;
  const core::Scenario& s = *r.scenario;
  const core::Plan& plan = r.plan;
  core::Fidelity fidelity = core::Fidelity::full;
  Workload work = build_at_fidelity(in, r, options, fidelity, diags);
  if (!diags.has_errors()) work.graph.check(work.platform.device_count(), diags);
  if (diags.has_errors()) return {{"diagnostics", diagnostics_json(diags)}};
  const auto outer_codec = outer_sync_codec(in, r, fidelity, diags);
  if (diags.has_errors()) return {{"diagnostics", diagnostics_json(diags)}};
  export_workload(options, work, fidelity);

  std::map<int, CodecStats> outer_stats;  // per fragment, one all-reduce
  const IterationPlan phases = iteration_phases(in, r, work, *outer_codec, outer_stats);
  // The trace records the first phase played.
  const auto& graph = phases.phases[phases.order.front()].graph;
  double graph_bytes = 0;
  for (const auto& p : phases.phases) graph_bytes += static_cast<double>(p.graph.memory_bytes());
  std::unique_ptr<ChromeTraceWriter> trace;
  if (!options.trace_path.empty()) {
    std::vector<int> stages;
    for (const DeviceRole& role : work.roles) stages.push_back(role.stage);
    trace = std::make_unique<ChromeTraceWriter>(options.trace_path, graph, work.platform,
                                                std::move(stages), options.trace_filter);
  }
  const int iterations = s.simulation.iterations;
  const bool varying = time_varying(work.platform);
  const Totals totals =
      play_iterations(phases, work.platform, varying, s.simulation.start_time.value(), trace.get());
  if (trace) trace->finish(totals.first_bubbles);

  Results result;
  result.scenario = s.name;
  result.plan = plan;
  result.iteration_time_s = totals.time_s / iterations;  // the mean iteration
  const double T = result.iteration_time_s;
  result.devices = device_results(checked, work, totals, iterations, T);
  // Links, and the WAN links the plan's flows cannot fill.
  const auto routes = flow_routes(work.platform, totals);
  result.links = link_results(work.platform, totals, iterations, routes);
  result.warnings = window_warnings(work.platform, result.links, routes);
  if (plan.outer_sync.enabled() && iterations < plan.outer_sync.inner_steps)
    result.warnings.push_back(
        "simulation.iterations " + std::to_string(iterations) + " is below the plan's " +
        "outer_sync.inner_steps " + std::to_string(plan.outer_sync.inner_steps) +
        ": the iterations simulated are inner steps only, so the mean iteration and the time "
        "to train leave the outer sync out; set simulation.iterations to " +
        std::to_string(plan.outer_sync.inner_steps) + " or more for its cost");
  result.gpus_used = r.gpus_used;
  result.gpus_available = r.gpus_available;
  add_flops(in, checked, result);
  const double tokens = static_cast<double>(plan.global_batch()) * s.training.seq_len;
  result.tokens_per_s = tokens / T;
  // What sim/iterations.hpp adds about the iterations, the outer sync and time to train.
  core::Json iteration_results = core::Json::object();
  add_iteration_results(iteration_results, totals, iterations, varying);
  std::vector<OuterBytes> per_sync(plan.outer_sync.fragments);
  for (const auto& [fragment, stats] : outer_stats)
    per_sync[fragment] = {stats.wan_raw_bytes, stats.wan_wire_bytes};
  add_outer_sync_results(iteration_results, plan.outer_sync, totals, per_sync, phases,
                         compress::describe(*outer_codec));
  add_time_to_train(iteration_results, s.training, tokens, T, iterations, r.gpus_used);
  result.iterations = iteration_results;
  auto codec = [&](const compress::CodecSpec& spec, const CodecStats& stats) {
    return CodecResult{compress::describe(spec), stats.wan_raw_bytes, stats.wan_wire_bytes};
  };
  result.wan_activations = codec(r.choices.codecs.wan_activations, work.activation_codec);
  result.wan_gradients = codec(r.choices.codecs.wan_gradients, work.gradient_codec);
  // A codec whose encoding is larger than what it encodes (powersgd of a rank near the
  // matrix's, topk of a large fraction: values and indices) multiplies the WAN traffic.
  for (const auto& [key, c] : {std::pair{"compression.wan_activations", &result.wan_activations},
                               std::pair{"compression.wan_gradients", &result.wan_gradients}})
    if (c->wan_wire_bytes > c->wan_raw_bytes && c->wan_raw_bytes > 0) {
      char times[32];
      std::snprintf(times, sizeof times, "%.2fx", c->wan_wire_bytes / c->wan_raw_bytes);
      result.warnings.push_back(
          std::string(key) + ": " + c->codec + " sends " +
          core::human_size(core::Bytes(c->wan_wire_bytes)) + " over the WAN where the data is " +
          core::human_size(core::Bytes(c->wan_raw_bytes)) + " uncompressed (" + times +
          "): it expands the traffic it should shrink; choose a smaller rank or fraction, or "
          "none");
    }
  result.codec_time_s = totals.codec_s / iterations;
  add_provenance(r, iterations, result);
  result.simulator = {core::to_string(fidelity),
                      core::to_string(s.simulation.network_model),
                      static_cast<double>(graph.size()),
                      static_cast<double>(graph.edge_count()),
                      static_cast<double>(totals.activities),
                      static_cast<double>(totals.phases_played),
                      simgrid_version().text()};
  return child_output(result, graph, graph_bytes, totals, wall_start, diags);
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

// The value a child gave, from `read` (what it wrote, read to its end) and then reaped; or
// why it gave none.
core::Json isolated_value(const std::function<std::string()>& read) {
  std::string text;
  try {
    text = read();
  } catch (const core::ChildHitLimit& e) {
    throw std::runtime_error(e.what());
  } catch (const core::ChildFailed& e) {
    throw std::runtime_error(std::string(e.what()) +
                             " before giving a result (a bug in hgsim: please report it)");
  }
  if (text.empty()) throw std::runtime_error("the simulator process gave no result");
  core::Json out = core::Json::parse(text);
  if (out.contains("failure")) throw std::runtime_error(out["failure"].get<std::string>());
  return out["value"];
}

core::Json finish_isolated(core::Child child) {
  return isolated_value([&child] { return core::finish_child(child); });
}

}  // namespace

core::Json run_isolated(const std::function<core::Json()>& body) {
  return finish_isolated(start_isolated(body));
}

std::vector<IsolatedResult> run_isolated_all(const std::vector<std::function<core::Json()>>& bodies,
                                             int jobs, const StopRule& stop) {
  std::vector<IsolatedResult> results(bodies.size());
  std::vector<bool> ended(bodies.size(), false);
  std::size_t succeeded = 0;
  // Thrown by the tick to end run_children early (it kills the children in flight).
  struct Stop {};
  const bool may_stop = stop.deadline.has_value();
  const auto tick = [&] {
    if (succeeded >= stop.min_succeeded && std::chrono::steady_clock::now() >= *stop.deadline)
      throw Stop{};
  };
  try {
    // A slot goes to the next body as soon as any child in flight ends, not when the one
    // started first does: a long simulation never holds the slots the short ones free.
    core::run_children(
        bodies.size(), jobs,
        [&](std::size_t i) -> std::optional<core::Child> {
          if (may_stop) tick();
          try {
            return start_isolated(bodies[i]);
          } catch (const std::exception& e) {
            results[i].failure = e.what();
            ended[i] = true;
            return std::nullopt;
          }
        },
        [&](std::size_t i, core::Child child, std::string text) {
          ended[i] = true;
          try {
            results[i].value =
                isolated_value([&] { return core::reap_child(child, std::move(text)); });
            ++succeeded;
          } catch (const std::exception& e) {
            results[i].failure = e.what();
          }
        },
        may_stop ? std::function<void()>(tick) : std::function<void()>(), may_stop ? 200 : -1);
  } catch (const Stop&) {
    for (std::size_t i = 0; i < bodies.size(); ++i)
      if (!ended[i]) {
        results[i].failure = stop.why;
        results[i].stopped = true;
      }
  }
  return results;
}

namespace {

std::optional<Results> interpret(const core::Json& out, core::Diagnostics& diags,
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
  return results_from_json(out["result"]);
}

// The plan's own choices (recompute, codecs) applied, its GPUs placed: the one model of the
// plan that the planner and the live runner read too (the input's own when check resolved
// it already); nullptr (problems in `diags`) when it cannot be resolved or does not fit in
// memory.
std::shared_ptr<const CheckedPlan> resolve_for_simulation(const SimulationInput& in,
                                                          const SimulationOptions& options,
                                                          core::Diagnostics& diags) {
  auto checked = in.checked ? in.checked
                            : CheckedPlan::resolve(*in.scenario, *in.model, in.compression,
                                                   *in.plan, in.plan_path, diags);
  if (!checked) return nullptr;
  if (!options.allow_oom) check_plan_memory(checked->resolved(), in.plan_path, diags);
  if (diags.has_errors()) return nullptr;
  return checked;
}

}  // namespace

std::optional<Results> simulate(const SimulationInput& in, const SimulationOptions& options,
                                core::Diagnostics& diags, SimulationStats* stats) {
  const auto resolved = resolve_for_simulation(in, options, diags);
  if (!resolved) return std::nullopt;
  core::Json out;
  try {
    out = run_isolated([&] { return run_child(in, *resolved, options); });
  } catch (const std::exception& e) {
    diags.error({}, "", std::string("simulation failed: ") + e.what());
    return std::nullopt;
  }
  return interpret(out, diags, stats);
}

core::Fidelity fidelity_for(const SimulationInput& in, const SimulationOptions& options,
                            core::Diagnostics& diags) {
  const auto resolved = resolve_for_simulation(in, options, diags);
  if (!resolved) return core::Fidelity::automatic;
  const ResolvedPlan& r = resolved->resolved();
  const core::Fidelity asked =
      options.fidelity_from_cli ? options.fidelity : r.scenario->simulation.fidelity;
  if (asked != core::Fidelity::automatic) return asked;
  if (automatic_fidelity(r.gpus_used) == core::Fidelity::folded) return core::Fidelity::folded;
  if (r.plan.outer_sync.enabled()) return core::Fidelity::full;
  WorkloadInput w;
  w.plan = &r;
  w.compute = in.compute;
  w.gpus = cluster_gpus(*r.scenario);
  return full_graph_fits(w) ? core::Fidelity::full : core::Fidelity::folded;
}

std::vector<std::optional<Results>> simulate_all(const std::vector<SimulationInput>& inputs,
                                                 const std::vector<SimulationOptions>& options,
                                                 std::vector<core::Diagnostics>& diags, int jobs,
                                                 const StopRule& stop, std::vector<bool>* stopped) {
  diags.resize(inputs.size());
  if (stopped) stopped->assign(inputs.size(), false);
  std::vector<std::optional<Results>> results(inputs.size());
  std::vector<std::shared_ptr<const CheckedPlan>> resolved(inputs.size());
  std::vector<std::function<core::Json()>> bodies;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    resolved[i] = resolve_for_simulation(inputs[i], options[i], diags[i]);
    if (!resolved[i]) continue;
    bodies.push_back([&, i] { return run_child(inputs[i], *resolved[i], options[i]); });
    which.push_back(i);
  }
  const auto outs = run_isolated_all(bodies, jobs, stop);
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const std::size_t i = which[k];
    if (outs[k].stopped) {
      diags[i].error({}, "", "not simulated: " + outs[k].failure);
      if (stopped) (*stopped)[i] = true;
      continue;
    }
    if (!outs[k].failure.empty()) {
      diags[i].error({}, "", "simulation failed: " + outs[k].failure);
      continue;
    }
    results[i] = interpret(outs[k].value, diags[i], nullptr);
  }
  return results;
}

}  // namespace hgsim::sim
