#include "core/diagnostics.hpp"

#include "core/text.hpp"

#include <algorithm>
#include <cctype>
#include <numeric>

namespace hgsim::core {

void Diagnostics::error(SourceLocation where, std::string key_path, std::string message,
                        std::string hint) {
  items_.push_back({Severity::error, std::move(where), std::move(key_path), std::move(message),
                    std::move(hint)});
  ++errors_;
}

void Diagnostics::warning(SourceLocation where, std::string key_path, std::string message,
                          std::string hint) {
  items_.push_back({Severity::warning, std::move(where), std::move(key_path), std::move(message),
                    std::move(hint)});
}

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
  errors_ += other.errors_;
}

bool Diagnostics::has_errors() const {
  return error_count() > 0;
}

int Diagnostics::error_count() const {
  return errors_;
}

int Diagnostics::warning_count() const {
  return static_cast<int>(items_.size()) - error_count();
}

std::string format_diagnostic(const Diagnostic& d) {
  std::string out;
  if (!d.where.file.empty()) {
    out += path_excerpt(d.where.file);
    if (d.where.line > 0)
      out += ":" + std::to_string(d.where.line) + ":" + std::to_string(d.where.column);
    out += ": ";
  }
  out += d.severity == Severity::error ? "error: " : "warning: ";
  if (!d.key_path.empty()) {
    // A path through a hostile document (a 1000-character key, 64 levels of [0]) is
    // shown by its ends; a key a terminal would act on (from a dict given to the Python
    // module, which no reader checked) escaped.
    out += ends_excerpt(d.key_path, 120, 60) + ": ";
  }
  out += d.message;
  if (!d.hint.empty()) out += "; " + d.hint;
  return out;
}

std::string Diagnostics::format() const {
  std::vector<const Diagnostic*> sorted;
  for (const Diagnostic& d : items_) sorted.push_back(&d);
  // Stable: problems at the same place keep the order in which they were found.
  std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic* a, const Diagnostic* b) {
    if (a->where.file != b->where.file) return a->where.file < b->where.file;
    if (a->where.line != b->where.line) return a->where.line < b->where.line;
    return a->where.column < b->where.column;
  });
  std::string out;
  for (std::size_t i = 0; i < sorted.size() && i < kMaxFormatted; ++i)
    out += format_diagnostic(*sorted[i]) + "\n";
  auto count = [](int n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  if (sorted.size() > kMaxFormatted)
    out += "... and " + std::to_string(sorted.size() - kMaxFormatted) + " more not shown (" +
           count(error_count(), "error") + " and " + count(warning_count(), "warning") +
           " in all)\n";
  return out;
}

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      int up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view word, std::span<const std::string> valid) {
  const std::string* best = nullptr;
  int best_distance = 0;
  for (const std::string& candidate : valid) {
    int d = edit_distance(word, candidate);
    if (best == nullptr || d < best_distance) {
      best = &candidate;
      best_distance = d;
    }
  }
  std::string hint;
  // Close enough to be a typo: at most a third of the word, and at least 2 edits allowed.
  int allowed = std::max<int>(2, static_cast<int>(word.size()) / 3);
  if (best != nullptr && best_distance <= allowed) hint = "did you mean '" + *best + "'? ";
  constexpr std::size_t kShown = 12;
  hint += "valid: ";
  for (std::size_t i = 0; i < valid.size() && i < kShown; ++i) hint += (i ? ", " : "") + valid[i];
  if (valid.size() > kShown) hint += ", ... (" + std::to_string(valid.size()) + " in all)";
  return hint;
}

}  // namespace hgsim::core
