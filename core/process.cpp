#include "core/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string_view>

#include "core/files.hpp"

namespace hgsim::core {
namespace {

constexpr std::size_t kSlots = 64;  // temporary files
std::array<std::atomic<pid_t>, kTrackedChildren> g_children{};
// Temporary file names, fixed-size so that the handler reads them without allocating.
constexpr std::size_t kPathBytes = 4096;
std::array<std::array<char, kPathBytes>, kSlots> g_temp_paths{};
std::array<std::atomic<bool>, kSlots> g_temp_used{};

void on_termination(int sig) {
  for (auto& slot : g_children) {
    const pid_t pid = slot.load();
    if (pid > 0) ::kill(pid, sig);
  }
  for (std::size_t i = 0; i < kSlots; ++i)
    if (g_temp_used[i].load()) ::unlink(g_temp_paths[i].data());
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// In a freshly forked child: what the parent tracked is the parent's.
void forget_inherited() {
  for (auto& slot : g_children) slot.store(0);
  for (auto& used : g_temp_used) used.store(false);
}

}  // namespace

void install_termination_handlers() {
  struct sigaction action {};
  action.sa_handler = on_termination;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &action, nullptr);
  }
  // Past the file-size limit (ulimit -f) a write then fails with EFBIG, which the writer
  // reports with the limit (core::write_error_hint) and cleans up after, instead of the
  // kernel's SIGXFSZ ending the process with its temporary file left behind.
  ::signal(SIGXFSZ, SIG_IGN);
}

void track_child(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}

void untrack_child(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void track_temporary_file(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  for (std::size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_temp_used[i].compare_exchange_strong(expected, true)) continue;
    // Written while the slot reads as used but before the handler could need it: the
    // handler would at worst unlink a name that does not exist yet.
    std::memcpy(g_temp_paths[i].data(), path.c_str(), path.size() + 1);
    return;
  }
}

void untrack_temporary_file(const std::string& path) {
  for (std::size_t i = 0; i < kSlots; ++i)
    if (g_temp_used[i].load() && path == g_temp_paths[i].data()) {
      g_temp_used[i].store(false);
      return;
    }
}

std::optional<std::string> stack_refusal() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_STACK, &limit) != 0) return std::nullopt;
  const auto wanted = static_cast<rlim_t>(kStackBytes);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) return std::nullopt;
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= wanted) {
    // The main thread's stack grows on demand up to the soft limit in force at the time.
    limit.rlim_cur = wanted;
    if (::setrlimit(RLIMIT_STACK, &limit) == 0) return std::nullopt;
  }
  return "the stack limit (ulimit -s) is " + std::to_string(limit.rlim_cur / 1024) +
         " KiB; hgsim needs " + std::to_string(kStackBytes / 1024) +
         " KiB (the Linux default): raise it, e.g. ulimit -s 8192";
}

std::optional<std::string> limit_behind(int error, const char* call) {
  struct rlimit limit {};
  auto figure = [&](int resource) {
    if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::string();
    return std::string(" is ") + std::to_string(limit.rlim_cur);
  };
  if (error == EMFILE)
    return "too many open files: the limit of open files (ulimit -n)" + figure(RLIMIT_NOFILE) +
           "; raise it, e.g. ulimit -n 4096, or run fewer processes at once (hgsim sweep -j)";
  if (error == ENFILE)
    return "too many open files in the system (its file table, fs.file-max, is full); close "
           "some, or raise fs.file-max";
  if (error == EAGAIN && std::string_view(call) == "fork")
    return "too many processes: the limit of processes (ulimit -u)" + figure(RLIMIT_NPROC) +
           "; raise it, e.g. ulimit -u 4096, or run fewer processes at once (hgsim sweep -j)";
  return std::nullopt;
}

namespace {

[[noreturn]] void cannot_start(const char* what, const char* call, int error) {
  const std::string head = std::string("cannot start ") + what + ": ";
  if (const auto limit = limit_behind(error, call)) throw EnvironmentLimit(head + *limit);
  throw ChildFailed(head + call + ": " + std::strerror(error));
}

// What a signal that a limit of the environment sends says, or nullopt for any other.
std::optional<std::string> limit_signal(int sig) {
  struct rlimit limit {};
  if (sig == SIGXFSZ) {
    std::string figure;
    if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      figure = " is " + std::to_string(limit.rlim_cur) + " bytes";
    return "stopped by the file-size limit (ulimit -f)" + figure +
           ": a file it wrote would pass it; raise it, e.g. ulimit -f unlimited";
  }
  if (sig == SIGXCPU)
    return "stopped by the CPU-time limit (ulimit -t); raise it, e.g. ulimit -t unlimited";
  return std::nullopt;
}

}  // namespace

Child start_child(const std::function<std::string()>& body, const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) cannot_start(what, "pipe", errno);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    cannot_start(what, "fork", error);
  }
  if (pid == 0) {
    // The child: dies with its parent, and whatever happens never returns from here.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);  // the parent died before prctl took effect
    forget_inherited();
    ::close(fds[0]);
    int status = 4;
    try {
      const std::string out = body();
      status = write_all_fd(fds[1], out) ? 5 : 0;
    } catch (...) {
      status = 6;
    }
    ::close(fds[1]);
    ::_exit(status);
  }
  track_child(pid);
  ::close(fds[1]);
  return {pid, fds[0], what};
}

std::string finish_child(Child child) {
  std::string text;
  std::vector<char> buffer(kPipeChunk);  // on the heap: see kPipeChunk
  for (;;) {
    const ssize_t n = ::read(child.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return reap_child(child, std::move(text));
}

std::string reap_child(Child child, std::string text) {
  ::close(child.fd);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  untrack_child(child.pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return text;
  if (WIFSIGNALED(status))
    if (const auto limit = limit_signal(WTERMSIG(status)))
      throw ChildHitLimit(std::string(child.what) + " was " + *limit);
  if (WIFSIGNALED(status))
    throw ChildFailed(std::string(child.what) + " was killed by signal " +
                      std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")");
  throw ChildFailed(std::string(child.what) + " exited with status " +
                    std::to_string(WEXITSTATUS(status)));
}

void run_children(std::size_t count, int jobs,
                  const std::function<std::optional<Child>(std::size_t)>& start,
                  const std::function<void(std::size_t, Child, std::string)>& ended,
                  const std::function<void()>& tick, int tick_ms) {
  struct Running {
    std::size_t i = 0;
    Child child;
    std::string text;  // what it wrote so far
  };
  std::vector<Running> running;
  struct EndRunning {
    std::vector<Running>& running;
    ~EndRunning() {
      for (Running& r : running) {
        ::kill(r.child.pid, SIGKILL);
        try {
          reap_child(r.child, {});
        } catch (const ChildFailed&) {
        }
      }
    }
  } end_running{running};
  std::size_t next = 0;
  jobs = std::max(jobs, 1);
  std::vector<char> buffer(kPipeChunk);  // on the heap: see kPipeChunk
  while (next < count || !running.empty()) {
    while (static_cast<int>(running.size()) < jobs && next < count) {
      const std::size_t i = next++;
      if (auto child = start(i)) running.push_back({i, *child, {}});
    }
    if (tick) tick();
    if (running.empty()) continue;
    std::vector<pollfd> polled;
    for (const Running& r : running) polled.push_back({r.child.fd, POLLIN, 0});
    const int n = ::poll(polled.data(), polled.size(), tick ? tick_ms : -1);
    if (n < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll() failed: ") + std::strerror(errno));
    if (n <= 0) continue;
    for (std::size_t k = running.size(); k-- > 0;) {
      if (polled[k].revents == 0) continue;
      const ssize_t got = ::read(running[k].child.fd, buffer.data(), buffer.size());
      if (got > 0) {
        running[k].text.append(buffer.data(), static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      // The end of its pipe (or a pipe that cannot be read): the child is done.
      Running r = std::move(running[k]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      ended(r.i, r.child, std::move(r.text));
    }
  }
}

std::string run_in_child(const std::function<std::string()>& body) {
  return finish_child(start_child(body));
}

}  // namespace hgsim::core
