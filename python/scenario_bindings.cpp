// Scenarios, plans and the simulator: load_scenario, load_plan, resolve, simulate, plan.
// Each calls the function its `hgsim` command calls (apps/), so the module and the command
// line cannot disagree; the simulator and the planner run with the GIL released.
#include <sstream>

#include <pybind11/stl.h>

#include "apps/plan_command.hpp"
#include "apps/point_choice.hpp"
#include "apps/run_point.hpp"
#include "apps/validate.hpp"
#include "compress/codec_spec.hpp"
#include "models/schedule.hpp"
#include "python/bindings.hpp"
#include "sim/chakra.hpp"
#include "sim/iterations.hpp"
#include "sim/outer_sync.hpp"

namespace hgsim::python {
namespace {

struct OnePoint {
  apps::CheckedScenario checked;
  std::string path;  // the scenario file, "" for a dict
};

// Every checked point of a scenario argument; hgsim.Error with every problem.
std::vector<apps::CheckedPoint> checked_points(const Document& doc) {
  core::Diagnostics diags;
  auto points = apps::check_scenario_document(doc.node, doc.path, diags);
  if (!points) {
    if (!diags.has_errors()) throw Error(doc.path + ": not a valid scenario");
    throw Error(message_of(diags));
  }
  raise_or_warn(diags);
  return *points;
}

// A scenario argument that must be one point (no sweep, or a sweep of one value).
OnePoint checked_one(py::handle source, const std::string& function) {
  const Document doc = read_document(source, "scenario");
  auto points = checked_points(doc);
  if (points.size() > 1)
    throw Error((doc.path.empty() ? std::string("scenario") : doc.path) +
                ": the scenario has a sweep of " + std::to_string(points.size()) +
                " points; hgsim." + function +
                " takes one (give the swept keys one value each, or run hgsim sweep)");
  return {points.front().checked, doc.path};
}

std::optional<core::Plan> given_plan(py::handle source) {
  if (source.is_none()) return std::nullopt;
  const Document doc = read_document(source, "plan");
  core::Diagnostics diags;
  auto plan = core::parse_plan(doc.node, "", diags);
  if (!plan && !diags.has_errors()) diags.error({doc.path, 0, 0}, "", "not a plan");
  raise_or_warn(diags);
  return plan;
}

// The diagnostics with the command line's option names (apps/ reports --trace-filter) as
// the Python arguments that carry them.
core::Diagnostics with_argument_names(const core::Diagnostics& diags) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"--trace-filter", "trace_filter"},   {"--trace", "trace"},       {"--profile", "profiles"},
      {"--layer-profile", "layer_profile"}, {"--fidelity", "fidelity"}, {"--plan", "plan"},
      {"--allow-oom", "allow_oom"}};
  // "e.g. --trace-filter cluster=a" in a hint: "e.g. trace_filter=\"cluster=a\"".
  const auto as_argument = [](std::string text) {
    const std::string flag = "--trace-filter ";
    for (auto at = text.find(flag); at != std::string::npos; at = text.find(flag, at)) {
      auto end = text.find_first_of(" ;)", at + flag.size());
      if (end == std::string::npos) end = text.size();
      const std::string value = text.substr(at + flag.size(), end - at - flag.size());
      const std::string argument = "trace_filter=\"" + value + "\"";
      text.replace(at, end - at, argument);
      at += argument.size();
    }
    return text;
  };
  core::Diagnostics renamed;
  for (core::Diagnostic d : diags.all()) {
    for (const auto& [option, argument] : kNames)
      if (d.key_path == option) d.key_path = argument;
    d.message = as_argument(d.message);
    d.hint = as_argument(d.hint);
    if (d.severity == core::Severity::error)
      renamed.error(d.where, d.key_path, d.message, d.hint);
    else
      renamed.warning(d.where, d.key_path, d.message, d.hint);
  }
  return renamed;
}

// Raises hgsim.Error for a step that failed; `what` when it left no diagnostic.
[[noreturn]] void fail(const core::Diagnostics& diags, const std::string& what) {
  throw Error(diags.has_errors() ? message_of(diags) : what);
}

core::Json model_json(const core::ModelConfig& m) {
  return {{"name", m.name},
          {"layers", m.layers},
          {"hidden", m.hidden},
          {"heads", m.heads},
          {"kv_heads", m.kv_heads},
          {"vocab", m.vocab},
          {"ffn_hidden", m.ffn_hidden},
          {"activation", core::to_string(m.activation)},
          {"norm", core::to_string(m.norm)},
          {"max_positions", m.max_positions},
          {"tied_embeddings", m.tied_embeddings},
          {"bias", m.bias},
          {"dropout", m.dropout}};
}

py::object load_scenario(py::handle source) {
  const Document doc = read_document(source, "scenario");
  const auto points = checked_points(doc);
  return from_json(core::scenario_to_json(points.front().checked.scenario));
}

py::object load_plan(py::handle source, py::handle scenario) {
  auto plan = given_plan(source);
  if (!scenario.is_none()) {
    const OnePoint point = checked_one(scenario, "load_plan");
    core::Diagnostics diags;
    apps::check_plan_file_against(*plan, point.checked, diags);
    raise_or_warn(diags);
  }
  return from_json(core::plan_to_json(*plan));
}

py::object resolve(py::handle scenario, py::handle plan) {
  const OnePoint point = checked_one(scenario, "resolve");
  apps::RunOptions options;
  options.plan = given_plan(plan);
  core::Diagnostics diags;
  std::optional<apps::ChosenPlan> chosen;
  std::shared_ptr<const sim::CheckedPlan> checked;
  const auto& c = point.checked;
  {
    py::gil_scoped_release release;  // strategy: auto runs the planner
    chosen = apps::choose_plan(c, options, diags);
    // The check's own resolution where there was one; the planner's plan is resolved here.
    if (chosen)
      checked = chosen->checked ? chosen->checked
                                : sim::CheckedPlan::resolve(c.scenario, c.model, c.compression,
                                                            chosen->plan, chosen->path, diags);
  }
  if (!chosen || !checked) fail(diags, "no plan to resolve");
  raise_or_warn(diags);
  // The one resolved plan (sim/resolved_plan.hpp): the live runner reads its placement,
  // segments, buckets and reshard pieces from here instead of deriving them again.
  const sim::ResolvedPlan& resolved = checked->resolved();
  core::Json out = sim::resolved_plan_json(resolved);
  const auto& codecs = resolved.choices.codecs;
  out["scenario"] = core::scenario_to_json(c.scenario);
  out["model"] = model_json(c.model);
  out["plan"] = core::plan_to_json(chosen->plan);
  out["compression"] = {{"wan_activations", compress::codec_to_json(codecs.wan_activations)},
                        {"wan_gradients", compress::codec_to_json(codecs.wan_gradients)}};
  return from_json(out);
}

py::object simulate(py::handle scenario, py::handle plan, py::handle profiles,
                    py::handle layer_profile, py::handle fidelity, py::handle trace,
                    py::handle trace_filter, bool allow_oom, py::handle chakra,
                    py::handle export_chakra, bool reprice) {
  const OnePoint point = checked_one(scenario, "simulate");
  // chakra=, else the scenario's workload: {chakra: ...}.
  const std::string& keyed = point.checked.scenario.workload_chakra;
  if (!chakra.is_none() || !keyed.empty()) {
    if (!plan.is_none() || !export_chakra.is_none())
      throw Error(
          "simulate: a Chakra trace (chakra= or the scenario's workload.chakra) is simulated "
          "instead of a plan: give no plan and no export_chakra with it");
    const std::string prefix = chakra.is_none() ? keyed : path_text(chakra);
    core::Diagnostics diags;
    std::optional<core::Json> out;
    {
      py::gil_scoped_release release;
      out = sim::simulate_chakra(point.checked.scenario, prefix, diags, reprice);
    }
    if (!out) fail(diags, "the Chakra trace gave no result");
    raise_or_warn(diags);
    return from_json(*out);
  }
  apps::RunOptions options;
  options.plan = given_plan(plan);
  if (py::isinstance<py::str>(profiles) || py::isinstance<py::bytes>(profiles) ||
      py::hasattr(profiles, "__fspath__")) {
    options.profiles.push_back(path_text(profiles));
  } else if (!profiles.is_none()) {
    for (py::handle p : profiles) options.profiles.push_back(path_text(p));
  }
  if (!layer_profile.is_none()) options.layer_profile = path_text(layer_profile);
  if (!options.layer_profile.empty() && !options.profiles.empty())
    throw Error(
        "simulate: give profiles or layer_profile, not both (a layer profile costs all "
        "compute)");
  if (!fidelity.is_none()) {
    options.fidelity = text_of(fidelity);
    if (options.fidelity != "full" && options.fidelity != "folded" && options.fidelity != "auto")
      throw Error("simulate: fidelity is 'full', 'folded' or 'auto', not '" +
                  core::excerpt(options.fidelity) + "'");
  }
  if (!trace.is_none()) options.sim.trace_path = path_text(trace);
  if (!trace_filter.is_none()) {
    if (!py::isinstance<py::str>(trace_filter))
      throw py::type_error(
          "simulate: trace_filter must be a str (\"cluster=NAME,stage=N,"
          "kind=KIND\"), not a " +
          core::excerpt(text_of(trace_filter.get_type().attr("__name__"))));
    if (trace.is_none())
      throw Error(
          "simulate: trace_filter filters the trace written to trace=, and trace is "
          "None (give trace=FILE.json)");
    options.trace_filter = text_of(trace_filter);
  }
  options.sim.allow_oom = allow_oom;
  if (!export_chakra.is_none()) options.sim.chakra_prefix = path_text(export_chakra);
  core::Diagnostics diags;
  std::optional<sim::Results> result;
  {
    py::gil_scoped_release release;
    result = apps::simulate_point(point.checked, options, diags);
  }
  if (!result) fail(with_argument_names(diags), "the simulation gave no result");
  for (const std::string& w : result->warnings) diags.warning({}, "", w);
  raise_or_warn(diags);
  return from_json(sim::to_json(*result));
}

py::object plan(py::handle scenario, double time_budget_s, int verify, bool baselines,
                bool no_compression) {
  if (!(time_budget_s > 0)) throw Error("plan: time_budget_s must be positive");
  if (verify < 1 || verify > 100) throw Error("plan: verify is between 1 and 100");
  const OnePoint point = checked_one(scenario, "plan");
  apps::PlanCommandOptions options;
  options.json = true;
  options.time_budget_s = time_budget_s;
  options.verify = verify;
  options.baselines = baselines;
  options.no_compression = no_compression;
  std::ostringstream progress;
  core::Diagnostics diags;
  std::optional<apps::PlanReport> report;
  {
    py::gil_scoped_release release;
    report = apps::plan_report(point.checked, options, progress, diags);
  }
  if (!report) fail(diags, "the plan could not be evaluated");
  raise_or_warn(diags);
  // The report itself, in its JSON form: the same object `hgsim plan --json` prints, built
  // by the same function (not parsed from the command's output).
  return from_json(apps::to_json(*report));
}

// A quantity as the scenario language writes it, in its base unit: bytes, bytes per second,
// seconds. The one parser (core/units.hpp), so Python never reads "10Gbps" on its own.
double parse_quantity(const std::string& text, const std::string& kind) {
  auto check = [&](const auto& parsed) {
    if (!parsed) throw Error("'" + core::excerpt(text) + "': " + parsed.error);
    return parsed.value->value();
  };
  if (kind == "bytes") return check(core::parse_size(text));
  if (kind == "bandwidth") return check(core::parse_bandwidth(text));
  if (kind == "duration") return check(core::parse_duration(text));
  throw Error("parse_quantity: kind '" + core::excerpt(kind) +
              "' is not bytes, bandwidth or duration");
}

// The simulator's outer-sync schedule (sim::outer_sync_events), for the live runner: one
// dict per fragment all-reduce, in the order they start.
py::list outer_sync_events(int iterations, int inner_steps, int fragments, int overlap_steps) {
  if (iterations < 0) throw Error("outer_sync_events: iterations must be at least 0");
  if (inner_steps < 1 || fragments < 1 || overlap_steps < 1)
    throw Error("outer_sync_events: inner_steps, fragments and overlap_steps must be at least 1");
  if (inner_steps % fragments != 0)
    throw Error("outer_sync_events: fragments must divide inner_steps");
  if (fragments > 1 && overlap_steps > inner_steps / fragments)
    throw Error("outer_sync_events: overlap_steps must be at most inner_steps / fragments");
  // One dict per fragment all-reduce: the list is bounded before it is built.
  constexpr double kMaxEvents = 1e6;
  const double events = (static_cast<double>(iterations) / inner_steps + 1) * fragments;
  if (events > kMaxEvents)
    throw Error("outer_sync_events: " + std::to_string(iterations) +
                " iterations with inner_steps " + std::to_string(inner_steps) + " and " +
                std::to_string(fragments) +
                " fragments make more than 10^6 outer syncs; ask for fewer iterations");
  core::OuterSync o;
  o.method = core::OuterSyncMethod::diloco;
  o.inner_steps = inner_steps;
  o.fragments = fragments;
  o.overlap_steps = overlap_steps;
  py::list out;
  for (const auto& e : sim::outer_sync_events(iterations, o)) {
    py::dict d;
    d["fragment"] = e.fragment;
    d["start_after"] = e.start_after;
    d["applies_after"] = e.applies_after;
    out.append(d);
  }
  return out;
}

// The op order one stage plays (models/schedule.hpp), for the live runner: a list of
// ("F" or "B", micro-batch, chunk).
py::list schedule(const std::string& name, int stages, int stage, int micro_batches, int chunks) {
  std::optional<core::Schedule> which;
  for (core::Schedule s :
       {core::Schedule::gpipe, core::Schedule::one_f_one_b, core::Schedule::interleaved})
    if (core::to_string(s) == name) which = s;
  if (!which)
    throw Error("schedule: '" + core::excerpt(name) + "' is not gpipe, 1f1b or interleaved");
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1 || chunks < 1)
    throw Error("schedule: need 0 <= stage < stages, micro_batches >= 1 and chunks >= 1");
  if (*which != core::Schedule::interleaved && chunks != 1)
    throw Error("schedule: only the interleaved schedule has more than one chunk");
  if (*which == core::Schedule::interleaved && micro_batches % stages != 0)
    throw Error("schedule: the interleaved schedule needs micro_batches a multiple of stages");
  // Two ops per (micro-batch, chunk): the list is bounded before it is built.
  constexpr double kMaxOps = 1e7;
  if (2.0 * micro_batches * chunks > kMaxOps)
    throw Error("schedule: more than 10^7 ops; ask for fewer micro-batches or chunks");
  py::list out;
  for (const models::PipeOp& op :
       models::schedule_for(*which, stages, stage, micro_batches, chunks))
    out.append(py::make_tuple(op.forward ? "F" : "B", op.micro_batch, op.chunk));
  return out;
}

std::pair<int, int> fragment_layers(int layers, int fragment, int fragments) {
  if (fragments < 1 || fragment < 0 || fragment >= fragments || layers < fragments)
    throw Error("fragment_layers: need 0 <= fragment < fragments <= layers");
  return sim::fragment_layers(layers, fragment, fragments);
}

// What a sweep point ran, from its database columns (apps/point_choice.hpp: the rule of
// `hgsim results`): {"text": "8 GPUs (a 4, b 4); ...", "choice": {...} or None}; the text
// is "plan not recorded" when neither column gives one. A column that is not what hgsim
// sweep writes raises hgsim.Error naming it.
py::dict point_choice(const std::optional<py::bytes>& plan,
                      const std::optional<py::bytes>& choice) {
  apps::PointRow row;
  row.status = "ok";
  row.settings = "{}";
  row.result = "{}";
  row.plan = plan ? std::string(*plan) : "";
  row.choice = choice ? std::string(*choice) : "";
  if (const auto why = apps::row_refusal(row)) throw Error(*why);
  py::dict out;
  out["text"] = apps::point_choice_text(row);
  out["choice"] = from_json(apps::choice_json(row));
  return out;
}

}  // namespace

void bind_scenario(py::module_& m) {
  m.def("parse_quantity", &parse_quantity, py::arg("text"), py::arg("kind"),
        "A quantity (\"10Gbps\", \"25MB\", \"15ms\") in bytes, bytes/s or seconds; kind is "
        "\"bytes\", \"bandwidth\" or \"duration\".");
  m.def("load_scenario", &load_scenario, py::arg("src"),
        "The scenario (a path to YAML/JSON, or a dict) checked, in its canonical JSON form.");
  m.def("load_plan", &load_plan, py::arg("src"), py::arg("scenario") = py::none(),
        "A plan (path or dict) in its JSON form; checked against `scenario` when given.");
  m.def("resolve", &resolve, py::arg("scenario"), py::arg("plan") = py::none(),
        "The resolved plan: the scenario, the resolved model, the plan that runs, its effective "
        "choices and codecs, every GPU's place, the stages' layers, the segments with their "
        "gradient buckets and the reshard pieces between stages.");
  m.def("simulate", &simulate, py::arg("scenario"), py::arg("plan") = py::none(), py::kw_only(),
        py::arg("profiles") = py::none(), py::arg("layer_profile") = py::none(),
        py::arg("fidelity") = py::none(), py::arg("trace") = py::none(),
        py::arg("trace_filter") = py::none(), py::arg("allow_oom") = false,
        py::arg("chakra") = py::none(), py::arg("export_chakra") = py::none(),
        py::arg("reprice") = false,
        "One simulated iteration: the `hgsim run --json` object; chakra=PREFIX simulates that "
        "Chakra trace instead (`hgsim run --chakra`), reprice=True pricing its compute by the "
        "kernel model (`--reprice`); export_chakra=PREFIX also writes the iteration as "
        "Chakra ET (`hgsim run --export-chakra`).");
  m.def("outer_sync_events", &outer_sync_events, py::arg("iterations"), py::arg("inner_steps"),
        py::arg("fragments") = 1, py::arg("overlap_steps") = 1,
        "The simulator's outer-sync schedule: [{fragment, start_after, applies_after}] in "
        "iterations finished when each fragment's pseudo-gradient is taken and when its update "
        "applies.");
  m.def("schedule", &schedule, py::arg("schedule"), py::arg("stages"), py::arg("stage"),
        py::arg("micro_batches"), py::arg("chunks") = 1,
        "The order in which stage `stage` of `stages` runs its passes under `schedule` "
        "(\"gpipe\", \"1f1b\", \"interleaved\"), as the simulator plays it: "
        "[(\"F\" or \"B\", micro_batch, chunk)].");
  m.def("fragment_layers", &fragment_layers, py::arg("layers"), py::arg("fragment"),
        py::arg("fragments"),
        "Layers [first, end) of a Streaming DiLoCo fragment (embeddings go with fragment 0, "
        "the final norm and head with the last).");
  m.def("point_choice", &point_choice, py::arg("plan") = py::none(), py::arg("choice") = py::none(),
        "What a sweep point ran, from its database's plan and choice columns (bytes): "
        "{\"text\": \"8 GPUs (a 4, b 4); <plan>\", \"choice\": {plan, gpus_used, "
        "gpus_per_cluster} or None}; the text is \"plan not recorded\" when neither gives "
        "one, as in hgsim results.");
  m.def("plan", &plan, py::arg("scenario"), py::kw_only(), py::arg("time_budget_s") = 60.0,
        py::arg("verify") = 3, py::arg("baselines") = false, py::arg("no_compression") = false,
        "Search a plan as `hgsim plan --json` does and return what it prints.");
}

}  // namespace hgsim::python
