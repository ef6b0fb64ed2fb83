#include "core/limits.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include "core/text.hpp"

namespace hgsim::core {

Limits default_limits() {
  Limits l{};
  // 64 MiB: the largest shipped input (a 3 072-GPU plan) is under 100 kB; a trace of a
  // million rows is about 20 MB.
  l.input_bytes = std::int64_t{64} << 20;
  // A scenario is a few hundred values, a plan of 3 072 GPUs a few thousand. 200 000
  // values take about 40 MB as a tree: YAML aliases that expand beyond that are a bomb
  // (320 bytes of nested aliases expand to 10^9 values).
  l.document_nodes = 200'000;
  // The scenario language nests 5 deep (strategy.pipelines[i].stages[j].cluster).
  l.document_depth = 64;
  // 100 000 GPUs: three times the largest scale scenario's 3 072 x 10.
  l.gpus = 100'000;
  // About 120 bytes a node with its edges (sim/graph.hpp); 50 M nodes is ~6 GB.
  l.graph_nodes = 50'000'000;
  l.memory_bytes = 16.0 * (1ull << 30);
  l.sweep_points = 10'000;
  l.trace_rows = 1'000'000;
  // 1 ms: the finest step a WAN measurement tool reports (iperf3 intervals are >= 0.1 s).
  l.trace_min_step_s = 1e-3;
  // 2^28 elements (1 GiB as fp32) decoded from one buffer: 40x a 25 MB gradient bucket,
  // the largest the live runner sends.
  l.codec_elements = std::int64_t{1} << 28;
  return l;
}

namespace {

// What each variable may be set to. Past these bounds a limit stops protecting anything
// (or breaks what it protects), so a value outside them is ignored like a value that is
// not a number.
struct Range {
  const char* variable;
  double low;
  double high;
  bool whole;  // counts and bytes: a whole number
};

constexpr double kTiB = 1099511627776.0;  // 2^40

constexpr Range kRanges[] = {
    // An input file is read into memory whole: 1 TiB is past any machine hgsim runs on.
    {"HGSIM_MAX_INPUT_BYTES", 1, kTiB, true},
    // 10^9 values: ~200 GB as a tree.
    {"HGSIM_MAX_DOCUMENT_NODES", 1, 1e9, true},
    // The readers recurse once a level. Measured (`ulimit -s`, a JSON scenario whose sweep
    // axis holds one list nested N deep, the deepest path: read, expanded, converted, freed):
    // about 300 bytes of stack a level, so 5 000 levels take 1.5 MB of the default 8 MB
    // stack, and 230 MB of memory (each open level keeps its key path: quadratic). YAML
    // stops sooner on its own: yaml-cpp refuses past 500 levels (kYamlReaderDepth).
    {"HGSIM_MAX_DOCUMENT_DEPTH", 1, kMaxDocumentDepth, true},
    // 10^9 GPUs: a scenario's counts multiply in 63 bits, the simulator's hosts in 32.
    {"HGSIM_MAX_GPUS", 1, 1e9, true},
    // Node ids and edge offsets are 32-bit (sim/graph.hpp); 10^9 nodes is ~120 GB.
    {"HGSIM_MAX_GRAPH_NODES", 1, 1e9, true},
    // Below 64 MiB SimGrid's own start-up allocations can fail, and it aborts instead of
    // reporting (it needs about 0.5 MB on top of the process; 64 MiB is 100x that). 1 PiB
    // is past any machine.
    {"HGSIM_MAX_MEMORY_BYTES", 64.0 * (1 << 20), 1024 * kTiB, true},
    {"HGSIM_MAX_SWEEP_POINTS", 1, 1e9, true},
    {"HGSIM_MAX_TRACE_ROWS", 1, 1e9, true},
    // From 1 ns to a day (the longest duration a scenario may state).
    {"HGSIM_MIN_TRACE_STEP_S", 1e-9, 86400, false},
    // 2^40: the most an encoded buffer's header may claim (compress/codec.cpp).
    {"HGSIM_MAX_CODEC_ELEMENTS", 1, kTiB, true},
};

const Range* range_of(std::string_view variable) {
  for (const Range& r : kRanges)
    if (variable == r.variable) return &r;
  return nullptr;
}

std::string figure(double v) {
  char text[32];
  if (v == std::floor(v) && std::fabs(v) < 1e18)
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(v));
  else
    std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

std::string range_text(const Range& r) {
  return std::string(r.whole ? "a whole number" : "a number") + " from " + figure(r.low) + " to " +
         figure(r.high);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// `text` read as the variable's range says, or why not. Spaces around the number are
// ignored (a value from `$(cat file)` ends in a newline); only decimal notation is read
// ("1e9" and "1000000000" alike; "0x10", "inf" and "nan" are not numbers here).
std::optional<std::string> refusal(std::string_view text, const Range& r, double& value) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  const bool decimal =
      !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string_view::npos;
  const std::string number(text);
  char* end = nullptr;
  const double v = decimal ? std::strtod(number.c_str(), &end) : 0;
  if (!decimal || end != number.c_str() + number.size()) return "not a number";
  if (!std::isfinite(v) || v > r.high) return "too large";
  if (v <= 0) return "not positive";
  if (r.whole && v != std::floor(v)) return "not a whole number";
  if (v < r.low) return "too small";
  value = v;
  return std::nullopt;
}

template <class T>
void override_from(const char* name, T& value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  const Range& r = *range_of(name);
  double v = 0;
  if (const auto why = refusal(text, r, v)) {
    std::cerr << "hgsim: warning: ignoring " << name << "='" << excerpt(text) << "': " << *why
              << "; expected " << range_text(r) << "; the default " << figure(double(value))
              << " stays\n";
    return;
  }
  value = static_cast<T>(v);
}

Limits from_environment() {
  Limits l = default_limits();
  override_from("HGSIM_MAX_INPUT_BYTES", l.input_bytes);
  override_from("HGSIM_MAX_DOCUMENT_NODES", l.document_nodes);
  override_from("HGSIM_MAX_DOCUMENT_DEPTH", l.document_depth);
  override_from("HGSIM_MAX_GPUS", l.gpus);
  override_from("HGSIM_MAX_GRAPH_NODES", l.graph_nodes);
  override_from("HGSIM_MAX_MEMORY_BYTES", l.memory_bytes);
  override_from("HGSIM_MAX_SWEEP_POINTS", l.sweep_points);
  override_from("HGSIM_MAX_TRACE_ROWS", l.trace_rows);
  override_from("HGSIM_MIN_TRACE_STEP_S", l.trace_min_step_s);
  override_from("HGSIM_MAX_CODEC_ELEMENTS", l.codec_elements);
  return l;
}

}  // namespace

const Limits& limits() {
  static const Limits l = from_environment();
  return l;
}

std::vector<LimitVariable> limit_variables() {
  const Limits d = default_limits();
  return {
      {"HGSIM_MAX_INPUT_BYTES", "bytes of one input file (scenario, plan, trace, profile)",
       static_cast<double>(d.input_bytes)},
      {"HGSIM_MAX_DOCUMENT_NODES", "values of one document after YAML aliases expand",
       static_cast<double>(d.document_nodes)},
      {"HGSIM_MAX_DOCUMENT_DEPTH", "nesting of lists and mappings",
       static_cast<double>(d.document_depth)},
      {"HGSIM_MAX_GPUS", "GPUs of a scenario, all clusters", static_cast<double>(d.gpus)},
      {"HGSIM_MAX_GRAPH_NODES", "nodes of one execution graph", static_cast<double>(d.graph_nodes)},
      {"HGSIM_MAX_MEMORY_BYTES", "bytes one simulation (or hgsim codecs) may allocate",
       d.memory_bytes},
      {"HGSIM_MAX_SWEEP_POINTS", "points of one sweep grid", static_cast<double>(d.sweep_points)},
      {"HGSIM_MAX_TRACE_ROWS", "rows of one bandwidth trace", static_cast<double>(d.trace_rows)},
      {"HGSIM_MIN_TRACE_STEP_S", "shortest step between two trace rows, in seconds",
       d.trace_min_step_s},
      {"HGSIM_MAX_CODEC_ELEMENTS", "elements one encoded codec buffer may claim",
       static_cast<double>(d.codec_elements)},
  };
}

std::optional<std::string> limit_refusal(const char* variable, std::string_view text) {
  const Range* r = range_of(variable);
  if (r == nullptr) return "no such limit";
  double v = 0;
  if (const auto why = refusal(text, *r, v)) return *why + "; expected " + range_text(*r);
  return std::nullopt;
}

std::string limit_hint(const char* variable, double limit) {
  const Range* r = range_of(variable);
  if (r != nullptr && limit >= r->high)
    return "the limit is " + figure(limit) + ", the most " + variable + " may be (docs/limits.md)";
  return "the limit is " + figure(limit) + "; set " + variable + " to raise it (docs/limits.md)";
}

std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace hgsim::core
