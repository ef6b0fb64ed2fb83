#include "sim/engine.hpp"

#include <simgrid/kernel/ProfileBuilder.hpp>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/kernel/resource/Action.hpp>
#include <simgrid/kernel/resource/Model.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/config.hpp>

#include <simgrid/version.h>  // after s4u.hpp: it needs xbt/base.h's macros first

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace hgsim::sim {

namespace sg = simgrid::s4u;
using simgrid::kernel::routing::NetPoint;

namespace {

std::atomic<bool> engine_used{false};

std::vector<sg::LinkInRoute> in_route(const std::vector<sg::Link*>& links,
                                      const std::vector<Hop>& hops) {
  std::vector<sg::LinkInRoute> out;
  for (const Hop& h : hops) {
    sg::Link* l = links[h.link];
    if (l->get_sharing_policy() == sg::Link::SharingPolicy::SPLITDUPLEX)
      out.emplace_back(l, h.up ? sg::LinkInRoute::Direction::UP : sg::LinkInRoute::Direction::DOWN);
    else
      out.emplace_back(l);
  }
  return out;
}

// The platform calls of each SimGrid. 4.0 builds a zone's content through the zone
// (NetZone::add_netzone_*, add_host, add_link, add_router) under the root the engine made;
// its wrappers of 3.32's free create_*_zone and NetZone::create_* build hosts that have no
// CPU model ("Invalid CPU model: nullptr"), and 3.32 has none of the add_* forms.
#if SIMGRID_VERSION_MAJOR >= 4
sg::NetZone* root_zone(const std::string& name) {
  return sg::Engine::get_instance()->get_netzone_root()->add_netzone_full(name);
}
sg::NetZone* full_zone(sg::NetZone* parent, const std::string& name) {
  return parent->add_netzone_full(name);
}
sg::NetZone* star_zone(sg::NetZone* parent, const std::string& name) {
  return parent->add_netzone_star(name);
}
sg::NetZone* empty_zone(sg::NetZone* parent, const std::string& name) {
  return parent->add_netzone_empty(name);
}
sg::Host* add_host(sg::NetZone* zone, const std::string& name, double speed) {
  return zone->add_host(name, speed);
}
sg::Link* add_link(sg::NetZone* zone, const std::string& name, double bandwidth,
                   bool split_duplex) {
  return split_duplex ? zone->add_split_duplex_link(name, bandwidth)
                      : zone->add_link(name, bandwidth);
}
NetPoint* add_router(sg::NetZone* zone, const std::string& name) {
  return zone->add_router(name);
}
#else
sg::NetZone* root_zone(const std::string& name) {
  return sg::create_full_zone(name);
}
sg::NetZone* full_zone(sg::NetZone* parent, const std::string& name) {
  return sg::create_full_zone(name)->set_parent(parent);
}
sg::NetZone* star_zone(sg::NetZone* parent, const std::string& name) {
  return sg::create_star_zone(name)->set_parent(parent);
}
sg::NetZone* empty_zone(sg::NetZone* parent, const std::string& name) {
  return sg::create_empty_zone(name)->set_parent(parent);
}
sg::Host* add_host(sg::NetZone* zone, const std::string& name, double speed) {
  return zone->create_host(name, speed);
}
sg::Link* add_link(sg::NetZone* zone, const std::string& name, double bandwidth,
                   bool split_duplex) {
  return split_duplex ? zone->create_split_duplex_link(name, bandwidth)
                      : zone->create_link(name, bandwidth);
}
NetPoint* add_router(sg::NetZone* zone, const std::string& name) {
  return zone->create_router(name);
}
#endif

sg::Link* create_link(sg::NetZone* zone, const Link& spec) {
  sg::Link* link = add_link(zone, spec.name, spec.bytes_per_s, spec.split_duplex);
  link->set_latency(spec.latency_s);
  if (spec.kind == LinkKind::tcp_window || spec.kind == LinkKind::fabric)
    link->set_sharing_policy(sg::Link::SharingPolicy::FATPIPE);
  if (!spec.trace.empty()) {
    std::ostringstream text;
    text.precision(17);
    for (const auto& [t, bw] : spec.trace) text << t << " " << bw << "\n";
    // SimGrid's periodicity is the whole period: after its last event the profile waits
    // periodicity - (that event's time), then starts again from the first.
    double periodicity = -1;
    if (spec.trace_period_s > 0) periodicity = spec.trace_period_s;
    link->set_bandwidth_profile(simgrid::kernel::profile::ProfileBuilder::from_string(
        spec.name + "-profile", text.str(), periodicity));
  }
  return link;
}

// The zones and routes of sim::platform_routes(), the list platform_xml() writes too, but
// for the fabric: here each cluster is a star zone of its node zones, so that a route
// between nodes is the NICs and the node uplinks alone. The XML names the fabric (a fat pipe that
// never limits a flow) because SimGrid's XML forbids empty routes between zones. Leaving it out is
// what lets SimGrid's selective update stay local: a fat pipe is still a constraint of the solver,
// so every flow crossing it joined one connected component with every other flow of the cluster,
// and each flow starting or ending re-solved them all.
struct SimgridPlatform {
  std::vector<sg::Host*> hosts;

  explicit SimgridPlatform(const Platform& p) {
    const PlatformRoutes routes = platform_routes(p);
    std::vector<sg::Link*> links(p.links.size(), nullptr);
    hosts.assign(p.devices.size(), nullptr);
    auto* root = root_zone("hgsim");
    std::vector<sg::NetZone*> cluster_zones(p.clusters.size(), nullptr);
    std::vector<NetPoint*> cluster_gateways(p.clusters.size(), nullptr);
    for (std::size_t c = 0; c < p.clusters.size(); ++c) {
      const ClusterInfo& cluster = p.clusters[c];
      if (cluster.nodes.empty()) continue;
      const std::string& name = cluster.spec->name;
      auto* zone = star_zone(root, name);
      for (int n : cluster.nodes) {
        const Node& node = p.nodes[n];
        auto* nz = full_zone(zone, name + "/n" + std::to_string(node.index));
        for (int d : node.devices) {
          hosts[d] = add_host(nz, p.devices[d].name, flops_per_second);
          links[p.devices[d].nvlink] = create_link(nz, p.links[p.devices[d].nvlink]);
          links[p.devices[d].nic] = create_link(nz, p.links[p.devices[d].nic]);
        }
        NetPoint* gw = add_router(nz, nz->get_name() + "/gw");
        auto point = [&](int d) { return d < 0 ? gw : hosts[d]->get_netpoint(); };
        const NodeRoutes& node_routes = routes.nodes[n];
        for (const ZoneRoute& r : node_routes.inside)
          nz->add_route(point(r.src), point(r.dst), nullptr, nullptr, in_route(links, r.hops),
                        false);
        nz->seal();
        if (node.uplink >= 0) links[node.uplink] = create_link(zone, p.links[node.uplink]);
        zone->add_route(nz->get_netpoint(), nullptr, gw, nullptr, in_route(links, node_routes.out),
                        false);
        zone->add_route(nullptr, nz->get_netpoint(), nullptr, gw, in_route(links, node_routes.in),
                        false);
      }
      auto* gateway_zone = empty_zone(zone, name + "/gateway");
      NetPoint* cluster_gw = add_router(gateway_zone, name + "/gw");
      gateway_zone->seal();
      zone->add_route(gateway_zone->get_netpoint(), nullptr, cluster_gw, nullptr, {}, false);
      zone->add_route(nullptr, gateway_zone->get_netpoint(), nullptr, cluster_gw, {}, false);
      zone->seal();
      cluster_zones[c] = zone;
      cluster_gateways[c] = cluster_gw;
    }
    for (std::size_t l = 0; l < p.links.size(); ++l)
      if (p.links[l].kind == LinkKind::wan || p.links[l].kind == LinkKind::tcp_window)
        links[l] = create_link(root, p.links[l]);
    for (const ZoneRoute& r : routes.between_clusters)
      root->add_route(cluster_zones[r.src]->get_netpoint(), cluster_zones[r.dst]->get_netpoint(),
                      cluster_gateways[r.src], cluster_gateways[r.dst], in_route(links, r.hops),
                      false);
    root->seal();
  }
};

// Works around a SimGrid 3.32 bug that let flows run past their links' bandwidth (B1). With lazy
// updates a flow's solver variable stays disabled while it pays its route's latency; at the end
// of that latency System::enable_var() marks the constraints to re-solve through
// update_modified_cnst_set_from_variable(), which starts from the variable's first constraint
// only (src/kernel/lmm/System.cpp) and adds nothing when that constraint is already marked. When
// two flows whose routes start on the same link (a device's NIC) end their latency at the same
// instant, the first marks that NIC while the second is still disabled, and the second's other
// links (the WAN) are left out of the next solve: a WAN flow ran at its NICs' speed. A flow's
// Action::set_bound() marks every constraint of its variable (System::update_variable_bound), so
// setting a flow's bound to itself right after its latency ends, before the next solve
// (Engine::on_time_advance), marks the links the solve needs. That solve then gives every flow
// the rates of a correct selective update, the rates a full solve gives: the workaround is exact.
//
// The network model is found as the model that holds the first flow's action (Engine::
// get_all_models, public in 3.32 and 4.0): 4.0 ships no NetworkModelIntf, the type 3.32's
// NetZone::get_network_model returns. The repair acts only where that model updates lazily.
class LatencyEndRepair {
 public:
  LatencyEndRepair()
      : precision_(simgrid::config::get_value<double>("surf/precision")),
        latency_factor_(simgrid::config::get_value<double>("network/latency-factor")) {}

  // A flow just started from src to dst: the last action of the network model.
  void started(const sg::CommPtr& flow, const sg::Host* src, const sg::Host* dst) {
    using simgrid::kernel::resource::ActionHeap;
    const sg::Comm& comm = *flow;
    if (network_ == nullptr) network_ = model_of(comm);
    if (network_ == nullptr || !network_->is_update_lazy()) return;
    auto* actions = network_->get_started_action_set();
    if (actions->empty()) return;
    simgrid::kernel::resource::Action& action = actions->back();
    if (action.get_activity() != comm.get_impl()) return;
    if (action.get_type() != ActionHeap::Type::latency) return;
    // The date SimGrid gave the end of its latency (NetworkCm02Model::comm_action_set_variable):
    // its start plus the route's latency times the latency factor, computed the same way.
    // The comm is held, not the action: a flow may end, and SimGrid free its action, before
    // the repair looks at it (4.0 ends flows before it signals the time's advance), and an
    // action held past its end would keep its flow's share of the links in the solver.
    pending_.push(
        {action.get_start_time() + route_latency(src, dst) * latency_factor_, &action, flow});
  }

  // The clock moved to now and SimGrid ended the latencies due (those within its precision).
  void time_advanced(double now) {
    using simgrid::kernel::resource::Action;
    using simgrid::kernel::resource::ActionHeap;
    while (!pending_.empty() && pending_.top().date < now + precision_) {
      if (pending_.top().flow->get_state() != sg::Activity::State::STARTED) {
        pending_.pop();  // ended: its action is gone
        continue;
      }
      Action* action = pending_.top().action;
      if (action->get_type() == ActionHeap::Type::latency) return;  // not yet: later
      pending_.pop();
      if (action->get_state() == Action::State::STARTED) action->set_bound(action->get_bound());
    }
  }

  bool idle() const { return pending_.empty(); }

 private:
  struct Pending {
    double date;
    simgrid::kernel::resource::Action* action;
    sg::CommPtr flow;
    bool operator>(const Pending& o) const { return date > o.date; }
  };

  // The model whose started actions end with `comm`'s (just started), or nullptr.
  static simgrid::kernel::resource::Model* model_of(const sg::Comm& comm) {
    for (auto* model : sg::Engine::get_instance()->get_all_models()) {
      auto* actions = model->get_started_action_set();
      if (!actions->empty() && actions->back().get_activity() == comm.get_impl()) return model;
    }
    return nullptr;
  }

  double route_latency(const sg::Host* src, const sg::Host* dst) {
    auto [it, fresh] = latencies_.try_emplace({src, dst}, 0.0);
    if (fresh) {
      std::vector<sg::Link*> links;
      src->route_to(dst, links, &it->second);
    }
    return it->second;
  }

  struct PairHash {
    std::size_t operator()(const std::pair<const sg::Host*, const sg::Host*>& p) const {
      return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
  };

  simgrid::kernel::resource::Model* network_ = nullptr;
  double precision_;
  double latency_factor_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending_;
  std::unordered_map<std::pair<const sg::Host*, const sg::Host*>, double, PairHash> latencies_;
};

class Runner {
 public:
  Runner(const Graph& g, const Platform& p, const SimgridPlatform& simgrid, CompletionSink* sink,
         double clock_zero, LatencyEndRepair* repair)
      : graph_(g),
        platform_(p),
        sink_(sink),
        simgrid_(simgrid),
        zero_(clock_zero),
        repair_(repair) {
    times_.start.assign(g.size(), -1);
    times_.end.assign(g.size(), -1);
    pending_ = g.predecessor_counts();
    devices_.assign(simgrid.hosts.size(), DeviceCompute{});
  }

  // Plays the graph from the engine's present time; times are since then.
  NodeTimes run() {
    for (NodeId i = 0; i < graph_.size(); ++i)
      if (pending_[i] == 0) ready_.push_back(i);
    drain();
    sg::Engine::get_instance()->run();
    std::size_t unfinished = 0;
    for (double e : times_.end) unfinished += e < 0;
    if (unfinished > 0)
      throw std::runtime_error(std::to_string(unfinished) +
                               " graph nodes never ran (a dependency cycle)");
    for (double e : times_.end) times_.makespan = std::max(times_.makespan, e);
    if (reported_) std::fprintf(stderr, "\n");
    return std::move(times_);
  }

  void on_activity_done(sg::Activity const& a) {
    void* data = a.get_data<void>();
    if (!data) return;
    const auto slot = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(data) - 1);
    const NodeId id = slots_[slot].node;
    // Activities retired by earlier callbacks are done with SimGrid: release them now
    // (never the one being reported, which SimGrid still holds in this callback, so it is
    // retired here and released at the next completion).
    retired_.clear();
    retired_.push_back(std::move(slots_[slot].activity));
    free_slots_.push_back(slot);
    const GraphNode& n = graph_.node(id);
    if (n.op == Op::compute) --devices_[n.device].execs;
    if (!parts_left_.empty())
      if (auto it = parts_left_.find(id); it != parts_left_.end()) {
        if (--it->second > 0) return;
        parts_left_.erase(it);
      }
    finish(id);
    drain();
  }

 private:
  // An activity in flight and the node it belongs to. Slots are reused, so the engine holds
  // memory for the activities in flight (hundreds), not one pointer per graph node.
  struct Slot {
    sg::ActivityPtr activity;
    NodeId node = 0;
  };

  // The computation a device runs alone is a timer of SimGrid's kernel, not an execution: a
  // device's speed is constant and shared by the executions on it only, so one running alone
  // ends exactly its amount (its seconds at the device's speed) after it starts, and a timer
  // says so without a solver variable, an action and an activity. When a second computation
  // starts on a device whose computation runs as a timer, that one becomes an execution of the
  // work it has left ((end - now) at full speed), and both share the device from then on, as
  // they would have had both been executions from the start.
  struct DeviceCompute {
    simgrid::kernel::timer::Timer* timer = nullptr;  // the computation running alone, if any
    NodeId node = 0;
    double end = 0;  // the engine's clock when it ends
    int execs = 0;   // computations running as executions
  };

  // Starts every ready node; nodes without cost finish at once and may release more.
  void drain() {
    while (!ready_.empty()) {
      NodeId id = ready_.back();
      ready_.pop_back();
      launch(id);
    }
  }

  void launch(NodeId id) {
    const GraphNode& n = graph_.node(id);
    const double now = sg::Engine::get_clock() - zero_;
    times_.start[id] = now;
    const bool free =
        n.op == Op::join || ((n.op == Op::compute || n.op == Op::delay) && n.amount <= 0);
    if (free) {
      finish(id);
      return;
    }
    ++times_.activities;
    if (n.op == Op::compute) {
      DeviceCompute& device = devices_[n.device];
      if (device.execs == 0 && device.timer == nullptr) {
        const int d = n.device;
        device.node = id;
        device.end = sg::Engine::get_clock() + n.amount;
        device.timer = simgrid::kernel::timer::Timer::set(device.end, [this, d, id] {
          devices_[d].timer = nullptr;
          finish(id);
          drain();
        });
        return;
      }
      if (device.timer != nullptr) {
        // The computation running alone shares the device from now on.
        device.timer->remove();
        device.timer = nullptr;
        const double left = device.end - sg::Engine::get_clock();
        if (left > 0) {
          start_exec(device.node, left);
        } else {
          finish(device.node);  // it ends at this instant: nothing left to share
        }
      }
      start_exec(id, n.amount);
    } else if (n.op == Op::delay) {
      // A delay uses no resource: a timer of SimGrid's kernel, outside the solver (an
      // activity on a timer host was a solver variable, and every concurrent delay on that
      // host one component with it).
      simgrid::kernel::timer::Timer::set(sg::Engine::get_clock() + n.amount, [this, id] {
        finish(id);
        drain();
      });
    } else {
      const int flows = transfer_flows(platform_, n.device, n.peer, n.flows);
      if (flows > 1) parts_left_[id] = flows;
      times_.activities += flows - 1;
      for (int f = 0; f < flows; ++f) {
        auto comm = sg::Comm::sendto_init(simgrid_.hosts[n.device], simgrid_.hosts[n.peer]);
        comm->set_payload_size(static_cast<std::uint64_t>(std::llround(n.amount / flows)));
        start(comm, id);
        if (repair_) repair_->started(comm, simgrid_.hosts[n.device], simgrid_.hosts[n.peer]);
      }
    }
  }

  // A computation of `seconds` at the device's full speed, as an execution on the device.
  void start_exec(NodeId id, double seconds) {
    const GraphNode& n = graph_.node(id);
    auto exec = sg::Exec::init();
    exec->set_host(simgrid_.hosts[n.device]);
    exec->set_flops_amount(seconds * flops_per_second);
    ++devices_[n.device].execs;
    start(exec, id);
  }

  template <class Ptr>
  void start(const Ptr& activity, NodeId id) {
    std::uint32_t slot;
    if (free_slots_.empty()) {
      slot = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    slots_[slot].node = id;
    slots_[slot].activity = activity;
    activity->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(slot) + 1));
    activity->start();
  }

  void report_progress() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ < std::chrono::seconds(2)) return;
    last_report_ = now;
    std::fprintf(stderr, "\rhgsim: %zu of %zu graph nodes done (%.0f%%), %.3f s simulated   ",
                 finished_count_, graph_.size(), 100.0 * finished_count_ / graph_.size(),
                 sg::Engine::get_clock() - zero_);
    reported_ = true;
  }

  void finish(NodeId id) {
    times_.end[id] = sg::Engine::get_clock() - zero_;
    if (progress_ && (++finished_count_ & 0xffff) == 0) report_progress();
    if (sink_) sink_->completed(id, times_.start[id], times_.end[id]);
    for (auto s = graph_.successors_begin(id); s != graph_.successors_end(id); ++s)
      if (--pending_[*s] == 0) ready_.push_back(*s);
  }

  const Graph& graph_;
  const Platform& platform_;
  CompletionSink* sink_;
  const SimgridPlatform& simgrid_;
  double zero_ = 0;           // the engine's clock when this graph started
  LatencyEndRepair* repair_;  // inert where SimGrid solves everything at each step (no lazy update)
  NodeTimes times_;
  std::vector<std::uint32_t> pending_;
  std::vector<Slot> slots_;
  std::vector<DeviceCompute> devices_;
  std::vector<std::uint32_t> free_slots_;
  std::unordered_map<NodeId, int> parts_left_;  // multi-flow transfers: flows still running
  std::vector<NodeId> ready_;
  std::vector<sg::ActivityPtr> retired_;
  // Progress on stderr every few seconds of a long run, when stderr is a terminal.
  bool progress_ = ::isatty(2) != 0;
  bool reported_ = false;
  std::size_t finished_count_ = 0;
  std::chrono::steady_clock::time_point last_report_ = std::chrono::steady_clock::now();
};

}  // namespace

void execute_phases(const std::vector<const Graph*>& graphs, const std::vector<int>& order,
                    const Platform& platform, double start_time_s,
                    const std::function<void(std::size_t, const NodeTimes&)>& on_phase,
                    CompletionSink* first_phase_sink) {
  for (const Graph* g : graphs)
    if (!g->finished()) throw std::logic_error("execute: call Graph::finish() first");
  for (int k : order)
    if (k < 0 || static_cast<std::size_t>(k) >= graphs.size())
      throw std::logic_error("execute_phases: a phase names no graph");
  execute_phases([&](std::size_t k) { return k < order.size() ? graphs[order[k]] : nullptr; },
                 platform, start_time_s, on_phase, first_phase_sink);
}

void execute_phases(const NextPhase& next, const Platform& platform, double start_time_s,
                    const std::function<void(std::size_t, const NodeTimes&)>& on_phase,
                    CompletionSink* first_phase_sink) {
  if (engine_used.exchange(true))
    throw std::logic_error("SimGrid runs one engine per process: use sim::simulate()");
  int argc = 3;
  char arg0[] = "hgsim";
  char arg1[] = "--log=root.thresh:critical";
  char arg2[] = "--log=xbt_cfg.thresh:critical";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  sg::Engine engine(&argc, argv);
  sg::Engine::set_config(
      "network/model",
      std::string(platform.network_model == core::NetworkModel::lv08 ? "LV08" : "CM02"));
  sg::Engine::set_config("network/crosstraffic", false);
  sg::Engine::set_config("network/TCP-gamma", 0.0);  // the window is a link of each route
  SimgridPlatform simgrid(platform);
  auto repair = std::make_shared<LatencyEndRepair>();
  sg::Engine::on_time_advance_cb([repair](double) {
    if (!repair->idle()) repair->time_advanced(sg::Engine::get_clock());
  });
  Runner* current = nullptr;
  auto done = [&current](sg::Activity const& a) {
    if (current) current->on_activity_done(a);
  };
  // One completion signal for every activity in 3.32; one per kind in 4.0, which has no
  // Activity::on_completion_cb (the engine starts executions and comms only).
#if SIMGRID_VERSION_MAJOR >= 4
  sg::Comm::on_completion_cb(done);
  sg::Exec::on_completion_cb(done);
#else
  sg::Activity::on_completion_cb(done);
#endif
  if (start_time_s > 0) {
    // The first phase starts start_time_s into the bandwidth traces: the clock runs there
    // with nothing else to do.
    simgrid::kernel::timer::Timer::set(start_time_s, [] {});
    engine.run();
  }
  for (std::size_t k = 0;; ++k) {
    const Graph* graph = next(k);
    if (graph == nullptr) break;
    if (!graph->finished()) throw std::logic_error("execute: call Graph::finish() first");
    NodeTimes times;
    {
      // The runner's own state (a counter per node) is gone before the results are read.
      Runner runner(*graph, platform, simgrid, k == 0 ? first_phase_sink : nullptr,
                    sg::Engine::get_clock(), repair.get());
      current = &runner;
      times = runner.run();
      current = nullptr;
    }
    on_phase(k, times);
  }
}

std::string SimgridVersion::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

SimgridVersion simgrid_version() {
  SimgridVersion v;
  sg_version_get(&v.major, &v.minor, &v.patch);
  return v;
}

NodeTimes execute(const Graph& graph, const Platform& platform, CompletionSink* sink) {
  NodeTimes out;
  execute_phases(
      {&graph}, {0}, platform, 0, [&](std::size_t, const NodeTimes& times) { out = times; }, sink);
  return out;
}

}  // namespace hgsim::sim
