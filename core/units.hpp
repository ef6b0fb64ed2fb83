// Physical quantities with their dimension in the type.
//
// Every quantity stores one double in the SI base unit of its dimension: bytes,
// seconds, bytes per second, FLOP, FLOP per second. Bits exist only at the edges:
// the parser turns "10Gbps" into 1.25e9 bytes/s, the formatter turns bytes/s back into
// bits for network rates. Inside hgsim a bandwidth in bits and one in bytes cannot
// meet, because there is no type for "bits".
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace hgsim::core {

template <class Dimension>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double value_in_base_unit) : value_(value_in_base_unit) {}

  // The value in the dimension's SI base unit (bytes, seconds, bytes/s, FLOP, FLOP/s).
  constexpr double value() const { return value_; }

  constexpr Quantity operator+(Quantity other) const { return Quantity(value_ + other.value_); }
  constexpr Quantity operator-(Quantity other) const { return Quantity(value_ - other.value_); }
  constexpr Quantity& operator+=(Quantity other) {
    value_ += other.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity other) {
    value_ -= other.value_;
    return *this;
  }
  constexpr Quantity operator*(double factor) const { return Quantity(value_ * factor); }
  constexpr Quantity operator/(double divisor) const { return Quantity(value_ / divisor); }
  constexpr double operator/(Quantity other) const { return value_ / other.value_; }
  friend constexpr Quantity operator*(double factor, Quantity q) { return q * factor; }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double value_ = 0.0;
};

namespace dimension {
struct Size {};
struct Duration {};
struct Bandwidth {};
struct Work {};
struct ComputeRate {};
}  // namespace dimension

using Bytes = Quantity<dimension::Size>;                // bytes
using Seconds = Quantity<dimension::Duration>;          // seconds
using BytesPerSecond = Quantity<dimension::Bandwidth>;  // bytes per second
using Flops = Quantity<dimension::Work>;                // floating-point operations (a count)
using FlopsPerSecond = Quantity<dimension::ComputeRate>;

// The only ways dimensions combine.
constexpr Seconds operator/(Bytes size, BytesPerSecond rate) {
  return Seconds(size.value() / rate.value());
}
constexpr BytesPerSecond operator/(Bytes size, Seconds time) {
  return BytesPerSecond(size.value() / time.value());
}
constexpr Bytes operator*(BytesPerSecond rate, Seconds time) {
  return Bytes(rate.value() * time.value());
}
constexpr Bytes operator*(Seconds time, BytesPerSecond rate) {
  return rate * time;
}
constexpr Seconds operator/(Flops work, FlopsPerSecond rate) {
  return Seconds(work.value() / rate.value());
}
constexpr FlopsPerSecond operator/(Flops work, Seconds time) {
  return FlopsPerSecond(work.value() / time.value());
}

// The result of parsing a quantity: the value, or a message saying what is wrong and
// what would be right. The message does not say where; the caller knows that.
template <class T>
struct Parsed {
  std::optional<T> value;
  std::string error;
  explicit operator bool() const { return value.has_value(); }
};

// Sizes: B, kB/KB, MB, GB, TB, PB (powers of 1000) and KiB, MiB, GiB, TiB, PiB (powers of
// 1024). A unit in bits (Gb, Gbit) is refused: sizes are in bytes.
Parsed<Bytes> parse_size(std::string_view text);
// Bandwidths: bits (bps, Kbps, Mbps, Gbps, Tbps; bit/s, Mbit/s, Gb/s, ...) or bytes
// (B/s, KB/s, MB/s, GB/s, GiB/s, ..., and MBps, GBps). A rate must say per second.
Parsed<BytesPerSecond> parse_bandwidth(std::string_view text);
// Durations: ns, us (or µs), ms, s, min, h.
Parsed<Seconds> parse_duration(std::string_view text);
// The same for the durations of long runs (MTBF, checkpoint intervals): up to 1e10 s.
Parsed<Seconds> parse_long_duration(std::string_view text);
// Compute rates: FLOPS, KFLOPS ... PFLOPS, also written FLOP/s, TFLOP/s.
Parsed<FlopsPerSecond> parse_compute_rate(std::string_view text);

// A quantity whose dimension is read from its unit ("10Gbps" a bandwidth, "15ms" a duration),
// for inputs that do not know which dimension to expect (a --where literal, a sweep value).
enum class QuantityKind { size, duration, bandwidth, compute_rate };
struct AnyQuantity {
  QuantityKind kind;
  double value;  // in the kind's SI base unit
};
// Text without a unit ("5", "ok") or with a unit of none of the four kinds is no quantity:
// neither value nor error. A known unit with a bad number ("-1Gbps", "1e300TB") is an error.
Parsed<AnyQuantity> parse_quantity(std::string_view text);
// "a size", "a duration", "a bandwidth", "a compute rate".
const char* quantity_kind_name(QuantityKind kind);

// Canonical text for each quantity, chosen so that parsing it gives back exactly the same
// double: the shortest of the candidate units that round-trips ("10Gbps", "25MB",
// "15ms", "312TFLOPS"). Network rates are written in bits, sizes in bytes.
std::string format_size(Bytes size);
std::string format_bandwidth(BytesPerSecond rate);
std::string format_duration(Seconds time);
std::string format_compute_rate(FlopsPerSecond rate);

// Human-oriented text with about four significant digits ("1.23 GiB", "9.8 ms"); for
// tables, never for round trips.
std::string human_size(Bytes size);
std::string human_bandwidth(BytesPerSecond rate);
std::string human_duration(Seconds time);
std::string human_compute_rate(FlopsPerSecond rate);

// Shortest decimal text that reads back as exactly `value` ("0.1", "1e-06", "2").
std::string shortest_decimal(double value);

}  // namespace hgsim::core
