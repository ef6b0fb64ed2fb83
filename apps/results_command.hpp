// `hgsim results DB [--csv | --json] [--where EXPR]`: a sweep database's points as a table,
// CSV or JSON; and `hgsim plot DB ...` (drawn by the Python module's hgsim.plots).
//
// --where takes a small expression language, compiled to an SQL condition whose every
// literal is a bound parameter and whose every name is checked against a fixed list, so no
// text of the expression ever becomes SQL:
//   expr       := and ("or" and)*
//   and        := unary ("and" unary)*
//   unary      := "not" unary | "(" expr ")" | comparison
//   comparison := operand ("=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">=") operand
//               | operand "is" ["not"] "null"
//   operand    := number | quantity | 'text' | "text" | name
//   quantity   := a number with a unit, quoted or not (10Gbps, '15ms', 80GiB, 312TFLOPS)
//   name       := a column (point, status, error, iteration_time_s, tokens_per_s, mfu,
//                 wall_s, finished_at) or a sweep axis path as the sweep wrote it
//                 (wan[*].bandwidth): the point's value for that axis
// e.g.  status = 'ok' and mfu > 0.3 and wan[*].bandwidth >= 10Gbps
// A comparison with a quantity compares quantities, read by the scenario language's unit
// parser (core/units.hpp): wan[*].bandwidth >= 10Gbps holds for '40Gbps' and '2GB/s', not for
// '5Gbps'; iteration_time_s < 2s works (the column is in seconds). Quantities of different
// kinds (a bandwidth and a duration) are refused, at compile time where both sides are
// known, and as the query runs (naming the point) where an axis holds the other kind.
#pragma once

#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/results_db.hpp"

namespace CLI {
class App;
}

namespace hgsim::apps {

// A --where expression that does not parse; the message names the column and what was
// expected.
class WhereError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WhereSql {
  std::string sql;  // a condition over the points table, with ? for each parameter
  std::vector<SqlValue> params;
};

// Compiles a --where expression; `axes` are the sweep's axis paths. Throws WhereError.
WhereSql compile_where(const std::string& expr, const std::vector<std::string>& axes);

struct ResultsOptions {
  std::string db;
  bool csv = false;
  bool json = false;
  std::string where;
};

CLI::App* add_results_command(CLI::App& app, ResultsOptions& options);
int run_results_command(const ResultsOptions& options, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
