// The platform: the simulated hardware of a scenario, described in plain data first
// (devices, links, routes) and then built into SimGrid or written as SimGrid's platform XML.
//
// Topology (every bandwidth per direction, as the scenario writes it):
//
//   GPU --nvlink--> NVSwitch <--nvlink-- GPU            inside a node (one NVLink port per GPU)
//   GPU --nic--> [node uplink] --> fabric --> [node uplink] --nic--> GPU   inside a cluster
//   GPU --nic--> [uplink] --> cluster gateway --wan--> ... --wan--> gateway --> [uplink] --nic-->
//   GPU
//
// NVLink and NIC ports are split-duplex (each direction its own capacity). The fabric is
// non-blocking; with `oversubscription: k > 1`, or `nics_per_node` below gpus_per_node, each
// node's traffic in and out of the fabric also crosses a node uplink of nics * nic / k. WAN links are one shared link per
// direction (asymmetric bandwidth allowed), routed along the path of least latency. A flow
// crossing the WAN is a TCP flow: it cannot exceed window / round-trip time, modelled by a
// fat-pipe link (no sharing, a per-flow cap) on every inter-cluster route.
//
// A device is one GPU (full fidelity) or a folded device standing for `gpus` identical
// GPUs (folded fidelity): its ports have `gpus` times the bandwidth of one GPU's, so that
// the summed traffic of the GPUs it stands for takes the time theirs takes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "kernels/gpu_catalog.hpp"

namespace hgsim::sim {

// Host speed in the SimGrid platform (built and exported): one flop is a picosecond of GPU
// time.
constexpr double flops_per_second = 1e12;

enum class LinkKind { nvlink, nic, uplink, fabric, wan, tcp_window };
std::string to_string(LinkKind kind);

struct Link {
  std::string name;
  LinkKind kind = LinkKind::nic;
  double bytes_per_s = 0;  // per direction for split-duplex links
  double latency_s = 0;
  bool split_duplex = false;  // NVLink, NIC and uplink ports
  // Bandwidth over time (WAN links with a trace): (time_s, bytes_per_s) steps, repeating
  // with period `trace_period_s` (0: the last step holds forever).
  std::vector<std::pair<double, double>> trace;
  double trace_period_s = 0;
};

struct Hop {
  int link = 0;
  bool up = true;  // direction on a split-duplex link: up = out of the device or node
};

// One TCP flow's cap: at most one window of unacknowledged bytes per round trip. The
// simulator's per-route cap links and the results' window advice both use it.
inline double tcp_flow_cap(double window_bytes, double round_trip_s) {
  return window_bytes / round_trip_s;
}

// The TCP side of the route between two clusters' gateways. Every flow on it is capped at
// tcp_flow_cap(window_bytes, round_trip_s) by the route's own cap link, whatever links it
// shares with other routes: a flow from a to c via b has the RTT of the whole route a-b-c.
struct WanRouteTcp {
  double window_bytes = 0;        // the smallest window along the route's WAN links
  double round_trip_s = 0;        // twice the one-way latency: the WAN path and both NIC hops
  int cap_link = -1;              // the route's fat-pipe link (LinkKind::tcp_window)
  std::vector<int> wan_links;     // the route's WAN links, in order
  std::vector<int> scenario_wan;  // for each, its index in the scenario's wan[]
  std::vector<double> windows;    // for each, its window (tcp_window, else the default)
  double flow_cap() const { return tcp_flow_cap(window_bytes, round_trip_s); }
};

struct Device {
  std::string name;  // "beijing/n0/g3"; folded: "beijing/n0/g0+15"
  int cluster = 0;
  int node = 0;   // index into Platform::nodes
  int first_gpu;  // index of its first GPU inside the cluster (node * gpus_per_node + local)
  int gpus = 1;   // GPUs it stands for (1 at full fidelity)
  int nvlink = -1;
  int nic = -1;
};

struct Node {
  int cluster = 0;
  int index = 0;  // node number inside the cluster
  std::vector<int> devices;
  int uplink = -1;  // -1: non-blocking fabric
};

struct ClusterInfo {
  const core::Cluster* spec = nullptr;
  const kernels::GpuSpec* gpu = nullptr;
  std::vector<int> nodes;  // indices into Platform::nodes, in node order
  // A fat pipe standing for the non-blocking fabric between nodes (SimGrid forbids empty
  // routes); it never limits a flow and is left out of route() and the results.
  int fabric = -1;
};

// What a device of the platform is asked to be: a GPU (or a folded set of GPUs) at a
// position of a cluster. The workload generator decides placement.
struct DeviceRequest {
  int cluster = 0;
  int first_gpu = 0;  // position inside the cluster; node = first_gpu / gpus_per_node
  int gpus = 1;
};

class Platform {
 public:
  std::vector<ClusterInfo> clusters;
  std::vector<Node> nodes;
  std::vector<Device> devices;
  std::vector<Link> links;
  // wan_routes[a][b]: the hops from cluster a's gateway to cluster b's (WAN links and the
  // TCP-window cap); empty if a == b. connected[a][b] false when no WAN path exists.
  std::vector<std::vector<std::vector<Hop>>> wan_routes;
  std::vector<std::vector<bool>> connected;
  // wan_tcp[a][b]: the TCP side of wan_routes[a][b] (cap_link -1 when a == b or unjoined).
  std::vector<std::vector<WanRouteTcp>> wan_tcp;
  core::NetworkModel network_model = core::NetworkModel::flow;

  // Every link a transfer from device `src` to device `dst` crosses, in order.
  std::vector<Hop> route(int src, int dst) const;
  // Calls `visit(hop)` for each hop of route(src, dst), in order, without building the list
  // (the results walk the route of every one of millions of transfers).
  template <class Visit>
  void for_each_hop(int src, int dst, Visit&& visit) const {
    if (src == dst) return;
    const Device& a = devices[src];
    const Device& b = devices[dst];
    if (a.node == b.node) {
      visit(Hop{a.nvlink, true});
      visit(Hop{b.nvlink, false});
      return;
    }
    visit(Hop{a.nic, true});
    if (nodes[a.node].uplink >= 0) visit(Hop{nodes[a.node].uplink, true});
    if (a.cluster != b.cluster)
      for (const Hop& h : wan_routes[a.cluster][b.cluster]) visit(h);
    if (nodes[b.node].uplink >= 0) visit(Hop{nodes[b.node].uplink, false});
    visit(Hop{b.nic, false});
  }
  // One-way latency and the narrowest bandwidth along route(src, dst).
  double route_latency(int src, int dst) const;
  double route_bandwidth(int src, int dst) const;
  bool crosses_wan(int src, int dst) const { return devices[src].cluster != devices[dst].cluster; }
  // The TCP-window cap of one flow between two clusters (infinity within a cluster).
  double flow_cap(int src, int dst) const;
  int device_count() const { return static_cast<int>(devices.size()); }
};

// The TCP flows a transfer from device `src` to device `dst` runs as, when it stands for
// `flows` parallel flows (folded fidelity: one per replica and reshard piece of a stage
// boundary, one per lane and ring of a hierarchical sync; full fidelity: 1). Across the WAN
// every one of them, each under its own window cap (tcp_flow_cap): so a folded transfer gets
// the rate its flows get at full fidelity, where each is a transfer of its own, and the rate
// the analytic model gives it (flows x flow cap, planner/cost_model.cpp). Fewer flows would
// each carry more under the same cap: slower than the transfers they stand for wherever
// their windows cannot fill the route. Inside a cluster one flow: no link there caps a flow.
// The engine (sim/engine.cpp) and a ring's pacing (sim/collectives.cpp) both split by it.
inline int transfer_flows(const Platform& p, int src, int dst, int flows) {
  return p.crosses_wan(src, dst) ? std::max(flows, 1) : 1;
}

// Builds the platform for the given devices. `gpus` are the scenario's resolved GPU
// specs, one per cluster. Errors (a WAN graph that does not connect two clusters the
// devices live in) go to `diags`.
Platform build_platform(const core::Scenario& s, const std::vector<const kernels::GpuSpec*>& gpus,
                        const std::vector<DeviceRequest>& requests, core::Diagnostics& diags);

// ---- the route list ----------------------------------------------------------------------
//
// The routes of the platform as SimGrid's zones hold them: a full zone per node (its GPUs
// and a router, "<cluster>/n<k>/gw"), a star zone per cluster holding its node zones and a
// gateway zone (router "<cluster>/gw"), and a root zone of the clusters. One function makes
// the list; the SimGrid platform (sim/engine.cpp) is built from it and platform_xml() writes
// it, so the exported file routes what the simulator routes.

// A route inside one zone: between two devices of a node (`src`, `dst`: device indices) or
// between a device and its node's router (-1); between two clusters' gateways (`src`,
// `dst`: cluster indices).
struct ZoneRoute {
  int src = -1;
  int dst = -1;
  std::vector<Hop> hops;
};

struct NodeRoutes {
  // Inside the node zone: every ordered pair of its devices (route()), then each device to
  // the router and back (its NIC up, its NIC down).
  std::vector<ZoneRoute> inside;
  // Out of the node zone to the rest of its cluster, and into it: the node's uplink when the
  // fabric is oversubscribed, else no link (the fabric is non-blocking). In SimGrid's star
  // zone these are the whole route; the XML's full zone adds the fabric (SimGrid's XML
  // forbids empty routes between zones).
  std::vector<Hop> out;
  std::vector<Hop> in;
};

struct PlatformRoutes {
  std::vector<NodeRoutes> nodes;            // per node (indices of Platform::nodes)
  std::vector<ZoneRoute> between_clusters;  // every ordered pair of joined clusters with devices
};

PlatformRoutes platform_routes(const Platform& p);

// SimGrid's platform XML (version 4.1) of the same platform: zones per node and cluster,
// the routes of platform_routes(), bandwidth traces inline.
std::string platform_xml(const Platform& p);

}  // namespace hgsim::sim
