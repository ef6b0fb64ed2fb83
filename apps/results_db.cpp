#include "apps/results_db.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include "apps/point_choice.hpp"
#include "core/document.hpp"
#include "core/files.hpp"
#include "core/process.hpp"
#include "core/units.hpp"

namespace hgsim::apps {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS sweep (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  scenario_file TEXT NOT NULL,
  scenario TEXT NOT NULL,
  hgsim_version TEXT NOT NULL,
  options TEXT NOT NULL,
  axes TEXT NOT NULL,
  points INTEGER NOT NULL,
  started_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS points (
  point INTEGER PRIMARY KEY,
  settings TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
  error TEXT,
  iteration_time_s REAL,
  tokens_per_s REAL,
  mfu REAL,
  plan TEXT,
  result TEXT,
  finished_at TEXT NOT NULL,
  wall_s REAL NOT NULL,
  scenario_hash TEXT NOT NULL,
  choice TEXT
);
)sql";

// ---- the functions --where compiles to ----------------------------------------------------
// An axis value in a quantity comparison, as a number in its kind's base unit:
// hg_quantity(point, value, kind, axis), kind a core::QuantityKind as an integer. A value of
// another kind, or no quantity at all, stops the query with a message naming the point and
// the axis: '15ms' is never silently compared with '10Gbps'.
void where_error(sqlite3_context* context, sqlite3_value* point, const std::string& what) {
  const std::string message = kWhereErrorPrefix + std::string("point ") +
                              std::to_string(sqlite3_value_int64(point)) + ": " + what;
  sqlite3_result_error(context, message.c_str(), static_cast<int>(message.size()));
}

std::string value_text(sqlite3_value* v) {
  const auto* p = sqlite3_value_text(v);
  return p ? core::excerpt(reinterpret_cast<const char*>(p)) : "";
}

void hg_quantity(sqlite3_context* context, int, sqlite3_value** args) {
  if (sqlite3_value_type(args[1]) == SQLITE_NULL) return sqlite3_result_null(context);
  const auto wanted = static_cast<core::QuantityKind>(sqlite3_value_int(args[2]));
  const std::string axis = value_text(args[3]);
  const std::string held = value_text(args[1]);
  const std::string not_wanted = std::string(", not ") + core::quantity_kind_name(wanted) +
                                 " like the value it is compared with";
  if (sqlite3_value_type(args[1]) != SQLITE_TEXT)
    return where_error(context, args[0],
                       axis + " holds " + held + ", a number without a unit" + not_wanted);
  const auto q = core::parse_quantity(held);
  if (!q)
    return where_error(context, args[0],
                       axis + " holds '" + held + "'" +
                           (q.error.empty() ? std::string(", not a quantity") : ": " + q.error) +
                           not_wanted);
  if (q.value->kind != wanted)
    return where_error(
        context, args[0],
        axis + " holds '" + held + "', " + core::quantity_kind_name(q.value->kind) + not_wanted);
  sqlite3_result_double(context, q.value->value);
}

// An axis value compared with a plain number: hg_unitless(point, value, axis) passes the
// value through, and refuses a quantity ('10Gbps' > 5 would compare text with a number).
void hg_unitless(sqlite3_context* context, int, sqlite3_value** args) {
  if (sqlite3_value_type(args[1]) == SQLITE_TEXT) {
    const std::string held = value_text(args[1]);
    if (const auto q = core::parse_quantity(held))
      return where_error(context, args[0],
                         value_text(args[2]) + " holds '" + held + "', " +
                             core::quantity_kind_name(q.value->kind) +
                             ": compare it with a quantity (e.g. 10Gbps, 15ms), not a plain "
                             "number");
  }
  sqlite3_result_value(context, args[1]);
}

// A prepared statement, finalized when it goes out of scope.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK) stmt_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  explicit operator bool() const { return stmt_ != nullptr; }
  sqlite3_stmt* get() const { return stmt_; }
  void bind(int i, const std::string& text) {
    sqlite3_bind_text(stmt_, i, text.c_str(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void bind(int i, long long v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, const std::optional<double>& v) {
    if (v)
      bind(i, *v);
    else
      sqlite3_bind_null(stmt_, i);
  }
  void bind_text_or_null(int i, const std::string& text) {
    if (text.empty())
      sqlite3_bind_null(stmt_, i);
    else
      bind(i, text);
  }
  std::string text(int column) const {
    const auto* p = sqlite3_column_text(stmt_, column);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  std::optional<double> real(int column) const {
    if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(stmt_, column);
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

core::Json stored_json(const std::string& text, const std::string& db, const std::string& where) {
  core::Diagnostics d;
  auto node = core::parse_json(text, "", d);
  if (!node) {
    const std::string why = d.all().empty() ? "not JSON" : d.all().front().message;
    throw DbError("sweep database " + db + ": " + where + ": " + why);
  }
  return core::to_json(*node);
}

std::optional<std::string> row_refusal(const PointRow& row) {
  if (row.point < 0) return "a point numbered below 0 (points count from 0)";
  if (row.status != "ok" && row.status != "failed")
    return "status '" + core::excerpt(row.status) + "': expected 'ok' or 'failed'";
  if (!row.damage.empty()) return row.damage;
  if (row.status == "ok" && row.result.empty()) return "an ok point without its result";
  auto json_column = [&](const std::string& text, const char* column,
                         bool object) -> std::optional<std::string> {
    core::Diagnostics d;
    const auto node = core::parse_json(text, "", d);
    if (!node)
      return std::string(column) + ": " +
             (d.all().empty() ? std::string("not JSON") : d.all().front().message);
    if (object && !node->is_mapping()) return std::string(column) + ": expected an object";
    return std::nullopt;
  };
  if (row.settings.empty()) return "settings: empty (expected an object of axis values)";
  if (auto why = json_column(row.settings, "settings", true)) return why;
  if (!row.plan.empty())
    if (auto why = json_column(row.plan, "plan", false)) return why;
  if (!row.result.empty())
    if (auto why = json_column(row.result, "result", true)) return why;
  if (!row.choice.empty()) {
    if (auto why = json_column(row.choice, "choice", true)) return why;
    if (!choice_from_json(core::Json::parse(row.choice)))
      return "choice: expected {\"plan\": text, \"gpus_used\": count, \"gpus_per_cluster\": "
             "[{\"cluster\": name, \"gpus\": count}, ...]}";
  }
  return std::nullopt;
}

void check_row(const PointRow& row, const std::string& db) {
  if (const auto why = row_refusal(row))
    throw DbError("sweep database " + db + ": point " + std::to_string(row.point) + ": " + *why +
                  "\n  hgsim sweep SCENARIO --db " + db +
                  " --resume runs the point again (and drops a row that is no point of the "
                  "grid), or delete the row (sqlite3)");
}

namespace {

// The limit of the environment behind SQLite's last failure, when a system call failed for
// one (sqlite3_system_errno; ulimit -n: no descriptor left for the database, its WAL or its
// shared memory), else nullopt.
std::optional<std::string> limit_behind(sqlite3* db) {
  if (db == nullptr) return std::nullopt;
  return core::limit_behind(sqlite3_system_errno(db), "open");
}

// That limit, named as the environment's (exit 1, no bug), if there is one.
void throw_if_limit(sqlite3* db, const std::string& head) {
  if (const auto limit = limit_behind(db)) throw core::EnvironmentLimit(head + ": " + *limit);
}

}  // namespace

ResultsDb::ResultsDb(const std::string& path, bool create)
    : path_(path), named_("'" + core::path_excerpt(path) + "'") {
  // A folder or a device (/dev/full) would fail later as "disk I/O error" or pass for an
  // empty database.
  if (const auto kind = core::special_file_kind(path))
    throw DbError("the sweep database " + named_ + " is " + *kind +
                  ", not a regular file; name a file with --db");
  // Without create the database is only read (hgsim results): opened read-only, so that
  // reading never changes the file (its journal mode included).
  const int flags = create ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
  if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    const auto limit = limit_behind(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    const std::string head = "cannot open the sweep database " + named_;
    if (limit) throw core::EnvironmentLimit(head + ": " + *limit);
    throw DbError(head + ": " + why);
  }
  sqlite3_busy_timeout(db_, 10000);
  const int flags_fn = SQLITE_UTF8 | SQLITE_DETERMINISTIC;
  sqlite3_create_function(db_, "hg_quantity", 4, flags_fn, nullptr, hg_quantity, nullptr, nullptr);
  sqlite3_create_function(db_, "hg_unitless", 3, flags_fn, nullptr, hg_unitless, nullptr, nullptr);
  // WAL: a commit is one append, and a process killed at any moment leaves every committed
  // point readable. synchronous=NORMAL is durable against a killed process (not a power
  // cut, which may lose the last commits).
  if (create) {
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec(kSchema);
    // A database of an older hgsim gets the column its new points fill; its old rows keep
    // NULL there.
    if (!has_column("points", "choice")) exec("ALTER TABLE points ADD COLUMN choice TEXT");
  }
}

bool ResultsDb::has_column(const char* table, const char* column) {
  Statement st(
      db_, std::string("SELECT count(*) FROM pragma_table_info('") + table + "') WHERE name = ?");
  if (!st) fail("cannot read the schema");
  st.bind(1, std::string(column));
  if (sqlite3_step(st.get()) != SQLITE_ROW) fail("cannot read the schema");
  return sqlite3_column_int(st.get(), 0) == 1;
}

ResultsDb::~ResultsDb() {
  sqlite3_close(db_);
  // After SQLite's own descriptors: closing a descriptor of the file while SQLite holds
  // its (POSIX, per-process) locks would drop them.
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void ResultsDb::lock_for_writing() {
  // flock() is apart from SQLite's fcntl() locks: it marks the whole sweep, not a commit.
  lock_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd_ < 0) {
    // A system call's failure, not SQLite's (its message would be "not an error"): a limit
    // of the environment (ulimit -n) is named as such.
    const int error = errno;
    if (const auto limit = core::limit_behind(error, "open"))
      throw core::EnvironmentLimit("the sweep database " + named_ +
                                   ": cannot open it to lock it: " + *limit);
    throw DbError("the sweep database " + named_ + ": cannot open it to lock it: " +
                  std::strerror(error));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  if (error == EWOULDBLOCK)
    throw DbError("the sweep database " + named_ +
                  " is being written by another hgsim sweep (it holds the database's lock); "
                  "wait for it to end, or write another with --db FILE");
  throw DbError("the sweep database " + named_ + ": cannot lock it: " + std::strerror(error));
}

void ResultsDb::fail(const std::string& what) {
  throw_if_limit(db_, "sweep database " + named_ + ": " + what);
  throw DbError("sweep database " + named_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

void ResultsDb::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string why = message ? message : "unknown error";
    sqlite3_free(message);
    throw_if_limit(db_, "sweep database " + named_);
    throw DbError("sweep database " + named_ + ": " + why +
                  (why.find("not a database") != std::string::npos
                       ? " (is it a sweep database written by hgsim sweep?)"
                       : ""));
  }
}

bool ResultsDb::is_sweep_db() {
  Statement st(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='points'");
  if (!st) fail("cannot read the schema");
  if (sqlite3_step(st.get()) != SQLITE_ROW) fail("cannot read the schema");
  return sqlite3_column_int(st.get(), 0) == 1;
}

std::optional<SweepInfo> ResultsDb::sweep() {
  Statement st(db_,
               "SELECT scenario_file, scenario, hgsim_version, options, axes, points, started_at "
               "FROM sweep WHERE id = 1");
  if (!st) fail("cannot read the sweep table");
  if (sqlite3_step(st.get()) != SQLITE_ROW) return std::nullopt;
  SweepInfo info;
  info.scenario_file = st.text(0);
  info.scenario = st.text(1);
  info.hgsim_version = st.text(2);
  info.options = st.text(3);
  info.axes = st.text(4);
  info.points = sqlite3_column_int64(st.get(), 5);
  info.started_at = st.text(6);
  return info;
}

void ResultsDb::write_sweep(const SweepInfo& info) {
  Statement st(db_,
               "INSERT OR REPLACE INTO sweep (id, scenario_file, scenario, hgsim_version, "
               "options, axes, points, started_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?)");
  if (!st) fail("cannot write the sweep table");
  st.bind(1, info.scenario_file);
  st.bind(2, info.scenario);
  st.bind(3, info.hgsim_version);
  st.bind(4, info.options);
  st.bind(5, info.axes);
  st.bind(6, info.points);
  st.bind(7, info.started_at);
  if (sqlite3_step(st.get()) != SQLITE_DONE) fail("cannot write the sweep table");
}

long long ResultsDb::point_count() {
  Statement st(db_, "SELECT count(*) FROM points");
  if (!st || sqlite3_step(st.get()) != SQLITE_ROW) fail("cannot read the points table");
  return sqlite3_column_int64(st.get(), 0);
}

void ResultsDb::delete_points_outside(long long n) {
  Statement st(db_, "DELETE FROM points WHERE point < 0 OR point >= ?");
  if (!st) fail("cannot delete points");
  st.bind(1, n);
  if (sqlite3_step(st.get()) != SQLITE_DONE) fail("cannot delete points");
}

void ResultsDb::record(const PointRow& row) {
  // One statement in autocommit mode is one transaction.
  Statement st(db_,
               "INSERT OR REPLACE INTO points (point, settings, status, error, iteration_time_s, "
               "tokens_per_s, mfu, plan, result, finished_at, wall_s, scenario_hash, choice) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!st) fail("cannot write point " + std::to_string(row.point));
  st.bind(1, row.point);
  st.bind(2, row.settings);
  st.bind(3, row.status);
  st.bind_text_or_null(4, row.error);
  st.bind(5, row.iteration_time_s);
  st.bind(6, row.tokens_per_s);
  st.bind(7, row.mfu);
  st.bind_text_or_null(8, row.plan);
  st.bind_text_or_null(9, row.result);
  st.bind(10, row.finished_at);
  st.bind(11, row.wall_s);
  st.bind(12, row.scenario_hash);
  st.bind_text_or_null(13, row.choice);
  if (sqlite3_step(st.get()) != SQLITE_DONE)
    fail("cannot write point " + std::to_string(row.point));
}

void ResultsDb::for_each(const std::string& where, const std::vector<SqlValue>& params,
                         const std::function<void(const PointRow&)>& visit) {
  Statement st(db_,
               "SELECT point, settings, status, error, iteration_time_s, tokens_per_s, mfu, "
               "plan, result, finished_at, wall_s, scenario_hash, " +
                   std::string(has_column("points", "choice") ? "choice" : "NULL") +
                   " FROM points" + (where.empty() ? std::string() : " WHERE " + where) +
                   " ORDER BY point");
  if (!st) fail("cannot read the points table");
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].kind == SqlValue::Kind::text)
      st.bind(static_cast<int>(i + 1), params[i].text);
    else
      st.bind(static_cast<int>(i + 1), params[i].number);
  }
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    PointRow row;
    row.point = sqlite3_column_int64(st.get(), 0);
    // A number column holds a finite number or nothing: text or an infinity written into
    // the file by something else is marked (row_refusal refuses it), never read as 0 or
    // printed as -inf.
    auto number = [&](int column, const char* name) -> std::optional<double> {
      const int type = sqlite3_column_type(st.get(), column);
      if (type == SQLITE_NULL) return std::nullopt;
      const double v = sqlite3_column_double(st.get(), column);
      if ((type != SQLITE_INTEGER && type != SQLITE_FLOAT) || !std::isfinite(v)) {
        if (row.damage.empty())
          row.damage = std::string(name) + " holds '" + core::excerpt(st.text(column)) +
                       "', not a finite number";
        return std::nullopt;
      }
      return v;
    };
    row.settings = st.text(1);
    row.status = st.text(2);
    row.error = st.text(3);
    row.iteration_time_s = number(4, "iteration_time_s");
    row.tokens_per_s = number(5, "tokens_per_s");
    row.mfu = number(6, "mfu");
    row.plan = st.text(7);
    row.result = st.text(8);
    row.finished_at = st.text(9);
    row.wall_s = number(10, "wall_s").value_or(0);
    row.scenario_hash = st.text(11);
    row.choice = st.text(12);
    visit(row);
  }
  if (rc != SQLITE_DONE) {
    const std::string why = sqlite3_errmsg(db_);
    if (why.rfind(kWhereErrorPrefix, 0) == 0)
      throw DbError("sweep database " + named_ + ": " + why);
    fail("cannot read the points table");
  }
}

}  // namespace hgsim::apps
