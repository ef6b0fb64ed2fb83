#include "sim/resolved_plan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/text.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"

namespace hgsim::sim {

// ---- effective choices -------------------------------------------------------------------

std::optional<PlanChoices> apply_plan_choices(const core::Scenario& s,
                                              const compress::CompressionSpecs& scenario_codecs,
                                              const core::Plan& plan, const std::string& plan_path,
                                              core::Diagnostics& diags) {
  PlanChoices out = scenario_choices(s, scenario_codecs);
  if (plan.recompute) out.training.recompute = *plan.recompute;
  if (plan.compression) {
    const std::string base = core::child_path(plan_path, "compression");
    auto activations = compress::resolve_codec(plan.compression->wan_activations, s,
                                               core::child_path(base, "wan_activations"), diags);
    auto gradients = compress::resolve_codec(plan.compression->wan_gradients, s,
                                             core::child_path(base, "wan_gradients"), diags);
    if (!activations || !gradients) return std::nullopt;
    out.codecs = {*activations, *gradients};
  }
  if (plan.outer_sync.enabled()) {
    const std::string at = core::child_path(core::child_path(plan_path, "outer_sync"), "codec");
    auto outer = compress::resolve_codec(plan.outer_sync.codec, s, at, diags);
    if (!outer) return std::nullopt;
    out.outer_sync_codec = *outer;
  }
  out.recompute = out.training.recompute;
  out.sequence_parallel = plan.sequence_parallel;
  out.zero = plan.zero;
  out.grad_reduce = plan.grad_reduce;
  out.tp_comm_overlap = plan.tp_comm_overlap;
  return out;
}

PlanChoices scenario_choices(const core::Scenario& s,
                             const compress::CompressionSpecs& scenario_codecs) {
  PlanChoices out;
  out.training = s.training;
  out.codecs = scenario_codecs;
  out.recompute = s.training.recompute;
  out.precision = s.training.precision;
  out.attention = s.training.attention;
  return out;
}

kernels::LayerWork layer_work(const core::ModelConfig& model, const PlanChoices& choices,
                              int micro_batch, int tp, int dp, int cp) {
  kernels::LayerWork work;
  work.model = &model;
  work.sequences = static_cast<double>(micro_batch) / dp / cp;
  work.seq_len = choices.training.seq_len;
  work.tp = tp;
  work.sequence_parallel = choices.sequence_parallel;
  work.precision = choices.precision;
  work.recompute = choices.recompute;
  work.attention = choices.attention;
  work.flash_version = choices.training.flash_version;
  return work;
}

double boundary_bytes(const core::ModelConfig& model, const PlanChoices& choices,
                      double sequences) {
  return models::pipeline_boundary_bytes(model, sequences, choices.training.seq_len,
                                         choices.precision)
      .value();
}

// ---- placement ---------------------------------------------------------------------------

int PlacedGroup::node(const core::Scenario& s) const {
  return first_gpu / s.clusters[cluster].gpus_per_node;
}

int GpuPlace::position(const core::Scenario& s) const {
  return node * s.clusters[cluster].gpus_per_node + index;
}

std::string gpu_name(const core::Cluster& c, int position) {
  return c.name + "/n" + std::to_string(position / c.gpus_per_node) + "/g" +
         std::to_string(position % c.gpus_per_node);
}

namespace {

std::string stage_path(const std::string& plan_path, std::size_t pipeline, std::size_t stage) {
  return core::index_path(
      core::child_path(core::index_path(core::child_path(plan_path, "pipelines"), pipeline),
                       "stages"),
      stage);
}

// Where a key path of the plan was written: in the scenario for its own plan; a plan file
// has no positions in the scenario (as core::check_plan).
core::SourceLocation plan_where(const core::Scenario& s, const std::string& plan_path,
                                const std::string& path) {
  return plan_path == "strategy" ? s.where(path) : core::SourceLocation{};
}

// First fit over the nodes of one cluster, in the order of `order`; -1 on success, else
// the index (into `groups`) of the first group without room. A group larger than a node
// holds whole nodes (tp a multiple of per_node): the first run of that many empty nodes.
int first_fit(std::vector<PlacedGroup>& groups, const std::vector<int>& order, int nodes,
              int per_node) {
  std::vector<int> fill(nodes, 0);
  for (int k : order) {
    PlacedGroup& g = groups[k];
    if (g.tp > per_node) {
      if (g.tp % per_node != 0) return k;
      const int span = g.tp / per_node;
      int first = -1;
      for (int n = 0, run = 0; n < nodes && first < 0; ++n) {
        run = fill[n] == 0 ? run + 1 : 0;
        if (run == span) first = n + 1 - span;
      }
      if (first < 0) return k;
      std::fill(fill.begin() + first, fill.begin() + first + span, per_node);
      g.first_gpu = first * per_node;
      continue;
    }
    int node = 0;
    while (node < nodes && fill[node] + g.tp > per_node) ++node;
    if (node == nodes) return k;
    g.first_gpu = node * per_node + fill[node];
    fill[node] += g.tp;
  }
  return -1;
}

}  // namespace

std::optional<std::vector<PlacedGroup>> place_groups(const core::Scenario& s,
                                                     const core::Plan& plan,
                                                     const std::string& plan_path,
                                                     core::Diagnostics& diags) {
  std::vector<PlacedGroup> groups;
  std::vector<std::vector<int>> of_cluster(s.clusters.size());
  bool known = true;
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    const auto& pipeline = plan.pipelines[i];
    for (int r = 0; r < pipeline.replicas; ++r)
      for (std::size_t st = 0; st < pipeline.stages.size(); ++st) {
        const auto& stage = pipeline.stages[st];
        const std::optional<int> found = s.cluster_index(stage.cluster);
        if (!found) {
          // check_plan names the unknown cluster; here it only stops placement.
          const std::string path = core::child_path(stage_path(plan_path, i, st), "cluster");
          if (r == 0 && known)
            diags.error(plan_where(s, plan_path, path), path,
                        "unknown cluster '" + core::excerpt(stage.cluster) +
                            "': the stage cannot be placed");
          known = false;
          continue;
        }
        const int c = *found;
        for (int d = 0; d < stage.dp; ++d)
          for (int k = 0; k < stage.cp; ++k) {
            of_cluster[c].push_back(static_cast<int>(groups.size()));
            groups.push_back({static_cast<int>(i), r, static_cast<int>(st), d, c, stage.tp, 0, k});
          }
      }
  }
  if (!known) return std::nullopt;
  bool placed = true;
  for (std::size_t c = 0; c < s.clusters.size(); ++c) {
    const auto& cluster = s.clusters[c];
    std::vector<int> order = of_cluster[c];
    if (order.empty()) continue;
    if (cluster.nodes <= 0 || cluster.gpus_per_node <= 0) {  // reported where it was read
      placed = false;
      continue;
    }
    if (first_fit(groups, order, cluster.nodes, cluster.gpus_per_node) < 0) continue;
    // Largest first places every set of sizes that divide each other.
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return groups[a].tp > groups[b].tp; });
    const int stuck = first_fit(groups, order, cluster.nodes, cluster.gpus_per_node);
    if (stuck < 0) continue;
    placed = false;
    const PlacedGroup& g = groups[stuck];
    const std::string path = core::child_path(stage_path(plan_path, g.pipeline, g.stage), "tp");
    int used = 0;
    for (int k : of_cluster[c]) used += groups[k].tp;
    diags.error(
        plan_where(s, plan_path, path), path,
        "the tensor-parallel groups of cluster '" + cluster.name + "' (" + std::to_string(used) +
            " GPUs in groups of up to " + std::to_string(g.tp) + ") cannot be placed on its " +
            std::to_string(cluster.nodes) + " nodes of " + std::to_string(cluster.gpus_per_node) +
            " GPUs without splitting a group across nodes (this group of tp " +
            std::to_string(g.tp) + " finds no " +
            (g.tp > cluster.gpus_per_node ? "run of empty nodes" : "node with room") + ")",
        "a tensor-parallel group stays inside one node or holds whole nodes: use tp degrees "
        "that divide gpus_per_node (" +
            std::to_string(cluster.gpus_per_node) + ") or are multiples of it, or fewer GPUs of '" +
            cluster.name + "'");
  }
  if (!placed) return std::nullopt;
  return groups;
}

// ---- layers, segments, reshard pieces -----------------------------------------------------

int model_chunks(const core::Plan& plan) {
  return plan.schedule == core::Schedule::interleaved ? plan.virtual_stages : 1;
}

std::vector<std::vector<LayerRange>> stage_layers(const core::Pipeline& pipeline, int chunks) {
  std::vector<std::vector<LayerRange>> out(pipeline.stages.size(), std::vector<LayerRange>(chunks));
  int first = 0;
  for (int c = 0; c < chunks; ++c)
    for (std::size_t st = 0; st < pipeline.stages.size(); ++st) {
      const int n = pipeline.stages[st].layers / chunks;
      out[st][c] = {first, n};
      first += n;
    }
  return out;
}

namespace {

// Members per node, in node order, of the groups of `cluster` that `holds` (pipeline, stage).
template <typename Holds>
std::vector<int> members_per_node(const ResolvedPlan& r, int cluster, Holds holds) {
  std::vector<int> per_node(static_cast<std::size_t>(r.scenario->clusters[cluster].nodes), 0);
  for (const PlacedGroup& g : r.groups) {
    if (g.cluster != cluster || !holds(g.pipeline, g.stage)) continue;
    const auto node = static_cast<std::size_t>(g.node(*r.scenario));
    if (node >= per_node.size()) per_node.resize(node + 1, 0);  // never for a checked plan
    ++per_node[node];
  }
  std::vector<int> out;  // per node holding members, in node order: its members
  for (int members : per_node)
    if (members > 0) out.push_back(members);
  return out;
}

}  // namespace

std::vector<int> segment_members_per_node(const ResolvedPlan& r, const Segment& seg, int cluster) {
  return members_per_node(r, cluster, [&](int pipeline, int stage) {
    return pipeline < int(seg.holders.size()) && stage == seg.holders[pipeline].first;
  });
}

std::vector<int> stage_members_per_node(const ResolvedPlan& r, int pipeline, int stage) {
  const int cluster = r.scenario->cluster_index(r.stage(pipeline, stage).cluster).value_or(0);
  return members_per_node(r, cluster, [&](int p, int st) { return p == pipeline && st == stage; });
}

int bucket_lowest_layer(int first_layer, int layers, int buckets, int bucket) {
  // The 1e-9 keeps an exact multiple (b + 1) n / buckets from rounding up past itself.
  const int covered =
      static_cast<int>(std::ceil(double(bucket + 1) * layers / std::max(buckets, 1) - 1e-9));
  return first_layer + layers - std::max(covered, 1);
}

std::vector<BucketRun> bucket_runs(int first_layer, int layers, int buckets) {
  auto lowest_of = [&](int b) { return bucket_lowest_layer(first_layer, layers, buckets, b); };
  std::vector<BucketRun> out;
  for (int b = 0; b < buckets;) {
    const int lowest = lowest_of(b);
    int last = b, step = 1;
    while (last + step < buckets && lowest_of(last + step) == lowest) {
      last += step;
      step *= 2;
    }
    for (int past = std::min(last + step, buckets); past - last > 1;) {
      const int mid = last + (past - last) / 2;
      (lowest_of(mid) == lowest ? last : past) = mid;
    }
    out.push_back({lowest, b, last});
    b = last + 1;
  }
  return out;
}

GradientBuckets gradient_buckets(double parameters, int rings, const PlanChoices& choices,
                                 core::Bytes bucket) {
  const double per_ring =
      models::gradient_sync_bytes(parameters, choices.training, choices.zero).value() / rings;
  GradientBuckets out;
  out.count = std::max(1, static_cast<int>(std::ceil(per_ring / bucket.value())));
  out.bytes_per_ring = per_ring / out.count;
  return out;
}

std::vector<ReshardPiece> reshard_pieces(const core::Stage& from, const core::Stage& to) {
  const long n_from = long{from.slices()} * from.tp;
  const long n_to = long{to.slices()} * to.tp;
  const long units = std::lcm(n_from, n_to);
  const long from_unit = units / n_from;
  const long to_unit = units / n_to;
  std::vector<ReshardPiece> out;
  long at = 0;
  while (at < units) {
    const long end = std::min((at / from_unit + 1) * from_unit, (at / to_unit + 1) * to_unit);
    out.push_back(
        {static_cast<int>(at / from_unit), static_cast<int>(at / to_unit), at, end, units});
    at = end;
  }
  return out;
}

namespace {

// (stage, chunk) of every layer in one pipeline.
std::vector<std::pair<int, int>> holders_of_layers(
    const std::vector<std::vector<LayerRange>>& ranges, int layers) {
  std::vector<std::pair<int, int>> out(layers, {-1, -1});
  for (std::size_t st = 0; st < ranges.size(); ++st)
    for (std::size_t c = 0; c < ranges[st].size(); ++c)
      for (int l = ranges[st][c].first; l < ranges[st][c].first + ranges[st][c].count; ++l)
        if (l < layers) out[l] = {static_cast<int>(st), static_cast<int>(c)};
  // Layers past the stages' total (check_plan refuses such plans) go to the last chunk.
  const int last_stage = static_cast<int>(ranges.size()) - 1;
  const int last_chunk = ranges.empty() ? 0 : static_cast<int>(ranges.back().size()) - 1;
  for (auto& h : out)
    if (h.first < 0) h = {last_stage, last_chunk};
  return out;
}

double segment_parameters(const core::ModelConfig& m, int first_layer, int layers) {
  double params = layers * models::layer_parameters(m);
  if (first_layer == 0) params += models::embedding_parameters(m);
  if (first_layer + layers == m.layers)
    params += models::final_norm_parameters(m) + models::lm_head_parameters(m);
  return params;
}

std::vector<Segment> make_segments(const ResolvedPlan& r) {
  const auto& plan = r.plan;
  const int layers = r.model->layers;
  std::vector<std::vector<std::pair<int, int>>> per_pipeline;
  for (const auto& ranges : r.layers) per_pipeline.push_back(holders_of_layers(ranges, layers));
  std::vector<Segment> out;
  for (int l = 0; l < layers; ++l) {
    std::vector<std::pair<int, int>> h;
    for (const auto& p : per_pipeline) h.push_back(p[l]);
    if (!out.empty() && out.back().holders == h)
      ++out.back().layers;
    else
      out.push_back({l, 1, h});
  }
  for (Segment& seg : out) {
    seg.parameters = segment_parameters(*r.model, seg.first_layer, seg.layers);
    seg.rings = std::numeric_limits<int>::max();
    for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
      const auto& st = plan.pipelines[i].stages[seg.holders[i].first];
      seg.members += plan.pipelines[i].replicas * st.slices();
      seg.rings = std::min(seg.rings, st.tp);
    }
    if (seg.members < 2) continue;
    const GradientBuckets b =
        gradient_buckets(seg.parameters, seg.rings, r.choices, plan.grad_sync.bucket);
    seg.buckets = b.count;
    seg.bucket_bytes = b.bytes_per_ring;
  }
  // Buckets are numbered in backward order (the last layers' gradients are ready first).
  int number = 0;
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    it->first_bucket = number;
    number += it->buckets;
  }
  return out;
}

}  // namespace

// ---- the resolved plan -------------------------------------------------------------------

const core::Stage& ResolvedPlan::stage(int pipeline, int stage) const {
  return plan.pipelines[pipeline].stages[stage];
}

GpuPlace ResolvedPlan::gpu(const PlacedGroup& g, int tp_rank) const {
  const int per_node = scenario->clusters[g.cluster].gpus_per_node;
  const int position = g.first_gpu + tp_rank;
  return {g.cluster, position / per_node, position % per_node};
}

kernels::LayerWork ResolvedPlan::layer_work(const core::Stage& stage) const {
  return sim::layer_work(*model, choices, plan.micro_batch, stage.tp, stage.dp, stage.cp);
}

double ResolvedPlan::boundary_bytes() const {
  return sim::boundary_bytes(*model, choices, plan.micro_batch);
}

double ResolvedPlan::slice_bytes(const core::Stage& stage) const {
  return sim::boundary_bytes(*model, choices,
                             static_cast<double>(plan.micro_batch) / stage.slices());
}

std::optional<ResolvedPlan> resolve_plan(const core::Scenario& s, const core::ModelConfig& model,
                                         const compress::CompressionSpecs& scenario_codecs,
                                         const core::Plan& plan, const std::string& plan_path,
                                         core::Diagnostics& diags) {
  // A plan read with errors (a pipeline without stages) has nothing to resolve.
  for (const auto& pipeline : plan.pipelines)
    if (pipeline.stages.empty()) return std::nullopt;
  auto choices = apply_plan_choices(s, scenario_codecs, plan, plan_path, diags);
  auto groups = place_groups(s, plan, plan_path, diags);
  if (!choices || !groups) return std::nullopt;
  ResolvedPlan r;
  r.scenario = &s;
  r.model = &model;
  r.plan = plan;
  r.choices = std::move(*choices);
  r.chunks = model_chunks(plan);
  r.groups = std::move(*groups);
  for (const auto& pipeline : plan.pipelines) {
    r.layers.push_back(stage_layers(pipeline, r.chunks));
    const int p = static_cast<int>(pipeline.stages.size());
    std::vector<std::vector<ReshardPiece>> pieces(p);
    for (int st = 0; st + 1 < p; ++st)
      pieces[st] = reshard_pieces(pipeline.stages[st], pipeline.stages[st + 1]);
    if (r.chunks > 1 && p > 1)
      pieces[p - 1] = reshard_pieces(pipeline.stages[p - 1], pipeline.stages[0]);
    r.reshard.push_back(std::move(pieces));
  }
  r.segments = make_segments(r);
  r.gpus_used = used_gpus(plan);
  r.gpus_available = s.total_gpus();
  return r;
}

std::optional<ResolvedPlan> check_and_resolve(const core::Scenario& s,
                                              const core::ModelConfig& model,
                                              const compress::CompressionSpecs& scenario_codecs,
                                              const core::Plan& plan, const std::string& plan_path,
                                              core::Diagnostics& diags) {
  const int before = diags.error_count();
  core::check_plan(plan, s, model.layers, plan_path, diags);
  models::check_plan_against_model(plan, model, s, plan_path, diags);
  if (diags.error_count() != before) return std::nullopt;
  return resolve_plan(s, model, scenario_codecs, plan, plan_path, diags);
}

core::Json resolved_plan_json(const ResolvedPlan& r) {
  const auto& s = *r.scenario;
  core::Json ranks = core::Json::array();
  for (const PlacedGroup& g : r.groups)
    for (int t = 0; t < g.tp; ++t) {
      const GpuPlace place = r.gpu(g, t);
      const auto& cluster = s.clusters[g.cluster];
      ranks.push_back({{"rank", ranks.size()},
                       {"pipeline", g.pipeline},
                       {"replica", g.replica},
                       {"stage", g.stage},
                       {"dp", g.dp_rank},
                       {"cp", g.cp_rank},
                       {"tp", t},
                       {"cluster", cluster.name},
                       {"node", place.node},
                       {"index", place.index},
                       {"device", gpu_name(cluster, place.position(s))}});
    }
  core::Json stages = core::Json::array();
  for (std::size_t i = 0; i < r.plan.pipelines.size(); ++i) {
    core::Json list = core::Json::array();
    for (std::size_t st = 0; st < r.plan.pipelines[i].stages.size(); ++st) {
      const auto& stage = r.plan.pipelines[i].stages[st];
      core::Json layers = core::Json::array();
      for (const LayerRange& range : r.layers[i][st]) layers.push_back({range.first, range.count});
      list.push_back({{"cluster", stage.cluster},
                      {"tp", stage.tp},
                      {"dp", stage.dp},
                      {"cp", stage.cp},
                      {"layers", layers}});
    }
    stages.push_back(list);
  }
  core::Json segments = core::Json::array();
  for (const Segment& seg : r.segments) {
    core::Json holders = core::Json::array(), chunks = core::Json::array();
    for (const auto& [stage, chunk] : seg.holders) {
      holders.push_back(stage);
      chunks.push_back(chunk);
    }
    segments.push_back({{"first_layer", seg.first_layer},
                        {"layers", seg.layers},
                        {"holders", holders},
                        {"holder_chunks", chunks},
                        {"parameters", seg.parameters},
                        {"members", seg.members},
                        {"rings", seg.rings},
                        {"buckets", seg.buckets},
                        {"bucket_bytes", seg.bucket_bytes},
                        {"first_bucket", seg.first_bucket}});
  }
  core::Json reshard = core::Json::array();
  for (const auto& pipeline : r.reshard) {
    core::Json boundaries = core::Json::array();
    for (const auto& pieces : pipeline) {
      core::Json list = core::Json::array();
      for (const ReshardPiece& p : pieces)
        list.push_back({p.from_slice, p.to_slice, p.begin, p.end, p.units});
      boundaries.push_back(list);
    }
    reshard.push_back(boundaries);
  }
  return {{"choices",
           {{"recompute", core::to_string(r.choices.recompute)},
            {"sequence_parallel", r.choices.sequence_parallel},
            {"precision", core::to_string(r.choices.precision)},
            {"attention", core::to_string(r.choices.attention)},
            {"zero", r.choices.zero},
            {"grad_reduce", core::to_string(r.choices.grad_reduce)},
            {"tp_comm_overlap", r.choices.tp_comm_overlap}}},
          {"ranks", ranks},
          {"stages", stages},
          {"segments", segments},
          {"reshard", reshard},
          {"gpus_used", r.gpus_used},
          {"gpus_available", r.gpus_available}};
}

core::Fidelity automatic_fidelity(int gpus) {
  return gpus <= full_fidelity_max_gpus ? core::Fidelity::full : core::Fidelity::folded;
}

int used_gpus(const core::Plan& plan) {
  int n = 0;
  for (const auto& [cluster, gpus] : used_gpus_per_cluster(plan)) n += gpus;
  return n;
}

std::vector<std::pair<std::string, int>> used_gpus_per_cluster(const core::Plan& plan) {
  std::vector<std::pair<std::string, int>> per_cluster;
  for (const auto& p : plan.pipelines)
    for (const auto& st : p.stages) {
      auto it = std::find_if(per_cluster.begin(), per_cluster.end(),
                             [&](const auto& c) { return c.first == st.cluster; });
      if (it == per_cluster.end()) it = per_cluster.insert(per_cluster.end(), {st.cluster, 0});
      it->second += p.replicas * st.gpus();
    }
  return per_cluster;
}

}  // namespace hgsim::sim
