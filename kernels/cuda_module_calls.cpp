// The CUDA interfaces of kernels/ (cuda_runtime_query.hpp, ops_cuda.hpp) as the main
// library sees them: each call goes to the CUDA module, loaded on the first one
// (core/cuda_module.hpp). When it cannot be loaded (a build without CUDA, the module
// missing or unloadable) every call fails, and the error says why.
#include "core/cuda_module.hpp"
#include "kernels/cuda_runtime_query.hpp"
#include "kernels/ops_cuda.hpp"

namespace hgsim::kernels {

namespace detail {

std::vector<RawDevice> query_cuda_devices(std::string& why_none) {
  const CudaDevicesTable* module = core::cuda_module_table<CudaDevicesTable>(why_none);
  return module ? module->query(why_none) : std::vector<RawDevice>{};
}

}  // namespace detail

namespace gpu {

namespace {
const OpsCudaTable* ops(std::string* error) {
  std::string why;
  const OpsCudaTable* module = core::cuda_module_table<OpsCudaTable>(why);
  if (!module && error) *error = why;
  return module;
}
}  // namespace

bool cuda_device_info(CudaDeviceInfo* out, std::string* error) {
  const OpsCudaTable* module = ops(error);
  return module && module->device_info(out, error);
}

bool cuda_time_op(const std::string& op, const std::vector<double>& shape, const std::string& dtype,
                  double seconds_per_entry, CudaTiming* out, std::string* error) {
  const OpsCudaTable* module = ops(error);
  return module && module->time_op(op, shape, dtype, seconds_per_entry, out, error);
}

bool cuda_run_op(const std::string& op, const std::vector<int>& shape, const std::string& dtype,
                 const std::vector<std::vector<float>>& inputs,
                 std::vector<std::vector<float>>* outputs, std::string* error) {
  const OpsCudaTable* module = ops(error);
  return module && module->run_op(op, shape, dtype, inputs, outputs, error);
}

bool cuda_measure_peaks(std::map<std::string, double>* peak_flops_per_s,
                        double* copy_bandwidth_bytes_per_s, std::string* error) {
  const OpsCudaTable* module = ops(error);
  return module && module->measure_peaks(peak_flops_per_s, copy_bandwidth_bytes_per_s, error);
}

}  // namespace gpu

}  // namespace hgsim::kernels
