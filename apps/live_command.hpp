// `hgsim plot ARGS...` runs python3 -m hgsim.plots sweep ARGS... the same way.
// `hgsim live ARGS...` and `hgsim validate live ARGS...`: the live runner is Python
// (runtime/hgsim_runtime, torch); these commands replace the hgsim process with
//   ${HGSIM_PYTHON:-/usr/bin/python3} -m hgsim_runtime.live ARGS...   (resp. .validate)
// with PYTHONPATH=<build>/python:<source>/runtime:$PYTHONPATH and HGSIM_BINARY=<this hgsim>,
// so that signals and the exit status are the runner's own. ARGS pass through unchanged.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace hgsim::apps {

// The Python module a command line runs ("hgsim_runtime.live", "hgsim_runtime.validate")
// and the arguments it passes on; empty when argv is not a live command.
struct PythonCommand {
  std::string module;
  std::vector<std::string> args;
};
PythonCommand python_command(int argc, const char* const* argv);

// execvp()s the interpreter; returns only when it could not be started (after saying why
// on `err`), with the exit status to use.
int exec_python(const PythonCommand& command, std::ostream& out, std::ostream& err);
// The same in a child process, waiting for it: its exit status.
int run_python(const PythonCommand& command, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
