// Helpers the simulator and planner tests share: a checked scenario from YAML text, and a
// compute model with fixed layer times (so that closed forms are exact).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "apps/validate.hpp"
#include "core/document.hpp"
#include "kernels/compute_model.hpp"

namespace hgsim::testing {

inline apps::CheckedScenario checked(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "test.yaml", diags);
  EXPECT_TRUE(node) << diags.format();
  auto s = core::parse_scenario(*node, "test.yaml", diags);
  EXPECT_TRUE(s) << diags.format();
  auto c = apps::check_scenario(*s, diags);
  EXPECT_TRUE(c) << diags.format();
  return *c;
}

// Every layer takes `forward` seconds forward and twice that backward; nothing else costs.
class FixedTimes final : public kernels::ComputeModel {
 public:
  explicit FixedTimes(double forward) : forward_(forward) {}
  kernels::PhaseTimes layer(const kernels::GpuSpec&, const kernels::LayerWork&) const override {
    return {core::Seconds(forward_), core::Seconds(2 * forward_), core::Seconds(0)};
  }
  kernels::PhaseTimes logits(const kernels::GpuSpec&, const kernels::LayerWork&) const override {
    return {};
  }
  core::Seconds optimizer_step(const kernels::GpuSpec&, double, core::Precision,
                               core::Optimizer) const override {
    return core::Seconds(0);
  }
  std::string provenance(const kernels::GpuSpec&) const override { return "estimated"; }

 private:
  double forward_;
};

}  // namespace hgsim::testing
