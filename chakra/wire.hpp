// The protobuf wire format, by hand: what Chakra's execution traces are written in
// (https://protobuf.dev/programming-guides/encoding/). Varints, zigzag for sint32/sint64,
// fixed 32- and 64-bit little-endian values, and length-delimited bytes; fields are a key
// (field number << 3 | wire type) then the value. A reader skips fields it does not know by
// their wire type, as protobuf does.
//
// Every read is bounded by the buffer it reads from: a truncated or damaged value throws
// WireError with the byte offset where it starts, never reads past the end.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hgsim::chakra {

enum class WireType : std::uint8_t {
  varint = 0,
  fixed64 = 1,
  length_delimited = 2,
  start_group = 3,  // deprecated groups: refused
  end_group = 4,
  fixed32 = 5,
};

// A malformed value at `offset` (bytes from the start of the buffer the reader was given,
// plus its base).
struct WireError : std::runtime_error {
  WireError(std::uint64_t offset, const std::string& what)
      : std::runtime_error(what), offset(offset) {}
  std::uint64_t offset;
};

std::uint64_t zigzag_encode(std::int64_t v);
std::int64_t zigzag_decode(std::uint64_t v);

// Appends fields to a byte string.
class Writer {
 public:
  void varint(std::uint64_t v);
  void key(int field, WireType type) { varint(static_cast<std::uint64_t>(field) << 3 | int(type)); }
  void uint64_field(int field, std::uint64_t v) {
    key(field, WireType::varint);
    varint(v);
  }
  // int32 and int64 are both written as the 64-bit two's complement varint (10 bytes when
  // negative), as protobuf does.
  void int64_field(int field, std::int64_t v) {
    uint64_field(field, static_cast<std::uint64_t>(v));
  }
  void sint64_field(int field, std::int64_t v) { uint64_field(field, zigzag_encode(v)); }
  void bool_field(int field, bool v) { uint64_field(field, v ? 1 : 0); }
  void double_field(int field, double v);
  void fixed32_field(int field, std::uint32_t v);
  void fixed64_field(int field, std::uint64_t v);
  void bytes_field(int field, std::string_view bytes);
  void raw_fixed32(std::uint32_t v);
  void raw_fixed64(std::uint64_t v);
  void raw(std::string_view bytes) { out_.append(bytes); }

  const std::string& bytes() const { return out_; }
  std::string& bytes() { return out_; }
  void clear() { out_.clear(); }

 private:
  std::string out_;
};

// Reads fields from a byte string it does not own.
class Reader {
 public:
  // `base`: the offset of data[0] in the file, for messages.
  explicit Reader(std::string_view data, std::uint64_t base = 0) : data_(data), base_(base) {}

  bool done() const { return pos_ >= data_.size(); }
  std::uint64_t offset() const { return base_ + pos_; }  // of the next byte

  std::uint64_t varint();
  // The next field's key; field numbers 0 and above 2^29 - 1 and group wire types are errors.
  struct Key {
    int field = 0;
    WireType type = WireType::varint;
  };
  Key key();
  std::uint32_t fixed32();
  std::uint64_t fixed64();
  double double_value();
  float float_value();
  // A length-delimited value: its bytes (a view into the buffer) and where they start.
  std::string_view bytes();
  // Skips the value of a field of this wire type.
  void skip(WireType type);

 private:
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const;
  std::string_view data_;
  std::uint64_t base_ = 0;
  std::size_t pos_ = 0;
};

}  // namespace hgsim::chakra
