// How far predictions have been from measured runs, by where their compute times come from:
// what every printed time carries beside it. The figures are validation/published.py's
// summary (validation/published-errors.json, embedded at build time): per provenance class
// (`datasheet`: every GPU estimated by the kernel-level model) and group (single-node: at
// most 8 GPUs, multi-node: more), the mean |error| and mean signed error of the predicted
// iteration time over the published runs (negative: hgsim's time was shorter). A class the
// validation has no runs for (calibrated, measured) is "not validated".
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/document.hpp"

namespace hgsim::sim {

struct ValidationFigure {
  std::string provenance_class;  // "datasheet", "calibrated", "measured"
  std::string group;             // "single-node" or "multi-node"
  bool validated = false;
  int runs = 0;
  double mean_abs_time_error = 0;
  double mean_signed_time_error = 0;
  int optimistic_runs = 0;  // runs whose predicted time was shorter than measured
};

// The class of a compute provenance ("estimated", "calibrated", "measured:FILE", "partly
// measured:FILE: ...").
std::string provenance_class(const std::string& provenance);

// What the validation says of predictions of `provenance_class` on `gpus` GPUs. Throws
// std::logic_error if the embedded summary is not what published.py writes.
ValidationFigure validation_figure(const std::string& provenance_class, int gpus);

// The uncertainty of a result whose compute came from `compute_provenance` (by GPU name)
// on `gpus` GPUs: {source, group, by_gpu {name: {class, validated, runs, ...}}, text}.
core::Json uncertainty_json(const std::map<std::string, std::string>& compute_provenance, int gpus);
// Its one-line text: "compute estimated from datasheets; such estimates were within 17.2% on
// average of 17 published multi-node runs (mean signed -14.5%, 17 optimistic), see
// validation/published.md".
std::string uncertainty_text(const std::map<std::string, std::string>& compute_provenance,
                             int gpus);

}  // namespace hgsim::sim
