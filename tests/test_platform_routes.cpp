// The platform's one route list (sim::platform_routes): the exported SimGrid XML holds exactly
// its routes, and they compose into Platform::route, the route every cost reads, for every
// pair of devices. The XML is parsed here, independently of the writer.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gpu_catalog.hpp"
#include "sim/platform.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

using testing::checked;
using Hops = std::vector<std::string>;  // "link name" or "link name UP" / "DOWN"

// Three clusters, the first oversubscribed (node uplinks), joined by a path through the
// second; devices on several nodes of each.
sim::Platform three_cluster_platform() {
  // The platform points into its scenario: the scenario lives as long as the tests.
  static const auto c = checked(std::string("name: routes\n") + testing::kTinyModel +
                                "training: {global_batch: 8, seq_len: 128}\n"
                                "clusters:\n"
                                "  - {name: a, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 4, "
                                "oversubscription: 2}\n"
                                "  - {name: b, gpu: V100-32GB-SXM, nodes: 2, gpus_per_node: 4}\n"
                                "  - {name: c, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 4}\n"
                                "wan:\n"
                                "  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms}\n"
                                "  - {between: [b, c], bandwidth: 5Gbps, latency: 5ms}\n"
                                "strategy:\n  pipelines:\n    - micro_batches: 8\n      stages:\n"
                                "        - {cluster: a, layers: 8}\n");
  const auto* a100 = kernels::find_gpu("A100-80GB-SXM");
  const auto* v100 = kernels::find_gpu("V100-32GB-SXM");
  const std::vector<sim::DeviceRequest> requests{{0, 0, 1}, {0, 1, 1}, {0, 4, 1}, {1, 0, 1},
                                                 {1, 5, 1}, {1, 6, 1}, {2, 2, 1}};
  core::Diagnostics diags;
  auto p = sim::build_platform(c.scenario, {a100, v100, a100}, requests, diags);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  return p;
}

Hops names(const sim::Platform& p, const std::vector<sim::Hop>& hops) {
  Hops out;
  for (const sim::Hop& h : hops) {
    const sim::Link& l = p.links[h.link];
    out.push_back(l.split_duplex ? l.name + (h.up ? " UP" : " DOWN") : l.name);
  }
  return out;
}

// The value of attribute `name` in the element starting at `at`.
std::string attribute(const std::string& text, std::size_t at, const std::string& name) {
  const std::size_t end = text.find('>', at);
  const std::size_t key = text.find(" " + name + "=\"", at);
  if (key == std::string::npos || key > end) return "";
  const std::size_t start = key + name.size() + 3;
  return text.substr(start, text.find('"', start) - start);
}

// Every <route> and <zoneRoute> of the XML: (src, dst) -> its link_ctn elements in order.
std::map<std::pair<std::string, std::string>, Hops> xml_routes(const std::string& text) {
  std::map<std::pair<std::string, std::string>, Hops> out;
  for (const std::string tag : {"route", "zoneRoute"}) {
    for (std::size_t at = text.find("<" + tag + " "); at != std::string::npos;
         at = text.find("<" + tag + " ", at + 1)) {
      const std::size_t close = text.find("</" + tag + ">", at);
      EXPECT_NE(close, std::string::npos) << "an unclosed <" << tag << ">";
      Hops hops;
      for (std::size_t l = text.find("<link_ctn ", at); l < close;
           l = text.find("<link_ctn ", l + 1)) {
        const std::string direction = attribute(text, l, "direction");
        hops.push_back(attribute(text, l, "id") + (direction.empty() ? "" : " " + direction));
      }
      const std::string src = attribute(text, at, "src"), dst = attribute(text, at, "dst");
      const bool fresh = out.emplace(std::pair{src, dst}, hops).second;
      EXPECT_TRUE(fresh) << "two routes from " << src << " to " << dst;
    }
  }
  return out;
}

TEST(PlatformRoutes, TheExportedXmlHoldsExactlyTheRouteList) {
  const sim::Platform p = three_cluster_platform();
  const sim::PlatformRoutes routes = sim::platform_routes(p);
  auto xml = xml_routes(sim::platform_xml(p));
  std::size_t expected = 0;
  auto take = [&](const std::string& src, const std::string& dst, const Hops& hops) {
    ++expected;
    const auto it = xml.find({src, dst});
    ASSERT_NE(it, xml.end()) << "no route " << src << " -> " << dst << " in the XML";
    EXPECT_EQ(it->second, hops) << src << " -> " << dst;
  };
  for (std::size_t n = 0; n < p.nodes.size(); ++n) {
    const sim::Node& node = p.nodes[n];
    const std::string cluster = p.clusters[node.cluster].spec->name;
    const std::string zone = cluster + "/n" + std::to_string(node.index);
    auto point = [&](int d) { return d < 0 ? zone + "/gw" : p.devices[d].name; };
    for (const sim::ZoneRoute& r : routes.nodes[n].inside)
      take(point(r.src), point(r.dst), names(p, r.hops));
    // The XML's cluster zone is full: the star zone's way out and in, through the fabric.
    const std::string fabric = cluster + "/fabric";
    Hops out = names(p, routes.nodes[n].out), in = names(p, routes.nodes[n].in);
    Hops to_gateway = out, from_gateway = in;
    to_gateway.push_back(fabric);
    from_gateway.push_back(fabric);
    take(zone, cluster + "/gateway", to_gateway);
    take(cluster + "/gateway", zone, from_gateway);
    for (int m : p.clusters[node.cluster].nodes) {
      if (m == static_cast<int>(n)) continue;
      Hops between = out;
      between.push_back(fabric);
      for (const auto& h : names(p, routes.nodes[m].in)) between.push_back(h);
      take(zone, cluster + "/n" + std::to_string(p.nodes[m].index), between);
    }
  }
  for (const sim::ZoneRoute& r : routes.between_clusters)
    take(p.clusters[r.src].spec->name, p.clusters[r.dst].spec->name, names(p, r.hops));
  EXPECT_EQ(xml.size(), expected) << "the XML has routes the list does not";
  // a and c are joined through b: their route crosses both WAN links.
  const auto ac = xml.find({"a", "c"});
  ASSERT_NE(ac, xml.end());
  EXPECT_EQ(ac->second, (Hops{"wan:a->b", "wan:b->c", "tcp:a->c"}));
}

TEST(PlatformRoutes, TheListComposesIntoEveryDevicePairsRoute) {
  const sim::Platform p = three_cluster_platform();
  const sim::PlatformRoutes routes = sim::platform_routes(p);
  std::map<std::pair<int, int>, std::vector<sim::Hop>> inside;
  for (const auto& node : routes.nodes)
    for (const sim::ZoneRoute& r : node.inside) inside[{r.src, r.dst}] = r.hops;
  std::map<std::pair<int, int>, std::vector<sim::Hop>> wan;
  for (const sim::ZoneRoute& r : routes.between_clusters) wan[{r.src, r.dst}] = r.hops;
  // SimGrid's hierarchical routing, written out: inside a node the pair's route; else the
  // way to the node's router, out of the node, across the WAN between clusters, into the
  // other node and down to the device.
  for (int a = 0; a < p.device_count(); ++a)
    for (int b = 0; b < p.device_count(); ++b) {
      if (a == b) continue;
      const sim::Device& da = p.devices[a];
      const sim::Device& db = p.devices[b];
      std::vector<sim::Hop> composed;
      auto add = [&](const std::vector<sim::Hop>& hops) {
        composed.insert(composed.end(), hops.begin(), hops.end());
      };
      if (da.node == db.node) {
        add(inside.at({a, b}));
      } else {
        add(inside.at({a, -1}));
        add(routes.nodes[da.node].out);
        if (da.cluster != db.cluster) add(wan.at({da.cluster, db.cluster}));
        add(routes.nodes[db.node].in);
        add(inside.at({-1, b}));
      }
      EXPECT_EQ(names(p, composed), names(p, p.route(a, b)))
          << p.devices[a].name << " -> " << p.devices[b].name;
    }
}

}  // namespace
}  // namespace hgsim
