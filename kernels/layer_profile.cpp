#include "kernels/layer_profile.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "core/files.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/json_reader.hpp"
#include "models/transformer.hpp"

namespace hgsim::kernels {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "hgsim-layer-profile/1";

class Reader : public JsonReader<LayerProfileError> {
 public:
  using JsonReader::JsonReader;

  LayerProfile read(const Json& j) const {
    if (!j.is_object()) fail("", "expected a JSON object at the top level");
    if (string(j, "", "format") != kFormat)
      fail("format", std::string("expected \"") + kFormat + "\", got " + quote(j["format"]));
    LayerProfile p;
    p.file = file();
    const Json& device = member(j, "", "device");
    if (!device.is_object()) fail("device", "expected an object {kind, name, ...}");
    p.device_kind = string(device, "device", "kind");
    p.device_name = string(device, "device", "name");
    p.catalog_gpu = gpu_type(device);
    if (j.contains("created")) p.created = string(j, "", "created");
    const Json& entries = member(j, "", "entries");
    if (!entries.is_array()) fail("entries", "expected an array");
    Seen seen;
    for (std::size_t i = 0; i < entries.size(); ++i)
      entry(entries[i], "entries[" + std::to_string(i) + "]", p, seen);
    return p;
  }

 private:
  // The GPU type a profile measured: device.catalog_gpu, else a CUDA device named as a
  // catalog GPU; "" for a device outside the catalog (the live runner's CPU). A CUDA device
  // the catalog does not name would be applied to GPUs it is not: refused.
  std::string gpu_type(const Json& device) const {
    if (device.contains("catalog_gpu") && !device["catalog_gpu"].is_null()) {
      const std::string name = string(device, "device", "catalog_gpu");
      const GpuSpec* gpu = find_gpu(name);
      if (!gpu)
        fail("device.catalog_gpu", "unknown GPU " + quote(device["catalog_gpu"]) + "; " +
                                       core::did_you_mean(name, gpu_names()));
      return gpu->name;
    }
    if (string(device, "device", "kind") != "cuda") return "";
    if (const GpuSpec* gpu = find_gpu(string(device, "device", "name"))) return gpu->name;
    fail("device.catalog_gpu",
         "a layer profile of a CUDA device names its GPU type (a kernels/gpus.yaml name, e.g. "
         "\"H100-80GB-SXM\"): its times apply to that GPU type only");
  }

  // The keys read so far, for the duplicate checks in linear time (a 200 000-entry file
  // took minutes when each entry was compared with every earlier one).
  struct Seen {
    std::set<std::tuple<double, int, int, int>> layers, logits;
    std::set<double> optimizer;
  };

  void entry(const Json& e, const std::string& path, LayerProfile& p, Seen& seen) const {
    if (!e.is_object()) fail(path, "expected an object");
    const std::string what = string(e, path, "what");
    if (what == "layer" || what == "logits") {
      LayerEntry out = layer_entry(e, path, what == "layer");
      auto& list = what == "layer" ? p.layers : p.logits;
      auto& keys = what == "layer" ? seen.layers : seen.logits;
      if (!keys.emplace(out.sequences, out.seq_len, out.tp, out.hidden).second)
        fail(path, "a second \"" + what +
                       "\" entry for the same sequences, seq_len, tp and "
                       "hidden; keep one (or their median)");
      list.push_back(out);
    } else if (what == "optimizer") {
      OptimizerEntry out{number(e, path, "parameters", true), seconds(e, path, "seconds")};
      if (!seen.optimizer.insert(out.parameters).second)
        fail(path, "a second \"optimizer\" entry for the same parameters; keep one");
      p.optimizer.push_back(out);
    } else if (what != "embedding") {
      fail(join(path, "what"),
           "expected \"layer\", \"logits\", \"optimizer\" or \"embedding\", got " +
               quote(e["what"]));
    }
  }

  LayerEntry layer_entry(const Json& e, const std::string& path, bool with_recompute) const {
    LayerEntry out;
    out.sequences = number(e, path, "sequences", true);
    out.seq_len = count(e, path, "seq_len");
    out.tp = count(e, path, "tp");
    if (e.contains("hidden")) out.hidden = count(e, path, "hidden");
    out.forward_s = seconds(e, path, "forward_s");
    out.backward_s = seconds(e, path, "backward_s");
    if (with_recompute && e.contains("recompute_s"))
      out.recompute_s = seconds(e, path, "recompute_s", false);
    return out;
  }
};

double interpolate(double x, double x0, double y0, double x1, double y1) {
  return y0 + (x - x0) / (x1 - x0) * (y1 - y0);
}

std::string key_text(int seq_len, int tp, int hidden) {
  std::string text = "seq_len " + std::to_string(seq_len) + ", tp " + std::to_string(tp);
  if (hidden > 0) text += ", hidden " + std::to_string(hidden);
  return text;
}

// The times at `sequences` through the entries of one (seq_len, tp) (see the header).
PhaseTimes along_sequences(const std::vector<const LayerEntry*>& curve, double sequences) {
  auto times = [](const LayerEntry& e, double scale) {
    return PhaseTimes{core::Seconds(e.forward_s * scale), core::Seconds(e.backward_s * scale),
                      core::Seconds(e.recompute_s * scale)};
  };
  for (const LayerEntry* e : curve)
    if (std::abs(e->sequences - sequences) <= 1e-9 * sequences) return times(*e, 1);
  const LayerEntry& first = *curve.front();
  const LayerEntry& last = *curve.back();
  if (sequences < first.sequences) return times(first, sequences / first.sequences);
  if (sequences > last.sequences) return times(last, sequences / last.sequences);
  const auto upper = std::find_if(curve.begin(), curve.end(),
                                  [&](const LayerEntry* e) { return e->sequences > sequences; });
  const LayerEntry& hi = **upper;
  const LayerEntry& lo = **(upper - 1);
  auto at = [&](double LayerEntry::*field) {
    return core::Seconds(interpolate(sequences, lo.sequences, lo.*field, hi.sequences, hi.*field));
  };
  return {at(&LayerEntry::forward_s), at(&LayerEntry::backward_s), at(&LayerEntry::recompute_s)};
}

// `split` (an estimate's) scaled to add up to `seconds`.
KernelSplit scaled_to(const KernelSplit& split, double seconds) {
  const double total = split.total();
  return total > 0 ? split.scaled(seconds / total) : KernelSplit{};
}

// A measured layer's phases split by kernel class as `estimate`'s are.
void in_estimate_proportions(PhaseTimes& t, const PhaseTimes& estimate) {
  t.forward_split = scaled_to(estimate.forward_split, t.forward.value());
  t.backward_split = scaled_to(estimate.backward_split, t.backward.value());
  const bool repeats = estimate.recompute_split.total() > 0;
  t.recompute_split =
      scaled_to(repeats ? estimate.recompute_split : estimate.forward_split, t.recompute.value());
}

PhaseTimes look_up(const std::vector<LayerEntry>& entries, const char* what, const LayerWork& work,
                   const std::string& file) {
  const int hidden = work.model ? work.model->hidden : 0;
  std::vector<const LayerEntry*> curve;
  for (const LayerEntry& e : entries)
    if (e.seq_len == work.seq_len && e.tp == work.tp && (e.hidden == 0 || e.hidden == hidden))
      curve.push_back(&e);
  if (curve.empty()) {
    std::set<std::string> have;
    for (const LayerEntry& e : entries) have.insert(key_text(e.seq_len, e.tp, e.hidden));
    std::string list;
    std::size_t listed = 0;
    for (const std::string& k : have)
      if (++listed <= 10) list += (list.empty() ? "" : "; ") + k;
    if (have.size() > 10) list += "; ... (" + std::to_string(have.size()) + " in all)";
    throw LayerProfileError(file + ": no \"" + what + "\" entry for " +
                            key_text(work.seq_len, work.tp, hidden) + " (" +
                            (list.empty() ? std::string("the file has no \"") + what + "\" entries"
                                          : "the file has " + list) +
                            "); measure that configuration with the live profiler");
  }
  std::sort(curve.begin(), curve.end(),
            [](const LayerEntry* a, const LayerEntry* b) { return a->sequences < b->sequences; });
  return along_sequences(curve, work.sequences);
}

// A measured time cannot beat the GPU: the FLOPs one GPU does in `seconds` (the layer's over
// tp: its matrices are split over tp GPUs) above `gpu`'s datasheet peak for the precision
// (math_rate, what KernelModel prices with) by more than kPeakMargin (profile.hpp says why
// 10 %) mean the profile's times are in the wrong unit or not this model's.
void check_within_peak(const GpuSpec& gpu, const LayerWork& work, core::Flops flops,
                       core::Seconds seconds, const char* what, const std::string& file) {
  const auto rate = math_rate(gpu, work.precision);
  if (!rate || !(seconds.value() > 0)) return;
  const double per_gpu = flops.value() / std::max(work.tp, 1);
  const double flops_per_s = per_gpu / seconds.value();
  if (flops_per_s <= kPeakMargin * rate->rate.value()) return;
  std::ostringstream out;
  out.precision(4);
  out << file << ": the " << what << " time for " << key_text(work.seq_len, work.tp, 0) << ", "
      << work.sequences << " sequences (" << seconds.value() << " s for " << per_gpu
      << " FLOPs per GPU) implies " << flops_per_s / 1e12 << " TFLOP/s, above the " << gpu.name
      << "'s datasheet peak for " << core::to_string(work.precision) << " ("
      << rate->rate.value() / 1e12
      << " TFLOP/s) by more than 10 %; a measured time cannot beat the hardware: check that "
         "the times are in seconds and were measured for this model (hidden "
      << (work.model ? work.model->hidden : 0) << ")";
  throw LayerProfileError(out.str());
}

}  // namespace

LayerProfile parse_layer_profile(const std::string& json_text, const std::string& file) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {  // a syntax error, a number past a double's range
    throw LayerProfileError(file + ": not valid JSON: " + e.what());
  }
  return Reader(file).read(j);
}

LayerProfile read_layer_profile(const std::filesystem::path& file) {
  core::Diagnostics diags;  // a regular file of bounded size only (no FIFO, no /dev/zero)
  const auto text = core::read_input_file(file.string(), "layer profile", diags);
  if (!text) throw LayerProfileError(file.string() + ": " + diags.all().front().message);
  return parse_layer_profile(*text, file.string());
}

LayerProfileModel::LayerProfileModel(LayerProfile profile,
                                     std::shared_ptr<const ComputeModel> others)
    : LayerProfileModel(std::vector<LayerProfile>{std::move(profile)}, std::move(others)) {}

LayerProfileModel::LayerProfileModel(std::vector<LayerProfile> profiles,
                                     std::shared_ptr<const ComputeModel> others)
    : profiles_(std::move(profiles)), others_(std::move(others)) {
  if (!others_) others_ = std::make_shared<KernelModel>();
  for (LayerProfile& p : profiles_)
    std::sort(p.optimizer.begin(), p.optimizer.end(),
              [](const OptimizerEntry& a, const OptimizerEntry& b) {
                return a.parameters < b.parameters;
              });
  for (std::size_t i = 0; i < profiles_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (profiles_[i].catalog_gpu == profiles_[j].catalog_gpu)
        throw LayerProfileError(profiles_[i].file + " and " + profiles_[j].file + " both measure " +
                                (profiles_[i].catalog_gpu.empty()
                                     ? "a device outside the GPU catalog"
                                     : profiles_[i].catalog_gpu) +
                                ": give one layer profile per GPU type");
}

const LayerProfile* LayerProfileModel::profile_for(const GpuSpec& gpu) const {
  for (const LayerProfile& p : profiles_)
    if (p.catalog_gpu == gpu.name) return &p;
  // A device outside the catalog (the live runner's CPU) plays every GPU it is not told
  // apart from: the live run's own devices.
  for (const LayerProfile& p : profiles_)
    if (p.catalog_gpu.empty()) return &p;
  return nullptr;
}

PhaseTimes LayerProfileModel::layer(const GpuSpec& gpu, const LayerWork& work) const {
  const LayerProfile* own = profile_for(gpu);
  if (!own) return others_->layer(gpu, work);
  const LayerProfile& profile_ = *own;
  PhaseTimes t = look_up(profile_.layers, "layer", work, profile_.file);
  check_within_peak(gpu, work,
                    models::layer_forward_flops(*work.model, work.sequences, work.seq_len),
                    t.forward, "layer forward", profile_.file);
  check_within_peak(gpu, work,
                    models::layer_backward_flops(*work.model, work.sequences, work.seq_len),
                    t.backward, "layer backward", profile_.file);
  // A measured layer has no split: the attention core's part is estimated by its FLOPs.
  const double core_share =
      models::attention_core_forward_flops(*work.model, work.sequences, work.seq_len) /
      models::layer_forward_flops(*work.model, work.sequences, work.seq_len);
  t.attention_forward = core::Seconds(core_share * t.forward.value());
  t.attention_backward = core::Seconds(core_share * t.backward.value());
  if (work.recompute == core::Recompute::none) {
    t.recompute = core::Seconds(0);
  } else if (t.recompute.value() <= 0) {
    const double share = work.recompute == core::Recompute::full
                             ? 1.0
                             : models::attention_share_of_layer(*work.model, work.seq_len);
    t.recompute = core::Seconds(share * t.forward.value());
  }
  // Nor by kernel class: the measured times in the proportions of the estimate's.
  in_estimate_proportions(t, others_->layer(gpu, work));
  return t;
}

PhaseTimes LayerProfileModel::logits(const GpuSpec& gpu, const LayerWork& work) const {
  const LayerProfile* own = profile_for(gpu);
  if (!own) return others_->logits(gpu, work);
  const LayerProfile& profile_ = *own;
  PhaseTimes t = look_up(profile_.logits, "logits", work, profile_.file);
  LayerWork at_logits_precision = work;  // fp8 training keeps the LM head 16-bit
  at_logits_precision.precision = logits_precision(work.precision);
  check_within_peak(gpu, at_logits_precision,
                    models::logits_forward_flops(*work.model, work.sequences, work.seq_len),
                    t.forward, "logits forward", profile_.file);
  t.recompute = core::Seconds(0);
  in_estimate_proportions(t, others_->logits(gpu, work));
  return t;
}

core::Seconds LayerProfileModel::optimizer_step(const GpuSpec& gpu, double parameters,
                                                core::Precision precision,
                                                core::Optimizer optimizer) const {
  const LayerProfile* own = profile_for(gpu);
  if (!own) return others_->optimizer_step(gpu, parameters, precision, optimizer);
  const LayerProfile& profile_ = *own;
  const auto& points = profile_.optimizer;
  if (points.empty())
    throw LayerProfileError(profile_.file +
                            ": no \"optimizer\" entry; measure the optimizer step with the live "
                            "profiler");
  const OptimizerEntry& first = points.front();
  const OptimizerEntry& last = points.back();
  if (parameters <= first.parameters)
    return core::Seconds(first.seconds * parameters / first.parameters);
  if (parameters >= last.parameters)
    return core::Seconds(last.seconds * parameters / last.parameters);
  const auto upper = std::find_if(points.begin(), points.end(), [&](const OptimizerEntry& e) {
    return e.parameters > parameters;
  });
  const auto lower = upper - 1;
  return core::Seconds(interpolate(parameters, lower->parameters, lower->seconds, upper->parameters,
                                   upper->seconds));
}

std::string LayerProfileModel::provenance(const GpuSpec& gpu) const {
  const LayerProfile* own = profile_for(gpu);
  if (!own) return others_->provenance(gpu);
  const std::string file = std::filesystem::path(own->file).filename().string();
  if (!own->catalog_gpu.empty()) return "measured:" + file;
  return "measured:" + file + " (" + own->device_kind + " '" + own->device_name +
         "' plays every device)";
}

}  // namespace hgsim::kernels
