#include "kernels/nccl_costs.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "core/document.hpp"

namespace hgsim::embedded {
extern const std::string_view nccl_costs_yaml;  // kernels/nccl_costs.yaml
}  // namespace hgsim::embedded

namespace hgsim::kernels {

namespace {

std::optional<core::Seconds> parse_seconds(const core::Node* n, const std::string& path,
                                           core::Diagnostics& diags) {
  if (n == nullptr) return std::nullopt;
  if (!n->is_scalar()) {
    diags.error(n->where, path, "expected a duration such as 40us, found " + n->describe());
    return std::nullopt;
  }
  auto parsed = core::parse_duration(n->text);
  if (!parsed) diags.error(n->where, path, parsed.error);
  return parsed.value;
}

std::optional<double> parse_number(const core::Node* n, const std::string& path,
                                   core::Diagnostics& diags) {
  if (n == nullptr) return std::nullopt;
  auto x = core::as_number(*n, path, diags);
  if (x && !(*x > 0)) {
    diags.error(n->where, path, "expected a positive number, found " + n->describe());
    return std::nullopt;
  }
  return x;
}

NcclCosts parse_row(const core::Node& row, const std::string& path, core::Diagnostics& diags) {
  NcclCosts c;
  core::Fields f(row, path, diags);
  if (!f.ok()) return c;
  static const std::vector<std::string> names{"volta", "turing", "ampere", "ada", "hopper"};
  if (const core::Node* n = f.required("architecture"))
    if (auto a = core::as_choice(*n, f.path_of("architecture"), diags, names, "architecture"))
      c.architecture =
          static_cast<Architecture>(std::find(names.begin(), names.end(), *a) - names.begin());
  auto seconds = [&](const char* key, core::Seconds& into) {
    if (auto s = parse_seconds(f.required(key), f.path_of(key), diags)) into = *s;
  };
  seconds("fixed_cost_at_two_ranks", c.fixed_cost_at_two_ranks);
  seconds("fixed_cost_at_eight_ranks", c.fixed_cost_at_eight_ranks);
  if (auto x = parse_number(f.required("latency_scale"), f.path_of("latency_scale"), diags))
    c.latency_scale = *x;
  seconds("send_recv_fixed_cost", c.send_recv_fixed_cost);
  if (const core::Node* n = f.required("source"))
    c.source = core::as_string(*n, f.path_of("source"), diags).value_or("");
  f.reject_unknown();
  return c;
}

}  // namespace

std::vector<NcclCosts> parse_nccl_costs(std::string_view yaml_text, const std::string& file,
                                        core::Diagnostics& diags) {
  std::vector<NcclCosts> rows;
  std::optional<core::Node> document = core::parse_yaml(yaml_text, file, diags);
  if (!document) return rows;
  core::Fields top(*document, "", diags);
  const core::Node* list = top.required("architectures");
  top.reject_unknown();
  if (list == nullptr) return rows;
  if (!list->is_sequence()) {
    diags.error(list->where, "architectures", "expected a list, found " + list->describe());
    return rows;
  }
  for (std::size_t i = 0; i < list->items.size(); ++i)
    rows.push_back(parse_row(list->items[i], core::index_path("architectures", i), diags));
  return rows;
}

const std::vector<NcclCosts>& nccl_costs() {
  static const std::vector<NcclCosts> rows = [] {
    core::Diagnostics diags;
    auto parsed = parse_nccl_costs(embedded::nccl_costs_yaml, "kernels/nccl_costs.yaml", diags);
    if (diags.has_errors())
      throw std::logic_error("the embedded kernels/nccl_costs.yaml is invalid:\n" + diags.format());
    return parsed;
  }();
  return rows;
}

const NcclCosts& nccl_costs_for(Architecture architecture) {
  for (const NcclCosts& c : nccl_costs())
    if (c.architecture == architecture) return c;
  throw std::logic_error("kernels/nccl_costs.yaml has no row for " + to_string(architecture));
}

NcclFigures nccl_figures(const core::Cluster& c) {
  // The closed forms ask for the same few GPU names millions of times: the catalog lookup
  // is done once per name and thread (as kernels::intra_node_efficiency).
  thread_local std::vector<std::pair<std::string, const NcclCosts*>> seen;
  const NcclCosts* row = nullptr;
  for (const auto& [name, r] : seen)
    if (name == c.gpu) row = r;
  if (row == nullptr) {
    row = &nccl_costs_for(gpu_of(c.gpu).architecture);
    if (seen.size() >= 64) seen.clear();
    seen.emplace_back(c.gpu, row);
  }
  NcclFigures figures{row->architecture, row->fixed_cost_at_two_ranks.value(),
                      row->fixed_cost_at_eight_ranks.value(), row->latency_scale,
                      row->send_recv_fixed_cost.value()};
  const core::ComputeCalibration& cal = c.calibration;
  if (cal.nccl_fixed_cost_2_ranks)
    figures.fixed_cost_at_two_ranks_s = cal.nccl_fixed_cost_2_ranks->value();
  if (cal.nccl_fixed_cost_8_ranks)
    figures.fixed_cost_at_eight_ranks_s = cal.nccl_fixed_cost_8_ranks->value();
  if (cal.nccl_latency_scale) figures.latency_scale = *cal.nccl_latency_scale;
  if (cal.nccl_send_recv_fixed_cost)
    figures.send_recv_fixed_cost_s = cal.nccl_send_recv_fixed_cost->value();
  return figures;
}

double collective_fixed_cost_s(const core::Cluster& c, int ranks) {
  if (ranks <= 1) return 0;
  const NcclFigures figures = nccl_figures(c);
  const double at2 = figures.fixed_cost_at_two_ranks_s;
  const double at8 = figures.fixed_cost_at_eight_ranks_s;
  return at2 + (at8 - at2) * (std::min(ranks, 8) - 2) / 6.0;
}

std::string to_string(NcclProtocol protocol) {
  switch (protocol) {
    case NcclProtocol::ll:
      return "LL";
    case NcclProtocol::ll128:
      return "LL128";
    case NcclProtocol::simple:
      break;
  }
  return "Simple";
}

const std::array<NcclProtocolFigures, 3>& nccl_ring_protocols() {
  // NVIDIA/nccl 5067397c2676d5aed50042fc39e5c8ee96eb0027 src/graph/tuning.cc,
  // ncclTunerConstantsDefaults (microseconds): baseLatencies Ring {6.6, 14.0, 8.4};
  // hwLatencies NVLINK Ring {0.6, 1.9, 3.4}, NET Ring {2.7, 4.0, 14.0}, NET Tree {5.0, 8.5,
  // 14} (used when ppn == 1); ncclTopoTuneModel: ring LL busBw x .5, LL128 x .92.
  static const std::array<NcclProtocolFigures, 3> protocols{{
      {NcclProtocol::ll, 6.6e-6, 0.6e-6, 2.7e-6, 5.0e-6, 0.5},
      {NcclProtocol::ll128, 14.0e-6, 1.9e-6, 4.0e-6, 8.5e-6, 0.92},
      {NcclProtocol::simple, 8.4e-6, 3.4e-6, 14.0e-6, 14.0e-6, 1.0},
  }};
  return protocols;
}

double nccl_ring_latency_s(const core::Cluster& c, const NcclProtocolFigures& p, int steps,
                           int inter_steps, int ranks, int nodes, bool all_reduce) {
  const bool simple = p.protocol == NcclProtocol::simple;
  double intra = p.nvlink_step_s;
  // tuning.cc getNetOverhead: 1us on x86 Intel (2 on AMD), x3 for Simple, a floor on every
  // intra-node step of a ring that crosses nodes.
  if (nodes > 1) intra = std::max(intra, simple ? 3e-6 : 1e-6);
  const double inter = ranks == nodes ? p.net_step_one_per_node_s : p.net_step_s;
  double latency = p.base_latency_s + (steps - inter_steps) * intra + inter_steps * inter;
  // ncclTopoGetAlgoTime: "Plateau effect of ring", Simple all-reduce across nodes.
  const NcclFigures figures = nccl_figures(c);
  if (simple && all_reduce && nodes > 1)
    latency *= figures.architecture >= Architecture::ampere ? 1.4 : 1.9;
  return figures.latency_scale * latency;
}

double send_recv_fixed_cost_s(const core::Cluster& c) {
  return nccl_figures(c).send_recv_fixed_cost_s;
}

}  // namespace hgsim::kernels
