// hgsim sweep: the grid (cartesian axes and zip groups), the results database, points run in
// parallel, a failing point among good ones, --resume after SIGKILL, no process left after a
// signal, and the exports of hgsim results (CSV, --where).
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "apps/commands.hpp"
#include "apps/results_command.hpp"
#include "apps/results_db.hpp"
#include "core/document.hpp"
#include "core/scenario.hpp"
#include "core/units.hpp"
#include "tests/sim_helpers.hpp"

namespace hgsim {
namespace {

namespace fs = std::filesystem;
using core::Json;

using testing::CliResult;
using testing::hgsim;

// A directory of its own per test, removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("hgsim-sweep-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path file(const std::string& name, const std::string& text = "") const {
    if (!text.empty()) std::ofstream(path_ / name) << text;
    return path_ / name;
  }

 private:
  fs::path path_;
};

// Two one-GPU clusters joined by a WAN, a two-stage 1F1B pipeline of a small model: a point
// simulates in milliseconds.
std::string scenario(const std::string& sweep) {
  return "name: sweep-test\n"
         "model: {name: small, layers: 8, hidden: 512, heads: 8, vocab: 32000}\n"
         "training: {global_batch: 8, seq_len: 512, precision: bf16, attention: standard}\n"
         "clusters:\n"
         "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
         "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
         "  - {name: b, gpu: V100-32GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
         "150GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 2us}}\n"
         "wan:\n  - {between: [a, b], bandwidth: 10Gbps, latency: 10ms}\n"
         "strategy:\n  schedule: 1f1b\n  micro_batch: 1\n  pipelines:\n"
         "    - micro_batches: 8\n      stages:\n"
         "        - {cluster: a, layers: 4}\n        - {cluster: b, layers: 4}\n" +
         sweep;
}

// Reads a table of the database with sqlite3 directly (not through the code under test).
std::vector<std::map<std::string, std::string>> rows(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::vector<std::map<std::string, std::string>> out;
  sqlite3_exec(
      h, sql.c_str(),
      [](void* p, int n, char** values, char** names) {
        auto& v = *static_cast<std::vector<std::map<std::string, std::string>>*>(p);
        v.emplace_back();
        for (int i = 0; i < n; ++i) v.back()[names[i]] = values[i] ? values[i] : "";
        return 0;
      },
      &out, nullptr);
  sqlite3_close(h);
  return out;
}

// Runs `sql` on the database directly (not through the code under test).
void exec_sql(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* why = nullptr;
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &why), SQLITE_OK) << why;
  sqlite3_free(why);
  sqlite3_close(h);
}

// Processes whose command line names `marker` (a forked point or simulator process keeps
// its parent's command line).
std::vector<int> processes_naming(const std::string& marker) {
  std::vector<int> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stoi(name) == ::getpid()) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(marker) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

// Waits (up to 10 s) until no process names `marker`; the ones left.
std::vector<int> wait_until_gone(const std::string& marker) {
  for (int i = 0; i < 200; ++i) {
    auto left = processes_naming(marker);
    if (left.empty()) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return processes_naming(marker);
}

// Starts `hgsim sweep ARGS` as a process of its own.
pid_t spawn_hgsim(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* f = std::freopen(log.c_str(), "w", stdout);
    (void)f;
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    std::vector<const char*> argv{HGSIM_BINARY};
    for (const auto& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    ::execv(HGSIM_BINARY, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  return pid;
}

TEST(SweepGrid, ZipGroupsVaryTogetherInsideTheCartesianProduct) {
  core::Diagnostics diags;
  auto doc = core::parse_yaml(scenario("sweep:\n"
                                       "  wan[0].bandwidth: [1Gbps, 10Gbps, 100Gbps]\n"
                                       "  zip:\n"
                                       "    wan[0].latency: [1ms, 50ms]\n"
                                       "    training.seq_len: [256, 1024]\n"),
                              "zip.yaml", diags);
  ASSERT_TRUE(doc) << diags.format();
  const core::SweepGrid grid(*doc, diags);
  ASSERT_FALSE(diags.has_errors()) << diags.format();
  // 3 bandwidths x 2 zipped pairs, the zip group (written last) fastest.
  ASSERT_EQ(grid.size(), 6u);
  EXPECT_EQ(grid.axis_paths(),
            (std::vector<std::string>{"wan[0].bandwidth", "wan[0].latency", "training.seq_len"}));
  const char* expected[6][3] = {{"1Gbps", "1ms", "256"},   {"1Gbps", "50ms", "1024"},
                                {"10Gbps", "1ms", "256"},  {"10Gbps", "50ms", "1024"},
                                {"100Gbps", "1ms", "256"}, {"100Gbps", "50ms", "1024"}};
  for (std::size_t k = 0; k < 6; ++k) {
    const auto p = grid.point(k);
    ASSERT_EQ(p.settings.size(), 3u);
    for (std::size_t a = 0; a < 3; ++a) {
      const Json v = Json::parse(p.settings[a].second);
      EXPECT_EQ(v.is_string() ? v.get<std::string>() : v.dump(), expected[k][a])
          << "point " << k << " axis " << a;
    }
    // The document carries the values.
    EXPECT_EQ(p.document.find("training")->find("seq_len")->text, expected[k][2]);
  }
}

TEST(SweepGrid, SeveralZipGroupsAreSeveralDimensions) {
  core::Diagnostics diags;
  auto doc = core::parse_yaml(scenario("sweep:\n"
                                       "  zip:\n"
                                       "    - wan[0].latency: [1ms, 50ms]\n"
                                       "      training.seq_len: [256, 1024]\n"
                                       "    - wan[0].bandwidth: [1Gbps, 10Gbps, 100Gbps]\n"),
                              "zip.yaml", diags);
  ASSERT_TRUE(doc);
  const core::SweepGrid grid(*doc, diags);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  EXPECT_EQ(grid.size(), 6u);
  // The scenario round-trips its zip groups through the canonical JSON.
  auto s = core::parse_scenario(*doc, "zip.yaml", diags);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->sweep.size(), 3u);
  EXPECT_EQ(s->sweep[0].zip_group, 0);
  EXPECT_EQ(s->sweep[2].zip_group, 1);
  auto again = core::parse_scenario(core::from_json(core::scenario_to_json(*s)), "", diags);
  ASSERT_TRUE(again) << diags.format();
  EXPECT_EQ(again->sweep, s->sweep);
}

TEST(SweepGrid, ZipAxesOfUnequalLengthAreAnErrorNamingTheAxis) {
  TempDir dir("zip-error");
  const auto path = dir.file("s.yaml", scenario("sweep:\n"
                                                "  zip:\n"
                                                "    wan[0].latency: [1ms, 50ms]\n"
                                                "    training.seq_len: [256, 512, 1024]\n"));
  auto r = hgsim({"sweep", path.string(), "--list"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("s.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sweep.zip.training.seq_len"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has 3"), std::string::npos) << r.err;
}

// One point of four cannot run (with standard attention its s x s score matrices do not
// fit in a V100's memory): it is recorded as failed with the reason, the other three as ok, and the
// command exits 1. -j 1 and -j 3 write the same results.
TEST(SweepCli, AFailingPointIsRecordedAndTheOthersRunTheSameAtAnyParallelism) {
  TempDir dir("failing");
  const auto path = dir.file("s.yaml", scenario("sweep:\n"
                                                "  training.seq_len: [256, 512, 131072, 1024]\n"));
  std::vector<std::vector<std::map<std::string, std::string>>> runs;
  for (const char* jobs : {"1", "3"}) {
    const auto db = dir.file(std::string("j") + jobs + ".sqlite");
    auto r = hgsim({"sweep", path.string(), "-j", jobs, "--db", db.string()});
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("3 ok, 1 failed (point 2)"), std::string::npos) << r.err;
    // Streamed: one line per point on stdout.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
    auto points = rows(db, "SELECT * FROM points ORDER BY point");
    ASSERT_EQ(points.size(), 4u);
    for (int k : {0, 1, 3}) {
      EXPECT_EQ(points[k]["status"], "ok") << points[k]["error"];
      const Json result = Json::parse(points[k]["result"]);
      // (sqlite3_exec's text of a REAL has 15 significant digits)
      EXPECT_NEAR(std::stod(points[k]["iteration_time_s"]),
                  result["iteration_time_s"].get<double>(),
                  1e-13 * result["iteration_time_s"].get<double>());
      EXPECT_EQ(Json::parse(points[k]["plan"])["schedule"], "1f1b");
    }
    EXPECT_EQ(points[2]["status"], "failed");
    EXPECT_NE(points[2]["error"].find("does not fit in memory"), std::string::npos)
        << points[2]["error"];
    EXPECT_EQ(points[2]["result"], "");
    EXPECT_EQ(Json::parse(points[2]["settings"]), Json::parse(R"({"training.seq_len": 131072})"));
    runs.push_back(points);
  }
  for (int k : {0, 1, 3}) EXPECT_EQ(runs[0][k]["result"], runs[1][k]["result"]) << k;
  // Longer sequences take longer.
  EXPECT_LT(std::stod(runs[0][0]["iteration_time_s"]), std::stod(runs[0][1]["iteration_time_s"]));
  EXPECT_LT(std::stod(runs[0][1]["iteration_time_s"]), std::stod(runs[0][3]["iteration_time_s"]));
  // The same point as `hgsim run` of the scenario with that value.
  std::string single = scenario("");
  single.replace(single.find("seq_len: 512"), 12, "seq_len: 1024");
  const auto one = dir.file("one.yaml", single);
  auto run = hgsim({"run", one.string(), "--json"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Json::parse(run.out)["iteration_time_s"],
            Json::parse(runs[0][3]["result"])["iteration_time_s"]);
}

TEST(SweepCli, TheSweepTableNamesTheScenarioVersionAndAxes) {
  TempDir dir("table");
  const auto path = dir.file("s.yaml", scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 10Gbps]\n"));
  auto r = hgsim({"sweep", path.string(), "-j", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto db = dir.file("s.sweep.sqlite");  // the default: beside the scenario
  ASSERT_TRUE(fs::exists(db));
  auto sweep = rows(db, "SELECT * FROM sweep");
  ASSERT_EQ(sweep.size(), 1u);
  EXPECT_EQ(sweep[0]["points"], "2");
  EXPECT_EQ(Json::parse(sweep[0]["axes"]), Json::parse(R"(["wan[0].bandwidth"])"));
  EXPECT_NE(sweep[0]["scenario_file"].find("s.yaml"), std::string::npos);
  EXPECT_FALSE(sweep[0]["hgsim_version"].empty());
  EXPECT_EQ(Json::parse(sweep[0]["scenario"])["sweep"]["wan[0].bandwidth"][1], "10Gbps");
  // A second sweep into the same database is refused without --resume.
  auto again = hgsim({"sweep", path.string()});
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;
  // --resume with everything ok runs nothing.
  auto resumed = hgsim({"sweep", path.string(), "--resume"});
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("2 points already ok"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("0 points run"), std::string::npos) << resumed.err;
  // --point K runs that point alone; K past the grid is bad input.
  auto one = hgsim({"sweep", path.string(), "--point", "1", "--json"});
  ASSERT_EQ(one.status, 0) << one.err;
  const Json printed = Json::parse(one.out)["points"];
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0]["point"], 1);
  EXPECT_EQ(printed[0]["settings"]["wan[0].bandwidth"], "10Gbps");
  EXPECT_EQ(hgsim({"sweep", path.string(), "--point", "2"}).status, 1);
}

// --resume after the sweep was killed with SIGKILL: the points committed before the kill
// are kept (not rerun), the rest run, and no point or simulator process outlives the kill.
TEST(SweepCli, ResumeAfterSigkillRunsOnlyWhatWasLost) {
  TempDir dir("resume");
  const auto path =
      dir.file("resume-marker.yaml",
               scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 2Gbps, 3Gbps, 4Gbps, 5Gbps, 6Gbps, "
                        "7Gbps, 8Gbps, 9Gbps, 10Gbps, 11Gbps, 12Gbps]\n"));
  const auto db = dir.file("r.sqlite");
  const pid_t pid =
      spawn_hgsim({"sweep", path.string(), "-j", "1", "--db", db.string()}, dir.file("log"));
  // Kill it once two points are in the database.
  std::size_t committed = 0;
  for (int i = 0; i < 600 && committed < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(db)) committed = rows(db, "SELECT point FROM points").size();
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(wait_until_gone(path.string()).empty()) << "a point process outlived SIGKILL";
  const auto before = rows(db, "SELECT point, finished_at, result FROM points ORDER BY point");
  ASSERT_GE(before.size(), 2u);
  if (before.size() == 12) GTEST_SKIP() << "the sweep finished before it was killed";

  auto r = hgsim({"sweep", path.string(), "--db", db.string(), "--resume", "-j", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(std::to_string(before.size()) + " points already ok"), std::string::npos)
      << r.err;
  const auto after =
      rows(db, "SELECT point, finished_at, result, status FROM points ORDER BY point");
  ASSERT_EQ(after.size(), 12u);
  for (const auto& row : after) EXPECT_EQ(row.at("status"), "ok");
  for (const auto& row : before) {  // kept as they were, not rerun
    const auto k = std::stoul(row.at("point"));
    EXPECT_EQ(after[k].at("finished_at"), row.at("finished_at"));
    EXPECT_EQ(after[k].at("result"), row.at("result"));
  }
  // A faster WAN never slows the iteration.
  for (std::size_t k = 1; k < 12; ++k)
    EXPECT_GE(Json::parse(after[k - 1].at("result"))["iteration_time_s"].get<double>(),
              Json::parse(after[k].at("result"))["iteration_time_s"].get<double>() * (1 - 1e-12));

  // A grown grid keeps the points done: a point's key is its own scenario, not the grid's.
  std::ofstream(path) << scenario(
      "sweep:\n  wan[0].bandwidth: [1Gbps, 2Gbps, 3Gbps, 4Gbps, 5Gbps, 6Gbps, 7Gbps, 8Gbps, "
      "9Gbps, 10Gbps, 11Gbps, 12Gbps, 13Gbps]\n");
  auto grown = hgsim({"sweep", path.string(), "--db", db.string(), "--resume"});
  ASSERT_EQ(grown.status, 0) << grown.err;
  EXPECT_NE(grown.err.find("12 points already ok"), std::string::npos) << grown.err;
  EXPECT_NE(grown.err.find("1 point run"), std::string::npos) << grown.err;
  // A changed scenario changes the points' keys: --resume reruns them.
  std::string text = scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 2Gbps]\n");
  text.replace(text.find("latency: 10ms"), 13, "latency: 20ms");
  std::ofstream(path) << text;
  auto changed = hgsim({"sweep", path.string(), "--db", db.string(), "--resume"});
  ASSERT_EQ(changed.status, 0) << changed.err;
  EXPECT_EQ(changed.err.find("already ok"), std::string::npos) << changed.err;
  EXPECT_EQ(rows(db, "SELECT point FROM points").size(), 2u);  // the grid shrank
}

// SIGTERM and SIGINT in the middle of a sweep of several points at once: no point process,
// no simulator survives.
TEST(SweepCli, NoProcessOutlivesASignal) {
  TempDir dir("signal");
  for (int sig : {SIGTERM, SIGINT}) {
    const auto path = dir.file("signal-marker-" + std::to_string(sig) + ".yaml",
                               scenario("sweep:\n  training.seq_len: [512, 1024, 2048, 4096, "
                                        "512, 1024, 2048, 4096]\n"));
    const auto db = dir.file("s" + std::to_string(sig) + ".sqlite");
    const pid_t pid =
        spawn_hgsim({"sweep", path.string(), "-j", "3", "--db", db.string()}, dir.file("log"));
    // Until its point processes run.
    for (int i = 0; i < 400 && processes_naming(path.string()).size() < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_TRUE(wait_until_gone(path.string()).empty()) << "signal " << sig;
  }
}

// RFC 4180: cells separated by commas, rows by newlines; a quoted cell may hold both, and
// "" for a quote.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> out(1);
  std::string cell;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.back().push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      out.back().push_back(cell);
      cell.clear();
      out.emplace_back();
    } else {
      cell += c;
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

TEST(ResultsCli, CsvHasOneColumnPerAxisAndTheDatabaseNumbers) {
  TempDir dir("csv");
  const auto path = dir.file("s.yaml", scenario("sweep:\n"
                                                "  wan[0].bandwidth: [1Gbps, 10Gbps]\n"
                                                "  zip:\n"
                                                "    wan[0].latency: [1ms, 50ms]\n"
                                                "    training.seq_len: [256, 131072]\n"));
  const auto db = dir.file("c.sqlite");
  auto r = hgsim({"sweep", path.string(), "--db", db.string(), "-j", "2"});
  EXPECT_EQ(r.status, 1);  // seq_len 131072 does not fit
  auto csv = hgsim({"results", db.string(), "--csv"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  const auto table = parse_csv(csv.out);
  ASSERT_FALSE(table.empty());
  EXPECT_EQ(table[0], (std::vector<std::string>{"point", "wan[0].bandwidth", "wan[0].latency",
                                                "training.seq_len", "status", "iteration_time_s",
                                                "tokens_per_s", "mfu", "wall_s", "finished_at",
                                                "error", "gpus_used", "gpus_per_cluster", "plan"}));
  const auto db_rows = rows(db, "SELECT * FROM points ORDER BY point");
  std::size_t n = 0;
  for (; n + 1 < table.size() && n < db_rows.size(); ++n) {
    const auto& cells = table[n + 1];
    ASSERT_EQ(cells.size(), 14u);
    EXPECT_EQ(cells[0], std::to_string(n));
    const Json settings = Json::parse(db_rows[n].at("settings"));
    EXPECT_EQ(cells[1], settings["wan[0].bandwidth"].get<std::string>());
    EXPECT_EQ(cells[3], settings["training.seq_len"].dump());
    EXPECT_EQ(cells[4], db_rows[n].at("status"));
    if (cells[4] == "ok") {  // full precision: the results JSON's own numbers
      EXPECT_EQ(std::stod(cells[5]),
                Json::parse(db_rows[n].at("result"))["iteration_time_s"].get<double>());
      EXPECT_EQ(std::stod(cells[7]), Json::parse(db_rows[n].at("result"))["mfu"].get<double>());
      // What the point ran: the GPUs of its result, per cluster, and the plan's stages.
      const Json result = Json::parse(db_rows[n].at("result"));
      EXPECT_EQ(cells[11], result["gpus_used"].dump());
      EXPECT_EQ(cells[12], "a 1, b 1");
      EXPECT_EQ(cells[13].rfind("1f1b, micro-batch 1, no ZeRO; 1 x [", 0), 0u) << cells[13];
      EXPECT_NE(cells[13].find("a 1 stage tp1 (layers 4) > b 1 stage tp1 (layers 4)"),
                std::string::npos)
          << cells[13];
    } else {
      EXPECT_EQ(cells[5], "");
      EXPECT_EQ(cells[10], db_rows[n].at("error"));  // quoted: it holds commas and lines
      EXPECT_EQ(cells[11] + cells[12] + cells[13], "");
    }
  }
  EXPECT_EQ(n, 4u);
  // --where on a column and an axis.
  auto ok = hgsim({"results", db.string(), "--csv", "--where",
                   "status = 'ok' and wan[0].bandwidth = '10Gbps'"});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(parse_csv(ok.out).size(), 2u) << ok.out;  // header + point 2
  EXPECT_NE(ok.out.find("\n2,10Gbps,1ms,256,ok,"), std::string::npos) << ok.out;
  auto json = hgsim({"results", db.string(), "--json", "--where", "training.seq_len > 1000"});
  ASSERT_EQ(json.status, 0) << json.err;
  const Json j = Json::parse(json.out);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["points"][0]["status"], "failed");
  EXPECT_EQ(j["sweep"]["points"], 4);
}

// GPUs a plan JSON uses per cluster, summed here from its stages (replicas x tp x dp x cp),
// apart from the code under test.
std::map<std::string, long long> gpus_of(const Json& plan) {
  std::map<std::string, long long> per_cluster;
  for (const Json& p : plan["pipelines"])
    for (const Json& st : p["stages"])
      per_cluster[st["cluster"].get<std::string>()] += p.value("replicas", 1LL) *
                                                       st.value("tp", 1LL) * st.value("dp", 1LL) *
                                                       st.value("cp", 1LL);
  return per_cluster;
}

// With strategy: auto the planner picks each point's plan: a sweep over cluster a's GPUs (1
// or 4) gets two different plans, and the sweep lines, the results table, CSV and JSON each
// show every point's own plan and GPUs (per cluster), as its stored plan says.
TEST(ResultsCli, ASweepWhosePointsChoseDifferentPlansShowsEachPlan) {
  TempDir dir("choice");
  std::string text = scenario("sweep:\n  clusters[0].gpus_per_node: [1, 4]\n");
  text = text.substr(0, text.find("strategy:")) + "strategy: auto\n" +
         text.substr(text.find("sweep:"));
  const auto path = dir.file("s.yaml", text);
  const auto db = dir.file("c.sqlite");
  auto sweep =
      hgsim({"sweep", path.string(), "--db", db.string(), "-j", "2", "--time-budget", "5"});
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  const auto db_rows = rows(db, "SELECT point, plan, choice FROM points ORDER BY point");
  ASSERT_EQ(db_rows.size(), 2u);
  std::vector<std::string> plans;
  for (const auto& row : db_rows) {
    const Json choice = Json::parse(row.at("choice"));
    const auto gpus = gpus_of(Json::parse(row.at("plan")));
    long long total = 0;
    for (const auto& [cluster, n] : gpus) total += n;
    EXPECT_EQ(choice["gpus_used"], total) << row.at("choice");
    for (const Json& c : choice["gpus_per_cluster"])
      EXPECT_EQ(c["gpus"], gpus.at(c["cluster"].get<std::string>())) << row.at("choice");
    EXPECT_EQ(choice["gpus_per_cluster"].size(), gpus.size()) << row.at("choice");
    plans.push_back(choice["plan"].get<std::string>());
    // The sweep's own line for the point names it.
    EXPECT_NE(sweep.out.find(plans.back()), std::string::npos) << sweep.out;
  }
  ASSERT_NE(plans[0], plans[1]) << "the two settings should choose different plans";
  auto table = hgsim({"results", db.string()});
  ASSERT_EQ(table.status, 0) << table.err;
  auto csv = hgsim({"results", db.string(), "--csv"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  const auto cells = parse_csv(csv.out);
  ASSERT_EQ(cells.size(), 3u) << csv.out;
  auto json = hgsim({"results", db.string(), "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  const Json points = Json::parse(json.out)["points"];
  ASSERT_EQ(points.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const Json choice = Json::parse(db_rows[k].at("choice"));
    const long long gpus = choice["gpus_used"].get<long long>();
    EXPECT_NE(table.out.find(std::to_string(gpus) + (gpus == 1 ? " GPU (" : " GPUs (")),
              std::string::npos)
        << table.out;
    EXPECT_NE(table.out.find(plans[k]), std::string::npos) << table.out;
    EXPECT_EQ(cells[k + 1].back(), plans[k]);
    EXPECT_EQ(cells[k + 1][cells[k + 1].size() - 3], choice["gpus_used"].dump());
    EXPECT_EQ(points[k]["choice"], choice);
  }
}

// A database an older hgsim wrote (no choice column) reads as it is: a point with its plan
// stored shows that plan's choice, one without says "plan not recorded" (JSON: null), and
// `hgsim sweep --resume` adds the column without touching the points done.
TEST(ResultsCli, ADatabaseWithoutTheChoiceColumnStillReads) {
  TempDir dir("old-schema");
  const auto path = dir.file("s.yaml", scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 10Gbps]\n"));
  const auto db = dir.file("old.sqlite");
  ASSERT_EQ(hgsim({"sweep", path.string(), "--db", db.string(), "-j", "2"}).status, 0);
  exec_sql(db,
           "ALTER TABLE points DROP COLUMN choice; UPDATE points SET plan = NULL WHERE point = 1");
  auto table = hgsim({"results", db.string()});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("2 GPUs (a 1, b 1); 1f1b, micro-batch 1"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("plan not recorded"), std::string::npos) << table.out;
  auto csv = hgsim({"results", db.string(), "--csv"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  const auto cells = parse_csv(csv.out);
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[1][cells[1].size() - 3], "2");
  EXPECT_EQ(cells[2].back(), "plan not recorded");
  auto json = hgsim({"results", db.string(), "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  const Json points = Json::parse(json.out)["points"];
  EXPECT_EQ(points[0]["choice"]["gpus_used"], 2);
  EXPECT_TRUE(points[1]["choice"].is_null());
  auto resumed = hgsim({"sweep", path.string(), "--db", db.string(), "--resume"});
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const auto after = rows(db, "SELECT point, choice FROM points ORDER BY point");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].at("choice"), "");  // the column is there, the old rows keep NULL
}

// Quantities compare as quantities, read by the scenario language's unit parser: 10Gbps
// and 2GB/s (16 Gbit/s) are >= 10Gbps, 1Gbps and 5Gbps are not (as text, '5Gbps' >= '10Gbps'),
// quoted or not; a value of another kind is refused naming the point and the axis.
TEST(ResultsCli, WhereComparesQuantitiesByValue) {
  TempDir dir("where-units");
  const auto path =
      dir.file("s.yaml", scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 5Gbps, 10Gbps, 2GB/s]\n"));
  const auto db = dir.file("u.sqlite");
  ASSERT_EQ(hgsim({"sweep", path.string(), "--db", db.string(), "-j", "2"}).status, 0);
  auto points = [&](const std::string& where) {
    auto r = hgsim({"results", db.string(), "--csv", "--where", where});
    EXPECT_EQ(r.status, 0) << where << ": " << r.err;
    std::vector<std::string> out;
    const auto table = parse_csv(r.out);
    for (std::size_t i = 1; i < table.size(); ++i) out.push_back(table[i].at(1));
    return out;
  };
  const std::vector<std::string> fast{"10Gbps", "2GB/s"};
  EXPECT_EQ(points("wan[0].bandwidth >= '10Gbps'"), fast);
  EXPECT_EQ(points("wan[0].bandwidth >= 10Gbps"), fast);
  EXPECT_EQ(points("10000Mbps <= wan[0].bandwidth"), fast);
  EXPECT_EQ(points("wan[0].bandwidth = 1.25GB/s"), std::vector<std::string>{"10Gbps"});
  EXPECT_EQ(points("wan[0].bandwidth < 5Gbps"), std::vector<std::string>{"1Gbps"});
  EXPECT_EQ(points("iteration_time_s < 24h").size(), 4u);
  EXPECT_EQ(points("iteration_time_s < 1ns").size(), 0u);
  for (const auto& [where, says] : std::vector<std::pair<std::string, std::string>>{
           {"wan[0].bandwidth > 15ms",
            "--where: point 0: wan[0].bandwidth holds '1Gbps', a bandwidth, not a duration"},
           {"wan[0].bandwidth > 5",
            "--where: point 0: wan[0].bandwidth holds '1Gbps', a bandwidth: compare it with a "
            "quantity"}}) {
    const auto r = hgsim({"results", db.string(), "--where", where});
    EXPECT_EQ(r.status, 1) << where;
    EXPECT_NE(r.err.find(says), std::string::npos) << where << ": " << r.err;
    EXPECT_EQ(r.err.find("cannot read"), std::string::npos) << r.err;
  }
}

// A database damaged by something other than hgsim: every mode refuses it with the point
// and column (never a crash, an internal error or half a JSON document on stdout), a number
// the database lacks is '-', never another point's, and reading changes nothing in the file.
TEST(ResultsCli, ADamagedDatabaseIsRefusedWithItsPointAndColumn) {
  TempDir dir("damaged");
  const auto path = dir.file("s.yaml", scenario("sweep:\n  wan[0].bandwidth: [1Gbps, 10Gbps]\n"));
  const auto good = dir.file("good.sqlite");
  ASSERT_EQ(hgsim({"sweep", path.string(), "--db", good.string(), "-j", "1"}).status, 0);
  auto damaged = [&](const std::string& name, const std::string& sql) {
    const auto db = dir.file(name);
    fs::copy_file(good, db, fs::copy_options::overwrite_existing);
    exec_sql(db, sql);
    return db;
  };
  const std::string deep(100000, '[');
  const struct {
    const char* name;
    std::string sql;
    std::string says;
  } cases[] = {
      {"deep", "UPDATE points SET settings = '" + deep + "' WHERE point = 1",
       "point 1: settings: lists and objects nest more than 64 deep"},
      {"badjson", "UPDATE points SET settings = '{no' WHERE point = 1",
       "point 1: settings: not valid JSON"},
      {"axes", "UPDATE sweep SET axes = '[1, 2]'", "sweep.axes: expected a list of key paths"},
      {"text", "UPDATE points SET iteration_time_s = 'fast' WHERE point = 1",
       "point 1: iteration_time_s holds 'fast', not a finite number"},
      {"inf", "UPDATE points SET mfu = -9e999 WHERE point = 0",
       "point 0: mfu holds '-Inf', not a finite number"},
  };
  for (const auto& c : cases) {
    const auto db = damaged(std::string(c.name) + ".sqlite", c.sql);
    for (const char* mode : {"", "--csv", "--json"}) {
      std::vector<std::string> args{"results", db.string()};
      if (*mode) args.push_back(mode);
      const auto r = hgsim(args);
      EXPECT_EQ(r.status, 1) << c.name << " " << mode << ": " << r.err;
      EXPECT_NE(r.err.find(c.says), std::string::npos) << c.name << " " << mode << ": " << r.err;
      EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
      if (std::string(mode) == "--json") EXPECT_EQ(r.out, "") << c.name;
    }
  }
  // Point 1 ok without its numbers, and an error holding control characters.
  const auto db = damaged("null.sqlite",
                          "UPDATE points SET iteration_time_s = NULL, tokens_per_s = NULL, mfu = "
                          "NULL WHERE point = 1; UPDATE points SET status = 'failed', error = "
                          "'boom' || char(27) || '[31m' WHERE point = 0");
  const std::string before = [&] {
    std::ifstream in(db, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto table = hgsim({"results", db.string()});
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("ok  -/iteration  - tokens/s  MFU -%"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("FAILED: boom\\x1b[31m"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find('\x1b'), std::string::npos);
  std::ifstream in(db, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), before) << "results wrote";
}

TEST(ResultsWhere, NamesAreCheckedAndLiteralsAreBoundNeverSpliced) {
  const std::vector<std::string> axes{"wan[*].bandwidth"};
  auto w =
      apps::compile_where("status = 'ok' and (mfu > 0.3 or wan[*].bandwidth == \"1Gbps\")", axes);
  EXPECT_EQ(w.sql,
            "((status = ?) AND ((mfu > ?) OR (hg_quantity(point, json_extract(settings, ?), ?, "
            "?) = ?)))");
  ASSERT_EQ(w.params.size(), 6u);
  EXPECT_EQ(w.params[0].text, "ok");
  EXPECT_EQ(w.params[1].number, 0.3);
  EXPECT_EQ(w.params[2].text, "$.\"wan[*].bandwidth\"");
  EXPECT_EQ(w.params[3].number, static_cast<double>(core::QuantityKind::bandwidth));
  EXPECT_EQ(w.params[4].text, "wan[*].bandwidth");
  EXPECT_EQ(w.params[5].number, 1e9 / 8);  // 1 Gbit/s in bytes per second
  EXPECT_EQ(apps::compile_where("not error is null", axes).sql, "(NOT (error IS NULL))");
  // A quote inside a literal stays inside the literal.
  auto q = apps::compile_where("status = \"x' OR 1=1 --\"", axes);
  EXPECT_EQ(q.sql, "(status = ?)");
  EXPECT_EQ(q.params[0].text, "x' OR 1=1 --");
  struct Bad {
    const char* expr;
    const char* says;
  } bad[] = {{"status = 'ok'; DROP TABLE points", "column 14: unexpected ';'"},
             {"sqlite_master = 1", "not a column or an axis"},
             {"mfu >", "at the end"},
             {"mfu > 0.3 status", "expected 'and', 'or'"},
             {"(mfu > 0.3", "expected ')'"},
             {"status = 'ok", "no closing"},
             {"wan[*].bandwidth > 10Gx", "'10Gx' is neither a number nor a quantity"},
             {"wan[*].bandwidth > -1Gbps", "unexpected '-'"},
             {"'10Gbps' > 5ms", "'5ms', a duration, cannot be compared with '10Gbps', a bandwidth"},
             {"mfu > 10Gbps", "mfu is a plain number, cannot be compared with '10Gbps'"},
             {"iteration_time_s < 10Gbps", "iteration_time_s is a duration in seconds"},
             {"status = 10ms", "status is text, cannot be compared with '10ms'"},
             {"wan[*].bandwidth > 5 or 5 < 1Gbps", "the plain number 5 cannot be compared"},
             {"mfu is 3", "expected 'null'"}};
  for (const auto& b : bad) {
    try {
      apps::compile_where(b.expr, axes);
      ADD_FAILURE() << b.expr << " compiled";
    } catch (const apps::WhereError& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos)
          << b.expr << ": " << e.what();
    }
  }
  // Nesting is bounded before it recurses deep: 100 levels compile, 101 do not, and
  // 100 000 are refused as quickly (they used to overflow the stack).
  auto nested = [](int depth, const std::string& open) {
    std::string e;
    for (int i = 0; i < depth; ++i) e += open;
    e += "mfu > 0";
    if (open == "(") e += std::string(depth, ')');
    return e;
  };
  for (const std::string open : {"(", "not "}) {
    EXPECT_NO_THROW(apps::compile_where(nested(100, open), axes)) << open;
    for (int depth : {101, 100000}) {
      try {
        apps::compile_where(nested(depth, open), axes);
        ADD_FAILURE() << depth << " x '" << open << "' compiled";
      } catch (const apps::WhereError& e) {
        EXPECT_NE(std::string(e.what()).find("nest more than 100 deep"), std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(ResultsCli, ANonDatabaseIsRefusedWithWhatItIs) {
  TempDir dir("bad-db");
  const auto text = dir.file("notes.sqlite", "just text\n");
  auto r = hgsim({"results", text.string()});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("notes.sqlite"), std::string::npos) << r.err;
  auto missing = hgsim({"results", dir.file("none.sqlite").string()});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace hgsim
