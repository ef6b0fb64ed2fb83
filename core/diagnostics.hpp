// Problems found in user input, with where they are and what would be right.
//
// Every check in hgsim reports into a Diagnostics instead of throwing at the first
// problem, so that a user sees all problems of a file at once. A diagnostic carries the
// file, line and column (1-based; 0 when the input had no positions, e.g. JSON), the key
// path (`clusters[1].nic.bandwidth`), a message, and a hint saying what would be valid.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hgsim::core {

struct SourceLocation {
  std::string file;  // as the user named it; empty for input without a file
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;    // 1-based; 0 when unknown
  bool operator==(const SourceLocation&) const = default;
};

enum class Severity { error, warning };

struct Diagnostic {
  Severity severity = Severity::error;
  SourceLocation where;
  std::string key_path;  // e.g. "clusters[1].nic.bandwidth"; empty for the whole document
  std::string message;   // what is wrong
  std::string hint;      // what would be valid (may be empty)
};

class Diagnostics {
 public:
  void error(SourceLocation where, std::string key_path, std::string message,
             std::string hint = {});
  void warning(SourceLocation where, std::string key_path, std::string message,
               std::string hint = {});
  // Adds every diagnostic of `other`, in its order.
  void append(const Diagnostics& other);

  bool has_errors() const;
  int error_count() const;
  int warning_count() const;
  const std::vector<Diagnostic>& all() const { return items_; }
  bool empty() const { return items_.empty(); }

  // One line per diagnostic, sorted by position:
  //   file:line:column: error: key.path: message; hint
  // at most kMaxFormatted of them, then one line counting the rest.
  static constexpr std::size_t kMaxFormatted = 100;
  std::string format() const;

 private:
  std::vector<Diagnostic> items_;
  int errors_ = 0;
};

std::string format_diagnostic(const Diagnostic& d);

// Edit distance (Levenshtein, case-insensitive).
int edit_distance(std::string_view a, std::string_view b);

// A hint for a name that is not one of `valid`: "did you mean 'x'?" when one is close,
// followed by the valid names (abbreviated when there are many).
std::string did_you_mean(std::string_view word, std::span<const std::string> valid);

}  // namespace hgsim::core
