#include "apps/sweep_command.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "apps/cli_checks.hpp"
#include "apps/commands.hpp"
#include "apps/point_choice.hpp"
#include "apps/results_command.hpp"
#include "apps/results_db.hpp"
#include "apps/validate.hpp"
#include "core/files.hpp"
#include "core/process.hpp"
#include "sim/results.hpp"

#ifndef HGSIM_VERSION
#define HGSIM_VERSION "0.0.0"
#endif

namespace hgsim::apps {
namespace {

namespace fs = std::filesystem;
using core::Json;
using Clock = std::chrono::steady_clock;

MpiSessionFactory g_mpi_factory = nullptr;

// ---- keys for --resume -------------------------------------------------------------------

// FNV-1a, 64 bits: a point's key, not a security boundary.
std::uint64_t fnv1a(const std::string& text, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << v;
  return s.str();
}

// A file's contents as a digest ("missing" when it cannot be read; read as every input is,
// so a FIFO or /dev/zero given as a profile cannot hang the sweep here).
std::string file_digest(const std::string& path) {
  core::Diagnostics unread;  // the profile's own reader reports why, where it is used
  const auto text = core::read_input_file(path, "profile", unread);
  return text ? hex(fnv1a(*text)) : "missing";
}

// What every point runs with, beyond its scenario: part of its key and of the sweep table.
Json options_json(const RunOptions& run) {
  Json profiles = Json::array();
  for (const std::string& p : run.profiles)
    profiles.push_back({{"file", p}, {"digest", file_digest(p)}});
  Json out{{"fidelity", run.fidelity.empty() ? Json(nullptr) : Json(run.fidelity)},
           {"profiles", profiles},
           {"time_budget_s", run.planner_time_budget_s},
           {"allow_oom", run.sim.allow_oom}};
  out["plan"] = run.plan_file.empty()
                    ? Json(nullptr)
                    : Json{{"file", run.plan_file}, {"digest", file_digest(run.plan_file)}};
  out["layer_profile"] =
      run.layer_profile.empty()
          ? Json(nullptr)
          : Json{{"file", run.layer_profile}, {"digest", file_digest(run.layer_profile)}};
  return out;
}

// A point's key: its resolved scenario (every default filled in; not the grid it is a point
// of, so that growing the grid keeps the points done) and the run options.
std::string point_hash(const CheckedPoint& p, const std::string& options) {
  core::Scenario s = p.checked.scenario;
  s.sweep.clear();
  return hex(fnv1a(options, fnv1a(core::scenario_to_json(s).dump())));
}

Json settings_json(const std::vector<std::pair<std::string, std::string>>& settings) {
  Json out = Json::object();
  for (const auto& [path, value] : settings) out[path] = Json::parse(value);
  return out;
}

// ---- processes ---------------------------------------------------------------------------

// Points at once: as many as the termination handlers track.
constexpr int kMaxJobs = core::kTrackedChildren;

// One point running in a process of its own (core::start_child: tracked, so that the
// termination handlers hgsim installs end it with hgsim); its outcome arrives on its pipe.
struct Running {
  long long k = 0;
  core::Child child;
  std::string text;
  Clock::time_point started;
};

// Forks the process of point k. It dies with this one, and says nothing on the terminal
// (the planner's progress and warnings would garble the progress line): its outcome,
// errors included, comes back on the pipe.
Running start_point(const SweepJob& job, long long k) {
  core::Child child = core::start_child(
      [&job, k] {
        if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) {
          ::dup2(null, STDOUT_FILENO);
          ::dup2(null, STDERR_FILENO);
        }
        return run_point_here(job, k);
      },
      "the point's process");
  return Running{k, child, {}, Clock::now()};
}

// Reaps a finished point process; its outcome, or why it has none.
std::string finish_point(Running& r) {
  std::string why;
  try {
    std::string text = core::reap_child(r.child, std::move(r.text));
    if (!text.empty()) return text;
    why = "the point's process ended without giving a result";
  } catch (const core::ChildFailed& e) {
    why = std::string(e.what()) + " before giving a result";
  }
  return Json{{"ok", false}, {"error", why}}.dump();
}

// Runs `todo`, `jobs` points at a time; `done` as each finishes, `tick` at least once a
// second.
void run_local(const SweepJob& job, const std::vector<long long>& todo, int jobs,
               const PointDone& done, const std::function<void()>& tick) {
  // Whatever ends this early (an error writing the database) ends its points too
  // (core::run_children kills and reaps the children in flight).
  std::vector<Clock::time_point> started(todo.size());
  core::run_children(
      todo.size(), jobs,
      [&](std::size_t i) -> std::optional<core::Child> {
        Running r = start_point(job, todo[i]);
        started[i] = r.started;
        return r.child;
      },
      [&](std::size_t i, core::Child child, std::string text) {
        Running r{todo[i], child, std::move(text), started[i]};
        const std::string outcome = finish_point(r);
        done(r.k, outcome, std::chrono::duration<double>(Clock::now() - r.started).count());
      },
      tick, 1000);
  tick();
}

// ---- what a person sees ------------------------------------------------------------------

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// "path=value ..." in the order of the sweep's axes.
std::string settings_text(const Json& settings, const std::vector<std::string>& axes) {
  std::string out;
  for (const std::string& axis : axes)
    if (settings.contains(axis))
      out += (out.empty() ? "" : " ") + axis + "=" + settings[axis].dump();
  return out;
}

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

// The progress line on a terminal: points done, failed, running, to go, and the ETA.
class Progress {
 public:
  Progress(std::ostream& err, bool terminal, std::size_t total, int jobs)
      : err_(err), terminal_(terminal), total_(total), jobs_(jobs) {}
  void finished(bool ok) { ok ? ++ok_ : ++failed_; }
  void clear() {
    if (terminal_ && shown_) err_ << "\r\033[K" << std::flush;
    shown_ = false;
  }
  void show() {
    if (!terminal_) return;
    const std::size_t done = ok_ + failed_;
    const std::size_t running = std::min<std::size_t>(total_ - done, jobs_);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    std::string eta = "-";
    if (done > 0) eta = core::human_duration(core::Seconds(elapsed / done * double(total_ - done)));
    err_ << "\r\033[Khgsim sweep: " << done << "/" << total_ << " done (" << failed_ << " failed), "
         << running << " running, ETA " << eta << std::flush;
    shown_ = true;
  }
  std::size_t ok() const { return ok_; }
  std::size_t failed() const { return failed_; }

 private:
  std::ostream& err_;
  bool terminal_;
  std::size_t total_;
  int jobs_;
  std::size_t ok_ = 0, failed_ = 0;
  bool shown_ = false;
  Clock::time_point start_ = Clock::now();
};

// One line per finished point, as it finishes.
std::string point_line(const PointRow& row, const std::vector<std::string>& axes) {
  std::ostringstream s;
  s << std::setw(5) << row.point << "  " << settings_text(Json::parse(row.settings), axes) << "  ";
  if (row.status == "ok")
    s << "ok  " << core::human_duration(core::Seconds(*row.iteration_time_s)) << "/iteration  "
      << fixed(*row.tokens_per_s, 0) << " tokens/s  MFU " << fixed(100 * *row.mfu, 1) << "%  "
      << point_choice_text(row);
  else
    s << "FAILED: " << first_line(row.error);
  s << "  (" << fixed(row.wall_s, 2) << " s)\n";
  return s.str();
}

// The database's rows (all, or one point) as {"points": [...]}, streamed from the database.
void print_json(ResultsDb& db, std::optional<long long> only, std::ostream& out) {
  out << "{\"points\": [";
  bool first = true;
  std::vector<SqlValue> params;
  if (only) params.push_back({SqlValue::Kind::number, "", double(*only)});
  db.for_each(only ? "point = ?" : "", params, [&](const PointRow& row) {
    check_row(row, db.named());
    Json j{{"point", row.point},
           {"settings", Json::parse(row.settings)},
           {"status", row.status},
           {"error", row.error.empty() ? Json(nullptr) : Json(row.error)},
           {"plan", row.plan.empty() ? Json(nullptr) : Json::parse(row.plan)},
           {"result", row.result.empty() ? Json(nullptr) : Json::parse(row.result)},
           {"choice", choice_json(row)},
           {"wall_s", row.wall_s}};
    out << (first ? "\n" : ",\n") << j.dump();
    first = false;
  });
  out << "\n]}\n";
}

// --list: checks every point (one at a time, none kept), then lists them, or point `only`.
int list_points(const std::string& path, bool json, std::optional<long long> only,
                std::ostream& out, std::ostream& err) {
  core::Diagnostics diags;
  auto document = core::load_document(path, diags);
  if (!document || diags.has_errors()) {
    err << diags.format();
    return kBadInput;
  }
  const SweepPoints points(*document, path, diags);
  for (std::size_t k = 0; k < points.size(); ++k) points.point(k, diags);
  err << diags.format();
  if (diags.has_errors() || points.size() == 0) return kBadInput;
  const std::size_t total = points.size();
  if (only && *only >= static_cast<long long>(total)) {
    err << "hgsim sweep: --point " << *only << ": the sweep has " << total << " point"
        << (total == 1 ? "" : "s") << " (0 to " << total - 1 << ")\n";
    return kBadInput;
  }
  const std::size_t first = only ? static_cast<std::size_t>(*only) : 0;
  const std::size_t last = only ? first + 1 : total;
  if (json) {
    Json list = Json::array();
    for (std::size_t k = first; k < last; ++k)
      list.push_back({{"point", k}, {"settings", settings_json(points.settings(k))}});
    out << Json{{"points", list}}.dump(2) << "\n";
    return kSuccess;
  }
  out << total << " sweep point" << (total == 1 ? "" : "s") << ", each valid"
      << (only ? "; point " + std::to_string(first) + ":" : ":") << "\n";
  for (std::size_t k = first; k < last; ++k) {
    out << "  " << std::setw(3) << k << "  ";
    for (const auto& [key, value] : points.settings(k)) out << key << "=" << value << "  ";
    out << "\n";
  }
  return kSuccess;
}

// Opens the sweep database, refusing a file that is something else.
std::unique_ptr<ResultsDb> open_for_sweep(const std::string& path) {
  std::error_code ec;
  const bool exists = fs::exists(path, ec) && fs::file_size(path, ec) > 0;
  if (exists) {
    auto db = std::make_unique<ResultsDb>(path, false);
    if (!db->is_sweep_db())
      throw DbError(db->named() +
                    " is an SQLite database, but not a sweep database (no points table)");
  }
  auto db = std::make_unique<ResultsDb>(path, true);
  db->lock_for_writing();
  return db;
}

// The scenario's name in a sweep table's scenario (its canonical JSON), "" when it has none.
std::string scenario_name(const std::string& scenario_json) {
  try {
    const Json scenario = Json::parse(scenario_json);
    if (scenario.contains("name") && scenario["name"].is_string()) return scenario["name"];
  } catch (const Json::exception&) {
  }
  return {};
}

// Why `db`, which already holds points, may not take this scenario's points (--resume,
// --point): it holds the sweep of a scenario of another name. A scenario edited or moved
// keeps its name, and --resume reruns exactly its changed points; another scenario's
// results would be replaced point by point, silently. Nullopt when they may mix.
std::optional<std::string> foreign_sweep(ResultsDb& db, const core::Node& document,
                                         const std::string& scenario_path) {
  const auto info = db.sweep();
  if (!info) return std::nullopt;
  const core::Node* name = document.find("name");
  const std::string ours = name != nullptr && name->is_scalar() ? name->text : "";
  const std::string theirs = scenario_name(info->scenario);
  if (theirs == ours) return std::nullopt;
  return db.named() + " holds the sweep of scenario '" + core::excerpt(theirs) + "' (" +
         core::path_excerpt(info->scenario_file) + ", " + std::to_string(info->points) +
         " points), not of '" + core::excerpt(ours) + "' (" + core::path_excerpt(scenario_path) +
         "): its points would be replaced\n  --db FILE writes this sweep into another "
         "database; remove the database to start over";
}

// --resume: which points of the grid the database already holds, ok for the same resolved
// scenario and options (`keys`). A row `hgsim results` would refuse (row_refusal) is never
// kept: its point runs again, or, numbered outside the grid, its row is dropped; each is said
// on `err`.
std::vector<bool> rows_to_keep(ResultsDb& db, const std::vector<std::string>& keys,
                               std::optional<long long> only, std::ostream& err) {
  const long long total = static_cast<long long>(keys.size());
  std::vector<bool> have(keys.size(), false);
  db.for_each("", {}, [&](const PointRow& row) {
    const bool in_grid = row.point >= 0 && row.point < total;
    if (const auto why = row_refusal(row)) {
      err << "hgsim sweep: warning: " << db.named() << ", point " << row.point << ": " << *why
          << (!in_grid                      ? "; the row is dropped\n"
              : !only || *only == row.point ? "; the point runs again\n"
                                            : "; hgsim results refuses the database until "
                                              "the point runs again (--resume without --point)\n");
      return;
    }
    if (in_grid && row.status == "ok" &&
        keys[static_cast<std::size_t>(row.point)] == row.scenario_hash)
      have[static_cast<std::size_t>(row.point)] = true;
  });
  return have;
}

}  // namespace

std::string default_sweep_db(const std::string& scenario_path) {
  fs::path p(scenario_path);
  p.replace_extension(".sweep.sqlite");
  return p.string();
}

void register_mpi(MpiSessionFactory factory) {
  g_mpi_factory = factory;
}

std::string run_point_in_child(const SweepJob& job, long long k) {
  Running r = start_point(job, k);
  std::vector<char> buffer(core::kPipeChunk);  // on the heap: see core::kPipeChunk
  for (;;) {
    const ssize_t got = ::read(r.child.fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    r.text.append(buffer.data(), static_cast<std::size_t>(got));
  }
  return finish_point(r);
}

std::string run_point_here(const SweepJob& job, long long k) {
  try {
    core::Diagnostics diags;
    auto point = job.points->point(static_cast<std::size_t>(k), diags);
    if (!point) return Json{{"ok", false}, {"error", diags.format()}}.dump();
    auto result = simulate_point(point->checked, job.run, diags);
    if (!result) return Json{{"ok", false}, {"error", diags.format()}}.dump();
    return Json{{"ok", true},
                {"result", sim::to_json(*result)},
                {"plan", core::plan_to_json(result->plan)},
                {"choice", choice_to_json(point_choice(result->plan))}}
        .dump();
  } catch (const std::exception& e) {
    return Json{{"ok", false}, {"error", std::string("internal error: ") + e.what()}}.dump();
  }
}

CLI::App* add_sweep_command(CLI::App& app, SweepOptions& o) {
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run every point of a scenario's sweep grid into a results database");
  sweep->add_option("SCENARIO", o.scenario, "scenario file")->required();
  sweep->add_flag("--json", o.json,
                  "print the points as JSON (from the database, in point order) at the end");
  sweep->add_flag("--list", o.list_only,
                  "only expand and check the points; do not run them (with --point K: list "
                  "point K)");
  sweep
      ->add_option("-j,--jobs", o.jobs,
                   "points at once, each in a process of its own (default: the cores)")
      ->check(integer_in(1, kMaxJobs));
  sweep
      ->add_option("--db", o.db,
                   "the results database (SQLite; default: beside the scenario, as "
                   "<name>.sweep.sqlite)")
      ->check(non_empty_path());
  sweep->add_flag("--resume", o.resume,
                  "continue the database (a sweep of a scenario of the same name): skip the "
                  "points already ok for the same resolved scenario and options, run the rest");
  sweep->add_flag("--mpi", o.mpi,
                  "run under MPI (mpirun -n N hgsim sweep ... --mpi): rank 0 owns the database "
                  "and hands out points, the other ranks run them");
  sweep->add_option("--point", o.point, "run only point K (0-based, grid order; see --list)")
      ->check(integer_in(0, std::numeric_limits<int>::max()));
  sweep
      ->add_option("--plan", o.run.plan_file,
                   "a plan file (JSON or YAML) to play at every point instead of the "
                   "scenario's strategy")
      ->check(non_empty_path());
  sweep
      ->add_option("--time-budget", o.run.planner_time_budget_s,
                   "seconds of planner search and verification per point (strategy: auto; "
                   "default 60)")
      ->check(finite_positive(kMaxTimeBudgetS));
  sweep
      ->add_option("--layer-profile", o.run.layer_profile,
                   "a layer profile (hgsim-layer-profile/1): every device's compute comes "
                   "from it, at every point")
      ->check(non_empty_path());
  sweep
      ->add_option("--fidelity", o.run.fidelity,
                   "full, folded or auto at every point (overrides simulation.fidelity)")
      ->check(CLI::IsMember({"full", "folded", "auto"}));
  return sweep;
}

int run_sweep_command(const SweepOptions& o, std::ostream& out, std::ostream& err) {
  if (o.list_only) {
    if (o.resume) {
      err << "hgsim sweep: --list only checks and lists the points, it runs none: --resume "
             "has nothing to continue (drop --list to run the points the database lacks)\n";
      return kBadInput;
    }
    return list_points(o.scenario, o.json, o.point, out, err);
  }

  std::unique_ptr<MpiSession> mpi;
  if (o.mpi) {
    if (!g_mpi_factory) {
      err << "hgsim sweep: --mpi: this hgsim was built without MPI (libopenmpi-dev was missing "
             "when it was configured)\n  install the packages of scripts/debian-packages.txt "
             "and rebuild, or run the sweep on one machine with -j N\n";
      return kBadInput;
    }
    std::string why;
    mpi = g_mpi_factory(why);
    if (!mpi) {
      err << "hgsim sweep: --mpi: " << why << "\n";
      return kBadInput;
    }
  }
  const bool rank0 = !mpi || mpi->rank() == 0;

  // Every point is checked before any runs (bad input is not a failed point).
  core::Diagnostics diags;
  auto document = core::load_document(o.scenario, diags);
  if (!document || diags.has_errors()) {
    if (rank0) err << diags.format();
    return kBadInput;
  }
  const SweepPoints points(*document, o.scenario, diags);
  const std::string options = options_json(o.run).dump();
  std::vector<std::string> keys;
  std::vector<std::string> settings;
  for (std::size_t k = 0; k < points.size(); ++k) {
    auto p = points.point(k, diags);
    if (!p) continue;
    keys.push_back(point_hash(*p, options));
    settings.push_back(settings_json(p->settings).dump());
  }
  if (diags.has_errors() || points.size() == 0) {
    if (rank0) err << diags.format();
    return kBadInput;
  }
  if (rank0) err << diags.format();
  const long long total = static_cast<long long>(points.size());
  if (o.point && *o.point >= total) {
    if (rank0)
      err << "hgsim sweep: --point " << *o.point << ": the sweep has " << total << " point"
          << (total == 1 ? "" : "s") << " (0 to " << total - 1 << "; hgsim sweep "
          << core::path_excerpt(o.scenario) << " --list shows them)\n";
    return kBadInput;
  }
  SweepJob job{&points, o.run};
  if (!rank0) {
    mpi->serve(job);
    return kSuccess;
  }

  // The database: refuse to mix into a finished sweep unless asked to continue it.
  const std::string db_path = o.db.empty() ? default_sweep_db(o.scenario) : o.db;
  std::unique_ptr<ResultsDb> db;
  std::vector<long long> todo;
  long long skipped = 0;
  std::error_code exists_error;
  const bool created = !fs::exists(db_path, exists_error) && !exists_error;
  // A database this sweep created and could not record a point in goes, with its WAL and
  // shared memory, rather than stay as an empty sweep.
  auto remove_database = [&] {
    db.reset();
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path + suffix, ignored);
  };
  try {
    db = open_for_sweep(db_path);
    const long long rows = db->point_count();
    if (rows > 0 && !o.resume && !o.point) {
      err << "hgsim sweep: " << db->named() << " already holds " << rows << " point"
          << (rows == 1 ? "" : "s")
          << " of a sweep\n  --resume continues it (the points already ok for the same "
             "scenario are skipped), --db FILE writes another, or remove it to start over\n";
      return kBadInput;
    }
    if (rows > 0)
      if (const auto why = foreign_sweep(*db, *document, o.scenario)) {
        err << "hgsim sweep: " << *why << "\n";
        return kBadInput;
      }
    std::vector<bool> have(static_cast<std::size_t>(total), false);
    if (o.resume) have = rows_to_keep(*db, keys, o.point, err);
    if (!o.point || o.resume) db->delete_points_outside(total);
    for (long long k = o.point ? *o.point : 0; k < (o.point ? *o.point + 1 : total); ++k) {
      if (have[static_cast<std::size_t>(k)]) {
        ++skipped;
        continue;
      }
      todo.push_back(k);
    }
    db->write_sweep({fs::absolute(o.scenario).lexically_normal().string(),
                     core::to_json(*document).dump(), HGSIM_VERSION, options,
                     Json(points.axis_paths()).dump(), total, utc_now()});
  } catch (const DbError& e) {
    err << "hgsim sweep: " << e.what() << "\n";
    return kBadInput;
  } catch (const core::EnvironmentLimit&) {
    // A limit kept the sweep from even locking the database it created (ulimit -n): it
    // holds no point, and is removed rather than left as an empty sweep.
    if (created) remove_database();
    throw;
  }

  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int jobs = mpi ? mpi->size() - 1 : std::clamp(o.jobs > 0 ? o.jobs : cores, 1, kMaxJobs);
  // Points planned side by side share the cores: each planner gets its share of them.
  if (!mpi) job.run.planner_jobs = std::max(1, cores / std::max(jobs, 1));
  const bool terminal = &err == &std::cerr && ::isatty(STDERR_FILENO);
  Progress progress(err, terminal, todo.size(), std::max(jobs, 1));
  if (skipped > 0)
    err << "hgsim sweep: " << skipped << " point" << (skipped == 1 ? "" : "s") << " already ok in "
        << core::path_excerpt(db_path) << " (skipped); " << todo.size() << " to run\n";
  std::vector<long long> failed;
  long long recorded = 0;
  const auto started = Clock::now();
  const std::vector<std::string> axes = points.axis_paths();
  auto done = [&](long long k, const std::string& outcome, double wall_s) {
    Json o_json;
    try {
      o_json = Json::parse(outcome);
    } catch (const Json::exception&) {
      o_json = {{"ok", false}, {"error", "the point's process gave an unreadable result"}};
    }
    PointRow row;
    row.point = k;
    row.settings = settings[static_cast<std::size_t>(k)];
    row.scenario_hash = keys[static_cast<std::size_t>(k)];
    row.wall_s = wall_s;
    row.finished_at = utc_now();
    if (o_json.value("ok", false)) {
      const Json& r = o_json["result"];
      row.status = "ok";
      row.iteration_time_s = r["iteration_time_s"].get<double>();
      row.tokens_per_s = r["tokens_per_s"].get<double>();
      row.mfu = r["mfu"].get<double>();
      row.plan = o_json["plan"].dump();
      row.result = r.dump();
      if (o_json.contains("choice")) row.choice = o_json["choice"].dump();
    } else {
      row.status = "failed";
      row.error = o_json.value("error", "unknown error");
      failed.push_back(k);
    }
    db->record(row);
    ++recorded;
    progress.finished(row.status == "ok");
    progress.clear();
    if (!o.json) out << point_line(row, axes) << std::flush;
    progress.show();
  };
  try {
    if (mpi && mpi->size() > 1)
      mpi->dispatch(todo, done, [&] { progress.show(); });
    else
      run_local(job, todo, mpi ? 1 : jobs, done, [&] { progress.show(); });
    progress.clear();
    if (o.json) print_json(*db, o.point, out);
  } catch (const DbError& e) {
    // The user's database refused a write (a full disk, a read-only file, a trigger): the
    // points in flight are ended, and every point written before stays readable.
    progress.clear();
    err << "hgsim sweep: " << e.what() << "\n  the points written before it stay in " << db->named()
        << " (hgsim results " << db->named()
        << "); hgsim sweep --resume continues once the database takes writes again\n";
    return kBadInput;
  } catch (...) {
    // No point could run (no process could start: ulimit -n, ulimit -u): a database this
    // sweep created holds no point, and is removed rather than left as an empty sweep.
    progress.clear();
    if (created && recorded == 0) remove_database();
    throw;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  err << "hgsim sweep: " << todo.size() << " point" << (todo.size() == 1 ? "" : "s") << " run in "
      << core::human_duration(core::Seconds(elapsed)) << ": " << progress.ok() << " ok, "
      << failed.size() << " failed";
  for (std::size_t i = 0; i < failed.size() && i < 10; ++i)
    err << (i == 0 ? " (point " : ", ") << failed[i];
  if (!failed.empty()) err << (failed.size() > 10 ? ", ...)" : ")");
  err << "; results in " << core::path_excerpt(db_path) << " (hgsim results "
      << core::path_excerpt(db_path) << ")\n";
  return failed.empty() ? kSuccess : kBadInput;
}

}  // namespace hgsim::apps
