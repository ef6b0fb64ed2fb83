#include "apps/commands.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <string_view>

#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include "apps/cli_checks.hpp"
#include "apps/codecs_command.hpp"
#include "apps/live_command.hpp"
#include "apps/man_page.hpp"
#include "apps/plan_command.hpp"
#include "apps/profile_command.hpp"
#include "apps/results_command.hpp"
#include "apps/run_point.hpp"
#include "apps/sweep_command.hpp"
#include "apps/validate.hpp"
#include "core/files.hpp"
#include "core/process.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/profile.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"
#include "sim/chakra.hpp"
#include "sim/plan_memory.hpp"
#include "sim/simulate.hpp"

#ifndef HGSIM_VERSION
#define HGSIM_VERSION "0.0.0"
#endif

namespace hgsim::apps {
namespace {

using core::Json;

// ---- output helpers ----------------------------------------------------------------------

// A plain text table: columns padded to their widest cell; numeric columns right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, const std::string& indent = "") const {
    std::vector<std::size_t> width(rows_.front().size(), 0);
    for (const auto& row : rows_)
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      std::string line = indent;
      for (std::size_t i = 0; i < rows_[r].size(); ++i) {
        const std::string& cell = rows_[r][i];
        bool numeric = r > 0 && !cell.empty() &&
                       (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-');
        std::string pad(width[i] - cell.size(), ' ');
        line += numeric ? pad + cell : cell + pad;
        if (i + 1 < rows_[r].size()) line += "  ";
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out << line << "\n";
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// 6738415616 -> "6.74B"
std::string count_text(double n) {
  if (n >= 1e9) return fixed(n / 1e9, 2) + "B";
  if (n >= 1e6) return fixed(n / 1e6, 1) + "M";
  return fixed(n, 0);
}

std::string tflops(const std::optional<core::FlopsPerSecond>& rate) {
  return rate ? core::shortest_decimal(std::round(rate->value() / 1e9) / 1e3) : "-";
}

void emit_yaml(YAML::Emitter& y, const Json& j) {
  if (j.is_object()) {
    y << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      y << YAML::Key << k << YAML::Value;
      emit_yaml(y, v);
    }
    y << YAML::EndMap;
  } else if (j.is_array()) {
    bool scalars = std::all_of(j.begin(), j.end(), [](const Json& v) { return v.is_primitive(); });
    y << (scalars ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (const auto& v : j) emit_yaml(y, v);
    y << YAML::EndSeq;
  } else if (j.is_string()) {
    y << j.get<std::string>();
  } else if (j.is_null()) {
    y << YAML::Null;
  } else {
    y << j.dump();
  }
}

std::string to_yaml(const Json& j) {
  YAML::Emitter y;
  emit_yaml(y, j);
  return std::string(y.c_str()) + "\n";
}

Json diagnostics_json(const core::Diagnostics& diags) {
  Json out = Json::array();
  for (const core::Diagnostic& d : diags.all()) {
    out.push_back({{"severity", d.severity == core::Severity::error ? "error" : "warning"},
                   {"file", d.where.file},
                   {"line", d.where.line},
                   {"column", d.where.column},
                   {"key", d.key_path},
                   {"message", d.message},
                   {"hint", d.hint}});
  }
  return out;
}

// Prints the diagnostics for a person (stderr), or as JSON (stdout) with --json.
void report(const core::Diagnostics& diags, bool json, std::ostream& out, std::ostream& err) {
  if (json) {
    // A file name need not be UTF-8: replaced, never thrown on.
    out << Json{{"valid", !diags.has_errors()}, {"diagnostics", diagnostics_json(diags)}}.dump(
               2, ' ', false, Json::error_handler_t::replace)
        << "\n";
    return;
  }
  err << diags.format();
  if (diags.has_errors())
    err << diags.error_count() << " error" << (diags.error_count() == 1 ? "" : "s") << ", "
        << diags.warning_count() << " warning" << (diags.warning_count() == 1 ? "" : "s") << "\n";
}

int report_bad_input(const core::Diagnostics& diags, bool json, std::ostream& out,
                     std::ostream& err) {
  report(diags, json, out, err);
  return kBadInput;
}

// ---- hgsim check -------------------------------------------------------------------------

// The FLOPs of one iteration, labelled by what they count: the model's (6N + attention per
// token: what model TFLOP/s and MFU count) and, with recomputation, what the GPUs run.
// PFLOP to three significant digits (0.0131, 48.3), whole above 100 (18024).
std::string pflop(const core::Flops& work) {
  const double v = work.value() / 1e15;
  if (v >= 100) return fixed(v, 0);
  std::ostringstream s;
  s << std::setprecision(3) << v;
  return s.str();
}

std::string flops_text(const core::Flops& model_flops, const core::Flops& hardware_flops,
                       core::Recompute recompute, const std::string& whose) {
  std::string out =
      pflop(model_flops) + " PFLOP per iteration [models/: model FLOPs, 6N + attention per token]";
  if (recompute == core::Recompute::none) return out;
  return out + "; the GPUs run " + pflop(hardware_flops) + " PFLOP with " + whose + " recompute " +
         to_string(recompute) + " (the recomputed forwards)";
}

// The plan's own choices, as the check resolved them (sim::PlanChoices): what the
// simulation plays, whether the plan makes a choice or leaves it to the scenario.
void print_plan_choices(const sim::CheckedPlan& checked, std::ostream& out) {
  const core::Plan& plan = checked.resolved().plan;
  const sim::PlanChoices& choices = checked.resolved().choices;
  out << "Plan      " << to_string(plan.schedule) << ", micro-batch " << plan.micro_batch
      << (plan.virtual_stages > 1 ? ", " + std::to_string(plan.virtual_stages) + " virtual stages"
                                  : "")
      << ", grad sync " << to_string(plan.grad_sync.algorithm) << " (bucket "
      << core::format_size(plan.grad_sync.bucket) << ")\n";
  out << "  choices: recompute " << to_string(choices.recompute) << ", ZeRO " << choices.zero
      << ", sequence parallel " << (choices.sequence_parallel ? "on" : "off") << ", grad reduce "
      << to_string(choices.grad_reduce) << ", tp comm overlap "
      << (choices.tp_comm_overlap ? "on" : "off") << "\n";
  out << "  codecs: WAN activations " << compress::describe(choices.codecs.wan_activations)
      << ", WAN gradients " << compress::describe(choices.codecs.wan_gradients);
  if (plan.outer_sync.enabled())
    out << ", outer sync " << compress::describe(choices.outer_sync_codec) << " (every "
        << plan.outer_sync.inner_steps << " steps, " << plan.outer_sync.fragments << " fragment"
        << (plan.outer_sync.fragments == 1 ? "" : "s") << ")";
  out << "\n  [the plan's own where it makes them, else the scenario's: what hgsim run plays]\n";
}

void print_plan_stages(const CheckedScenario& c, const sim::CheckedPlan& checked,
                       std::ostream& out) {
  const core::Plan& plan = checked.resolved().plan;
  Table stages({"pipeline", "replicas", "stage", "cluster", "gpu", "tp", "dp", "layers",
                "in flight", "params/GPU", "memory/GPU", "of", "fits"});
  for (std::size_t pi = 0; pi < plan.pipelines.size(); ++pi) {
    const core::Pipeline& p = plan.pipelines[pi];
    for (std::size_t si = 0; si < p.stages.size(); ++si) {
      const core::Stage& st = p.stages[si];
      const kernels::GpuSpec* gpu = &kernels::gpu_of(c.scenario.cluster(st.cluster).gpu);
      const sim::StageFigures& f = checked.stage(static_cast<int>(pi), static_cast<int>(si));
      stages.add({si == 0 ? std::to_string(pi) : "", si == 0 ? std::to_string(p.replicas) : "",
                  std::to_string(si), st.cluster, gpu->name, std::to_string(st.tp),
                  std::to_string(st.dp) + (st.cp > 1 ? " cp" + std::to_string(st.cp) : ""),
                  std::to_string(st.layers), std::to_string(f.micro_batches_in_flight),
                  count_text(f.parameters), core::human_size(f.memory.total),
                  core::human_size(gpu->memory), f.memory.total <= gpu->memory ? "yes" : "NO"});
    }
  }
  stages.print(out, "  ");
  out << "  in flight: micro-batches (x model chunks) whose activations the stage holds at its "
         "peak under the schedule\n"
         "  memory/GPU: weights, gradients and optimizer state (ZeRO-sharded) plus those "
         "activations"
      << (plan.outer_sync.enabled() ? ", plus DiLoCo's fp32 snapshot and outer momentum" : "")
      << "\n  [models/: Korthikanti et al. 2022, ZeRO; an estimate, not a measurement]\n";
}

void print_summary(const CheckedPoint& point, std::size_t points, std::ostream& out) {
  const CheckedScenario& c = point.checked;
  const core::Scenario& s = c.scenario;
  const core::ModelConfig& m = c.model;
  const double params = models::parameter_count(m);
  const double tokens = double(s.training.global_batch) * s.training.seq_len;
  // An explicit plan's FLOPs are its own (its recomputation); strategy: auto's the scenario's.
  std::string flops;
  if (c.plan) {
    const sim::PlanFigures& f = c.plan->figures();
    flops = flops_text(f.model_flops, f.hardware_flops, c.plan->resolved().choices.recompute,
                       "the plan's");
  } else {
    flops = flops_text(models::training_flops(m, s.training.global_batch, s.training.seq_len,
                                              core::Recompute::none),
                       models::training_flops(m, s.training.global_batch, s.training.seq_len,
                                              s.training.recompute),
                       s.training.recompute, "the scenario's");
  }

  out << "Scenario  " << s.name << "  (" << s.source_file << ")\n";
  if (points > 1) {
    // Every figure below is this point's, not the scenario's as written.
    out << "          sweep point 0 of " << points << ":";
    for (const auto& [key, value] : point.settings) out << " " << key << "=" << value;
    out << " (the figures below are this point's; hgsim sweep --list shows every point)\n";
  }
  out << "Model     " << m.name << ": " << m.layers << " layers, hidden " << m.hidden << ", "
      << m.heads << " heads (" << m.kv_heads << " kv), ffn " << m.ffn_hidden << ", vocab "
      << m.vocab << "; " << count_text(params) << " parameters [models/: computed]\n";
  out << "Training  " << s.training.global_batch << " sequences x " << s.training.seq_len
      << " tokens = " << fixed(tokens / 1e6, 2) << "M tokens per iteration; "
      << to_string(s.training.precision) << ", " << to_string(s.training.optimizer)
      << ", recompute " << to_string(s.training.recompute) << "\n          " << flops << "\n\n";

  Table clusters({"cluster", "gpu", "gpus", "peak/GPU " + to_string(s.training.precision),
                  "memory/GPU", "nvlink", "nic"});
  double total_peak = 0;
  for (const core::Cluster& cl : s.clusters) {
    const kernels::GpuSpec* gpu = &kernels::gpu_of(cl.gpu);
    auto rate = kernels::math_rate(*gpu, s.training.precision);
    total_peak += rate ? rate->rate.value() * cl.gpu_count() : 0;
    clusters.add({cl.name, gpu->name,
                  std::to_string(cl.gpu_count()) + " (" + std::to_string(cl.nodes) + "x" +
                      std::to_string(cl.gpus_per_node) + ")",
                  (rate ? core::human_compute_rate(rate->rate) : "-") +
                      (rate && !rate->native ? " (emulated)" : ""),
                  core::human_size(gpu->memory), core::human_bandwidth(cl.nvlink.bandwidth),
                  core::human_bandwidth(cl.nic.bandwidth)});
  }
  clusters.print(out);
  out << "  " << s.total_gpus() << " GPUs, " << fixed(total_peak / 1e15, 2)
      << " PFLOPS peak together [kernels/gpus.yaml: datasheet]\n";
  for (const core::WanLink& w : s.wan)
    out << "  WAN " << w.from << " <-> " << w.to << ": " << core::human_bandwidth(w.bandwidth)
        << (w.reverse_bandwidth ? " (back " + core::human_bandwidth(*w.reverse_bandwidth) + ")"
                                : "")
        << ", " << core::human_duration(w.latency) << (w.trace.empty() ? "" : ", trace " + w.trace)
        << "\n";
  out << "  compression (the scenario's): WAN activations "
      << compress::describe(c.compression.wan_activations) << ", WAN gradients "
      << compress::describe(c.compression.wan_gradients) << "\n\n";

  if (s.strategy.automatic) {
    out << "Strategy  auto: the planner chooses (hgsim plan)\n";
    if (s.planner.allows_diloco()) {
      out << "          it may choose DiLoCo outer sync between pipelines on disjoint clusters, "
             "H in {";
      for (std::size_t k = 0; k < s.planner.inner_steps.size(); ++k)
        out << (k ? ", " : "") << s.planner.inner_steps[k];
      out << "}, fragments in {";
      for (std::size_t k = 0; k < s.planner.fragments.size(); ++k)
        out << (k ? ", " : "") << s.planner.fragments[k];
      out << "}; plans are ranked by time to the same progress with a DiLoCo token worth "
          << s.planner.diloco_token_efficiency << " of a synchronous one ("
          << core::diloco_token_efficiency_source(s) << ")\n";
    }
  } else if (c.plan) {
    print_plan_choices(*c.plan, out);
    print_plan_stages(c, *c.plan, out);
  }
  if (points > 1) out << "\nSweep     " << points << " points (hgsim sweep --list shows them)\n";
  out << "\nThis summary uses only datasheet figures and closed-form model math; hgsim run "
         "simulates the iteration.\n";
}

// An explicit plan that does not fit in memory: the verdict `hgsim run` gives it
// (sim::check_plan_memory), an error; a sweep point's a warning naming it, since `hgsim
// sweep` records that point as failed and runs the others.
void check_point_memory(const CheckedPoint& p, core::Diagnostics& diags) {
  const CheckedScenario& c = p.checked;
  // A scenario with errors (an unknown GPU among them) has no memory verdict to give.
  if (c.scenario.strategy.automatic || diags.has_errors()) return;
  // The plan the check resolved and kept (a plan it could not resolve, it reported).
  const auto plan = c.own_plan();
  if (!plan) return;
  core::Diagnostics memory;
  if (sim::check_plan_memory(plan->resolved(), "strategy", memory)) return;
  std::string label;
  for (const auto& [setting, value] : p.settings)
    label += (label.empty() ? "" : ", ") + setting + "=" + value;
  for (const core::Diagnostic& d : memory.all()) {
    if (label.empty()) {
      diags.error(d.where, d.key_path, d.message, d.hint);
      continue;
    }
    diags.warning(d.where, d.key_path,
                  d.message + " (sweep point " + label + ": hgsim sweep records it as failed)",
                  d.hint);
  }
}

int cmd_check(const std::string& path, bool json, bool summary, std::ostream& out,
              std::ostream& err) {
  core::Diagnostics diags;
  // Every point is checked, one at a time; only the first is kept (what --json and
  // --summary show).
  std::optional<CheckedPoint> first;
  const auto points = check_scenario_file_each(path, diags, [&](std::size_t, CheckedPoint& p) {
    check_point_memory(p, diags);
    if (!first) first = std::move(p);
  });
  if (!points || !first || diags.has_errors()) return report_bad_input(diags, json, out, err);
  if (json) {
    Json result{{"valid", true},
                {"diagnostics", diagnostics_json(diags)},
                {"sweep_points", *points},
                {"scenario", core::scenario_to_json(first->checked.scenario)}};
    out << result.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
    return kSuccess;
  }
  err << diags.format();
  if (summary) {
    print_summary(*first, *points, out);
    return kSuccess;
  }
  out << "# " << core::path_excerpt(path) << ": valid";
  if (*points > 1) out << ", " << *points << " sweep points";
  out << "; the scenario with every default filled in:\n";
  core::Scenario s = first->checked.scenario;
  if (*points > 1 || !first->settings.empty()) {
    // Show the scenario as written, not its first sweep point.
    core::Diagnostics ignored;
    if (auto written = core::load_scenario(path, ignored)) s = *written;
  }
  out << to_yaml(core::scenario_to_json(s));
  return kSuccess;
}

// ---- hgsim models / gpus -----------------------------------------------------------------

int cmd_models(bool json, std::ostream& out) {
  if (json) {
    Json list = Json::array();
    for (const models::ZooEntry& e : models::zoo()) {
      const core::ModelConfig& m = e.config;
      list.push_back({{"name", m.name},
                      {"params", models::parameter_count(m)},
                      {"published_params", e.published_params},
                      {"layers", m.layers},
                      {"hidden", m.hidden},
                      {"heads", m.heads},
                      {"kv_heads", m.kv_heads},
                      {"ffn_hidden", m.ffn_hidden},
                      {"vocab", m.vocab},
                      {"activation", to_string(m.activation)},
                      {"norm", to_string(m.norm)},
                      {"max_positions", m.max_positions},
                      {"tied_embeddings", m.tied_embeddings},
                      {"aliases", e.aliases},
                      {"source", e.source}});
    }
    out << Json{{"models", list}}.dump(2) << "\n";
    return kSuccess;
  }
  Table t({"name", "params", "published", "layers", "hidden", "heads", "kv", "ffn", "vocab", "mlp",
           "positions"});
  for (const models::ZooEntry& e : models::zoo()) {
    const core::ModelConfig& m = e.config;
    t.add({m.name, count_text(models::parameter_count(m)), count_text(e.published_params),
           std::to_string(m.layers), std::to_string(m.hidden), std::to_string(m.heads),
           std::to_string(m.kv_heads), std::to_string(m.ffn_hidden), std::to_string(m.vocab),
           to_string(m.activation),
           m.max_positions > 0 ? "learned " + std::to_string(m.max_positions) : "rotary"});
  }
  t.print(out);
  out << "\nparams: computed by models/ from the shapes; published: the source's figure (hgsim "
         "models --json).\n";
  return kSuccess;
}

// The kernel model's efficiency curves (validation/compute.md prints them beside their
// sources): GEMM efficiency over shapes, FlashAttention's over sequence lengths.
int print_efficiency_curves(std::ostream& out) {
  const char* gpus[] = {"A100-80GB-SXM", "H100-80GB-SXM", "V100-32GB-SXM", "L40S-48GB"};
  struct Shape {
    const char* what;
    double m, n, k;
  };
  const Shape shapes[] = {
      {"square 512", 512, 512, 512},
      {"square 1024", 1024, 1024, 1024},
      {"square 2048", 2048, 2048, 2048},
      {"square 4096", 4096, 4096, 4096},
      {"square 8192", 8192, 8192, 8192},
      {"square 16384", 16384, 16384, 16384},
      {"GPT-3 175B QKV, tp 8, 2048 tokens", 2048, 4608, 12288},
      {"GPT-3 175B MLP up, tp 8, 2048 tokens", 2048, 6144, 12288},
      {"GPT-3 175B MLP down, tp 8, 2048 tokens", 2048, 12288, 6144},
      {"hidden 1024 QKV, tp 8, 2048 tokens", 2048, 384, 1024},
      {"hidden 1024 MLP up, tp 1, 2048 tokens", 2048, 4096, 1024},
      {"hidden 1024 wgrad QKV, tp 8, 2048 tokens", 1024, 384, 2048},
  };
  out << "### GEMM efficiency (fraction of the dense bf16 peak), `KernelModel`\n\n| shape (m x n x "
         "k) |";
  for (const char* g : gpus) out << " " << g << " |";
  out << "\n|---|";
  for (std::size_t i = 0; i < std::size(gpus); ++i) out << "---:|";
  out << "\n";
  for (const Shape& s : shapes) {
    out << "| " << s.what << " (" << s.m << " x " << s.n << " x " << s.k << ") |";
    for (const char* name : gpus) {
      const kernels::GpuSpec& g = kernels::gpu_of(name);
      const auto& costs = kernels::kernel_costs_for(g.architecture);
      out << " " << fixed(kernels::gemm_efficiency(g, costs, s.m, s.n, s.k), 3) << " |";
    }
    out << "\n";
  }
  out << "\n### FlashAttention efficiency on executed FLOPs, head dimension 128, 16 heads, "
         "16k tokens per batch\n\n| sequence |";
  for (const char* g : gpus) out << " " << g << " fwd | bwd |";
  out << "\n|---:|";
  for (std::size_t i = 0; i < std::size(gpus); ++i) out << "---:|---:|";
  out << "\n";
  for (double seq : {512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
    out << "| " << seq << " |";
    for (const char* name : gpus) {
      const kernels::GpuSpec& g = kernels::gpu_of(name);
      const auto& costs = kernels::kernel_costs_for(g.architecture);
      for (bool backward : {false, true})
        out << " "
            << fixed(kernels::attention_efficiency(g, costs, 16384 / seq, 16, seq, backward), 3)
            << " |";
    }
    out << "\n";
  }
  return kSuccess;
}

int cmd_gpus(bool json, bool curves, std::ostream& out) {
  if (curves) return print_efficiency_curves(out);
  if (json) {
    auto opt = [](const auto& q) { return q ? Json(q->value()) : Json(nullptr); };
    Json list = Json::array();
    for (const kernels::GpuSpec& g : kernels::gpu_catalog())
      list.push_back({{"name", g.name},
                      {"aliases", g.aliases},
                      {"architecture", kernels::to_string(g.architecture)},
                      {"memory_bytes", g.memory.value()},
                      {"memory_bandwidth_bytes_per_s", g.memory_bandwidth.value()},
                      {"nvlink_bandwidth_total_bytes_per_s", opt(g.nvlink_bandwidth_total)},
                      {"peak_flops_per_s",
                       {{"fp32", opt(g.peak_fp32)},
                        {"tf32", opt(g.peak_tf32)},
                        {"fp16", opt(g.peak_fp16)},
                        {"bf16", opt(g.peak_bf16)},
                        {"fp8", opt(g.peak_fp8)}}},
                      {"source", g.source}});
    out << Json{{"gpus", list}}.dump(2) << "\n";
    return kSuccess;
  }
  Table t({"name", "arch", "memory", "mem BW", "NVLink", "fp32", "tf32", "fp16", "bf16", "fp8"});
  for (const kernels::GpuSpec& g : kernels::gpu_catalog())
    t.add({g.name, kernels::to_string(g.architecture), core::human_size(g.memory),
           core::human_bandwidth(g.memory_bandwidth),
           g.nvlink_bandwidth_total ? core::human_bandwidth(*g.nvlink_bandwidth_total) : "-",
           tflops(g.peak_fp32), tflops(g.peak_tf32), tflops(g.peak_fp16), tflops(g.peak_bf16),
           tflops(g.peak_fp8)});
  t.print(out);
  out << "\nPeaks in TFLOPS, dense (no sparsity); NVLink total of both directions; memory in "
         "binary units,\n"
         "bandwidths in bits per second (as hgsim check --summary). Datasheet figures: the\n"
         "source of each row, and the figures derived or not confirmed, are in kernels/gpus.yaml "
         "(hgsim gpus --json).\n";
  return kSuccess;
}

// ---- hgsim run ---------------------------------------------------------------------------

// `hgsim run --plot FILE`: the iteration's figure, drawn by the Python module (hgsim.plots)
// from the results and the trace.
int plot_run(const std::string& scenario, const core::Json& result, const std::string& trace,
             const std::string& plot_file, std::ostream& out, std::ostream& err) {
  const core::TemporaryFile result_file("hgsim-run", ".json");
  if (const auto why = core::write_file_atomically(result_file.path(), result.dump())) {
    err << "hgsim: " << *why << "\n";
    return kBadInput;
  }
  const int status = run_python({"hgsim.plots",
                                 {"run", "--result", result_file.path(), "--trace", trace,
                                  "--scenario", scenario, "--out", plot_file}},
                                out, err);
  return status == 0 ? kSuccess : kBadInput;
}

// hgsim run SCENARIO --chakra PREFIX: the trace on the scenario's GPUs and links.
// The trace is --chakra's, else the scenario's workload.chakra.
int run_chakra(const core::Scenario& scenario, const RunOptions& options, bool json,
               std::ostream& out, std::ostream& err) {
  core::Diagnostics diags;
  const std::string& prefix =
      options.chakra_trace.empty() ? scenario.workload_chakra : options.chakra_trace;
  const auto result = sim::simulate_chakra(scenario, prefix, diags, options.reprice);
  if (!result) return report_bad_input(diags, json, out, err);
  if (json) {
    out << result->dump(2) << "\n";
    return kSuccess;
  }
  out << "chakra trace " << prefix << " on " << scenario.name << ": "
      << (*result)["ranks"].get<int>() << " ranks, " << (*result)["chakra_nodes"] << " nodes, "
      << (*result)["collectives"] << " collectives, " << (*result)["transfers"]
      << " send/receive pairs";
  if (options.reprice) out << ", " << (*result)["repriced"] << " compute nodes repriced";
  out << "\niteration time "
      << core::human_duration(core::Seconds(result->at("iteration_time_s").get<double>()))
      << " (simulated by SimGrid " << result->at("simulator").at("simgrid").get<std::string>()
      << ", every rank, collectives as "
      << result->at("simulator").at("collectives").get<std::string>()
      << " on the scenario's links; compute: "
      << result->at("compute_provenance").get<std::string>() << ")\n";
  return kSuccess;
}

int cmd_run(const std::string& path, RunOptions options, const std::string& plot_file, bool json,
            std::ostream& out, std::ostream& err) {
  core::Diagnostics diags;
  // What --plot can be is known before the simulation runs.
  if (!plot_file.empty()) {
    const std::filesystem::path p(plot_file);
    std::error_code ec;
    if (p.extension() != ".png" && p.extension() != ".svg")
      diags.error({}, "--plot",
                  "'" + core::excerpt(plot_file) + "': expected FILE.png or FILE.svg");
    else if (const auto dir = p.parent_path();
             !dir.empty() && !std::filesystem::is_directory(dir, ec))
      diags.error({}, "--plot",
                  "'" + core::excerpt(plot_file) + "': no folder '" + core::excerpt(dir.string()) +
                      "' to write it in");
    if (diags.has_errors()) return report_bad_input(diags, json, out, err);
  }
  std::optional<CheckedPoint> point;
  const auto points = check_scenario_file_each(path, diags, [&](std::size_t, CheckedPoint& p) {
    if (!point) point = std::move(p);
  });
  if (!points || !point) return report_bad_input(diags, json, out, err);
  if (*points > 1) {
    diags.error(point->checked.scenario.where("sweep"), "sweep",
                "the scenario has a sweep of " + std::to_string(*points) +
                    " points; hgsim run simulates one",
                "use hgsim sweep " + core::path_excerpt(path) + " to run every point");
    return report_bad_input(diags, json, out, err);
  }
  // The figure's WAN time series comes from the trace: unless --trace, a temporary one of
  // the WAN tracks alone (the whole trace of a 32-GPU run is 800 MB, which Python read in
  // minutes).
  std::optional<core::TemporaryFile> temporary_trace;
  if (!plot_file.empty() && options.sim.trace_path.empty()) {
    temporary_trace.emplace("hgsim-run-trace", ".json");
    options.sim.trace_path = temporary_trace->path();
    options.sim.trace_filter.wan_only = true;
  }
  if (!options.chakra_trace.empty() || !point->checked.scenario.workload_chakra.empty())
    return run_chakra(point->checked.scenario, options, json, out, err);
  if (options.reprice) {
    diags.error({}, "--reprice", "--reprice prices a Chakra trace's compute nodes",
                "give --chakra PREFIX, or a scenario with workload: {chakra: PREFIX}");
    return report_bad_input(diags, json, out, err);
  }
  auto result = simulate_point(point->checked, options, diags);
  if (!result) return report_bad_input(diags, json, out, err);
  err << diags.format();
  for (const std::string& w : result->warnings) err << "hgsim: warning: " << w << "\n";
  if (json)
    out << sim::to_json(*result).dump(2) << "\n";
  else
    out << sim::format_table(*result);
  if (plot_file.empty()) return kSuccess;
  return plot_run(path, sim::to_json(*result), options.sim.trace_path, plot_file, out, err);
}

// ---- the command line --------------------------------------------------------------------

// What the commands' options and flags are parsed into.
struct CliArgs {
  std::string scenario;
  bool json = false;
  bool summary = false;  // check --summary
  bool curves = false;   // gpus --efficiency
  RunOptions run;
  std::string run_plot;
  PlanCommandOptions plan;
  SweepOptions sweep;
  ResultsOptions results;
  CodecsOptions codecs;
  ProfileOptions profile;
};

// The commands hgsim parses itself (plot, live and validate go to Python).
struct Commands {
  CLI::App* check = nullptr;
  CLI::App* models = nullptr;
  CLI::App* gpus = nullptr;
  CLI::App* run = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* sweep = nullptr;
  CLI::App* results = nullptr;
  CLI::App* codecs = nullptr;
  CLI::App* profile = nullptr;
};

// check, models and gpus: the scenario and the catalogs, no simulation.
void add_catalog_commands(CLI::App& app, CliArgs& args, Commands& commands) {
  CLI::App* check =
      app.add_subcommand("check", "Validate a scenario and print it with defaults filled in");
  check->add_option("SCENARIO", args.scenario, "scenario file (YAML, or JSON)")->required();
  CLI::Option* check_json =
      check->add_flag("--json", args.json, "print the result (or the problems) as JSON");
  check
      ->add_flag("--summary", args.summary,
                 "print a human-readable summary instead of the normalized scenario (of sweep "
                 "point 0 for a sweep; not with --json)")
      ->excludes(check_json);
  commands.check = check;

  commands.models = app.add_subcommand("models", "List the model zoo");
  commands.models->add_flag("--json", args.json, "print as JSON");

  CLI::App* gpus = app.add_subcommand("gpus", "List the GPU catalog (datasheet figures)");
  CLI::Option* gpus_json = gpus->add_flag("--json", args.json, "print as JSON");
  gpus->add_flag("--efficiency", args.curves,
                 "print the compute model's GEMM and attention efficiency curves (markdown; "
                 "not with --json)")
      ->excludes(gpus_json);
  commands.gpus = gpus;
}

CLI::App* add_run_command(CLI::App& app, CliArgs& args) {
  RunOptions& o = args.run;
  CLI::App* run = app.add_subcommand("run", "Simulate one training iteration of a plan");
  run->add_option("SCENARIO", args.scenario, "scenario file")->required();
  run->add_flag("--json", args.json,
                "print the results as JSON (the contract in sim/simulate.hpp)");
  run->add_option("--plan", o.plan_file,
                  "a plan file (JSON or YAML) to run instead of the scenario's strategy")
      ->check(non_empty_path());
  run->add_option("--fidelity", o.fidelity,
                  "full (every GPU and transfer), folded (identical groups once) or auto "
                  "(full up to " +
                      std::to_string(sim::full_fidelity_max_gpus) + " GPUs and " +
                      std::to_string(sim::full_fidelity_max_graph_nodes) +
                      " graph nodes); overrides simulation.fidelity")
      ->check(CLI::IsMember({"full", "folded", "auto"}));
  run->add_option("--collectives", o.collectives,
                  "steps (every step of a ring or tree its own transfers) or pipelined (the flows "
                  "NCCL keeps in flight, one per edge); overrides simulation.collectives")
      ->check(CLI::IsMember({"steps", "pipelined"}));
  CLI::Option* op_profiles =
      run->add_option("--profile", o.profiles,
                      "measured profile JSON (hgsim profile); repeatable; default: the profiles in "
                      "kernels/profiles/")
          ->check(non_empty_path());
  run->add_option("--layer-profile", o.layer_profile,
                  "a layer profile (hgsim-layer-profile/1, what the live profiler measures): "
                  "the compute of the GPU type it measured (every device for a CPU's)")
      ->excludes(op_profiles)
      ->check(non_empty_path());
  run->add_option("--trace", o.sim.trace_path,
                  "write a Chrome trace (opens in Perfetto: ui.perfetto.dev)")
      ->check(non_empty_path());
  run->add_option("--trace-filter", o.trace_filter,
                  "keep only these slices in the trace: cluster=NAME,stage=N,kind=KIND "
                  "(repeat a key for several values)");
  run->add_option("--export-platform", o.sim.platform_path,
                  "write the simulated platform as SimGrid platform XML (its header names the "
                  "fidelity; folded, a host ...xN stands for N GPUs)")
      ->check(non_empty_path());
  run->add_option("--export-graph", o.sim.graph_path,
                  "write the execution graph as JSON (about 230 bytes a node, --stats counts "
                  "them: 0.9 GB for explicit-plan.yaml's 4 M; refused when its disk has less "
                  "free)")
      ->check(non_empty_path());
  run->add_option("--export-chakra", o.sim.chakra_prefix,
                  "write the iteration as MLCommons Chakra ET, PREFIX.<rank>.et per GPU, for "
                  "ASTRA-sim (full fidelity; docs/chakra.md)")
      ->check(non_empty_path());
  run->add_option("--chakra", o.chakra_trace,
                  "simulate the Chakra ET PREFIX.<rank>.et on the scenario's GPUs and links "
                  "instead of a plan (docs/chakra.md)")
      ->check(non_empty_path());
  run->add_flag("--reprice", o.reprice,
                "with a Chakra trace: price each compute node that carries num_ops (FLOPs) "
                "and tensor_size by hgsim's kernel model on its GPU instead of its duration");
  run->add_flag("--stats", o.report_stats,
                "print how long the simulation took and its peak memory (on stderr)");
  run->add_option("--plot", args.run_plot,
                  "draw the iteration (stage time breakdown, WAN throughput over the iteration, "
                  "memory per stage against capacity) into FILE.png or FILE.svg")
      ->check(non_empty_path());
  run->add_flag("--allow-oom", o.sim.allow_oom,
                "simulate a plan even when a stage does not fit in GPU memory");
  return run;
}

CLI::App* add_plan_command(CLI::App& app, CliArgs& args) {
  PlanCommandOptions& o = args.plan;
  CLI::App* plan = app.add_subcommand(
      "plan", "Search a plan, verify the best by simulation, compare with baselines");
  plan->add_option("SCENARIO", args.scenario, "scenario file")->required();
  plan->add_flag("--json", args.json, "print as JSON (best, verified, baselines, search)");
  plan->add_option("--out", o.out_file, "write the plan (runs with hgsim run SCENARIO --plan FILE)")
      ->check(non_empty_path());
  plan->add_flag("--baselines", o.baselines,
                 "also plan and simulate megatron, dp-only, pipeline-uniform, metis-like, dtfm");
  plan->add_option("--time-budget", o.time_budget_s,
                   "seconds for the search and its verification (default 60); past it the "
                   "simulations still running stop, but one candidate always ends")
      ->check(finite_positive(kMaxTimeBudgetS));
  plan->add_option("--verify", o.verify, "how many of the best candidates to simulate (default 3)")
      ->check(integer_in(1, 100));
  plan->add_option("--evaluate", o.evaluate_file,
                   "cost this plan with the analytic model and simulate it (no search): the "
                   "model's error on any plan, with the model's per-stage times")
      ->check(non_empty_path());
  plan->add_flag("--exhaustive", o.exhaustive,
                 "search every dp, cp, shape, order and micro-batch size, and simulate from the "
                 "model's best until its measured error rules out the rest, past --time-budget if need be "
                 "(docs/planner.md)");
  plan->add_flag("--no-compression", o.no_compression,
                 "plan with every WAN codec off (for comparisons; hgsim run uses the scenario's)");
  return plan;
}

// Listed for --help only: run_cli hands them to Python before parsing.
void add_python_commands(CLI::App& app) {
  app.add_subcommand("plot",
                     "Draw a sweep database: DB --x AXIS --y METRIC [--color AXIS] --out "
                     "FILE.png|svg (python3 -m hgsim.plots sweep; arguments pass through)")
      ->allow_extras()
      ->prefix_command();
  app.add_subcommand("live",
                     "Run a plan for real with PyTorch and emulated WAN links "
                     "(python3 -m hgsim_runtime.live; arguments pass through)")
      ->allow_extras()
      ->prefix_command();
  CLI::App* validate = app.add_subcommand("validate", "Compare simulated and live runs");
  validate->require_subcommand(1);
  validate
      ->add_subcommand("live",
                       "Simulate and run live, then compare the traces "
                       "(python3 -m hgsim_runtime.validate; arguments pass through)")
      ->allow_extras()
      ->prefix_command();
}

// ---- usage errors ------------------------------------------------------------------------

// `message` with every argument it repeats that a terminal would act on, or that is long
// (control characters, bytes that are not UTF-8, past 60 characters), quoted as any input is
// (core::excerpt): CLI11 repeats values and flag names as they were typed. The one place a
// usage error is made printable.
std::string quote_arguments(std::string message, int argc, const char* const* argv) {
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    words.emplace_back(arg);
    // "--flag=value" is repeated as its parts.
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      words.emplace_back(arg.substr(0, eq));
      words.emplace_back(arg.substr(eq + 1));
    }
  }
  std::sort(words.begin(), words.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& word : words) {
    const std::string shown = core::excerpt(word);
    if (word.empty() || shown == word) continue;
    const std::string quoted = "'" + shown + "'";
    for (auto at = message.find(word); at != std::string::npos;
         at = message.find(word, at + quoted.size()))
      message.replace(at, word.size(), quoted);
  }
  // Whatever else: escaped, and one line of bounded length.
  message = core::escaped(message);
  constexpr std::size_t kLongest = 400;
  if (message.size() > kLongest) message = message.substr(0, kLongest) + "...";
  return message;
}

// The first word of the command line that is neither an option nor a known subcommand of
// the command that wants one: "hgsim frobnicate", "hgsim validate nosuch". Nullopt when the
// command was not given any.
std::optional<std::string> unknown_subcommand(const CLI::App& command, int argc,
                                              const char* const* argv) {
  int i = 1;
  if (command.get_parent() != nullptr) {
    while (i < argc && argv[i] != command.get_name()) ++i;
    ++i;
  }
  for (; i < argc; ++i)
    if (argv[i][0] != '-') return std::string(argv[i]);
  return std::nullopt;
}

// "hgsim", "hgsim validate", "hgsim validate live".
std::string command_name(const CLI::App& command) {
  if (command.get_parent() == nullptr) return "hgsim";
  return command_name(*command.get_parent()) + " " + command.get_name();
}

// What a usage error says: CLI11's message, but a missing or unknown subcommand named with
// the subcommands there are, and every repeated argument quoted (quote_arguments).
std::string usage_error(const CLI::ParseError& e, const CLI::App& failed, int argc,
                        const char* const* argv) {
  std::string message = e.what();
  if (e.get_name() == "RequiredError" && failed.get_require_subcommand_min() > 0 &&
      failed.get_subcommands().empty()) {
    std::vector<std::string> names;
    for (const CLI::App* sub : failed.get_subcommands([](const CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    const std::string command = command_name(failed);
    if (const auto word = unknown_subcommand(failed, argc, argv))
      return "unknown subcommand '" + core::excerpt(*word) + "' of " + command + "; " +
             core::did_you_mean(*word, names);
    message = (failed.get_parent() == nullptr ? "a subcommand is required"
                                              : command + " needs a subcommand") +
              "; " + core::did_you_mean("", names);
  }
  return quote_arguments(message, argc, argv);
}

// Parses the command line; an exit code when parsing ends the run (--help, --version, a
// usage error), else nothing.
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv,
                                      std::ostream& out, std::ostream& err) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    if (e.get_name() == "CallForVersion") {
      out << "hgsim " << HGSIM_VERSION << "\n";
      return kSuccess;
    }
    // app.help() already shows the subcommand's help when one was named: print it once.
    out << app.help();
    return kSuccess;
  } catch (const CLI::ParseError& e) {
    CLI::App* failed = &app;
    for (CLI::App* sub = &app; sub != nullptr;) {
      CLI::App* next = nullptr;
      for (CLI::App* s : sub->get_subcommands())
        if (s->parsed()) next = s;
      if (next != nullptr) failed = next;
      sub = next;
    }
    err << "hgsim: " << usage_error(e, *failed, argc, argv) << "\n";
    err << "run '" << command_name(*failed) << " --help' for usage\n";
    return kBadInput;
  }
  return std::nullopt;
}

// Runs the command that was parsed.
int run_command(const Commands& c, CliArgs& args, std::ostream& out, std::ostream& err) {
  if (c.check->parsed()) return cmd_check(args.scenario, args.json, args.summary, out, err);
  if (c.models->parsed()) return cmd_models(args.json, out);
  if (c.gpus->parsed()) return cmd_gpus(args.json, args.curves, out);
  if (c.codecs->parsed()) return run_codecs_command(args.codecs, out, err);
  if (c.profile->parsed()) return run_profile_command(args.profile, out, err);
  if (c.sweep->parsed()) return run_sweep_command(args.sweep, out, err);
  if (c.results->parsed()) return run_results_command(args.results, out, err);
  if (c.run->parsed()) return cmd_run(args.scenario, args.run, args.run_plot, args.json, out, err);
  if (c.plan->parsed()) {
    args.plan.json = args.json;
    return cmd_plan(args.scenario, args.plan, out, err);
  }
  return kBadInput;
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  // The live runner's commands pass every argument through untouched (--help included).
  if (const PythonCommand live = python_command(argc, argv); !live.module.empty())
    return exec_python(live, out, err);
  CLI::App app{
      "hgsim: plan and simulate training on heterogeneous GPU clusters joined by slow WAN links"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("hgsim ") + HGSIM_VERSION);
  CliArgs args;
  Commands commands;
  add_catalog_commands(app, args, commands);
  commands.run = add_run_command(app, args);
  commands.plan = add_plan_command(app, args);
  commands.sweep = add_sweep_command(app, args.sweep);
  commands.results = add_results_command(app, args.results);
  add_python_commands(app);
  commands.codecs = add_codecs_command(app, args.codecs);
  commands.profile = add_profile_command(app, args.profile);
  // `hgsim --man`: the manual page, from the definitions above (the build writes hgsim.1 with
  // it). Not a CLI11 flag: the app requires a subcommand, and --help need not list it.
  if (argc == 2 && std::string_view(argv[1]) == "--man") {
    out << man_page(app, HGSIM_VERSION);
    return kSuccess;
  }
  if (const auto exit_code = parse_command_line(app, argc, argv, out, err)) return *exit_code;
  try {
    return run_command(commands, args, out, err);
  } catch (const std::bad_alloc&) {
    // Not a bug: an input that needs more memory than the machine gives (each command
    // checks what it can foresee against core/limits.hpp first).
    err << "hgsim: out of memory: the machine could not give what this input needs; make it "
           "smaller, or run it on a machine with more memory\n";
    return kBadInput;
  } catch (const core::EnvironmentLimit& e) {
    // Not a bug either: a limit the environment set (ulimit, TMPDIR); the message names it.
    err << "hgsim: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::exception& e) {
    err << "hgsim: internal error: " << e.what() << "\n";
    return kInternalError;
  }
}

}  // namespace hgsim::apps
