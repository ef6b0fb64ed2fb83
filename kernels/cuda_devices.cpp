#include "kernels/cuda_devices.hpp"

#include "core/cuda_module.hpp"
#include "kernels/cuda_runtime_query.hpp"

namespace hgsim::kernels {

std::vector<LocalGpu> local_cuda_devices(std::string* why_none) {
  std::string why;
  std::vector<LocalGpu> out;
  for (const detail::RawDevice& d : detail::query_cuda_devices(why))
    out.push_back(
        {d.index, d.name, core::Bytes(d.memory_bytes), d.major, d.minor, d.multiprocessors});
  if (why_none) *why_none = why;
  return out;
}

}  // namespace hgsim::kernels
