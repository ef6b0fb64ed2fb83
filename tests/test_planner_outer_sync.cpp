// The planner and DiLoCo's outer sync: the `planner:` section, the DiLoCo
// variants the search costs (planner/outer_sync_cost.hpp) and how plans that train differently
// are compared (time to the same progress: iteration / token efficiency).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/document.hpp"
#include "planner/outer_sync_cost.hpp"
#include "planner/planner.hpp"
#include "sim_helpers.hpp"

namespace hgsim {
namespace {

namespace fs = std::filesystem;
using core::Json;
using testing::checked;

// ---- `planner:` ----------------------------------------------------------------------------

const char* const kPlannerBase =
    "name: t\n"                                                             // 1
    "model: {name: tiny, layers: 8, hidden: 256, heads: 4, vocab: 1000}\n"  // 2
    "training: {global_batch: 8, seq_len: 128, precision: bf16}\n"          // 3
    "clusters:\n"                                                           // 4
    "  - {name: a, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 8,\n"       // 5
    "     nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}\n"
    "strategy: auto\n";  // 7

struct Reported {
  bool ok = false;
  std::string text;
  core::Scenario scenario;
};

Reported parse(const std::string& planner_yaml) {
  core::Diagnostics diags;
  const std::string yaml = std::string(kPlannerBase) + planner_yaml;
  auto node = core::parse_yaml(yaml, "p.yaml", diags);
  Reported r;
  if (node)
    if (auto s = core::parse_scenario(*node, "p.yaml", diags)) r.scenario = *s;
  r.ok = !diags.has_errors();
  r.text = diags.format();
  return r;
}

TEST(PlannerSettings, DefaultsSearchSynchronousPlansOnly) {
  const Reported r = parse("");
  ASSERT_TRUE(r.ok) << r.text;
  const core::PlannerSettings& p = r.scenario.planner;
  EXPECT_FALSE(p.allows_diloco());
  EXPECT_EQ(p.inner_steps, (std::vector<int>{50, 200}));
  EXPECT_EQ(p.fragments, (std::vector<int>{1}));
  EXPECT_EQ(p.diloco_token_efficiency, 1.0);
}

TEST(PlannerSettings, ReadsEveryKeyAndRoundTripsThroughJson) {
  const Reported r = parse(
      "planner:\n"
      "  outer_sync: [none, diloco]\n"
      "  inner_steps: [20, 100]\n"
      "  fragments: [1, 4]\n"
      "  overlap_steps: 2\n"
      "  diloco_token_efficiency: 0.8\n");
  ASSERT_TRUE(r.ok) << r.text;
  const core::PlannerSettings& p = r.scenario.planner;
  EXPECT_TRUE(p.allows_diloco());
  EXPECT_EQ(p.inner_steps, (std::vector<int>{20, 100}));
  EXPECT_EQ(p.fragments, (std::vector<int>{1, 4}));
  EXPECT_EQ(p.overlap_steps, 2);
  EXPECT_EQ(p.diloco_token_efficiency, 0.8);
  // The canonical JSON form parses back to the same scenario.
  core::Diagnostics diags;
  const Json j = core::scenario_to_json(r.scenario);
  ASSERT_TRUE(j.contains("planner"));
  auto again = core::parse_scenario(core::from_json(j), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_TRUE(*again == r.scenario);
  // A single value is a list of one.
  const Reported one = parse("planner: {outer_sync: diloco, inner_steps: 30}\n");
  ASSERT_TRUE(one.ok) << one.text;
  EXPECT_EQ(one.scenario.planner.inner_steps, (std::vector<int>{30}));
}

struct PlannerCase {
  const char* yaml;
  const char* where;  // "p.yaml:L:C"
  const char* path;
  const char* message;  // a part of the message or hint
};

TEST(PlannerSettings, BadValuesAreReportedWhereTheyAreWithAHint) {
  const PlannerCase cases[] = {
      {"planner: {outer_sync: [none, dilocco]}\n", "p.yaml:8:30", "planner.outer_sync[1]",
       "diloco"},
      {"planner: {diloco_token_efficiency: 0}\n", "p.yaml:8:36", "planner.diloco_token_efficiency",
       "above 0 and at most 1"},
      {"planner: {diloco_token_efficiency: 1.5}\n", "p.yaml:8:36",
       "planner.diloco_token_efficiency", "above 0 and at most 1"},
      {"planner: {diloco_token_efficiency: -0.2}\n", "p.yaml:8:36",
       "planner.diloco_token_efficiency", "twice the tokens"},
      {"planner: {inner_steps: [50, 0]}\n", "p.yaml:8:29", "planner.inner_steps[1]", "at least 1"},
      {"planner: {inner_steps: []}\n", "p.yaml:8:24", "planner.inner_steps", "a list such as"},
      {"planner: {inner_steps: [10], fragments: [3]}\n", "p.yaml:8:42", "planner.fragments[0]",
       "divide none of the inner_steps"},
      {"planner: {overlap_steps: 0}\n", "p.yaml:8:26", "planner.overlap_steps", "at least 1"},
      {"planner: {inner_step: [10]}\n", "p.yaml:8:11", "planner.inner_step", "inner_steps"},
      {"planner: [diloco]\n", "p.yaml:8:10", "planner", "mapping"},
  };
  for (const auto& c : cases) {
    const Reported r = parse(c.yaml);
    EXPECT_FALSE(r.ok) << c.yaml;
    EXPECT_NE(r.text.find(c.where), std::string::npos) << c.yaml << r.text;
    EXPECT_NE(r.text.find(c.path), std::string::npos) << c.yaml << r.text;
    EXPECT_NE(r.text.find(c.message), std::string::npos) << c.yaml << r.text;
  }
}

// ---- the search ----------------------------------------------------------------------------

// Two islands of 8 H100s (one node each) joined by 1 Gbit/s, a 0.47B-parameter model (0.94 GB
// of bf16 gradients, 7.5 s over 1 Gbit/s) and 256 x 2048 tokens per iteration (a fraction of
// a second of compute on 16 H100s): synchronous data parallelism across the WAN is slow, one
// island alone leaves half the GPUs idle, DiLoCo with H = 100 uses both.
std::string two_islands(const std::string& planner_yaml, int iterations = 1) {
  return R"(
name: two-islands
model: {name: mid, layers: 8, hidden: 2048, heads: 16, vocab: 32000}
training: {global_batch: 256, seq_len: 2048, precision: bf16}
clusters:
  - {name: east, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 8,
     nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}
  - {name: west, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 8,
     nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}
wan:
  - {between: [east, west], bandwidth: 1Gbps, latency: 30ms}
strategy: auto
simulation: {iterations: )" +
         std::to_string(iterations) + "}\n" + planner_yaml;
}

planner::Options quick_options() {
  planner::Options o;
  o.verify = 2;
  o.time_budget_s = 20;
  return o;
}

bool has_outer_sync(const planner::Candidate& c) {
  return c.plan.outer_sync.enabled();
}

TEST(PlannerOuterSync, WithOuterSyncNoneTheSearchIsUnchanged) {
  auto plain = checked(two_islands(""));
  auto none = checked(two_islands("planner: {outer_sync: [none], inner_steps: [100]}\n"));
  const kernels::KernelModel roofline;
  const auto a = planner::make_context(plain.scenario, plain.model, plain.compression, roofline);
  const auto b = planner::make_context(none.scenario, none.model, none.compression, roofline);
  const auto ra = planner::search(a, quick_options());
  const auto rb = planner::search(b, quick_options());
  ASSERT_FALSE(ra.ranked.empty());
  ASSERT_EQ(ra.ranked.size(), rb.ranked.size());
  EXPECT_EQ(ra.evaluated, rb.evaluated);
  for (std::size_t k = 0; k < ra.ranked.size(); ++k) {
    EXPECT_TRUE(ra.ranked[k].plan == rb.ranked[k].plan) << k;
    EXPECT_EQ(ra.ranked[k].analytic_s, rb.ranked[k].analytic_s) << k;
    EXPECT_FALSE(has_outer_sync(ra.ranked[k]));
    EXPECT_EQ(ra.ranked[k].efficiency, 1.0);
  }
  // Allowing DiLoCo adds candidates (two islands that cut the model alike) and leaves the
  // synchronous ones' costs as they were.
  auto allowed =
      checked(two_islands("planner: {outer_sync: [none, diloco], inner_steps: [100]}\n"));
  const auto c =
      planner::make_context(allowed.scenario, allowed.model, allowed.compression, roofline);
  const auto rc = planner::search(c, quick_options());
  EXPECT_GT(rc.evaluated, ra.evaluated);
  EXPECT_TRUE(std::any_of(rc.ranked.begin(), rc.ranked.end(), has_outer_sync));
}

// Eight one-stage replicas on each island (east, west), 1F1B, micro-batch 4: the synchronous
// plan the outer-sync variants are made from.
core::Plan one_stage_on_each_island() {
  core::Plan sync = planner::plan_skeleton(core::Schedule::one_f_one_b, 4, 1);
  for (const char* cluster : {"east", "west"})
    sync.pipelines.push_back({8, 4, {{cluster, 1, 1, 8}}});
  return sync;
}

// One variant per allowed H and F (F dividing H; tau clamped to H / F), the scenario's WAN
// gradient codec on the pseudo-gradients; none for pipelines that share a cluster or cut the
// model differently.
TEST(PlannerOuterSync, VariantsAreTheAllowedHAndFOfPlansWhoseIslandsAreApart) {
  auto c = checked(
      two_islands("planner: {outer_sync: [none, diloco], inner_steps: [8, 10], fragments: [1, 4], "
                  "overlap_steps: 3}\ncompression: {wan_gradients: int8}\n"));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  core::Plan sync = one_stage_on_each_island();
  const auto variants = planner::outer_sync_variants(ctx, sync);
  // (H, F, tau): (8, 1, 1), (8, 4, min(3, 2)), (10, 1, 1); 4 does not divide 10.
  ASSERT_EQ(variants.size(), 3u);
  const int expected[3][3] = {{8, 1, 1}, {8, 4, 2}, {10, 1, 1}};
  for (std::size_t k = 0; k < variants.size(); ++k) {
    const core::OuterSync& o = variants[k].outer_sync;
    EXPECT_TRUE(o.enabled());
    EXPECT_EQ(o.inner_steps, expected[k][0]);
    EXPECT_EQ(o.fragments, expected[k][1]);
    EXPECT_EQ(o.overlap_steps, expected[k][2]);
    EXPECT_EQ(o.codec.codec, "int8");
    EXPECT_EQ(planner::token_efficiency(ctx, variants[k]), 1.0);
  }
  core::Plan same_place = sync;
  same_place.pipelines[1].stages[0].cluster = "east";
  same_place.pipelines[0].replicas = same_place.pipelines[1].replicas = 4;
  EXPECT_TRUE(planner::outer_sync_variants(ctx, same_place).empty());
  core::Plan cut_apart = sync;
  cut_apart.pipelines[1].stages = {{"west", 1, 1, 4}, {"west", 1, 1, 4}};
  EXPECT_TRUE(planner::outer_sync_variants(ctx, cut_apart).empty());
  EXPECT_TRUE(planner::outer_sync_variants(ctx, variants[0]).empty());  // has one already
}

// A DiLoCo candidate's description names its outer sync (H, F, tau, codec): in the JSON's
// ranked list and the verified table it must not read as the synchronous plan it came from.
TEST(PlannerOuterSync, DescriptionOfAVariantNamesItsOuterSync) {
  auto c = checked(
      two_islands("planner: {outer_sync: [none, diloco], inner_steps: [8], fragments: [1, 4], "
                  "overlap_steps: 3}\ncompression: {wan_gradients: int8}\n"));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  core::Plan sync = one_stage_on_each_island();
  const auto variants = planner::outer_sync_variants(ctx, sync);
  ASSERT_EQ(variants.size(), 2u);
  const std::string plain = planner::describe(sync);
  EXPECT_EQ(plain.find("DiLoCo"), std::string::npos) << plain;
  EXPECT_NE(planner::describe(variants[0]).find("; DiLoCo H 8, blocking, pseudo-gradients int8"),
            std::string::npos)
      << planner::describe(variants[0]);
  EXPECT_NE(planner::describe(variants[1])
                .find("; DiLoCo H 8, streaming F 4, tau 2, pseudo-gradients int8"),
            std::string::npos)
      << planner::describe(variants[1]);
  EXPECT_NE(planner::describe(variants[0]), planner::describe(variants[1]));
}

// The analytic DiLoCo iteration against the simulator's mean over one round (blocking and
// streaming), and the closed form's pieces against each other.
TEST(PlannerOuterSync, AnalyticDiLoCoIterationAgreesWithTheSimulator) {
  auto c = checked(two_islands("planner: {outer_sync: [none, diloco]}\n", 40));
  const kernels::KernelModel roofline;
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  core::Plan sync = one_stage_on_each_island();
  sync.grad_sync.bucket = core::Bytes(250e6);
  const auto variants_of = [&](int H, int F, int tau, const char* codec) {
    core::Plan p = sync;
    p.outer_sync.method = core::OuterSyncMethod::diloco;
    p.outer_sync.inner_steps = H;
    p.outer_sync.fragments = F;
    p.outer_sync.overlap_steps = tau;
    p.outer_sync.codec = core::CodecConfig{codec, {}};
    return p;
  };
  const double tolerance = 0.05;
  int k = 0;
  for (const auto& p : {variants_of(20, 1, 1, "none"), variants_of(20, 4, 2, "none"),
                        variants_of(20, 1, 1, "int8"), variants_of(20, 4, 5, "int8")}) {
    const auto e = planner::estimate_outer_sync(ctx, p);
    ASSERT_TRUE(e.inner.fits) << e.inner.not_fitting;
    ASSERT_EQ(e.fragment_s.size(), static_cast<std::size_t>(p.outer_sync.fragments));
    // The closed form's own arithmetic: blocking t_inner + t_sync / H; streaming the
    // exposed part of each fragment.
    double exposed = 0;
    for (double t : e.fragment_s)
      exposed += p.outer_sync.fragments == 1
                     ? t
                     : std::max(0.0, t - p.outer_sync.overlap_steps * e.inner_s);
    EXPECT_NEAR(e.iteration_s, e.inner_s + exposed / p.outer_sync.inner_steps, 1e-12);
    // The inner step is a synchronous step without the WAN all-reduce: well below it.
    EXPECT_LT(e.inner_s, planner::estimate(ctx, sync).iteration_s / 2);
    const Json sim = testing::simulate_plan(c, p, roofline);
    const double simulated = sim["iteration_time_s"].get<double>();
    EXPECT_NEAR(e.iteration_s, simulated, tolerance * simulated)
        << "F = " << p.outer_sync.fragments << ", " << p.outer_sync.codec.codec << ": analytic "
        << e.iteration_s << " s, simulated " << simulated << " s";
    RecordProperty("relative_error_" + std::to_string(k++),
                   std::to_string((e.iteration_s - simulated) / simulated));
  }
}

// The planner picks DiLoCo when it is allowed and its tokens are worth as much as
// synchronous ones, and synchronous training when they are worth less than the crossover
// e* = t_diloco / t_sync (both simulated; the best synchronous plan here is one island alone,
// the other idle): DiLoCo's time to the same progress is t_diloco / e.
TEST(PlannerOuterSync, ChoosesDiLoCoAboveTheCrossoverEfficiencyAndSynchronousBelow) {
  const kernels::KernelModel roofline;
  auto run = [&](double efficiency) {
    auto c =
        checked(two_islands("planner: {outer_sync: [none, diloco], inner_steps: [100], "
                            "diloco_token_efficiency: " +
                            std::to_string(efficiency) + "}\n"));
    const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
    return planner::plan(ctx, quick_options());
  };
  const auto high = run(1.0);
  ASSERT_TRUE(high.best);
  ASSERT_TRUE(high.best->candidate.plan.outer_sync.enabled()) << high.best->candidate.description;
  EXPECT_EQ(high.best->iterations, 100);  // verified over one round of H = 100
  ASSERT_TRUE(high.best_synchronous);
  const double t_diloco = high.best->simulated_s;
  const double t_sync = high.best_synchronous->simulated_s;
  const double crossover = t_diloco / t_sync;
  ASSERT_LT(crossover, 0.9);  // DiLoCo's iteration is the shorter
  EXPECT_NEAR(high.best->effective_s(), t_diloco, 1e-12);

  // Below the crossover DiLoCo's time to the same progress, t_diloco / (0.8 e*) = t_sync /
  // 0.8, is longer than t_sync, so a synchronous plan wins. t_sync is the best synchronous
  // plan the DiLoCo run simulated; this run simulates that plan too, among more synchronous
  // candidates (DiLoCo's now rank lower), and keeps the fastest: t_sync or faster.
  const auto below = run(0.8 * crossover);
  ASSERT_TRUE(below.best);
  EXPECT_FALSE(below.best->candidate.plan.outer_sync.enabled())
      << below.best->candidate.description;
  EXPECT_LE(below.best->simulated_s, t_sync * (1 + 1e-9));
  const bool reference_verified =
      std::any_of(below.verified.begin(), below.verified.end(), [&](const auto& v) {
        return v.candidate.plan == high.best_synchronous->candidate.plan;
      });
  EXPECT_TRUE(reference_verified) << high.best_synchronous->candidate.description;

  const double between = (crossover + 1) / 2;  // above the crossover, below 1
  const auto above = run(between);
  ASSERT_TRUE(above.best);
  EXPECT_TRUE(above.best->candidate.plan.outer_sync.enabled());
  EXPECT_NEAR(above.best->effective_s(), t_diloco / between, 1e-6 * t_sync);
  EXPECT_LT(above.best->effective_s(), t_sync);
}

fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / ("hgsim-outer-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p;
}

// The report says what was decided about DiLoCo and why: chosen with its time to the same
// progress beside the synchronous plan's, or rejected with the same two times (here the
// DiLoCo tokens are worth so little that its time to the same progress is the longer).
TEST(PlannerOuterSync, DecisionAboutDiLoCoIsChosenOrRejectedWithBothTimes) {
  const kernels::KernelModel roofline;
  auto run = [&](double efficiency) {
    auto c =
        checked(two_islands("planner: {outer_sync: [none, diloco], inner_steps: [100], "
                            "diloco_token_efficiency: " +
                            std::to_string(efficiency) + "}\n"));
    const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
    const auto r = planner::plan(ctx, quick_options());
    return std::pair{r, planner::diloco_decision(ctx, r)};
  };
  const auto [high, chosen] = run(1.0);
  ASSERT_TRUE(high.best && high.best_synchronous);
  EXPECT_EQ(chosen.verdict, "chosen") << chosen.text;
  EXPECT_TRUE(chosen.simulated);
  EXPECT_DOUBLE_EQ(chosen.diloco_s, high.best->effective_s());
  EXPECT_DOUBLE_EQ(chosen.synchronous_s, high.best_synchronous->simulated_s);
  EXPECT_NE(chosen.diloco_description.find("DiLoCo H 100"), std::string::npos);

  const auto [low, rejected] = run(0.05);
  ASSERT_TRUE(low.best);
  ASSERT_FALSE(low.best->candidate.plan.outer_sync.enabled());
  EXPECT_EQ(rejected.verdict, "rejected") << rejected.text;
  // Simulated when a DiLoCo candidate was verified, else both times are the analytic model's.
  if (rejected.simulated)
    EXPECT_DOUBLE_EQ(rejected.synchronous_s, low.best->simulated_s);
  else
    EXPECT_NE(rejected.text.find("analytic model"), std::string::npos) << rejected.text;
  EXPECT_GT(rejected.diloco_s, rejected.synchronous_s);
  EXPECT_NE(rejected.diloco_description.find("DiLoCo H 100"), std::string::npos);
  EXPECT_NE(rejected.text.find("to the same progress"), std::string::npos) << rejected.text;

  // Without DiLoCo allowed there is nothing to say.
  auto plain = checked(two_islands(""));
  const auto ctx = planner::make_context(plain.scenario, plain.model, plain.compression, roofline);
  EXPECT_TRUE(planner::diloco_decision(ctx, planner::plan(ctx, quick_options())).verdict.empty());
}

// The JSON of hgsim plan gives a DiLoCo candidate its own settings beside its description,
// and says what was decided about DiLoCo; the table says it too.
TEST(PlannerOuterSync, PlanJsonDescribesDiLoCoCandidatesAndTheDecision) {
  const fs::path scenario =
      temp_file("chosen.yaml", two_islands("planner: {outer_sync: [none, diloco], "
                                           "inner_steps: [100], fragments: [1, 4], "
                                           "diloco_token_efficiency: 1.0}\n"));
  auto r = testing::cli({"plan", scenario.c_str(), "--json", "--verify", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_TRUE(j.contains("diloco")) << r.out;
  EXPECT_EQ(j["diloco"]["verdict"], "chosen");
  int outer = 0;
  for (const char* list : {"ranked", "verified"})
    for (const Json& c : j[list]) {
      if (!c.contains("outer_sync")) {
        EXPECT_EQ(c["description"].get<std::string>().find("DiLoCo"), std::string::npos);
        continue;
      }
      ++outer;
      const int H = c["outer_sync"]["inner_steps"].get<int>();
      const int F = c["outer_sync"]["fragments"].get<int>();
      EXPECT_EQ(H, 100);
      EXPECT_TRUE(F == 1 || F == 4) << F;
      EXPECT_NE(c["description"].get<std::string>().find("DiLoCo H 100"), std::string::npos)
          << c["description"];
    }
  EXPECT_GT(outer, 0) << r.out;
  auto table = testing::cli({"plan", scenario.c_str(), "--verify", "2"});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("DiLoCo: chosen"), std::string::npos) << table.out;
  fs::remove(scenario);
}

// outer_sync without `none` asks for outer sync: below the crossover, where [none, diloco]
// chooses synchronous training, the best plan has outer sync, with the faster synchronous
// plan reported beside it; no note is needed.
TEST(PlannerOuterSync, WithoutNoneTheBestPlanHasOuterSyncEvenWhenSlower) {
  const kernels::KernelModel roofline;
  auto c = checked(two_islands(
      "planner: {outer_sync: [diloco], inner_steps: [100], diloco_token_efficiency: 0.05}\n"));
  const auto ctx = planner::make_context(c.scenario, c.model, c.compression, roofline);
  const auto r = planner::plan(ctx, quick_options());
  ASSERT_TRUE(r.best);
  EXPECT_TRUE(r.best->candidate.plan.outer_sync.enabled()) << r.best->candidate.description;
  ASSERT_TRUE(r.best_synchronous);
  EXPECT_LT(r.best_synchronous->simulated_s, r.best->effective_s());
  EXPECT_TRUE(r.notes.empty());
}

// hgsim plan reports the DiLoCo winner with its efficiency and the synchronous plan beside
// it, writes outer_sync into the plan file, and hgsim run of that file (simulation.iterations
// >= H) reproduces the verified time.
TEST(PlannerOuterSync, PlanReportsItAndItsPlanFileRunsToTheVerifiedTime) {
  const fs::path scenario =
      temp_file("two.yaml", two_islands("planner: {outer_sync: [none, diloco], inner_steps: [100], "
                                        "diloco_token_efficiency: 0.9}\n",
                                        200));
  const fs::path plan_file = temp_file("plan.json", "");
  auto r = testing::cli(
      {"plan", scenario.c_str(), "--json", "--verify", "2", "--out", plan_file.c_str()});
  ASSERT_EQ(r.status, 0) << r.err;
  const Json j = Json::parse(r.out);
  const Json& best = j["best"];
  ASSERT_TRUE(best["plan"].contains("outer_sync")) << best["description"];
  EXPECT_EQ(best["token_efficiency"].get<double>(), 0.9);
  EXPECT_NEAR(best["effective_time_s"].get<double>(), best["simulated_time_s"].get<double>() / 0.9,
              1e-12);
  EXPECT_NE(
      best["token_efficiency_source"].get<std::string>().find("planner.diloco_token_efficiency"),
      std::string::npos);
  ASSERT_TRUE(j["best_synchronous"].is_object());
  EXPECT_FALSE(j["best_synchronous"]["plan"].contains("outer_sync"));
  EXPECT_GT(j["best_synchronous"]["simulated_time_s"].get<double>(),
            best["effective_time_s"].get<double>());

  core::Diagnostics diags;
  auto written = core::load_plan(plan_file.string(), diags);
  ASSERT_TRUE(written) << diags.format();
  EXPECT_TRUE(written->outer_sync.enabled());
  auto run = testing::cli({"run", scenario.c_str(), "--plan", plan_file.c_str(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  const double verified = best["simulated_time_s"].get<double>();
  EXPECT_NEAR(Json::parse(run.out)["iteration_time_s"].get<double>(), verified, 1e-9 * verified);

  // --evaluate of the written file: the same simulation, the scenario's efficiency.
  auto evaluated =
      testing::cli({"plan", scenario.c_str(), "--evaluate", plan_file.c_str(), "--json"});
  ASSERT_EQ(evaluated.status, 0) << evaluated.err;
  const Json e = Json::parse(evaluated.out);
  EXPECT_NEAR(e["simulated_time_s"].get<double>(), verified, 1e-9 * verified);
  EXPECT_EQ(e["token_efficiency"].get<double>(), 0.9);
  EXPECT_NEAR(e["effective_time_s"].get<double>(), verified / 0.9, 1e-9 * verified);

  // The table says the same for people.
  auto table = testing::cli({"plan", scenario.c_str(), "--verify", "2"});
  ASSERT_EQ(table.status, 0) << table.err;
  for (const char* part :
       {"outer sync: DiLoCo H = 100", "token efficiency 0.9", "time to the same progress",
        "best synchronous plan:", "planner.diloco_token_efficiency"})
    EXPECT_NE(table.out.find(part), std::string::npos) << part << "\n" << table.out;
  fs::remove(scenario);
  fs::remove(plan_file);
}

}  // namespace
}  // namespace hgsim
