// A WAN link with a bandwidth trace plays the trace's absolute values: its written
// `bandwidth` is not simulated, and building the platform says so (naming the link, the
// written figure and the trace's range) unless it is the trace's peak.
#include <gtest/gtest.h>

#include <string>

#include "sim/platform.hpp"
#include "sim_helpers.hpp"

using namespace hgsim;
using hgsim::testing::checked;

namespace {

apps::CheckedScenario traced(const std::string& bandwidth) {
  auto c = checked(std::string("name: traced\n") + hgsim::testing::kTinyModel +
                   "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
                   "clusters:\n"
                   "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
                   "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
                   "  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: "
                   "{bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
                   "wan:\n  - {between: [a, b], bandwidth: " +
                   bandwidth +
                   ", latency: 10ms}\n"
                   "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
                   "        - {cluster: a, layers: 4}\n        - {cluster: b, layers: 4}\n");
  // 2 Gbit/s, 500 Mbit/s from 30 s, back to 2 Gbit/s from 60 s; the period ends at 100 s.
  auto& wan = c.scenario.wan[0];
  wan.trace = "eu-asia.csv";
  wan.trace_steps = {{core::Seconds(0), core::BytesPerSecond(2e9 / 8)},
                     {core::Seconds(30), core::BytesPerSecond(0.5e9 / 8)},
                     {core::Seconds(60), core::BytesPerSecond(2e9 / 8)},
                     {core::Seconds(100), core::BytesPerSecond(2e9 / 8)}};
  return c;
}

sim::Platform platform_of(const apps::CheckedScenario& c, core::Diagnostics& diags) {
  const auto* gpu = kernels::find_gpu("A100-80GB-SXM");
  return sim::build_platform(c.scenario, {gpu, gpu}, {{0, 0, 1}, {1, 0, 1}}, diags);
}

double wan_bytes_per_s(const sim::Platform& p, const std::string& name) {
  for (const auto& l : p.links)
    if (l.name == name) return l.bytes_per_s;
  return -1;
}

}  // namespace

TEST(PlatformTraces, AWrittenBandwidthThatIsNotTheTracesPeakIsNotSimulatedAndSaysSo) {
  const auto c = traced("10Gbps");
  core::Diagnostics diags;
  const sim::Platform p = platform_of(c, diags);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  // The trace's first row, not the written 10 Gbit/s.
  EXPECT_EQ(wan_bytes_per_s(p, "wan:a->b"), 2e9 / 8);
  ASSERT_EQ(diags.all().size(), 1u) << diags.format();
  const auto& d = diags.all()[0];
  EXPECT_EQ(d.key_path, "wan[0].bandwidth");
  EXPECT_NE(d.message.find("the link a <-> b follows its trace 'eu-asia.csv' (500Mbps to 2Gbps), "
                           "so the written 10Gbps is not simulated"),
            std::string::npos)
      << d.message;
  EXPECT_NE(d.hint.find("write the trace's peak, 2Gbps"), std::string::npos) << d.hint;
  // Another written figure plays the same link: it is not simulated.
  core::Diagnostics other_diags;
  EXPECT_EQ(wan_bytes_per_s(platform_of(traced("100Mbps"), other_diags), "wan:a->b"), 2e9 / 8);
}

TEST(PlatformTraces, TheTracesPeakWrittenAsBandwidthIsQuiet) {
  core::Diagnostics diags;
  platform_of(traced("2Gbps"), diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
}
