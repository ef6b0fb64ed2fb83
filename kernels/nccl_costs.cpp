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

NcclCosts parse_row(const core::Node& row, const std::string& path, core::Diagnostics& diags) {
  NcclCosts c;
  core::Fields f(row, path, diags);
  if (!f.ok()) return c;
  static const std::vector<std::string> names{"volta", "turing", "ampere", "ada", "hopper"};
  if (const core::Node* n = f.required("architecture"))
    if (auto a = core::as_choice(*n, f.path_of("architecture"), diags, names, "architecture"))
      c.architecture =
          static_cast<Architecture>(std::find(names.begin(), names.end(), *a) - names.begin());
  if (auto s =
          parse_seconds(f.required("floor_at_two_ranks"), f.path_of("floor_at_two_ranks"), diags))
    c.floor_at_two_ranks = *s;
  if (auto s = parse_seconds(f.required("floor_per_rank"), f.path_of("floor_per_rank"), diags))
    c.floor_per_rank = *s;
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

double collective_floor_s(const core::Cluster& c, int ranks) {
  if (ranks <= 1) return 0;
  // The closed forms ask for the same few GPU names millions of times: the catalog lookup
  // is done once per name and thread (as kernels::intra_node_efficiency).
  thread_local std::vector<std::pair<std::string, const NcclCosts*>> seen;
  const NcclCosts* costs = nullptr;
  for (const auto& [name, row] : seen)
    if (name == c.gpu) costs = row;
  if (costs == nullptr) {
    costs = &nccl_costs_for(gpu_of(c.gpu).architecture);
    if (seen.size() >= 64) seen.clear();
    seen.emplace_back(c.gpu, costs);
  }
  return costs->floor_at_two_ranks.value() + costs->floor_per_rank.value() * (ranks - 2);
}

}  // namespace hgsim::kernels
