// The limits that keep hostile or mistaken input from exhausting hgsim, in one place.
//
// Each limit has a default sized well above every shipped scenario and an override: the
// environment variable named beside it (limit_variables(); docs/limits.md explains each). A check
// that hits a limit reports the figure, the limit and the override, like any other input error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hgsim::core {

struct Limits {
  std::int64_t input_bytes;     // HGSIM_MAX_INPUT_BYTES: one scenario, plan, trace or profile
  std::int64_t document_nodes;  // HGSIM_MAX_DOCUMENT_NODES: values after YAML aliases expand
  int document_depth;           // HGSIM_MAX_DOCUMENT_DEPTH: nesting of lists and mappings
  std::int64_t gpus;            // HGSIM_MAX_GPUS: GPUs of a scenario, all clusters
  std::int64_t graph_nodes;     // HGSIM_MAX_GRAPH_NODES: nodes of one execution graph
  double memory_bytes;          // HGSIM_MAX_MEMORY_BYTES: what one simulation may allocate
  std::int64_t sweep_points;    // HGSIM_MAX_SWEEP_POINTS: points of one sweep grid
  std::int64_t trace_rows;      // HGSIM_MAX_TRACE_ROWS: rows of one bandwidth trace
  double trace_min_step_s;      // HGSIM_MIN_TRACE_STEP_S: shortest time between trace rows
  std::int64_t codec_elements;  // HGSIM_MAX_CODEC_ELEMENTS: elements one encoded buffer holds
};

// The most HGSIM_MAX_DOCUMENT_DEPTH may be: what the readers' recursion takes on the
// default 8 MB stack with a wide margin (measured in core/limits.cpp).
constexpr int kMaxDocumentDepth = 5000;

// The limits in force: the defaults, with every HGSIM_MAX_* / HGSIM_MIN_* variable that
// is set applied (read once). Each variable has a range (a whole number from 1 to 10^9 for
// most counts; limit_refusal); a value outside it, or not a number, is ignored with one
// warning on stderr naming the variable, the value, why and the range.
const Limits& limits();
Limits default_limits();

// One limit's variable, what it bounds and its default, as a reader is told it (hgsim(1)).
struct LimitVariable {
  const char* name;
  const char* meaning;
  double default_value;
};

// Every HGSIM_MAX_* / HGSIM_MIN_* variable, in the order of Limits.
std::vector<LimitVariable> limit_variables();

// Why `text` is not a value `variable` may be set to ("too large; expected a whole number
// from 1 to 5000"), or nullopt when it is one: the rule limits() applies.
std::optional<std::string> limit_refusal(const char* variable, std::string_view text);

// The hint every limit error ends with: "the limit is N; set NAME to raise it", or, at the
// most NAME may be, "the limit is N, the most NAME may be".
std::string limit_hint(const char* variable, double limit);

// Checked arithmetic for counts that multiply (GPUs, micro-batches, replicas): nullopt
// when the exact result does not fit in 63 bits.
std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b);
std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b);

}  // namespace hgsim::core
