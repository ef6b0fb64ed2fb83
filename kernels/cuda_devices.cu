// Lists the CUDA devices with the CUDA runtime. Part of the CUDA module (built only when
// nvcc is found; core/cuda_module.hpp).
#include <cuda_runtime.h>

#include "kernels/cuda_runtime_query.hpp"

namespace hgsim::kernels::detail {

std::vector<RawDevice> query_cuda_devices(std::string& why_none) {
  std::vector<RawDevice> devices;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    why_none = std::string("CUDA runtime: ") + cudaGetErrorString(status);
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({i, prop.name, static_cast<double>(prop.totalGlobalMem), prop.major,
                       prop.minor, prop.multiProcessorCount});
  }
  if (devices.empty()) why_none = "the CUDA runtime sees no device";
  return devices;
}

}  // namespace hgsim::kernels::detail

// The table the main library calls through (core/cuda_module.hpp).
extern "C" __attribute__((visibility("default"))) const hgsim::kernels::detail::CudaDevicesTable*
hgsim_cuda_devices_table() {
  using hgsim::kernels::detail::CudaDevicesTable;
  static const CudaDevicesTable table = [] {
    CudaDevicesTable t;
    t.query = &hgsim::kernels::detail::query_cuda_devices;
    return t;
  }();
  return &table;
}
