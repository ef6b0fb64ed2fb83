// Where an iteration goes: the compute model's split of a phase by kernel class against its
// closed form, and the results' breakdown of every GPU's iteration (compute by kernel class,
// optimizer, exposed communication by class, bubble) on small cases with closed forms and on
// the shipped examples, where its parts must add up to the iteration.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/document.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/layer_ops.hpp"
#include "sim/breakdown.hpp"
#include "sim/collectives.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using core::Json;
using kernels::KernelSplit;

core::ModelConfig gpt(int hidden, int heads) {
  core::ModelConfig m;
  m.name = "gpt-test";
  m.layers = 4;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.vocab = 51200;
  m.ffn_hidden = 4 * hidden;
  m.max_positions = 4096;
  return m;
}

kernels::LayerWork work_of(const core::ModelConfig& m, double sequences, int seq_len) {
  kernels::LayerWork work;
  work.model = &m;
  work.sequences = sequences;
  work.seq_len = seq_len;
  return work;
}

// The split's closed form from the ops themselves: each GEMM's time less its kernels'
// gemm_overhead is GEMM, each attention-core op's less kernel_overhead attention, each other
// op's less its class's overhead memory-bound; the fixed costs, and what the CPU's issue
// time adds over the GPU's, overhead.
KernelSplit expected_split(const kernels::KernelModel& model, const kernels::GpuSpec& gpu,
                           const std::vector<kernels::OpCall>& ops, core::Precision precision) {
  const kernels::KernelCosts costs = model.costs_for(gpu);
  KernelSplit out;
  double gpu_time = 0, launches = 0;
  for (const kernels::OpCall& op : ops) {
    const double t = model.op_time(gpu, op, precision).value();
    gpu_time += t;
    launches += op.kernels;
    const bool gemm = op.op == "gemm" || op.op == "gemm_dgrad" || op.op == "gemm_wgrad";
    double fixed = op.kernels * costs.kernel_overhead.value();
    if (gemm || op.op == "bmm") fixed = op.kernels * costs.gemm_overhead.value();
    if (op.bound == kernels::Bound::memory)
      fixed = op.kernels * costs.memory_op(kernels::memory_class(op.op)).overhead.value();
    out.overhead_s += fixed;
    (op.role == "attention" ? out.attention_s : gemm ? out.gemm_s : out.memory_s) += t - fixed;
  }
  out.overhead_s += std::max(0.0, launches * costs.host_dispatch.value() - gpu_time);
  return out;
}

void expect_split(const KernelSplit& got, const KernelSplit& want, double phase_s) {
  EXPECT_NEAR(got.gemm_s, want.gemm_s, 1e-12 * phase_s);
  EXPECT_NEAR(got.attention_s, want.attention_s, 1e-12 * phase_s);
  EXPECT_NEAR(got.memory_s, want.memory_s, 1e-12 * phase_s);
  EXPECT_NEAR(got.overhead_s, want.overhead_s, 1e-12 * phase_s);
  EXPECT_NEAR(got.total(), phase_s, 1e-12 * phase_s);
}

// A large layer (GPU-bound) and a tiny one with a slow host (host-bound): both phases' splits
// match the closed form and add up to the phase's time.
TEST(KernelSplit, PricesEachKernelClassWhereThePhaseIsPriced) {
  const kernels::GpuSpec& h100 = kernels::gpu_of("H100-80GB-SXM");
  const core::ModelConfig big = gpt(4096, 32);
  const core::ModelConfig tiny = gpt(256, 4);
  core::ComputeCalibration slow_host;
  slow_host.host_dispatch = core::Seconds(1e-3);
  const kernels::KernelModel plain;
  const kernels::KernelModel host_bound({{h100.name, slow_host}});
  struct Case {
    const kernels::KernelModel* model;
    const core::ModelConfig* m;
    double sequences;
    int seq_len;
  };
  for (const Case& c : {Case{&plain, &big, 2, 2048}, Case{&host_bound, &tiny, 1, 128}}) {
    const kernels::LayerWork work = work_of(*c.m, c.sequences, c.seq_len);
    const kernels::PhaseTimes t = c.model->layer(h100, work);
    kernels::LayerShape shape;
    shape.model = c.m;
    shape.sequences = c.sequences;
    shape.seq_len = c.seq_len;
    const kernels::PhaseOps ops = kernels::layer_ops(shape);
    expect_split(t.forward_split, expected_split(*c.model, h100, ops.forward, work.precision),
                 t.forward.value());
    expect_split(t.backward_split, expected_split(*c.model, h100, ops.backward, work.precision),
                 t.backward.value());
  }
  // The large layer is mostly GEMM; the tiny one on a slow host is mostly overhead.
  const kernels::PhaseTimes large = plain.layer(h100, work_of(big, 2, 2048));
  EXPECT_GT(large.forward_split.gemm_s, 0.5 * large.forward.value());
  EXPECT_GT(large.forward_split.attention_s, 0);
  const kernels::PhaseTimes small = host_bound.layer(h100, work_of(tiny, 1, 128));
  EXPECT_GT(small.forward_split.overhead_s, 0.9 * small.forward.value());
}

// Full recomputation repeats the forward's split, selective the attention core's.
TEST(KernelSplit, RecomputationRepeatsWhatItRecomputes) {
  const kernels::GpuSpec& a100 = kernels::gpu_of("A100-80GB-SXM");
  const core::ModelConfig m = gpt(2048, 16);
  const kernels::KernelModel model;
  kernels::LayerWork work = work_of(m, 4, 2048);
  work.recompute = core::Recompute::full;
  const kernels::PhaseTimes full = model.layer(a100, work);
  expect_split(full.recompute_split, full.forward_split, full.recompute.value());
  work.recompute = core::Recompute::selective;
  const kernels::PhaseTimes selective = model.layer(a100, work);
  EXPECT_NEAR(selective.recompute_split.total(), selective.recompute.value(),
              1e-12 * selective.recompute.value());
  EXPECT_EQ(selective.recompute_split.gemm_s, 0);
  EXPECT_GT(selective.recompute_split.attention_s, 0);
}

// Two activities at once share the time; compute hides communication whole.
TEST(Breakdown, AttributesOverlapsAsDocumented) {
  using sim::Activity;
  std::vector<sim::TimedActivity> intervals{{0, 4, Activity::layers},
                                            {2, 6, Activity::codec},
                                            {5, 9, Activity::dp_comm},
                                            {7, 9, Activity::pp_comm},
                                            {10, 11, Activity::tp_comm}};
  std::array<double, sim::kActivities> s{};
  sim::attribute(intervals, 2, s);  // counted twice
  EXPECT_DOUBLE_EQ(s[int(Activity::layers)], 2 * (2 + 1));
  EXPECT_DOUBLE_EQ(s[int(Activity::codec)], 2 * (1 + 2));
  EXPECT_DOUBLE_EQ(s[int(Activity::dp_comm)], 2 * (1 + 1));  // 6-7 alone, 7-9 shared
  EXPECT_DOUBLE_EQ(s[int(Activity::pp_comm)], 2 * 1);
  EXPECT_DOUBLE_EQ(s[int(Activity::tp_comm)], 2 * 1);
  const sim::Breakdown b = sim::device_breakdown(s, {3, 1, 1, 1}, 30);
  EXPECT_DOUBLE_EQ(b[sim::Part::gemm], 6 * 0.5);
  EXPECT_DOUBLE_EQ(b[sim::Part::overhead], 6 * 1.0 / 6);
  EXPECT_DOUBLE_EQ(b[sim::Part::bubble], 30 - 6 - 6 - 4 - 2 - 2);
  EXPECT_DOUBLE_EQ(b.total(), 30);
}

double part(const Json& device, const char* key) {
  return device["breakdown"][key].get<double>();
}

// One GPU, two micro-batches of 8 layers: no bubble, no communication, the layers' time in
// the fixed model's own split.
TEST(Breakdown, OneGpuIsItsLayersSplitAsPriced) {
  const double f = 1e-3, a = 2e-4;
  const testing::FixedTimes compute(f, a);
  const Json r =
      testing::simulate_plan(testing::checked(testing::pipeline_scenario("gpipe", 1, 2)), compute);
  const double T = r["iteration_time_s"].get<double>();
  EXPECT_NEAR(T, 2 * 8 * 3 * f, 1e-12);
  ASSERT_EQ(r["devices"].size(), 1u);
  const Json& d = r["devices"][0];
  EXPECT_NEAR(part(d, "gemm_s"), 2 * 8 * 3 * (f - a), 1e-12);
  EXPECT_NEAR(part(d, "attention_s"), 2 * 8 * 3 * a, 1e-12);
  EXPECT_NEAR(part(d, "bubble_s"), 0, 1e-12);
  EXPECT_EQ(part(d, "pp_comm_s") + part(d, "dp_comm_s") + part(d, "tp_comm_s"), 0);
}

// GPipe over p stages with free transfers: each stage waits (p - 1) of its micro-batch's
// forward and backward (t = 4 layers x 3f), the textbook bubble.
TEST(Breakdown, PipelineBubbleIsTheTextbookOne) {
  const double f = 1e-3;
  const int p = 2, m = 4;
  const testing::FixedTimes compute(f);
  const Json r =
      testing::simulate_plan(testing::checked(testing::pipeline_scenario("gpipe", p, m)), compute);
  const double T = r["iteration_time_s"].get<double>();
  const double t = (8 / p) * 3 * f;
  EXPECT_NEAR(T, (m + p - 1) * t, 1e-9);
  for (const Json& d : r["devices"]) {
    EXPECT_NEAR(part(d, "bubble_s"), (p - 1) * t, 1e-9) << d["id"];
    EXPECT_NEAR(part(d, "gemm_s"), m * t, 1e-9) << d["id"];
  }
}

// Serial tensor parallelism over a slow NVLink: the collectives are all exposed, 4 per layer.
TEST(Breakdown, SerialTensorParallelCollectivesAreExposed) {
  const double tf = 1e-5;
  const testing::FixedTimes compute(tf);
  const std::string yaml =
      std::string("name: tp\n") + testing::kTinyModel +
      "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
      "clusters:\n"
      "  - {name: c, gpu: H100-80GB-SXM, nodes: 1, gpus_per_node: 2, nvlink: {bandwidth: "
      "1GB/s, latency: 0s}, nic: {bandwidth: 1000TB/s, latency: 0s}}\n"
      "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
      "        - {cluster: c, tp: 2, layers: 8}\n";
  const Json r = testing::simulate_plan(testing::checked(yaml), compute);
  const double bytes = 128.0 * 256 * 2;
  // NCCL's latency and fixed cost of a 2-rank kernel on Hopper under Simple.
  const double one = sim::ring_all_reduce_time(2, bytes, {1e9 * testing::kNcclNvlinkShareH100, 0}) +
                     testing::kNcclSimpleTwoRanksH100;
  for (const Json& d : r["devices"]) {
    EXPECT_NEAR(part(d, "tp_comm_s"), 8 * 4 * one, 1e-6 * 8 * 4 * one) << d["id"];
    EXPECT_NEAR(part(d, "gemm_s"), 8 * 3 * tf, 1e-12) << d["id"];
  }
}

// Every GPU of every shipped example: the parts add up to the iteration, the compute ones
// to compute_s, the communication ones to comm_exposed_s, bubble to bubble_s + idle_s; and
// each stage's mean likewise.
TEST(Breakdown, AddsUpToTheIterationOnTheShippedExamples) {
  const std::filesystem::path dir = std::filesystem::path(HGSIM_SOURCE_DIR) / "scenarios";
  for (const char* name : {"examples/explicit-plan.yaml", "examples/two-clusters.yaml",
                           "examples/long-context.yaml", "examples/inline-model.yaml"}) {
    const auto run = testing::hgsim({"run", (dir / name).string(), "--json"});
    ASSERT_EQ(run.status, 0) << name << run.err;
    const Json r = Json::parse(run.out);
    const double T = r["iteration_time_s"].get<double>();
    const double tol = 1e-9 * T;
    ASSERT_FALSE(r["devices"].empty());
    for (const Json& d : r["devices"]) {
      double total = 0, compute = 0, comm = 0;
      for (const auto& [key, value] : d["breakdown"].items()) total += value.get<double>();
      for (const char* k :
           {"gemm_s", "attention_s", "memory_s", "overhead_s", "optimizer_s", "codec_s"})
        compute += part(d, k);
      for (const char* k : {"tp_comm_s", "cp_comm_s", "pp_comm_s", "dp_comm_s"}) comm += part(d, k);
      EXPECT_NEAR(total, T, tol) << name << " " << d["id"];
      EXPECT_NEAR(compute, d["compute_s"].get<double>(), tol) << name << " " << d["id"];
      EXPECT_NEAR(comm, d["comm_exposed_s"].get<double>(), tol) << name << " " << d["id"];
      EXPECT_NEAR(part(d, "bubble_s"), d["bubble_s"].get<double>() + d["idle_s"].get<double>(), tol)
          << name << " " << d["id"];
      EXPECT_GT(part(d, "gemm_s"), 0) << name << " " << d["id"];
    }
    ASSERT_FALSE(r["stages"].empty());
    for (const Json& s : r["stages"]) {
      double total = 0;
      for (const auto& [key, value] : s["breakdown"].items()) total += value.get<double>();
      EXPECT_NEAR(total, T, tol) << name;
    }
  }
}

}  // namespace
}  // namespace hgsim
