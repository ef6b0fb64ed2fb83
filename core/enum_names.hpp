// The scenario spelling of each core enumeration, in one table per enum, and the
// reader that turns a document node into an enum with a did-you-mean. Internal to core/.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/document.hpp"
#include "core/scenario.hpp"

namespace hgsim::core::detail {

template <class E>
struct Names;

#define HGSIM_NAMES(E, ...)                                               \
  template <>                                                             \
  struct Names<E> {                                                       \
    static const std::vector<std::pair<E, std::string>>& table() {        \
      static const std::vector<std::pair<E, std::string>> t{__VA_ARGS__}; \
      return t;                                                           \
    }                                                                     \
  };

HGSIM_NAMES(Precision, {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"},
            {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}, {Precision::fp8, "fp8"})
HGSIM_NAMES(Optimizer, {Optimizer::adam, "adam"}, {Optimizer::adamw, "adamw"},
            {Optimizer::sgd, "sgd"})
HGSIM_NAMES(Recompute, {Recompute::none, "none"}, {Recompute::selective, "selective"},
            {Recompute::full, "full"})
HGSIM_NAMES(Schedule, {Schedule::gpipe, "gpipe"}, {Schedule::one_f_one_b, "1f1b"},
            {Schedule::interleaved, "interleaved"})
HGSIM_NAMES(GradSyncAlgorithm, {GradSyncAlgorithm::ring, "ring"}, {GradSyncAlgorithm::tree, "tree"},
            {GradSyncAlgorithm::halving_doubling, "halving_doubling"},
            {GradSyncAlgorithm::hierarchical, "hierarchical"})
HGSIM_NAMES(Activation, {Activation::gelu, "gelu"}, {Activation::swiglu, "swiglu"},
            {Activation::relu, "relu"})
HGSIM_NAMES(Norm, {Norm::layernorm, "layernorm"}, {Norm::rmsnorm, "rmsnorm"})
HGSIM_NAMES(NetworkModel, {NetworkModel::flow, "flow"}, {NetworkModel::lv08, "lv08"})
HGSIM_NAMES(Fidelity, {Fidelity::automatic, "auto"}, {Fidelity::full, "full"},
            {Fidelity::folded, "folded"})
HGSIM_NAMES(PipelineMessages, {PipelineMessages::shared, "shared"},
            {PipelineMessages::in_order, "in_order"})
HGSIM_NAMES(CollectiveGranularity, {CollectiveGranularity::steps, "steps"},
            {CollectiveGranularity::pipelined, "pipelined"})
HGSIM_NAMES(Attention, {Attention::flash, "flash"}, {Attention::standard, "standard"})
HGSIM_NAMES(GradReduce, {GradReduce::overlap, "overlap"},
            {GradReduce::after_backward, "after_backward"})
HGSIM_NAMES(OuterSyncMethod, {OuterSyncMethod::none, "none"}, {OuterSyncMethod::diloco, "diloco"})
HGSIM_NAMES(OuterOptimizer, {OuterOptimizer::nesterov, "nesterov"})
#undef HGSIM_NAMES

template <class E>
std::string name_of(E value) {
  for (const auto& [v, n] : Names<E>::table())
    if (v == value) return n;
  return "?";
}

template <class E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& entry : Names<E>::table()) out.push_back(entry.second);
  return out;
}

template <class E>
std::optional<E> as_enum(const Node& n, const std::string& path, Diagnostics& d,
                         std::string_view what) {
  auto text = as_choice(n, path, d, names_of<E>(), what);
  if (!text) return std::nullopt;
  for (const auto& [v, name] : Names<E>::table())
    if (name == *text) return v;
  return std::nullopt;
}

}  // namespace hgsim::core::detail
