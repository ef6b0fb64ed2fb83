// `strategy.outer_sync` (DiLoCo and Streaming DiLoCo) and the training length
// (`training.tokens` / `training.iterations`): reading, checking against the plan, JSON.
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
              "the outer momentum must be in [0, 1), found " + v->text, "DiLoCo's paper uses 0.9");
    else if (mu)
      o.outer_momentum = *mu;
  }
  f.reject_unknown();
  if (o.method == OuterSyncMethod::none) return o;
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
    d.error(n.where, path, "must be at least one token, found " + n.text,
            "write a count such as 1T (10^12), 300B or 2.5M (K, M, B or G, T: powers of 1000)");
    return std::nullopt;
  }
  return *v * scale;
}

}  // namespace hgsim::core
