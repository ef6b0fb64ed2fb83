// One libFuzzer target per codec (HGSIM_FUZZ_CODEC is the codec's id, 0..9).
//
// An input that starts with the "HGCD" magic is an encoded buffer: its codec byte is set
// to this target's codec, then it is inspected and, if the header is accepted, decoded
// (into fp32, or into fp16/bf16 by the last byte). Any other input is raw tensor data: its
// first bytes choose the parameters, dtype and shape, the rest are the elements (any bit
// patterns: NaN, Inf, subnormals); it is encoded, the length checked against
// encoded_bytes, and decoded again. CodecError is the documented refusal; anything else
// (a crash, a sanitizer report, another exception, a wrong length) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compress/codec.hpp"

#ifndef HGSIM_FUZZ_CODEC
#error "define HGSIM_FUZZ_CODEC to the codec id"
#endif

using namespace hgsim::compress;

namespace {

constexpr CodecKind kKind = static_cast<CodecKind>(HGSIM_FUZZ_CODEC);
constexpr std::uint64_t kMaxElements = std::uint64_t(1) << 20;

void check(bool ok) {
  if (!ok) std::abort();
}

void fuzz_decode(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> buf(size);
  std::memcpy(buf.data(), data, size);
  buf[5] = static_cast<std::byte>(kKind);
  EncodedInfo info;
  try {
    info = inspect(buf);
  } catch (const CodecError&) {
    return;
  }
  check(info.total_bytes == buf.size());
  if (info.count > kMaxElements) return;  // a random-k header may describe a huge tensor
  const int out_dtype = data[size - 1] % 3;
  try {
    if (out_dtype == 0) {
      std::vector<float> out(info.count);
      decode(buf, std::span<float>(out));
    } else if (out_dtype == 1) {
      std::vector<Half> out(info.count);
      decode(buf, std::span<Half>(out));
    } else {
      std::vector<BFloat16> out(info.count);
      decode(buf, std::span<BFloat16>(out));
    }
  } catch (const CodecError&) {
    // damaged top-k indices are refused while decoding
  }
}

void fuzz_encode(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return;
  CodecSpec spec;
  spec.kind = kKind;
  spec.block = 1 + data[0] % 64;
  if (kKind == CodecKind::int4) spec.block = 2 * spec.block;
  spec.scaling = (data[0] & 0x80) ? Scaling::per_block : Scaling::per_tensor;
  spec.stochastic_rounding = data[1] & 1;
  spec.ratio = (1 + data[1]) / 256.0;
  spec.rank = 1 + data[2] % 8;
  spec.fallback = static_cast<CodecKind>(data[2] / 8 % 7);
  spec.seed = data[2];
  const DType dtype = static_cast<DType>(data[3] % 3);
  const std::size_t es = element_size(dtype);
  const std::int64_t n = static_cast<std::int64_t>((size - 4) / es);
  const std::int64_t cols = 1 + data[3] / 3 % 16;
  const Shape shape = n % cols == 0 ? Shape{n / cols, cols} : Shape{n};
  std::vector<std::byte> elements(static_cast<std::size_t>(n) * es);
  if (!elements.empty()) std::memcpy(elements.data(), data + 4, elements.size());
  ConstTensor in;
  in.data = elements.data();
  in.count = static_cast<std::size_t>(n);
  in.dtype = dtype;
  const std::vector<std::byte> enc = encode(spec, shape, in, data[1]);
  check(enc.size() == encoded_bytes(spec, shape, dtype));
  check(inspect(enc).count == static_cast<std::uint64_t>(n));
  std::vector<float> out(static_cast<std::size_t>(n));
  decode(enc, std::span<float>(out));
  // Codecs that send every element exactly in the input's own dtype round-trip bit for bit.
  if (kKind == CodecKind::none) {
    std::vector<std::byte> same(elements.size());
    MutableTensor o;
    o.data = same.data();
    o.count = in.count;
    o.dtype = dtype;
    decode(enc, o);
    check(same == elements);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size >= kHeaderBytes && std::memcmp(data, "HGCD", 4) == 0)
    fuzz_decode(data, size);
  else
    fuzz_encode(data, size);
  return 0;
}
