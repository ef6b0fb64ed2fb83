// A plan may choose its own recomputation and WAN codecs (the planner's plans do): they
// round-trip through the plan file, override the scenario's settings, and bad codecs in
// them are reported at their key path.
#include <gtest/gtest.h>

#include "apps/validate.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "sim/resolved_plan.hpp"

namespace hgsim {
namespace {

TEST(PlanChoices, RoundTripAndOverrideTheScenario) {
  core::Diagnostics diags;
  const char* text = R"(
pipelines: [{micro_batches: 4, stages: [{cluster: a, layers: 8}]}]
recompute: none
compression: {wan_activations: int8, wan_gradients: {codec: topk, ratio: 0.01}}
)";
  auto node = core::parse_yaml(text, "plan.yaml", diags);
  ASSERT_TRUE(node) << diags.format();
  auto plan = core::parse_plan(*node, "", diags);
  ASSERT_TRUE(plan && !diags.has_errors()) << diags.format();
  ASSERT_TRUE(plan->recompute);
  EXPECT_EQ(*plan->recompute, core::Recompute::none);
  ASSERT_TRUE(plan->compression);
  EXPECT_EQ(plan->compression->wan_activations.codec, "int8");
  // Round trip through the JSON form a plan file holds.
  auto again = core::parse_plan(core::from_json(core::plan_to_json(*plan)), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_EQ(*again, *plan);
  // Overrides: the plan's own recompute and codecs (the codec the plan names, not the
  // scenario's codec for that traffic class).
  core::Scenario s;
  s.training.recompute = core::Recompute::full;
  compress::CompressionSpecs scenario_codecs;
  scenario_codecs.wan_gradients = compress::default_spec(compress::CodecKind::int8);
  const auto effective = sim::apply_plan_choices(s, scenario_codecs, *plan, "", diags);
  ASSERT_TRUE(effective) << diags.format();
  EXPECT_EQ(effective->recompute, core::Recompute::none);
  EXPECT_EQ(effective->training.recompute, core::Recompute::none);
  EXPECT_EQ(effective->codecs.wan_gradients.kind, compress::CodecKind::topk);
  EXPECT_EQ(effective->codecs.wan_activations.kind, compress::CodecKind::int8);
  // Without choices the scenario's settings stay.
  core::Plan plain = *plan;
  plain.recompute.reset();
  plain.compression.reset();
  const auto kept = sim::apply_plan_choices(s, scenario_codecs, plain, "", diags);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->recompute, core::Recompute::full);
  EXPECT_EQ(kept->codecs.wan_gradients.kind, compress::CodecKind::int8);
  EXPECT_EQ(kept->codecs.wan_activations.kind, compress::CodecKind::none);
}

TEST(PlanChoices, BadCodecsAndModesAreReportedAtTheirPath) {
  core::Diagnostics diags;
  const char* text = R"(
pipelines: [{micro_batches: 4, stages: [{cluster: a, layers: 8}]}]
recompute: sometimes
compression: {wan_activations: int9}
)";
  auto node = core::parse_yaml(text, "plan.yaml", diags);
  auto plan = core::parse_plan(*node, "", diags);
  EXPECT_NE(diags.format().find("recompute"), std::string::npos) << diags.format();
  ASSERT_TRUE(plan);
  core::Scenario s;
  core::Diagnostics codec_diags;
  EXPECT_FALSE(sim::apply_plan_choices(s, {}, *plan, "", codec_diags));
  EXPECT_NE(codec_diags.format().find("compression.wan_activations"), std::string::npos)
      << codec_diags.format();
}

}  // namespace
}  // namespace hgsim
