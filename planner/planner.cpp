#include "planner/planner.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "models/transformer.hpp"
#include "models/zoo.hpp"
#include "planner/outer_sync_cost.hpp"
#include "planner/space.hpp"
#include "sim/simulate.hpp"

namespace hgsim::planner {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the search's caps, hedges and sentinels ---------------------------------------------
// The caps bound the enumeration so that a search over up to 8 clusters ends within its
// budget (README, Planner: world-wide, 8 clusters, in 17 s of a 60 s budget); each says
// what it gives up.

// Sentinel for "no time yet": the best analytic time before any plan is costed, and the
// pruning bound before the lists it reads are full (every real time is below it).
constexpr double no_time_yet_s = 1e300;
// The plans kept ranked by analytic time, for verification (3 by default) and the report's
// ranked list: a list this short stays cheap to insert into and to deduplicate by scanning,
// and it is the pruning bound (a configuration whose lower bound exceeds its worst is cut).
constexpr std::size_t ranked_kept = 64;
// A path of more clusters than this is a long path: its cluster orders and its shapes per
// cluster are cut (k! orders and shapes^k combinations grow too fast beyond four).
constexpr std::size_t long_path_clusters = 4;
constexpr int long_path_orders = 2;  // the two orders with the least WAN latency + 1 GB time
// Shape combinations tried per group: shapes per cluster = combinations^(1/k), clamped to
// Options::shapes_per_cluster.
constexpr double shape_combinations = 256;
constexpr double shape_combinations_long_path = 32;
// The interleaved schedule is tried with this many model chunks per stage (Megatron's
// smallest; more chunks cut the bubble further but multiply the transfers).
constexpr int interleaved_chunks = 2;
// A mixture of groups tries every combination of the groups' kept configurations while
// there are at most this many combinations and this many groups; beyond, each group's best.
constexpr double mixture_combinations_all = 27;  // 3 kept configurations (top_per_group) ^ 3
constexpr std::size_t mixture_groups_all = 3;
// Gradient-sync bucket sizes tried for mixtures, whose sync crosses the WAN: every bucket
// pays the ring's 2(k - 1) WAN round trips, so larger buckets amortise them (25 MB is
// PyTorch DDP's default bucket; 250 MB and 2.5 GB are one and two decades larger).
constexpr double mixture_bucket_bytes[] = {25e6, 250e6, 2.5e9};
// The hedge: the best plan of each other family (set of clusters) is simulated too when its
// analytic time is within this factor of the best's. The model's error on simulated
// candidates reaches 62% on the paper scenarios (README, Planner), so a family it ranks
// up to 1.5x behind can still be the fastest simulated.
constexpr double hedge_factor = 1.5;
// Progress lines: one per second of search; the verified times are listed when search and
// verification took longer than this (a short plan prints nothing but its report).
constexpr double progress_interval_s = 1.0;
constexpr double list_verified_after_s = 2.0;
// The sets of clusters searched as one group (a pipeline path over them): every set of k
// clusters joined by the WAN, k = 1, 2, ... while all the sets of the next size still fit
// under this count, and always every single cluster. 1023 is every set of 10 clusters, the
// most the search of every subset handled (716 MB at its peak; 11 clusters needed more than
// 5.8 GB and 12 never finished), so scenarios of up to 10 clusters are searched whole, and
// larger ones drop the longest pipelines across clusters first (said in the result's notes).
// A cluster set is a vector of indices, not a bitmask, so that no cluster count wraps one.
constexpr std::size_t max_cluster_sets = 1024;
// Explaining an infeasible scenario retries the search with full recomputation for at most
// this long (a hint, not a plan).
constexpr double recompute_retry_budget_s = 10.0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Options::jobs, else one per core: the search's threads and the simulations verified side
// by side.
int parallel_jobs(const Options& options) {
  if (options.jobs > 0) return options.jobs;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Calls work(0) .. work(n - 1) on up to `threads` threads (this one among them), each index
// once; the first exception any call throws is rethrown here once all have stopped.
void run_side_by_side(std::size_t n, int threads, const std::function<void(std::size_t)>& work) {
  if (n == 0) return;
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto loop = [&] {
    for (std::size_t k; (k = next++) < n;) {
      try {
        work(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t extra = std::min<std::size_t>(n, static_cast<std::size_t>(threads)) - 1;
  for (std::size_t t = 0; t + 1 <= extra; ++t) pool.emplace_back(loop);
  loop();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// A set of clusters: their indices, highest first, so that sets order as their bitmasks would
// (the order a search over every bitmask ran them in, which breaks ties between equal plans).
using ClusterSet = std::vector<int>;

// The sets of clusters the search runs as one group (see max_cluster_sets), in bitmask order.
struct SearchedSets {
  std::vector<ClusterSet> sets;
  int largest = 1;       // clusters in the largest set searched
  bool limited = false;  // larger sets joined by the WAN exist and were left out
};

// The sets of up to `size` clusters of `component`, each appended highest index first.
void sets_of_component(const std::vector<int>& component, std::size_t size, std::size_t from,
                       ClusterSet& chosen, std::vector<ClusterSet>& out) {
  if (!chosen.empty()) out.emplace_back(chosen.rbegin(), chosen.rend());
  if (chosen.size() == size) return;
  for (std::size_t k = from; k < component.size(); ++k) {
    chosen.push_back(component[k]);
    sets_of_component(component, size, k + 1, chosen, out);
    chosen.pop_back();
  }
}

SearchedSets searched_sets(const Context& ctx) {
  const int n = static_cast<int>(ctx.scenario->clusters.size());
  // Clusters joined by WAN routes, ascending (a group's pipeline needs a route between its
  // consecutive clusters: pipeline_orders; a set spanning two components has no order).
  std::vector<std::vector<int>> components;
  std::vector<bool> placed(n, false);
  for (int c = 0; c < n; ++c) {
    if (placed[c]) continue;
    std::vector<int> component{c};
    placed[c] = true;
    for (std::size_t k = 0; k < component.size(); ++k)
      for (int d = 0; d < n; ++d)
        if (!placed[d] && ctx.connected[component[k]][d]) {
          placed[d] = true;
          component.push_back(d);
        }
    std::sort(component.begin(), component.end());
    components.push_back(std::move(component));
  }
  std::size_t biggest = 0;
  for (const auto& component : components) biggest = std::max(biggest, component.size());
  SearchedSets out;
  double total = 0;  // sets of up to out.largest clusters (double: C(33, 16) overflows int)
  for (std::size_t k = 1; k <= biggest; ++k) {
    double of_size = 0;
    for (const auto& component : components) {
      double binomial = 1;  // C(|component|, k)
      for (std::size_t i = 0; i < k; ++i)
        binomial =
            binomial * static_cast<double>(component.size() - i) / static_cast<double>(i + 1);
      of_size += component.size() >= k ? binomial : 0;
    }
    if (k > 1 && total + of_size > static_cast<double>(max_cluster_sets)) {
      out.limited = true;
      break;
    }
    total += of_size;
    out.largest = static_cast<int>(k);
  }
  for (const auto& component : components) {
    ClusterSet chosen;
    sets_of_component(component, static_cast<std::size_t>(out.largest), 0, chosen, out.sets);
  }
  std::sort(out.sets.begin(), out.sets.end());
  return out;
}

// The clusters a plan's stages use, as a set.
ClusterSet clusters_of(const Context& ctx, const core::Plan& plan) {
  ClusterSet used;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) used.push_back(ctx.cluster_index(st.cluster));
  std::sort(used.rbegin(), used.rend());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

// A group's configuration that costed well on its own, kept for mixtures.
struct Kept {
  core::Pipeline pipeline;  // replicas set; micro_batches re-shared in a mixture
  int zero = least_zero;    // the least ZeRO stage under which its stages hold their layers
  double fill_s = 0;
  double period_s = 0;
  double alone_s = 0;
};

// Whether every stage of a plan of the search fits its GPUs' memory, as estimate() judges
// it (models::stage_memory against the GPU's memory; the search's plans make no choices of
// their own but zero, so the scenario's training is theirs), without costing the plan.
bool stages_fit(const Context& ctx, const core::Plan& plan) {
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    for (std::size_t st = 0; st < plan.pipelines[i].stages.size(); ++st) {
      const int c = ctx.cluster_index(plan.pipelines[i].stages[st].cluster);
      const auto memory = models::stage_memory(*ctx.model, ctx.scenario->training, plan, i, st);
      if (memory.total.value() > ctx.gpus[c]->memory.value()) return false;
    }
  return true;
}

// (set of clusters, micro-batch, schedule, ZeRO stage): the best configurations that fit under
// that stage.
using KeptMap = std::map<std::tuple<ClusterSet, int, int, int>, std::vector<Kept>>;

// What the units of one search share: the clock and budget, the progress line, and the
// counts and best time that line shows. Nothing here decides what a unit explores.
struct SearchShared {
  explicit SearchShared(const Options& o) : options(o), start(Clock::now()) {}
  const Options& options;
  Clock::time_point start;
  std::atomic<bool> exhausted{false};
  std::atomic<long> evaluated{0};
  std::mutex progress;  // guards last_progress and the lines
  double last_progress = 0;
  std::atomic<double> best_s{no_time_yet_s};
};

// The search runs in units: the single groups of one set of clusters at one micro-batch size,
// then the mixtures of each micro-batch size (which read the kept configurations of every set
// at that size). Each unit runs on a Search of its own (its own ranked list, families and
// kept lists), side by side on Options::jobs threads, and the units' results are merged in
// the order a one-thread search would have produced them (micro-batch sizes in turn, each's
// sets of clusters, then its mixtures), so the result does not depend on the timing.
// A unit prunes against its own lists only: it explores everything a search with every
// unit's lists would (its pruning bound is never lower: prune_above), and the merge keeps
// the same best plans.
class Search {
 public:
  Search(const Context& ctx, const Options& options, SearchShared& shared)
      : ctx_(ctx), options_(options), shared_(shared), limits_(ctx) {}

  SearchResult run() {
    const auto& s = *ctx_.scenario;
    const int clusters = static_cast<int>(s.clusters.size());
    const SearchedSets searched = searched_sets(ctx_);
    largest_group_ = searched.largest;
    result_.cluster_sets = static_cast<long>(searched.sets.size());
    if (searched.limited)
      result_.notes.push_back(
          "the search tried pipelines across at most " + std::to_string(searched.largest) +
          " of the " + std::to_string(clusters) + " clusters: every set of up to " +
          std::to_string(searched.largest) + " clusters joined by the WAN (" +
          std::to_string(searched.sets.size()) + " sets; at most " +
          std::to_string(max_cluster_sets) +
          " are searched, every set of 10 clusters), alone and mixed; a plan with a pipeline "
          "across more clusters was not searched (hgsim run SCENARIO --plan FILE runs one)");
    struct Unit {
      int b = 0;
      const ClusterSet* set = nullptr;  // nullptr: the mixtures of b
    };
    std::vector<Unit> units;  // in the order a one-thread search runs them
    for (int b : options_.micro_batches) {
      if (s.training.global_batch % b != 0) continue;
      for (const ClusterSet& set : searched.sets) units.push_back({b, &set});
      if (clusters > 1) units.push_back({b, nullptr});
    }
    // Each unit's results are merged as soon as it ends and the unit is dropped, so that only
    // the units running hold their lists and memos; the merge ranks ties by the units' order
    // (merge), so that the result is the one-thread search's, whatever order they end in.
    std::mutex merging;
    std::map<int, KeptMap> kept_of;  // per micro-batch size: every set's kept configurations
    auto run_unit = [&](std::size_t k) {
      const Unit& u = units[k];
      auto unit = std::make_unique<Search>(ctx_, options_, shared_);
      unit->largest_group_ = largest_group_;
      const int total = s.training.global_batch / u.b;
      if (u.set) {
        if (!unit->stop()) unit->single_groups(*u.set, u.b, total);
      } else {
        {
          std::lock_guard<std::mutex> lock(merging);
          unit->kept_ = std::move(kept_of[u.b]);
        }
        unit->mixtures(u.b, total);
      }
      std::lock_guard<std::mutex> lock(merging);
      merge(*unit, k);
      if (u.set) kept_of[u.b].merge(unit->kept_);
    };
    std::vector<std::size_t> singles, mixes;
    for (std::size_t k = 0; k < units.size(); ++k) (units[k].set ? singles : mixes).push_back(k);
    // The single clusters first (the cheapest units, and what a time budget should see before
    // it runs out), then the units of more clusters first (their paths have more orders and
    // shapes: the longest units), so that no long one starts last while the other threads
    // idle. The merge does not depend on this order.
    auto first = [&](std::size_t k) {
      const std::size_t size = units[k].set->size();
      return size == 1 ? std::numeric_limits<std::size_t>::max() : size;
    };
    std::stable_sort(singles.begin(), singles.end(),
                     [&](std::size_t a, std::size_t b) { return first(a) > first(b); });
    run_side_by_side(singles.size(), parallel_jobs(options_),
                     [&](std::size_t k) { run_unit(singles[k]); });
    run_side_by_side(mixes.size(), parallel_jobs(options_),
                     [&](std::size_t k) { run_unit(mixes[k]); });
    result_.search_s = seconds_since(shared_.start);
    result_.budget_exhausted = shared_.exhausted;
    // Outer-sync variants may fill the list: the best synchronous plan stays in it (last), so
    // that a DiLoCo winner is always verified against one.
    const bool has_sync = std::any_of(ranked_.begin(), ranked_.end(), [](const Candidate& c) {
      return !c.plan.outer_sync.enabled();
    });
    if (!has_sync && best_sync_) ranked_.push_back(*best_sync_);
    // And the best plan with outer sync, when the ranking has none: the one verified when
    // planner.outer_sync asks for outer sync only.
    const bool has_outer = std::any_of(ranked_.begin(), ranked_.end(), [](const Candidate& c) {
      return c.plan.outer_sync.enabled();
    });
    if (!has_outer && best_outer_) ranked_.push_back(*best_outer_);
    result_.ranked = std::move(ranked_);
    for (auto& [family, c] : families_) result_.family_best.push_back(std::move(c));
    std::sort(result_.family_best.begin(), result_.family_best.end(), by_effective);
    return std::move(result_);
  }

 private:
  // Whether the time budget is spent; prints the progress line once per interval (whichever
  // unit gets there first).
  bool stop() {
    if (shared_.exhausted) return true;
    const double t = seconds_since(shared_.start);
    if (options_.progress && t - shared_.last_progress >= progress_interval_s) {
      std::lock_guard<std::mutex> lock(shared_.progress);
      if (t - shared_.last_progress >= progress_interval_s) {
        shared_.last_progress = t;
        *options_.progress << "hgsim plan: " << shared_.evaluated << " candidates costed in "
                           << static_cast<int>(t) << " s; best so far "
                           << (shared_.best_s < no_time_yet_s
                                   ? core::human_duration(core::Seconds(shared_.best_s.load()))
                                   : std::string("none"))
                           << " (analytic)\n";
      }
    }
    if (t > options_.time_budget_s && !shared_.exhausted.exchange(true) && options_.progress) {
      std::lock_guard<std::mutex> lock(shared_.progress);
      *options_.progress << "hgsim plan: time budget of " << options_.time_budget_s
                         << " s reached; verifying the best found so far\n";
    }
    return shared_.exhausted;
  }

  // Where a merged candidate stands among equal times: the order of the unit that offered it
  // (a one-thread search's order) and its place in that unit's list.
  struct Order {
    std::size_t unit = 0;
    std::size_t place = 0;
    bool operator<(const Order& o) const {
      return unit < o.unit || (unit == o.unit && place < o.place);
    }
  };
  static bool before(double a_s, Order a, double b_s, Order b) {
    return a_s < b_s || (a_s == b_s && a < b);
  }

  // Unit `unit`'s results into this search's, as if every unit's offers had come here in the
  // units' order, whatever order they are merged in: the ranked list keeps the best
  // `ranked_kept` distinct plans (ties in the units' order), a family's best and the best
  // synchronous plan are the first of the least time.
  void merge(const Search& from, std::size_t unit) {
    result_.evaluated += from.result_.evaluated;
    result_.rejected_memory += from.result_.rejected_memory;
    for (std::size_t i = 0; i < from.ranked_.size(); ++i) {
      const Candidate& c = from.ranked_[i];
      const Order order{unit, i};
      if (ranked_.size() >= ranked_kept &&
          !before(c.effective_s(), order, ranked_.back().effective_s(), ranked_order_.back()))
        continue;
      const auto same = std::find_if(ranked_.begin(), ranked_.end(),
                                     [&](const Candidate& r) { return r.plan == c.plan; });
      if (same != ranked_.end()) {
        const std::size_t at = static_cast<std::size_t>(same - ranked_.begin());
        if (!before(c.effective_s(), order, same->effective_s(), ranked_order_[at])) continue;
        ranked_.erase(same);
        ranked_order_.erase(ranked_order_.begin() + static_cast<std::ptrdiff_t>(at));
      }
      std::size_t at = 0;
      while (at < ranked_.size() &&
             before(ranked_[at].effective_s(), ranked_order_[at], c.effective_s(), order))
        ++at;
      ranked_.insert(ranked_.begin() + static_cast<std::ptrdiff_t>(at), c);
      ranked_order_.insert(ranked_order_.begin() + static_cast<std::ptrdiff_t>(at), order);
      if (ranked_.size() > ranked_kept) {
        ranked_.pop_back();
        ranked_order_.pop_back();
      }
    }
    const Order first{unit, 0};
    if (from.best_sync_ && (!best_sync_ || before(from.best_sync_->analytic_s, first,
                                                  best_sync_->analytic_s, best_sync_order_))) {
      best_sync_ = from.best_sync_;
      best_sync_order_ = first;
    }
    if (from.best_outer_ &&
        (!best_outer_ || before(from.best_outer_->effective_s(), first, best_outer_->effective_s(),
                                best_outer_order_))) {
      best_outer_ = from.best_outer_;
      best_outer_order_ = first;
    }
    for (const auto& [family, c] : from.families_) {
      auto [it, fresh] = families_.try_emplace(family, c);
      auto [order, unseen] = family_order_.try_emplace(family, first);
      if (!fresh && before(c.effective_s(), first, it->second.effective_s(), order->second)) {
        it->second = c;
        order->second = first;
      }
    }
  }

  static bool by_effective(const Candidate& a, const Candidate& b) {
    return a.effective_s() < b.effective_s();
  }

  // A costed plan, then its outer-sync variants when the scenario's `planner:` allows them
  // (planner/outer_sync_cost.hpp), each costed and ranked by time to the same progress.
  void offer_with_variants(const core::Plan& plan, double analytic_s) {
    offer(plan, analytic_s, "");
    for (core::Plan& v : outer_sync_variants(ctx_, plan)) {
      count_evaluated();
      const Estimate e = estimate_plan(ctx_, v);
      if (!e.fits) {
        ++result_.rejected_memory;
        continue;
      }
      offer(std::move(v), e.iteration_s, "");
    }
  }

  void offer(core::Plan plan, double analytic_s, const std::string& what) {
    const double efficiency = token_efficiency(ctx_, plan);
    Candidate c{std::move(plan), analytic_s, what, efficiency};
    const double effective = c.effective_s();
    if (!c.plan.outer_sync.enabled() && (!best_sync_ || analytic_s < best_sync_->analytic_s))
      best_sync_ = c;
    if (c.plan.outer_sync.enabled() && (!best_outer_ || effective < best_outer_->effective_s()))
      best_outer_ = c;
    for (double best = shared_.best_s; effective < best;)
      if (shared_.best_s.compare_exchange_weak(best, effective)) break;
    // The best of each family (the set of clusters a plan uses), so that verification can
    // hedge against the model being biased against one family.
    auto [it, fresh] = families_.try_emplace(clusters_of(ctx_, c.plan), c);
    if (!fresh && effective < it->second.effective_s()) it->second = c;
    // Keep the best `ranked_kept` distinct plans.
    if (ranked_.size() >= ranked_kept && effective >= ranked_.back().effective_s()) return;
    for (const auto& r : ranked_)
      if (r.plan == c.plan) return;
    auto at = std::upper_bound(ranked_.begin(), ranked_.end(), c, by_effective);
    ranked_.insert(at, std::move(c));
    if (ranked_.size() > ranked_kept) ranked_.pop_back();
  }

  // The plan costed under the least ZeRO stage from plan.zero up under which every stage
  // fits, which it keeps (a higher stage is never faster: see least_zero); nullopt when none
  // does. Sharing the batch can split a group into entries of fewer replicas, and so fewer
  // shards, than its partition assumed, and a mixture takes the highest stage its groups
  // need. Memory is checked before the plan is costed, so that a plan that fits under no
  // stage costs no estimate.
  std::optional<Estimate> cost(core::Plan& plan) {
    count_evaluated();
    while (plan.zero <= most_zero && !stages_fit(ctx_, plan)) ++plan.zero;
    if (plan.zero > most_zero) {
      ++result_.rejected_memory;
      return std::nullopt;
    }
    Estimate e = estimate(ctx_, plan);
    if (!e.fits) {
      ++result_.rejected_memory;
      return std::nullopt;
    }
    return e;
  }

  void count_evaluated() {
    ++result_.evaluated;
    ++shared_.evaluated;
  }

  // Every configuration of one group over the clusters of `cluster_set`, alone.
  void single_groups(const ClusterSet& cluster_set, int b, int total) {
    const auto& s = *ctx_.scenario;
    const std::vector<int> members(cluster_set.rbegin(), cluster_set.rend());  // ascending
    int min_gpus = std::numeric_limits<int>::max();  // the set is never empty
    for (int c : members) min_gpus = std::min(min_gpus, s.clusters[c].gpu_count());
    const int L = ctx_.model->layers;
    const bool long_path = members.size() > long_path_clusters;
    const int orders = long_path ? long_path_orders : options_.orders_per_group;
    for (const auto& order : pipeline_orders(ctx_, members, orders)) {
      for (int R : replica_options(min_gpus)) {
        if (R > total || stop()) break;
        const double combinations = long_path ? shape_combinations_long_path : shape_combinations;
        const int per_cluster = std::clamp(
            static_cast<int>(std::pow(combinations, 1.0 / static_cast<double>(order.size()))), 1,
            options_.shapes_per_cluster);
        std::vector<std::vector<ClusterShape>> shapes;
        for (int c : order) {
          shapes.push_back(
              cluster_shapes(ctx_, c, s.clusters[c].gpu_count() / R, b, L, per_cluster));
          if (shapes.back().empty()) break;
        }
        if (shapes.size() != order.size() || shapes.back().empty()) continue;
        std::vector<std::size_t> pick(order.size(), 0);
        for (;;) {
          GroupConfig g;
          g.replicas = R;
          int p = 0;
          double rate = 0;
          for (std::size_t k = 0; k < order.size(); ++k) {
            const ClusterShape& sh = shapes[k][pick[k]];
            g.path.push_back(sh);
            p += sh.stages;
            const LayerCost lc = layer_cost(ctx_, sh.cluster, sh.tp, sh.dp, b);
            rate += sh.stages / (lc.forward_s + lc.backward_s);
          }
          const int per_replica = (total + R - 1) / R;
          const double bound = per_replica * L / rate;
          if (p <= L && bound < prune_above(cluster_set, b))
            try_group(cluster_set, g, p, b, total, order);
          std::size_t k = 0;
          while (k < pick.size() && ++pick[k] == shapes[k].size()) pick[k++] = 0;
          if (k == pick.size()) break;
        }
      }
    }
  }

  // Configurations whose lower bound exceeds this cannot enter the kept list of the cluster_set
  // nor the ranked list.
  double prune_above(const ClusterSet& cluster_set, int b) {
    double limit = ranked_.size() >= ranked_kept ? ranked_.back().effective_s() : no_time_yet_s;
    double kept_worst = 0;
    bool full = true;
    for (auto schedule : {core::Schedule::one_f_one_b, core::Schedule::gpipe})
      for (int zero = least_zero; zero <= most_zero && full; ++zero) {
        const auto it = kept_.find({cluster_set, b, static_cast<int>(schedule), zero});
        if (it == kept_.end() || static_cast<int>(it->second.size()) < options_.top_per_group) {
          full = false;
          break;
        }
        kept_worst = std::max(kept_worst, it->second.back().alone_s);
      }
    // Until the ranked list is full any configuration may still enter it: no pruning.
    return full && limit < no_time_yet_s ? std::max(limit, kept_worst) : no_time_yet_s;
  }

  void try_group(const ClusterSet& cluster_set, const GroupConfig& g, int p, int b, int total,
                 const std::vector<int>& order) {
    const int L = ctx_.model->layers;
    std::vector<std::pair<core::Schedule, int>> schedules{{core::Schedule::one_f_one_b, 1},
                                                          {core::Schedule::gpipe, 1}};
    if (order.size() == 1 && p > 1 && L % (interleaved_chunks * p) == 0 &&
        total % (g.replicas * p) == 0)
      schedules.push_back({core::Schedule::interleaved, interleaved_chunks});
    for (auto [schedule, v] : schedules) {
      const int per_replica = (total + g.replicas - 1) / g.replicas;
      const auto partitioned = make_pipelines(ctx_, limits_, g, b, schedule, v, per_replica);
      if (partitioned.empty()) {
        count_evaluated();
        ++result_.rejected_memory;
      }
      for (const PartitionedPipeline& pp : partitioned)
        try_pipeline(cluster_set, pp, schedule, v, b, total);
    }
  }

  // One partitioned pipeline of a group, alone: costed, offered, and kept for mixtures.
  void try_pipeline(const ClusterSet& cluster_set, const PartitionedPipeline& pp,
                    core::Schedule schedule, int v, int b, int total) {
    core::Plan plan = plan_skeleton(schedule, b, v);
    plan.zero = pp.zero;
    plan.pipelines = share_batch({pp.pipeline}, {0.0}, {1.0}, total);
    if (plan.pipelines.empty()) return;
    auto e = cost(plan);
    if (!e) return;
    const double alone = e->iteration_s;
    offer_with_variants(plan, alone);
    if (schedule == core::Schedule::interleaved) return;
    // Kept per ZeRO stage z: the best configurations that fit under z or less, so that
    // mixtures can combine configurations that fit without sharding more (a mixture takes the
    // highest stage any of its groups needs, and ZeRO-3 costs 1.5x the sync's traffic).
    const Kept k{pp.pipeline, plan.zero, e->pipelines[0].fill_s, e->pipelines[0].period_s, alone};
    for (int zero = plan.zero; zero <= most_zero; ++zero) {
      auto& kept = kept_[{cluster_set, b, static_cast<int>(schedule), zero}];
      auto at = std::upper_bound(kept.begin(), kept.end(), k, [](const Kept& a, const Kept& c) {
        return a.alone_s < c.alone_s;
      });
      kept.insert(at, k);
      if (static_cast<int>(kept.size()) > options_.top_per_group) kept.pop_back();
    }
  }

  // Two or more groups over disjoint sets of clusters, each from its best configurations.
  void mixtures(int b, int total) {
    const int n = static_cast<int>(ctx_.scenario->clusters.size());
    std::vector<int> label(n, 0);      // 0 = idle, 1.. = group, numbered by first appearance
    std::vector<int> sizes(n + 1, 0);  // clusters per group so far
    partitions(label, sizes, 0, 0, b, total);
  }

  // Every labelling of the clusters whose groups are sets the search ran (searched_sets: at
  // most largest_group_ clusters, joined by the WAN); a group beyond those would have no
  // kept configurations, so its labellings are not enumerated.
  void partitions(std::vector<int>& label, std::vector<int>& sizes, int c, int groups, int b,
                  int total) {
    if (stop()) return;
    if (c == static_cast<int>(label.size())) {
      if (groups >= 2) mixture(label, groups, b, total);
      return;
    }
    for (int g = 0; g <= groups + 1; ++g) {
      if (g > 0 && !joins(label, c, g, sizes[g])) continue;
      label[c] = g;
      ++sizes[g];
      partitions(label, sizes, c + 1, std::max(groups, g), b, total);
      --sizes[g];
    }
    label[c] = 0;
  }

  // Whether cluster c may join group g (of `size` clusters among 0 .. c - 1).
  bool joins(const std::vector<int>& label, int c, int g, int size) const {
    if (size >= largest_group_) return false;
    for (int d = 0; d < c; ++d)
      if (label[d] == g) return ctx_.connected[d][c];
    return true;
  }

  void mixture(const std::vector<int>& label, int groups, int b, int total) {
    std::vector<ClusterSet> sets(groups);
    for (int c = static_cast<int>(label.size()) - 1; c >= 0; --c)  // highest first
      if (label[c] > 0) sets[label[c] - 1].push_back(c);
    // Per ZeRO stage z the groups' configurations that fit under z; a combination whose
    // groups all fit under less was tried at that stage (its configurations are among the
    // best there too).
    for (int level = least_zero; level <= most_zero; ++level)
      for (auto schedule : {core::Schedule::one_f_one_b, core::Schedule::gpipe}) {
        std::vector<const std::vector<Kept>*> lists;
        double combinations = 1;
        for (const ClusterSet& m : sets) {
          auto it = kept_.find({m, b, static_cast<int>(schedule), level});
          if (it == kept_.end() || it->second.empty()) break;
          lists.push_back(&it->second);
          combinations *= it->second.size();
        }
        if (lists.size() != sets.size()) continue;
        const bool every_combination =
            combinations <= mixture_combinations_all && sets.size() <= mixture_groups_all;
        const std::size_t depth = every_combination ? std::numeric_limits<std::size_t>::max() : 1;
        std::vector<std::size_t> pick(lists.size(), 0);
        for (;;) {
          std::vector<core::Pipeline> pipelines;
          std::vector<double> fill, period;
          int zero = least_zero;  // one stage for the whole plan: the most any group needs
          for (std::size_t g = 0; g < lists.size(); ++g) {
            const Kept& kp = (*lists[g])[pick[g]];
            pipelines.push_back(kp.pipeline);
            fill.push_back(kp.fill_s);
            period.push_back(kp.period_s);
            zero = std::max(zero, kp.zero);
          }
          core::Plan plan = plan_skeleton(schedule, b, 1);
          if (zero == level) plan.pipelines = share_batch(pipelines, fill, period, total);
          // Gradient sync crosses the WAN here: every bucket pays its round trips, so
          // larger buckets are tried too (a grad_sync.bucket of the plan).
          if (!plan.pipelines.empty())
            for (double bucket : mixture_bucket_bytes) {
              plan.zero = zero;
              plan.grad_sync.bucket = core::Bytes(bucket);
              if (auto e = cost(plan)) offer_with_variants(plan, e->iteration_s);
            }
          std::size_t g = 0;
          while (g < pick.size() && ++pick[g] == std::min(lists[g]->size(), depth)) pick[g++] = 0;
          if (g == pick.size()) break;
        }
      }
  }

  const Context& ctx_;
  const Options& options_;
  SearchShared& shared_;
  MemoryLimits limits_;  // its memo is the unit's own
  SearchResult result_;
  std::vector<Candidate> ranked_;
  std::optional<Candidate> best_sync_;   // the best synchronous plan costed
  std::optional<Candidate> best_outer_;  // the best plan with outer sync costed
  std::map<ClusterSet, Candidate> families_;
  // (set of clusters, micro-batch, schedule, ZeRO stage): the best configurations that fit
  // under it.
  KeptMap kept_;
  // Where the merged lists' entries stand among equal times (merge).
  std::vector<Order> ranked_order_;
  Order best_sync_order_, best_outer_order_;
  std::map<ClusterSet, Order> family_order_;
  int largest_group_ = 1;  // clusters in the largest set searched as one group
};

// "1, 2 or 4".
std::string alternatives(const std::vector<int>& values) {
  std::string out;
  for (std::size_t k = 0; k < values.size(); ++k)
    out += (k == 0 ? "" : k + 1 == values.size() ? " or " : ", ") + std::to_string(values[k]);
  return out;
}

// Which constraint binds when nothing fits, and what would make it fit.
std::vector<std::string> explain_infeasible(const Context& ctx, const Options& options,
                                            const SearchResult& r) {
  std::vector<std::string> out;
  const auto& s = *ctx.scenario;
  const auto& m = *ctx.model;
  const auto per_param = models::bytes_per_parameter(s.training.precision, s.training.optimizer);
  const double state = per_param.total() * models::parameter_count(m);
  double memory = 0;
  for (std::size_t c = 0; c < s.clusters.size(); ++c)
    memory += ctx.gpus[c]->memory.value() * s.clusters[c].gpu_count();
  bool batch_ok = false;
  for (int b : options.micro_batches) batch_ok = batch_ok || s.training.global_batch % b == 0;
  if (!batch_ok)
    out.push_back("batch: training.global_batch " + std::to_string(s.training.global_batch) +
                  " is not a multiple of any micro-batch size tried; use a global batch that "
                  "is a multiple of " +
                  alternatives(options.micro_batches));
  if (state > memory) {
    out.push_back("memory: weights, gradients and optimizer state alone take " +
                  core::human_size(core::Bytes(state)) + ", more than all " +
                  std::to_string(s.total_gpus()) + " GPUs hold together (" +
                  core::human_size(core::Bytes(memory)) + "); more GPUs (at least " +
                  std::to_string(static_cast<int>(std::ceil(state / memory * s.total_gpus()))) +
                  " of these) or a smaller model would make it fit");
    return out;
  }
  if (r.rejected_memory > 0) {
    std::string line = "memory: every partition of the " + std::to_string(m.layers) +
                       " layers leaves some stage above its GPUs' memory, even with ZeRO-3 (" +
                       std::to_string(r.rejected_memory) +
                       " configurations tried; micro-batch sizes down to " +
                       std::to_string(*std::min_element(options.micro_batches.begin(),
                                                        options.micro_batches.end())) +
                       ")";
    if (s.training.recompute != core::Recompute::full) {
      core::Scenario with = s;
      with.training.recompute = core::Recompute::full;
      Context again = ctx;
      again.scenario = &with;
      Options quick = options;
      quick.progress = nullptr;
      quick.time_budget_s = std::min(options.time_budget_s, recompute_retry_budget_s);
      const SearchResult retry = search(again, quick);
      line += retry.ranked.empty()
                  ? "; even full recomputation (training.recompute: full) does not make it fit: "
                    "more GPUs or GPUs with more memory would"
                  : "; recomputation would make it fit: set training.recompute: full "
                    "(best plan then " +
                        core::human_duration(core::Seconds(retry.ranked.front().analytic_s)) +
                        " per iteration, analytic)";
    } else {
      line += "; more GPUs, GPUs with more memory, or a shorter sequence would make it fit";
    }
    out.push_back(line);
  }
  if (out.empty())
    out.push_back(
        "GPU counts: no arrangement of the clusters' GPUs into pipelines was found "
        "(tp must divide gpus_per_node and the model's heads, kv heads and FFN width; "
        "clusters must be joined by the WAN)");
  return out;
}

}  // namespace

core::Plan plan_skeleton(core::Schedule schedule, int micro_batch, int virtual_stages) {
  core::Plan plan;
  plan.schedule = schedule;
  plan.micro_batch = micro_batch;
  plan.virtual_stages = schedule == core::Schedule::interleaved ? virtual_stages : 1;
  // Megatron's distributed optimizer (zero 1) costs no time in hgsim's model (reduce-scatter
  // + all-gather move what the all-reduce they replace moves) and only saves memory, so
  // every plan starts from it; the search raises it where a partition needs more sharding
  // (space.hpp make_pipelines) and choose_recompute_and_codecs chooses it with the other
  // memory settings. Sequence parallelism starts off: choose_recompute_and_codecs tries
  // it on the best candidates (it changes memory, and so the recomputation that fits).
  plan.sequence_parallel = false;
  plan.zero = 1;
  // Hierarchical: inside a cluster it is the ring; across clusters it crosses the WAN
  // 2(k - 1) times per bucket instead of 2(n - 1), and folded fidelity can play it.
  plan.grad_sync.algorithm = core::GradSyncAlgorithm::hierarchical;
  return plan;
}

SearchResult search(const Context& ctx, const Options& options) {
  SearchShared shared(options);
  return Search(ctx, options, shared).run();
}

namespace {

// Sequence parallelism for a plan: worth trying when a stage has tp > 1 and every stage's tp
// divides the sequence (each rank holds s / tp of it); it is one setting for the whole plan.
std::vector<bool> sequence_parallel_options(const Context& ctx, const core::Plan& plan) {
  bool split = false;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) {
      if (st.tp > 1 && ctx.scenario->training.seq_len % st.tp != 0) return {plan.sequence_parallel};
      split = split || st.tp > 1;
    }
  if (!split) return {plan.sequence_parallel};
  return {false, true};
}

}  // namespace

// The choices a plan makes for itself, for the best candidates: sequence parallelism or not
// (where the plan's tp allows it), the least recomputation that still fits (less is never
// slower, and the scenario's setting is the most it asks for), the ZeRO stage, and per WAN
// traffic class the scenario's codec or none, whichever the model finds faster (the
// scenario's codec is the most loss the user accepts; the planner does not trade accuracy it
// cannot measure). Memory couples the first three: sharding the gradients (ZeRO-2) or the
// weights (ZeRO-3) can make room for less recomputation. Per combination of the others only
// the least ZeRO stage that fits is costed: a higher one is never faster in hgsim's model
// (the same work, and models::zero_traffic_factor never falls as the stage rises). Ties go to
// the least sharding: in a real run every extra stage adds collectives (ZeRO-2's gradient
// shards, ZeRO-3's gathers) and their latency, which the model prices at nothing or less.
void choose_recompute_and_codecs(const Context& ctx, std::vector<Candidate>& candidates) {
  const core::Scenario& s = *ctx.scenario;
  std::vector<core::Recompute> levels{core::Recompute::none};
  if (s.training.recompute != core::Recompute::none) levels.push_back(core::Recompute::selective);
  if (s.training.recompute == core::Recompute::full) levels.push_back(core::Recompute::full);
  const bool act = ctx.compression.wan_activations.kind != compress::CodecKind::none;
  const bool grad = ctx.compression.wan_gradients.kind != compress::CodecKind::none;
  for (Candidate& c : candidates) {
    core::Plan best = c.plan;
    double best_s = c.analytic_s;
    for (bool sp : sequence_parallel_options(ctx, c.plan))
      for (core::Recompute level : levels)
        for (bool use_act : {true, false})
          for (bool use_grad : {true, false}) {
            if ((!act && !use_act) || (!grad && !use_grad)) continue;
            core::Plan variant = c.plan;
            variant.sequence_parallel = sp;
            variant.recompute.reset();
            variant.compression.reset();
            if (level != s.training.recompute) variant.recompute = level;
            if ((act && !use_act) || (grad && !use_grad)) {
              core::CompressionPolicy policy = s.compression;
              if (!use_act) policy.wan_activations = core::CodecConfig{};
              if (!use_grad) policy.wan_gradients = core::CodecConfig{};
              variant.compression = policy;
            }
            for (int zero = least_zero; zero <= most_zero; ++zero) {
              variant.zero = zero;
              if (variant == c.plan) break;                    // costed by the search, and it fits
              const Estimate e = estimate_plan(ctx, variant);  // the variant's own choices
              if (!e.fits) continue;
              if (e.iteration_s < best_s || (e.iteration_s == best_s && zero < best.zero)) {
                best = variant;
                best_s = e.iteration_s;
              }
              break;
            }
          }
    if (!(best == c.plan)) {
      c.plan = best;
      c.analytic_s = best_s;
      c.description.clear();
    }
  }
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.effective_s() < b.effective_s(); });
}

namespace {

// A candidate ready to simulate: checked and resolved as `hgsim run` checks and resolves a
// plan file (held here so that the input's pointers stay valid). The simulation applies the
// plan's own choices and uses the fidelity hgsim run would use: the scenario's, else
// sim::automatic_fidelity.
struct Prepared {
  Candidate candidate;
  core::Scenario scenario;  // the scenario, with simulation.iterations >= H for outer sync
  sim::SimulationInput in;
  sim::SimulationOptions options;
};

std::unique_ptr<Prepared> prepare(const Context& ctx, const Candidate& candidate,
                                  core::Diagnostics& diags) {
  if (!sim::check_and_resolve(*ctx.scenario, *ctx.model, ctx.compression, candidate.plan, "",
                              diags))
    return nullptr;
  auto p = std::make_unique<Prepared>();
  p->candidate = candidate;
  p->candidate.efficiency = token_efficiency(ctx, candidate.plan);
  p->scenario = *ctx.scenario;
  // A plan with outer sync is verified over at least one round of H inner steps, so that its
  // outer syncs are in the mean iteration (with no bandwidth trace the simulator plays the
  // round's step and sync once each: sim/iterations.hpp).
  const core::OuterSync& o = candidate.plan.outer_sync;
  if (o.enabled() && p->scenario.simulation.iterations < o.inner_steps)
    p->scenario.simulation.iterations = o.inner_steps;
  p->in.scenario = &p->scenario;
  p->in.plan = &p->candidate.plan;
  p->in.plan_path = "";
  p->in.model = ctx.model;
  p->in.compression = ctx.compression;
  p->in.compute = ctx.compute;
  return p;
}

Verified verified(Candidate candidate, sim::Results result) {
  Verified v;
  v.candidate = std::move(candidate);
  v.simulated_s = result.iteration_time_s;
  v.fidelity = result.simulator.fidelity;
  v.iterations = result.iterations.value("iterations_simulated", 1);
  v.result = std::move(result);
  return v;
}

}  // namespace

std::optional<Verified> simulate_candidate(const Context& ctx, const Candidate& candidate,
                                           core::Diagnostics& diags) {
  auto p = prepare(ctx, candidate, diags);
  if (!p) return std::nullopt;
  auto result = sim::simulate(p->in, p->options, diags);
  if (!result) return std::nullopt;
  return verified(p->candidate, std::move(*result));
}

std::vector<std::optional<Verified>> simulate_candidates(const Context& ctx,
                                                         const std::vector<Candidate>& candidates,
                                                         const Options& options,
                                                         std::vector<core::Diagnostics>& diags) {
  return simulate_candidates(std::vector<const Context*>(candidates.size(), &ctx), candidates,
                             options, diags);
}

std::vector<std::optional<Verified>> simulate_candidates(
    const std::vector<const Context*>& contexts, const std::vector<Candidate>& candidates,
    const Options& options, std::vector<core::Diagnostics>& diags) {
  diags.assign(candidates.size(), {});
  std::vector<std::unique_ptr<Prepared>> prepared;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (auto p = prepare(*contexts[i], candidates[i], diags[i])) {
      prepared.push_back(std::move(p));
      which.push_back(i);
    }
  std::vector<sim::SimulationInput> inputs;
  std::vector<sim::SimulationOptions> sim_options;
  for (const auto& p : prepared) {
    inputs.push_back(p->in);
    sim_options.push_back(p->options);
  }
  std::vector<core::Diagnostics> sim_diags;
  auto results = sim::simulate_all(inputs, sim_options, sim_diags, parallel_jobs(options));
  std::vector<std::optional<Verified>> out(candidates.size());
  for (std::size_t k = 0; k < prepared.size(); ++k) {
    const std::size_t i = which[k];
    diags[i].append(sim_diags[k]);
    if (results[k]) out[i] = verified(prepared[k]->candidate, std::move(*results[k]));
  }
  return out;
}

SearchResult plan(const Context& ctx, const Options& options) {
  SearchResult r = search(ctx, options);
  const auto start = Clock::now();
  choose_recompute_and_codecs(ctx, r.ranked);
  choose_recompute_and_codecs(ctx, r.family_best);
  for (auto& c : r.ranked)
    if (c.description.empty()) c.description = describe(c.plan);
  const int want = std::max(options.verify, 1);
  // Hedge: the best plan of each other family (set of clusters used) within hedge_factor of
  // the best analytic time is simulated too, up to K more.
  // The best family of each cluster count first (one cluster, two, ...), then the rest.
  auto clusters_used = [&](const core::Plan& plan) {
    std::set<std::string> used;
    for (const auto& p : plan.pipelines)
      for (const auto& st : p.stages) used.insert(st.cluster);
    return used.size();
  };
  std::vector<Candidate> hedges;
  std::set<std::size_t> counts;
  for (const Candidate& c : r.family_best)
    if (counts.insert(clusters_used(c.plan)).second) hedges.push_back(c);
  for (const Candidate& c : r.family_best)
    if (std::find_if(hedges.begin(), hedges.end(),
                     [&](const Candidate& h) { return h.plan == c.plan; }) == hedges.end())
      hedges.push_back(c);
  auto eligible_hedge = [&](const Candidate& c) {
    if (r.ranked.empty() || c.effective_s() > hedge_factor * r.ranked.front().effective_s())
      return false;
    for (const Verified& v : r.verified)
      if (v.candidate.plan == c.plan) return false;
    return true;
  };

  // The best `want` by the analytic model and the hedges are simulated side by side, one
  // child process each (the simulator forks one per simulation anyway); a candidate that
  // cannot be simulated (a planner bug) gives its place to the next.
  std::size_t next_ranked = 0, next_hedge = 0;
  int ranked_done = 0, hedges_done = 0;
  std::vector<Verified> from_ranked, from_hedges;
  for (;;) {
    std::vector<Candidate> batch;
    std::vector<bool> is_hedge;
    auto planned = [&](const core::Plan& plan) {
      for (const Candidate& c : batch)
        if (c.plan == plan) return true;
      for (const Verified& v : from_ranked)
        if (v.candidate.plan == plan) return true;
      return false;
    };
    for (int k = ranked_done; k < want && next_ranked < r.ranked.size(); ++k) {
      batch.push_back(r.ranked[next_ranked++]);
      is_hedge.push_back(false);
    }
    for (int k = hedges_done; k < want && next_hedge < hedges.size();) {
      const Candidate& c = hedges[next_hedge++];
      if (!eligible_hedge(c) || planned(c.plan)) continue;
      Candidate described = c;
      described.description = describe(c.plan);
      batch.push_back(described);
      is_hedge.push_back(true);
      ++k;
    }
    if (batch.empty()) break;
    std::vector<core::Diagnostics> diags;
    auto results = simulate_candidates(ctx, batch, options, diags);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (!results[i]) {
        if (!is_hedge[i] && options.progress)
          *options.progress << "hgsim plan: a candidate could not be simulated (a planner bug):\n"
                            << diags[i].format();
        continue;
      }
      if (is_hedge[i]) {
        from_hedges.push_back(std::move(*results[i]));
        ++hedges_done;
      } else {
        from_ranked.push_back(std::move(*results[i]));
        ++ranked_done;
      }
    }
    if ((ranked_done >= want || next_ranked >= r.ranked.size()) &&
        (hedges_done >= want || next_hedge >= hedges.size()))
      break;
  }
  for (auto& v : from_ranked) r.verified.push_back(std::move(v));
  for (auto& v : from_hedges) r.verified.push_back(std::move(v));
  // A plan with outer sync is never chosen unseen against synchronous training: the best
  // synchronous candidate is verified too, for the comparison the report prints.
  auto synchronous = [](const core::Plan& p) { return !p.outer_sync.enabled(); };
  // planner.outer_sync without `none` asks for outer sync: a synchronous plan is then only
  // the comparison, and the best when no plan with outer sync could be verified (said).
  const auto& methods = ctx.scenario->planner.outer_sync;
  const bool sync_allowed =
      std::find(methods.begin(), methods.end(), core::OuterSyncMethod::none) != methods.end();
  if (!sync_allowed && std::none_of(r.verified.begin(), r.verified.end(), [&](const Verified& v) {
        return !synchronous(v.candidate.plan);
      })) {
    // The best candidate with outer sync, however far down the ranking it is.
    const auto it = std::find_if(r.ranked.begin(), r.ranked.end(),
                                 [&](const Candidate& c) { return !synchronous(c.plan); });
    if (it != r.ranked.end()) {
      std::vector<core::Diagnostics> diags;
      auto results = simulate_candidates(ctx, {*it}, options, diags);
      if (results[0]) r.verified.push_back(std::move(*results[0]));
    }
  }
  const bool any_outer = std::any_of(r.verified.begin(), r.verified.end(), [&](const Verified& v) {
    return !synchronous(v.candidate.plan);
  });
  const bool any_sync = std::any_of(r.verified.begin(), r.verified.end(), [&](const Verified& v) {
    return synchronous(v.candidate.plan);
  });
  if (any_outer && !any_sync) {
    const auto it = std::find_if(r.ranked.begin(), r.ranked.end(),
                                 [&](const Candidate& c) { return synchronous(c.plan); });
    if (it != r.ranked.end()) {
      std::vector<core::Diagnostics> diags;
      auto results = simulate_candidates(ctx, {*it}, options, diags);
      if (results[0]) r.verified.push_back(std::move(*results[0]));
    }
  }
  if (options.progress && r.search_s + seconds_since(start) > list_verified_after_s)
    for (const Verified& v : r.verified)
      *options.progress << "hgsim plan: verified: " << v.simulated_s << " s simulated, "
                        << v.candidate.analytic_s << " s analytic\n";
  const bool prefer_outer = !sync_allowed && any_outer;
  if (!sync_allowed && !any_outer && !r.verified.empty())
    r.notes.push_back(
        "planner.outer_sync lists only " + core::to_string(methods.front()) +
        ", but no plan with outer sync could be verified, so the best plan is synchronous: outer "
        "sync needs two islands (pipelines on clusters of their own, each cutting the model the "
        "same way), full fidelity, and fragments that divide inner_steps and are at most the "
        "model's layers");
  for (const Verified& v : r.verified) {
    if (!(prefer_outer && synchronous(v.candidate.plan)) &&
        (!r.best || v.effective_s() < r.best->effective_s()))
      r.best = v;
    if (synchronous(v.candidate.plan) &&
        (!r.best_synchronous || v.simulated_s < r.best_synchronous->simulated_s))
      r.best_synchronous = v;
  }
  if (r.best && synchronous(r.best->candidate.plan)) r.best_synchronous.reset();
  r.verify_s = seconds_since(start);
  if (r.ranked.empty()) r.why_not = explain_infeasible(ctx, options, r);
  return r;
}

std::string describe(const core::Plan& plan) {
  std::ostringstream out;
  out << core::to_string(plan.schedule);
  if (plan.schedule == core::Schedule::interleaved) out << " (v " << plan.virtual_stages << ")";
  out << ", micro-batch " << plan.micro_batch;
  if (plan.sequence_parallel) out << ", sequence parallel";
  // ZeRO-1 (Megatron's distributed optimizer) is every plan's default; say when it is not.
  if (plan.zero == 0) out << ", no ZeRO";
  if (plan.zero > 1) out << ", ZeRO-" << plan.zero;
  out << "; ";
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& p = plan.pipelines[i];
    if (i > 0) out << " + ";
    out << p.replicas << " x [";
    // Runs of identical stages: "beijing tp2 x4 (10,10,10,10)".
    std::size_t st = 0;
    bool first = true;
    while (st < p.stages.size()) {
      std::size_t e = st;
      while (e < p.stages.size() && p.stages[e].cluster == p.stages[st].cluster &&
             p.stages[e].tp == p.stages[st].tp && p.stages[e].dp == p.stages[st].dp &&
             p.stages[e].cp == p.stages[st].cp)
        ++e;
      if (!first) out << " > ";
      first = false;
      out << p.stages[st].cluster << " " << (e - st) << " stage" << (e - st > 1 ? "s" : "") << " tp"
          << p.stages[st].tp;
      if (p.stages[st].dp > 1) out << " dp" << p.stages[st].dp;
      if (p.stages[st].cp > 1) out << " cp" << p.stages[st].cp;
      out << " (layers";
      for (std::size_t k = st; k < e; ++k) out << (k == st ? " " : ",") << p.stages[k].layers;
      out << ")";
      st = e;
    }
    out << "] m " << p.micro_batches;
  }
  if (plan.recompute) out << "; recompute " << core::to_string(*plan.recompute);
  if (plan.compression)
    out << "; WAN codecs " << plan.compression->wan_activations.codec << " / "
        << plan.compression->wan_gradients.codec;
  // A DiLoCo variant is another plan than the synchronous one it came from: say so here, the
  // one description every report and the JSON print.
  if (const core::OuterSync& o = plan.outer_sync; o.enabled()) {
    out << "; DiLoCo H " << o.inner_steps;
    if (o.fragments > 1)
      out << ", streaming F " << o.fragments << ", tau " << o.overlap_steps;
    else
      out << ", blocking";
    out << ", pseudo-gradients " << (o.codec.codec.empty() ? std::string("none") : o.codec.codec);
  }
  return out.str();
}

}  // namespace hgsim::planner
