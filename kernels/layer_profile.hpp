// Layer profiles: whole-layer times that the live runner's profiler measures, and the
// compute model that plays them back, so that a simulation of a live run costs compute
// exactly as the live run measured it (validation of the simulator against live runs).
//
// JSON (format "hgsim-layer-profile/1"):
//   device   {kind, name, catalog_gpu, threads, torch, conditions {...}}  (kind and name
//            required; catalog_gpu, the kernels/gpus.yaml name, required for a CUDA device
//            whose name is not a catalog GPU's)
//   created  ISO 8601 UTC (optional)
//   entries[]:
//     {what: "layer",  sequences, seq_len, tp, hidden?, forward_s, backward_s, recompute_s?}
//     {what: "logits", sequences, seq_len, tp, hidden?, forward_s, backward_s}
//     {what: "optimizer", parameters, seconds}
//     {what: "embedding", ...}   ignored
// `sequences` is what one GPU holds of a micro-batch; `hidden`, when given, must be the
// simulated model's (an entry for another model is not used).
//
// Lookup (LayerProfileModel): a layer or logits time comes from the entry with exactly the
// (sequences, seq_len, tp) asked for; otherwise it is linear in `sequences` between the two
// nearest entries with the same seq_len and tp, and proportional to `sequences` beyond the
// smallest or largest one. Without an entry for that seq_len and tp the lookup throws
// LayerProfileError naming what is missing and what the file has. The optimizer step is
// linear in the parameters between the nearest entries (proportional beyond them, and with
// one entry). Recomputation: an entry's recompute_s when it is positive; else a full
// recompute repeats the forward, a selective one its attention share (models/).
//
// Which GPUs a layer profile answers for: a profile measured on a catalog GPU answers for
// that GPU type only (provenance "measured:<file name>"); the others are costed by the
// model given for them (the kernel-level model by default). A profile of a device outside
// the catalog (the live runner's CPU, which plays every device of a live run) answers for
// every GPU no GPU-type profile does, and says so: "measured:<file> (cpu '<name>' plays
// every device)".
#pragma once

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/compute_model.hpp"
#include "kernels/profile.hpp"

namespace hgsim::kernels {

// A layer profile that is not valid, or a lookup it cannot answer: the message names the
// file and the JSON path ("live.json: entries[2].forward_s: expected a positive number").
class LayerProfileError : public ProfileError {
 public:
  using ProfileError::ProfileError;
};

struct LayerEntry {
  double sequences = 0;
  int seq_len = 0;
  int tp = 1;
  int hidden = 0;  // 0: not given (fits any model)
  double forward_s = 0, backward_s = 0, recompute_s = 0;
};

struct OptimizerEntry {
  double parameters = 0;
  double seconds = 0;
};

struct LayerProfile {
  std::string device_kind;
  std::string device_name;
  std::string catalog_gpu;  // the GPU type it measured; "" for a device outside the catalog
  std::string created;
  std::vector<LayerEntry> layers;
  std::vector<LayerEntry> logits;
  std::vector<OptimizerEntry> optimizer;
  std::string file;  // where it was read from (not part of the JSON)
};

LayerProfile read_layer_profile(const std::filesystem::path& file);
LayerProfile parse_layer_profile(const std::string& json_text, const std::string& file);

class LayerProfileModel final : public ComputeModel {
 public:
  // `others` costs the GPUs no profile answers for (nullptr: the KernelModel). Throws
  // LayerProfileError for two profiles of one GPU type.
  explicit LayerProfileModel(LayerProfile profile,
                             std::shared_ptr<const ComputeModel> others = nullptr);
  LayerProfileModel(std::vector<LayerProfile> profiles, std::shared_ptr<const ComputeModel> others);

  // Throw LayerProfileError when the profile has nothing for the work asked for.
  PhaseTimes layer(const GpuSpec& gpu, const LayerWork& work) const override;
  PhaseTimes logits(const GpuSpec& gpu, const LayerWork& work) const override;
  core::Seconds optimizer_step(const GpuSpec& gpu, double parameters, core::Precision precision,
                               core::Optimizer optimizer) const override;
  std::string provenance(const GpuSpec& gpu) const override;

  // The profile that answers for `gpu`; nullptr when `others` does.
  const LayerProfile* profile_for(const GpuSpec& gpu) const;
  const std::vector<LayerProfile>& profiles() const { return profiles_; }

 private:
  std::vector<LayerProfile> profiles_;
  std::shared_ptr<const ComputeModel> others_;
};

}  // namespace hgsim::kernels
