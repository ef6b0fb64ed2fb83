// ProfileModel: the compute-time model on measured op profiles (see profile.hpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>

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

const GpuSpec* catalog_gpu_of(const ProfileDatabase& db) {
  const std::string& name = db.profile().device.catalog_gpu;
  return name.empty() ? nullptr : find_gpu(name);
}

double rate_of(const GpuSpec& gpu, core::Precision precision) {
  const auto rate = math_rate(gpu, precision);
  if (!rate) throw std::invalid_argument(gpu.name + " cannot run " + core::to_string(precision));
  return rate->rate.value();
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

}  // namespace

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
    : fallback_(std::move(fallback)) {
  for (Profile& p : profiles) databases_.push_back(std::make_unique<ProfileDatabase>(std::move(p)));
}

ProfileModel::Source ProfileModel::source_for(const GpuSpec& gpu) const {
  for (const auto& db : databases_) {
    const ProfileDevice& dev = db->profile().device;
    const GpuSpec* catalog = catalog_gpu_of(*db);
    if ((catalog && names_match(catalog->name, gpu.name)) || names_match(dev.name, gpu.name) ||
        names_match(dev.catalog_gpu, gpu.name))
      return {db.get(), nullptr, true};
  }
  // Roofline transfer from the nearest profiled architecture (ties: the newer one).
  Source best;
  int best_distance = 1 << 20;
  for (const auto& db : databases_) {
    const GpuSpec* catalog = catalog_gpu_of(*db);
    if (!catalog) continue;
    const int distance = std::abs(int(catalog->architecture) - int(gpu.architecture));
    const bool newer = best.profiled_gpu && catalog->architecture > best.profiled_gpu->architecture;
    if (distance < best_distance || (distance == best_distance && newer)) {
      best = {db.get(), catalog, false};
      best_distance = distance;
    }
  }
  return best;
}

std::string ProfileModel::provenance(const GpuSpec& gpu) const {
  const Source s = source_for(gpu);
  if (!s.measured) return fallback_.provenance(gpu);
  return "measured:" + std::filesystem::path(s.database->profile().file).filename().string();
}

Seconds ProfileModel::ops_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                               core::Precision precision) const {
  const Source s = source_for(gpu);
  double total = 0;
  for (const OpCall& call : ops) {
    if (!s.database) {
      total += fallback_.op_time(gpu, call, precision).value();
      continue;
    }
    const GpuSpec& measured_on = s.profiled_gpu ? *s.profiled_gpu : gpu;
    auto t = measured_time(*s.database, measured_on, call, precision);
    if (!t) {
      total += fallback_.op_time(gpu, call, precision).value();
      continue;
    }
    if (s.profiled_gpu) {  // roofline transfer
      if (call.bound == Bound::compute)
        *t *= rate_of(*s.profiled_gpu, precision) / rate_of(gpu, precision);
      else
        *t *= s.profiled_gpu->memory_bandwidth / gpu.memory_bandwidth;
    }
    total += *t;
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
  t.forward = ops_time(gpu, ops.forward, work.precision);
  t.backward = ops_time(gpu, ops.backward, work.precision);
  if (work.recompute == core::Recompute::full) t.recompute = t.forward;
  t.attention_forward = ops_time(gpu, attention_core_ops(ops.forward, false), work.precision);
  t.attention_backward = ops_time(gpu, attention_core_ops(ops.backward, true), work.precision);
  // Selective recomputation repeats the attention core (Korthikanti et al. 2022).
  if (work.recompute == core::Recompute::selective) t.recompute = t.attention_forward;
  return t;
}

PhaseTimes ProfileModel::logits(const GpuSpec& gpu, const LayerWork& work) const {
  if (!source_for(gpu).database) return fallback_.logits(gpu, work);
  const LayerShape shape{work.model,    work.sequences,         work.seq_len,
                         work.tp,       work.sequence_parallel, work.precision,
                         work.attention};
  const PhaseOps ops = logits_ops(shape);
  const core::Precision precision = logits_precision(work.precision);
  return {ops_time(gpu, ops.forward, precision), ops_time(gpu, ops.backward, precision),
          Seconds(0)};
}

Seconds ProfileModel::optimizer_step(const GpuSpec& gpu, double parameters,
                                     core::Precision precision, core::Optimizer optimizer) const {
  if (!source_for(gpu).database || optimizer == core::Optimizer::sgd)
    return fallback_.optimizer_step(gpu, parameters, precision, optimizer);
  return ops_time(gpu, {optimizer_op(parameters)}, core::Precision::fp32);
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
