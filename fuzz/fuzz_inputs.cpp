// Fuzz targets for hgsim's text inputs, one source with the reader chosen at build time
// (HGSIM_FUZZ_INPUT): 0 the YAML scenario loader (parse, check, sweep expansion), 1 the
// plan JSON loader (parse, check against a fixed scenario), 2 the bandwidth-trace CSV
// reader. Any input must give either a value or diagnostics: never a crash, a sanitizer
// report, a hang or an exception.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "apps/validate.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"

#ifndef HGSIM_FUZZ_INPUT
#error "HGSIM_FUZZ_INPUT names the reader: 0 scenario, 1 plan, 2 trace"
#endif

namespace {

using namespace hgsim;

const char* const kScenario = R"(name: fuzz
model: {name: tiny, layers: 4, hidden: 256, heads: 4, vocab: 1000}
training: {global_batch: 8, seq_len: 128, precision: bf16}
clusters:
  - {name: east, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 2,
     nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}
  - {name: west, gpu: V100-32GB-SXM, nodes: 1, gpus_per_node: 2,
     nvlink: {bandwidth: 150GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 2us}}
wan:
  - {between: [east, west], bandwidth: 10Gbps, latency: 15ms}
strategy: auto
)";

void scenario(std::string_view text) {
  core::Diagnostics diags;
  auto document = core::parse_yaml(text, "fuzz.yaml", diags);
  if (!document) return;
  apps::check_scenario_document(*document, "fuzz.yaml", diags);
  (void)diags.format();
}

void plan(std::string_view text) {
  static const auto checked = [] {
    core::Diagnostics diags;
    auto document = core::parse_yaml(kScenario, "fuzz.yaml", diags);
    return apps::check_scenario_document(*document, "fuzz.yaml", diags)->front().checked;
  }();
  core::Diagnostics diags;
  auto document = core::parse_json(text, "fuzz.json", diags);
  if (!document) return;
  auto parsed = core::parse_plan(*document, "", diags);
  if (parsed && !diags.has_errors()) apps::check_plan_file_against(*parsed, checked, diags);
  (void)diags.format();
}

void trace(std::string_view text) {
  core::Diagnostics diags;
  (void)core::parse_bandwidth_trace(text, "fuzz.csv", "wan[0].trace", diags);
  (void)diags.format();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (HGSIM_FUZZ_INPUT == 0) scenario(text);
  if (HGSIM_FUZZ_INPUT == 1) plan(text);
  if (HGSIM_FUZZ_INPUT == 2) trace(text);
  return 0;
}
