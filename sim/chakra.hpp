// hgsim's iterations as MLCommons Chakra execution traces, and Chakra traces simulated on a
// scenario's platform (docs/chakra.md). The wire format is chakra/et.hpp's.
//
// Export writes the execution graph as played, one file per GPU: compute as COMP_NODE,
// every transfer as a COMM_SEND_NODE on its sender and a COMM_RECV_NODE on its receiver
// (matched by comm_tag), the graph's joins as zero-duration COMP_NODEs on the ranks that
// need them, and each dependency as a data dependency on the rank where both ends live.
//
// Import reads one file per rank, places rank i on the i-th GPU of the scenario (clusters in
// order, GPUs in order inside each) and builds an execution graph: COMP_NODE durations from
// the trace, send/receive pairs as transfers on the real route, collectives lowered by
// sim/collectives.hpp onto the real links.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

// hgsim's own attributes, beside Chakra's (readers that do not know them skip them).
inline constexpr const char* kChakraSecondsAttr = "hgsim_duration_s";  // exact duration
inline constexpr const char* kChakraDelayAttr = "hgsim_delay";     // time without the GPU's compute
inline constexpr const char* kChakraWorkAttr = "hgsim_work";       // forward, dp_comm, ...
inline constexpr const char* kChakraGroupAttr = "involved_ranks";  // a collective's ranks

struct ChakraExportStats {
  int ranks = 0;
  std::uint64_t nodes = 0;  // Chakra nodes, all ranks
  std::uint64_t bytes = 0;  // all files
  // Dependencies between two GPUs that no transfer carries (not expressible per rank).
  std::uint64_t dropped_dependencies = 0;
};

// Writes `graph` (finished; full fidelity: one device per GPU) as <prefix>.<rank>.et, rank =
// device index. Throws std::runtime_error naming the file when one cannot be written.
ChakraExportStats export_chakra(const Graph& graph, const Platform& platform,
                                const std::string& prefix);

struct ChakraImport {
  Graph graph;
  int ranks = 0;
  std::uint64_t nodes = 0;
  std::uint64_t collectives = 0;  // per rank, each lowered once
  std::uint64_t transfers = 0;    // send/receive pairs
};

// Reads <prefix>.0.et, <prefix>.1.et, ... (until one is missing) and builds the graph on
// `platform`, whose devices are the ranks. Errors name the file, the node id and what is
// wrong: a damaged or truncated file, an unknown node type or collective, a dependency on a
// node that does not exist, a send without its receive, a rank count that is not the
// platform's, a trace over the limits. A dependency cycle is reported by Graph::check.
ChakraImport import_chakra(const std::string& prefix, const Platform& platform,
                           core::GradSyncAlgorithm algorithm,
                           const chakra::ReadLimits& limits = {});

// How many <prefix>.<rank>.et files there are, from rank 0 on.
int chakra_rank_count(const std::string& prefix);

// A Chakra trace simulated on `scenario`'s clusters and WAN: the first `ranks` GPUs of the
// scenario, every GPU one rank. Runs in a child process (SimGrid: one engine a process).
// Problems go to `diags`; the JSON holds iteration_time_s, ranks, nodes, per-rank busy times.
std::optional<core::Json> simulate_chakra(const core::Scenario& scenario, const std::string& prefix,
                                          core::Diagnostics& diags);

}  // namespace hgsim::sim
