// Plain C++17 view of the CUDA runtime's device list, shared by cuda_devices.cu (nvcc,
// C++17, in the CUDA module) and cuda_devices.cpp (C++20). The main library's definition
// forwards to the module (kernels/cuda_module_calls.cpp, core/cuda_module.hpp).
#pragma once

#include <cstddef>
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

// The devices, or none with `why_none` saying why (no CUDA module, no driver, no device).
std::vector<RawDevice> query_cuda_devices(std::string& why_none);

// What the CUDA module exports for this interface (core/cuda_module.hpp).
struct CudaDevicesTable {
  static constexpr int kVersion = 1;
  static constexpr const char* kSymbol = "hgsim_cuda_devices_table";
  int version = kVersion;
  std::size_t size = sizeof(CudaDevicesTable);
  decltype(&query_cuda_devices) query = nullptr;
};

}  // namespace hgsim::kernels::detail
