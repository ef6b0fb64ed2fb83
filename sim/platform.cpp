#include "sim/platform.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <sstream>
#include <stdexcept>

#include "core/text.hpp"
#include "core/units.hpp"
#include "sim/collectives.hpp"

namespace hgsim::sim {

std::string to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::nvlink:
      return "nvlink";
    case LinkKind::nic:
      return "nic";
    case LinkKind::uplink:
      return "uplink";
    case LinkKind::fabric:
      return "fabric";
    case LinkKind::wan:
      return "wan";
    case LinkKind::tcp_window:
      return "tcp_window";
  }
  return "?";
}

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

int add_link(Platform& p, Link link) {
  p.links.push_back(std::move(link));
  return static_cast<int>(p.links.size()) - 1;
}

// A scenario trace is a step function whose last row marks the end of the period: from
// then on it repeats from the first row. The last row becomes the profile's period
// (sim/engine.cpp hands it to SimGrid as the periodicity).
void set_trace(Link& link, const core::WanLink& wan, double scale) {
  const auto& steps = wan.trace_steps;
  if (steps.empty()) return;
  if (steps.front().at.value() > 0) link.trace.emplace_back(0.0, link.bytes_per_s);
  const std::size_t kept = steps.size() > 1 ? steps.size() - 1 : 1;
  for (std::size_t i = 0; i < kept; ++i)
    link.trace.emplace_back(steps[i].at.value(), steps[i].bandwidth.value() * scale);
  if (steps.size() > 1) link.trace_period_s = steps.back().at.value();
  link.bytes_per_s = link.trace.front().second;
}

// A WAN link with a trace runs at the trace's values: its written `bandwidth` is not
// simulated (the trace's rows are absolute bandwidths), and only the planner's analytic
// estimate reads it. The shipped scenarios write the trace's peak there; any other figure
// (a sweep over wan[*].bandwidth included) changes nothing the simulator plays, so it says so.
void warn_if_trace_overrides_bandwidth(const core::Scenario& s, std::size_t k,
                                       core::Diagnostics& diags) {
  const core::WanLink& w = s.wan[k];
  if (w.trace_steps.empty()) return;
  double lowest = w.trace_steps.front().bandwidth.value(), peak = lowest;
  for (const core::BandwidthStep& step : w.trace_steps) {
    lowest = std::min(lowest, step.bandwidth.value());
    peak = std::max(peak, step.bandwidth.value());
  }
  const double written = w.bandwidth.value();
  if (std::abs(written - peak) <= 1e-9 * peak) return;
  const std::string path = "wan[" + std::to_string(k) + "].bandwidth";
  diags.warning(s.where(path), path,
                "the link " + core::excerpt(w.from) + " <-> " + core::excerpt(w.to) +
                    " follows its trace '" + core::path_excerpt(w.trace) + "' (" +
                    core::format_bandwidth(core::BytesPerSecond(lowest)) + " to " +
                    core::format_bandwidth(core::BytesPerSecond(peak)) + "), so the written " +
                    core::format_bandwidth(core::BytesPerSecond(written)) +
                    " is not simulated; only the planner's estimate uses it",
                "write the trace's peak, " + core::format_bandwidth(core::BytesPerSecond(peak)) +
                    ", or scale the trace's rows; a sweep over this link's bandwidth changes "
                    "nothing the simulator plays");
}

struct WanEdge {
  int to = 0;
  int link = 0;
  double latency = 0;
  double window = 0;  // 0: simulation.tcp_window
  int scenario_wan = 0;
};

// Least-latency paths between clusters over the WAN graph (fewer hops break ties).
void route_wan(Platform& p, const std::vector<std::vector<WanEdge>>& graph,
               const std::vector<core::Cluster>& clusters, double default_window) {
  const int n = static_cast<int>(graph.size());
  p.wan_routes.assign(n, std::vector<std::vector<Hop>>(n));
  p.connected.assign(n, std::vector<bool>(n, false));
  p.wan_tcp.assign(n, std::vector<WanRouteTcp>(n));
  for (int source = 0; source < n; ++source) {
    using Cost = std::pair<double, int>;  // latency, hops
    std::vector<Cost> cost(n, {infinity, 0});
    std::vector<int> via_edge(n, -1), via_node(n, -1);
    std::priority_queue<std::pair<Cost, int>, std::vector<std::pair<Cost, int>>, std::greater<>>
        queue;
    cost[source] = {0, 0};
    queue.push({cost[source], source});
    while (!queue.empty()) {
      auto [c, u] = queue.top();
      queue.pop();
      if (c > cost[u]) continue;
      for (std::size_t e = 0; e < graph[u].size(); ++e) {
        const WanEdge& edge = graph[u][e];
        Cost next{c.first + edge.latency, c.second + 1};
        if (next < cost[edge.to]) {
          cost[edge.to] = next;
          via_edge[edge.to] = static_cast<int>(e);
          via_node[edge.to] = u;
          queue.push({next, edge.to});
        }
      }
    }
    p.connected[source][source] = true;
    for (int target = 0; target < n; ++target) {
      if (target == source || via_node[target] < 0) continue;
      p.connected[source][target] = true;
      std::vector<Hop> hops;
      WanRouteTcp tcp;
      tcp.window_bytes = infinity;
      for (int v = target; v != source; v = via_node[v]) {
        const WanEdge& edge = graph[via_node[v]][via_edge[v]];
        hops.push_back({edge.link, true});
        const double window = edge.window > 0 ? edge.window : default_window;
        tcp.window_bytes = std::min(tcp.window_bytes, window);
        tcp.wan_links.push_back(edge.link);
        tcp.scenario_wan.push_back(edge.scenario_wan);
        tcp.windows.push_back(window);
      }
      std::reverse(hops.begin(), hops.end());
      std::reverse(tcp.wan_links.begin(), tcp.wan_links.end());
      std::reverse(tcp.scenario_wan.begin(), tcp.scenario_wan.end());
      std::reverse(tcp.windows.begin(), tcp.windows.end());
      // Round trip: the WAN path and both clusters' NIC hops, there and back.
      tcp.round_trip_s = 2 * (cost[target].first + clusters[source].nic.latency.value() +
                              clusters[target].nic.latency.value());
      Link cap;
      cap.name = "tcp:" + clusters[source].name + "->" + clusters[target].name;
      cap.kind = LinkKind::tcp_window;
      cap.bytes_per_s = tcp.flow_cap();
      tcp.cap_link = add_link(p, cap);
      hops.push_back({tcp.cap_link, true});
      p.wan_routes[source][target] = std::move(hops);
      p.wan_tcp[source][target] = std::move(tcp);
    }
  }
}

}  // namespace

Platform build_platform(const core::Scenario& s, const std::vector<const kernels::GpuSpec*>& gpus,
                        const std::vector<DeviceRequest>& requests, core::Diagnostics& diags) {
  Platform p;
  p.network_model = s.simulation.network_model;
  for (std::size_t c = 0; c < s.clusters.size(); ++c)
    p.clusters.push_back({&s.clusters[c], gpus.at(c), {}});

  std::map<std::pair<int, int>, int> node_of;  // (cluster, node number) -> node
  std::vector<int> represented;                // GPUs the devices of each node stand for
  for (const DeviceRequest& r : requests) {
    const core::Cluster& cluster = s.clusters.at(r.cluster);
    const int number = r.first_gpu / cluster.gpus_per_node;
    auto [it, fresh] = node_of.emplace(std::pair{r.cluster, number}, 0);
    if (fresh) {
      it->second = static_cast<int>(p.nodes.size());
      p.nodes.push_back({r.cluster, number, {}, -1});
      represented.push_back(0);
      p.clusters[r.cluster].nodes.push_back(it->second);
    }
    Device d;
    d.cluster = r.cluster;
    d.node = it->second;
    d.first_gpu = r.first_gpu;
    d.gpus = r.gpus;
    d.name = cluster.name + "/n" + std::to_string(number) + "/g" +
             std::to_string(r.first_gpu % cluster.gpus_per_node);
    if (r.gpus > 1) d.name += "x" + std::to_string(r.gpus);
    d.nvlink = add_link(p, {d.name + "/nvlink",
                            LinkKind::nvlink,
                            nvlink_bytes_per_s(cluster) * r.gpus,
                            cluster.nvlink.latency.value(),
                            true,
                            {},
                            0});
    d.nic = add_link(p, {d.name + "/nic",
                         LinkKind::nic,
                         cluster.nic.bandwidth.value() * r.gpus,
                         cluster.nic.latency.value(),
                         true,
                         {},
                         0});
    p.nodes[d.node].devices.push_back(static_cast<int>(p.devices.size()));
    represented[d.node] += r.gpus;
    p.devices.push_back(std::move(d));
  }
  for (auto& cluster : p.clusters) {
    Link fabric{cluster.spec->name + "/fabric", LinkKind::fabric, 1e18, 0, false, {}, 0};
    cluster.fabric = add_link(p, fabric);
  }
  for (auto& cluster : p.clusters)
    std::sort(cluster.nodes.begin(), cluster.nodes.end(),
              [&](int a, int b) { return p.nodes[a].index < p.nodes[b].index; });

  // Node uplinks of oversubscribed fabrics and of nodes with fewer NICs than GPUs: the
  // node's NICs (nics_per_node of nic.bandwidth) over the oversubscription.
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const core::Cluster& cluster = *p.clusters[p.nodes[n].cluster].spec;
    if (cluster.oversubscription <= 1 && cluster.nic_share() >= 1) continue;
    const int physical_nodes =
        std::max(1, (represented[n] + cluster.gpus_per_node - 1) / cluster.gpus_per_node);
    const double bandwidth = physical_nodes * cluster.nic_count() * cluster.nic.bandwidth.value() /
                             std::max(1.0, cluster.oversubscription);
    p.nodes[n].uplink =
        add_link(p, {cluster.name + "/n" + std::to_string(p.nodes[n].index) + "/uplink",
                     LinkKind::uplink,
                     bandwidth,
                     0,
                     true,
                     {},
                     0});
  }

  // WAN links, one shared link per direction.
  std::vector<std::vector<WanEdge>> graph(s.clusters.size());
  for (std::size_t k = 0; k < s.wan.size(); ++k) {
    const core::WanLink& w = s.wan[k];
    const auto from = s.cluster_index(w.from);
    const auto to = s.cluster_index(w.to);
    if (!from || !to)  // the scenario's checks refuse such a link: here it is a bug
      throw std::invalid_argument("wan link " + w.from + " <-> " + w.to +
                                  " names a cluster the scenario does not have");
    const int a = *from;
    const int b = *to;
    const double forward = w.bandwidth.value();
    const double backward = w.reverse_bandwidth ? w.reverse_bandwidth->value() : forward;
    const double window = w.tcp_window ? w.tcp_window->value() : 0;
    Link there{
        "wan:" + w.from + "->" + w.to, LinkKind::wan, forward, w.latency.value(), false, {}, 0};
    Link back{
        "wan:" + w.to + "->" + w.from, LinkKind::wan, backward, w.latency.value(), false, {}, 0};
    warn_if_trace_overrides_bandwidth(s, k, diags);
    set_trace(there, w, 1.0);
    set_trace(back, w, backward / forward);
    graph[a].push_back({b, add_link(p, there), w.latency.value(), window, int(k)});
    graph[b].push_back({a, add_link(p, back), w.latency.value(), window, int(k)});
  }
  route_wan(p, graph, s.clusters, s.simulation.tcp_window.value());

  // Every pair of clusters that holds devices must be connected.
  std::vector<bool> used(s.clusters.size(), false);
  for (const Device& d : p.devices) used[d.cluster] = true;
  for (std::size_t a = 0; a < s.clusters.size(); ++a)
    for (std::size_t b = a + 1; b < s.clusters.size(); ++b)
      if (used[a] && used[b] && !p.connected[a][b])
        diags.error(s.where("wan"), "wan",
                    "no WAN path joins clusters '" + core::excerpt(s.clusters[a].name) + "' and '" +
                        core::excerpt(s.clusters[b].name) + "', but the plan uses both",
                    "add a wan link (between: [" + s.clusters[a].name + ", " + s.clusters[b].name +
                        "]) or a path through other clusters");
  return p;
}

std::vector<Hop> Platform::route(int src, int dst) const {
  std::vector<Hop> hops;
  for_each_hop(src, dst, [&hops](const Hop& h) { hops.push_back(h); });
  return hops;
}

double Platform::route_latency(int src, int dst) const {
  double latency = 0;
  for_each_hop(src, dst, [&](const Hop& h) { latency += links[h.link].latency_s; });
  return latency;
}

double Platform::route_bandwidth(int src, int dst) const {
  double bandwidth = infinity;
  for (const Hop& h : route(src, dst)) bandwidth = std::min(bandwidth, links[h.link].bytes_per_s);
  return bandwidth;
}

double Platform::flow_cap(int src, int dst) const {
  if (!crosses_wan(src, dst)) return infinity;
  return wan_tcp[devices[src].cluster][devices[dst].cluster].flow_cap();
}

PlatformRoutes platform_routes(const Platform& p) {
  PlatformRoutes routes;
  routes.nodes.resize(p.nodes.size());
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const Node& node = p.nodes[n];
    NodeRoutes& r = routes.nodes[n];
    for (int a : node.devices)
      for (int b : node.devices)
        if (a != b) r.inside.push_back({a, b, p.route(a, b)});
    for (int d : node.devices) {
      r.inside.push_back({d, -1, {{p.devices[d].nic, true}}});
      r.inside.push_back({-1, d, {{p.devices[d].nic, false}}});
    }
    if (node.uplink >= 0) {
      r.out.push_back({node.uplink, true});
      r.in.push_back({node.uplink, false});
    }
  }
  for (std::size_t a = 0; a < p.clusters.size(); ++a)
    for (std::size_t b = 0; b < p.clusters.size(); ++b) {
      if (a == b || p.clusters[a].nodes.empty() || p.clusters[b].nodes.empty()) continue;
      if (!p.connected[a][b]) continue;
      routes.between_clusters.push_back(
          {static_cast<int>(a), static_cast<int>(b), p.wan_routes[a][b]});
    }
  return routes;
}

// ---- SimGrid platform XML -------------------------------------------------------------

namespace {

// Names in double-quoted attribute values, escaped ('>' may stay: "wan:a->b"). Cluster
// names are restricted (core::as_cluster_name), but the XML must stay well formed anyway.
std::string xml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  return core::shortest_decimal(v);
}

void xml_link(std::ostringstream& out, const Link& l, const std::string& indent) {
  out << indent << "<link id=\"" << xml(l.name) << "\" bandwidth=\"" << number(l.bytes_per_s)
      << "Bps\" latency=\"" << number(l.latency_s) << "s\"";
  if (l.split_duplex) out << " sharing_policy=\"SPLITDUPLEX\"";
  if (l.kind == LinkKind::tcp_window || l.kind == LinkKind::fabric)
    out << " sharing_policy=\"FATPIPE\"";
  if (l.trace.empty()) {
    out << "/>\n";
    return;
  }
  out << ">\n" << indent << "  <!-- bandwidth over time: time_s bytes_per_s -->\n";
  out << indent << "  <prop id=\"bandwidth_profile\" value=\"";
  for (const auto& [t, bw] : l.trace) out << number(t) << " " << number(bw) << ";";
  out << " period " << number(l.trace_period_s) << "\"/>\n" << indent << "</link>\n";
}

void xml_hops(std::ostringstream& out, const Platform& p, const std::vector<Hop>& hops,
              const std::string& indent) {
  for (const Hop& h : hops) {
    out << indent << "<link_ctn id=\"" << xml(p.links[h.link].name) << "\"";
    if (p.links[h.link].split_duplex) out << " direction=\"" << (h.up ? "UP" : "DOWN") << "\"";
    out << "/>\n";
  }
}

// A route between two zones, through their gateways (routers).
struct ZoneEnd {
  std::string zone;
  std::string gateway;
};

void xml_zone_route(std::ostringstream& out, const Platform& p, const ZoneEnd& from,
                    const ZoneEnd& to, const std::vector<Hop>& hops, const std::string& indent) {
  out << indent << "<zoneRoute src=\"" << xml(from.zone) << "\" dst=\"" << xml(to.zone)
      << "\" gw_src=\"" << xml(from.gateway) << "\" gw_dst=\"" << xml(to.gateway)
      << "\" symmetrical=\"NO\">\n";
  xml_hops(out, p, hops, indent + "  ");
  out << indent << "</zoneRoute>\n";
}

std::vector<Hop> joined(std::vector<Hop> first, const std::vector<Hop>& then) {
  first.insert(first.end(), then.begin(), then.end());
  return first;
}

// One node's zone: its GPUs, its router, their NVLink and NIC ports, and its routes.
void xml_node_zone(std::ostringstream& out, const Platform& p, const NodeRoutes& routes,
                   const Node& node, const std::string& zone) {
  out << "    <zone id=\"" << xml(zone) << "\" routing=\"Full\">\n";
  for (int d : node.devices)
    out << "      <host id=\"" << xml(p.devices[d].name) << "\" speed=\""
        << number(flops_per_second) << "f\"/>\n";
  out << "      <router id=\"" << xml(zone) << "/gw\"/>\n";
  for (int d : node.devices) {
    xml_link(out, p.links[p.devices[d].nvlink], "      ");
    xml_link(out, p.links[p.devices[d].nic], "      ");
  }
  auto point = [&](int device) { return device < 0 ? zone + "/gw" : p.devices[device].name; };
  for (const ZoneRoute& r : routes.inside) {
    out << "      <route src=\"" << xml(point(r.src)) << "\" dst=\"" << xml(point(r.dst))
        << "\" symmetrical=\"NO\">\n";
    xml_hops(out, p, r.hops, "        ");
    out << "      </route>\n";
  }
  out << "    </zone>\n";
}

// One cluster's zone: its node zones, its gateway, and the routes between them. SimGrid's
// star zone (the simulator's) routes a node's way out and way in alone; this full zone
// spells out every pair, through the fabric.
void xml_cluster_zone(std::ostringstream& out, const Platform& p, const PlatformRoutes& routes,
                      const ClusterInfo& cluster) {
  const std::string& name = cluster.spec->name;
  out << "  <zone id=\"" << xml(name) << "\" routing=\"Full\">\n";
  auto node_zone = [&](int n) {
    const std::string zone = name + "/n" + std::to_string(p.nodes[n].index);
    return ZoneEnd{zone, zone + "/gw"};
  };
  const ZoneEnd gateway{name + "/gateway", name + "/gw"};
  for (int n : cluster.nodes) xml_node_zone(out, p, routes.nodes[n], p.nodes[n], node_zone(n).zone);
  out << "    <zone id=\"" << xml(name) << "/gateway\" routing=\"None\">\n"
      << "      <router id=\"" << xml(name) << "/gw\"/>\n    </zone>\n";
  xml_link(out, p.links[cluster.fabric], "    ");
  for (int n : cluster.nodes)
    if (p.nodes[n].uplink >= 0) xml_link(out, p.links[p.nodes[n].uplink], "    ");
  const std::vector<Hop> fabric{{cluster.fabric, true}};
  for (int a : cluster.nodes) {
    const NodeRoutes& ra = routes.nodes[a];
    for (int b : cluster.nodes)
      if (a != b)
        xml_zone_route(out, p, node_zone(a), node_zone(b),
                       joined(joined(ra.out, fabric), routes.nodes[b].in), "    ");
    xml_zone_route(out, p, node_zone(a), gateway, joined(ra.out, fabric), "    ");
    xml_zone_route(out, p, gateway, node_zone(a), joined(ra.in, fabric), "    ");
  }
  out << "  </zone>\n";
}

}  // namespace

std::string platform_xml(const Platform& p) {
  const PlatformRoutes routes = platform_routes(p);
  std::ostringstream out;
  out << "<?xml version='1.0'?>\n"
      << "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      << "<!-- Written by hgsim: the platform it simulates. Hosts run " << number(flops_per_second)
      << " flop/s (one flop\n"
      << "     stands for a picosecond of GPU time). Bandwidth traces are listed as a\n"
      << "     property (SimGrid's XML takes them from files). -->\n"
      << "<platform version=\"4.1\">\n"
      << "<zone id=\"hgsim\" routing=\"Full\">\n";
  for (const ClusterInfo& cluster : p.clusters)
    if (!cluster.nodes.empty()) xml_cluster_zone(out, p, routes, cluster);
  for (const Link& l : p.links)
    if (l.kind == LinkKind::wan || l.kind == LinkKind::tcp_window) xml_link(out, l, "  ");
  auto cluster_zone = [&](int c) {
    const std::string& name = p.clusters[c].spec->name;
    return ZoneEnd{name, name + "/gw"};
  };
  for (const ZoneRoute& r : routes.between_clusters)
    xml_zone_route(out, p, cluster_zone(r.src), cluster_zone(r.dst), r.hops, "  ");
  out << "</zone>\n</platform>\n";
  return out.str();
}

}  // namespace hgsim::sim
