// Measured op profiles (the JSON `hgsim profile` writes), the database that answers "how
// long does this op take on that device", and the compute-time model built on it.
//
// Profile JSON (format "hgsim-profile/1"):
//   device   {kind: cpu|cuda, name, catalog_gpu (the kernels/gpus.yaml name, or null),
//             driver, toolkit, clocks, peak_flops_per_s {dtype: measured matrix peak},
//             copy_bandwidth_bytes_per_s (measured), conditions {...}}
//   created  ISO 8601 UTC
//   attention  which attention the profile measured
//   entries[]  {op, dtype, shape[], median_s, p10_s, p90_s, flops, bytes, repeats}
// Op names and shapes: kernels/layer_ops.hpp.
//
// Lookup (ProfileDatabase::time): an entry with exactly the shape asked for gives its
// median. Otherwise the time is interpolated in log space over the op's entries of the same
// dtype: log(time) piecewise linear in log(work) (FLOPs for GEMMs and attention, bytes for
// the rest), through the entries that share every dimension but the first (the token
// count) when there are any, else through all entries of the op. Beyond the measured range
// the throughput of the nearest measured point is kept (time proportional to work). The
// result is exact at measured points and monotone between two of them.
//
// Which GPU a profile answers for (ProfileModel): the GPU type it measured (catalog_gpu or
// device name) and no other. Ops its entries lack are costed by the KernelModel on that
// GPU's own figures; its provenance is then `partly measured:<file>: N of M ops (estimated:
// ...)` over the ops costed so far, and `measured:<file>` when every one was measured. GPUs
// without a profile of their own are costed by the KernelModel (`estimated`, or
// `calibrated`): one GPU's profile never moves another GPU's times.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "kernels/compute_model.hpp"
#include "kernels/layer_ops.hpp"

namespace hgsim::kernels {

struct ProfileEntry {
  std::string op;
  std::string dtype;  // "fp32", "tf32", "fp16", "bf16", "fp8"
  std::vector<double> shape;
  double median_s = 0, p10_s = 0, p90_s = 0;
  double flops = 0, bytes = 0;
  int repeats = 0;
};

struct ProfileDevice {
  std::string kind = "cpu";  // "cpu" or "cuda"
  std::string name;
  std::string catalog_gpu;  // the GPU catalog name; empty for a CPU
  std::string driver, toolkit;
  std::map<std::string, double> clocks;            // e.g. sm_mhz, memory_mhz
  std::map<std::string, double> peak_flops_per_s;  // measured matrix peak per dtype
  double copy_bandwidth_bytes_per_s = 0;           // measured
  std::map<std::string, std::string> conditions;   // load, pinning, threads, compiler, ...
};

struct Profile {
  ProfileDevice device;
  std::string created;
  std::string attention;  // what the attention entries measured
  std::vector<ProfileEntry> entries;
  std::string file;  // where it was read from (not part of the JSON)
};

// A profile file that is not a valid profile: the message names the file and the JSON path
// ("kernels/profiles/x.json: entries[3].median_s: expected a positive number").
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Profile read_profile(const std::filesystem::path& file);
Profile parse_profile(const std::string& json_text, const std::string& file);
std::string profile_to_json(const Profile& profile);  // pretty-printed
void write_profile(const Profile& profile, const std::filesystem::path& file);

// dtype names of the precisions.
std::string dtype_name(core::Precision precision);

class ProfileDatabase {
 public:
  explicit ProfileDatabase(Profile profile);
  const Profile& profile() const { return profile_; }
  bool has(const std::string& op, const std::string& dtype) const;
  // Seconds for `call` in `dtype` (see the file comment); nullopt when the profile has no
  // entry for the op in that dtype.
  std::optional<double> time(const OpCall& call, const std::string& dtype) const;

 private:
  // Work (FLOPs or bytes) against seconds, sorted by work, one point per work (equal work
  // measured more than once: the geometric mean of its times).
  using Curve = std::vector<std::pair<double, double>>;
  struct OpTable {
    std::map<std::vector<double>, double> exact;  // shape -> median seconds (the first entry)
    // By the shape's trailing dimensions (entries that differ only in the first), and for
    // all of the op's entries, per bound (compute: FLOPs, memory: bytes).
    std::map<std::vector<double>, std::array<Curve, 2>> by_tail;
    std::array<Curve, 2> all;
  };
  Profile profile_;
  // Built once, so that a call is a few map lookups however many entries the profile has.
  std::map<std::pair<std::string, std::string>, OpTable> by_op_;
};

class ProfileModel final : public ComputeModel {
 public:
  // `profiles` must not be empty. GPUs without a profile of their own go to `fallback`.
  explicit ProfileModel(std::vector<Profile> profiles, KernelModel fallback = {});

  PhaseTimes layer(const GpuSpec& gpu, const LayerWork& work) const override;
  PhaseTimes logits(const GpuSpec& gpu, const LayerWork& work) const override;
  core::Seconds optimizer_step(const GpuSpec& gpu, double parameters, core::Precision precision,
                               core::Optimizer optimizer) const override;
  std::string provenance(const GpuSpec& gpu) const override;

  // The forward and backward times of a list of ops on `gpu` (what layer() sums); `split`,
  // when given, gets each op's time in its class (op_split: a measured op's launch cost
  // is not apart from its work).
  core::Seconds ops_time(const GpuSpec& gpu, const std::vector<OpCall>& ops,
                         core::Precision precision, KernelSplit* split = nullptr) const;

  // Which profile answers for `gpu`: nullptr when the KernelModel does.
  struct Source {
    const ProfileDatabase* database = nullptr;
    bool measured = false;
  };
  Source source_for(const GpuSpec& gpu) const;
  const std::vector<std::unique_ptr<ProfileDatabase>>& databases() const { return databases_; }

 private:
  std::vector<std::unique_ptr<ProfileDatabase>> databases_;
  KernelModel fallback_;
  // Which ops were costed per GPU and whether the profile measured them (for provenance);
  // shared by copies, thread-safe.
  struct Coverage;
  std::shared_ptr<Coverage> coverage_;
};

// Checks a profile against the datasheet of the GPU it measured (kernels/gpus.yaml, the
// figures KernelModel prices with): an entry whose FLOPs over its median time beat the
// GPU's peak for its dtype (math_rate), or whose bytes over its time beat the memory
// bandwidth for an op too large for any cache, by more than kPeakMargin, is an error naming
// the file, the entry, its shape and the implied rate against the peak; a profile whose best
// GEMM reaches under kImplausiblySlowFraction of the peak gets a warning. Profiles of a
// device outside the catalog (a CPU: its peaks are its own measurements) are not checked.
void check_profile_against_datasheet(const Profile& profile, core::Diagnostics& diags);

// Margin over the datasheet peak before a measured rate is impossible: the datasheet rates
// a GPU at the boost clock its peaks assume, and a part may run a few percent above it
// (H100 SXM: 989.4 TFLOPS dense bf16 is 132 SMs x 4096 FLOP a clock x 1.83 GHz, while
// nvidia-smi reports a 1980 MHz maximum clock, +8 %); timing noise on short kernels adds a
// little. 10 % covers both, and a time in the
// wrong unit (microseconds written as seconds) is off by a factor of 10^6.
inline constexpr double kPeakMargin = 1.10;
// A real GPU's GEMMs reach tens of percent of its peak (the shipped CPU profile's reach 60 %
// of the CPU's; cuBLAS on an H100 about 75 %). When even the profile's best GEMM stays under
// 1 %, its times are most likely in the wrong unit (milliseconds written as seconds) or were
// measured on another device; it is a warning, not an error, since a slow device is possible.
inline constexpr double kImplausiblySlowFraction = 0.01;

// A warning for each profile of `model` that answers for none of `gpu_names` (the
// scenario's GPUs: a CPU profile on a GPU scenario, a profile of a GPU the scenario lacks),
// naming the profile, what it measured and the scenario's GPUs. Does nothing when `model` is
// not a ProfileModel. For `--profile` files (the shipped ones are a default, not a request).
void warn_unused_profiles(const ComputeModel& model, const std::vector<std::string>& gpu_names,
                          core::Diagnostics& diags);

// The compute model the simulator and planner should use: a ProfileModel over the given
// profile files, or the KernelModel when the list is empty. A file that cannot be read
// or is not a valid profile is an error in `diags` (key path = JSON path, file = the
// profile), and so are a profile that fails check_profile_against_datasheet and two
// profiles of the same device (only the first would ever answer for it); then the
// KernelModel is returned so the caller can still go on if it wants.
// `calibrations` (by GPU name, from clusters[].calibration) apply to the GPU types the
// profiles do not measure: a measured profile is the better calibration.
std::unique_ptr<ComputeModel> compute_model_for(
    const std::vector<std::string>& profile_files, core::Diagnostics& diags,
    std::map<std::string, Calibration> calibrations = {});

// The profiles shipped in kernels/profiles/ (absolute paths, sorted), found from the source
// tree the binary was built from; empty if that tree is gone.
std::vector<std::string> shipped_profiles();

// A GpuSpec standing for a profiled device that is not in the GPU catalog (a CPU): its
// measured peaks and copy bandwidth as the "datasheet" figures, name = device name.
GpuSpec device_as_gpu(const ProfileDevice& device);

}  // namespace hgsim::kernels
