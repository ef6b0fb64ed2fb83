// The CUDA devices this process can see, as the CUDA runtime reports them, through the
// CUDA module (cuda_devices.cu, loaded on the first call: core/cuda_module.hpp). Without
// it (no nvcc when the build was configured, the module missing) the list is empty and
// `why_none` says why.
#pragma once

#include <string>
#include <vector>

#include "core/units.hpp"

namespace hgsim::kernels {

struct LocalGpu {
  int index = 0;
  std::string name;  // as the driver names it, e.g. "NVIDIA H200"
  core::Bytes memory;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessors = 0;
};

// Empty when there is none; then `why_none` (if given) says why: no CUDA in this build,
// no driver, or no device.
std::vector<LocalGpu> local_cuda_devices(std::string* why_none = nullptr);

}  // namespace hgsim::kernels
