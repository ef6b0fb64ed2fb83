// The sweep results database (SQLite), written by `hgsim sweep`, read by `hgsim results`,
// `hgsim plot` and anyone with sqlite3. One transaction per point, so a sweep killed at any
// moment loses at most the points in flight. The schema (docs/sweeps.md shows it too):
//
//   sweep   one row: scenario_file, scenario (the scenario as written: its canonical JSON,
//           sweep included), hgsim_version, options (JSON: the run options every point
//           used), axes (JSON list of the axis paths, in grid order), points (grid size),
//           started_at (UTC, ISO 8601)
//   points  one row per finished point: point (0-based index in grid order, the primary
//           key), settings (JSON object: axis path -> value as written), status ('ok' |
//           'failed'), error (the problems, for a failed point), iteration_time_s,
//           tokens_per_s, mfu (NULL when failed), plan (JSON: the plan that ran), result
//           (JSON: exactly what `hgsim run --json` prints), finished_at (UTC, ISO 8601),
//           wall_s (seconds the point took, planner included), scenario_hash (a hash of
//           the point's resolved scenario and the run options: what --resume compares),
//           choice (JSON: what the point ran, apps/point_choice.hpp: {"plan": its
//           description, "gpus_used", "gpus_per_cluster": [{"cluster", "gpus"}]}; NULL
//           when failed). A database of an older hgsim has no choice column: it reads as
//           it is (its points' choice is their stored plan's, or "plan not recorded"), and
//           `hgsim sweep --resume` adds the column.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/document.hpp"

struct sqlite3;

namespace hgsim::apps {

// A database that cannot be opened, read or written; the message names the file.
class DbError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SweepInfo {
  std::string scenario_file;
  std::string scenario;  // JSON
  std::string hgsim_version;
  std::string options;  // JSON
  std::string axes;     // JSON list
  long long points = 0;
  std::string started_at;
};

struct PointRow {
  long long point = 0;
  std::string settings;  // JSON object
  std::string status;    // "ok" | "failed"
  std::string error;
  std::optional<double> iteration_time_s, tokens_per_s, mfu;
  std::string plan;    // JSON, empty when none
  std::string result;  // JSON, empty when failed
  std::string finished_at;
  double wall_s = 0;
  std::string scenario_hash;
  std::string choice;  // JSON, empty when none (failed, or a row of an older database)
  // Set by ResultsDb::for_each when a number column holds text or an infinity (the figure
  // is then read as missing): what row_refusal reports.
  std::string damage;
};

// A JSON column of the database, read with the scenario reader's limits (depth, values), so
// that a damaged or crafted file is refused with its point and column, never a crash; throws
// DbError "sweep database DB: WHERE: why". `db` is the database as messages name it.
core::Json stored_json(const std::string& text, const std::string& db, const std::string& where);

// Why `row` is not a row hgsim sweep could have written, or nullopt when it is one: a point
// below 0, a status other than 'ok' and 'failed', settings that are not a JSON object, a
// plan or result that is not JSON, an ok row without a result, a number that is not finite.
// The one rule for rows: `hgsim results` (table, CSV and JSON alike) refuses the database
// at such a row, and `hgsim sweep --resume` runs its point again (or drops it, when it is
// no point of the grid).
std::optional<std::string> row_refusal(const PointRow& row);
// Throws DbError for a row row_refusal refuses: "sweep database DB: point 3: why", with
// what to do about it (--resume runs the point again).
void check_row(const PointRow& row, const std::string& db);

// How the --where functions (hg_quantity, hg_unitless) begin the message of a value that
// cannot be compared, so that for_each reports it as the user's, not as a damaged file.
inline constexpr const char* kWhereErrorPrefix = "--where: ";

// A parameter bound to a prepared statement: text or a number.
struct SqlValue {
  enum class Kind { text, number } kind = Kind::text;
  std::string text;
  double number = 0;
};

class ResultsDb {
 public:
  // Opens the database at `path`: with create, for writing (the file and the tables made
  // when missing, WAL journal); without, read-only (nothing of the file changes).
  ResultsDb(const std::string& path, bool create);
  ~ResultsDb();
  ResultsDb(const ResultsDb&) = delete;
  ResultsDb& operator=(const ResultsDb&) = delete;

  const std::string& path() const { return path_; }
  // The path as messages quote it (escaped, a long one cut by its ends).
  const std::string& named() const { return named_; }
  // Takes the database for one writer (an exclusive flock() until this closes): a second
  // hgsim sweep on it is refused (DbError saying so) instead of running the same points.
  void lock_for_writing();
  // False for a file that is not a sweep database (no `points` table).
  bool is_sweep_db();
  std::optional<SweepInfo> sweep();
  void write_sweep(const SweepInfo& info);
  // Rows already there.
  long long point_count();
  // Deletes the rows of points with index >= n (the grid shrank), and below 0 (no point).
  void delete_points_outside(long long n);
  // Inserts or replaces the point's row in one transaction.
  void record(const PointRow& row);
  // Every row whose `where` (an SQL condition over the columns, with ? for `params`; empty:
  // all) holds, in point order.
  void for_each(const std::string& where, const std::vector<SqlValue>& params,
                const std::function<void(const PointRow&)>& visit);

 private:
  void exec(const char* sql);
  bool has_column(const char* table, const char* column);
  [[noreturn]] void fail(const std::string& what);
  std::string path_;
  std::string named_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;
};

// UTC now, ISO 8601 ("2026-01-02T03:04:05Z").
std::string utc_now();

}  // namespace hgsim::apps
