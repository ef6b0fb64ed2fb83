// The planner: enumerates the search space (space.hpp) with pruning, partitions layers
// (partition.hpp), ranks candidates with the analytic model (cost_model.hpp), then
// simulates the best K and keeps the one the simulator finds fastest.
//
// Pruning: per cluster only the stage shapes with the highest layer throughput (and the
// one with fewest stages); per group only the cheapest cluster orders along the WAN; a
// configuration is skipped when its compute lower bound (micro-batches per replica x
// layers / the group's layer throughput) cannot beat the worst of the best kept so far;
// mixtures combine only the best few configurations of each group. A time budget stops
// the enumeration early (the best found so far is then verified).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "planner/cost_model.hpp"
#include "sim/results.hpp"
#include "sim/simulate.hpp"

namespace hgsim::planner {

struct Options {
  int verify = 3;                    // candidates simulated
  double time_budget_s = 60;         // for the enumeration (verification comes on top)
  std::ostream* progress = nullptr;  // progress lines on long searches
  std::vector<int> micro_batches{1, 2, 4};
  // Then larger micro-batch sizes (Search::run: one per round while the best uses one of the
  // two largest tried); the baselines use micro_batches alone.
  bool grow_micro_batches = true;
  // hgsim plan --exhaustive: every dp dividing the micro-batch and context parallelism in the
  // stage shapes, every shape and order kept (no caps), every micro-batch size dividing the
  // batch up to 64, and verification from the model's best down until the model's measured
  // error rules out the rest (plan()).
  bool exhaustive = false;
  int orders_per_group = 4;    // cluster orders tried per group
  int shapes_per_cluster = 8;  // stage shapes tried per cluster (tp x dp: 4 x 2 at most)
  int top_per_group = 3;       // configurations per group kept for mixtures
  // Threads for the search's units, and simulations verified side by side (one child process
  // each); 0: one per core.
  int jobs = 0;
};

struct Candidate {
  core::Plan plan;
  double analytic_s = 0;    // iteration time (with outer sync: inner step + amortised sync)
  std::string description;  // "pipeline beijing > shanghai, 4 replicas"
  // Progress per token relative to synchronous training (planner/outer_sync_cost.hpp
  // token_efficiency): 1, or planner.diloco_token_efficiency for a plan with outer sync.
  double efficiency = 1;
  // What plans are ranked by: time to the same training progress.
  double effective_s() const { return analytic_s / efficiency; }
};

struct Verified {
  Candidate candidate;
  double simulated_s = 0;
  sim::Results result;  // the simulator's results
  std::string fidelity;
  // Screened: simulated at folded fidelity where hgsim run would play it at full (plan():
  // only the candidates that could still win are simulated again at full).
  bool screened = false;
  int iterations = 1;  // simulated (a plan with outer sync: at least one round of H)
  double effective_s() const { return simulated_s / candidate.efficiency; }
};

struct SearchResult {
  std::vector<Candidate> ranked;  // best analytic first (up to 64)
  // The best candidate of each family (the set of clusters it uses), best first.
  std::vector<Candidate> family_best;
  std::vector<Verified> verified;
  std::optional<Verified> best;  // by effective (simulated) time
  // When the best plan has outer sync: the best synchronous plan verified, for comparison.
  std::optional<Verified> best_synchronous;
  long evaluated = 0;  // candidates costed by the analytic model
  long rejected_memory = 0;
  // Sets of clusters searched as one group (every set joined by the WAN up to a size; a note
  // says when larger ones were left out).
  long cluster_sets = 0;
  double search_s = 0;
  double verify_s = 0;
  bool budget_exhausted = false;
  // When no plan fits: which constraint binds and what would make it fit.
  std::vector<std::string> why_not;
  // What the user asked that the result does not give, and why (printed as notes).
  std::vector<std::string> notes;
};

// The enumeration alone: candidates ranked by the analytic model.
SearchResult search(const Context& ctx, const Options& options);

// Search, then simulate the best `options.verify`, and the best plan of up to as many other
// families (sets of clusters used) within 1.5 x of the best analytic time (a hedge against
// the model's bias on one family), and choose by simulated time.
SearchResult plan(const Context& ctx, const Options& options);

// What the planner decided about DiLoCo when the scenario's `planner:` allows it, for the
// report: chosen (its time to the same progress against the best synchronous plan's),
// rejected (the same comparison, simulated when a DiLoCo candidate was verified, else by the
// analytic model) or not tried (no candidate could have outer sync). Empty verdict when
// DiLoCo is not allowed.
struct DilocoDecision {
  std::string verdict;       // "chosen", "rejected", "not verified", "not tried", or empty
  std::string text;          // one sentence with the two times and the plans compared
  double diloco_s = 0;       // the best DiLoCo plan's time to the same progress
  double synchronous_s = 0;  // the best synchronous plan's iteration time
  bool simulated = false;    // both times simulated (else analytic)
  std::string diloco_description;
};
DilocoDecision diloco_decision(const Context& ctx, const SearchResult& r);

// Grad sync, bucket and the other plan-wide settings the planner uses for every plan.
core::Plan plan_skeleton(core::Schedule schedule, int micro_batch, int virtual_stages);

// Checks a plan like `hgsim run` would (check_plan, the model's divisibility rules) and
// simulates it (a plan with outer sync over at least one round: simulation.iterations raised
// to H when below it, as `hgsim run` plays it with simulation.iterations >= H); nullopt with the
// problems in `diags` when it cannot run.
std::optional<Verified> simulate_candidate(const Context& ctx, const Candidate& candidate,
                                           core::Diagnostics& diags);

// simulate_candidate() for several candidates side by side (options.jobs child processes at
// a time); `diags` gets one entry per candidate. Under `stop` (sim::StopRule) the candidates
// it stopped have no result and true in `stopped` (when given).
std::vector<std::optional<Verified>> simulate_candidates(const Context& ctx,
                                                         const std::vector<Candidate>& candidates,
                                                         const Options& options,
                                                         std::vector<core::Diagnostics>& diags,
                                                         const sim::StopRule& stop = {},
                                                         std::vector<bool>* stopped = nullptr);
// The same, each candidate with its own context (baselines simulate under their own codecs).
std::vector<std::optional<Verified>> simulate_candidates(
    const std::vector<const Context*>& contexts, const std::vector<Candidate>& candidates,
    const Options& options, std::vector<core::Diagnostics>& diags,
    const sim::StopRule& stop = {}, std::vector<bool>* stopped = nullptr);

// A line for people: "2 pipelines: beijing(tp2 x4) > shanghai(tp4 x2), 8 replicas, ..."
std::string describe(const core::Plan& plan);

}  // namespace hgsim::planner
