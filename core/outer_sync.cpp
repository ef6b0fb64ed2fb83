// `strategy.outer_sync` (DiLoCo and Streaming DiLoCo) and the training length
// (`training.tokens` / `training.iterations`): reading, checking against the plan, JSON.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/enum_names.hpp"
#include "core/scenario.hpp"

namespace hgsim::core {

std::string to_string(OuterSyncMethod v) {
  return detail::name_of(v);
}
std::string to_string(OuterOptimizer v) {
  return detail::name_of(v);
}

std::optional<OuterSync> parse_outer_sync(const Node& n, const std::string& path, Diagnostics& d) {
  if (n.is_scalar() && n.text == "none") return OuterSync{};
  Fields f(n, path, d);
  if (!f.ok()) return std::nullopt;
  OuterSync o;
  const int errors_before = d.error_count();
  auto count = [&](const Node& v, const std::string& p) { return as_positive_count(v, p, d); };
  auto read_count = [&](std::string_view key, int& target) {
    if (const Node* v = f.optional(key))
      if (auto c = count(*v, f.path_of(key))) target = *c;
  };
  if (const Node* m = f.required("method"))
    if (auto v = detail::as_enum<OuterSyncMethod>(*m, f.path_of("method"), d, "outer-sync method"))
      o.method = *v;
  read_count("inner_steps", o.inner_steps);
  read_count("fragments", o.fragments);
  read_count("overlap_steps", o.overlap_steps);
  if (const Node* c = f.optional("codec"))
    if (auto codec = parse_codec(*c, f.path_of("codec"), d)) o.codec = *codec;
  if (const Node* v = f.optional("outer_optimizer"))
    if (auto e =
            detail::as_enum<OuterOptimizer>(*v, f.path_of("outer_optimizer"), d, "outer optimizer"))
      o.outer_optimizer = *e;
  if (const Node* v = f.optional("outer_lr")) {
    auto lr = as_number(*v, f.path_of("outer_lr"), d);
    if (lr && *lr <= 0)
      d.error(v->where, f.path_of("outer_lr"), "the outer learning rate must be above 0",
              "DiLoCo's paper uses 0.7");
    else if (lr)
      o.outer_lr = *lr;
  }
  if (const Node* v = f.optional("outer_momentum")) {
    auto mu = as_number(*v, f.path_of("outer_momentum"), d);
    if (mu && (*mu < 0 || *mu >= 1))
      d.error(v->where, f.path_of("outer_momentum"),
              "the outer momentum must be in [0, 1), found " + excerpt(v->text),
              "DiLoCo's paper uses 0.9");
    else if (mu)
      o.outer_momentum = *mu;
  }
  f.reject_unknown();
  // The checks across keys need every key read: a refused inner_steps is still the default
  // here, and a message would quote a value the file does not hold.
  if (o.method == OuterSyncMethod::none || d.error_count() != errors_before) return o;
  auto where = [&](std::string_view key) {
    const Node* v = f.optional(key);
    return v ? v->where : n.where;
  };
  if (o.inner_steps % o.fragments != 0)
    d.error(where("fragments"), f.path_of("fragments"),
            std::to_string(o.fragments) + " fragments do not divide inner_steps " +
                std::to_string(o.inner_steps),
            "each fragment syncs once every inner_steps steps, staggered by inner_steps / "
            "fragments: pick fragments that divide inner_steps");
  else if (o.fragments > 1 && o.overlap_steps > o.inner_steps / o.fragments)
    d.error(where("overlap_steps"), f.path_of("overlap_steps"),
            "a fragment's transfer overlaps at most inner_steps / fragments = " +
                std::to_string(o.inner_steps / o.fragments) + " inner steps, found " +
                std::to_string(o.overlap_steps),
            "lower overlap_steps, or use fewer fragments");
  return o;
}

Json outer_sync_json(const OuterSync& o) {
  if (!o.enabled()) return "none";
  Json codec = o.codec.codec;
  if (!o.codec.params.empty()) {
    codec = Json{{"codec", o.codec.codec}};
    for (const auto& [k, v] : o.codec.params) codec[k] = to_json(v);
  }
  return {{"method", to_string(o.method)},
          {"inner_steps", o.inner_steps},
          {"fragments", o.fragments},
          {"overlap_steps", o.overlap_steps},
          {"codec", codec},
          {"outer_optimizer", to_string(o.outer_optimizer)},
          {"outer_lr", o.outer_lr},
          {"outer_momentum", o.outer_momentum}};
}

void check_outer_sync(const Plan& plan, const Scenario& s, int model_layers,
                      const std::string& prefix, Diagnostics& d) {
  if (!plan.outer_sync.enabled()) return;
  const std::string path = child_path(prefix, "outer_sync");
  const SourceLocation at = prefix == "strategy" ? s.where(path) : SourceLocation{};
  if (plan.pipelines.size() < 2) {
    d.error(at, path,
            "outer sync joins islands, and the plan has " + std::to_string(plan.pipelines.size()) +
                " pipeline (an island is one of the plan's pipelines with its replicas)",
            "write one pipeline per island, or remove outer_sync");
    return;
  }
  if (model_layers > 0 && plan.outer_sync.fragments > model_layers)
    d.error(at, child_path(path, "fragments"),
            std::to_string(plan.outer_sync.fragments) + " fragments, but the model has " +
                std::to_string(model_layers) + " layers",
            "a fragment is at least one layer");
  // Islands exchange pseudo-gradients shard by shard: each must cut the model the same way.
  const Pipeline& first = plan.pipelines[0];
  for (std::size_t i = 1; i < plan.pipelines.size(); ++i) {
    const Pipeline& p = plan.pipelines[i];
    bool same = p.stages.size() == first.stages.size();
    for (std::size_t st = 0; same && st < p.stages.size(); ++st)
      same =
          p.stages[st].layers == first.stages[st].layers && p.stages[st].tp == first.stages[st].tp;
    if (!same)
      d.error(at, path,
              "island " + std::to_string(i) + " (pipelines[" + std::to_string(i) +
                  "]) splits the model differently from " +
                  "island 0: outer sync needs every island's stages to hold the same layers with "
                  "the same tp",
              "give every pipeline the same stages' layers and tp (dp and replicas may differ)");
  }
}

bool PlannerSettings::allows_diloco() const {
  return std::find(outer_sync.begin(), outer_sync.end(), OuterSyncMethod::diloco) !=
         outer_sync.end();
}

namespace {

// At most this many values per list of `planner:`: each value multiplies the candidates the
// planner costs (every two-island plan gets one DiLoCo variant per H and F).
constexpr std::size_t planner_list_max = 16;

// A list of `planner:` (a single value is a list of one); each item read by `read_item`.
template <class T, class Read>
std::vector<T> planner_list(const Node& n, const std::string& path, Diagnostics& d,
                            std::string_view example, Read read_item) {
  std::vector<T> out;
  if (n.is_scalar()) {
    if (auto v = read_item(n, path)) out.push_back(*v);
    return out;
  }
  if (!n.is_sequence() || n.items.empty()) {
    d.error(n.where, path,
            "expected a list such as " + std::string(example) + ", found " + n.describe());
    return out;
  }
  if (n.items.size() > planner_list_max) {
    d.error(n.where, path,
            "at most " + std::to_string(planner_list_max) + " values, found " +
                std::to_string(n.items.size()),
            "each value is searched: keep the few worth comparing");
    return out;
  }
  for (std::size_t i = 0; i < n.items.size(); ++i)
    if (auto v = read_item(n.items[i], index_path(path, i))) out.push_back(*v);
  return out;
}

}  // namespace

PlannerSettings parse_planner_settings(const Node& n, const std::string& path, Diagnostics& d) {
  PlannerSettings p;
  Fields f(n, path, d);
  if (!f.ok()) return p;
  auto count = [&](const Node& v, const std::string& at) { return as_positive_count(v, at, d); };
  if (const Node* v = f.optional("outer_sync")) {
    auto methods = planner_list<OuterSyncMethod>(*v, f.path_of("outer_sync"), d, "[none, diloco]",
                                                 [&](const Node& item, const std::string& at) {
                                                   return detail::as_enum<OuterSyncMethod>(
                                                       item, at, d, "outer-sync method");
                                                 });
    if (!methods.empty()) p.outer_sync = methods;
  }
  if (const Node* v = f.optional("inner_steps")) {
    auto steps = planner_list<int>(*v, f.path_of("inner_steps"), d, "[50, 200]", count);
    if (!steps.empty()) p.inner_steps = steps;
  }
  if (const Node* v = f.optional("fragments")) {
    auto fragments = planner_list<int>(*v, f.path_of("fragments"), d, "[1, 4]", count);
    if (!fragments.empty()) p.fragments = fragments;
    for (std::size_t i = 0; i < fragments.size(); ++i) {
      const int F = fragments[i];
      const bool divides_one = std::any_of(p.inner_steps.begin(), p.inner_steps.end(),
                                           [&](int H) { return H % F == 0; });
      if (!divides_one) {
        const Node& item = v->is_sequence() ? v->items[i] : *v;
        d.error(item.where,
                v->is_sequence() ? index_path(f.path_of("fragments"), i) : f.path_of("fragments"),
                std::to_string(F) + " fragments divide none of the inner_steps tried",
                "a fragment syncs every H steps, staggered by H / F: pick fragments that divide "
                "one of planner.inner_steps");
      }
    }
  }
  if (const Node* v = f.optional("overlap_steps"))
    if (auto tau = count(*v, f.path_of("overlap_steps"))) p.overlap_steps = *tau;
  if (const Node* v = f.optional("diloco_token_efficiency")) {
    const std::string at = f.path_of("diloco_token_efficiency");
    auto e = as_number(*v, at, d);
    if (e && !(*e > 0 && *e <= 1))
      d.error(v->where, at,
              "the token efficiency must be above 0 and at most 1, found " + excerpt(v->text),
              "the progress one DiLoCo token buys relative to one synchronous token: 1 assumes "
              "DiLoCo trains as well per token (DiLoCo's paper, 8 workers on C4), 0.5 that it "
              "needs twice the tokens");
    else if (e)
      p.diloco_token_efficiency = *e;
  }
  if (const Node* v = f.optional("max_loss_increase")) {
    const std::string at = f.path_of("max_loss_increase");
    auto e = as_number(*v, at, d);
    if (e && !(*e >= 0 && *e <= 10))
      d.error(v->where, at,
              "the largest loss increase a codec may cost is a fraction from 0 to 10, found " +
                  excerpt(v->text),
              "e.g. 0.05: the planner uses no WAN codec whose measured final loss is more than "
              "5% above training without compression (validation/convergence.md)");
    else if (e)
      p.max_loss_increase = *e;
  }
  f.reject_unknown();
  return p;
}

Json planner_settings_json(const PlannerSettings& p) {
  Json methods = Json::array();
  for (OuterSyncMethod m : p.outer_sync) methods.push_back(to_string(m));
  Json j{{"outer_sync", methods},
         {"inner_steps", p.inner_steps},
         {"fragments", p.fragments},
         {"overlap_steps", p.overlap_steps},
         {"diloco_token_efficiency", p.diloco_token_efficiency}};
  if (p.max_loss_increase) j["max_loss_increase"] = *p.max_loss_increase;
  return j;
}

std::string diloco_token_efficiency_source(const Scenario& s) {
  if (s.locations.count("planner.diloco_token_efficiency"))
    return "the scenario's planner.diloco_token_efficiency (the user's assumption)";
  return "default of planner.diloco_token_efficiency: an assumption from DiLoCo (Douillard et "
         "al. 2023, arXiv:2311.08105), whose 8 workers on C4 perform as well as fully "
         "synchronous training";
}

std::optional<double> parse_token_count(const Node& n, const std::string& path, Diagnostics& d) {
  if (!n.is_scalar() || n.text.empty()) {
    d.error(n.where, path, "expected a token count such as 1T or 300B, found " + n.describe());
    return std::nullopt;
  }
  std::string text = n.text;
  double scale = 1;
  const char suffix = text.back();
  const std::string suffixes = "KMBGT";
  const double scales[] = {1e3, 1e6, 1e9, 1e9, 1e12};
  if (auto k = suffixes.find(suffix); k != std::string::npos) {
    scale = scales[k];
    text.pop_back();
  }
  Node number = n;
  number.text = text;
  auto v = as_number(number, path, d);
  if (!v) return std::nullopt;
  if (!(*v * scale <= 1e18)) {  // 1e300T is infinity: no training run is 10^18 tokens
    d.error(n.where, path, "a token count of " + excerpt(n.text) + " is beyond 10^18",
            "write a count such as 1T (10^12), 300B or 2.5M (K, M, B or G, T: powers of 1000)");
    return std::nullopt;
  }
  if (*v * scale < 1) {
    d.error(n.where, path, "must be at least one token, found " + excerpt(n.text),
            "write a count such as 1T (10^12), 300B or 2.5M (K, M, B or G, T: powers of 1000)");
    return std::nullopt;
  }
  return *v * scale;
}

}  // namespace hgsim::core
