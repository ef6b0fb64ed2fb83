#include "apps/cli_checks.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/document.hpp"

namespace hgsim::apps {

namespace {

std::string figure(double v) {
  std::ostringstream s;
  s.precision(15);
  s << v;
  return s.str();
}

// The whole text as a number, or an error message.
std::string read_number(const std::string& text, double& value) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  value = std::strtod(begin, &end);
  if (text.empty() || end == begin || *end != '\0')
    return "expected a number, found '" + core::excerpt(text) + "'";
  if (!std::isfinite(value) || errno == ERANGE)
    return "expected a finite number, found '" + core::excerpt(text) + "'";
  return {};
}

}  // namespace

CLI::Validator finite_positive(double max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        double v = 0;
        if (std::string why = read_number(text, v); !why.empty()) return why;
        if (v <= 0 || v > max)
          return "must be > 0 and at most " + figure(max) + ", found " + core::excerpt(text);
        return {};
      },
      "NUMBER > 0");
}

CLI::Validator finite_non_negative(double max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        double v = 0;
        if (std::string why = read_number(text, v); !why.empty()) return why;
        if (v < 0 || v > max)
          return "must be >= 0 and at most " + figure(max) + ", found " + core::excerpt(text);
        return {};
      },
      "NUMBER >= 0");
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "expected a file path" : ""; },
      "PATH");
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const char* begin = text.c_str();
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(begin, &end, 10);
        if (text.empty() || end == begin || *end != '\0')
          return "expected an integer, found '" + core::excerpt(text) + "'";
        if (errno == ERANGE || v < lo || v > hi)
          return "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                 ", found " + core::excerpt(text);
        return {};
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

}  // namespace hgsim::apps
