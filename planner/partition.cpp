#include "planner/partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hgsim::planner {

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();
// The bisection on the slowest stage's time: it stops when the bracket is this close
// relative to its top (above double precision, below any time that matters) or after this many
// halvings (each halves it: 100 is far more than the 53 a double's mantissa needs).
constexpr double bisection_relative_tolerance = 1e-12;
constexpr int bisection_max_steps = 100;
// A stage's layer count under time T is floor((T - extra) / per_layer); a T computed as
// exactly k layers' time can round a hair below k, so the ratio is raised by this much.
constexpr double floor_rounding_slack = 1e-12;

double stage_time(const StageShape& s, int layers) {
  return layers * s.per_layer_s + s.extra_s;
}

}  // namespace

double slowest_stage(const std::vector<StageShape>& stages, const std::vector<int>& layers) {
  double worst = 0;
  for (std::size_t s = 0; s < stages.size(); ++s)
    worst = std::max(worst, stage_time(stages[s], layers[s]));
  return worst;
}

bool memory_binds(const std::vector<StageShape>& stages, const std::vector<int>& layers, int unit) {
  const double slowest = slowest_stage(stages, layers);
  int total = 0;
  for (int k : layers) total += k;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const int most = stages[s].max_layers / unit * unit;
    if (most + unit < total && stage_time(stages[s], most + unit) <= slowest) return true;
  }
  return false;
}

std::vector<int> partition_layers(const std::vector<StageShape>& stages, int layers, int unit) {
  const int p = static_cast<int>(stages.size());
  if (p == 0 || layers % unit != 0) return {};
  const int units = layers / unit;
  std::vector<int> cap(p);
  long total_cap = 0;
  double lo = 0, hi = 0;
  for (int s = 0; s < p; ++s) {
    cap[s] = stages[s].max_layers / unit;
    if (cap[s] < 1) return {};
    total_cap += cap[s];
    lo = std::max(lo, stage_time(stages[s], unit));
    hi = std::max(hi, stage_time(stages[s], std::min(cap[s], units) * unit));
  }
  if (total_cap < units || units < p) return {};
  // How many units stages can take without exceeding time T.
  auto take = [&](double T, std::vector<int>* out) {
    long sum = 0;
    for (int s = 0; s < p; ++s) {
      const double per_unit = stages[s].per_layer_s * unit;
      int k = per_unit > 0 ? static_cast<int>(std::floor((T - stages[s].extra_s) / per_unit *
                                                         (1 + floor_rounding_slack)))
                           : cap[s];
      k = std::clamp(k, 1, cap[s]);
      if (out) (*out)[s] = k;
      sum += k;
    }
    return sum;
  };
  if (take(lo, nullptr) < units) {
    for (int step = 0; step < bisection_max_steps && hi - lo > bisection_relative_tolerance * hi;
         ++step) {
      const double mid = 0.5 * (lo + hi);
      (take(mid, nullptr) >= units ? hi : lo) = mid;
    }
    lo = hi;
  }
  std::vector<int> k(p);
  long sum = take(lo, &k);
  // Give back the surplus from the slowest stages: the maximum never grows.
  while (sum > units) {
    int worst = -1;
    for (int s = 0; s < p; ++s)
      if (k[s] > 1 && (worst < 0 || stage_time(stages[s], k[s] * unit) >
                                        stage_time(stages[worst], k[worst] * unit)))
        worst = s;
    --k[worst];
    --sum;
  }
  for (int& v : k) v *= unit;
  return k;
}

std::vector<int> partition_layers_dp(const std::vector<StageShape>& stages, int layers, int unit) {
  const int p = static_cast<int>(stages.size());
  if (p == 0 || layers % unit != 0) return {};
  const int units = layers / unit;
  // best[s][u]: the smallest slowest-stage time of stages 0..s-1 holding u units.
  std::vector<std::vector<double>> best(p + 1, std::vector<double>(units + 1, infinity));
  std::vector<std::vector<int>> choice(p + 1, std::vector<int>(units + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= p; ++s) {
    const int cap = stages[s - 1].max_layers / unit;
    for (int u = 0; u <= units; ++u)
      for (int j = 1; j <= std::min(cap, u); ++j) {
        const double t = std::max(best[s - 1][u - j], stage_time(stages[s - 1], j * unit));
        if (t < best[s][u]) {
          best[s][u] = t;
          choice[s][u] = j;
        }
      }
  }
  if (best[p][units] == infinity) return {};
  std::vector<int> out(p);
  for (int s = p, u = units; s >= 1; --s) {
    out[s - 1] = choice[s][u] * unit;
    u -= choice[s][u];
  }
  return out;
}

}  // namespace hgsim::planner
