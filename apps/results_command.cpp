#include "apps/results_command.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "apps/commands.hpp"
#include "apps/point_choice.hpp"
#include "core/document.hpp"
#include "core/files.hpp"
#include "core/units.hpp"

namespace hgsim::apps {
namespace {

using core::Json;

const std::vector<std::string> kColumns = {"point",        "status", "error",  "iteration_time_s",
                                           "tokens_per_s", "mfu",    "wall_s", "finished_at"};

// ---- --where -----------------------------------------------------------------------------

struct Token {
  enum class Kind { name, number, text, op, open, close, end } kind;
  std::string text;
  double number = 0;
  std::size_t column = 0;  // 1-based
};

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' ||
         c == ']' || c == '*' || c == '-';
}

std::vector<Token> tokenize(const std::string& e) {
  std::vector<Token> out;
  std::size_t i = 0;
  auto fail = [&](std::size_t at, const std::string& what) -> WhereError {
    return WhereError("--where, column " + std::to_string(at + 1) + ": " + what);
  };
  while (i < e.size()) {
    const char c = e[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    const std::size_t start = i;
    if (c == '(' || c == ')') {
      out.push_back(
          {c == '(' ? Token::Kind::open : Token::Kind::close, std::string(1, c), 0, start + 1});
      ++i;
    } else if (c == '\'' || c == '"') {
      std::string text;
      ++i;
      while (i < e.size() && e[i] != c) text += e[i++];
      if (i == e.size())
        throw fail(start, "the text starting here has no closing " + std::string(1, c));
      ++i;
      out.push_back({Token::Kind::text, text, 0, start + 1});
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < e.size() &&
                std::isdigit(static_cast<unsigned char>(e[i + 1])))) {
      std::size_t used = 0;
      double v = 0;
      try {
        v = std::stod(e.substr(i), &used);
      } catch (const std::exception&) {
        throw fail(start, "not a number");
      }
      i += used;
      // A unit right after the number makes a quantity (10Gbps, 15ms, 80GiB, 1.25GB/s).
      if (i < e.size() && name_char(e[i])) {
        while (i < e.size() && (name_char(e[i]) || e[i] == '/')) ++i;
        const std::string text = e.substr(start, i - start);
        const auto q = core::parse_quantity(text);
        if (!q)
          throw fail(start, q.error.empty() ? "'" + core::excerpt(text) +
                                                  "' is neither a number nor a quantity "
                                                  "(10Gbps, 15ms, 80GiB, 312TFLOPS); quote text"
                                            : q.error);
        out.push_back({Token::Kind::text, text, 0, start + 1});
        continue;
      }
      out.push_back({Token::Kind::number, e.substr(start, used), v, start + 1});
    } else if (name_start(c)) {
      while (i < e.size() && name_char(e[i])) ++i;
      out.push_back({Token::Kind::name, e.substr(start, i - start), 0, start + 1});
    } else {
      static const char* ops[] = {"==", "!=", "<>", "<=", ">=", "=", "<", ">"};
      bool matched = false;
      for (const char* op : ops) {
        if (e.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Token::Kind::op, op, 0, start + 1});
          i += std::strlen(op);
          matched = true;
          break;
        }
      }
      if (!matched) throw fail(start, std::string("unexpected '") + c + "'");
    }
  }
  out.push_back({Token::Kind::end, "", 0, e.size() + 1});
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class WhereParser {
 public:
  WhereParser(const std::string& expr, const std::vector<std::string>& axes)
      : tokens_(tokenize(expr)), axes_(axes) {}

  WhereSql parse() {
    WhereSql out;
    out.sql = expr(out);
    if (peek().kind != Token::Kind::end) throw error(peek(), "expected 'and', 'or' or the end");
    return out;
  }

 private:
  const Token& peek() const { return tokens_[pos_]; }
  const Token& next() { return tokens_[pos_++]; }
  bool keyword(const char* word) const {
    return peek().kind == Token::Kind::name && lower(peek().text) == word;
  }
  WhereError error(const Token& t, const std::string& what) const {
    return WhereError(
        "--where, column " + std::to_string(t.column) + ": " +
        (t.kind == Token::Kind::end ? "at the end" : "at '" + core::excerpt(t.text) + "'") + ": " +
        what);
  }

  std::string expr(WhereSql& out) {
    std::string sql = conjunction(out);
    while (keyword("or")) {
      next();
      sql = "(" + sql + " OR " + conjunction(out) + ")";
    }
    return sql;
  }
  std::string conjunction(WhereSql& out) {
    std::string sql = unary(out);
    while (keyword("and")) {
      next();
      sql = "(" + sql + " AND " + unary(out) + ")";
    }
    return sql;
  }
  // 'not' and '(' nest; each level is one C++ call and one SQLite expression level, so the
  // depth is bounded before either runs out of stack (SQLite refuses past 1000).
  static constexpr int kMaxDepth = 100;
  std::string unary(WhereSql& out) {
    if (keyword("not") || peek().kind == Token::Kind::open) {
      if (depth_ >= kMaxDepth)
        throw error(peek(),
                    "'not' and parentheses nest more than " + std::to_string(kMaxDepth) + " deep");
      ++depth_;
      std::string sql;
      if (keyword("not")) {
        next();
        sql = "(NOT " + unary(out) + ")";
      } else {
        next();
        sql = expr(out);
        if (peek().kind != Token::Kind::close) throw error(peek(), "expected ')'");
        next();
      }
      --depth_;
      return sql;
    }
    return comparison(out);
  }
  // One side of a comparison, read before any SQL is written: how a side is compiled
  // depends on the other (an axis compared with '10Gbps' is read as a bandwidth).
  struct Operand {
    enum class Kind { number, text, quantity, column, axis } kind;
    const Token* token;
    core::QuantityKind quantity = core::QuantityKind::size;  // for quantity
    double value = 0;                                        // number or quantity, base unit
  };

  // Columns that hold durations in seconds; the other number columns are plain numbers.
  static bool is_seconds_column(const std::string& name) {
    return name == "iteration_time_s" || name == "wall_s";
  }
  static bool is_number_column(const std::string& name) {
    return is_seconds_column(name) || name == "point" || name == "tokens_per_s" || name == "mfu";
  }

  std::string comparison(WhereSql& out) {
    const Operand left = operand();
    if (keyword("is")) {
      next();
      bool negated = false;
      if (keyword("not")) {
        next();
        negated = true;
      }
      if (!keyword("null")) throw error(peek(), "expected 'null' after 'is'");
      next();
      return "(" + plain_sql(left, out) + (negated ? " IS NOT NULL)" : " IS NULL)");
    }
    if (peek().kind != Token::Kind::op)
      throw error(peek(), "expected a comparison (= != < <= > >=) or 'is null'");
    std::string op = next().text;
    if (op == "==") op = "=";
    if (op == "<>") op = "!=";
    const Operand right = operand();
    const bool quantities =
        left.kind == Operand::Kind::quantity || right.kind == Operand::Kind::quantity;
    if (!quantities) {
      const std::string l = plain_sql(left, out, &right);
      return "(" + l + " " + op + " " + plain_sql(right, out, &left) + ")";
    }
    const Operand& q = left.kind == Operand::Kind::quantity ? left : right;
    const std::string l = quantity_sql(left, q, out);
    return "(" + l + " " + op + " " + quantity_sql(right, q, out) + ")";
  }

  Operand operand() {
    const Token& t = next();
    switch (t.kind) {
      case Token::Kind::number:
        return {Operand::Kind::number, &t, core::QuantityKind::size, t.number};
      case Token::Kind::text: {
        const auto q = core::parse_quantity(t.text);
        if (q) return {Operand::Kind::quantity, &t, q.value->kind, q.value->value};
        return {Operand::Kind::text, &t};
      }
      case Token::Kind::name: {
        if (std::find(kColumns.begin(), kColumns.end(), t.text) != kColumns.end())
          return {Operand::Kind::column, &t};
        if (std::find(axes_.begin(), axes_.end(), t.text) != axes_.end())
          return {Operand::Kind::axis, &t};
        std::string known;
        for (const auto& c : kColumns) known += (known.empty() ? "" : ", ") + c;
        for (const auto& a : axes_) known += ", " + a;
        throw error(t, "not a column or an axis of this sweep; names: " + known);
      }
      default:
        throw error(t, "expected a number, 'text', a quantity (10Gbps), a column or an axis");
    }
  }

  // JSON path of an axis, bound as a parameter: '$."wan[*].bandwidth"'.
  static std::string axis_value(const Operand& o, WhereSql& out) {
    out.params.push_back({SqlValue::Kind::text, "$.\"" + o.token->text + "\"", 0});
    return "json_extract(settings, ?)";
  }

  // A side of a comparison without quantities. An axis compared with a number is checked
  // to hold no quantity ('10Gbps' > 5 would compare text with a number).
  std::string plain_sql(const Operand& o, WhereSql& out, const Operand* other = nullptr) {
    switch (o.kind) {
      case Operand::Kind::number:
        out.params.push_back({SqlValue::Kind::number, "", o.value});
        return "?";
      case Operand::Kind::text:
        out.params.push_back({SqlValue::Kind::text, o.token->text, 0});
        return "?";
      case Operand::Kind::column:
        return o.token->text;  // one of a fixed list of column names
      case Operand::Kind::axis: {
        if (other == nullptr || other->kind != Operand::Kind::number) return axis_value(o, out);
        const std::string value = axis_value(o, out);
        out.params.push_back({SqlValue::Kind::text, o.token->text, 0});
        return "hg_unitless(point, " + value + ", ?)";
      }
      case Operand::Kind::quantity:
        break;
    }
    throw error(*o.token, "a quantity here is compiled by quantity_sql");
  }

  // A side of a comparison with a quantity `q` on one side, as a number in q's base unit.
  std::string quantity_sql(const Operand& o, const Operand& q, WhereSql& out) {
    const std::string kind = core::quantity_kind_name(q.quantity);
    const std::string with =
        " cannot be compared with '" + core::excerpt(q.token->text) + "', " + kind;
    switch (o.kind) {
      case Operand::Kind::quantity:
        if (o.quantity != q.quantity)
          throw error(*o.token, "'" + core::excerpt(o.token->text) + "', " +
                                    core::quantity_kind_name(o.quantity) + "," + with);
        out.params.push_back({SqlValue::Kind::number, "", o.value});
        return "?";
      case Operand::Kind::axis: {
        const std::string value = axis_value(o, out);
        out.params.push_back({SqlValue::Kind::number, "", static_cast<double>(q.quantity)});
        out.params.push_back({SqlValue::Kind::text, o.token->text, 0});
        return "hg_quantity(point, " + value + ", ?, ?)";
      }
      case Operand::Kind::column:
        if (is_seconds_column(o.token->text) && q.quantity == core::QuantityKind::duration)
          return o.token->text;  // seconds, the duration's base unit
        throw error(*o.token, o.token->text +
                                  (is_seconds_column(o.token->text)  ? " is a duration in seconds,"
                                   : is_number_column(o.token->text) ? " is a plain number,"
                                                                     : " is text,") +
                                  with);
      case Operand::Kind::number:
        throw error(*o.token, "the plain number " + o.token->text + with + "; give it a unit (" +
                                  o.token->text + "Gbps, " + o.token->text + "ms, ...)");
      case Operand::Kind::text:
        throw error(*o.token, "'" + core::excerpt(o.token->text) + "' is no quantity and" + with);
    }
    throw error(*o.token, "unknown operand");
  }

  std::vector<Token> tokens_;
  const std::vector<std::string>& axes_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

// ---- output ------------------------------------------------------------------------------

std::string point_column(long long point, const char* column) {
  return "point " + std::to_string(point) + ": " + column;
}

// Text from the database for a terminal line: control characters escaped, at most 60
// characters (the full value is in --json).
std::string shown(const std::string& text) {
  return core::excerpt(text);
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number_text(const std::optional<double>& v) {
  return v ? Json(*v).dump() : "";
}

// An axis value as a cell: text without its quotes, anything else as JSON.
std::string value_text(const Json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// What the point ran, as the CSV's last three cells: gpus_used, gpus_per_cluster ("a 4,
// b 4") and plan (its description; "plan not recorded" for an ok point without one).
std::string choice_cells(const PointRow& row) {
  const auto choice = recorded_choice(row);
  if (!choice) return ",," + csv_cell(point_choice_text(row));
  return std::to_string(choice->gpus_used) + "," + csv_cell(gpus_per_cluster_text(*choice)) + "," +
         csv_cell(choice->plan);
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

}  // namespace

WhereSql compile_where(const std::string& expr, const std::vector<std::string>& axes) {
  return WhereParser(expr, axes).parse();
}

CLI::App* add_results_command(CLI::App& app, ResultsOptions& o) {
  CLI::App* results =
      app.add_subcommand("results", "Print a sweep database's points (table, CSV or JSON)");
  results->add_option("DB", o.db, "a sweep database (hgsim sweep --db)")->required();
  auto* csv = results->add_flag(
      "--csv", o.csv,
      "CSV: point, one column per axis, status, iteration_time_s, "
      "tokens_per_s, mfu, wall_s, finished_at, error, gpus_used, gpus_per_cluster, "
      "plan (what the point ran)");
  results->add_flag("--json", o.json, "JSON: {\"sweep\": {...}, \"points\": [...]}")->excludes(csv);
  results->add_option("--where", o.where,
                      "only the points where EXPR holds, e.g. \"status = 'ok' and mfu > 0.3 "
                      "and wan[*].bandwidth >= 10Gbps\" (columns, axis paths, numbers, "
                      "quantities compared by value, = != < <= > >=, is null, and, or, not, "
                      "parentheses)");
  return results;
}

int run_results_command(const ResultsOptions& o, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  const std::string named = "'" + core::path_excerpt(o.db) + "'";
  if (!std::filesystem::is_regular_file(o.db, ec)) {
    const auto kind = core::special_file_kind(o.db);
    err << "hgsim results: " << named
        << (kind ? " is " + *kind + ", not a regular file" : std::string(": no such file"))
        << "\n  hgsim sweep SCENARIO writes "
        << "SCENARIO's sweep database (<name>.sweep.sqlite beside it, or --db FILE)\n";
    return kBadInput;
  }
  try {
    ResultsDb db(o.db, false);
    if (!db.is_sweep_db()) {
      err << "hgsim results: " << named
          << " is not a sweep database (no points table; hgsim sweep writes them)\n";
      return kBadInput;
    }
    const auto info = db.sweep();
    std::vector<std::string> axes;
    if (info) {
      const Json a = stored_json(info->axes, named, "sweep.axes");
      if (!a.is_array() ||
          !std::all_of(a.begin(), a.end(), [](const Json& x) { return x.is_string(); }))
        throw DbError("sweep database " + named + ": sweep.axes: expected a list of key paths");
      axes = a.get<std::vector<std::string>>();
    }
    WhereSql where;
    if (!o.where.empty()) {
      try {
        where = compile_where(o.where, axes);
      } catch (const WhereError& e) {
        err << "hgsim results: " << e.what() << "\n";
        return kBadInput;
      }
    }
    if (o.json) {
      Json sweep = nullptr;
      if (info)
        sweep = {{"scenario_file", info->scenario_file},
                 {"scenario", stored_json(info->scenario, named, "sweep.scenario")},
                 {"hgsim_version", info->hgsim_version},
                 {"options", stored_json(info->options, named, "sweep.options")},
                 {"axes", axes},
                 {"points", info->points},
                 {"started_at", info->started_at}};
      // Every point is read before anything is printed: a damaged point leaves no half
      // JSON document on stdout.
      std::string points;
      db.for_each(where.sql, where.params, [&](const PointRow& r) {
        check_row(r, named);
        auto opt = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
        auto parsed = [&](const std::string& t, const char* column) {
          return t.empty() ? Json(nullptr) : stored_json(t, named, point_column(r.point, column));
        };
        Json j{{"point", r.point},
               {"settings", parsed(r.settings, "settings")},
               {"status", r.status},
               {"error", r.error.empty() ? Json(nullptr) : Json(r.error)},
               {"iteration_time_s", opt(r.iteration_time_s)},
               {"tokens_per_s", opt(r.tokens_per_s)},
               {"mfu", opt(r.mfu)},
               {"plan", parsed(r.plan, "plan")},
               {"result", parsed(r.result, "result")},
               {"choice", choice_json(r)},
               {"finished_at", r.finished_at},
               {"wall_s", r.wall_s},
               {"scenario_hash", r.scenario_hash}};
        points += (points.empty() ? "\n" : ",\n") +
                  j.dump(-1, ' ', false, Json::error_handler_t::replace);
      });
      out << "{\"sweep\": " << sweep.dump(-1, ' ', false, Json::error_handler_t::replace)
          << ",\n\"points\": [" << points << "\n]}\n";
      return kSuccess;
    }
    if (o.csv) {
      out << "point";
      for (const auto& a : axes) out << "," << csv_cell(a);
      out << ",status,iteration_time_s,tokens_per_s,mfu,wall_s,finished_at,error,gpus_used,"
             "gpus_per_cluster,plan\n";
      db.for_each(where.sql, where.params, [&](const PointRow& r) {
        check_row(r, named);
        const Json settings = stored_json(r.settings, named, point_column(r.point, "settings"));
        out << r.point;
        for (const auto& a : axes)
          out << "," << csv_cell(settings.contains(a) ? value_text(settings[a]) : "");
        out << "," << csv_cell(r.status) << "," << number_text(r.iteration_time_s) << ","
            << number_text(r.tokens_per_s) << "," << number_text(r.mfu) << ","
            << Json(r.wall_s).dump() << "," << csv_cell(r.finished_at) << "," << csv_cell(r.error)
            << "," << choice_cells(r) << "\n";
      });
      return kSuccess;
    }
    std::size_t rows = 0;
    db.for_each(where.sql, where.params, [&](const PointRow& r) {
      check_row(r, named);
      const Json settings = stored_json(r.settings, named, point_column(r.point, "settings"));
      out << std::setw(5) << r.point << "  ";
      for (const auto& [k, v] : settings.items())
        out << shown(k) << "=" << shown(value_text(v)) << "  ";
      // A figure the database lacks is shown as '-', never another point's.
      auto figure = [](const std::optional<double>& v, auto format) {
        return v ? format(*v) : std::string("-");
      };
      if (r.status == "ok")
        out << "ok  "
            << figure(r.iteration_time_s,
                      [](double t) { return core::human_duration(core::Seconds(t)); })
            << "/iteration  " << figure(r.tokens_per_s, [](double v) { return fixed(v, 0); })
            << " tokens/s  MFU " << figure(r.mfu, [](double v) { return fixed(100 * v, 1); })
            << "%  " << point_choice_text(r) << "\n";
      else
        out << "FAILED: " << shown(r.error.substr(0, r.error.find('\n'))) << "\n";
      ++rows;
    });
    err << rows << " point" << (rows == 1 ? "" : "s");
    if (info)
      err << " of " << info->points << " (sweep of " << shown(info->scenario_file) << ", hgsim "
          << shown(info->hgsim_version) << ", started " << shown(info->started_at) << ")";
    err << "; times and rates simulated by hgsim sweep\n";
    return kSuccess;
  } catch (const DbError& e) {
    err << "hgsim results: " << e.what() << "\n";
    return kBadInput;
  }
}

}  // namespace hgsim::apps
