// Helpers the simulator and planner tests share: a checked scenario from YAML text, and a
// compute model with fixed layer times (so that closed forms are exact).
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/validate.hpp"
#include "core/document.hpp"
#include "kernels/compute_model.hpp"
#include "sim/simulate.hpp"

namespace hgsim::testing {

// What NCCL moves over a datasheet NVLink, per link and direction (NVIDIA/nccl
// src/graph/topo.h: SM80_NVLINK_BW 20.0 and SM90_NVLINK_BW 20.6 GB/s of NVLink 3's and 4's
// 25 GB/s): the share of a scenario's `nvlink.bandwidth` the simulator's NVLink hops carry,
// written here from NCCL's figures, apart from kernels/kernel_costs.yaml.
inline constexpr double kNcclNvlinkShareA100 = 20.0 / 25.0;
inline constexpr double kNcclNvlinkShareH100 = 20.6 / 25.0;

// What NCCL adds to a bandwidth-bound 2-rank all-reduce inside a node (Simple protocol): the
// kernel's fixed cost at 2 ranks plus the latency scale times NCCL's Simple ring latency of
// 2 steps (NVIDIA/nccl src/graph/tuning.cc: 8.4us + 2 x 3.4us), with kernels/nccl_costs.yaml's
// rows as written there (hopper 23.9us, 0.255; ampere and ada 19.9us, 1.27).
inline constexpr double kNcclSimpleTwoRanksH100 = 23.9e-6 + 0.255 * (8.4e-6 + 2 * 3.4e-6);
inline constexpr double kNcclSimpleTwoRanksA100 = 19.9e-6 + 1.27 * (8.4e-6 + 2 * 3.4e-6);

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

// `hgsim ARGS...` in this process: its exit status and what it printed.
struct CliResult {
  int status;
  std::string out;
  std::string err;
};

inline CliResult cli(std::vector<const char*> args) {
  args.insert(args.begin(), "hgsim");
  std::ostringstream out, err;
  const int status = apps::run_cli(static_cast<int>(args.size()), args.data(), out, err);
  return {status, out.str(), err.str()};
}
// The same with the arguments as strings.
inline CliResult hgsim(std::vector<std::string> args) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return cli(std::move(argv));
}

// Every layer takes `forward` seconds forward and twice that backward, of which the
// attention core is `attention` forward and twice that backward (the rest GEMMs: the kernel
// split the results' breakdown reads); the optimizer step takes
// `optimizer_per_parameter` seconds per parameter it updates; nothing else costs.
class FixedTimes final : public kernels::ComputeModel {
 public:
  explicit FixedTimes(double forward, double attention = 0, double optimizer_per_parameter = 0)
      : forward_(forward), attention_(attention), optimizer_(optimizer_per_parameter) {}
  kernels::PhaseTimes layer(const kernels::GpuSpec&, const kernels::LayerWork&) const override {
    kernels::PhaseTimes t{core::Seconds(forward_), core::Seconds(2 * forward_), core::Seconds(0)};
    t.attention_forward = core::Seconds(attention_);
    t.attention_backward = core::Seconds(2 * attention_);
    t.forward_split = {forward_ - attention_, attention_, 0, 0};
    t.backward_split = t.forward_split.scaled(2);
    return t;
  }
  kernels::PhaseTimes logits(const kernels::GpuSpec&, const kernels::LayerWork&) const override {
    return {};
  }
  core::Seconds optimizer_step(const kernels::GpuSpec&, double parameters, core::Precision,
                               core::Optimizer) const override {
    return core::Seconds(parameters * optimizer_);
  }
  std::string provenance(const kernels::GpuSpec&) const override { return "estimated"; }

 private:
  double forward_, attention_, optimizer_;
};

// A model small enough for any test: 8 layers, hidden 256.
inline const char* kTinyModel = R"(
model: {name: tiny, layers: 8, hidden: 256, heads: 4, vocab: 1000}
)";

// A balanced pipeline: p stages of 8/p layers on p single-GPU nodes joined by links so fast
// that transfers cost nothing (the closed forms' setting; NCCL's send/recv fixed cost at 0).
// One stage of 8 tiny layers on `nodes` one-GPU nodes: its gradient ring crosses every NIC.
inline std::string nodes_scenario(int nodes, const std::string& nic = "100Gbps",
                                  const std::string& latency = "5us") {
  return std::string("name: nodes\n") + kTinyModel +
         "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
         "clusters:\n  - {name: c, gpu: A100-80GB-SXM, nodes: " +
         std::to_string(nodes) +
         ", gpus_per_node: 1, nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: " + nic +
         ", latency: " + latency +
         "}}\nstrategy:\n  pipelines:\n    - micro_batches: 1\n"
         "      stages:\n        - {cluster: c, layers: 8}\n";
}

inline std::string pipeline_scenario(const std::string& schedule, int stages, int micro_batches,
                                     int virtual_stages = 1) {
  std::string yaml = std::string("name: pipeline\n") + kTinyModel +
                     "training: {global_batch: " + std::to_string(micro_batches) +
                     ", seq_len: 128, precision: bf16}\n"
                     "clusters:\n"
                     "  - {name: c, gpu: H100-80GB-SXM, nodes: " +
                     std::to_string(stages) +
                     ", gpus_per_node: 1, nvlink: {bandwidth: 1000TB/s, latency: 0s}, "
                     "nic: {bandwidth: 1000TB/s, latency: 0s}, "
                     "calibration: {nccl_send_recv_fixed_cost: 0us}}\n"
                     "strategy:\n  schedule: " +
                     schedule + "\n  virtual_stages: " + std::to_string(virtual_stages) +
                     "\n  pipelines:\n    - micro_batches: " + std::to_string(micro_batches) +
                     "\n      stages:\n";
  for (int s = 0; s < stages; ++s)
    yaml += "        - {cluster: c, layers: " + std::to_string(8 / stages) + "}\n";
  return yaml;
}

// Simulates `plan` on a checked scenario with `compute` at the given fidelity (the CLI's
// choice of fidelity, not the automatic one); the results JSON, or an iteration time of -1
// with a test failure when the simulation refuses.
inline core::Json simulate_plan(const apps::CheckedScenario& c, const core::Plan& plan,
                                const kernels::ComputeModel& compute,
                                core::Fidelity fidelity = core::Fidelity::full) {
  sim::SimulationInput in;
  in.scenario = &c.scenario;
  in.plan = &plan;
  in.model = &c.model;
  in.compression = c.compression;
  in.compute = &compute;
  sim::SimulationOptions options;
  options.fidelity = fidelity;
  options.fidelity_from_cli = true;
  core::Diagnostics diags;
  auto result = sim::simulate(in, options, diags);
  EXPECT_TRUE(result) << diags.format();
  return result ? sim::to_json(*result) : core::Json{{"iteration_time_s", -1}};
}

// The same for the scenario's own plan.
inline core::Json simulate_plan(const apps::CheckedScenario& c,
                                const kernels::ComputeModel& compute,
                                core::Fidelity fidelity = core::Fidelity::full) {
  return simulate_plan(c, c.scenario.strategy.plan, compute, fidelity);
}

// Clusters a and b of two one-GPU nodes each (NIC latency 1 us) joined by one WAN link whose
// settings are `wan`, then `extra`, and a pipeline of a stage in each.
inline std::string two_cluster_scenario(const std::string& wan, const std::string& extra = "") {
  return std::string("name: wan\n") + kTinyModel +
         "training: {global_batch: 2, seq_len: 128, precision: bf16}\n"
         "clusters:\n"
         "  - {name: a, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 1, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 1us}}\n"
         "  - {name: b, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 1, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 400Gbps, latency: 1us}}\n"
         "wan:\n  - {between: [a, b], " +
         wan + "}\n" + extra +
         "strategy:\n  pipelines:\n    - micro_batches: 2\n      stages:\n"
         "        - {cluster: a, layers: 4}\n        - {cluster: b, layers: 4}\n";
}

}  // namespace hgsim::testing
