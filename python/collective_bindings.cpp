// The simulator's price of one NCCL collective on a cluster described in a few figures, for
// validation/kernel_collectives.py: the closed forms every fidelity and the planner use
// (sim/collectives.hpp), never a Python copy of them.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "core/text.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"
#include "python/bindings.hpp"
#include "sim/collectives.hpp"
#include "sim/trace.hpp"

namespace hgsim::python {
namespace {

template <class Parsed>
auto checked(const Parsed& parsed, const char* what, const std::string& text) {
  if (!parsed)
    throw Error(std::string("collective_time: ") + what + " '" + core::excerpt(text) +
                "': " + parsed.error);
  return *parsed.value;
}

double collective_time(
    const std::string& kind, const std::string& gpu, int ranks, int ranks_per_node, double bytes,
    const std::optional<std::string>& nvlink_bandwidth, const std::string& nvlink_latency,
    const std::string& nic_bandwidth, const std::string& nic_latency, int nics_per_node,
    std::optional<double> nvlink_efficiency, std::optional<double> nccl_fixed_cost_2_ranks,
    std::optional<double> nccl_fixed_cost_8_ranks, std::optional<double> nccl_latency_scale,
    std::optional<double> nccl_send_recv_fixed_cost) {
  const kernels::GpuSpec* spec = kernels::find_gpu(gpu);
  if (spec == nullptr)
    throw Error("collective_time: gpu '" + core::excerpt(gpu) +
                "' is not in the catalog (hgsim gpus lists it)");
  if (ranks < 1 || ranks_per_node < 1 || ranks % ranks_per_node != 0)
    throw Error("collective_time: ranks (" + std::to_string(ranks) +
                ") must be a positive multiple of ranks_per_node (" +
                std::to_string(ranks_per_node) + ")");
  if (!(bytes >= 0)) throw Error("collective_time: bytes must be at least 0");
  if (nics_per_node < 0 || nics_per_node > ranks_per_node)
    throw Error("collective_time: nics_per_node (" + std::to_string(nics_per_node) +
                ") must be 0 (one NIC per GPU) or 1 to ranks_per_node (" +
                std::to_string(ranks_per_node) + ")");
  core::Cluster c;
  c.name = "collective";
  c.gpu = spec->name;
  c.nodes = ranks / ranks_per_node;
  c.gpus_per_node = ranks_per_node;
  if (nvlink_bandwidth) {
    c.nvlink.bandwidth =
        checked(core::parse_bandwidth(*nvlink_bandwidth), "nvlink_bandwidth", *nvlink_bandwidth);
  } else if (auto nvlink = spec->nvlink_bandwidth_per_direction()) {
    c.nvlink.bandwidth = *nvlink;
  } else {
    throw Error("collective_time: " + spec->name +
                " has no NVLink in the catalog; give nvlink_bandwidth (its PCIe rate)");
  }
  c.nvlink.latency =
      checked(core::parse_duration(nvlink_latency), "nvlink_latency", nvlink_latency);
  c.nic.bandwidth = checked(core::parse_bandwidth(nic_bandwidth), "nic_bandwidth", nic_bandwidth);
  c.nic.latency = checked(core::parse_duration(nic_latency), "nic_latency", nic_latency);
  // Fewer NICs than GPUs: the node's GPUs share its NICs (core::Cluster::nic_share).
  c.nics_per_node = nics_per_node;
  // The figures a fit varies (validation/kernel_collectives.py --fit), as a user's
  // calibration would set them.
  c.calibration.nvlink_efficiency = nvlink_efficiency;
  if (nccl_fixed_cost_2_ranks)
    c.calibration.nccl_fixed_cost_2_ranks = core::Seconds(*nccl_fixed_cost_2_ranks);
  if (nccl_fixed_cost_8_ranks)
    c.calibration.nccl_fixed_cost_8_ranks = core::Seconds(*nccl_fixed_cost_8_ranks);
  c.calibration.nccl_latency_scale = nccl_latency_scale;
  if (nccl_send_recv_fixed_cost)
    c.calibration.nccl_send_recv_fixed_cost = core::Seconds(*nccl_send_recv_fixed_cost);
  // A pipeline transfer between two GPUs (sim::send_recv_time).
  if (kind == "send_recv") return sim::send_recv_time(c, c.nodes == 1, bytes);
  const sim::ChannelRing ring = sim::channel_ring(std::vector<int>(c.nodes, ranks_per_node));
  if (kind == "all_reduce")
    return sim::channel_ring_time(c, ring, bytes, sim::RingKind::all_reduce);
  if (kind == "reduce_scatter")
    return sim::channel_ring_time(c, ring, bytes, sim::RingKind::reduce_scatter);
  if (kind == "all_gather")
    return sim::channel_ring_time(c, ring, bytes, sim::RingKind::all_gather);
  throw Error("collective_time: kind '" + core::excerpt(kind) +
              "' is not all_reduce, reduce_scatter, all_gather or send_recv");
}

}  // namespace

void bind_collectives(py::module_& m) {
  // The trace's lane rule (sim::TrackLanes), for the live runner's Chrome trace
  // (runtime/hgsim_runtime/trace.py), so that both traces lay overlapping slices out alike.
  m.def(
      "trace_lanes",
      [](const std::vector<std::pair<int, int>>& tracks, const std::vector<double>& starts,
         const std::vector<double>& ends) {
        if (tracks.size() != starts.size() || tracks.size() != ends.size())
          throw Error("trace_lanes: tracks, starts and ends need one entry per slice");
        sim::TrackLanes lanes;
        std::vector<std::pair<std::size_t, bool>> out;
        out.reserve(tracks.size());
        for (std::size_t i = 0; i < tracks.size(); ++i) {
          if (!std::isfinite(starts[i]) || !std::isfinite(ends[i]) || ends[i] < starts[i])
            throw Error("trace_lanes: slice " + std::to_string(i) +
                        " needs finite times with its end at or after its start");
          bool opened = false;
          const std::size_t lane =
              lanes.place(tracks[i].first, tracks[i].second, starts[i], ends[i], opened);
          out.emplace_back(lane, opened);
        }
        return out;
      },
      py::arg("tracks"), py::arg("starts"), py::arg("ends"),
      "(lane, opened) of each slice (tracks: (pid, tid) pairs), the slices given in order of "
      "their starts: the first lane of its track whose last slice ends by its start, a new one "
      "(opened) when none does (sim::TrackLanes).");
  m.def("lane_thread", &sim::lane_thread, py::arg("tid"), py::arg("lane"),
        "The thread of lane `lane` of track `tid`: tid + lane x 2^20 (sim::lane_thread).");
  m.def("lane_name", &sim::lane_name, py::arg("track_name"), py::arg("lane"),
        "The name of lane `lane` of a track: '<track> (lane k+1)' past the first "
        "(sim::lane_name).");
  // The hierarchical all-reduce's lane rule, for the live runner (runtime/hgsim_runtime/comm.py
  // and outer.py move the bytes as the simulator does).
  m.def(
      "hierarchical_lanes",
      [](const std::vector<int>& sizes) {
        if (sizes.empty() || *std::min_element(sizes.begin(), sizes.end()) < 1)
          throw Error("hierarchical_lanes: every cluster needs at least one member");
        return sim::hierarchical_lanes(sizes);
      },
      py::arg("sizes"),
      "Lanes of an all-reduce across clusters of these member counts: one per member of the "
      "largest cluster (sim::hierarchical_lanes).");
  m.def(
      "hierarchical_lane_member",
      [](int lane, int lanes, int size) {
        if (lanes < 1 || size < 1 || lane < 0 || lane >= lanes)
          throw Error("hierarchical_lane_member: needs 0 <= lane < lanes and size >= 1");
        return sim::hierarchical_lane_member(lane, lanes, size);
      },
      py::arg("lane"), py::arg("lanes"), py::arg("size"),
      "The member (index in its cluster of `size`) that carries lane `lane` of `lanes`: "
      "floor(lane x size / lanes) (sim::hierarchical_lane_member).");
  m.def("collective_time", &collective_time, py::arg("kind"), py::arg("gpu"), py::arg("ranks"),
        py::arg("ranks_per_node"), py::arg("bytes"), py::kw_only(),
        py::arg("nvlink_bandwidth") = py::none(), py::arg("nvlink_latency") = "1us",
        py::arg("nic_bandwidth") = "200Gbps", py::arg("nic_latency") = "2us",
        py::arg("nics_per_node") = 0, py::arg("nvlink_efficiency") = py::none(),
        py::arg("nccl_fixed_cost_2_ranks") = py::none(),
        py::arg("nccl_fixed_cost_8_ranks") = py::none(), py::arg("nccl_latency_scale") = py::none(),
        py::arg("nccl_send_recv_fixed_cost") = py::none(),
        "Seconds the simulator (every fidelity) and the planner give one NCCL collective of "
        "`bytes` (the all-reduce's input, the all-gather's output) over `ranks` GPUs of a cluster "
        "of `gpu` with `ranks_per_node` a node: kind all_reduce, reduce_scatter, all_gather (the "
        "channel rings of sim/collectives.hpp and NCCL's fixed cost) or send_recv (one transfer "
        "between two GPUs). nvlink_bandwidth defaults to the catalog's rate a direction; "
        "nics_per_node 0 gives every "
        "GPU its own NIC, k > 0 lets the node's GPUs share k NICs of nic_bandwidth. "
        "nvlink_efficiency, nccl_fixed_cost_2_ranks, nccl_fixed_cost_8_ranks, "
        "nccl_send_recv_fixed_cost (seconds) and nccl_latency_scale replace "
        "kernels/kernel_costs.yaml's and kernels/nccl_costs.yaml's "
        "figures, as clusters[].calibration does.");
}

}  // namespace hgsim::python
