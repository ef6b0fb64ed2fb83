// ProfileModel: the compute-time model on measured op profiles (see profile.hpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "kernels/profile.hpp"

#ifndef HGSIM_PROFILE_DIR
#define HGSIM_PROFILE_DIR ""
#endif

namespace hgsim::kernels {

using core::Seconds;

namespace {

std::string lower_alnum(const std::string& s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool names_match(const std::string& a, const std::string& b) {
  return !a.empty() && lower_alnum(a) == lower_alnum(b);
}

const GpuSpec* measured_gpu(const ProfileDevice& device);

// What a profile measured, as source_for matches it: the catalog GPU's name, else the
// device name (compared without case and punctuation).
std::string device_key(const ProfileDevice& device) {
  if (const GpuSpec* gpu = measured_gpu(device)) return gpu->name;
  return device.name;
}

const GpuSpec* catalog_gpu_of(const ProfileDatabase& db) {
  const std::string& name = db.profile().device.catalog_gpu;
  return name.empty() ? nullptr : find_gpu(name);
}

// The measured time of `call` in `precision` from one database. When the profile lacks that
// dtype, another measured dtype of the op stands in: compute-bound ops scaled by the ratio
// of the device's peaks for the two dtypes (measured peaks, else `gpu`'s datasheet), memory-
// bound ops by the ratio of element sizes.
std::optional<double> measured_time(const ProfileDatabase& db, const GpuSpec& gpu,
                                    const OpCall& call, core::Precision precision) {
  const std::string dtype = dtype_name(precision);
  if (auto t = db.time(call, dtype)) return t;
  static const std::vector<core::Precision> order{core::Precision::bf16, core::Precision::fp16,
                                                  core::Precision::fp32, core::Precision::tf32,
                                                  core::Precision::fp8};
  for (core::Precision other : order) {
    const std::string other_dtype = dtype_name(other);
    if (!db.has(call.op, other_dtype)) continue;
    const OpCall as_other = make_op(call.op, call.shape, double(core::element_bytes(other)));
    const auto t = db.time(as_other, other_dtype);
    if (!t) continue;
    if (call.bound == Bound::memory)
      return *t * (call.bytes > 0 && as_other.bytes > 0 ? call.bytes / as_other.bytes : 1.0);
    const auto& peaks = db.profile().device.peak_flops_per_s;
    const auto from = peaks.find(other_dtype), to = peaks.find(dtype);
    if (from != peaks.end() && to != peaks.end()) return *t * from->second / to->second;
    const auto from_rate = math_rate(gpu, other), to_rate = math_rate(gpu, precision);
    if (from_rate && to_rate) return *t * (from_rate->rate / to_rate->rate);
    return t;
  }
  return std::nullopt;
}

// The catalog GPU a profile measured: its catalog_gpu, else a CUDA device named as a catalog
// GPU; nullptr for a CPU or a device the catalog does not know.
const GpuSpec* measured_gpu(const ProfileDevice& device) {
  if (!device.catalog_gpu.empty()) return find_gpu(device.catalog_gpu);
  return device.kind == "cuda" ? find_gpu(device.name) : nullptr;
}

std::optional<core::Precision> precision_named(const std::string& dtype) {
  for (core::Precision p : {core::Precision::fp32, core::Precision::tf32, core::Precision::fp16,
                            core::Precision::bf16, core::Precision::fp8})
    if (dtype_name(p) == dtype) return p;
  return std::nullopt;
}

std::string shape_text(const std::vector<double>& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string rate_text(double value, const char* unit) {
  std::ostringstream out;
  out.precision(value < 10 ? 3 : 4);
  out << value << ' ' << unit;
  return out.str();
}

bool is_gemm(const std::string& op) {
  return op == "gemm" || op == "gemm_dgrad" || op == "gemm_wgrad";
}

// Bytes an op must move before its traffic cannot come from a cache: far past any GPU's L2
// (H100: 50 MB), so its bytes over its time are bounded by the memory bandwidth.
constexpr double kBeyondAnyCacheBytes = 1024.0 * 1024 * 1024;

}  // namespace

void check_profile_against_datasheet(const Profile& profile, core::Diagnostics& diags) {
  const GpuSpec* gpu = measured_gpu(profile.device);
  if (!gpu) return;
  const std::string hint =
      "a measured time cannot beat the hardware: check that the times are in seconds "
      "(median_s) and that device.catalog_gpu names the GPU the profile was measured on";
  std::size_t impossible = 0;
  std::string worst;  // the entry furthest past the peak
  double worst_ratio = 0;
  double best_gemm_fraction = -1;
  for (std::size_t i = 0; i < profile.entries.size(); ++i) {
    const ProfileEntry& e = profile.entries[i];
    const auto precision = precision_named(e.dtype);
    const auto rate = precision ? math_rate(*gpu, *precision) : std::nullopt;
    const std::string where = profile.file + ": entries[" + std::to_string(i) + "] (" + e.op + " " +
                              e.dtype + " " + shape_text(e.shape) + ")";
    const double flops_per_s = e.flops / e.median_s;
    const double bytes_per_s = e.bytes / e.median_s;
    std::string why;
    const double flops_ratio = rate ? flops_per_s / rate->rate.value() : 0;
    const double bytes_ratio =
        e.bytes >= kBeyondAnyCacheBytes ? bytes_per_s / gpu->memory_bandwidth.value() : 0;
    if (flops_ratio > kPeakMargin && flops_ratio >= bytes_ratio) {
      why = where + ": " + rate_text(e.median_s, "s") + " for " + rate_text(e.flops, "FLOPs") +
            " implies " + rate_text(flops_per_s / 1e12, "TFLOP/s") + ", above the " + gpu->name +
            "'s datasheet peak for " + e.dtype + " (" +
            rate_text(rate->rate.value() / 1e12, "TFLOP/s") + ") by more than 10 %";
    } else if (bytes_ratio > kPeakMargin) {
      why = where + ": " + rate_text(e.median_s, "s") + " for " + rate_text(e.bytes / 1e9, "GB") +
            " implies " + rate_text(bytes_per_s / 1e9, "GB/s") + ", above the " + gpu->name +
            "'s memory bandwidth (" + rate_text(gpu->memory_bandwidth.value() / 1e9, "GB/s") +
            ") by more than 10 %";
    }
    if (!why.empty()) ++impossible;
    if (!why.empty() && std::max(flops_ratio, bytes_ratio) > worst_ratio) {
      worst = why;
      worst_ratio = std::max(flops_ratio, bytes_ratio);
    }
    if (rate && is_gemm(e.op) && e.flops > 0)
      best_gemm_fraction = std::max(best_gemm_fraction, flops_per_s / rate->rate.value());
  }
  if (impossible > 0) {
    if (impossible > 1)
      worst += " (the furthest of " + std::to_string(impossible) + " such entries in this file)";
    diags.error({}, "", worst, hint);
    return;
  }
  if (best_gemm_fraction >= 0 && best_gemm_fraction < kImplausiblySlowFraction) {
    std::ostringstream pct;
    pct.precision(2);
    pct << best_gemm_fraction * 100;
    diags.warning({}, "",
                  profile.file + ": the profile's fastest GEMM reaches " + pct.str() +
                      " % of the " + gpu->name +
                      "'s datasheet peak; a GPU's large GEMMs reach tens of percent, so its "
                      "times are used as written but look too slow",
                  "check that the times are in seconds (not milliseconds) and that "
                  "device.catalog_gpu names the GPU the profile was measured on");
  }
}

GpuSpec device_as_gpu(const ProfileDevice& device) {
  GpuSpec g;
  g.name = device.name;
  g.memory_bandwidth = core::BytesPerSecond(device.copy_bandwidth_bytes_per_s);
  auto peak = [&](const char* dtype) -> std::optional<core::FlopsPerSecond> {
    const auto it = device.peak_flops_per_s.find(dtype);
    if (it == device.peak_flops_per_s.end()) return std::nullopt;
    return core::FlopsPerSecond(it->second);
  };
  g.peak_fp32 = peak("fp32");
  g.peak_tf32 = peak("tf32");
  g.peak_fp16 = peak("fp16");
  g.peak_bf16 = peak("bf16");
  g.peak_fp8 = peak("fp8");
  // A CPU runs every 16-bit format through fp32 math: the precision policy's emulated path.
  g.architecture = Architecture::volta;
  return g;
}

ProfileModel::ProfileModel(std::vector<Profile> profiles, KernelModel fallback)
    : fallback_(std::move(fallback)), coverage_(std::make_shared<Coverage>()) {
  for (Profile& p : profiles) databases_.push_back(std::make_unique<ProfileDatabase>(std::move(p)));
}

ProfileModel::Source ProfileModel::source_for(const GpuSpec& gpu) const {
  // A profile answers for the GPU type it measured and no other: deriving another GPU's
  // times from it by datasheet ratios would move that GPU's estimate while its provenance
  // still said "estimated".
  for (const auto& db : databases_) {
    const ProfileDevice& dev = db->profile().device;
    const GpuSpec* catalog = catalog_gpu_of(*db);
    if ((catalog && names_match(catalog->name, gpu.name)) || names_match(dev.name, gpu.name) ||
        names_match(dev.catalog_gpu, gpu.name))
      return {db.get(), true};
  }
  return {};
}

struct ProfileModel::Coverage {
  std::shared_mutex mutex;
  // By GPU name: the ops costed on it, and whether the profile measured each.
  std::map<std::string, std::map<std::string, bool>> ops;

  void note(const std::string& gpu, const std::string& op, bool measured) {
    {
      std::shared_lock<std::shared_mutex> lock(mutex);
      const auto g = ops.find(gpu);
      if (g != ops.end() && g->second.count(op)) return;
    }
    std::unique_lock<std::shared_mutex> lock(mutex);
    ops[gpu].emplace(op, measured);
  }
};

std::string ProfileModel::provenance(const GpuSpec& gpu) const {
  const Source s = source_for(gpu);
  if (!s.measured) return fallback_.provenance(gpu);
  const std::string file = std::filesystem::path(s.database->profile().file).filename().string();
  std::shared_lock<std::shared_mutex> lock(coverage_->mutex);
  const auto it = coverage_->ops.find(gpu.name);
  if (it == coverage_->ops.end()) return "measured:" + file;
  std::size_t measured = 0;
  std::string missing;
  for (const auto& [op, was_measured] : it->second) {
    if (was_measured) {
      ++measured;
      continue;
    }
    missing += (missing.empty() ? "" : ", ") + op;
  }
  if (measured == it->second.size()) return "measured:" + file;
  return "partly measured:" + file + ": " + std::to_string(measured) + " of " +
         std::to_string(it->second.size()) + " ops (estimated: " + missing + ")";
}

Seconds ProfileModel::ops_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                               core::Precision precision, KernelSplit* split) const {
  const Source s = source_for(gpu);
  double total = 0;
  for (const OpCall& call : ops) {
    const auto t = s.database ? measured_time(*s.database, gpu, call, precision) : std::nullopt;
    if (s.database) coverage_->note(gpu.name, call.op, t.has_value());
    // An op the profile lacks stays estimated, on this GPU's own datasheet figures.
    const double seconds = t ? *t : fallback_.op_time(gpu, call, precision).value();
    total += seconds;
    if (split) *split += op_split(call, seconds);
  }
  return Seconds(total);
}

PhaseTimes ProfileModel::layer(const GpuSpec& gpu, const LayerWork& work) const {
  if (!source_for(gpu).database) return fallback_.layer(gpu, work);
  const LayerShape shape{work.model,    work.sequences,         work.seq_len,
                         work.tp,       work.sequence_parallel, work.precision,
                         work.attention};
  const PhaseOps ops = layer_ops(shape);
  PhaseTimes t;
  t.forward = ops_time(gpu, ops.forward, work.precision, &t.forward_split);
  t.backward = ops_time(gpu, ops.backward, work.precision, &t.backward_split);
  t.recompute =
      ops_time(gpu, recompute_ops(ops.forward, work.recompute), work.precision, &t.recompute_split);
  t.attention_forward = ops_time(gpu, attention_core_ops(ops.forward, false), work.precision);
  t.attention_backward = ops_time(gpu, attention_core_ops(ops.backward, true), work.precision);
  return t;
}

PhaseTimes ProfileModel::logits(const GpuSpec& gpu, const LayerWork& work) const {
  if (!source_for(gpu).database) return fallback_.logits(gpu, work);
  const LayerShape shape{work.model,    work.sequences,         work.seq_len,
                         work.tp,       work.sequence_parallel, work.precision,
                         work.attention};
  const PhaseOps ops = logits_ops(shape);
  const core::Precision precision = logits_precision(work.precision);
  PhaseTimes t;
  t.forward = ops_time(gpu, ops.forward, precision, &t.forward_split);
  t.backward = ops_time(gpu, ops.backward, precision, &t.backward_split);
  t.recompute = Seconds(0);
  return t;
}

Seconds ProfileModel::optimizer_step(const GpuSpec& gpu, double parameters,
                                     core::Precision precision, core::Optimizer optimizer) const {
  if (!source_for(gpu).database || optimizer == core::Optimizer::sgd)
    return fallback_.optimizer_step(gpu, parameters, precision, optimizer);
  return ops_time(gpu, {optimizer_op(parameters)}, core::Precision::fp32);
}

void warn_unused_profiles(const ComputeModel& model, const std::vector<std::string>& gpu_names,
                          core::Diagnostics& diags) {
  const auto* profiles = dynamic_cast<const ProfileModel*>(&model);
  if (!profiles) return;
  std::vector<const GpuSpec*> gpus;
  std::string listed;
  for (const std::string& name : gpu_names) {
    const GpuSpec* gpu = find_gpu(name);
    if (!gpu || std::find(gpus.begin(), gpus.end(), gpu) != gpus.end()) continue;
    gpus.push_back(gpu);
    listed += (listed.empty() ? "" : ", ") + gpu->name;
  }
  for (const auto& db : profiles->databases()) {
    const bool used = std::any_of(gpus.begin(), gpus.end(), [&](const GpuSpec* gpu) {
      return profiles->source_for(*gpu).database == db.get();
    });
    if (used) continue;
    const ProfileDevice& device = db->profile().device;
    diags.warning({}, "--profile",
                  db->profile().file + " measured " + device.kind + " '" + device_key(device) +
                      "', which is none of the scenario's GPUs (" + listed +
                      "); it is not used, and they are costed without it",
                  "a profile answers for the GPU type it measured (device.catalog_gpu) and no "
                  "other; profile these GPUs with 'hgsim profile --device cuda'");
  }
}

std::unique_ptr<ComputeModel> compute_model_for(const std::vector<std::string>& profile_files,
                                                core::Diagnostics& diags,
                                                std::map<std::string, Calibration> calibrations) {
  std::vector<Profile> profiles;
  for (const std::string& file : profile_files) {
    try {
      profiles.push_back(read_profile(file));
    } catch (const ProfileError& e) {
      diags.error({}, "", e.what(),  // the message starts with the file and the JSON path
                  "profiles are written by 'hgsim profile' (format hgsim-profile/1)");
    }
  }
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    check_profile_against_datasheet(profiles[i], diags);
    for (std::size_t j = 0; j < i; ++j) {
      if (!names_match(device_key(profiles[j].device), device_key(profiles[i].device))) continue;
      diags.error({}, "--profile",
                  profiles[i].file + " and " + profiles[j].file + " both measure " +
                      device_key(profiles[i].device) + ": only the first would ever be used",
                  "give one profile per device (merge their entries into one file, or drop one)");
    }
  }
  if (profiles.empty() || diags.has_errors())
    return std::make_unique<KernelModel>(std::move(calibrations));
  return std::make_unique<ProfileModel>(std::move(profiles), KernelModel(std::move(calibrations)));
}

std::vector<std::string> shipped_profiles() {
  std::vector<std::string> files;
  const std::filesystem::path dir(HGSIM_PROFILE_DIR);
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace hgsim::kernels
