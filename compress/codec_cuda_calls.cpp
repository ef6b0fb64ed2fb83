// The CUDA codec kernels (codec_cuda_body.hpp) as codec.cpp sees them: each call goes to
// the CUDA module, loaded on the first one (core/cuda_module.hpp). When it cannot be
// loaded (a build without CUDA, the module missing or unloadable) no codec has a CUDA
// kernel and every call fails, and the error says why.
#include "compress/codec_cuda_body.hpp"
#include "core/cuda_module.hpp"

namespace hgsim::compress::cuda {

namespace {
const CodecCudaTable* kernels(std::string& why) {
  return core::cuda_module_table<CodecCudaTable>(why);
}
}  // namespace

bool available(std::string& why) {
  const CodecCudaTable* module = kernels(why);
  return module && module->check_available(why);
}

bool supports(int kind) {
  std::string ignored;
  const CodecCudaTable* module = kernels(ignored);
  return module && module->supports_kind(kind);
}

bool encode_body_device(const BodyParams& p, const void* input, void* body, std::string& error) {
  const CodecCudaTable* module = kernels(error);
  return module && module->encode_device(p, input, body, error);
}

bool decode_body_device(const BodyParams& p, const void* body, float* output, std::string& error) {
  const CodecCudaTable* module = kernels(error);
  return module && module->decode_device(p, body, output, error);
}

bool encode_body_host(const BodyParams& p, const void* input, std::size_t input_bytes, void* body,
                      std::size_t body_bytes, std::string& error) {
  const CodecCudaTable* module = kernels(error);
  return module && module->encode_host(p, input, input_bytes, body, body_bytes, error);
}

bool decode_body_host(const BodyParams& p, const void* body, std::size_t body_bytes, float* output,
                      std::string& error) {
  const CodecCudaTable* module = kernels(error);
  return module && module->decode_host(p, body, body_bytes, output, error);
}

}  // namespace hgsim::compress::cuda
