// A plan may choose its own recomputation and WAN codecs (the planner's plans do): they
// round-trip through the plan file, override the scenario's settings, and bad codecs in
// them are reported at their key path.
#include <gtest/gtest.h>

#include "apps/validate.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"

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
  // Overrides.
  core::Scenario s;
  s.training.recompute = core::Recompute::full;
  const auto effective = core::with_plan_choices(s, *plan);
  EXPECT_EQ(effective.training.recompute, core::Recompute::none);
  EXPECT_EQ(effective.compression.wan_gradients.codec, "topk");
  // Without choices the scenario's settings stay.
  core::Plan plain = *plan;
  plain.recompute.reset();
  plain.compression.reset();
  EXPECT_EQ(core::with_plan_choices(s, plain).training.recompute, core::Recompute::full);
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
  EXPECT_FALSE(apps::resolve_plan_compression(*plan, s, "", codec_diags));
  EXPECT_NE(codec_diags.format().find("compression.wan_activations"), std::string::npos)
      << codec_diags.format();
}

}  // namespace
}  // namespace hgsim
