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
#include <functional>
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
inline constexpr const char* kChakraBytesAttr = "hgsim_bytes";     // a collective's tensor
inline constexpr const char* kChakraLoweringAttr = "hgsim_lowering";  // ring, channel, ...

struct ChakraExportStats {
  int ranks = 0;
  std::uint64_t nodes = 0;        // Chakra nodes, all ranks
  std::uint64_t bytes = 0;        // all files
  std::uint64_t collectives = 0;  // each written once per member
  // Dependencies between two GPUs that no transfer carries (not expressible per rank).
  std::uint64_t dropped_dependencies = 0;
};

// Writes `graph` (finished; full fidelity: one device per GPU) as <prefix>.<rank>.et, rank =
// device index. Throws std::runtime_error naming the file when one cannot be written.
ChakraExportStats export_chakra(const Graph& graph, const Platform& platform,
                                const std::string& prefix);
// The communicator groups export writes beside the trace, for ASTRA-sim's
// --comm-group-configuration: "<prefix>.comm_groups.json".
std::string chakra_comm_groups_path(const std::string& prefix);

// How an imported trace is lowered and priced.
struct ChakraImportOptions {
  // A collective without hgsim_lowering: an all-reduce inside one cluster by this algorithm
  // (hierarchical across clusters), the others as rings, a broadcast as a tree.
  core::GradSyncAlgorithm algorithm = core::GradSyncAlgorithm::ring;
  core::CollectiveGranularity granularity = core::CollectiveGranularity::steps;
  // --reprice: a COMP_NODE that carries num_ops is priced by hgsim's compute model on its
  // rank's GPU (`price`: FLOPs, bytes -> seconds) instead of its duration.
  std::function<double(int rank, double flops, double bytes)> price;
};

struct ChakraImport {
  Graph graph;
  int ranks = 0;
  std::uint64_t nodes = 0;
  std::uint64_t collectives = 0;  // per rank, each lowered once
  std::uint64_t transfers = 0;    // send/receive pairs
  std::uint64_t repriced = 0;     // COMP_NODEs priced by the compute model (--reprice)
};

// Reads <prefix>.0.et, <prefix>.1.et, ... (until one is missing) and builds the graph on
// `platform`, whose devices are the ranks. Errors name the file, the node id and what is
// wrong: a damaged or truncated file, an unknown node type or collective, a dependency on a
// node that does not exist, a send without its receive, a rank count that is not the
// platform's, a trace over the limits. A dependency cycle is reported by Graph::check.
ChakraImport import_chakra(const std::string& prefix, const Platform& platform,
                           const ChakraImportOptions& options,
                           const chakra::ReadLimits& limits = {});

// How many <prefix>.<rank>.et files there are, from rank 0 on.
int chakra_rank_count(const std::string& prefix);

// A Chakra trace simulated on `scenario`'s clusters and WAN: the first `ranks` GPUs of the
// scenario, every GPU one rank. Runs in a child process (SimGrid: one engine a process).
// Problems go to `diags`; the JSON holds iteration_time_s, ranks, nodes, per-rank busy times.
// With `reprice`, COMP_NODEs that carry num_ops are priced by hgsim's kernel model
// (kernels::KernelModel::roofline_time on the rank's GPU, the scenario's precision) instead
// of their durations.
std::optional<core::Json> simulate_chakra(const core::Scenario& scenario, const std::string& prefix,
                                          core::Diagnostics& diags, bool reprice = false);

}  // namespace hgsim::sim
