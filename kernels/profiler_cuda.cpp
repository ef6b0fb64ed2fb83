// The GPU profiler (see profiler.hpp): the C++20 side; the ops and their timing are in
// ops_cuda.cu (or ops_cuda_none.cpp, which makes every call fail with the reason).
#include <chrono>
#include <cmath>
#include <ctime>

#include "kernels/gpu_catalog.hpp"
#include "kernels/ops_cuda.hpp"
#include "kernels/profiler.hpp"

namespace hgsim::kernels {

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// "NVIDIA H200" -> the catalog's H200; "NVIDIA H100 80GB HBM3" -> H100-80GB-SXM via its
// words; empty when nothing matches.
std::string catalog_name_for(const std::string& device_name) {
  std::string name = device_name;
  if (name.rfind("NVIDIA ", 0) == 0) name = name.substr(7);
  if (const GpuSpec* g = find_gpu(name)) return g->name;
  std::string words;
  for (char c : name) words += c == ' ' ? '-' : c;
  if (const GpuSpec* g = find_gpu(words)) return g->name;
  const std::string first = name.substr(0, name.find(' '));
  if (const GpuSpec* g = find_gpu(first)) return g->name;
  return "";
}

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

Profile profile_cuda(const CudaSweep& sweep, const std::map<std::string, std::string>& conditions) {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto say = [&](const std::string& line) {
    if (sweep.ops.progress) sweep.ops.progress(line);
  };
  const std::vector<OpCall> calls = sweep_ops(sweep.ops);  // unknown models fail here, first
  gpu::CudaDeviceInfo info;
  std::string error;
  if (!gpu::cuda_device_info(&info, &error)) throw std::runtime_error("no CUDA device: " + error);
  Profile p;
  p.created = utc_now();
  p.attention = "batched GEMM (cuBLASLt) + causal softmax kernel, scores materialised";
  p.device.kind = "cuda";
  p.device.name = info.name;
  p.device.catalog_gpu = catalog_name_for(info.name);
  p.device.driver = version_text(info.driver_version);
  p.device.toolkit = "CUDA runtime " + version_text(info.runtime_version) + ", cuBLASLt " +
                     std::to_string(info.cublaslt_version);
  if (info.sm_clock_mhz > 0) p.device.clocks["sm_mhz"] = info.sm_clock_mhz;
  if (info.memory_clock_mhz > 0) p.device.clocks["memory_mhz"] = info.memory_clock_mhz;
  p.device.conditions = conditions;
  say("measuring the matrix peaks and the copy bandwidth");
  if (!gpu::cuda_measure_peaks(&p.device.peak_flops_per_s, &p.device.copy_bandwidth_bytes_per_s,
                               &error))
    throw std::runtime_error("measuring the peaks: " + error);

  struct Job {
    OpCall call;
    std::string dtype;
  };
  std::vector<Job> jobs;
  const std::string dtype = dtype_name(sweep.ops.precision);
  for (const OpCall& c : calls) jobs.push_back({c, c.op == "adam" ? "fp32" : dtype});
  for (const std::string& extra : sweep.extra_gemm_dtypes)
    for (const OpCall& c : calls)
      if (c.op == "gemm") jobs.push_back({c, extra});
  say(std::to_string(jobs.size()) + " op shapes to time");
  int failed = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (elapsed() > sweep.max_seconds) {
      p.device.conditions["truncated"] = "stopped after " + std::to_string(i) + " of " +
                                         std::to_string(jobs.size()) + " shapes (time budget)";
      say(p.device.conditions["truncated"]);
      break;
    }
    const Job& j = jobs[i];
    gpu::CudaTiming t;
    if (!gpu::cuda_time_op(j.call.op, j.call.shape, j.dtype, sweep.ops.seconds_per_entry, &t,
                           &error)) {
      if (failed++ < 10) say("skipped " + j.call.op + " " + j.dtype + ": " + error);
      continue;
    }
    const double e = j.dtype == "fp32" || j.dtype == "tf32" ? 4 : j.dtype == "fp8" ? 1 : 2;
    const OpCall priced = make_op(j.call.op, j.call.shape, j.call.op == "cross_entropy" ? 4 : e);
    p.entries.push_back({j.call.op, j.dtype, j.call.shape, t.median_s, t.p10_s, t.p90_s,
                         priced.flops, priced.bytes, t.repeats});
    if ((i + 1) % 200 == 0)
      say(std::to_string(i + 1) + "/" + std::to_string(jobs.size()) + " after " +
          std::to_string(int(elapsed())) + " s");
  }
  if (failed > 0) p.device.conditions["skipped_shapes"] = std::to_string(failed);
  p.device.conditions["sweep_seconds"] = std::to_string(int(std::lround(elapsed())));
  return p;
}

}  // namespace hgsim::kernels
