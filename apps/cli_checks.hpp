// Checks of command-line values, in one wording for every command.
//
// CLI11's own PositiveNumber and Range accept "nan" and print their bounds as "0.000000"
// or 1.79769e+308; these read the whole value as a number, refuse what is not finite and
// say the range in the figures the user would type.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace hgsim::apps {

// The longest planner search a command accepts (--time-budget): 30 days.
inline constexpr double kMaxTimeBudgetS = 30 * 86400.0;

// A finite number > 0 and <= max ("seconds", a budget, a size).
CLI::Validator finite_positive(double max = 1e15);
// A finite number >= 0 and <= max.
CLI::Validator finite_non_negative(double max = 1e15);
// A file path: not empty ("--layer-profile ''" would otherwise mean no layer profile).
CLI::Validator non_empty_path();
// An integer in [lo, hi], with the range in the message.
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);

}  // namespace hgsim::apps
