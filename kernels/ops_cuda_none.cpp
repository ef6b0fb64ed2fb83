// The CUDA ops in a build without nvcc: every call says so.
#include "kernels/ops_cuda.hpp"

namespace hgsim::kernels::gpu {

namespace {
bool none(std::string* error) {
  if (error) *error = "no CUDA in this build (nvcc was not found when it was configured)";
  return false;
}
}  // namespace

bool cuda_device_info(CudaDeviceInfo*, std::string* error) {
  return none(error);
}
bool cuda_time_op(const std::string&, const std::vector<double>&, const std::string&, double,
                  CudaTiming*, std::string* error) {
  return none(error);
}
bool cuda_run_op(const std::string&, const std::vector<int>&, const std::string&,
                 const std::vector<std::vector<float>>&, std::vector<std::vector<float>>*,
                 std::string* error) {
  return none(error);
}
bool cuda_measure_peaks(std::map<std::string, double>*, double*, std::string* error) {
  return none(error);
}

}  // namespace hgsim::kernels::gpu
