// The CPU-only build: no CUDA sources were compiled (nvcc was not found at configure time).
#include "kernels/cuda_runtime_query.hpp"

namespace hgsim::kernels::detail {

bool cuda_compiled() {
  return false;
}

std::vector<RawDevice> query_cuda_devices(std::string& why_none) {
  why_none = "this build has no CUDA sources (nvcc was not found when it was configured)";
  return {};
}

}  // namespace hgsim::kernels::detail
