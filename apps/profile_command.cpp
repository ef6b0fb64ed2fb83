#include "apps/profile_command.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/cli_checks.hpp"
#include "apps/commands.hpp"
#include "core/document.hpp"
#include "core/text.hpp"
#include "kernels/cuda_devices.hpp"
#include "kernels/profile.hpp"
#include "kernels/profiler.hpp"
#include "models/zoo.hpp"

namespace hgsim::apps {

namespace {

using Json = nlohmann::ordered_json;

// The zoo models --check-layers runs by default: one of each kind (GPT-2 with learned
// positions and GELU, GPT-3, LLaMA with RMSNorm, SwiGLU and rotary, LLaMA-3 with GQA).
const std::vector<std::string> kCheckModels{"gpt2-124m", "gpt3-1.3b", "llama2-7b", "llama3-70b"};

std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "unknown";
  std::string list;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
  return list;
}

std::map<std::string, std::string> measurement_conditions() {
  return {{"load_average", first_line_of("/proc/loadavg")},
          {"allowed_cpus", allowed_cpus()},
          {"note", "other processes may share the cores; see load_average"}};
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int check_layers(const ProfileOptions& o, std::ostream& out, std::ostream& err) {
  const auto progress = [&](const std::string& line) { err << "hgsim profile: " << line << "\n"; };
  const std::vector<std::string> names = o.models.empty() ? kCheckModels : o.models;
  std::vector<core::ModelConfig> configs;
  for (const std::string& name : names) {
    const models::ZooEntry* e = models::find_model(name);
    if (!e) {
      err << "hgsim profile: unknown model '" << name << "' (hgsim models lists them)\n";
      return kBadInput;
    }
    configs.push_back(kernels::scale_for_cpu(e->config));
  }
  kernels::Profile profile;
  if (!o.profile.empty()) {
    profile = kernels::read_profile(o.profile);
    // The layers run on this machine's CPU: a profile of another device predicts another
    // device's times, and the comparison would measure the difference between the two.
    if (profile.device.kind != "cpu" || !profile.device.catalog_gpu.empty()) {
      err << "hgsim profile: --profile " << core::path_excerpt(o.profile) << " measured "
          << profile.device.kind << " device '" << core::excerpt(profile.device.name) << "'"
          << (profile.device.catalog_gpu.empty()
                  ? std::string()
                  : " (catalog GPU " + core::excerpt(profile.device.catalog_gpu) + ")")
          << ", but --check-layers runs the layers on this machine's CPU; give a profile "
             "'hgsim profile --device cpu' measured here\n";
      return kBadInput;
    }
    if (profile.device.name != kernels::cpu_device_name())
      err << "hgsim profile: warning: --profile " << core::path_excerpt(o.profile) << " measured '"
          << core::excerpt(profile.device.name) << "', this machine is '"
          << kernels::cpu_device_name()
          << "': the comparison includes the difference between the two CPUs\n";
  } else {
    kernels::CpuSweep sweep;
    sweep.models = names;
    sweep.micro_batches = o.micro_batches;
    sweep.tp = o.tp;
    sweep.seq_len = o.seq_len;
    sweep.seconds_per_entry = o.seconds_per_entry;
    sweep.progress = progress;
    profile = kernels::profile_cpu(sweep, measurement_conditions());
    profile.file = "(measured now)";
  }
  const std::string load_before = first_line_of("/proc/loadavg");
  const kernels::GpuSpec device = kernels::device_as_gpu(profile.device);
  const kernels::ProfileModel model({profile});
  const auto rows = kernels::check_layers_cpu(model, device, configs, o.micro_batches, o.tp,
                                              o.seq_len, o.seconds_per_entry, progress);
  std::vector<double> errors;
  for (const auto& r : rows) errors.push_back(std::abs(r.error()));
  const double median_error = median(errors);
  if (o.json) {
    Json layers = Json::array();
    for (const auto& r : rows)
      layers.push_back({{"model", r.model},
                        {"micro_batch", r.micro_batch},
                        {"tp", r.tp},
                        {"seq_len", o.seq_len},
                        {"phase", r.phase},
                        {"predicted_s", r.predicted_s},
                        {"measured_s", r.measured_s},
                        {"error", r.error()}});
    out << Json{{"profile", profile.file},
                {"device", profile.device.name},
                {"load_average_before", load_before},
                {"load_average_after", first_line_of("/proc/loadavg")},
                {"median_abs_error", median_error},
                {"layers", layers}}
               .dump(2)
        << "\n";
    return kSuccess;
  }
  out << "| model (scaled for the CPU) | micro-batch | tp | phase | predicted ms | measured ms | "
         "error |\n|---|---:|---:|---|---:|---:|---:|\n";
  for (const auto& r : rows)
    out << "| " << r.model << " | " << r.micro_batch << " | " << r.tp << " | " << r.phase << " | "
        << fixed(r.predicted_s * 1e3, 3) << " | " << fixed(r.measured_s * 1e3, 3) << " | "
        << (r.error() >= 0 ? "+" : "") << fixed(r.error() * 100, 1) << "% |\n";
  out << "\nmedian |error| " << fixed(median_error * 100, 1) << "% over " << rows.size()
      << " layer phases; profile " << profile.file << "; load average before " << load_before
      << ", after " << first_line_of("/proc/loadavg") << "\n";
  return kSuccess;
}

int profile_cpu(const ProfileOptions& o, std::ostream& out, std::ostream& err) {
  kernels::CpuSweep sweep;
  sweep.models = o.models;
  sweep.micro_batches = o.micro_batches;
  sweep.tp = o.tp;
  sweep.seq_len = o.seq_len;
  sweep.seconds_per_entry = o.seconds_per_entry;
  sweep.progress = [&](const std::string& line) { err << "hgsim profile: " << line << "\n"; };
  kernels::Profile p = kernels::profile_cpu(sweep, measurement_conditions());
  p.device.conditions["load_average_after"] = first_line_of("/proc/loadavg");
  Json sweep_json{{"models", o.models.empty() ? models::model_names() : o.models},
                  {"micro_batches", o.micro_batches},
                  {"tp", o.tp},
                  {"seq_len", o.seq_len},
                  {"scaling", "kernels/profiler.hpp scale_for_cpu: hidden 256"}};
  p.device.conditions["sweep"] = sweep_json.dump();
  kernels::write_profile(p, o.out);
  const double peak = p.device.peak_flops_per_s["fp32"];
  out << "wrote " << o.out << ": " << p.entries.size() << " entries in "
      << p.device.conditions["sweep_seconds"] << " s; measured fp32 peak " << fixed(peak / 1e9, 1)
      << " GFLOP/s, copy bandwidth " << fixed(p.device.copy_bandwidth_bytes_per_s / 1e9, 1)
      << " GB/s\n";
  return kSuccess;
}

int profile_cuda(const ProfileOptions& o, std::ostream& out, std::ostream& err) {
  kernels::CudaSweep sweep;
  sweep.ops.models = o.models;
  sweep.ops.micro_batches = o.micro_batches;
  sweep.ops.tp = o.tp;
  sweep.ops.seq_len = o.seq_len;
  sweep.ops.hidden = 0;
  std::optional<core::Precision> precision;
  for (core::Precision p : {core::Precision::fp32, core::Precision::tf32, core::Precision::fp16,
                            core::Precision::bf16, core::Precision::fp8})
    if (core::to_string(p) == o.dtype) precision = p;
  if (!precision) {
    err << "hgsim profile: --dtype " << o.dtype << ": expected fp32, tf32, fp16, bf16 or fp8\n";
    return kBadInput;
  }
  sweep.ops.precision = *precision;
  sweep.ops.seconds_per_entry = o.seconds_per_entry;
  sweep.ops.progress = [&](const std::string& line) { err << "hgsim profile: " << line << "\n"; };
  sweep.extra_gemm_dtypes = o.gemm_dtypes;
  sweep.max_seconds = o.max_seconds;
  kernels::Profile p = kernels::profile_cuda(sweep, measurement_conditions());
  kernels::write_profile(p, o.out);
  out << "wrote " << o.out << ": " << p.entries.size() << " entries in "
      << p.device.conditions["sweep_seconds"] << " s on " << p.device.name << "\n";
  for (const auto& [dtype, peak] : p.device.peak_flops_per_s)
    out << "  measured " << dtype << " matrix peak " << fixed(peak / 1e12, 1) << " TFLOP/s\n";
  out << "  measured copy bandwidth " << fixed(p.device.copy_bandwidth_bytes_per_s / 1e9, 0)
      << " GB/s\n";
  return kSuccess;
}

// Fills the device defaults of the options left empty.
ProfileOptions with_defaults(ProfileOptions o) {
  const bool cuda = o.device == "cuda";
  if (o.tp.empty()) o.tp = cuda ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{1, 2};
  if (o.seq_len <= 0 && !cuda) o.seq_len = 128;
  if (o.seconds_per_entry <= 0) o.seconds_per_entry = cuda ? 0.02 : 0.15;
  if (cuda && o.dtype.empty()) o.dtype = "bf16";
  if (cuda && o.gemm_dtypes.empty()) o.gemm_dtypes = {"fp32", "tf32", "fp16", "fp8"};
  if (cuda && o.max_seconds <= 0) o.max_seconds = 220;
  return o;
}

// The bounds of one op shape: micro-batch x seq_len tokens, so that no buffer of the
// sweep (the attention scores are micro-batch x heads x seq_len^2) exhausts the memory.
constexpr long long kMaxTokensCpu = 65536;     // scaled models, hidden 256
constexpr long long kMaxTokensCuda = 1 << 20;  // the zoo unscaled

// What the options ask that cannot be measured: an error message, or empty.
std::string refuse(const ProfileOptions& o) {
  const bool cuda = o.device == "cuda";
  if (!cuda && (!o.dtype.empty() || !o.gemm_dtypes.empty() || o.max_seconds > 0))
    return "--dtype, --gemm-dtypes and --max-seconds apply to --device cuda only (the cpu "
           "sweep runs fp32)";
  if (!o.profile.empty() && !o.check_layers) return "--profile applies to --check-layers only";
  const long long max_tokens = cuda ? kMaxTokensCuda : kMaxTokensCpu;
  const long long seq = o.seq_len > 0 ? o.seq_len : (cuda ? 2048 : 128);
  for (int mb : o.micro_batches)
    if (static_cast<long long>(mb) * seq > max_tokens)
      return "--micro-batches " + std::to_string(mb) + " x --seq-len " + std::to_string(seq) +
             " is " + std::to_string(static_cast<long long>(mb) * seq) + " tokens per op; the " +
             o.device + " sweep measures at most " + std::to_string(max_tokens);
  // A degree that divides the heads of none of the models would measure nothing.
  std::vector<std::string> names = o.models;
  if (names.empty()) names = o.check_layers ? kCheckModels : models::model_names();
  for (const std::string& name : names)
    if (!models::find_model(name))
      return "unknown model '" + core::excerpt(name) + "' (hgsim models lists them)";
  for (int t : o.tp) {
    bool any = false;
    for (const std::string& name : names)
      if (const models::ZooEntry* e = models::find_model(name)) {
        const core::ModelConfig m = cuda ? e->config : kernels::scale_for_cpu(e->config);
        any = any || (m.heads % t == 0 && m.kv_heads % t == 0 && m.ffn_hidden % t == 0);
      }
    if (!any)
      return "--tp " + std::to_string(t) +
             " divides the heads (or KV heads, or FFN width) of none of the models " +
             (cuda ? "" : "as scaled for the cpu ") + "measured, so nothing would be measured";
  }
  return {};
}

}  // namespace

CLI::App* add_profile_command(CLI::App& app, ProfileOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure op times on this machine (profile JSON) or check layer predictions");
  cmd->add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--models", o.models,
                  "zoo models (default: the whole zoo; for --check-layers "
                  "gpt2-124m gpt3-1.3b llama2-7b llama3-70b)")
      ->delimiter(',');
  cmd->add_option("--micro-batches", o.micro_batches, "micro-batch sizes (sequences)")
      ->delimiter(',')
      ->check(integer_in(1, 1024));
  cmd->add_option("--tp", o.tp, "tensor-parallel degrees")
      ->delimiter(',')
      ->check(integer_in(1, 64));
  cmd->add_option("--seq-len", o.seq_len,
                  "sequence length of the sweep (cpu default 128; cuda: each model's own)")
      ->check(integer_in(1, 131072));
  cmd->add_option("--out", o.out, "profile JSON to write")->check(non_empty_path());
  cmd->add_flag("--check-layers", o.check_layers,
                "measure whole layers and compare them with the prediction from op times");
  cmd->add_option("--profile", o.profile,
                  "--check-layers: predict from this profile instead "
                  "of measuring the ops first")
      ->check(non_empty_path());
  cmd->add_option("--seconds-per-entry", o.seconds_per_entry,
                  "time spent on each op shape (cpu default 0.15, cuda 0.02)")
      ->check(finite_positive(60));
  const std::vector<std::string> dtypes{"fp32", "tf32", "fp16", "bf16", "fp8"};
  cmd->add_option("--dtype", o.dtype,
                  "cuda: the dtype of every op (fp32 tf32 fp16 bf16 fp8; default bf16)")
      ->check(CLI::IsMember(dtypes));
  cmd->add_option("--gemm-dtypes", o.gemm_dtypes,
                  "cuda: more dtypes for the forward GEMMs (default fp32,tf32,fp16,fp8)")
      ->delimiter(',')
      ->check(CLI::IsMember(dtypes));
  cmd->add_option("--max-seconds", o.max_seconds,
                  "cuda: stop the sweep after this long (default 220)")
      ->check(finite_positive(86400));
  cmd->add_flag("--json", o.json, "print the --check-layers table as JSON");
  return cmd;
}

int run_profile_command(const ProfileOptions& options, std::ostream& out, std::ostream& err) {
  if (const std::string why = refuse(options); !why.empty()) {
    err << "hgsim profile: " << why << "\n";
    return kBadInput;
  }
  const ProfileOptions o = with_defaults(options);
  if (o.device == "cuda") {
    std::string why;
    if (kernels::local_cuda_devices(&why).empty()) {
      err << "hgsim profile: no CUDA device: " << why << "\n";
      return kBadInput;
    }
    if (o.check_layers) {
      err << "hgsim profile: --check-layers runs on the CPU only (--device cpu)\n";
      return kBadInput;
    }
    if (o.out.empty()) {
      err << "hgsim profile: --out FILE.json is required\n";
      return kBadInput;
    }
    try {
      return profile_cuda(o, out, err);
    } catch (const std::exception& e) {
      err << "hgsim profile: " << e.what() << "\n";
      return kInternalError;
    }
  }
  try {
    if (o.check_layers) return check_layers(o, out, err);
    if (o.out.empty()) {
      err << "hgsim profile: --out FILE.json is required (or --check-layers)\n";
      return kBadInput;
    }
    return profile_cpu(o, out, err);
  } catch (const kernels::ProfileError& e) {
    err << "hgsim profile: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::invalid_argument& e) {
    err << "hgsim profile: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::bad_alloc&) {
    err << "hgsim profile: out of memory for the sweep's buffers; measure smaller shapes "
           "(--micro-batches, --seq-len) or fewer models\n";
    return kBadInput;
  }
}

}  // namespace hgsim::apps
