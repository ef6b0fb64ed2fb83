// The codecs: exact encoded sizes, encode and decode on the CPU, error-feedback state.
//
// An encoded buffer is self-describing: a 40-byte header (magic, format version, codec,
// source dtype, flags, element count, the parameters decoding needs) followed by the
// codec's body. Its length is exactly encoded_bytes(spec, shape, dtype), and decode checks
// every length and every field against the buffer before it reads: a truncated or damaged
// buffer raises CodecError, never reads out of bounds. docs/codecs.md gives
// the wire format of every codec and its size formula.
//
// Two ways to use a codec:
//  - stateless: encode()/decode(), for codecs without error feedback (and to decode any
//    buffer: decoding never needs state);
//  - TensorCodec, one per tensor of a training run: it keeps the error-feedback residual
//    (top-k, random-k, PowerSGD) and PowerSGD's warm-start Q across steps, and derives each
//    step's random seed from the spec's seed and the step number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "compress/codec_types.hpp"

namespace hgsim::compress {

// Element types encode() reads and decode() writes.
enum class DType : std::uint8_t { fp32 = 0, fp16 = 1, bf16 = 2 };
std::string to_string(DType);
std::size_t element_size(DType);
// Raw 16-bit floats, so that spans of them have their own type.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

struct ConstTensor {
  const void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::fp32;
  ConstTensor() = default;
  ConstTensor(std::span<const float> s) : data(s.data()), count(s.size()), dtype(DType::fp32) {}
  ConstTensor(std::span<const Half> s) : data(s.data()), count(s.size()), dtype(DType::fp16) {}
  ConstTensor(std::span<const BFloat16> s) : data(s.data()), count(s.size()), dtype(DType::bf16) {}
};

struct MutableTensor {
  void* data = nullptr;
  std::size_t count = 0;
  DType dtype = DType::fp32;
  MutableTensor() = default;
  MutableTensor(std::span<float> s) : data(s.data()), count(s.size()), dtype(DType::fp32) {}
  MutableTensor(std::span<Half> s) : data(s.data()), count(s.size()), dtype(DType::fp16) {}
  MutableTensor(std::span<BFloat16> s) : data(s.data()), count(s.size()), dtype(DType::bf16) {}
};

// Every problem with arguments or with an encoded buffer: a wrong output size, a
// truncated or damaged buffer, a shape that does not match the data. what() says which.
class CodecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Shape = std::vector<std::int64_t>;

// Elements in a shape; CodecError for a negative dimension or a count above 2^40.
std::uint64_t element_count(std::span<const std::int64_t> shape);

// Whether PowerSGD compresses a tensor of this shape as a matrix (at least 2 dimensions,
// rows and columns both at least 2; columns are the last dimension, rows the rest);
// otherwise it falls back to spec.fallback.
bool is_matrix(std::span<const std::int64_t> shape);

// The spec an encoding actually uses for this shape: PowerSGD on a non-matrix becomes its
// fallback codec; int8/int4 without a block get 128, fp8 per-block without a block 128.
CodecSpec effective_spec(const CodecSpec& spec, std::span<const std::int64_t> shape);

// top-k and random-k: the number of elements sent, min(n, max(1, ceil(ratio * n))); 0 if n is 0.
std::uint64_t kept_elements(double ratio, std::uint64_t n);

// PowerSGD: the rank used, min(rank, rows, cols).
int effective_rank(int rank, std::span<const std::int64_t> shape);

// Exact size in bytes of the encoding of a tensor (header included). The one formula the
// encoder, the decoder's checks and the simulator (code_transfer) use.
std::size_t encoded_bytes(const CodecSpec& spec, std::span<const std::int64_t> shape, DType dtype);

constexpr std::size_t kHeaderBytes = 40;

// What a buffer's header says. decode() needs nothing else.
struct EncodedInfo {
  CodecKind kind = CodecKind::none;
  DType dtype = DType::fp32;  // the dtype the tensor had when it was encoded
  std::uint64_t count = 0;
  std::uint32_t block = 0;                     // int8/int4/fp8 per-block: elements per scale
  bool per_block = false;                      // fp8
  std::uint64_t kept = 0;                      // top-k/random-k: elements sent
  std::uint64_t seed = 0;                      // random-k: the seed that chose the indices
  std::uint32_t rows = 0, cols = 0, rank = 0;  // PowerSGD
  std::size_t total_bytes = 0;                 // header + body, what the buffer must hold
};

// Reads and checks a header and the buffer's length. CodecError if anything is wrong.
EncodedInfo inspect(std::span<const std::byte> encoded);

// Stateless encoding. `seed` feeds the randomised parts (random-k indices, stochastic
// rounding, PowerSGD's initial Q): the same seed gives the same bytes. Error feedback and
// warm start need TensorCodec; here they are ignored. `out` must hold exactly
// encoded_bytes(spec, shape, input.dtype) bytes.
void encode(const CodecSpec& spec, std::span<const std::int64_t> shape, ConstTensor input,
            std::span<std::byte> out, std::uint64_t seed = 0);
std::vector<std::byte> encode(const CodecSpec& spec, std::span<const std::int64_t> shape,
                              ConstTensor input, std::uint64_t seed = 0);

// Encoded buffers must start at 4-byte aligned addresses (a std::vector's data does); the
// scales and 16-bit payloads inside are then aligned. CodecError otherwise.
//
// Decodes into `out`, which must have the encoded element count (any dtype: the values are
// converted with round-to-nearest-even). Elements a sparse codec did not send are zero.
void decode(std::span<const std::byte> encoded, MutableTensor out);

// The GPU path (compress/codec_cuda.cu, built when nvcc is found): kernels for every
// codec. The same bytes as encode() for all but PowerSGD (stochastic rounding and random-k
// too: they are functions of the seed; top-k breaks ties as the CPU does); PowerSGD runs the
// same algorithm with cuBLAS and decodes to the CPU's result up to rounding. Host memory
// in and out. cuda_available() says why not when it cannot run ("no CUDA device").
bool cuda_available(std::string* why = nullptr);
bool cuda_supports(CodecKind kind);
// CodecError when the codec has no kernel, the arguments are wrong or CUDA fails.
void encode_cuda(const CodecSpec& spec, std::span<const std::int64_t> shape, ConstTensor input,
                 std::span<std::byte> out, std::uint64_t seed = 0);
void decode_cuda(std::span<const std::byte> encoded, std::span<float> out);

// Where TensorCodec encodes: on the CPU (as encode()) or with the CUDA kernels (as
// encode_cuda(); CodecError where they cannot run).
enum class Device { cpu, cuda };

// A codec bound to one tensor across training steps. The error-feedback residual and the
// warm-start Q are kept in host memory whichever device encodes.
class TensorCodec {
 public:
  TensorCodec(const CodecSpec& spec, Shape shape, DType dtype, Device device = Device::cpu);

  std::size_t encoded_bytes() const { return bytes_; }
  const CodecSpec& spec() const { return spec_; }  // the effective spec for this shape
  std::uint64_t step() const { return step_; }

  // Encodes input (+ residual, with error feedback) and updates the state.
  void encode(ConstTensor input, std::span<std::byte> out);
  std::vector<std::byte> encode(ConstTensor input);

  // What error feedback has not sent yet (empty without error feedback).
  std::span<const float> residual() const { return residual_; }

 private:
  CodecSpec spec_;
  Shape shape_;
  DType dtype_;
  Device device_;
  std::size_t bytes_;
  std::uint64_t step_ = 0;
  std::vector<float> residual_;
  std::vector<float> warm_q_;  // PowerSGD: cols x rank, row-major
};

// Relative L2 error ||x - y|| / ||x|| (0 when both are zero), in double.
double relative_l2_error(std::span<const float> x, std::span<const float> y);

// Conversions of whole spans (the fp16/bf16 codecs' loops), for tests and tools.
void convert(ConstTensor from, MutableTensor to);

}  // namespace hgsim::compress
