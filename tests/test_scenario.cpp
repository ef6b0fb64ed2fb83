// The scenario language: the shipped examples load as written, JSON round trips are
// exact, sweeps expand to their cartesian product, and the hgsim command behaves.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "apps/commands.hpp"
#include "apps/validate.hpp"
#include "core/scenario.hpp"
#include "models/zoo.hpp"

namespace fs = std::filesystem;
using namespace hgsim;

namespace {

std::vector<std::string> example_files(const fs::path& dir) {
  std::vector<std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

const fs::path kExamples = fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "examples";

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

CliResult cli(std::vector<const char*> args) {
  args.insert(args.begin(), "hgsim");
  std::ostringstream out, err;
  int status = apps::run_cli(static_cast<int>(args.size()), args.data(), out, err);
  return {status, out.str(), err.str()};
}

}  // namespace

TEST(Scenario, EveryShippedExampleIsValid) {
  auto files = example_files(kExamples);
  ASSERT_GE(files.size(), 4u);
  for (const std::string& f : files) {
    core::Diagnostics diags;
    auto points = apps::check_scenario_file(f, diags);
    EXPECT_TRUE(points.has_value()) << f << "\n" << diags.format();
  }
}

TEST(Scenario, TheSharedExamplesAreTheFormat) {
  // The design's examples live beside the repository (../shared/examples) where it is
  // checked out with the project's shared folder; each must load exactly as written.
  const fs::path shared = fs::path(HGSIM_SOURCE_DIR) / ".." / "shared" / "examples";
  auto files = example_files(shared);
  if (files.empty()) GTEST_SKIP() << "no shared/examples beside the repository";
  for (const std::string& f : files) {
    core::Diagnostics diags;
    EXPECT_TRUE(apps::check_scenario_file(f, diags).has_value()) << f << "\n" << diags.format();
  }
}

TEST(Scenario, ExplicitPlanReadsAsWritten) {
  core::Diagnostics diags;
  auto s = core::load_scenario((kExamples / "explicit-plan.yaml").string(), diags);
  ASSERT_TRUE(s) << diags.format();
  EXPECT_EQ(s->model.zoo_name, "llama2-7b");
  ASSERT_EQ(s->clusters.size(), 2u);
  EXPECT_EQ(s->clusters[1].gpu, "V100-32GB-SXM");
  EXPECT_EQ(s->clusters[0].gpu_count(), 16);
  EXPECT_DOUBLE_EQ(s->clusters[0].nic.bandwidth.value(), 25e9);  // 200Gbps
  EXPECT_DOUBLE_EQ(s->wan[0].bandwidth.value(), 1.25e9);         // 10Gbps
  EXPECT_DOUBLE_EQ(s->wan[0].latency.value(), 0.015);
  ASSERT_FALSE(s->strategy.automatic);
  const core::Plan& plan = s->strategy.plan;
  EXPECT_EQ(plan.schedule, core::Schedule::one_f_one_b);
  EXPECT_EQ(plan.pipelines[0].replicas, 2);
  EXPECT_EQ(plan.pipelines[0].stages[1].layers, 12);
  EXPECT_EQ(plan.grad_sync.algorithm, core::GradSyncAlgorithm::hierarchical);
  EXPECT_EQ(plan.global_batch(), s->training.global_batch);
  EXPECT_EQ(s->where("clusters[1].gpu").line, 21);
}

TEST(Scenario, TraceIsLoadedRelativeToTheScenario) {
  core::Diagnostics diags;
  auto s = core::load_scenario((kExamples / "four-regions-sweep.yaml").string(), diags);
  ASSERT_TRUE(s) << diags.format();
  const core::WanLink& eu_asia = s->wan[3];
  ASSERT_EQ(eu_asia.trace_steps.size(), 5u);
  EXPECT_DOUBLE_EQ(eu_asia.trace_steps[2].at.value(), 45);
  EXPECT_DOUBLE_EQ(eu_asia.trace_steps[3].bandwidth.value(), 500e6 / 8);
}

TEST(Scenario, JsonRoundTripIsExact) {
  for (const std::string& f : example_files(kExamples)) {
    core::Diagnostics diags;
    auto s = core::load_scenario(f, diags);
    ASSERT_TRUE(s) << diags.format();
    core::Json json = core::scenario_to_json(*s);
    // Through text, as a user's file would go.
    core::Diagnostics again;
    auto node = core::parse_json(json.dump(2), f, again);
    ASSERT_TRUE(node);
    auto back = core::parse_scenario(*node, f, again);
    ASSERT_TRUE(back) << again.format();
    EXPECT_FALSE(again.has_errors()) << f << "\n" << again.format();
    EXPECT_EQ(*back, *s) << f;
    EXPECT_EQ(core::scenario_to_json(*back), json) << f;
  }
}

TEST(Scenario, PlanJsonRoundTripIsExact) {
  core::Diagnostics diags;
  auto s = core::load_scenario((kExamples / "inline-model.yaml").string(), diags);
  ASSERT_TRUE(s);
  const core::Plan& plan = s->strategy.plan;
  auto node = core::parse_json(core::plan_to_json(plan).dump(), "plan.json", diags);
  ASSERT_TRUE(node);
  auto back = core::parse_plan(*node, "", diags);
  ASSERT_TRUE(back);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  EXPECT_EQ(*back, plan);
  EXPECT_EQ(back->schedule, core::Schedule::interleaved);
  EXPECT_EQ(back->virtual_stages, 2);
}

TEST(Scenario, PlanFileProblemsNameTheJsonPath) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_file((kExamples / "explicit-plan.yaml").string(), diags);
  ASSERT_TRUE(points);
  core::Json plan = core::plan_to_json(points->front().checked.scenario.strategy.plan);
  plan["pipelines"][0]["stages"][1]["cluster"] = "shanghia";
  plan["pipelines"][0]["stages"][0]["layers"] = 19;
  core::Diagnostics plan_diags;
  auto parsed = core::parse_plan(core::from_json(plan, "plan.json"), "", plan_diags);
  ASSERT_TRUE(parsed);
  EXPECT_FALSE(apps::check_plan_file_against(*parsed, points->front().checked, plan_diags));
  std::string text = plan_diags.format();
  EXPECT_NE(text.find("pipelines[0].stages[1].cluster: unknown cluster 'shanghia'"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pipelines[0].stages: the stages hold 31 layers, the model has 32"),
            std::string::npos)
      << text;
}

TEST(Scenario, SweepIsTheCartesianProduct) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_file((kExamples / "four-regions-sweep.yaml").string(), diags);
  ASSERT_TRUE(points) << diags.format();
  ASSERT_EQ(points->size(), 12u);  // 3 bandwidths x 4 codecs
  // The last axis varies fastest; wan[*] sets every WAN link.
  const auto& p5 = (*points)[5];  // bandwidth index 1 (10Gbps), codec index 1 (fp8-e4m3)
  for (const core::WanLink& w : p5.checked.scenario.wan)
    EXPECT_DOUBLE_EQ(w.bandwidth.value(), 1.25e9);
  EXPECT_EQ(p5.checked.compression.wan_activations.kind, compress::CodecKind::fp8_e4m3);
  EXPECT_EQ(p5.settings[0].first, "wan[*].bandwidth");
  EXPECT_EQ(p5.settings[1].second, "\"fp8-e4m3\"");
  // Everything the sweep does not touch stays as written.
  EXPECT_EQ(p5.checked.scenario.wan[3].trace_steps.size(), 5u);
  EXPECT_EQ(p5.checked.compression.wan_gradients.kind, compress::CodecKind::topk);
}

TEST(Scenario, InlineModelDefaults) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_file((kExamples / "inline-model.yaml").string(), diags);
  ASSERT_TRUE(points) << diags.format();
  const core::ModelConfig& m = points->front().checked.model;
  EXPECT_EQ(m.name, "gpt-2.7b-custom");
  EXPECT_EQ(m.kv_heads, 32);  // default: no grouped-query attention
  EXPECT_EQ(m.ffn_hidden, 10240);
  EXPECT_EQ(m.max_positions, 2048);  // learned positions default to training.seq_len
}

// ---- the command -------------------------------------------------------------------------

TEST(Cli, CheckAcceptsEveryExample) {
  for (const std::string& f : example_files(kExamples)) {
    auto r = cli({"check", f.c_str()});
    EXPECT_EQ(r.status, 0) << f << "\n" << r.err;
    EXPECT_NE(r.out.find("valid"), std::string::npos);
    auto j = cli({"check", f.c_str(), "--json"});
    EXPECT_EQ(j.status, 0);
    EXPECT_TRUE(core::Json::parse(j.out)["valid"].get<bool>());
  }
}

TEST(Cli, NormalizedOutputIsItselfAValidScenario) {
  // `hgsim check` prints the scenario with defaults filled in; that text must load to the
  // same scenario.
  const std::string f = (kExamples / "explicit-plan.yaml").string();
  auto r = cli({"check", f.c_str()});
  ASSERT_EQ(r.status, 0);
  core::Diagnostics diags;
  auto node = core::parse_yaml(r.out, f, diags);
  ASSERT_TRUE(node);
  auto again = core::parse_scenario(*node, f, diags);
  core::Diagnostics d0;
  auto original = core::load_scenario(f, d0);
  ASSERT_TRUE(again && original);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  EXPECT_EQ(*again, *original);
}

TEST(Cli, CheckRejectsBrokenScenarioWithLineAndKey) {
  auto path =
      fs::temp_directory_path() / ("hgsim-cli-broken-" + std::to_string(::getpid()) + ".yaml");
  {
    std::ifstream in(kExamples / "explicit-plan.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    s.replace(s.find("10Gbps"), 6, "10Gb");
    std::ofstream(path) << s;
  }
  auto r = cli({"check", path.c_str()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(path.string() + ":28:16: error: wan[0].bandwidth:"), std::string::npos)
      << r.err;
  auto j = cli({"check", path.c_str(), "--json"});
  EXPECT_EQ(j.status, 1);
  auto json = core::Json::parse(j.out);
  EXPECT_FALSE(json["valid"].get<bool>());
  EXPECT_EQ(json["diagnostics"][0]["key"], "wan[0].bandwidth");
  EXPECT_EQ(json["diagnostics"][0]["line"], 28);
  fs::remove(path);
}

TEST(Cli, ModelsJsonGivesNameAndParams) {
  auto r = cli({"models", "--json"});
  ASSERT_EQ(r.status, 0);
  auto json = core::Json::parse(r.out);
  ASSERT_EQ(json["models"].size(), models::zoo().size());
  for (const auto& m : json["models"]) {
    EXPECT_TRUE(m["name"].is_string());
    EXPECT_GT(m["params"].get<double>(), 1e8);
  }
}

TEST(Cli, GpusJsonListsTheCatalogWithSources) {
  auto r = cli({"gpus", "--json"});
  ASSERT_EQ(r.status, 0);
  auto json = core::Json::parse(r.out);
  ASSERT_GE(json["gpus"].size(), 19u);
  for (const auto& g : json["gpus"]) EXPECT_FALSE(g["source"].get<std::string>().empty());
}

TEST(Cli, ExitStatuses) {
  EXPECT_EQ(cli({}).status, 1);                     // no command
  EXPECT_EQ(cli({"frobnicate"}).status, 1);         // unknown command
  EXPECT_EQ(cli({"check"}).status, 1);              // missing argument
  EXPECT_EQ(cli({"models", "--bogus"}).status, 1);  // unknown flag
  auto v = cli({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("hgsim ", 0), 0u);
  // hgsim plan: bad usage is 1 (the planner itself is tested in test_planner.cpp).
  const std::string f = (kExamples / "explicit-plan.yaml").string();
  EXPECT_EQ(cli({"plan", f.c_str(), "--verify", "0"}).status, 1);
  EXPECT_EQ(cli({"plan", "no-such-scenario.yaml"}).status, 1);
  auto list = cli({"sweep", (kExamples / "four-regions-sweep.yaml").c_str(), "--list", "--json"});
  EXPECT_EQ(list.status, 0);
  EXPECT_EQ(core::Json::parse(list.out)["points"].size(), 12u);
}

// Clusters that no chain of WAN links joins cannot share a plan: the scenario says so,
// naming the groups, where it used to let the planner quietly use one site. A chain
// through a third cluster joins them.
TEST(Scenario, ClustersNoWanPathJoinsAreAWarningNamingTheGroups) {
  auto warnings_of = [](const std::string& wan) {
    const std::string text =
        "name: islands\nmodel: llama2-7b\n"
        "training: {global_batch: 64, seq_len: 2048, precision: bf16}\n"
        "clusters:\n"
        "  - {name: east, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 8, nvlink: {bandwidth: "
        "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
        "  - {name: west, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 8, nvlink: {bandwidth: "
        "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
        "  - {name: north, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 8, nvlink: {bandwidth: "
        "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n" +
        wan + "strategy: auto\n";
    core::Diagnostics diags;
    auto doc = core::parse_yaml(text, "islands.yaml", diags);
    EXPECT_TRUE(doc.has_value());
    auto s = core::parse_scenario(*doc, "islands.yaml", diags);
    EXPECT_TRUE(s.has_value()) << diags.format();
    std::vector<core::Diagnostic> out;
    for (const auto& d : diags.all())
      if (d.message.find("no WAN path") != std::string::npos) out.push_back(d);
    return out;
  };
  auto apart = warnings_of("wan:\n  - {between: [east, north], bandwidth: 10Gbps, latency: 5ms}\n");
  ASSERT_EQ(apart.size(), 1u);
  EXPECT_EQ(apart[0].severity, core::Severity::warning);
  EXPECT_EQ(apart[0].key_path, "wan");
  EXPECT_EQ(apart[0].where.line, 9);
  EXPECT_NE(apart[0].message.find("joins clusters 'east' and 'west'"), std::string::npos)
      << apart[0].message;
  EXPECT_NE(apart[0].message.find("{'east', 'north'}, {'west'}"), std::string::npos)
      << apart[0].message;
  EXPECT_NE(apart[0].hint.find("between: [east, west]"), std::string::npos) << apart[0].hint;
  auto none = warnings_of("");
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].key_path, "clusters");
  EXPECT_NE(none[0].message.find("{'east'}, {'west'}, {'north'}"), std::string::npos)
      << none[0].message;
  EXPECT_TRUE(warnings_of("wan:\n  - {between: [east, north], bandwidth: 10Gbps, latency: 5ms}\n"
                          "  - {between: [north, west], bandwidth: 10Gbps, latency: 5ms}\n")
                  .empty());
}
