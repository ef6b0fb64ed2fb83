#include "apps/plan_command.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/commands.hpp"
#include "core/files.hpp"
#include "core/units.hpp"
#include "kernels/compute_model.hpp"
#include "planner/baselines.hpp"
#include "planner/loss_bound.hpp"
#include "planner/outer_sync_cost.hpp"
#include "planner/planner.hpp"
#include "sim/uncertainty.hpp"

namespace hgsim::apps {

namespace {

using core::Json;

// A time as every hgsim output writes one (a 162 us iteration is not "0.000 s").
std::string seconds_text(double s) {
  return core::human_duration(core::Seconds(s));
}

std::string shorten(const std::string& text, std::size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

std::string percent(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", 100 * v);
  return buffer;
}

// A DiLoCo candidate's own settings, beside its description in the JSON.
Json diloco_settings_json(const core::OuterSync& o) {
  return {{"method", "diloco"},
          {"inner_steps", o.inner_steps},
          {"fragments", o.fragments},
          {"overlap_steps", o.fragments > 1 ? o.overlap_steps : 0},
          {"codec", o.codec.codec.empty() ? std::string("none") : o.codec.codec}};
}

Json verified_json(const planner::Verified& v) {
  Json j{{"analytic_time_s", v.candidate.analytic_s},
         {"simulated_time_s", v.simulated_s},
         {"error", (v.candidate.analytic_s - v.simulated_s) / v.simulated_s},
         {"fidelity", v.fidelity},
         {"description", v.candidate.description},
         {"plan", core::plan_to_json(v.candidate.plan)}};
  if (v.candidate.plan.outer_sync.enabled()) {
    // Time to the same training progress: the iteration over the token efficiency.
    j["token_efficiency"] = v.candidate.efficiency;
    j["effective_time_s"] = v.effective_s();
    j["analytic_effective_time_s"] = v.candidate.effective_s();
    j["iterations_simulated"] = v.iterations;
    j["outer_sync"] = diloco_settings_json(v.candidate.plan.outer_sync);
  }
  return j;
}

std::string outer_sync_text(const core::OuterSync& o) {
  std::string text = "DiLoCo H = " + std::to_string(o.inner_steps);
  if (o.fragments > 1)
    text += ", streaming F = " + std::to_string(o.fragments) +
            ", tau = " + std::to_string(o.overlap_steps);
  else
    text += ", blocking";
  text += ", pseudo-gradients " + (o.codec.codec.empty() ? std::string("none") : o.codec.codec);
  return text;
}

// For a plan with outer sync: its raw iteration, the token efficiency used and where it
// comes from, the time to the same progress, and the best synchronous plan beside it.
void print_outer_sync(const PlanReport& r, const planner::Verified& v, std::ostream& out) {
  if (!v.candidate.plan.outer_sync.enabled()) return;
  char line[512];
  out << "  outer sync: " << outer_sync_text(v.candidate.plan.outer_sync) << "\n";
  std::snprintf(line, sizeof line,
                "  iteration %s (simulated over %d iterations, outer syncs included); token "
                "efficiency %.3g; time to the same progress as a synchronous iteration: %s\n",
                seconds_text(v.simulated_s).c_str(), v.iterations, v.candidate.efficiency,
                seconds_text(v.effective_s()).c_str());
  out << line;
  out << "  token efficiency: " << r.token_efficiency_source << "\n";
  if (const auto& sync = r.search.best_synchronous) {
    std::snprintf(line, sizeof line,
                  "  best synchronous plan: %s per iteration (simulated), %.2fx the time to the "
                  "same progress: ",
                  seconds_text(sync->simulated_s).c_str(), sync->simulated_s / v.effective_s());
    out << line << sync->candidate.description << "\n";
  } else if (!r.evaluated) {
    out << "  best synchronous plan: none verified (no synchronous candidate could be "
           "simulated)\n";
  }
}

void print_stages(const core::Plan& plan, std::ostream& out) {
  out << "  pipeline  replicas  micro-batches  stage  cluster       tp  dp  layers\n";
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& p = plan.pipelines[i];
    for (std::size_t s = 0; s < p.stages.size(); ++s) {
      char line[256];
      std::snprintf(line, sizeof line, "  %8s  %8s  %13s  %5zu  %-12s %3d %3d  %6d%s\n",
                    s == 0 ? std::to_string(i).c_str() : "",
                    s == 0 ? std::to_string(p.replicas).c_str() : "",
                    s == 0 ? std::to_string(p.micro_batches).c_str() : "", s,
                    p.stages[s].cluster.c_str(), p.stages[s].tp, p.stages[s].dp, p.stages[s].layers,
                    p.stages[s].cp > 1 ? ("  cp " + std::to_string(p.stages[s].cp)).c_str() : "");
      out << line;
    }
  }
}

// The codecs a chosen plan uses: the scenario's (as the report holds them), or none for a
// traffic class the plan turned off (the planner chooses between the two only).
compress::CompressionSpecs codecs_used(const PlanReport& r, const core::Plan& plan) {
  compress::CompressionSpecs used = r.compression;
  if (!plan.compression) return used;
  if (plan.compression->wan_activations.codec == "none") used.wan_activations = {};
  if (plan.compression->wan_gradients.codec == "none") used.wan_gradients = {};
  return used;
}

}  // namespace

std::optional<core::Plan> auto_plan(const CheckedScenario& c, core::Diagnostics& diags,
                                    double time_budget_s, int jobs) {
  const kernels::KernelModel compute(kernels::calibrations_of(c.scenario));
  compress::CompressionSpecs codecs = c.compression;
  std::vector<std::string> loss_notes;
  planner::apply_loss_bound(c.scenario, codecs, loss_notes);
  for (const std::string& note : loss_notes)
    diags.warning(c.scenario.where("planner.max_loss_increase"), "planner.max_loss_increase", note);
  const planner::Context ctx = planner::make_context(c.scenario, c.model, codecs, compute);
  planner::Options options;
  options.progress = &std::cerr;
  if (time_budget_s > 0) options.time_budget_s = time_budget_s;
  options.jobs = jobs;
  auto r = planner::plan(ctx, options);
  if (!r.best) {
    for (const auto& why : r.why_not)
      diags.error(c.scenario.where("strategy"), "strategy", "no plan fits: " + why);
    if (r.why_not.empty())
      diags.error(c.scenario.where("strategy"), "strategy", "no candidate plan could be simulated");
    return std::nullopt;
  }
  std::cerr << "hgsim: strategy: auto: the planner chose " << r.best->candidate.description << "\n";
  for (const std::string& note : r.notes)
    std::cerr << "hgsim: strategy: auto: note: " << note << "\n";
  const core::OuterSync& o = r.best->candidate.plan.outer_sync;
  if (o.enabled()) {
    std::cerr << "hgsim: strategy: auto: with outer sync (" << outer_sync_text(o)
              << "): " << seconds_text(r.best->simulated_s) << " per iteration over "
              << r.best->iterations << " iterations, token efficiency "
              << r.best->candidate.efficiency << " (" << planner::token_efficiency_source(ctx)
              << "), " << seconds_text(r.best->effective_s()) << " to the same progress";
    if (r.best_synchronous)
      std::cerr << "; the best synchronous plan takes "
                << seconds_text(r.best_synchronous->simulated_s);
    std::cerr << "\n";
    // simulation.iterations below inner_steps: the run's results warn (sim/simulate.cpp).
  }
  return r.best->candidate.plan;
}

namespace {

Json evaluated_json(const PlanReport& r) {
  const planner::Verified& v = *r.best;
  Json j{{"analytic_time_s", r.estimate.iteration_s},
         {"simulated_time_s", v.simulated_s},
         {"error", (r.estimate.iteration_s - v.simulated_s) / v.simulated_s},
         {"fidelity", v.fidelity},
         {"plan", core::plan_to_json(v.candidate.plan)},
         {"result", sim::to_json(v.result)},
         {"pipelines", Json::array()}};
  if (v.candidate.plan.outer_sync.enabled()) {
    j["token_efficiency"] = v.candidate.efficiency;
    j["token_efficiency_source"] = r.token_efficiency_source;
    j["effective_time_s"] = v.effective_s();
    j["iterations_simulated"] = v.iterations;
  }
  for (const auto& pe : r.estimate.pipelines) {
    Json stages = Json::array();
    for (const auto& st : pe.stages)
      stages.push_back({{"forward_s", st.forward_s},
                        {"backward_s", st.backward_s},
                        {"send_s", st.send_s},
                        {"sync_s", st.sync_s},
                        {"optimizer_s", st.optimizer_s}});
    j["pipelines"].push_back({{"pipeline_s", pe.pipeline_s},
                              {"fill_s", pe.fill_s},
                              {"period_s", pe.period_s},
                              {"stages", stages}});
  }
  return j;
}

std::string evaluated_table(const PlanReport& r) {
  std::ostringstream out;
  const planner::Verified& v = *r.best;
  out << r.scenario << ": the plan takes " << seconds_text(v.simulated_s)
      << " per iteration (simulated, " << v.fidelity << " fidelity); the analytic model says "
      << seconds_text(r.estimate.iteration_s) << " ("
      << percent((r.estimate.iteration_s - v.simulated_s) / v.simulated_s) << ")\n";
  out << "  " << v.candidate.description << "\n";
  print_outer_sync(r, v, out);
  out << "\n";
  out << "  analytic model, in ms: per stage forward, backward and send of one micro-batch,\n"
      << "  gradient sync and optimizer step per iteration:\n";
  out << "    pipeline  stage    forward   backward       send       sync  optimizer\n";
  for (std::size_t i = 0; i < r.estimate.pipelines.size(); ++i) {
    const auto& pe = r.estimate.pipelines[i];
    for (std::size_t st = 0; st < pe.stages.size(); ++st) {
      const auto& e = pe.stages[st];
      char line[256];
      std::snprintf(line, sizeof line, "    %8s  %5zu %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    st == 0 ? std::to_string(i).c_str() : "", st, 1e3 * e.forward_s,
                    1e3 * e.backward_s, 1e3 * e.send_s, 1e3 * e.sync_s, 1e3 * e.optimizer_s);
      out << line;
    }
    out << "    pipeline " << i << ": fill " << seconds_text(pe.fill_s) << ", period "
        << seconds_text(pe.period_s) << " per micro-batch, " << seconds_text(pe.pipeline_s)
        << " in all\n";
  }
  out << "\n" << sim::format_table(v.result);
  return out.str();
}

Json search_json(const PlanReport& r) {
  const planner::Verified& best = *r.best;
  Json j;
  j["scenario"] = r.scenario;
  j["best"] = verified_json(best);
  j["notes"] = r.search.notes;
  j["best"]["iteration_time_s"] = best.simulated_s;
  j["best"]["tokens_per_s"] = r.tokens_per_iteration / best.simulated_s;
  j["best"]["adopted_from_baseline"] = r.adopted_from_baseline;
  if (r.own_best) {
    j["planner_own"] = {{"iteration_time_s", r.own_best->simulated_s},
                        {"description", r.own_best->candidate.description}};
    if (r.own_best->candidate.plan.outer_sync.enabled())
      j["planner_own"]["effective_time_s"] = r.own_best->effective_s();
  }
  j["best"]["result"] = sim::to_json(best.result);
  if (best.candidate.plan.outer_sync.enabled()) {
    j["best"]["token_efficiency_source"] = r.token_efficiency_source;
    j["best_synchronous"] =
        r.search.best_synchronous ? verified_json(*r.search.best_synchronous) : Json(nullptr);
  }
  if (!r.diloco.verdict.empty()) {
    j["diloco"] = {{"verdict", r.diloco.verdict},
                   {"text", r.diloco.text},
                   {"simulated", r.diloco.simulated},
                   {"synchronous_time_s", r.diloco.synchronous_s},
                   {"description", r.diloco.diloco_description}};
    j["diloco"]["effective_time_s"] =
        r.diloco.verdict == "not tried" ? Json(nullptr) : Json(r.diloco.diloco_s);
  }
  j["verified"] = Json::array();
  for (const auto& v : r.search.verified) j["verified"].push_back(verified_json(v));
  j["ranked"] = Json::array();  // the best by the analytic model, simulated or not
  for (std::size_t k = 0; k < r.search.ranked.size() && k < 10; ++k) {
    const planner::Candidate& c = r.search.ranked[k];
    Json e{{"analytic_time_s", c.analytic_s},
           {"effective_time_s", c.effective_s()},
           {"description", c.description.empty() ? planner::describe(c.plan) : c.description}};
    if (c.plan.outer_sync.enabled()) e["outer_sync"] = diloco_settings_json(c.plan.outer_sync);
    j["ranked"].push_back(e);
  }
  j["baselines"] = Json::array();
  for (const auto& b : r.baselines) {
    Json e{{"name", b.name}, {"feasible", b.feasible}};
    if (b.feasible) {
      e["iteration_time_s"] = b.simulated_s;
      e["analytic_time_s"] = b.analytic_s;
      e["tokens_per_s"] = r.tokens_per_iteration / b.simulated_s;
      e["speedup"] = b.simulated_s / best.effective_s();
      e["description"] = b.description;
      e["plan"] = core::plan_to_json(*b.plan);
    } else {
      e["iteration_time_s"] = nullptr;
      e["why"] = b.why;
    }
    e["compression"] = {{"wan_activations", compress::describe(b.compression.wan_activations)},
                        {"wan_gradients", compress::describe(b.compression.wan_gradients)}};
    j["baselines"].push_back(e);
  }
  j["compression"] = {{"wan_activations", compress::describe(r.compression.wan_activations)},
                      {"wan_gradients", compress::describe(r.compression.wan_gradients)}};
  const compress::CompressionSpecs used = codecs_used(r, best.candidate.plan);
  Json loss = Json::object();
  for (const auto& [traffic, spec] : {std::pair{"wan_activations", &used.wan_activations},
                                      std::pair{"wan_gradients", &used.wan_gradients}}) {
    if (spec->kind == compress::CodecKind::none) continue;
    const auto m = planner::measured_loss(*spec, traffic);
    loss[traffic] = {{"codec", compress::describe(*spec)},
                     {"measured", m.has_value()},
                     {"text", planner::loss_text(*spec, traffic)}};
    if (m) {
      loss[traffic]["setting"] = m->setting;
      loss[traffic]["loss_increase"] = m->loss_increase;
    }
  }
  j["best"]["codec_loss"] = loss;
  j["loss_notes"] = r.loss_notes;
  j["search"] = {{"candidates_evaluated", r.search.evaluated},
                 {"rejected_memory", r.search.rejected_memory},
                 {"search_s", r.search.search_s},
                 {"verify_s", r.search.verify_s},
                 {"wall_s", r.wall_s},
                 {"budget_exhausted", r.search.budget_exhausted}};
  return j;
}

std::string search_table(const PlanReport& r, const PlanCommandOptions& options,
                         const std::string& path) {
  std::ostringstream out;
  const planner::Verified& best = *r.best;
  const double tokens = r.tokens_per_iteration;
  out << r.scenario << ": best plan " << seconds_text(best.simulated_s)
      << " per iteration (simulated, " << best.fidelity << " fidelity), "
      << static_cast<long>(tokens / best.simulated_s) << " tokens/s\n";
  out << "  uncertainty: "
      << sim::uncertainty_text(best.result.compute_provenance, best.result.gpus_used) << "\n";
  out << "  " << best.candidate.description << "\n";
  print_outer_sync(r, best, out);
  if (!r.diloco.verdict.empty()) out << "  DiLoCo: " << r.diloco.text << "\n";
  if (!r.adopted_from_baseline.empty())
    out << "  (the plan of baseline " << r.adopted_from_baseline
        << ", with the scenario's codecs; the planner's own best: "
        << (r.own_best ? seconds_text(r.own_best->simulated_s) : std::string("none")) << ")\n";
  out << "  compression: WAN activations " << compress::describe(r.compression.wan_activations)
      << ", WAN gradients " << compress::describe(r.compression.wan_gradients) << "\n";
  const compress::CompressionSpecs used = codecs_used(r, best.candidate.plan);
  for (const auto& [traffic, spec] : {std::pair{"wan_activations", &used.wan_activations},
                                      std::pair{"wan_gradients", &used.wan_gradients}})
    if (const std::string text = planner::loss_text(*spec, traffic); !text.empty())
      out << "  loss: " << text << "\n";
  for (const std::string& note : r.loss_notes) out << "  " << note << "\n";
  out << "\n";
  print_stages(best.candidate.plan, out);
  out << "\n  verified candidates (the model's error is analytic / simulated - 1):\n";
  out << "    rank  analytic    simulated   error   plan\n";
  for (std::size_t k = 0; k < r.search.verified.size(); ++k) {
    const auto& v = r.search.verified[k];
    char line[128];
    std::snprintf(line, sizeof line, "    %4zu  %-10s  %-10s  %6s  ", k + 1,
                  seconds_text(v.candidate.analytic_s).c_str(), seconds_text(v.simulated_s).c_str(),
                  percent((v.candidate.analytic_s - v.simulated_s) / v.simulated_s).c_str());
    out << line << v.candidate.description;
    if (v.candidate.plan.outer_sync.enabled())
      out << " (to the same progress " << seconds_text(v.effective_s()) << ")";
    out << "\n";
  }
  out << "\n  search: " << r.search.evaluated << " candidates costed in "
      << seconds_text(r.search.search_s)
      << (r.search.budget_exhausted ? " (time budget reached)" : "") << ", "
      << r.search.verified.size() << " simulated in " << seconds_text(r.search.verify_s) << "; "
      << seconds_text(r.wall_s) << " in all\n";
  if (!r.baselines.empty()) {
    out << "\n  plan vs baselines (simulated):\n";
    char line[256];
    std::snprintf(line, sizeof line, "    %-18s %12s %12s %9s  %s\n", "", "iteration", "tokens/s",
                  "speedup", "plan");
    out << line;
    std::snprintf(line, sizeof line, "    %-18s %12s %12ld %9s\n", "planner",
                  seconds_text(best.simulated_s).c_str(),
                  static_cast<long>(tokens / best.simulated_s), "1.00x");
    out << line;
    for (const auto& b : r.baselines) {
      if (b.feasible) {
        char speedup[32];
        std::snprintf(speedup, sizeof speedup, "%.2fx", b.simulated_s / best.effective_s());
        std::snprintf(line, sizeof line, "    %-18s %12s %12ld %9s  ", b.name.c_str(),
                      seconds_text(b.simulated_s).c_str(),
                      static_cast<long>(tokens / b.simulated_s), speedup);
        out << line << shorten(b.description, 120) << "\n";
      } else {
        std::snprintf(line, sizeof line, "    %-18s %12s %12s %9s  infeasible: ", b.name.c_str(),
                      "-", "-", "-");
        out << line << b.why << "\n";
      }
    }
    out << "    speedup: the baseline's simulated iteration time over the plan's"
        << (best.candidate.plan.outer_sync.enabled()
                ? " time to the same progress (iteration / token efficiency)\n"
                : "\n");
  }
  if (!options.out_file.empty())
    out << "\n  plan written to " << core::path_excerpt(options.out_file) << " (hgsim run "
        << core::path_excerpt(path) << " --plan " << core::path_excerpt(options.out_file) << ")\n";
  return out.str();
}

// --evaluate: the analytic model's estimate of one plan file and its simulation.
bool evaluate_plan(const CheckedScenario& c, const planner::Context& ctx, const std::string& file,
                   PlanReport& report, core::Diagnostics& diags) {
  auto plan = core::load_plan(file, diags);
  if (!plan || diags.has_errors() || !check_plan_file_against(*plan, c, diags, file)) return false;
  report.evaluated = true;
  report.estimate = planner::estimate_plan(ctx, *plan);
  // Checked above: only the simulation's own problems are new (not the check's warnings).
  core::Diagnostics simulation;
  report.best = planner::simulate_candidate(
      ctx, {*plan, report.estimate.iteration_s, planner::describe(*plan)}, simulation);
  for (const core::Diagnostic& d : simulation.all())
    if (d.severity == core::Severity::error) diags.error(d.where, d.key_path, d.message, d.hint);
  return report.best.has_value();
}

// The search, its verification and, with --baselines, the baselines (a faster one adopted).
void search_plan(const planner::Context& ctx, const PlanCommandOptions& options,
                 std::ostream& progress, PlanReport& report) {
  planner::Options po;
  po.verify = options.verify;
  po.time_budget_s = options.time_budget_s;
  po.progress = &progress;
  po.exhaustive = options.exhaustive;
  report.search = planner::plan(ctx, po);
  report.diloco = planner::diloco_decision(ctx, report.search);
  report.own_best = report.search.best;
  if (options.baselines) {
    report.baselines = planner::run_baselines(ctx, po);
    if (report.search.best)
      report.adopted_from_baseline =
          planner::adopt_faster_baselines(ctx, po, report.baselines, report.search);
  }
  report.best = report.search.best;
}

}  // namespace

std::optional<PlanReport> plan_report(CheckedScenario c, const PlanCommandOptions& options,
                                      std::ostream& progress, core::Diagnostics& diags) {
  if (options.no_compression) c.compression = {};
  PlanReport report;
  planner::apply_loss_bound(c.scenario, c.compression, report.loss_notes);
  const kernels::KernelModel compute(kernels::calibrations_of(c.scenario));
  const auto wall_start = std::chrono::steady_clock::now();
  const planner::Context ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  report.scenario = c.scenario.name;
  report.compression = c.compression;
  report.tokens_per_iteration =
      double(c.scenario.training.global_batch) * c.scenario.training.seq_len;
  report.diloco_token_efficiency = c.scenario.planner.diloco_token_efficiency;
  report.token_efficiency_source = planner::token_efficiency_source(ctx);
  if (!options.evaluate_file.empty()) {
    if (!evaluate_plan(c, ctx, options.evaluate_file, report, diags)) return std::nullopt;
  } else {
    search_plan(ctx, options, progress, report);
  }
  report.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return report;
}

Json to_json(const PlanReport& r) {
  if (r.evaluated) return evaluated_json(r);
  if (!r.best) {
    Json j{{"best", nullptr}, {"why_not", r.search.why_not}};
    j["search"] = {{"candidates_evaluated", r.search.evaluated}, {"wall_s", r.wall_s}};
    return j;
  }
  return search_json(r);
}

std::string format_table(const PlanReport& r, const PlanCommandOptions& options,
                         const std::string& path) {
  if (r.evaluated) return evaluated_table(r);
  if (!r.best) {
    std::string out = path + ": no plan fits the scenario\n";
    for (const auto& why : r.search.why_not) out += "  " + why + "\n";
    return out;
  }
  return search_table(r, options, path);
}

int cmd_plan(const std::string& path, const PlanCommandOptions& options, std::ostream& out,
             std::ostream& err) {
  if (!options.evaluate_file.empty() && !options.out_file.empty()) {
    err << "hgsim plan: --out writes the plan a search finds; --evaluate plays the plan in "
        << core::path_excerpt(options.evaluate_file)
        << " as it is (drop --out, or --evaluate to search)\n";
    return kBadInput;
  }
  core::Diagnostics diags;
  std::optional<CheckedPoint> point;
  const auto points = check_scenario_file_each(path, diags, [&](std::size_t, CheckedPoint& p) {
    if (!point) point = std::move(p);
  });
  if (!points || !point) {
    err << diags.format();
    if (options.json) out << Json{{"valid", false}}.dump(2) << "\n";
    return kBadInput;
  }
  if (*points > 1) {
    err << "hgsim plan: the scenario has a sweep of " << *points
        << " points; hgsim plan plans one (remove the sweep, or plan each point)\n";
    return kBadInput;
  }
  err << diags.format();
  core::Diagnostics plan_diags;
  const auto report = plan_report(point->checked, options, err, plan_diags);
  if (!report) {
    err << plan_diags.format();
    return kBadInput;
  }
  err << plan_diags.format();
  for (const std::string& note : report->search.notes) err << "hgsim plan: note: " << note << "\n";
  if (report->best) {
    for (const std::string& w : report->best->result.warnings)
      err << "hgsim: warning: " << w << "\n";
    if (!options.out_file.empty() && !report->evaluated) {
      if (auto e = core::write_file_atomically(
              options.out_file, core::plan_to_json(report->best->candidate.plan).dump(2) + "\n")) {
        err << "hgsim plan: " << *e << "\n";
        return kBadInput;
      }
    }
  }
  if (options.json)
    out << to_json(*report).dump(2) << "\n";
  else
    (report->best ? out : err) << format_table(*report, options, path);
  return report->best ? kSuccess : kBadInput;
}

}  // namespace hgsim::apps
