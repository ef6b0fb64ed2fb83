// Units: parsing, the bits/bytes boundary, refusals, exact round trips.
#include <random>
#include <type_traits>

#include <gtest/gtest.h>

#include "core/units.hpp"

using namespace hgsim::core;

namespace {

double bandwidth_of(const char* text) {
  auto p = parse_bandwidth(text);
  EXPECT_TRUE(p) << text << ": " << p.error;
  return p ? p.value->value() : -1;
}

double size_of(const char* text) {
  auto p = parse_size(text);
  EXPECT_TRUE(p) << text << ": " << p.error;
  return p ? p.value->value() : -1;
}

double duration_of(const char* text) {
  auto p = parse_duration(text);
  EXPECT_TRUE(p) << text << ": " << p.error;
  return p ? p.value->value() : -1;
}

}  // namespace

TEST(Units, BandwidthInBitsBecomesBytes) {
  EXPECT_DOUBLE_EQ(bandwidth_of("10Gbps"), 1.25e9);
  EXPECT_DOUBLE_EQ(bandwidth_of("10 Gbit/s"), 1.25e9);
  EXPECT_DOUBLE_EQ(bandwidth_of("100Mbit/s"), 12.5e6);
  EXPECT_DOUBLE_EQ(bandwidth_of("200Gb/s"), 25e9);
  EXPECT_DOUBLE_EQ(bandwidth_of("1Tbps"), 125e9);
}

TEST(Units, BandwidthInBytes) {
  EXPECT_DOUBLE_EQ(bandwidth_of("1.25GB/s"), 1.25e9);
  EXPECT_DOUBLE_EQ(bandwidth_of("300GB/s"), 300e9);
  EXPECT_DOUBLE_EQ(bandwidth_of("2GiB/s"), 2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(bandwidth_of("5GBps"), 5e9);
  // The same rate written in bits and in bytes is the same value.
  EXPECT_DOUBLE_EQ(bandwidth_of("10Gbps"), bandwidth_of("1.25GB/s"));
}

TEST(Units, SizesDecimalAndBinary) {
  EXPECT_DOUBLE_EQ(size_of("25MB"), 25e6);
  EXPECT_DOUBLE_EQ(size_of("80GiB"), 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(size_of("4 MiB"), 4.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(size_of("1kB"), 1000);
  EXPECT_DOUBLE_EQ(size_of("0B"), 0);
  EXPECT_DOUBLE_EQ(size_of("1.5e3B"), 1500);
}

TEST(Units, Durations) {
  EXPECT_DOUBLE_EQ(duration_of("15ms"), 0.015);
  EXPECT_DOUBLE_EQ(duration_of("1us"), 1e-6);
  EXPECT_DOUBLE_EQ(duration_of("1\xC2\xB5s"), 1e-6);
  EXPECT_DOUBLE_EQ(duration_of("2min"), 120);
  EXPECT_DOUBLE_EQ(duration_of("0s"), 0);
}

TEST(Units, ComputeRates) {
  auto p = parse_compute_rate("312TFLOPS");
  ASSERT_TRUE(p) << p.error;
  EXPECT_DOUBLE_EQ(p.value->value(), 312e12);
  EXPECT_DOUBLE_EQ(parse_compute_rate("989.4 TFLOP/s").value->value(), 989.4e12);
  EXPECT_DOUBLE_EQ(parse_compute_rate("1.2PFLOPS").value->value(), 1.2e15);
}

TEST(Units, BandwidthWithoutPerSecondIsRefused) {
  for (const char* text : {"10Gb", "10Gbit", "25MB", "1.25GB"}) {
    auto p = parse_bandwidth(text);
    EXPECT_FALSE(p) << text;
    EXPECT_NE(p.error.find("/s"), std::string::npos) << p.error;
  }
}

TEST(Units, SizeWhereRateExpectedAndViceVersa) {
  auto as_rate = parse_bandwidth("25MB");
  EXPECT_NE(as_rate.error.find("is a size"), std::string::npos) << as_rate.error;
  auto as_size = parse_size("10Gbps");
  EXPECT_NE(as_size.error.find("is a bandwidth"), std::string::npos) << as_size.error;
  auto bits_size = parse_size("10Gb");
  EXPECT_FALSE(bits_size);
  EXPECT_NE(bits_size.error.find("bytes"), std::string::npos) << bits_size.error;
  auto as_time = parse_duration("10GB");
  EXPECT_NE(as_time.error.find("is a size"), std::string::npos) << as_time.error;
  auto flop_count = parse_compute_rate("312TFLOP");
  EXPECT_FALSE(flop_count);
}

TEST(Units, MissingOrUnknownUnitsAndBadNumbers) {
  EXPECT_NE(parse_bandwidth("10").error.find("no unit"), std::string::npos);
  EXPECT_NE(parse_size("25").error.find("no unit"), std::string::npos);
  EXPECT_NE(parse_duration("15").error.find("no unit"), std::string::npos);
  EXPECT_NE(parse_bandwidth("10Gbsp").error.find("unknown unit"), std::string::npos);
  EXPECT_FALSE(parse_bandwidth("fast"));
  EXPECT_FALSE(parse_bandwidth(""));
  EXPECT_FALSE(parse_bandwidth("-10Gbps"));
  EXPECT_FALSE(parse_bandwidth("0Gbps"));  // a link with no bandwidth never delivers
  EXPECT_FALSE(parse_size("-1MB"));
  EXPECT_FALSE(parse_duration("-1ms"));
  EXPECT_FALSE(parse_bandwidth("1e999Gbps"));
}

TEST(Units, CaseMattersForBitsAndBytes) {
  // b is a bit and B a byte: 8 x apart.
  EXPECT_DOUBLE_EQ(bandwidth_of("8Gb/s") * 8, bandwidth_of("8GB/s"));
}

TEST(Units, DimensionsCombineOnlyMeaningfully) {
  Bytes size(1.25e9);
  BytesPerSecond rate = *parse_bandwidth("10Gbps").value;
  Seconds t = size / rate;
  EXPECT_DOUBLE_EQ(t.value(), 1.0);
  EXPECT_DOUBLE_EQ((rate * Seconds(2)).value(), 2.5e9);
  EXPECT_DOUBLE_EQ((Flops(312e12) / FlopsPerSecond(312e12)).value(), 1.0);
  // A size and a bandwidth cannot be added: there is no such operator.
  static_assert(!std::is_invocable_v<std::plus<>, Bytes, BytesPerSecond>);
  static_assert(!std::is_convertible_v<double, Bytes>);
}

TEST(Units, CanonicalFormatting) {
  EXPECT_EQ(format_bandwidth(*parse_bandwidth("10Gbps").value), "10Gbps");
  EXPECT_EQ(format_bandwidth(*parse_bandwidth("1.25GB/s").value), "10Gbps");
  EXPECT_EQ(format_bandwidth(*parse_bandwidth("300GB/s").value), "300GB/s");
  EXPECT_EQ(format_size(*parse_size("25MB").value), "25MB");
  EXPECT_EQ(format_size(*parse_size("80GiB").value), "80GiB");
  EXPECT_EQ(format_duration(*parse_duration("15ms").value), "15ms");
  EXPECT_EQ(format_duration(*parse_duration("1us").value), "1us");
  EXPECT_EQ(format_compute_rate(*parse_compute_rate("312TFLOPS").value), "312TFLOPS");
}

TEST(Units, FormattingRoundTripsExactlyOnRandomValues) {
  std::mt19937_64 rng(std::random_device{}());
  // Each quantity over the range the parser accepts (core/units.cpp: 1kbps to 1EB/s,
  // up to 24h, 1KFLOPS up): values outside it are refused, so they cannot round-trip.
  auto within = [&](double lo, double hi) {
    return std::pow(10.0,
                    std::uniform_real_distribution<double>(std::log10(lo), std::log10(hi))(rng));
  };
  for (int i = 0; i < 2000; ++i) {
    double v = within(1e-9, 1e15);
    EXPECT_EQ(parse_size(format_size(Bytes(v))).value->value(), v);
    v = within(1e3 / 8, 1e14);
    EXPECT_EQ(parse_bandwidth(format_bandwidth(BytesPerSecond(v))).value->value(), v);
    v = within(1e-9, 86400);
    EXPECT_EQ(parse_duration(format_duration(Seconds(v))).value->value(), v);
    v = within(1e3, 1e15);
    EXPECT_EQ(parse_compute_rate(format_compute_rate(FlopsPerSecond(v))).value->value(), v);
  }
}

TEST(Units, HumanText) {
  EXPECT_EQ(human_size(Bytes(80.0 * (1ull << 30))), "80 GiB");
  EXPECT_EQ(human_bandwidth(*parse_bandwidth("10Gbps").value), "10 Gbit/s");
  EXPECT_EQ(human_duration(Seconds(0.0153)), "15.3 ms");
  EXPECT_EQ(human_compute_rate(FlopsPerSecond(312e12)), "312 TFLOPS");
}

// The kind of a quantity comes from its unit, and its value is the kind's own parser's.
TEST(Units, AnyQuantityTakesItsKindFromItsUnit) {
  const struct {
    const char* text;
    QuantityKind kind;
    double value;
  } cases[] = {{"10Gbps", QuantityKind::bandwidth, 1.25e9},
               {"2GB/s", QuantityKind::bandwidth, 2e9},
               {"15ms", QuantityKind::duration, 0.015},
               {"80GiB", QuantityKind::size, 80.0 * (1ull << 30)},
               {"312TFLOPS", QuantityKind::compute_rate, 312e12}};
  for (const auto& c : cases) {
    const auto q = parse_quantity(c.text);
    ASSERT_TRUE(q) << c.text << ": " << q.error;
    EXPECT_EQ(q.value->kind, c.kind) << c.text;
    EXPECT_EQ(q.value->value, c.value) << c.text;
  }
  for (const char* none : {"5", "ok", "10Gx", ""}) {
    const auto q = parse_quantity(none);
    EXPECT_FALSE(q) << none;
    EXPECT_EQ(q.error, "") << none;
  }
  EXPECT_NE(parse_quantity("0Gbps").error.find("must be positive"), std::string::npos);
  EXPECT_STREQ(quantity_kind_name(QuantityKind::bandwidth), "a bandwidth");
}
