#include "planner/loss_bound.hpp"

#include <cstdio>
#include <stdexcept>

#include "core/document.hpp"

namespace hgsim::embedded {
extern const std::string_view convergence_losses_json;  // validation/convergence-losses.json
}  // namespace hgsim::embedded

namespace hgsim::planner {

namespace {

struct Setting {
  std::string name;
  std::string activations, gradients;  // compress::describe of each class's codec
  double loss_increase = 0;
};

// A codec of the file (its scenario form) as compress::describe names it.
std::string described(const core::Json& codec, const std::string& where) {
  core::Diagnostics diags;
  const auto node = core::parse_yaml(codec.dump(), "validation/convergence-losses.json", diags);
  std::optional<compress::CodecSpec> spec;
  if (node) spec = compress::parse_codec_spec(*node, where, diags);
  if (!spec || diags.has_errors())
    throw std::logic_error("validation/convergence-losses.json: " + where +
                           ": not a codec hgsim knows: " + diags.format());
  return compress::describe(*spec);
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> parsed = [] {
    const core::Json j = core::Json::parse(embedded::convergence_losses_json, nullptr, false);
    if (j.is_discarded() || !j.contains("settings") || !j["settings"].is_array())
      throw std::logic_error(
          "the embedded validation/convergence-losses.json is not "
          "validation/convergence.py's summary");
    std::vector<Setting> out;
    for (std::size_t i = 0; i < j["settings"].size(); ++i) {
      const core::Json& e = j["settings"][i];
      const std::string at = "settings[" + std::to_string(i) + "]";
      out.push_back({e.at("setting").get<std::string>(),
                     described(e.at("wan_activations"), at + ".wan_activations"),
                     described(e.at("wan_gradients"), at + ".wan_gradients"),
                     e.at("loss_increase").get<double>()});
    }
    return out;
  }();
  return parsed;
}

std::string traffic_name(const std::string& traffic) {
  return traffic == "wan_activations" ? "WAN activations" : "WAN gradients";
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100 * fraction);
  return buf;
}

}  // namespace

std::optional<LossMeasurement> measured_loss(const compress::CodecSpec& spec,
                                             const std::string& traffic) {
  const std::string none = compress::describe(compress::CodecSpec{});
  const std::string mine = compress::describe(spec);
  const bool activations = traffic == "wan_activations";
  for (const Setting& s : settings()) {
    const std::string& here = activations ? s.activations : s.gradients;
    const std::string& other = activations ? s.gradients : s.activations;
    if (here == mine && other == none) return LossMeasurement{s.name, s.loss_increase};
  }
  return std::nullopt;
}

std::string loss_text(const compress::CodecSpec& spec, const std::string& traffic) {
  if (spec.kind == compress::CodecKind::none) return "";
  const std::string head = traffic_name(traffic) + " " + compress::describe(spec) + ": ";
  if (const auto m = measured_loss(spec, traffic))
    return head + "final loss " + percent(m->loss_increase) +
           " against no compression in the project's convergence run '" + m->setting +
           "' (validation/convergence.md: a small model on CPU; the loss of a large run may "
           "differ)";
  return head +
         "no convergence run measured its loss (validation/convergence.md); its cost "
         "in accuracy is unknown";
}

void apply_loss_bound(const core::Scenario& s, compress::CompressionSpecs& codecs,
                      std::vector<std::string>& notes) {
  if (!s.planner.max_loss_increase) return;
  const double bound = *s.planner.max_loss_increase;
  for (auto [traffic, spec] : {std::pair{std::string("wan_activations"), &codecs.wan_activations},
                               std::pair{std::string("wan_gradients"), &codecs.wan_gradients}}) {
    if (spec->kind == compress::CodecKind::none) continue;
    const auto m = measured_loss(*spec, traffic);
    if (m && m->loss_increase <= bound) continue;
    notes.push_back("compression." + traffic + " " + compress::describe(*spec) + " not used: " +
                    (m ? "its measured final loss is " + percent(m->loss_increase) +
                             " against no compression ('" + m->setting + "')"
                       : std::string("no convergence run measured its loss")) +
                    ", and planner.max_loss_increase is " + percent(bound).substr(1) +
                    " (validation/convergence.md); the planner sends that traffic uncompressed");
    *spec = compress::CodecSpec{};
  }
}

}  // namespace hgsim::planner
