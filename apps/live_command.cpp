#include "apps/live_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ostream>

#include "apps/commands.hpp"

#ifndef HGSIM_PYTHON_PACKAGE_DIR
#define HGSIM_PYTHON_PACKAGE_DIR ""
#endif
#ifndef HGSIM_RUNTIME_DIR
#define HGSIM_RUNTIME_DIR ""
#endif

namespace hgsim::apps {

namespace {

constexpr const char* kDefaultPython = "/usr/bin/python3";

// This hgsim binary, for the runner to call back (hgsim run, hgsim plan).
std::string own_binary(const char* argv0) {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n > 0) return std::string(buffer, static_cast<std::size_t>(n));
  return argv0 ? argv0 : "hgsim";
}

}  // namespace

PythonCommand python_command(int argc, const char* const* argv) {
  if (argc >= 2 && std::strcmp(argv[1], "live") == 0)
    return {"hgsim_runtime.live", {argv + 2, argv + argc}};
  if (argc >= 3 && std::strcmp(argv[1], "validate") == 0 && std::strcmp(argv[2], "live") == 0)
    return {"hgsim_runtime.validate", {argv + 3, argv + argc}};
  if (argc >= 2 && std::strcmp(argv[1], "plot") == 0) {
    std::vector<std::string> args{"sweep"};
    args.insert(args.end(), argv + 2, argv + argc);
    return {"hgsim.plots", args};
  }
  return {};
}

int run_python(const PythonCommand& command, std::ostream& out, std::ostream& err) {
  out.flush();
  err.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    err << "hgsim: cannot start the Python interpreter for " << command.module << "\n";
    return kBadInput;
  }
  if (pid == 0) ::_exit(exec_python(command, out, err));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kInternalError;
}

int exec_python(const PythonCommand& command, std::ostream& out, std::ostream& err) {
  const char* chosen = std::getenv("HGSIM_PYTHON");
  const std::string python = chosen && *chosen ? chosen : kDefaultPython;
  std::string path = std::string(HGSIM_PYTHON_PACKAGE_DIR) + ":" + HGSIM_RUNTIME_DIR;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  ::setenv("PYTHONPATH", path.c_str(), 1);
  ::setenv("HGSIM_BINARY", own_binary(nullptr).c_str(), 1);

  std::vector<std::string> words{python, "-m", command.module};
  words.insert(words.end(), command.args.begin(), command.args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  out.flush();
  err.flush();
  ::execvp(argv[0], argv.data());
  const int error = errno;
  err << "hgsim: cannot run the Python interpreter '" << python << "' for " << command.module
      << ": " << std::strerror(error) << "\n"
      << "  the live runner needs Debian's python3 with python3-torch and python3-numpy "
         "(scripts/install-deps.sh); HGSIM_PYTHON names another interpreter\n";
  return kBadInput;
}

}  // namespace hgsim::apps
