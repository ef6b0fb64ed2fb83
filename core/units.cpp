#include "core/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <span>
#include <type_traits>

#include "core/document.hpp"

namespace hgsim::core {
namespace {

struct Unit {
  std::string_view symbol;
  double factor;  // base units per one of this unit (bits already divided by 8)
};

// Preference order matters for formatting: on a tie in length, the earlier unit wins.
constexpr std::array kSizeUnits{
    Unit{"TB", 1e12},    Unit{"TiB", 1099511627776.0},
    Unit{"GB", 1e9},     Unit{"GiB", 1073741824.0},
    Unit{"MB", 1e6},     Unit{"MiB", 1048576.0},
    Unit{"kB", 1e3},     Unit{"KB", 1e3},
    Unit{"KiB", 1024.0}, Unit{"B", 1.0},
    Unit{"PB", 1e15},    Unit{"PiB", 1125899906842624.0},
};

// Network rates: bits first, so that a tie reads as the network convention (10Gbps).
constexpr std::array kBandwidthUnits{
    Unit{"Tbps", 1e12 / 8},
    Unit{"Gbps", 1e9 / 8},
    Unit{"Mbps", 1e6 / 8},
    Unit{"Kbps", 1e3 / 8},
    Unit{"bps", 1.0 / 8},
    Unit{"TB/s", 1e12},
    Unit{"GB/s", 1e9},
    Unit{"MB/s", 1e6},
    Unit{"kB/s", 1e3},
    Unit{"B/s", 1.0},
    Unit{"TiB/s", 1099511627776.0},
    Unit{"GiB/s", 1073741824.0},
    Unit{"MiB/s", 1048576.0},
    Unit{"KiB/s", 1024.0},
    Unit{"kbps", 1e3 / 8},
    Unit{"Tbit/s", 1e12 / 8},
    Unit{"Gbit/s", 1e9 / 8},
    Unit{"Mbit/s", 1e6 / 8},
    Unit{"Kbit/s", 1e3 / 8},
    Unit{"kbit/s", 1e3 / 8},
    Unit{"bit/s", 1.0 / 8},
    Unit{"Tb/s", 1e12 / 8},
    Unit{"Gb/s", 1e9 / 8},
    Unit{"Mb/s", 1e6 / 8},
    Unit{"Kb/s", 1e3 / 8},
    Unit{"kb/s", 1e3 / 8},
    Unit{"b/s", 1.0 / 8},
    Unit{"KB/s", 1e3},
    Unit{"TBps", 1e12},
    Unit{"GBps", 1e9},
    Unit{"MBps", 1e6},
    Unit{"KBps", 1e3},
    Unit{"kBps", 1e3},
    Unit{"Bps", 1.0},
};

constexpr std::array kDurationUnits{
    Unit{"s", 1.0},    Unit{"ms", 1e-3},  Unit{"us", 1e-6},   Unit{"ns", 1e-9},
    Unit{"min", 60.0}, Unit{"h", 3600.0}, Unit{"d", 86400.0}, Unit{"\xC2\xB5s", 1e-6},  // µs
};

constexpr std::array kComputeRateUnits{
    Unit{"TFLOPS", 1e12}, Unit{"PFLOPS", 1e15}, Unit{"GFLOPS", 1e9},   Unit{"MFLOPS", 1e6},
    Unit{"KFLOPS", 1e3},  Unit{"FLOPS", 1.0},   Unit{"TFLOP/s", 1e12}, Unit{"PFLOP/s", 1e15},
    Unit{"GFLOP/s", 1e9}, Unit{"MFLOP/s", 1e6}, Unit{"KFLOP/s", 1e3},  Unit{"FLOP/s", 1.0},
};

// Bit units that are not rates: a size in bits, or a bandwidth that forgot "/s".
constexpr std::array<std::string_view, 16> kBitSizeSymbols{
    "b",    "Kb",   "kb",   "Mb",   "Gb",   "Tb",   "Pb",    "bit",
    "Kbit", "kbit", "Mbit", "Gbit", "Tbit", "bits", "Gbits", "Mbits"};

template <std::size_t N>
const Unit* find_unit(const std::array<Unit, N>& units, std::string_view symbol) {
  for (const Unit& u : units)
    if (u.symbol == symbol) return &u;
  return nullptr;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

template <std::size_t N>
const Unit* find_unit_ignoring_case(const std::array<Unit, N>& units, std::string_view symbol) {
  for (const Unit& u : units)
    if (equals_ignoring_case(u.symbol, symbol)) return &u;
  return nullptr;
}

bool is_bit_size_symbol(std::string_view symbol) {
  for (std::string_view s : kBitSizeSymbols)
    if (s == symbol) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// What a message quotes of the value: at most 60 characters, control characters escaped.
std::string quoted(std::string_view s) {
  return "'" + excerpt(trim(s)) + "'";
}

struct NumberAndUnit {
  double number = 0;
  std::string_view unit;
  std::string error;
};

// "10 Gbps" -> (10, "Gbps"). The number is decimal, optionally with an exponent.
NumberAndUnit split(std::string_view text) {
  NumberAndUnit out;
  std::string_view s = trim(text);
  if (s.empty()) {
    out.error = "empty value";
    return out;
  }
  std::size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  // An exponent only if 'e' is followed by a digit or a sign and a digit (so "1e3GB" parses
  // but a unit starting with 'e' would not be eaten).
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    if (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
      i = j;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    }
  }
  std::string_view number_text = s.substr(0, i);
  std::string_view digits = number_text;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.number);
  if (ec == std::errc::result_out_of_range) {
    out.error = quoted(s) + " has a number too large or too small for a double";
    return out;
  }
  if (number_text.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    out.error = quoted(s) + " does not start with a number";
    return out;
  }
  if (!std::isfinite(out.number)) {
    out.error = quoted(s) + " is not a finite number";
    return out;
  }
  out.unit = trim(s.substr(i));
  return out;
}

template <class Q>
Parsed<Q> fail(std::string message) {
  Parsed<Q> p;
  p.error = std::move(message);
  return p;
}

// What a physical input may be, in base units: past these a value is a typo or an attack
// (1e300Tbps overflows to infinity, 1e-300bps makes an iteration last 1e306 s), not a
// setting anyone means.
struct Range {
  double min;  // smallest value above zero
  double max;
  const char* text;
};

template <class Q>
Range range_of() {
  // The texts use units the parser accepts (it has no EB).
  if constexpr (std::is_same_v<Q, Bytes>) return {0, 1e18, "up to 1000000TB"};
  if constexpr (std::is_same_v<Q, BytesPerSecond>)
    // A modem to an idealised link that makes transfers free (tests and notebooks write
    // 1000TB/s for that; 1e18 B/s is what the simulator could still tell from infinity).
    return {1e3 / 8, 1e18, "1kbps to 1000000TB/s"};
  if constexpr (std::is_same_v<Q, Seconds>) return {0, 86400, "up to 24h"};
  return {1e3, 1e21, "1KFLOPS to 1000000PFLOPS"};  // compute rates
}

template <class Q, std::size_t N>
Parsed<Q> parse_with(std::string_view text, const std::array<Unit, N>& units, std::string_view kind,
                     std::string_view example, bool allow_zero, Range range = range_of<Q>()) {
  NumberAndUnit nu = split(text);
  if (!nu.error.empty())
    return fail<Q>(nu.error + "; expected " + std::string(kind) + " such as " +
                   std::string(example));
  if (nu.unit.empty())
    return fail<Q>(quoted(text) + " has no unit; " + std::string(kind) + " needs one, e.g. " +
                   std::string(example));
  const Unit* unit = find_unit(units, nu.unit);
  if (unit == nullptr) return fail<Q>({});  // the caller explains what the unit is instead
  if (nu.number < 0 || (!allow_zero && nu.number == 0))
    return fail<Q>(quoted(text) + ": " + std::string(kind) + " must be " +
                   (allow_zero ? "zero or positive" : "positive"));
  const double value = nu.number * unit->factor;
  if (!std::isfinite(value) || value > range.max || (value != 0 && value < range.min))
    return fail<Q>(quoted(text) + " is outside the range hgsim accepts for " + std::string(kind) +
                   " (" + range.text + ")");
  Parsed<Q> p;
  p.value = Q(value);
  return p;
}

// Explains an unrecognised unit in terms of what it looks like, so that a size written
// where a rate is expected says exactly that.
std::string explain_unit(std::string_view text, std::string_view unit, std::string_view wanted) {
  std::string t = quoted(text);
  if (find_unit(kSizeUnits, unit)) return t + " is a size, not " + std::string(wanted);
  if (is_bit_size_symbol(unit)) return t + " is an amount of bits, not " + std::string(wanted);
  if (find_unit(kBandwidthUnits, unit)) return t + " is a bandwidth, not " + std::string(wanted);
  if (find_unit(kDurationUnits, unit)) return t + " is a duration, not " + std::string(wanted);
  if (find_unit_ignoring_case(kComputeRateUnits, unit))
    return t + " is a compute rate, not " + std::string(wanted);
  return t + " has an unknown unit '" + excerpt(unit) + "'";
}

}  // namespace

Parsed<Bytes> parse_size(std::string_view text) {
  auto p = parse_with<Bytes>(text, kSizeUnits, "a size", "25MB or 80GiB", /*allow_zero=*/true);
  if (p || !p.error.empty()) return p;
  std::string_view unit = split(text).unit;
  std::string message = explain_unit(text, unit, "a size");
  if (is_bit_size_symbol(unit))
    message += "; sizes are in bytes: write B, kB, MB, GB (powers of 1000) or KiB, MiB, GiB";
  else
    message +=
        "; a size takes B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)";
  return fail<Bytes>(message);
}

Parsed<BytesPerSecond> parse_bandwidth(std::string_view text) {
  auto p = parse_with<BytesPerSecond>(text, kBandwidthUnits, "a bandwidth", "10Gbps or 1.25GB/s",
                                      /*allow_zero=*/false);
  if (p || !p.error.empty()) return p;
  NumberAndUnit nu = split(text);
  std::string message = explain_unit(text, nu.unit, "a bandwidth");
  std::string number = std::string(trim(text).substr(0, trim(text).size() - nu.unit.size()));
  while (!number.empty() && number.back() == ' ') number.pop_back();
  if (find_unit(kSizeUnits, nu.unit) || is_bit_size_symbol(nu.unit))
    message += ": a rate needs '/s' or 'ps' (" + number + std::string(nu.unit) + "/s)";
  else
    message +=
        "; a bandwidth takes bits (bps, Mbps, Gbps, Gbit/s) or bytes (B/s, MB/s, GB/s, GiB/s)";
  return fail<BytesPerSecond>(message);
}

Parsed<Seconds> parse_duration(std::string_view text) {
  auto p =
      parse_with<Seconds>(text, kDurationUnits, "a duration", "15ms or 1us", /*allow_zero=*/true);
  if (p || !p.error.empty()) return p;
  return fail<Seconds>(explain_unit(text, split(text).unit, "a duration") +
                       "; a duration takes ns, us, ms, s, min, h or d");
}

Parsed<Seconds> parse_long_duration(std::string_view text) {
  // A GPU's MTBF runs to millions of hours; 1e10 s is three centuries.
  auto p = parse_with<Seconds>(text, kDurationUnits, "a duration", "50000h or 3d",
                               /*allow_zero=*/true, Range{0, 1e10, "up to 100000d"});
  if (p || !p.error.empty()) return p;
  return fail<Seconds>(explain_unit(text, split(text).unit, "a duration") +
                       "; a duration takes ns, us, ms, s, min, h or d");
}

Parsed<FlopsPerSecond> parse_compute_rate(std::string_view text) {
  NumberAndUnit nu = split(text);
  // FLOPS has no bit/byte ambiguity, so its case does not matter ("TFlops").
  if (nu.error.empty() && !nu.unit.empty()) {
    if (const Unit* u = find_unit_ignoring_case(kComputeRateUnits, nu.unit)) {
      if (nu.number <= 0)
        return fail<FlopsPerSecond>(quoted(text) + ": a compute rate must be positive");
      const double value = nu.number * u->factor;
      const Range range = range_of<FlopsPerSecond>();
      if (!std::isfinite(value) || value > range.max || value < range.min)
        return fail<FlopsPerSecond>(quoted(text) +
                                    " is outside the range hgsim accepts for a compute rate (" +
                                    range.text + ")");
      Parsed<FlopsPerSecond> p;
      p.value = FlopsPerSecond(value);
      return p;
    }
  }
  auto p =
      parse_with<FlopsPerSecond>(text, kComputeRateUnits, "a compute rate", "312TFLOPS", false);
  if (p || !p.error.empty()) return p;
  std::string message = explain_unit(text, nu.unit, "a compute rate");
  if (equals_ignoring_case(nu.unit.substr(nu.unit.size() > 4 ? nu.unit.size() - 4 : 0), "FLOP"))
    message += ": a rate needs 'S' or '/s' (TFLOPS, TFLOP/s)";
  else
    message += "; a compute rate takes FLOPS, GFLOPS, TFLOPS, PFLOPS (or FLOP/s)";
  return fail<FlopsPerSecond>(message);
}

Parsed<AnyQuantity> parse_quantity(std::string_view text) {
  const NumberAndUnit nu = split(text);
  Parsed<AnyQuantity> out;
  if (!nu.error.empty() || nu.unit.empty()) return out;
  auto take = [&](QuantityKind kind, auto parsed) {
    if (parsed)
      out.value = AnyQuantity{kind, parsed.value->value()};
    else
      out.error = parsed.error;
    return out;
  };
  if (find_unit(kSizeUnits, nu.unit)) return take(QuantityKind::size, parse_size(text));
  if (find_unit(kBandwidthUnits, nu.unit))
    return take(QuantityKind::bandwidth, parse_bandwidth(text));
  if (find_unit(kDurationUnits, nu.unit)) return take(QuantityKind::duration, parse_duration(text));
  if (find_unit_ignoring_case(kComputeRateUnits, nu.unit))
    return take(QuantityKind::compute_rate, parse_compute_rate(text));
  return out;
}

const char* quantity_kind_name(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::size:
      return "a size";
    case QuantityKind::duration:
      return "a duration";
    case QuantityKind::bandwidth:
      return "a bandwidth";
    case QuantityKind::compute_rate:
      return "a compute rate";
  }
  return "a quantity";
}

std::string shortest_decimal(double value) {
  std::array<char, 64> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  if (ec != std::errc()) return std::to_string(value);
  return std::string(buf.data(), end);
}

namespace {

bool is_integer_text(const std::string& s) {
  return s.find_first_of(".eE") == std::string::npos;
}

// Picks, among units that read back exactly, the text with an integer mantissa if any,
// then the shortest; ties keep the table's order.
template <class Q, std::size_t N, class ParseFn>
std::string format_with(Q q, const std::array<Unit, N>& units, std::size_t first_n, ParseFn parse) {
  std::string best;
  bool best_integer = false;
  for (std::size_t i = 0; i < first_n && i < N; ++i) {
    std::string text = shortest_decimal(q.value() / units[i].factor) + std::string(units[i].symbol);
    auto back = parse(text);
    if (!back || back.value->value() != q.value()) continue;
    bool integer = is_integer_text(text);
    bool better = best.empty() || (integer && !best_integer) ||
                  (integer == best_integer && text.size() < best.size());
    if (better) {
      best = text;
      best_integer = integer;
    }
  }
  return best;
}

}  // namespace

std::string format_size(Bytes size) {
  std::string s = format_with(size, kSizeUnits, 10, parse_size);  // TB ... B
  return s.empty() ? shortest_decimal(size.value()) + "B" : s;
}

std::string format_bandwidth(BytesPerSecond rate) {
  std::string s = format_with(rate, kBandwidthUnits, 14, parse_bandwidth);  // Tbps ... KiB/s
  return s.empty() ? shortest_decimal(rate.value()) + "B/s" : s;
}

std::string format_duration(Seconds time) {
  std::string s = format_with(time, kDurationUnits, 6, parse_duration);
  return s.empty() ? shortest_decimal(time.value()) + "s" : s;
}

std::string format_compute_rate(FlopsPerSecond rate) {
  std::string s = format_with(rate, kComputeRateUnits, 6, parse_compute_rate);
  return s.empty() ? shortest_decimal(rate.value()) + "FLOPS" : s;
}

namespace {

// Four significant digits, trailing zeros dropped: 1.2346, 12.35, 123.5, 1235.
std::string four_digits(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

template <std::size_t N>
std::string human_with(double value, const std::array<Unit, N>& ladder) {
  // `ladder` is ordered from the largest unit down; take the first with value >= 1.
  for (const Unit& u : ladder)
    if (std::abs(value) >= u.factor)
      return four_digits(value / u.factor) + " " + std::string(u.symbol);
  return four_digits(value / ladder.back().factor) + " " + std::string(ladder.back().symbol);
}

}  // namespace

std::string human_size(Bytes size) {
  constexpr std::array ladder{Unit{"TiB", 1099511627776.0}, Unit{"GiB", 1073741824.0},
                              Unit{"MiB", 1048576.0}, Unit{"KiB", 1024.0}, Unit{"B", 1.0}};
  return human_with(size.value(), ladder);
}

std::string human_bandwidth(BytesPerSecond rate) {
  constexpr std::array ladder{Unit{"Tbit/s", 1e12 / 8}, Unit{"Gbit/s", 1e9 / 8},
                              Unit{"Mbit/s", 1e6 / 8}, Unit{"kbit/s", 1e3 / 8},
                              Unit{"bit/s", 1.0 / 8}};
  return human_with(rate.value(), ladder);
}

std::string human_duration(Seconds time) {
  constexpr std::array ladder{Unit{"s", 1.0}, Unit{"ms", 1e-3}, Unit{"us", 1e-6}, Unit{"ns", 1e-9}};
  // Past a day in days (long runs: time to train), keeping the unit the parser reads.
  if (time.value() >= 86400) return four_digits(time.value() / 86400) + " d";
  if (time.value() >= 3600) return four_digits(time.value() / 3600) + " h";
  if (time.value() >= 60) return four_digits(time.value() / 60) + " min";
  return human_with(time.value(), ladder);
}

std::string human_compute_rate(FlopsPerSecond rate) {
  constexpr std::array ladder{Unit{"PFLOPS", 1e15}, Unit{"TFLOPS", 1e12}, Unit{"GFLOPS", 1e9},
                              Unit{"MFLOPS", 1e6}, Unit{"FLOPS", 1.0}};
  return human_with(rate.value(), ladder);
}

}  // namespace hgsim::core
