// The `hgsim` command line. Exit status: 0 success, 1 bad input or usage, 2 internal
// error (or a failure that is not the input's: a GPU profile run, a results database write).
#pragma once

#include <iosfwd>

namespace hgsim::apps {

enum ExitStatus { kSuccess = 0, kBadInput = 1, kInternalError = 2 };

// Runs one command line; data goes to `out`, diagnostics and progress to `err`.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
