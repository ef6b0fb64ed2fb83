// What a lossy WAN codec costs in training loss, by the project's convergence runs
// (validation/convergence.py writes validation/convergence-losses.json, embedded at build
// time): the final loss of a live run with the codec on one traffic class (and none on the
// other) against the same run without compression. The plan report shows it beside each
// lossy codec it chose, and `planner.max_loss_increase` bounds it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"

namespace hgsim::planner {

struct LossMeasurement {
  std::string setting;       // the convergence run's name ("PowerSGD rank 4 gradients ...")
  double loss_increase = 0;  // (final loss - final loss without compression) / that
};

// The convergence runs' measurement of `spec` on `traffic` ("wan_activations" or
// "wan_gradients"); nullopt when no run used exactly that codec there alone. Throws
// std::logic_error if the embedded file is not what convergence.py writes.
std::optional<LossMeasurement> measured_loss(const compress::CodecSpec& spec,
                                             const std::string& traffic);

// One line about `spec` on `traffic` for the report: "WAN gradients powersgd (...): final
// loss +30.57% over no compression in ... (validation/convergence.md)" or "... : no
// convergence run measured it ...". Empty for `none`.
std::string loss_text(const compress::CodecSpec& spec, const std::string& traffic);

// planner.max_loss_increase applied to the codecs the planner may use: a codec whose
// measured increase exceeds the bound, or that no run measured, is replaced by none, with a
// note in `notes` saying which and why. Without the bound nothing changes.
void apply_loss_bound(const core::Scenario& s, compress::CompressionSpecs& codecs,
                      std::vector<std::string>& notes);

}  // namespace hgsim::planner
