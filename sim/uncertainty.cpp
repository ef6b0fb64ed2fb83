#include "sim/uncertainty.hpp"

#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>

namespace hgsim::embedded {
extern const std::string_view published_errors_json;  // validation/published-errors.json
}  // namespace hgsim::embedded

namespace hgsim::sim {

namespace {

const core::Json& summary() {
  static const core::Json parsed = [] {
    core::Json j = core::Json::parse(embedded::published_errors_json, nullptr, false);
    if (j.is_discarded() || !j.contains("classes") || !j["classes"].is_object())
      throw std::logic_error(
          "the embedded validation/published-errors.json is not "
          "validation/published.py's summary");
    return j;
  }();
  return parsed;
}

std::string percent(double fraction, bool sign) {
  char buf[32];
  std::snprintf(buf, sizeof buf, sign ? "%+.1f%%" : "%.1f%%", 100 * fraction);
  return buf;
}

std::string what_class_is(const std::string& c) {
  if (c == "datasheet") return "estimated from datasheets";
  if (c == "calibrated") return "from the clusters' calibration";
  return "measured (profiles)";
}

std::string figure_text(const ValidationFigure& f) {
  const std::string what = "compute " + what_class_is(f.provenance_class);
  if (!f.validated)
    return what + ": not validated (validation/published.md has no " + f.group + " runs of " +
           f.provenance_class + " predictions)";
  return what + "; such estimates were within " + percent(f.mean_abs_time_error, false) +
         " on average of " + std::to_string(f.runs) + " published " + f.group +
         " runs (mean signed " + percent(f.mean_signed_time_error, true) + ", " +
         std::to_string(f.optimistic_runs) + " of " + std::to_string(f.runs) +
         " shorter than measured), see validation/published.md";
}

}  // namespace

std::string provenance_class(const std::string& provenance) {
  const std::string kind = provenance.substr(0, provenance.find(':'));
  if (kind == "estimated") return "datasheet";
  if (kind == "calibrated") return "calibrated";
  return "measured";
}

ValidationFigure validation_figure(const std::string& provenance_class, int gpus) {
  ValidationFigure f;
  f.provenance_class = provenance_class;
  // published.py's groups: a single node holds at most 8 GPUs.
  f.group = gpus <= 8 ? "single-node" : "multi-node";
  const core::Json& classes = summary()["classes"];
  if (!classes.contains(provenance_class) || !classes[provenance_class].contains(f.group)) return f;
  const core::Json& g = classes[provenance_class][f.group];
  if (!g.contains("mean_abs_time_error") || !g["mean_abs_time_error"].is_number()) return f;
  f.validated = true;
  f.runs = g.at("runs").get<int>();
  f.mean_abs_time_error = g.at("mean_abs_time_error").get<double>();
  f.mean_signed_time_error = g.at("mean_signed_time_error").get<double>();
  f.optimistic_runs = g.at("optimistic_runs").get<int>();
  return f;
}

core::Json uncertainty_json(const std::map<std::string, std::string>& compute_provenance,
                            int gpus) {
  core::Json by_gpu = core::Json::object();
  std::string group;
  for (const auto& [gpu, provenance] : compute_provenance) {
    const ValidationFigure f = validation_figure(provenance_class(provenance), gpus);
    group = f.group;
    core::Json j{{"class", f.provenance_class}, {"validated", f.validated}};
    if (f.validated) {
      j["runs"] = f.runs;
      j["mean_abs_time_error"] = f.mean_abs_time_error;
      j["mean_signed_time_error"] = f.mean_signed_time_error;
      j["optimistic_runs"] = f.optimistic_runs;
    }
    by_gpu[gpu] = j;
  }
  return {{"source", summary().value("source", "validation/published.md")},
          {"group", group},
          {"by_gpu", by_gpu},
          {"text", uncertainty_text(compute_provenance, gpus)}};
}

std::string uncertainty_text(const std::map<std::string, std::string>& compute_provenance,
                             int gpus) {
  // One text per provenance class, naming the GPUs when the classes differ.
  std::map<std::string, std::string> gpus_of_class;
  for (const auto& [gpu, provenance] : compute_provenance) {
    std::string& names = gpus_of_class[provenance_class(provenance)];
    names += (names.empty() ? "" : ", ") + gpu;
  }
  if (gpus_of_class.empty()) gpus_of_class["datasheet"] = "";
  std::string out;
  for (const auto& [c, names] : gpus_of_class) {
    if (!out.empty()) out += "; ";
    if (gpus_of_class.size() > 1) out += names + ": ";
    out += figure_text(validation_figure(c, gpus));
  }
  return out;
}

}  // namespace hgsim::sim
