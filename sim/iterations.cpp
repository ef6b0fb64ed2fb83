#include "sim/iterations.hpp"

#include <string>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

namespace hgsim::sim {

namespace {

// Sorts intervals as std::sort would, in time linear in their number when they come nearly
// sorted, as the results read them (by node, and a device's nodes are mostly built in the
// order they run: 18 k descents among 24 M intervals in scenarios/scale/hetero-256-full.yaml):
// the sorted runs are found and merged pairwise.
void sort_intervals(std::vector<Interval>& v) {
  std::vector<std::size_t> bounds{0};
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] < v[i - 1]) bounds.push_back(i);
  bounds.push_back(v.size());
  if (bounds.size() <= 2) return;
  if (bounds.size() > v.size() / 8) {  // far from sorted: merging runs would not pay
    std::sort(v.begin(), v.end());
    return;
  }
  while (bounds.size() > 2) {
    const std::size_t runs = bounds.size() - 1;
    std::vector<std::size_t> merged{0};
    for (std::size_t r = 0; r + 1 < runs; r += 2) {
      std::inplace_merge(v.begin() + bounds[r], v.begin() + bounds[r + 1],
                         v.begin() + bounds[r + 2]);
      merged.push_back(bounds[r + 2]);
    }
    if (runs % 2 == 1) merged.push_back(bounds[runs]);
    bounds = std::move(merged);
  }
}

}  // namespace

double union_length(std::vector<Interval>& v) {
  sort_intervals(v);
  double total = 0, start = 0, end = -1;
  for (const auto& [a, b] : v) {
    if (a > end) {
      if (end > start) total += end - start;
      start = a;
      end = b;
    } else {
      end = std::max(end, b);
    }
  }
  if (end > start) total += end - start;
  return total;
}

std::vector<Interval> gaps(std::vector<Interval> v, double lo, double hi) {
  sort_intervals(v);
  std::vector<Interval> out;
  double at = lo;
  for (const auto& [a, b] : v) {
    if (a > at) out.emplace_back(at, std::min(a, hi));
    at = std::max(at, b);
    if (at >= hi) break;
  }
  if (at < hi) out.emplace_back(at, hi);
  return out;
}

NodeId append_graph(Graph& dst, const Graph& src, NodeId after) {
  std::vector<NodeId> map(src.size());
  std::vector<int> labels;
  auto label = [&](int l) {
    if (l < 0) return l;
    if (static_cast<std::size_t>(l) >= labels.size()) labels.resize(l + 1, -2);
    if (labels[l] == -2) labels[l] = dst.label(src.label_text(l));
    return labels[l];
  };
  for (NodeId id = 0; id < src.size(); ++id) {
    const GraphNode& n = src.node(id);
    switch (n.op) {
      case Op::compute:
        map[id] = dst.compute(n.device, n.amount, n.work, label(n.label), n.micro_batch);
        break;
      case Op::delay:
        map[id] = dst.delay(n.device, n.amount, n.work, label(n.label), n.micro_batch);
        break;
      case Op::transfer:
        map[id] = dst.transfer(n.device, n.peer, n.amount, n.work, label(n.label), n.micro_batch,
                               n.flows);
        break;
      case Op::join:
        map[id] = dst.join();
        break;
    }
  }
  const auto predecessors = src.predecessor_counts();
  const NodeId end = dst.join();
  for (NodeId id = 0; id < src.size(); ++id) {
    if (predecessors[id] == 0) dst.edge(after, map[id]);
    if (src.successors_begin(id) == src.successors_end(id)) dst.edge(map[id], end);
    for (auto s = src.successors_begin(id); s != src.successors_end(id); ++s)
      dst.edge(map[id], map[*s]);
  }
  return end;
}

namespace {

// Adds the outer sync of `fragment` after `ready`, recording its node range.
void add_sync(PhaseGraph& phase, NodeId ready, int fragment, const SyncBuilder& build_sync) {
  phase.sync_begin = static_cast<NodeId>(phase.graph.size());
  const auto done = build_sync(phase.graph, ready, fragment);
  const NodeId end = phase.graph.join();
  for (NodeId n : done) phase.graph.edge(n, end);
  phase.sync_end = static_cast<NodeId>(phase.graph.size());
}

// Streaming DiLoCo's window f with its first `steps` inner steps: the fragment's sync and
// the steps start together.
PhaseGraph streaming_window(const Graph& step, int fragment, int steps,
                            const SyncBuilder& build_sync) {
  PhaseGraph window;
  window.steps = steps;
  window.fragment = fragment;
  const NodeId start = window.graph.join();
  add_sync(window, start, fragment, build_sync);
  window.syncs = 1;
  NodeId at = start;
  for (int k = 0; k < steps; ++k) {
    window.step_begins.push_back(static_cast<NodeId>(window.graph.size()));
    at = append_graph(window.graph, step, at);
    if (k + 1 < steps) window.step_ends.push_back(at);
  }
  window.last_step_end = at;
  window.graph.finish();
  return window;
}

}  // namespace

std::vector<int> phase_order(int iterations, const core::OuterSync& o) {
  const int H = o.inner_steps;
  if (!o.enabled() || iterations < H) return std::vector<int>(std::max(iterations, 0), 0);
  std::vector<int> order;
  const int rounds = iterations / H;
  for (int r = 0; r < rounds; ++r) {
    if (o.fragments == 1) {
      order.insert(order.end(), H - 1, 0);
      order.push_back(1);
    } else {
      for (int f = 0; f < o.fragments; ++f) {
        order.insert(order.end(), H / o.fragments - o.overlap_steps, 0);
        order.push_back(1 + f);
      }
    }
  }
  order.insert(order.end(), iterations - rounds * H, 0);
  return order;
}

std::vector<OuterSyncEvent> outer_sync_events(int iterations, const core::OuterSync& o) {
  std::vector<OuterSyncEvent> out;
  int done = 0;
  for (int phase : phase_order(iterations, o)) {
    if (phase == 0) {
      ++done;
    } else if (o.fragments == 1) {  // one iteration, then the whole model syncs
      ++done;
      out.push_back({0, done, done});
    } else {  // window f: the sync starts with the phase, applies after its overlap steps
      out.push_back({phase - 1, done, done + o.overlap_steps});
      done += o.overlap_steps;
    }
  }
  return out;
}

IterationPlan plan_iterations(Graph&& step, int iterations, const core::OuterSync& o,
                              SyncBuilder build_sync, bool time_varying) {
  IterationPlan plan;
  plan.iterations = iterations;
  plan.phases.emplace_back();
  const int H = o.inner_steps;
  if (!o.enabled() || iterations < H) {
    plan.phases[0].graph = std::move(step);
    plan.order.assign(iterations, 0);
    return plan;
  }
  if (o.fragments == 1) {
    PhaseGraph sync;
    const NodeId stepped = append_graph(sync.graph, step, sync.graph.join());
    sync.syncs = o.fragments;
    add_sync(sync, stepped, 0, build_sync);
    sync.graph.finish();
    plan.phases.push_back(std::move(sync));
  } else {
    plan.overlap_steps = o.overlap_steps;
    const int steps = time_varying ? o.overlap_steps : 1;
    for (int f = 0; f < o.fragments; ++f)
      plan.phases.push_back(streaming_window(step, f, steps, build_sync));
  }
  plan.order = phase_order(iterations, o);
  plan.phases[0].graph = std::move(step);
  plan.build_sync = std::move(build_sync);
  return plan;
}

bool time_varying(const Platform& platform) {
  return std::any_of(platform.links.begin(), platform.links.end(),
                     [](const Link& l) { return !l.trace.empty(); });
}

int most_at_once(std::vector<std::pair<double, int>> events) {
  std::sort(events.begin(), events.end());
  int now = 0, most = 0;
  for (const auto& [t, change] : events) {
    now += change;
    most = std::max(most, now);
  }
  return most;
}

Totals::Totals(const Platform& p)
    : compute_s(p.device_count()),
      busy_s(p.device_count()),
      bubble_s(p.device_count()),
      activity_s(p.device_count()),
      link_bytes(p.links.size()),
      link_busy_s(p.links.size()),
      link_max_flows(p.links.size(), 0) {}

namespace {

// Sizes every interval list Totals::add fills, so that none of them grows by copying itself
// (at full fidelity they hold tens of millions of intervals).
void reserve_intervals(const Graph& graph, const Platform& platform,
                       std::vector<std::vector<Interval>>& compute,
                       std::vector<std::vector<Interval>>& comm,
                       std::vector<std::vector<Interval>>& link_busy) {
  std::vector<std::size_t> computes(compute.size()), comms(comm.size()), links(link_busy.size());
  for (NodeId id = 0; id < graph.size(); ++id) {
    const GraphNode& n = graph.node(id);
    if (n.op == Op::compute) {
      ++computes[n.device];
    } else if (n.op == Op::delay && n.work != Work::pacing) {
      ++comms[n.device];
    } else if (n.op == Op::transfer) {
      ++comms[n.device];
      ++comms[n.peer];
      platform.for_each_hop(n.device, n.peer, [&links](const Hop& h) { ++links[h.link]; });
    }
  }
  for (std::size_t d = 0; d < compute.size(); ++d) {
    compute[d].reserve(computes[d]);
    comm[d].reserve(comms[d]);
  }
  for (std::size_t l = 0; l < link_busy.size(); ++l) link_busy[l].reserve(links[l]);
}

// The durations of the iterations a played phase covers.
std::vector<double> step_durations(const PhaseGraph& phase, const NodeTimes& times) {
  std::vector<double> out;
  double at = 0;
  for (NodeId n : phase.step_ends) {
    out.push_back(times.end[n] - at);
    at = times.end[n];
  }
  out.push_back(times.makespan - at);
  return out;
}

}  // namespace

void Totals::add(const PhaseGraph& phase, const NodeTimes& times, const Platform& platform,
                 int weight, bool again) {
  const Graph& graph = phase.graph;
  const double T = times.makespan;
  const int devices = platform.device_count();
  std::vector<std::vector<Interval>> compute(devices), comm(devices);
  // Per step of the phase and device: its pipeline's span, where its bubbles are.
  const std::size_t steps = std::max<std::size_t>(1, phase.step_begins.size());
  std::vector<double> pipe_start(steps * devices, T), pipe_end(steps * devices, 0);
  std::size_t step = 0;
  std::vector<std::vector<Interval>> link_busy(platform.links.size());
  std::vector<std::vector<std::pair<double, int>>> link_flows(platform.links.size());
  reserve_intervals(graph, platform, compute, comm, link_busy);
  std::vector<std::vector<TimedActivity>> timed(devices);
  for (int d = 0; d < devices; ++d) timed[d].reserve(compute[d].capacity() + comm[d].capacity());
  double sync_start = T, sync_last = 0, steps_end = 0;
  for (NodeId id = 0; id < graph.size(); ++id) {
    const GraphNode& n = graph.node(id);
    const double a = times.start[id], b = times.end[id];
    while (step + 1 < phase.step_begins.size() && id >= phase.step_begins[step + 1]) ++step;
    const bool in_sync = id >= phase.sync_begin && id < phase.sync_end;
    if (in_sync) {
      if (n.op != Op::join) sync_start = std::min(sync_start, a);
      sync_last = std::max(sync_last, b);
    } else {
      steps_end = std::max(steps_end, b);
    }
    Activity activity;
    if (activity_of(n.op, n.work, activity)) {
      timed[n.device].push_back({a, b, activity});
      if (n.op == Op::transfer) timed[n.peer].push_back({a, b, activity});
    }
    if (n.op == Op::compute) {
      compute[n.device].emplace_back(a, b);
      if (n.work == Work::codec) codec_s += weight * (b - a);
      if (n.work == Work::forward || n.work == Work::backward || n.work == Work::recompute) {
        const std::size_t at = step * devices + n.device;
        pipe_start[at] = std::min(pipe_start[at], a);
        pipe_end[at] = std::max(pipe_end[at], b);
      }
    } else if (n.op == Op::delay && n.work != Work::pacing) {
      comm[n.device].emplace_back(a, b);
    } else if (n.op == Op::transfer) {
      comm[n.device].emplace_back(a, b);
      comm[n.peer].emplace_back(a, b);
      platform.for_each_hop(n.device, n.peer, [&](const Hop& h) {
        link_bytes[h.link] += weight * n.amount;
        link_busy[h.link].emplace_back(a, b);
        if (platform.links[h.link].kind == LinkKind::wan) {
          link_flows[h.link].emplace_back(a, n.flows);
          link_flows[h.link].emplace_back(b, -n.flows);
        }
      });
    }
  }
  if (first) first_bubbles.assign(devices, {});
  for (int d = 0; d < devices; ++d) {
    // Each list sorted on its own and merged: the busy intervals are sorted once, for both
    // their union and their gaps.
    sort_intervals(compute[d]);
    sort_intervals(comm[d]);
    std::vector<Interval> busy(compute[d].size() + comm[d].size());
    std::merge(compute[d].begin(), compute[d].end(), comm[d].begin(), comm[d].end(), busy.begin());
    std::vector<Interval>().swap(comm[d]);
    compute_s[d] += weight * union_length(compute[d]);
    std::vector<Interval>().swap(compute[d]);
    attribute(timed[d], weight, activity_s[d]);
    std::vector<TimedActivity>().swap(timed[d]);
    busy_s[d] += weight * union_length(busy);
    for (std::size_t k = 0; k < steps; ++k) {
      const double lo = pipe_start[k * devices + d], hi = pipe_end[k * devices + d];
      if (hi <= lo) continue;
      auto bubbles = k + 1 == steps ? gaps(std::move(busy), lo, hi) : gaps(busy, lo, hi);
      for (const auto& [a, b] : bubbles) bubble_s[d] += weight * (b - a);
      if (first) first_bubbles[d].insert(first_bubbles[d].end(), bubbles.begin(), bubbles.end());
    }
  }
  for (std::size_t l = 0; l < link_busy.size(); ++l) {
    link_busy_s[l] += weight * union_length(link_busy[l]);
    link_max_flows[l] = std::max(link_max_flows[l], most_at_once(std::move(link_flows[l])));
  }
  time_s += weight * T;
  if (!again) {
    activities += times.activities;
    ++phases_played;
  }
  if (phase.has_sync()) {
    outer_syncs += weight * phase.syncs;
    outer_time_s += weight * std::max(0.0, sync_last - sync_start);
    outer_exposed_s += weight * std::max(0.0, T - steps_end);
  }
  first = false;
}

Totals play_iterations(const IterationPlan& plan, const Platform& platform, bool varying,
                       double start_time_s, CompletionSink* first_phase_sink) {
  Totals totals(platform);
  std::vector<const Graph*> graphs;
  for (const PhaseGraph& p : plan.phases) graphs.push_back(&p.graph);
  if (varying) {
    execute_phases(
        graphs, plan.order, platform, start_time_s,
        [&](std::size_t k, const NodeTimes& times) {
          const PhaseGraph& phase = plan.phases[plan.order[k]];
          totals.add(phase, times, platform, 1);
          for (double t : step_durations(phase, times)) totals.iteration_s.push_back(t);
        },
        first_phase_sink);
    return totals;
  }
  // Nothing time-varying: each distinct phase once, counted as often as it occurs; windows
  // grown until their sync has ended by their last step, their other steps counted as the
  // step phase (sim/iterations.hpp).
  std::map<int, int> count;
  std::vector<int> distinct;
  for (int k : plan.order)
    if (count[k]++ == 0) distinct.push_back(k);
  std::vector<std::vector<double>> durations(plan.phases.size());
  std::vector<int> composed(plan.phases.size(), 0);  // per window: steps counted as the step's
  std::optional<PhaseGraph> grown;                   // the window being played again, larger
  const bool step_in_order = count.count(0) > 0;
  std::size_t next_distinct = 0;
  int playing = -1;     // the phase being played
  int step_copies = 0;  // window steps to count as the step phase
  NodeTimes step_times;  // the step phase's, kept while windows may still count copies of it
  auto next = [&](std::size_t) -> const Graph* {
    if (grown) return &grown->graph;
    if (next_distinct < distinct.size()) {
      playing = distinct[next_distinct++];
      return &plan.phases[playing].graph;
    }
    if (step_in_order || step_copies == 0 || playing == 0) return nullptr;
    playing = 0;  // every step is in a window: the step phase is played for the copies
    return &plan.phases[0].graph;
  };
  auto on_phase = [&](std::size_t, const NodeTimes& times) {
    const PhaseGraph& phase = grown ? *grown : plan.phases[playing];
    const int p = playing;
    if (phase.fragment >= 0 && phase.steps < plan.overlap_steps) {
      if (times.end[phase.sync_end - 1] > times.end[phase.last_step_end]) {
        // The sync outlasts the steps played: the next one would not start on idle links.
        const int fragment = phase.fragment;
        const int steps = std::min(2 * phase.steps, plan.overlap_steps);
        grown = streaming_window(plan.phases[0].graph, fragment, steps, plan.build_sync);
        return;
      }
      composed[p] = plan.overlap_steps - phase.steps;
      step_copies += count[p] * composed[p];
    }
    const int weight = p == 0 && !step_in_order ? step_copies : count[p];
    if (p == 0 && !step_in_order) step_copies = 0;
    totals.add(phase, times, platform, weight);
    durations[p] = step_durations(phase, times);
    if (p == 0 && step_in_order && plan.overlap_steps > 0) step_times = times;
    grown.reset();
  };
  execute_phases(next, platform, start_time_s, on_phase, first_phase_sink);
  if (step_copies > 0) totals.add(plan.phases[0], step_times, platform, step_copies, true);
  for (std::size_t p = 0; p < composed.size(); ++p) {
    if (composed[p] == 0) continue;
    totals.composed_steps += count[static_cast<int>(p)] * composed[p];
    durations[p].insert(durations[p].end(), composed[p], durations[0].front());
  }
  totals.iteration_s.reserve(plan.iterations);
  for (int k : plan.order)
    for (double t : durations[k]) totals.iteration_s.push_back(t);
  return totals;
}

void add_iteration_results(core::Json& result, const Totals& totals, int iterations, bool varying) {
  result["iterations_simulated"] = iterations;
  if (iterations <= 1) return;
  const auto& t = totals.iteration_s;
  if (t.size() <= 1000) result["iteration_times_s"] = t;
  std::vector<double> sorted = t;
  std::sort(sorted.begin(), sorted.end());
  // Nearest-rank percentiles.
  auto rank = [&](double q) {
    const auto k = static_cast<std::size_t>(std::ceil(q * sorted.size()));
    return sorted[std::min(sorted.size() - 1, k == 0 ? 0 : k - 1)];
  };
  result["iteration_time_stats"] = {{"mean", totals.time_s / iterations},
                                    {"p50", rank(0.5)},
                                    {"p99", rank(0.99)},
                                    {"min", sorted.front()},
                                    {"max", sorted.back()}};
  result["iterations_played"] =
      varying ? "every iteration (a bandwidth trace makes them differ)"
              : "each distinct iteration once, counted as often as it occurs (nothing "
                "time-varying: identical iterations take identical times)";
  if (totals.composed_steps > 0) {
    result["iterations_composed"] = totals.composed_steps;
    result["iterations_played"] =
        result["iterations_played"].get<std::string>() +
        "; " + std::to_string(totals.composed_steps) +
        " Streaming DiLoCo window steps that start after their fragment's sync has ended "
        "counted as the plain step (they start on idle links)";
  }
}

void add_outer_sync_results(core::Json& result, const core::OuterSync& o, const Totals& totals,
                            const std::vector<OuterBytes>& bytes_per_sync,
                            const IterationPlan& plan, const std::string& codec) {
  if (!o.enabled()) return;
  OuterBytes moved;
  // Phase p > 0 syncs fragment p - 1 (blocking: fragment 0, the whole model).
  for (int k : plan.order) {
    if (k == 0) continue;
    moved.raw += bytes_per_sync[k - 1].raw;
    moved.wire += bytes_per_sync[k - 1].wire;
  }
  result["outer_sync"] = {
      {"method", o.fragments > 1 ? "streaming diloco" : "diloco"},
      {"inner_steps", o.inner_steps},
      {"fragments", o.fragments},
      {"overlap_steps", o.fragments > 1 ? o.overlap_steps : 0},
      {"codec", codec},
      {"count", totals.outer_syncs},
      {"bytes", moved.wire},
      {"raw_bytes", moved.raw},
      {"bytes_per_iteration", moved.wire / plan.iterations},
      {"time_s", totals.outer_time_s},
      {"exposed_s", totals.outer_exposed_s},
      {"note",
       "count: fragment all-reduces in the simulated iterations; bytes: what crossed the WAN, "
       "coded (raw_bytes before the codec); time_s: from each all-reduce's first node to its "
       "last; exposed_s: how long iterations ran past the end of their inner steps waiting for "
       "it"}};
}

std::string format_iterations(const core::Json& r) {
  std::string out;
  char line[512];
  auto duration = [](double s) { return core::human_duration(core::Seconds(s)); };
  if (r.contains("iteration_time_stats")) {
    const auto& st = r["iteration_time_stats"];
    std::snprintf(line, sizeof line,
                  "  %d iterations simulated: mean %s, p50 %s, p99 %s, min %s, max %s\n",
                  r["iterations_simulated"].get<int>(), duration(st["mean"]).c_str(),
                  duration(st["p50"]).c_str(), duration(st["p99"]).c_str(),
                  duration(st["min"]).c_str(), duration(st["max"]).c_str());
    out += line;
  }
  if (r.contains("outer_sync")) {
    const auto& o = r["outer_sync"];
    std::snprintf(line, sizeof line,
                  "  outer sync (%s, H = %d, %d fragment%s, codec %s): %d all-reduces moved %s "
                  "over the WAN in %s, %s of it exposed\n",
                  o["method"].get<std::string>().c_str(), o["inner_steps"].get<int>(),
                  o["fragments"].get<int>(), o["fragments"].get<int>() == 1 ? "" : "s",
                  o["codec"].get<std::string>().c_str(), o["count"].get<int>(),
                  core::human_size(core::Bytes(o["bytes"].get<double>())).c_str(),
                  duration(o["time_s"]).c_str(), duration(o["exposed_s"]).c_str());
    out += line;
  }
  if (r.contains("time_to_train_s")) {
    std::snprintf(
        line, sizeof line, "  time to train %.3g tokens: %s (%s); %.3g tokens per day\n",
        r["time_to_train"]["tokens"].get<double>(), duration(r["time_to_train_s"]).c_str(),
        r["time_to_train"]["note"].get<std::string>().c_str(), r["tokens_per_day"].get<double>());
    out += line;
  }
  if (r.contains("time_to_train") && r["time_to_train"].contains("failures")) {
    const auto& f = r["time_to_train"]["failures"];
    std::snprintf(
        line, sizeof line,
        "  with failures (one per %s of a GPU; the job's %d GPUs: one every %s): %.3g "
        "expected, %s lost to them (%s each) and %s to %.3g checkpoints; expected "
        "time to train %s\n",
        duration(f["gpu_mtbf_s"]).c_str(), f["gpus"].get<int>(), duration(f["job_mtbf_s"]).c_str(),
        f["failures"].get<double>(), duration(f["lost_to_failures_s"]).c_str(),
        duration(f["lost_per_failure_s"]).c_str(), duration(f["checkpoint_overhead_s"]).c_str(),
        f["checkpoints"].get<double>(), duration(f["expected_time_s"]).c_str());
    out += line;
    if (f.contains("young_interval_s")) {
      std::snprintf(line, sizeof line,
                    "  Young's optimal checkpoint interval sqrt(2 x checkpoint cost x job MTBF): "
                    "%s (this run checkpoints every %s)\n",
                    duration(f["young_interval_s"]).c_str(),
                    duration(f["checkpoint_interval_s"]).c_str());
      out += line;
    }
    if (!f["first_order_valid"].get<bool>())
      out +=
          "  warning: the checkpoint interval and restart are not short against the job's "
          "MTBF; the first-order failure model understates the loss\n";
  }
  return out.empty() ? out : out + "\n";
}

FailureCost expected_failure_cost(const core::FailureModel& m, double work_s, int gpus) {
  FailureCost c;
  const double interval = m.checkpoint_interval.value(), cost = m.checkpoint_cost.value();
  c.job_mtbf_s = m.gpu_mtbf.value() / std::max(gpus, 1);
  c.checkpoints = work_s / (interval - cost);
  c.checkpoint_overhead_s = c.checkpoints * cost;
  c.failures = (work_s + c.checkpoint_overhead_s) / c.job_mtbf_s;
  c.lost_per_failure_s = interval / 2 + m.restart_time.value();
  c.lost_to_failures_s = c.failures * c.lost_per_failure_s;
  c.expected_time_s = work_s + c.checkpoint_overhead_s + c.lost_to_failures_s;
  c.young_interval_s = std::sqrt(2 * cost * c.job_mtbf_s);
  c.first_order_valid = interval + m.restart_time.value() < c.job_mtbf_s / 2;
  return c;
}

namespace {

void add_failures(core::Json& time_to_train, const core::FailureModel& m, double work_s, int gpus) {
  const FailureCost c = expected_failure_cost(m, work_s, gpus);
  core::Json j = {{"gpus", gpus},
                  {"gpu_mtbf_s", m.gpu_mtbf.value()},
                  {"job_mtbf_s", c.job_mtbf_s},
                  {"checkpoint_interval_s", m.checkpoint_interval.value()},
                  {"checkpoint_cost_s", m.checkpoint_cost.value()},
                  {"restart_time_s", m.restart_time.value()},
                  {"checkpoints", c.checkpoints},
                  {"checkpoint_overhead_s", c.checkpoint_overhead_s},
                  {"failures", c.failures},
                  {"lost_per_failure_s", c.lost_per_failure_s},
                  {"lost_to_failures_s", c.lost_to_failures_s},
                  {"expected_time_s", c.expected_time_s},
                  {"first_order_valid", c.first_order_valid},
                  {"note",
                   "first order (Young 1974, CACM 17(9); Daly 2006, FGCS 22(3)): failures = "
                   "GPUs x hours / gpu_mtbf; each loses checkpoint_interval / 2 + "
                   "restart_time; checkpoints stall checkpoint_cost each"}};
  if (m.checkpoint_cost.value() > 0) j["young_interval_s"] = c.young_interval_s;
  time_to_train["failures"] = j;
}

}  // namespace

void add_time_to_train(core::Json& result, const core::Training& training,
                       double tokens_per_iteration, double mean_iteration_s, int iterations,
                       int gpus) {
  result["tokens_per_day"] = tokens_per_iteration / mean_iteration_s * 86400;
  double to_train = 0;
  if (training.iterations) to_train = static_cast<double>(*training.iterations);
  if (training.tokens) to_train = std::ceil(*training.tokens / tokens_per_iteration);
  const std::string window = "extrapolated: the mean of " + std::to_string(iterations) +
                             " simulated iteration" + (iterations == 1 ? "" : "s");
  if (to_train <= 0) {
    result["time_to_train"] = {{"note", window + "; give training.tokens or training.iterations "
                                                 "for a time to train"}};
    return;
  }
  if (!std::isfinite(to_train * mean_iteration_s)) {  // JSON has no infinity
    result["time_to_train"] = {{"note", window + "; the time to train overflows a double"}};
    return;
  }
  result["time_to_train_s"] = to_train * mean_iteration_s;
  result["time_to_train"] = {{"iterations", to_train},
                             {"tokens", to_train * tokens_per_iteration},
                             {"tokens_per_iteration", tokens_per_iteration},
                             {"note", window + " x the iterations to train"}};
  if (training.failures)
    add_failures(result["time_to_train"], *training.failures, to_train * mean_iteration_s, gpus);
}

}  // namespace hgsim::sim
