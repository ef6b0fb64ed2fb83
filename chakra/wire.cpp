#include "chakra/wire.hpp"

#include <cstring>

namespace hgsim::chakra {

std::uint64_t zigzag_encode(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}

std::int64_t zigzag_decode(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

void Writer::varint(std::uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void Writer::raw_fixed32(std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::raw_fixed64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::double_field(int field, double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  fixed64_field(field, bits);
}

void Writer::fixed32_field(int field, std::uint32_t v) {
  key(field, WireType::fixed32);
  raw_fixed32(v);
}

void Writer::fixed64_field(int field, std::uint64_t v) {
  key(field, WireType::fixed64);
  raw_fixed64(v);
}

void Writer::bytes_field(int field, std::string_view bytes) {
  key(field, WireType::length_delimited);
  varint(bytes.size());
  out_.append(bytes);
}

void Reader::fail(std::uint64_t at, const std::string& what) const {
  throw WireError(at, what);
}

std::uint64_t Reader::varint() {
  const std::size_t start = pos_;
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) fail(base_ + start, "truncated varint");
    const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
    // The tenth byte holds bit 63 alone.
    if (shift == 63 && byte > 1) fail(base_ + start, "varint longer than 64 bits");
    v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  fail(base_ + start, "varint longer than 10 bytes");
}

Reader::Key Reader::key() {
  const std::size_t start = pos_;
  const std::uint64_t k = varint();
  const std::uint64_t field = k >> 3;
  const auto type = static_cast<int>(k & 7);
  if (field == 0 || field > (std::uint64_t{1} << 29) - 1)
    fail(base_ + start, "field number " + std::to_string(field) + " out of range");
  if (type == 3 || type == 4) fail(base_ + start, "groups (wire types 3 and 4) are not supported");
  if (type > 5) fail(base_ + start, "unknown wire type " + std::to_string(type));
  return {static_cast<int>(field), static_cast<WireType>(type)};
}

std::uint32_t Reader::fixed32() {
  if (data_.size() - pos_ < 4) fail(base_ + pos_, "truncated fixed32");
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}

std::uint64_t Reader::fixed64() {
  if (data_.size() - pos_ < 8) fail(base_ + pos_, "truncated fixed64");
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

double Reader::double_value() {
  const std::uint64_t bits = fixed64();
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

float Reader::float_value() {
  const std::uint32_t bits = fixed32();
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::string_view Reader::bytes() {
  const std::size_t start = pos_;
  const std::uint64_t n = varint();
  if (n > data_.size() - pos_)
    fail(base_ + start, "length " + std::to_string(n) + " runs past the end (" +
                            std::to_string(data_.size() - pos_) + " bytes left)");
  const std::string_view out = data_.substr(pos_, n);
  pos_ += n;
  return out;
}

void Reader::skip(WireType type) {
  switch (type) {
    case WireType::varint:
      (void)varint();
      return;
    case WireType::fixed64:
      (void)fixed64();
      return;
    case WireType::length_delimited:
      (void)bytes();
      return;
    case WireType::fixed32:
      (void)fixed32();
      return;
    default:
      fail(base_ + pos_, "cannot skip a group");
  }
}

}  // namespace hgsim::chakra
