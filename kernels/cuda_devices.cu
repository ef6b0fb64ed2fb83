// Lists the CUDA devices with the CUDA runtime. Compiled only when nvcc is found.
#include <cuda_runtime.h>

#include "kernels/cuda_runtime_query.hpp"

namespace hgsim::kernels::detail {

bool cuda_compiled() {
  return true;
}

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
