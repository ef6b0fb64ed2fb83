// Context parallelism (`cp: N` on a stage, sim/context_parallel.hpp) on small cases with
// closed forms written out here: the ring exchanges' exposed time in both fidelities and the
// planner's analytic model, the memory it saves, the gradient sync it joins, and its
// language (errors at the key path, GPU counts, JSON round trip).
#include <gtest/gtest.h>

#include <string>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "models/transformer.hpp"
#include "planner/cost_model.hpp"
#include "sim/context_parallel.hpp"
#include "sim/resolved_plan.hpp"
#include "sim/simulate.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;
using testing::checked;
using FixedAttention = testing::FixedTimes;

// The tiny model (hidden 256, 4 heads of 64, as many kv heads), sequences of 128 tokens,
// one stage of `cp` context ranks (tp 1) on `nodes` nodes of `per_node` GPUs: NVLink at
// 1 GB/s, the NIC at 0.5 GB/s, no latency. Gradients reduced after the backward.
std::string cp_scenario(int cp, int nodes, int per_node, int micro_batches = 2,
                        const std::string& extra = "") {
  return std::string("name: cp\n") + testing::kTinyModel +
         "training: {global_batch: " + std::to_string(micro_batches) +
         ", seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: c, gpu: H100-80GB-SXM, nodes: " +
         std::to_string(nodes) + ", gpus_per_node: " + std::to_string(per_node) +
         ", nvlink: {bandwidth: 1GB/s, latency: 0s}, nic: {bandwidth: 0.5GB/s, latency: 0s}}\n"
         "strategy:\n  grad_reduce: after_backward\n" +
         extra + "  pipelines:\n    - micro_batches: " + std::to_string(micro_batches) +
         "\n      stages:\n        - {cluster: c, layers: 8, cp: " + std::to_string(cp) + "}\n";
}

double iteration(const apps::CheckedScenario& c, const kernels::ComputeModel& compute,
                 core::Fidelity fidelity) {
  return testing::simulate_plan(c, compute, fidelity)["iteration_time_s"].get<double>();
}

// K and V of one rank's 128 / cp tokens: 2 x tokens x 4 kv heads x 64 x 2 bytes.
double kv_bytes(int cp) {
  return 2.0 * (128.0 / cp) * 4 * 64 * 2;
}

// Two ranks in one node: every step on NVLink (1 GB/s). With the attention core long
// enough to hide a step (A / cp >= step) nothing is exposed; with a short one each of the
// cp - 1 steps leaves step - A / cp, forward (KV) and backward (KV and its gradient). The
// two runs differ only there: the difference is the closed form, in both fidelities.
TEST(ContextParallel, RingExchangesLeaveWhatTheAttentionCannotHide) {
  const int cp = 2, layers = 8, micro_batches = 2;
  const auto c = checked(cp_scenario(cp, 1, 2, micro_batches));
  const double nvlink = 1e9 * testing::kNcclNvlinkShareH100;  // what NCCL moves of the 1 GB/s
  const double step_forward = kv_bytes(cp) / nvlink;
  const double step_backward = 2 * kv_bytes(cp) / nvlink;
  const double tf = 1e-3, short_attention = 1e-5;
  const FixedAttention hidden(tf, cp * step_backward);  // A / cp covers both steps
  const FixedAttention exposed(tf, short_attention);
  const double per_layer = (cp - 1) * ((step_forward - short_attention / cp) +
                                       (step_backward - 2 * short_attention / cp));
  const double expected = micro_batches * layers * per_layer;
  for (auto fidelity : {core::Fidelity::full, core::Fidelity::folded}) {
    SCOPED_TRACE(core::to_string(fidelity));
    const double base = iteration(c, hidden, fidelity);
    const double slow = iteration(c, exposed, fidelity);
    EXPECT_NEAR(slow - base, expected, 1e-9 * slow);
    // The planner's analytic model costs the same plan as the simulator plays it.
    for (const kernels::ComputeModel* compute :
         std::initializer_list<const kernels::ComputeModel*>{&hidden, &exposed}) {
      const auto ctx = planner::make_context(c.scenario, c.model, c.compression, *compute);
      const double analytic = planner::estimate(ctx, c.scenario.strategy.plan).iteration_s;
      EXPECT_NEAR(analytic, iteration(c, *compute, fidelity),
                  (fidelity == core::Fidelity::full ? 1e-2 : 1e-9) * analytic);
    }
  }
}

// Ranks on different nodes exchange over the NIC: a ring of 4 ranks on 2 nodes of 2 GPUs
// crosses a node twice in its 4 hops (ring_step_time: max(chunk / B_nic, mean hop)).
TEST(ContextParallel, ARingAcrossNodesStepsAtItsNicHops) {
  const int cp = 4;
  const auto c = checked(cp_scenario(cp, 2, 2));
  core::Diagnostics diags;
  const auto r = sim::resolve_plan(c.scenario, c.model, c.compression, c.scenario.strategy.plan,
                                   "strategy", diags);
  ASSERT_TRUE(r) << diags.format();
  ASSERT_EQ(r->groups.size(), 4u);
  for (int k = 0; k < cp; ++k) EXPECT_EQ(r->groups[k].cp_rank, k);
  const sim::ContextRing ring = sim::context_ring(*r, 0, 0);
  EXPECT_EQ(ring.cp, cp);
  EXPECT_EQ(ring.hops.crossings, 2);
  EXPECT_DOUBLE_EQ(ring.kv_bytes, kv_bytes(cp));
  const double chunk = kv_bytes(cp);
  const double nvlink = 1e9 * testing::kNcclNvlinkShareH100;
  const double mean = (2 * chunk / nvlink + 2 * chunk / 0.5e9) / 4;
  const double step = std::max(chunk / 0.5e9, mean);
  kernels::PhaseTimes t{core::Seconds(1), core::Seconds(2), core::Seconds(1)};
  t.attention_forward = core::Seconds(1e-6);
  t.attention_backward = core::Seconds(2e-6);
  const auto cx = sim::context_exposure(t, ring, core::Recompute::full);
  EXPECT_NEAR(cx.forward, (cp - 1) * (step - 1e-6 / cp), 1e-15);
  const double step2 =
      std::max(2 * chunk / 0.5e9, (2 * 2 * chunk / nvlink + 2 * 2 * chunk / 0.5e9) / 4);
  EXPECT_NEAR(cx.backward, (cp - 1) * (step2 - 2e-6 / cp), 1e-15);
  EXPECT_DOUBLE_EQ(cx.recompute, cx.forward);  // full recomputation repeats the forward ring
  EXPECT_EQ(sim::context_exposure(t, ring, core::Recompute::none).recompute, 0);
}

// Each rank computes on s / cp tokens: the compute model sees 1 / cp of the sequences
// (GEMMs on s / cp tokens, 1 / cp of the causal attention); the ranks join the stage's
// gradient sync (members = dp x cp), the distributed optimizer shards over them, and the
// activations kept are 1 / cp (flash attention's are linear in tokens).
TEST(ContextParallel, RanksHoldTheirChunkAndShareTheSyncAndTheOptimizer) {
  const auto one = checked(cp_scenario(1, 1, 4, 2, "  zero: 1\n"));
  const auto four = checked(cp_scenario(4, 1, 4, 2, "  zero: 1\n"));
  core::Diagnostics diags;
  const auto r = sim::resolve_plan(four.scenario, four.model, four.compression,
                                   four.scenario.strategy.plan, "strategy", diags);
  ASSERT_TRUE(r) << diags.format();
  EXPECT_DOUBLE_EQ(r->layer_work(r->stage(0, 0)).sequences, 0.25);
  ASSERT_EQ(r->segments.size(), 1u);
  EXPECT_EQ(r->segments[0].members, 4);
  EXPECT_EQ(r->gpus_used, 4);
  const auto m1 = models::stage_memory(one.model, one.scenario.training,
                                       models::stage_spec(one.scenario.strategy.plan, 0, 0));
  const auto m4 = models::stage_memory(four.model, four.scenario.training,
                                       models::stage_spec(four.scenario.strategy.plan, 0, 0));
  EXPECT_GT(m1.activations.value(), 0);
  EXPECT_NEAR(m4.activations.value(), m1.activations.value() / 4, 1e-6 * m1.activations.value());
  EXPECT_NEAR(m4.optimizer.value(), m1.optimizer.value() / 4, 1e-6 * m1.optimizer.value());
  EXPECT_DOUBLE_EQ(m4.weights.value(), m1.weights.value());
}

// ---- the language ---------------------------------------------------------------------

std::string errors_of(const std::string& yaml) {
  core::Diagnostics diags;
  auto node = core::parse_yaml(yaml, "t.yaml", diags);
  if (node)
    if (auto s = core::parse_scenario(*node, "t.yaml", diags)) apps::check_scenario(*s, diags);
  return diags.format();
}

TEST(ContextParallel, LanguageErrorsNameTheKeyAndTheRule) {
  // 2 cp must divide the sequence (load-balanced causal chunks).
  const std::string odd = errors_of(cp_scenario(3, 1, 4));
  EXPECT_NE(odd.find("strategy.pipelines[0].stages[0].cp"), std::string::npos) << odd;
  EXPECT_NE(odd.find("2 x cp = 6"), std::string::npos) << odd;
  // cp counts GPUs: 8 ranks on a node of 4.
  const std::string many = errors_of(cp_scenario(8, 1, 4));
  EXPECT_NE(many.find("uses 8 GPUs"), std::string::npos) << many;
  // Hostile sizes are refused, not wrapped.
  for (const char* cp : {"2147483647", "0", "-2", "1.5", "yes"}) {
    std::string yaml = cp_scenario(2, 1, 4);
    yaml.replace(yaml.find("cp: 2}"), 6, std::string("cp: ") + cp + "}");
    const std::string e = errors_of(yaml);
    EXPECT_NE(e.find("stages[0].cp"), std::string::npos) << cp << ": " << e;
  }
  // Ring attention runs on fused attention kernels.
  std::string standard = cp_scenario(2, 1, 4);
  standard.replace(standard.find("precision: bf16}"), 16, "precision: bf16, attention: standard}");
  const std::string e = errors_of(standard);
  EXPECT_NE(e.find("training.attention is standard"), std::string::npos) << e;
}

TEST(ContextParallel, RoundTripsThroughJson) {
  const auto c = checked(cp_scenario(4, 1, 4));
  const core::Plan& plan = c.scenario.strategy.plan;
  EXPECT_EQ(plan.pipelines[0].stages[0].cp, 4);
  core::Diagnostics diags;
  auto again = core::parse_plan(core::from_json(core::plan_to_json(plan)), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_EQ(*again, plan);
}

}  // namespace
}  // namespace hgsim
