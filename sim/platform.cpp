#include "sim/platform.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <sstream>
#include <stdexcept>

#include "core/units.hpp"

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

struct WanEdge {
  int to = 0;
  int link = 0;
  double latency = 0;
  double window = 0;
};

// Least-latency paths between clusters over the WAN graph (fewer hops break ties).
void route_wan(Platform& p, const std::vector<std::vector<WanEdge>>& graph,
               const std::vector<core::Cluster>& clusters, double default_window) {
  const int n = static_cast<int>(graph.size());
  p.wan_routes.assign(n, std::vector<std::vector<Hop>>(n));
  p.connected.assign(n, std::vector<bool>(n, false));
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
      double window = infinity;
      for (int v = target; v != source; v = via_node[v]) {
        const WanEdge& edge = graph[via_node[v]][via_edge[v]];
        hops.push_back({edge.link, true});
        window = std::min(window, edge.window > 0 ? edge.window : default_window);
      }
      std::reverse(hops.begin(), hops.end());
      // Round trip: the WAN path and both clusters' NIC hops, there and back.
      const double rtt = 2 * (cost[target].first + clusters[source].nic.latency.value() +
                              clusters[target].nic.latency.value());
      Link cap;
      cap.name = "tcp:" + clusters[source].name + "->" + clusters[target].name;
      cap.kind = LinkKind::tcp_window;
      cap.bytes_per_s = window / rtt;
      hops.push_back({add_link(p, cap), true});
      p.wan_routes[source][target] = std::move(hops);
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
                            cluster.nvlink.bandwidth.value() * r.gpus,
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

  // Node uplinks of oversubscribed fabrics: the node's NICs over the oversubscription.
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const core::Cluster& cluster = *p.clusters[p.nodes[n].cluster].spec;
    if (cluster.oversubscription <= 1) continue;
    const int physical_nodes =
        std::max(1, (represented[n] + cluster.gpus_per_node - 1) / cluster.gpus_per_node);
    const double bandwidth = physical_nodes * cluster.gpus_per_node *
                             cluster.nic.bandwidth.value() / cluster.oversubscription;
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
  for (const core::WanLink& w : s.wan) {
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
    set_trace(there, w, 1.0);
    set_trace(back, w, backward / forward);
    graph[a].push_back({b, add_link(p, there), w.latency.value(), window});
    graph[b].push_back({a, add_link(p, back), w.latency.value(), window});
  }
  route_wan(p, graph, s.clusters, s.simulation.tcp_window.value());

  // Every pair of clusters that holds devices must be connected.
  std::vector<bool> used(s.clusters.size(), false);
  for (const Device& d : p.devices) used[d.cluster] = true;
  for (std::size_t a = 0; a < s.clusters.size(); ++a)
    for (std::size_t b = a + 1; b < s.clusters.size(); ++b)
      if (used[a] && used[b] && !p.connected[a][b])
        diags.error(s.where("wan"), "wan",
                    "no WAN path joins clusters '" + s.clusters[a].name + "' and '" +
                        s.clusters[b].name + "', but the plan uses both",
                    "add a wan link (between: [" + s.clusters[a].name + ", " + s.clusters[b].name +
                        "]) or a path through other clusters");
  return p;
}

std::vector<Hop> Platform::route(int src, int dst) const {
  const Device& a = devices[src];
  const Device& b = devices[dst];
  if (src == dst) return {};
  if (a.node == b.node) return {{a.nvlink, true}, {b.nvlink, false}};
  std::vector<Hop> hops{{a.nic, true}};
  if (nodes[a.node].uplink >= 0) hops.push_back({nodes[a.node].uplink, true});
  if (a.cluster != b.cluster)
    for (const Hop& h : wan_routes[a.cluster][b.cluster]) hops.push_back(h);
  if (nodes[b.node].uplink >= 0) hops.push_back({nodes[b.node].uplink, false});
  hops.push_back({b.nic, false});
  return hops;
}

double Platform::route_latency(int src, int dst) const {
  double latency = 0;
  for (const Hop& h : route(src, dst)) latency += links[h.link].latency_s;
  return latency;
}

double Platform::route_bandwidth(int src, int dst) const {
  double bandwidth = infinity;
  for (const Hop& h : route(src, dst)) bandwidth = std::min(bandwidth, links[h.link].bytes_per_s);
  return bandwidth;
}

double Platform::flow_cap(int src, int dst) const {
  if (!crosses_wan(src, dst)) return infinity;
  return links[wan_routes[devices[src].cluster][devices[dst].cluster].back().link].bytes_per_s;
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

}  // namespace

std::string platform_xml(const Platform& p) {
  std::ostringstream out;
  out << "<?xml version='1.0'?>\n"
      << "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      << "<!-- Written by hgsim: the platform it simulates. Hosts run " << number(flops_per_second)
      << " flop/s (one flop\n"
      << "     stands for a picosecond of GPU time). Bandwidth traces are listed as a\n"
      << "     property (SimGrid's XML takes them from files). -->\n"
      << "<platform version=\"4.1\">\n"
      << "<zone id=\"hgsim\" routing=\"Full\">\n";
  for (std::size_t c = 0; c < p.clusters.size(); ++c) {
    const ClusterInfo& cluster = p.clusters[c];
    if (cluster.nodes.empty()) continue;
    const std::string& name = cluster.spec->name;
    out << "  <zone id=\"" << xml(name) << "\" routing=\"Full\">\n";
    for (int n : cluster.nodes) {
      const Node& node = p.nodes[n];
      const std::string zone = name + "/n" + std::to_string(node.index);
      out << "    <zone id=\"" << xml(zone) << "\" routing=\"Full\">\n";
      for (int d : node.devices)
        out << "      <host id=\"" << xml(p.devices[d].name) << "\" speed=\""
            << number(flops_per_second) << "f\"/>\n";
      out << "      <router id=\"" << xml(zone) << "/gw\"/>\n";
      for (int d : node.devices) {
        xml_link(out, p.links[p.devices[d].nvlink], "      ");
        xml_link(out, p.links[p.devices[d].nic], "      ");
      }
      for (int a : node.devices)
        for (int b : node.devices) {
          if (a == b) continue;
          out << "      <route src=\"" << xml(p.devices[a].name) << "\" dst=\""
              << xml(p.devices[b].name) << "\" symmetrical=\"NO\">\n";
          xml_hops(out, p, p.route(a, b), "        ");
          out << "      </route>\n";
        }
      for (int d : node.devices) {
        out << "      <route src=\"" << xml(p.devices[d].name) << "\" dst=\"" << xml(zone)
            << "/gw\" symmetrical=\"NO\">\n";
        xml_hops(out, p, {{p.devices[d].nic, true}}, "        ");
        out << "      </route>\n      <route src=\"" << xml(zone) << "/gw\" dst=\""
            << xml(p.devices[d].name) << "\" symmetrical=\"NO\">\n";
        xml_hops(out, p, {{p.devices[d].nic, false}}, "        ");
        out << "      </route>\n";
      }
      out << "    </zone>\n";
    }
    out << "    <zone id=\"" << xml(name) << "/gateway\" routing=\"None\">\n"
        << "      <router id=\"" << xml(name) << "/gw\"/>\n    </zone>\n";
    xml_link(out, p.links[cluster.fabric], "    ");
    for (int n : cluster.nodes)
      if (p.nodes[n].uplink >= 0) xml_link(out, p.links[p.nodes[n].uplink], "    ");
    auto node_zone = [&](int n) { return name + "/n" + std::to_string(p.nodes[n].index); };
    auto uplink = [&](int n, bool up) {
      return p.nodes[n].uplink >= 0 ? std::vector<Hop>{{p.nodes[n].uplink, up}}
                                    : std::vector<Hop>{};
    };
    auto fabric = [&](std::vector<Hop> hops) {
      hops.push_back({cluster.fabric, true});
      return hops;
    };
    for (int a : cluster.nodes) {
      for (int b : cluster.nodes) {
        if (a == b) continue;
        out << "    <zoneRoute src=\"" << xml(node_zone(a)) << "\" dst=\"" << xml(node_zone(b))
            << "\" gw_src=\"" << xml(node_zone(a)) << "/gw\" gw_dst=\"" << xml(node_zone(b))
            << "/gw\" symmetrical=\"NO\">\n";
        auto hops = uplink(a, true);
        hops.push_back({cluster.fabric, true});
        for (const Hop& h : uplink(b, false)) hops.push_back(h);
        xml_hops(out, p, hops, "      ");
        out << "    </zoneRoute>\n";
      }
      for (bool outward : {true, false}) {
        const std::string from = outward ? node_zone(a) : name + "/gateway";
        const std::string to = outward ? name + "/gateway" : node_zone(a);
        const std::string gw_from = outward ? node_zone(a) + "/gw" : name + "/gw";
        const std::string gw_to = outward ? name + "/gw" : node_zone(a) + "/gw";
        out << "    <zoneRoute src=\"" << xml(from) << "\" dst=\"" << xml(to) << "\" gw_src=\""
            << xml(gw_from) << "\" gw_dst=\"" << xml(gw_to) << "\" symmetrical=\"NO\">\n";
        xml_hops(out, p, fabric(uplink(a, outward)), "      ");
        out << "    </zoneRoute>\n";
      }
    }
    out << "  </zone>\n";
  }
  for (const Link& l : p.links)
    if (l.kind == LinkKind::wan || l.kind == LinkKind::tcp_window) xml_link(out, l, "  ");
  for (std::size_t a = 0; a < p.clusters.size(); ++a)
    for (std::size_t b = 0; b < p.clusters.size(); ++b) {
      if (a == b || p.clusters[a].nodes.empty() || p.clusters[b].nodes.empty()) continue;
      if (!p.connected[a][b]) continue;
      const std::string& from = p.clusters[a].spec->name;
      const std::string& to = p.clusters[b].spec->name;
      out << "  <zoneRoute src=\"" << xml(from) << "\" dst=\"" << xml(to) << "\" gw_src=\""
          << xml(from) << "/gw\" gw_dst=\"" << xml(to) << "/gw\" symmetrical=\"NO\">\n";
      xml_hops(out, p, p.wan_routes[a][b], "    ");
      out << "  </zoneRoute>\n";
    }
  out << "</zone>\n</platform>\n";
  return out.str();
}

}  // namespace hgsim::sim
