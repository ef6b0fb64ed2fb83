#include "sim/results.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "core/units.hpp"
#include "sim/iterations.hpp"
#include "sim/uncertainty.hpp"

namespace hgsim::sim {

using core::Json;

namespace {

Json breakdown_json(const Breakdown& b) {
  Json out = Json::object();
  for (int p = 0; p < kParts; ++p)
    out[std::string(to_string(static_cast<Part>(p))) + "_s"] = b.seconds[p];
  return out;
}

Breakdown breakdown_from_json(const Json& j) {
  Breakdown b;
  for (int p = 0; p < kParts; ++p)
    b.seconds[p] = j.value(std::string(to_string(static_cast<Part>(p))) + "_s", 0.0);
  return b;
}

}  // namespace

std::vector<StageBreakdown> stage_breakdowns(const Results& r) {
  std::map<std::pair<int, int>, StageBreakdown> stages;
  for (const DeviceResult& d : r.devices) {
    StageBreakdown& s = stages[{d.pipeline, d.stage}];
    s.pipeline = d.pipeline;
    s.stage = d.stage;
    s.cluster = d.cluster;
    s.gpu = d.gpu;
    ++s.gpus;
    for (int p = 0; p < kParts; ++p) s.breakdown.seconds[p] += d.breakdown.seconds[p];
  }
  std::vector<StageBreakdown> out;
  for (auto& [key, s] : stages) {
    for (double& seconds : s.breakdown.seconds) seconds /= s.gpus;
    out.push_back(s);
  }
  return out;
}

Json to_json(const Results& r) {
  Json devices = Json::array();
  for (const DeviceResult& d : r.devices)
    devices.push_back({{"id", d.id},
                       {"cluster", d.cluster},
                       {"gpu", d.gpu},
                       {"pipeline", d.pipeline},
                       {"stage", d.stage},
                       {"compute_s", d.compute_s},
                       {"comm_exposed_s", d.comm_exposed_s},
                       {"bubble_s", d.bubble_s},
                       {"idle_s", d.idle_s},
                       {"memory",
                        {{"peak_bytes", d.memory_peak_bytes},
                         {"capacity_bytes", d.memory_capacity_bytes},
                         {"fits", d.fits}}},
                       {"breakdown", breakdown_json(d.breakdown)}});
  Json stages = Json::array();
  for (const StageBreakdown& s : stage_breakdowns(r))
    stages.push_back({{"pipeline", s.pipeline},
                      {"stage", s.stage},
                      {"cluster", s.cluster},
                      {"gpu", s.gpu},
                      {"gpus", s.gpus},
                      {"breakdown", breakdown_json(s.breakdown)}});
  Json links = Json::array();
  for (const LinkResult& l : r.links) {
    Json link{{"name", l.name}, {"kind", l.kind}, {"bytes", l.bytes}, {"busy_s", l.busy_s}};
    if (l.flow_cap_bytes_per_s) {
      // A route without latency has no window cap: infinite, which JSON writes as null.
      link["flow_cap_bytes_per_s"] =
          std::isfinite(*l.flow_cap_bytes_per_s) ? Json(*l.flow_cap_bytes_per_s) : Json(nullptr);
      link["max_flows"] = l.max_flows;
      link["bytes_per_s"] = l.bytes_per_s;
    }
    links.push_back(link);
  }
  auto codec = [](const CodecResult& c) {
    return Json{{"codec", c.codec},
                {"wan_raw_bytes", c.wan_raw_bytes},
                {"wan_wire_bytes", c.wan_wire_bytes},
                {"bytes_saved", c.wan_raw_bytes - c.wan_wire_bytes}};
  };
  Json out = r.iterations;
  out["scenario"] = r.scenario;
  out["plan"] = core::plan_to_json(r.plan);
  out["iteration_time_s"] = r.iteration_time_s;
  out["tokens_per_s"] = r.tokens_per_s;
  out["flops"] = {{"model_flops", r.model_flops}, {"hardware_flops", r.hardware_flops}};
  out["model_tflops_per_gpu"] = r.model_tflops_per_gpu;
  out["mfu"] = r.mfu;
  out["mfu_available"] = r.mfu_available;
  out["gpus"] = r.gpus_used;
  out["gpus_used"] = r.gpus_used;
  out["gpus_available"] = r.gpus_available;
  out["devices"] = devices;
  out["stages"] = stages;
  out["links"] = links;
  out["compression"] = {{"wan_activations", codec(r.wan_activations)},
                        {"wan_gradients", codec(r.wan_gradients)},
                        {"codec_time_s", r.codec_time_s}};
  out["warnings"] = r.warnings;
  out["provenance"] = {{"compute", r.compute_provenance},
                       {"compute_model", r.compute_model},
                       {"codec", r.codec_provenance},
                       {"memory", r.memory_provenance},
                       {"network", r.network_provenance},
                       {"iterations", r.iterations_provenance},
                       {"flops",
                        "models/: model FLOPs 6N + attention per token (training_flops without "
                        "recomputation); hardware FLOPs add the recomputed forward"}};
  // How far such predictions have been from measured runs: derived, never stored.
  out["uncertainty"] = uncertainty_json(r.compute_provenance, r.gpus_used);
  out["simulator"] = {{"fidelity", r.simulator.fidelity},
                      {"network_model", r.simulator.network_model},
                      {"graph_nodes", r.simulator.graph_nodes},
                      {"graph_edges", r.simulator.graph_edges},
                      {"activities", r.simulator.activities},
                      {"iterations_played", r.simulator.iterations_played},
                      {"simgrid", r.simulator.simgrid}};
  return out;
}

Results results_from_json(const Json& j) {
  Results r;
  r.scenario = j.at("scenario").get<std::string>();
  core::Diagnostics ignored;  // the plan was written by plan_to_json
  if (auto plan = core::parse_plan(core::from_json(j.at("plan")), "", ignored)) r.plan = *plan;
  r.iteration_time_s = j.at("iteration_time_s");
  r.tokens_per_s = j.at("tokens_per_s");
  r.model_flops = j.at("flops").at("model_flops");
  r.hardware_flops = j.at("flops").at("hardware_flops");
  r.model_tflops_per_gpu = j.at("model_tflops_per_gpu");
  r.mfu = j.at("mfu");
  r.mfu_available = j.at("mfu_available");
  r.gpus_used = j.at("gpus_used");
  r.gpus_available = j.at("gpus_available");
  for (const Json& d : j.at("devices"))
    r.devices.push_back({d.at("id"), d.at("cluster"), d.at("gpu"), d.at("pipeline"), d.at("stage"),
                         d.at("compute_s"), d.at("comm_exposed_s"), d.at("bubble_s"),
                         d.at("idle_s"), d.at("memory").at("peak_bytes"),
                         d.at("memory").at("capacity_bytes"), d.at("memory").at("fits"),
                         breakdown_from_json(d.at("breakdown"))});
  for (const Json& l : j.at("links")) {
    LinkResult link{l.at("name"), l.at("kind"), l.at("bytes"), l.at("busy_s"), {}, 0, 0};
    if (l.contains("flow_cap_bytes_per_s")) {
      const Json& cap = l.at("flow_cap_bytes_per_s");
      link.flow_cap_bytes_per_s =
          cap.is_null() ? std::numeric_limits<double>::infinity() : cap.get<double>();
      link.max_flows = l.at("max_flows");
      link.bytes_per_s = l.at("bytes_per_s");
    }
    r.links.push_back(link);
  }
  auto codec = [](const Json& c) {
    return CodecResult{c.at("codec"), c.at("wan_raw_bytes"), c.at("wan_wire_bytes")};
  };
  const Json& c = j.at("compression");
  r.wan_activations = codec(c.at("wan_activations"));
  r.wan_gradients = codec(c.at("wan_gradients"));
  r.codec_time_s = c.at("codec_time_s");
  for (const Json& w : j.at("warnings")) r.warnings.push_back(w);
  const Json& p = j.at("provenance");
  r.compute_provenance = p.at("compute").get<std::map<std::string, std::string>>();
  r.compute_model = p.at("compute_model");
  r.codec_provenance = p.at("codec");
  r.memory_provenance = p.at("memory");
  r.network_provenance = p.at("network");
  r.iterations_provenance = p.at("iterations");
  const Json& s = j.at("simulator");
  r.simulator = {s.at("fidelity"),
                 s.at("network_model"),
                 s.at("graph_nodes"),
                 s.at("graph_edges"),
                 s.at("activities"),
                 s.at("iterations_played"),
                 ""};
  // Results written before the version was recorded have none.
  if (s.contains("simgrid")) r.simulator.simgrid = s.at("simgrid").get<std::string>();
  // Every other top-level key is sim/iterations.hpp's.
  static const std::set<std::string> own{"scenario",     "plan",           "iteration_time_s",
                                         "tokens_per_s", "flops",          "model_tflops_per_gpu",
                                         "mfu",          "mfu_available",  "gpus",
                                         "gpus_used",    "gpus_available", "devices",
                                         "stages",       "links",          "compression",
                                         "warnings",     "provenance",     "simulator",
                                         "uncertainty"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!own.count(it.key())) r.iterations[it.key()] = it.value();
  return r;
}

namespace {

// The headline's word on where compute times come from: one source when every GPU type
// has the same kind of provenance ("measured:FILE", "calibrated", "estimated"), else each.
std::string compute_source(const Results& r) {
  std::set<std::string> kinds;
  for (const auto& [gpu, source] : r.compute_provenance)
    kinds.insert(source.substr(0, source.find(':')));
  if (kinds.empty() || (kinds.size() == 1 && *kinds.begin() == "estimated"))
    return "estimated from datasheets";
  if (kinds.size() == 1 && *kinds.begin() == "measured") return "from measured profiles";
  if (kinds.size() == 1 && *kinds.begin() == "calibrated") return "from the calibration";
  std::string each;
  for (const auto& [gpu, source] : r.compute_provenance)
    each += (each.empty() ? "" : ", ") + gpu + " " + source.substr(0, source.find(':'));
  return "per GPU: " + each;
}

// Where each stage's iteration goes, a column per part that some stage has (GEMM,
// attention, memory-bound, overhead and bubble always).
std::string format_breakdown(const Results& r) {
  static const std::array<std::pair<Part, const char*>, kParts> columns{{
      {Part::gemm, "GEMM"},
      {Part::attention, "attn"},
      {Part::memory, "mem-bound"},
      {Part::overhead, "overhead"},
      {Part::optimizer, "optim"},
      {Part::codec, "codec"},
      {Part::tp_comm, "TP"},
      {Part::cp_comm, "CP"},
      {Part::pp_comm, "PP"},
      {Part::dp_comm, "DP"},
      {Part::bubble, "bubble"},
  }};
  const std::vector<StageBreakdown> stages = stage_breakdowns(r);
  const double T = r.iteration_time_s;
  if (stages.empty() || T <= 0) return "";
  std::vector<Part> shown;
  for (const auto& [part, name] : columns) {
    const bool always = part == Part::gemm || part == Part::attention || part == Part::memory ||
                        part == Part::overhead || part == Part::bubble;
    const bool some = std::any_of(stages.begin(), stages.end(), [&](const StageBreakdown& s) {
      return s.breakdown[part] >= 0.0005 * T;
    });
    if (always || some) shown.push_back(part);
  }
  std::ostringstream out;
  char cell[64];
  out << "\n  where a GPU's iteration goes (compute by kernel class, exposed comm by class):\n  "
      << "stage   ";
  for (Part p : shown)
    for (const auto& [part, name] : columns)
      if (part == p) {
        std::snprintf(cell, sizeof cell, " %9s", name);
        out << cell;
      }
  out << "\n";
  for (const StageBreakdown& s : stages) {
    const std::string stage = "p" + std::to_string(s.pipeline) + " s" + std::to_string(s.stage);
    std::snprintf(cell, sizeof cell, "  %-8s", stage.c_str());
    out << cell;
    for (Part p : shown) {
      std::snprintf(cell, sizeof cell, " %8.1f%%", 100 * s.breakdown[p] / T);
      out << cell;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace

std::string format_table(const Results& r) {
  std::ostringstream out;
  char line[512];
  const double T = r.iteration_time_s;
  // Names and the provenance list are unbounded: streamed, not into the fixed buffer.
  out << r.scenario << ": one iteration takes " << core::human_duration(core::Seconds(T))
      << (r.iterations.value("iterations_simulated", 1) > 1 ? " on average" : "") << " (simulated, "
      << r.simulator.fidelity << " fidelity; compute " << compute_source(r) << ")\n"
      << "  uncertainty: " << uncertainty_text(r.compute_provenance, r.gpus_used) << "\n";
  std::snprintf(line, sizeof line,
                "  %.0f tokens/s, %.1f model TFLOP/s per GPU (6N + attention, recomputation "
                "not counted), MFU %.1f%% on %d of %d GPUs (%.1f%% of all %d)\n\n",
                r.tokens_per_s, r.model_tflops_per_gpu, 100 * r.mfu, r.gpus_used, r.gpus_available,
                100 * r.mfu_available, r.gpus_available);
  out << line;
  out << format_iterations(to_json(r));
  // One row per (pipeline, stage): the mean over its GPUs.
  struct Row {
    std::string cluster, gpu;
    int gpus = 0;
    double compute = 0, comm = 0, bubble = 0, idle = 0, memory = 0, capacity = 0;
    bool fits = true;
  };
  std::map<std::pair<int, int>, Row> rows;
  for (const DeviceResult& d : r.devices) {
    Row& row = rows[{d.pipeline, d.stage}];
    row.cluster = d.cluster;
    row.gpu = d.gpu;
    ++row.gpus;
    row.compute += d.compute_s;
    row.comm += d.comm_exposed_s;
    row.bubble += d.bubble_s;
    row.idle += d.idle_s;
    row.memory = d.memory_peak_bytes;
    row.capacity = d.memory_capacity_bytes;
    row.fits = row.fits && d.fits;
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
  out << format_breakdown(r);
  bool wan_header = false;
  for (const LinkResult& l : r.links) {
    if (l.kind != "wan" || l.bytes <= 0) continue;
    if (!wan_header)
      out << "\n  WAN link                         moved      busy   one flow at most\n";
    wan_header = true;
    std::snprintf(line, sizeof line, "  %-30s %9s %8.1f%%   %s/s\n", l.name.c_str(),
                  core::human_size(core::Bytes(l.bytes)).c_str(), 100 * l.busy_s / T,
                  core::human_size(core::Bytes(l.flow_cap_bytes_per_s.value_or(0))).c_str());
    out << line;
  }
  const double saved = r.wan_activations.wan_raw_bytes - r.wan_activations.wan_wire_bytes +
                       r.wan_gradients.wan_raw_bytes - r.wan_gradients.wan_wire_bytes;
  if (saved > 0) {
    std::snprintf(line, sizeof line, "\n  compression saved %s on the WAN for %s of codec time\n",
                  core::human_size(core::Bytes(saved)).c_str(),
                  core::human_duration(core::Seconds(r.codec_time_s)).c_str());
    out << line;
  }
  for (const std::string& w : r.warnings) out << "\n  warning: " << w << "\n";
  out << "\n  compute, comm (exposed), bubble and idle are shares of the iteration per GPU.\n"
      << "  Sources: times simulated (" << r.network_provenance << "); compute " << r.compute_model
      << "; memory " << r.memory_provenance << ".\n";
  return out.str();
}

}  // namespace hgsim::sim
