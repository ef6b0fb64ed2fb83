// What a prediction says beside its numbers: the validation's error for its provenance
// (sim/uncertainty.hpp, from validation/published-errors.json), the measured loss of each
// lossy codec and planner.max_loss_increase (planner/loss_bound.hpp, from
// validation/convergence-losses.json), and time to train with failures and checkpoints
// (sim/iterations.hpp, Young 1974 / Daly 2006). Every figure is checked against the
// committed validation files read here independently, or against a hand calculation.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "apps/validate.hpp"
#include "compress/codec_spec.hpp"
#include "core/document.hpp"
#include "core/units.hpp"
#include "planner/loss_bound.hpp"
#include "sim/iterations.hpp"
#include "sim/uncertainty.hpp"

using namespace hgsim;

namespace {

core::Json source_json(const std::string& path) {
  std::ifstream in(std::string(HGSIM_SOURCE_DIR) + "/" + path);
  std::stringstream text;
  text << in.rdbuf();
  return core::Json::parse(text.str());
}

std::string pct(double fraction, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, 100 * fraction);
  return buf;
}

compress::CodecSpec codec(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "codec.yaml", diags);
  auto spec = compress::parse_codec_spec(*node, "codec", diags);
  EXPECT_TRUE(spec && !diags.has_errors()) << diags.format();
  return *spec;
}

const char* kScenario = R"(name: caveats
model: llama2-7b
training: {global_batch: 16, seq_len: 2048, precision: bf16}
clusters:
  - {name: a, gpu: H100-80GB-SXM, nodes: 2, gpus_per_node: 8, nvlink: {bandwidth: 450GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 2us}}
strategy: auto
)";

std::string errors_of(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "t.yaml", diags);
  if (node)
    if (auto s = core::parse_scenario(*node, "t.yaml", diags)) apps::check_scenario(*s, diags);
  return diags.format();
}

}  // namespace

// ---- uncertainty ------------------------------------------------------------------------

TEST(Uncertainty, EstimatesCarryThePublishedRunsErrorOfTheirGroup) {
  const core::Json figures = source_json("validation/published-errors.json");
  for (const auto& [gpus, group] : {std::pair{8, "single-node"}, std::pair{64, "multi-node"}}) {
    const core::Json& g = figures["classes"]["datasheet"][group];
    const std::string text = sim::uncertainty_text({{"H100-80GB-SXM", "estimated"}}, gpus);
    EXPECT_NE(text.find("compute estimated from datasheets; such estimates were within " +
                        pct(g["mean_abs_time_error"].get<double>(), "%.1f%%") + " on average of " +
                        std::to_string(g["runs"].get<int>()) + " published " + group +
                        " runs (mean signed " +
                        pct(g["mean_signed_time_error"].get<double>(), "%+.1f%%")),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("see validation/published.md"), std::string::npos) << text;
    const core::Json j = sim::uncertainty_json({{"H100-80GB-SXM", "estimated"}}, gpus);
    EXPECT_EQ(j["group"], group);
    EXPECT_TRUE(j["by_gpu"]["H100-80GB-SXM"]["validated"].get<bool>());
    EXPECT_DOUBLE_EQ(j["by_gpu"]["H100-80GB-SXM"]["mean_signed_time_error"].get<double>(),
                     g["mean_signed_time_error"].get<double>());
  }
}

TEST(Uncertainty, CalibratedAndMeasuredSayNotValidatedPerGpuType) {
  const std::string text = sim::uncertainty_text(
      {{"A100-80GB-SXM", "calibrated"}, {"H100-80GB-SXM", "partly measured:h.json: 1 of 9 ops"}},
      16);
  EXPECT_NE(text.find("A100-80GB-SXM: compute from the clusters' calibration: not validated"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("H100-80GB-SXM: compute measured (profiles): not validated"),
            std::string::npos)
      << text;
  EXPECT_EQ(sim::provenance_class("measured:x.json"), "measured");
  EXPECT_EQ(sim::provenance_class("estimated"), "datasheet");
}

// ---- the loss of lossy codecs ----------------------------------------------------------------

TEST(LossBound, MeasuredLossesAreTheConvergenceRunsOwn) {
  const core::Json runs = source_json("validation/convergence-losses.json");
  double powersgd4 = 0, int8 = 0;
  for (const core::Json& s : runs["settings"]) {
    if (s["setting"] == "PowerSGD rank 4 gradients (error feedback)")
      powersgd4 = s["loss_increase"].get<double>();
    if (s["setting"] == "int8 activations") int8 = s["loss_increase"].get<double>();
  }
  // validation/convergence.md's table: +30.57 % and -0.46 %.
  EXPECT_NEAR(powersgd4, 0.3057, 5e-5);
  EXPECT_NEAR(int8, -0.0046, 5e-5);
  const auto m = planner::measured_loss(codec("{codec: powersgd, rank: 4, error_feedback: true}"),
                                        "wan_gradients");
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->loss_increase, powersgd4);
  // The same codec on the other traffic class, or another rank, was not measured.
  EXPECT_FALSE(planner::measured_loss(codec("{codec: powersgd, rank: 8}"), "wan_gradients"));
  EXPECT_FALSE(planner::measured_loss(codec("int8"), "wan_gradients"));
  ASSERT_TRUE(planner::measured_loss(codec("int8"), "wan_activations"));
  EXPECT_NE(planner::loss_text(codec("{codec: powersgd, rank: 8}"), "wan_gradients")
                .find("no convergence run measured its loss"),
            std::string::npos);
  EXPECT_NE(planner::loss_text(codec("{codec: powersgd, rank: 4}"), "wan_gradients")
                .find("final loss +30.57%"),
            std::string::npos);
  EXPECT_EQ(planner::loss_text(compress::CodecSpec{}, "wan_gradients"), "");
}

TEST(LossBound, MaxLossIncreaseRefusesCodecsAboveItOrUnmeasured) {
  core::Scenario s;
  compress::CompressionSpecs codecs{codec("int8"), codec("{codec: powersgd, rank: 4}")};
  std::vector<std::string> notes;
  planner::apply_loss_bound(s, codecs, notes);  // no bound: nothing changes
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(codecs.wan_gradients.kind, compress::CodecKind::powersgd);
  s.planner.max_loss_increase = 0.05;
  planner::apply_loss_bound(s, codecs, notes);
  EXPECT_EQ(codecs.wan_activations.kind, compress::CodecKind::int8);  // -0.46 %: kept
  EXPECT_EQ(codecs.wan_gradients.kind, compress::CodecKind::none);    // +30.57 %: refused
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("+30.57%"), std::string::npos) << notes[0];
  codecs.wan_gradients = codec("{codec: powersgd, rank: 8}");
  notes.clear();
  planner::apply_loss_bound(s, codecs, notes);
  EXPECT_EQ(codecs.wan_gradients.kind, compress::CodecKind::none);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no convergence run measured its loss"), std::string::npos) << notes[0];
}

TEST(LossBound, TheScenarioKeyIsChecked) {
  EXPECT_EQ(errors_of(std::string(kScenario) + "planner: {max_loss_increase: 0.05}\n"), "");
  const std::string e = errors_of(std::string(kScenario) + "planner: {max_loss_increase: -1}\n");
  EXPECT_NE(e.find("t.yaml:7:30: error: planner.max_loss_increase: the largest loss increase"),
            std::string::npos)
      << e;
  EXPECT_NE(errors_of(std::string(kScenario) + "planner: {max_loss_increase: lots}\n")
                .find("planner.max_loss_increase"),
            std::string::npos);
}

// ---- time to train with failures ----------------------------------------------------------

TEST(TimeToTrain, FailuresCostTheFirstOrderModelByHand) {
  core::FailureModel m;
  m.gpu_mtbf = core::Seconds(50000 * 3600.0);
  m.checkpoint_interval = core::Seconds(3 * 3600.0);
  m.checkpoint_cost = core::Seconds(360);
  m.restart_time = core::Seconds(1800);
  const double hour = 3600;
  const sim::FailureCost c = sim::expected_failure_cost(m, 1000 * hour, 1000);
  // 1000 GPUs: one failure every 50 h. 1000 h of work in 2.9 h pieces: 344.83 checkpoints of
  // 0.1 h; (1000 + 34.483) h / 50 h = 20.690 failures of 1.5 h + 0.5 h each.
  EXPECT_NEAR(c.job_mtbf_s / hour, 50, 1e-9);
  EXPECT_NEAR(c.checkpoints, 1000 / 2.9, 1e-9);
  EXPECT_NEAR(c.checkpoint_overhead_s / hour, 100 / 2.9, 1e-9);
  EXPECT_NEAR(c.failures, (1000 + 100 / 2.9) / 50, 1e-9);
  EXPECT_NEAR(c.lost_per_failure_s / hour, 2, 1e-12);
  EXPECT_NEAR(c.expected_time_s / hour, 1000 + 100 / 2.9 + 2 * (1000 + 100 / 2.9) / 50, 1e-9);
  // Young: sqrt(2 x 0.1 h x 50 h) = sqrt(10) h.
  EXPECT_NEAR(c.young_interval_s / hour, std::sqrt(10.0), 1e-9);
  EXPECT_TRUE(c.first_order_valid);
  m.checkpoint_interval = core::Seconds(30 * hour);
  EXPECT_FALSE(sim::expected_failure_cost(m, 1000 * hour, 1000).first_order_valid);
}

TEST(TimeToTrain, FailureKeysAreCheckedAndRoundTrip) {
  const std::string base = std::string(kScenario);
  auto with = [&](const std::string& failures) {
    std::string yaml = base;
    yaml.replace(yaml.find("precision: bf16}"), 16,
                 "precision: bf16, tokens: 1T, failures: " + failures + "}");
    return yaml;
  };
  const std::string good = with(
      "{gpu_mtbf: 50000h, checkpoint_interval: 3h, checkpoint_cost: 2min, "
      "restart_time: 10min}");
  EXPECT_EQ(errors_of(good), "");
  EXPECT_EQ(errors_of(with("{failures_per_gpu_hour: 2e-5, checkpoint_interval: 1d}")), "");
  EXPECT_NE(errors_of(with("{checkpoint_interval: 3h}")).find("no failure rate"),
            std::string::npos);
  EXPECT_NE(errors_of(with("{gpu_mtbf: 1h, failures_per_gpu_hour: 1e-5, checkpoint_interval: "
                           "3h}"))
                .find("both give the failure rate"),
            std::string::npos);
  EXPECT_NE(errors_of(with("{gpu_mtbf: 1h, checkpoint_interval: 3h, checkpoint_cost: 4h}"))
                .find("training.failures.checkpoint_cost: writing a checkpoint"),
            std::string::npos);
  EXPECT_NE(
      errors_of(with("{failures_per_gpu_hour: 2, checkpoint_interval: 3h}")).find("in (0, 1)"),
      std::string::npos);
  EXPECT_NE(errors_of(with("{gpu_mtbf: 1h, checkpoint_interval: 3h, mtbf: 2h}"))
                .find("training.failures.mtbf"),
            std::string::npos);
  // The JSON form reads back to the same scenario.
  core::Diagnostics diags;
  auto s = core::parse_scenario(*core::parse_yaml(good, "t.yaml", diags), "t.yaml", diags);
  ASSERT_TRUE(s && !diags.has_errors()) << diags.format();
  ASSERT_TRUE(s->training.failures);
  EXPECT_DOUBLE_EQ(s->training.failures->gpu_mtbf.value(), 50000 * 3600.0);
  auto again = core::parse_scenario(
      *core::parse_yaml(core::scenario_to_json(*s).dump(), "t.json", diags), "t.json", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_TRUE(*again == *s);
}

TEST(TimeToTrain, DurationsPastADayAreInDaysAndParse) {
  EXPECT_EQ(core::human_duration(core::Seconds(3 * 86400.0)), "3 d");
  EXPECT_EQ(core::human_duration(core::Seconds(36 * 3600.0)), "1.5 d");
  EXPECT_EQ(core::human_duration(core::Seconds(23 * 3600.0)), "23 h");
  ASSERT_TRUE(core::parse_duration("1d"));
  EXPECT_DOUBLE_EQ(core::parse_duration("1d").value->value(), 86400.0);
  EXPECT_FALSE(core::parse_duration("2d"));  // a step or a latency stays under a day
  ASSERT_TRUE(core::parse_long_duration("50000h"));
  EXPECT_DOUBLE_EQ(core::parse_long_duration("2d").value->value(), 2 * 86400.0);
}
