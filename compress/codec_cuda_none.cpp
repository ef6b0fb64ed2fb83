// The CPU-only build: no CUDA kernels (nvcc was not found at configure time).
#include "compress/codec_cuda_body.hpp"

namespace hgsim::compress::cuda {

namespace {
const char* const kNoCuda =
    "this build has no CUDA codecs (nvcc was not found when it was configured)";
}

bool available(std::string& why) {
  why = kNoCuda;
  return false;
}
bool supports(int) {
  return false;
}
bool encode_body_device(const BodyParams&, const void*, void*, std::string& error) {
  error = kNoCuda;
  return false;
}
bool decode_body_device(const BodyParams&, const void*, float*, std::string& error) {
  error = kNoCuda;
  return false;
}
bool encode_body_host(const BodyParams&, const void*, std::size_t, void*, std::size_t,
                      std::string& error) {
  error = kNoCuda;
  return false;
}
bool decode_body_host(const BodyParams&, const void*, std::size_t, float*, std::string& error) {
  error = kNoCuda;
  return false;
}

}  // namespace hgsim::compress::cuda
