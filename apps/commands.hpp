// The `hgsim` command line. Exit status: 0 success, 1 bad input or usage, 2 internal
// error (and commands whose implementation has not landed yet, which say so).
#pragma once

#include <iosfwd>

namespace hgsim::apps {

enum ExitStatus { kSuccess = 0, kBadInput = 1, kInternalError = 2 };

// Runs one command line; data goes to `out`, diagnostics and progress to `err`.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
