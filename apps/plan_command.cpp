#include "apps/plan_command.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/commands.hpp"
#include "core/files.hpp"
#include "kernels/compute_model.hpp"
#include "planner/baselines.hpp"
#include "planner/planner.hpp"

namespace hgsim::apps {

namespace {

using core::Json;

std::string seconds_text(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, s < 10 ? "%.3f s" : "%.2f s", s);
  return buffer;
}

std::string shorten(const std::string& text, std::size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

std::string percent(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", 100 * v);
  return buffer;
}

Json verified_json(const planner::Verified& v) {
  return {{"analytic_time_s", v.candidate.analytic_s},
          {"simulated_time_s", v.simulated_s},
          {"error", (v.candidate.analytic_s - v.simulated_s) / v.simulated_s},
          {"fidelity", v.fidelity},
          {"description", v.candidate.description},
          {"plan", core::plan_to_json(v.candidate.plan)}};
}

void print_stages(const core::Plan& plan, const Json& result, std::ostream& out) {
  (void)result;
  out << "  pipeline  replicas  micro-batches  stage  cluster       tp  dp  layers\n";
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& p = plan.pipelines[i];
    for (std::size_t s = 0; s < p.stages.size(); ++s) {
      char line[256];
      std::snprintf(
          line, sizeof line, "  %8s  %8s  %13s  %5zu  %-12s %3d %3d  %6d\n",
          s == 0 ? std::to_string(i).c_str() : "", s == 0 ? std::to_string(p.replicas).c_str() : "",
          s == 0 ? std::to_string(p.micro_batches).c_str() : "", s, p.stages[s].cluster.c_str(),
          p.stages[s].tp, p.stages[s].dp, p.stages[s].layers);
      out << line;
    }
  }
}

}  // namespace

std::optional<core::Plan> auto_plan(const CheckedScenario& c, core::Diagnostics& diags,
                                    double time_budget_s) {
  const kernels::KernelModel compute(kernels::calibrations_of(c.scenario));
  const planner::Context ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  planner::Options options;
  options.progress = &std::cerr;
  if (time_budget_s > 0) options.time_budget_s = time_budget_s;
  auto r = planner::plan(ctx, options);
  if (!r.best) {
    for (const auto& why : r.why_not)
      diags.error(c.scenario.where("strategy"), "strategy", "no plan fits: " + why);
    if (r.why_not.empty())
      diags.error(c.scenario.where("strategy"), "strategy", "no candidate plan could be simulated");
    return std::nullopt;
  }
  std::cerr << "hgsim: strategy: auto: the planner chose " << r.best->candidate.description << "\n";
  return r.best->candidate.plan;
}

int cmd_plan(const std::string& path, const PlanCommandOptions& options, std::ostream& out,
             std::ostream& err) {
  core::Diagnostics diags;
  auto points = check_scenario_file(path, diags);
  if (!points) {
    err << diags.format();
    if (options.json) out << Json{{"valid", false}}.dump(2) << "\n";
    return kBadInput;
  }
  if (points->size() > 1) {
    err << "hgsim plan: the scenario has a sweep of " << points->size()
        << " points; hgsim plan plans one (remove the sweep, or plan each point)\n";
    return kBadInput;
  }
  err << diags.format();
  return plan_scenario(points->front().checked, path, options, out, err);
}

int plan_scenario(CheckedScenario c, const std::string& path, const PlanCommandOptions& options,
                  std::ostream& out, std::ostream& err) {
  core::Diagnostics diags;
  if (options.no_compression) c.compression = {};
  const kernels::KernelModel compute(kernels::calibrations_of(c.scenario));
  const auto wall_start = std::chrono::steady_clock::now();
  const planner::Context ctx = planner::make_context(c.scenario, c.model, c.compression, compute);
  if (!options.evaluate_file.empty()) {
    auto plan = core::load_plan(options.evaluate_file, diags);
    if (!plan || diags.has_errors() || !check_plan_file_against(*plan, c, diags)) {
      err << diags.format();
      return kBadInput;
    }
    const auto e = planner::estimate(ctx, *plan);
    planner::Options po;
    auto v = planner::simulate_candidate(ctx, {*plan, e.iteration_s, planner::describe(ctx, *plan)},
                                         po, diags);
    if (!v) {
      err << diags.format();
      return kBadInput;
    }
    Json j{{"analytic_time_s", e.iteration_s},
           {"simulated_time_s", v->simulated_s},
           {"error", (e.iteration_s - v->simulated_s) / v->simulated_s},
           {"fidelity", v->fidelity},
           {"pipelines", Json::array()}};
    for (const auto& pe : e.pipelines) {
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
    out << j.dump(2) << "\n";
    return kSuccess;
  }
  planner::Options po;
  po.verify = options.verify;
  po.time_budget_s = options.time_budget_s;
  po.progress = &err;
  planner::SearchResult r = planner::plan(ctx, po);
  std::vector<planner::Baseline> baselines;
  std::string adopted;
  if (options.baselines) {
    baselines = planner::run_baselines(ctx, po);
    if (r.best) adopted = planner::adopt_faster_baselines(ctx, po, baselines, r);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  if (!r.best) {
    err << path << ": no plan fits the scenario\n";
    for (const auto& why : r.why_not) err << "  " << why << "\n";
    if (options.json) {
      Json j{{"best", nullptr}, {"why_not", r.why_not}};
      j["search"] = {{"candidates_evaluated", r.evaluated}, {"wall_s", wall}};
      out << j.dump(2) << "\n";
    }
    return kBadInput;
  }
  const planner::Verified& best = *r.best;
  const double tokens = double(c.scenario.training.global_batch) * c.scenario.training.seq_len;
  if (!options.out_file.empty()) {
    if (auto e = core::write_file_atomically(
            options.out_file, core::plan_to_json(best.candidate.plan).dump(2) + "\n")) {
      err << "hgsim plan: " << *e << "\n";
      return kBadInput;
    }
  }

  if (options.json) {
    Json j;
    j["scenario"] = c.scenario.name;
    j["best"] = verified_json(best);
    j["best"]["iteration_time_s"] = best.simulated_s;
    j["best"]["tokens_per_s"] = tokens / best.simulated_s;
    j["best"]["adopted_from_baseline"] = adopted;
    j["verified"] = Json::array();
    for (const auto& v : r.verified) j["verified"].push_back(verified_json(v));
    j["ranked"] = Json::array();  // the best by the analytic model, simulated or not
    for (std::size_t k = 0; k < r.ranked.size() && k < 10; ++k)
      j["ranked"].push_back(
          {{"analytic_time_s", r.ranked[k].analytic_s}, {"description", r.ranked[k].description}});
    j["baselines"] = Json::array();
    for (const auto& b : baselines) {
      Json e{{"name", b.name}, {"feasible", b.feasible}};
      if (b.feasible) {
        e["iteration_time_s"] = b.simulated_s;
        e["analytic_time_s"] = b.analytic_s;
        e["tokens_per_s"] = tokens / b.simulated_s;
        e["speedup"] = b.simulated_s / best.simulated_s;
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
    j["compression"] = {{"wan_activations", compress::describe(c.compression.wan_activations)},
                        {"wan_gradients", compress::describe(c.compression.wan_gradients)}};
    j["search"] = {{"candidates_evaluated", r.evaluated},
                   {"rejected_memory", r.rejected_memory},
                   {"search_s", r.search_s},
                   {"verify_s", r.verify_s},
                   {"wall_s", wall},
                   {"budget_exhausted", r.budget_exhausted}};
    out << j.dump(2) << "\n";
    return kSuccess;
  }

  out << c.scenario.name << ": best plan " << seconds_text(best.simulated_s)
      << " per iteration (simulated, " << best.fidelity << " fidelity), "
      << static_cast<long>(tokens / best.simulated_s) << " tokens/s\n";
  out << "  " << best.candidate.description << "\n";
  if (!adopted.empty())
    out << "  (the plan of baseline " << adopted << ", with the scenario's codecs)\n";
  out << "  compression: WAN activations " << compress::describe(c.compression.wan_activations)
      << ", WAN gradients " << compress::describe(c.compression.wan_gradients) << "\n\n";
  print_stages(best.candidate.plan, best.result, out);
  out << "\n  verified candidates (the model's error is analytic / simulated - 1):\n";
  out << "    rank  analytic    simulated   error   plan\n";
  for (std::size_t k = 0; k < r.verified.size(); ++k) {
    const auto& v = r.verified[k];
    char line[128];
    std::snprintf(line, sizeof line, "    %4zu  %-10s  %-10s  %6s  ", k + 1,
                  seconds_text(v.candidate.analytic_s).c_str(), seconds_text(v.simulated_s).c_str(),
                  percent((v.candidate.analytic_s - v.simulated_s) / v.simulated_s).c_str());
    out << line << v.candidate.description << "\n";
  }
  out << "\n  search: " << r.evaluated << " candidates costed in " << seconds_text(r.search_s)
      << (r.budget_exhausted ? " (time budget reached)" : "") << ", " << r.verified.size()
      << " simulated in " << seconds_text(r.verify_s) << "; " << seconds_text(wall) << " in all\n";
  if (!baselines.empty()) {
    out << "\n  plan vs baselines (simulated):\n";
    char line[256];
    std::snprintf(line, sizeof line, "    %-18s %12s %12s %9s  %s\n", "", "iteration", "tokens/s",
                  "speedup", "plan");
    out << line;
    std::snprintf(line, sizeof line, "    %-18s %12s %12ld %9s\n", "planner",
                  seconds_text(best.simulated_s).c_str(),
                  static_cast<long>(tokens / best.simulated_s), "1.00x");
    out << line;
    for (const auto& b : baselines) {
      if (b.feasible) {
        char speedup[32];
        std::snprintf(speedup, sizeof speedup, "%.2fx", b.simulated_s / best.simulated_s);
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
    out << "    speedup: the baseline's simulated iteration time over the plan's\n";
  }
  if (!options.out_file.empty())
    out << "\n  plan written to " << options.out_file << " (hgsim run " << path << " --plan "
        << options.out_file << ")\n";
  return kSuccess;
}

}  // namespace hgsim::apps
