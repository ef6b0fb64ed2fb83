// Plain C++17 view of the CUDA runtime's device list, shared by cuda_devices.cu (nvcc,
// C++17) and cuda_devices.cpp (C++20).
#pragma once

#include <string>
#include <vector>

namespace hgsim::kernels::detail {

struct RawDevice {
  int index = 0;
  std::string name;
  double memory_bytes = 0;
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
};

bool cuda_compiled();
std::vector<RawDevice> query_cuda_devices(std::string& why_none);

}  // namespace hgsim::kernels::detail
