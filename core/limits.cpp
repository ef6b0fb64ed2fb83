#include "core/limits.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>


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

template <class T>
void override_from(const char* name, T& value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 9.0e18) {
    std::cerr << "hgsim: warning: ignoring " << name << "='" << text
              << "': expected a positive number\n";
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

std::string limit_hint(const char* variable, double limit) {
  char figure[32];
  std::snprintf(figure, sizeof figure, "%.15g", limit);
  return std::string("the limit is ") + figure + "; set " + variable +
         " to raise it (README: Limits)";
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
