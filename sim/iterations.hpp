// Several training iterations in one simulation (`simulation.iterations`), with DiLoCo's
// outer synchronisation (`strategy.outer_sync`) between them.
//
// The simulation is played as phases on one simulated clock (sim::execute_phases): links,
// bandwidth traces and their position carry over from one phase to the next. A phase is a
// graph covering one or more iterations:
//   step      one iteration (the workload graph);
//   sync      one iteration, then the outer all-reduce of every fragment (blocking DiLoCo:
//             the next iteration waits for it);
//   window f  the outer all-reduce of fragment f started at the phase's start, alongside
//             `overlap_steps` iterations (Streaming DiLoCo: the fragment's update applies
//             when it has arrived, before the iteration after the window).
// Iteration k + 1 starts when every GPU has finished iteration k (the iteration barrier of
// a single-iteration simulation, kept between iterations).
//
// Orders (H inner steps, F fragments, tau overlap steps), per round of H iterations:
//   no outer sync: step, step, ...
//   blocking:      (H - 1) x step, sync
//   streaming:     for f in 0..F-1: (H / F - tau) x step, window f (covering tau iterations)
// An unfinished last round plays steps only (its outer syncs would come after the window).
//
// Reuse: when nothing time-varying is in play (no WAN link has a bandwidth trace), phases
// with the same graph take the same time and move the same bytes (every phase starts with
// idle links), so each distinct phase is played once and counted as often as it occurs.
// A Streaming DiLoCo window is then played with its first m inner steps only: the islands'
// inner steps do not cross the WAN, so once the fragment's sync has ended, each later step
// of the window starts on idle links and takes exactly the step phase's time. m starts at 1
// and doubles (up to tau) while the sync is still running when step m ends; the window's
// other tau - m steps are counted as the step phase. With a trace every phase is played,
// windows whole: the cost is about N x one iteration.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/scenario.hpp"
#include "sim/breakdown.hpp"
#include "sim/engine.hpp"
#include "sim/graph.hpp"
#include "sim/platform.hpp"

namespace hgsim::sim {

struct PhaseGraph {
  Graph graph;
  int steps = 1;                  // iterations the phase covers
  std::vector<NodeId> step_ends;  // joins after each step (all but the phase's end)
  // A window: the first node of each of its steps (a pipeline's bubbles are read per step),
  // the join after its last step, and the fragment it syncs.
  std::vector<NodeId> step_begins;
  NodeId last_step_end = 0;
  int fragment = -1;
  NodeId sync_begin = 0;          // the outer sync's nodes are [sync_begin, sync_end)
  NodeId sync_end = 0;
  int syncs = 0;  // fragments synchronised in the phase
  bool has_sync() const { return sync_end > sync_begin; }
};

// Builds the outer all-reduce of `fragment` into a graph, every device starting after
// `ready`; returns the nodes after which it is done.
using SyncBuilder = std::function<std::vector<NodeId>(Graph&, NodeId ready, int fragment)>;

struct IterationPlan {
  std::vector<PhaseGraph> phases;  // distinct
  std::vector<int> order;          // the phases as training plays them
  int iterations = 0;
  // Streaming DiLoCo windows built with fewer than overlap_steps steps, grown while played
  // (the reuse above): they need the sync builder then.
  int overlap_steps = 0;
  SyncBuilder build_sync;
};

// The order in which training plays the phases (0 = step, 1 = sync, 1 + f = window f): the
// schedule above, the one rule the simulator and the live runner follow.
std::vector<int> phase_order(int iterations, const core::OuterSync& o);

// The outer syncs of `iterations` iterations with outer sync `o`, in the order they start:
// fragment f's pseudo-gradient is taken when `start_after` iterations have finished, and its
// update applies once `applies_after` iterations have finished (blocking: the same; streaming:
// start_after + overlap_steps). From phase_order.
struct OuterSyncEvent {
  int fragment = 0;
  int start_after = 0;
  int applies_after = 0;
};
std::vector<OuterSyncEvent> outer_sync_events(int iterations, const core::OuterSync& o);

// The phases of `iterations` iterations of `step` (finished; it becomes the step phase)
// with outer sync `o`: Streaming DiLoCo windows whole when `time_varying`, else with one
// step, grown by play_iterations. `build_sync` is kept for that: what it refers to must
// outlive the plan's play.
IterationPlan plan_iterations(Graph&& step, int iterations, const core::OuterSync& o,
                              SyncBuilder build_sync, bool time_varying);

// Copies `src` (finished) into `dst`: every node of src without predecessors starts after
// `after`. Returns the join after which every copied node has completed.
NodeId append_graph(Graph& dst, const Graph& src, NodeId after);

using Interval = std::pair<double, double>;
double union_length(std::vector<Interval>& v);  // sorts v
// The most at once, from (time, +count at a start / -count at an end) events; an end and a
// start at one instant do not overlap.
int most_at_once(std::vector<std::pair<double, int>> events);
// Gaps of [lo, hi) not covered by the intervals.
std::vector<Interval> gaps(std::vector<Interval> v, double lo, double hi);

// What the results sum over the phases played (each counted `weight` times).
struct Totals {
  explicit Totals(const Platform& p);
  std::vector<double> compute_s, busy_s, bubble_s;  // per device
  // Per device: its busy time by activity (sim/breakdown.hpp's attribute).
  std::vector<std::array<double, kActivities>> activity_s;
  std::vector<double> link_bytes, link_busy_s;  // per platform link
  std::vector<int> link_max_flows;              // per WAN link: the most flows at once in any phase
  double codec_s = 0;
  double time_s = 0;  // simulated time of the iterations
  std::vector<double> iteration_s;
  int outer_syncs = 0;         // fragment all-reduces
  int composed_steps = 0;      // window steps counted as the step phase (the reuse above)
  double outer_time_s = 0;     // from the sync's first transfer to its last node
  double outer_exposed_s = 0;  // how long the phase ran past the end of its steps
  // Per device: the pipeline bubbles of the first phase played (for the trace).
  std::vector<std::vector<Interval>> first_bubbles;
  bool first = true;
  std::size_t activities = 0;  // activities played (NodeTimes::activities; each phase once)
  std::size_t phases_played = 0;
  // `again`: times already added once, counted again (no activities played).
  void add(const PhaseGraph& phase, const NodeTimes& times, const Platform& platform, int weight,
           bool again = false);
};

// Plays the plan (reusing phases unless `time_varying`) from `start_time_s` into the traces.
Totals play_iterations(const IterationPlan& plan, const Platform& platform, bool time_varying,
                       double start_time_s, CompletionSink* first_phase_sink);

// Whether any link of the platform has a bandwidth trace.
bool time_varying(const Platform& platform);

// ---- results ---------------------------------------------------------------------------

// iterations_simulated; iteration_times_s (up to 1000 iterations); iteration_time_stats
// {mean, p50, p99, min, max} (more than one iteration); how they were played.
void add_iteration_results(core::Json& result, const Totals& totals, int iterations,
                           bool time_varying);

// outer_sync: {method, count, bytes, raw_bytes, time_s, exposed_s, ...} when the plan has
// one. `bytes_per_sync[f]`: WAN bytes of one all-reduce of fragment f.
struct OuterBytes {
  double raw = 0;
  double wire = 0;
};
void add_outer_sync_results(core::Json& result, const core::OuterSync& o, const Totals& totals,
                            const std::vector<OuterBytes>& bytes_per_sync,
                            const IterationPlan& plan, const std::string& codec);

// The lines format_results prints about the iterations, the outer sync and time to train.
std::string format_iterations(const core::Json& result);

// tokens_per_day, and with training.tokens or training.iterations: time_to_train_s, both
// extrapolated from the mean simulated iteration; with training.failures also
// time_to_train.failures (expected_failure_cost) over the `gpus` the plan uses.
void add_time_to_train(core::Json& result, const core::Training& training,
                       double tokens_per_iteration, double mean_iteration_s, int iterations,
                       int gpus);

// What failures cost a run of `work_s` seconds of failure-free training on `gpus` GPUs,
// to first order (Young 1974, "A first order approximation to the optimum checkpoint
// interval", CACM 17(9); Daly 2006, FGCS 22(3), eq. 1): the job fails every M = gpu_mtbf /
// gpus; checkpoints every `checkpoint_interval` stall it `checkpoint_cost` each; a failure
// loses half an interval of work on average plus `restart_time`; failures over the run =
// its hours x gpus / gpu_mtbf. Valid while the interval and the restart are short against M
// (`first_order_valid`).
struct FailureCost {
  double job_mtbf_s = 0;             // M
  double checkpoints = 0;            // work_s / (interval - cost)
  double checkpoint_overhead_s = 0;  // checkpoints x cost
  double failures = 0;               // (work + checkpoint overhead) / M
  double lost_per_failure_s = 0;     // interval / 2 + restart
  double lost_to_failures_s = 0;
  double expected_time_s = 0;  // work + checkpoint overhead + lost to failures
  // Young's optimal interval sqrt(2 cost M) (0 without a checkpoint cost).
  double young_interval_s = 0;
  bool first_order_valid = true;  // interval + restart under M / 2
};
FailureCost expected_failure_cost(const core::FailureModel& m, double work_s, int gpus);

}  // namespace hgsim::sim
