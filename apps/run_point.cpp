#include "apps/run_point.hpp"

#include <algorithm>
#include <iostream>

#include "apps/plan_command.hpp"
#include "kernels/layer_profile.hpp"
#include "kernels/profile.hpp"

namespace hgsim::apps {

std::optional<ChosenPlan> choose_plan(const CheckedScenario& c, const RunOptions& options,
                                      core::Diagnostics& diags) {
  if (!options.plan_file.empty() || options.plan) {
    std::optional<core::Plan> given = options.plan;
    if (!given) given = core::load_plan(options.plan_file, diags);
    if (!given || diags.has_errors()) return std::nullopt;
    auto checked = check_plan_file_against(*given, c, diags, options.plan ? "" : options.plan_file);
    if (!checked) return std::nullopt;
    return ChosenPlan{*given, "", std::move(checked)};
  }
  if (!c.scenario.strategy.automatic)
    return ChosenPlan{c.scenario.strategy.plan, "strategy", c.own_plan()};
  // strategy: auto plays the planner's best plan
  auto chosen = auto_plan(c, diags, options.planner_time_budget_s, options.planner_jobs);
  if (!chosen) return std::nullopt;
  return ChosenPlan{*chosen, "", nullptr};
}

namespace {

// The compute model of the scenario's GPUs without a layer profile: measured op profiles
// (--profile files, else the ones shipped in kernels/profiles/), else estimated (the
// kernel-level model on datasheet figures, with the clusters' calibrations).
std::unique_ptr<kernels::ComputeModel> op_compute_model(const RunOptions& options,
                                                        const core::Scenario& scenario,
                                                        const std::vector<std::string>& gpus,
                                                        core::Diagnostics& diags) {
  const auto files = options.profiles.empty() ? kernels::shipped_profiles() : options.profiles;
  auto model = kernels::compute_model_for(files, diags, kernels::calibrations_of(scenario));
  // A --profile the user asked for that answers for none of the scenario's GPUs is said.
  if (model && !options.profiles.empty()) kernels::warn_unused_profiles(*model, gpus, diags);
  return model;
}

}  // namespace

std::unique_ptr<kernels::ComputeModel> run_compute_model(const RunOptions& options,
                                                         const core::Scenario& scenario,
                                                         core::Diagnostics& diags) {
  std::vector<std::string> gpus;
  for (const core::Cluster& cluster : scenario.clusters) gpus.push_back(cluster.gpu);
  auto others = op_compute_model(options, scenario, gpus, diags);
  if (options.layer_profile.empty() || !others) return others;
  try {
    // A layer profile answers for the GPU type it measured; the others keep their model.
    auto profile = kernels::read_layer_profile(options.layer_profile);
    const std::string measured = profile.catalog_gpu;
    auto model = std::make_unique<kernels::LayerProfileModel>(
        std::move(profile), std::shared_ptr<const kernels::ComputeModel>(std::move(others)));
    const bool used = measured.empty() || std::any_of(gpus.begin(), gpus.end(), [&](auto& g) {
                        const kernels::GpuSpec* gpu = kernels::find_gpu(g);
                        return gpu && gpu->name == measured;
                      });
    if (!used)
      diags.warning({}, "--layer-profile",
                    options.layer_profile + " measured " + measured +
                        ", which is none of the scenario's GPUs; it is not used",
                    "a layer profile answers for the GPU type it measured (device.catalog_gpu) "
                    "and no other");
    return model;
  } catch (const kernels::LayerProfileError& e) {
    diags.error({}, "", e.what());  // the message starts with the file and the JSON path
    return nullptr;
  }
}

std::optional<sim::Results> simulate_point(const CheckedScenario& c, const RunOptions& options,
                                           core::Diagnostics& diags) {
  sim::SimulationOptions sim_options = options.sim;
  sim_options.trace_filter = sim::parse_trace_filter(options.trace_filter, "--trace-filter", diags);
  sim_options.trace_filter.wan_only |= options.sim.trace_filter.wan_only;  // run --plot's own
  if (diags.has_errors()) return std::nullopt;  // before the planner runs for strategy: auto
  const auto chosen = choose_plan(c, options, diags);
  if (!chosen) return std::nullopt;
  if (!options.trace_filter.empty()) {
    if (options.sim.trace_path.empty())
      diags.error({}, "--trace-filter", "filters the trace --trace writes, and no --trace is given",
                  "add --trace FILE.json");
    sim::check_trace_filter(sim_options.trace_filter, c.scenario, chosen->plan, "--trace-filter",
                            diags);
    if (diags.has_errors()) return std::nullopt;
  }
  const auto compute = run_compute_model(options, c.scenario, diags);
  if (!compute || diags.has_errors()) return std::nullopt;
  if (!options.fidelity.empty()) {
    sim_options.fidelity_from_cli = true;
    sim_options.fidelity = options.fidelity == "full"     ? core::Fidelity::full
                           : options.fidelity == "folded" ? core::Fidelity::folded
                                                          : core::Fidelity::automatic;
  }
  core::Scenario scenario = c.scenario;
  if (!options.collectives.empty())
    scenario.simulation.collectives = options.collectives == "steps"
                                          ? core::CollectiveGranularity::steps
                                          : core::CollectiveGranularity::pipelined;
  sim::SimulationInput in;
  // simulate() applies the plan's own recomputation and codecs (the planner's plans make
  // them) through the resolved plan.
  in.scenario = &scenario;
  in.plan = &chosen->plan;
  in.plan_path = chosen->path;
  in.model = &c.model;
  in.compression = c.compression;
  in.compute = compute.get();
  // The check's resolved plan reads the scenario it was checked with; a --collectives
  // override lives in this copy alone, so the plan is resolved again against it.
  if (options.collectives.empty()) in.checked = chosen->checked;
  sim::SimulationStats stats;
  auto result = sim::simulate(in, sim_options, diags, &stats);
  if (result && options.report_stats)
    std::cerr << "hgsim: simulated " << static_cast<long>(stats.activities) << " activities ("
              << static_cast<long>(stats.graph_nodes) << " graph nodes) in "
              << core::human_duration(core::Seconds(stats.wall_s)) << ", peak memory "
              << core::human_size(core::Bytes(stats.peak_rss_bytes)) << "\n";
  return result;
}

}  // namespace hgsim::apps
