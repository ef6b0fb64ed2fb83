// A plan checked once (sim/checked_plan.hpp): apps::CheckedScenario keeps the plan its check
// resolved, safely across copies; its memory, FLOPs and outer-sync codec are computed there,
// and `hgsim check --summary` prints the plan's own choices and labels its FLOPs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "apps/validate.hpp"
#include "models/transformer.hpp"
#include "sim/checked_plan.hpp"
#include "sim/outer_sync.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

namespace fs = std::filesystem;
using testing::checked;
using testing::cli;

// One cluster of 2 x 8 H100s; the scenario recomputes nothing and compresses nothing, the
// plan makes its own choices (`plan_choices`, YAML keys of the strategy).
std::string scenario_with_plan(const std::string& plan_choices) {
  return "name: own-choices\n"
         "model: {name: m, layers: 8, hidden: 1024, heads: 16, vocab: 32000}\n"
         "training: {global_batch: 16, seq_len: 1024, precision: bf16, recompute: none}\n"
         "clusters:\n"
         "  - {name: a, gpu: H100-80GB-SXM, nodes: 2, gpus_per_node: 8,"
         " nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}\n"
         "  - {name: b, gpu: H100-80GB-SXM, nodes: 2, gpus_per_node: 8,"
         " nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}\n"
         "wan:\n  - {between: [a, b], bandwidth: 10Gbps, latency: 20ms}\n"
         "strategy:\n"
         "  micro_batch: 2\n" +
         plan_choices +
         "  pipelines:\n"
         "    - {replicas: 2, micro_batches: 4, stages: [{cluster: a, tp: 2, layers: 4},"
         " {cluster: b, tp: 2, layers: 4}]}\n";
}

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("hgsim-checked-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

TEST(CheckedPlan, CheckedScenarioKeepsItsPlanSafelyAcrossCopies) {
  std::optional<apps::CheckedScenario> copy;
  {
    const apps::CheckedScenario original = checked(scenario_with_plan(""));
    ASSERT_TRUE(original.plan);
    copy = original;  // the original, and everything it holds by value, dies here
  }
  const auto plan = copy->own_plan();
  ASSERT_TRUE(plan);
  // The resolved plan points into the bundle's own scenario and model, not into a
  // CheckedScenario that was copied or destroyed.
  EXPECT_EQ(plan->resolved().scenario, &plan->scenario());
  EXPECT_EQ(plan->resolved().model, &plan->model());
  EXPECT_EQ(plan->resolved().scenario->clusters.size(), 2u);
  EXPECT_EQ(plan->resolved().gpus_used, 2 * (2 + 2));
  // A scenario edited after its check has no resolved plan of its own any more.
  copy->scenario.training.global_batch = 32;
  EXPECT_FALSE(copy->own_plan());
}

TEST(CheckedPlan, StageMemoryIsThePlansOwn) {
  // The scenario recomputes nothing; the plan recomputes fully and shards with ZeRO 1.
  const auto c = checked(scenario_with_plan("  recompute: full\n  zero: 1\n"));
  ASSERT_TRUE(c.plan);
  core::Training full = c.scenario.training;
  full.recompute = core::Recompute::full;
  const core::Plan& plan = c.plan->resolved().plan;
  for (int st = 0; st < 2; ++st) {
    const models::StageSpec spec = models::stage_spec(plan, 0, st);
    EXPECT_EQ(spec.zero, 1);
    const auto want = models::stage_memory(c.model, full, spec);
    const auto scenario_own = models::stage_memory(c.model, c.scenario.training, spec);
    const sim::StageFigures& got = c.plan->stage(0, st);
    EXPECT_DOUBLE_EQ(got.memory.total.value(), want.total.value());
    EXPECT_LT(got.memory.activations.value(), scenario_own.activations.value());
    EXPECT_EQ(got.outer_state.value(), 0);
    // 1F1B holds min(p - stage, m) micro-batches in flight: p = 2, m = 4.
    EXPECT_EQ(got.micro_batches_in_flight, 2 - st);
  }
}

TEST(CheckedPlan, DilocoMemoryCountsTheOuterStateAndTheCodecIsResolvedAtCheck) {
  const std::string outer = "  outer_sync: {method: diloco, inner_steps: 10, codec: int8}\n";
  std::string yaml = scenario_with_plan(outer);
  yaml.replace(yaml.find("global_batch: 16"), 16, "global_batch: 32");  // two pipelines of 16
  // Two islands: a second pipeline on cluster b alone.
  yaml.replace(yaml.find("{cluster: b, tp: 2, layers: 4}"), 30, "{cluster: a, tp: 2, layers: 4}");
  yaml +=
      "    - {replicas: 2, micro_batches: 4, stages: [{cluster: b, tp: 2, layers: 4},"
      " {cluster: b, tp: 2, layers: 4}]}\n";
  const auto c = checked(yaml);
  ASSERT_TRUE(c.plan);
  core::Diagnostics diags;
  const auto int8 = compress::resolve_codec(core::CodecConfig{"int8", {}}, c.scenario, "x", diags);
  ASSERT_TRUE(int8) << diags.format();
  EXPECT_EQ(compress::describe(c.plan->resolved().choices.outer_sync_codec),
            compress::describe(*int8));
  const models::StageSpec spec = models::stage_spec(c.plan->resolved().plan, 0, 0);
  const double params = models::stage_parameters(c.model, spec);
  const sim::StageFigures& f = c.plan->stage(0, 0);
  // DiLoCo keeps an fp32 snapshot and an fp32 momentum of every parameter the GPU holds.
  EXPECT_DOUBLE_EQ(f.outer_state.value(), 8 * params);
  EXPECT_DOUBLE_EQ(
      f.memory.total.value(),
      models::stage_memory(c.model, c.scenario.training, spec).total.value() + 8 * params);

  // An outer-sync codec that does not exist is the check's error, at its key path.
  std::string bad = yaml;
  bad.replace(bad.find("codec: int8"), 11, "codec: int7");
  const fs::path file = temp_file("bad-outer.yaml", bad);
  const auto r = cli({"check", file.c_str()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("strategy.outer_sync.codec"), std::string::npos) << r.err;
  fs::remove(file);
}

TEST(CheckedPlan, FlopsAreTheModelsAndThoseTheGpusRun) {
  const auto c = checked(scenario_with_plan("  recompute: full\n"));
  ASSERT_TRUE(c.plan);
  const sim::PlanFigures& f = c.plan->figures();
  const double sequences = 16;
  const int seq_len = 1024;
  // Full recomputation runs every layer's forward once more, and nothing else (the logits
  // are not recomputed).
  const double recomputed =
      c.model.layers * models::layer_forward_flops(c.model, sequences, seq_len).value();
  EXPECT_NEAR(f.hardware_flops.value() - f.model_flops.value(), recomputed, 1e-6 * recomputed);
  EXPECT_DOUBLE_EQ(
      f.model_flops.value(),
      models::training_flops(c.model, sequences, seq_len, core::Recompute::none).value());
}

TEST(CheckedPlan, CheckSummaryPrintsThePlansOwnChoices) {
  // The scenario: no recomputation, no codecs. The plan: selective recomputation, ZeRO 1,
  // sequence parallelism and int8 activations across the WAN.
  const fs::path file = temp_file(
      "own.yaml",
      scenario_with_plan("  recompute: selective\n  zero: 1\n"
                         "  sequence_parallel: true\n"
                         "  compression: {wan_activations: int8, wan_gradients: none}\n"));
  const auto r = cli({"check", file.c_str(), "--summary"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string& out = r.out;
  EXPECT_NE(out.find("choices: recompute selective, ZeRO 1, sequence parallel on"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("codecs: WAN activations int8"), std::string::npos) << out;
  // The FLOPs say what they count: the model's, then what the GPUs run with the plan's
  // recomputation.
  const auto c = checked(scenario_with_plan("  recompute: selective\n"));
  const double model_pflop = c.plan->figures().model_flops.value() / 1e15;
  const double hardware_pflop = c.plan->figures().hardware_flops.value() / 1e15;
  ASSERT_GT(hardware_pflop, model_pflop);  // selective recomputation redoes attention's core
  const std::string model_label =
      " PFLOP per iteration [models/: model FLOPs, 6N + attention per token]; the GPUs run ";
  const std::string hardware_label = " PFLOP with the plan's recompute selective";
  const auto at = out.find(model_label);
  ASSERT_NE(at, std::string::npos) << out;
  const auto line = out.rfind('\n', at) + 1;
  EXPECT_NEAR(std::stod(out.substr(line, at - line)), model_pflop, 5e-3 * model_pflop) << out;
  const auto hardware = at + model_label.size();
  ASSERT_NE(out.find(hardware_label, hardware), std::string::npos) << out;
  EXPECT_NEAR(std::stod(out.substr(hardware)), hardware_pflop, 5e-3 * hardware_pflop) << out;
  // Each stage's schedule: 1F1B holds p - stage micro-batches in flight (p = 2, m = 4).
  EXPECT_NE(out.find("in flight"), std::string::npos) << out;
  fs::remove(file);
}

TEST(CheckedPlan, RunReportsTheFlopsCheckPrints) {
  // What run reports as model FLOPs is what check --summary labels model FLOPs.
  const fs::path file = temp_file("flops.yaml", scenario_with_plan("  recompute: full\n"));
  const auto run = cli({"run", file.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const core::Json result = core::Json::parse(run.out);
  const auto c = checked(scenario_with_plan("  recompute: full\n"));
  EXPECT_DOUBLE_EQ(result["flops"]["model_flops"].get<double>(),
                   c.plan->figures().model_flops.value());
  EXPECT_DOUBLE_EQ(result["flops"]["hardware_flops"].get<double>(),
                   c.plan->figures().hardware_flops.value());
  fs::remove(file);
}

}  // namespace
}  // namespace hgsim
