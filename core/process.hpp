// Child processes and termination: what hgsim does so that no process it forked outlives
// it, and no temporary file it was writing stays behind when it is interrupted.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hgsim::core {

// Installs handlers for the signals that end a process (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
// SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM; the `hgsim` command calls this once, the Python
// module does not: Python owns its signals) that forward the signal to every tracked
// child, remove every tracked temporary file, then end the process with the same signal
// (so the shell sees the usual status, 130 for Ctrl-C). A signal ignored by whoever
// started hgsim (nohup's SIGHUP) stays ignored.
void install_termination_handlers();

// Children and temporary files the handlers act on. Async-signal-safe to read: a fixed
// table of slots (kTrackedChildren children), each set and cleared by the thread that owns
// it. A forked child starts with empty tables: it never signals its siblings nor removes
// its parent's files.
constexpr int kTrackedChildren = 1024;
void track_child(pid_t pid);
void untrack_child(pid_t pid);
void track_temporary_file(const std::string& path);
void untrack_temporary_file(const std::string& path);

// Runs `body` in a forked child and returns what it wrote, so that a crash, an abort or
// memory exhaustion in `body` (SimGrid aborts on some inputs) cannot take the caller with
// it. The child dies with its parent (PR_SET_PDEATHSIG), never returns into the caller's
// code (whatever `body` throws, it ends with _exit), and is tracked for the termination
// handlers. Returns the child's bytes, or throws ChildFailed saying how the child ended.
struct ChildFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A child killed by a limit its environment set (SIGXFSZ: the file-size limit, ulimit -f;
// SIGXCPU: the CPU-time limit, ulimit -t): the message names the limit, it is no bug.
struct ChildHitLimit : ChildFailed {
  using ChildFailed::ChildFailed;
};

// A limit of the operating system that hgsim ran into (open files, processes, the stack, a
// missing TMPDIR): not a bug, and not hgsim's to raise. The message names the limit and
// what to raise; the hgsim command reports it as bad input (exit 1).
struct EnvironmentLimit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The stack every hgsim command runs with: 8 MiB, the Linux default, on which the readers'
// recursion limits are measured (kMaxDocumentDepth, the --where nesting). A smaller soft
// limit (ulimit -s) is raised to it when the hard limit allows; stack_refusal says why it
// cannot be (a 64 KiB stack would end a large scenario with SIGSEGV), else nullopt.
constexpr long long kStackBytes = 8LL << 20;

// What one read() of a child's pipe takes. Read buffers live on the heap: a 64 KiB array
// on the stack alone overflows a 64 KiB stack (ulimit -s 64), in every simulation's parent.
constexpr std::size_t kPipeChunk = 1 << 16;
std::optional<std::string> stack_refusal();

// The limit behind a system call that failed with `error` ("too many open files: the limit
// is 8 (ulimit -n); raise it, e.g. ulimit -n 4096"), nullopt for an error no limit explains
// (EMFILE: ulimit -n; ENFILE: the system's file table; EAGAIN from fork: ulimit -u).
std::optional<std::string> limit_behind(int error, const char* call);
std::string run_in_child(const std::function<std::string()>& body);

// run_in_child() in two halves, so that several children can run side by side:
// start_child forks and returns at once; finish_child reads everything the child writes,
// reaps it and returns its bytes or throws ChildFailed. start_child throws EnvironmentLimit
// when a limit keeps it from making the pipe or the process. Every started child must be
// finished exactly once (a child that is done waits on its pipe until then).
// `what` names the child in ChildFailed's message ("the simulator process was killed by
// signal 9 (Killed)").
struct Child {
  pid_t pid = -1;
  int fd = -1;  // the read end of the child's pipe
  const char* what = "the simulator process";
};
Child start_child(const std::function<std::string()>& body,
                  const char* what = "the simulator process");
std::string finish_child(Child child);
// finish_child's second half, for a caller that read the pipe itself (several children
// polled at once): closes the pipe, reaps the child and returns `text`, what it read, or
// throws ChildFailed.
std::string reap_child(Child child, std::string text);
// Runs `count` children side by side, at most `jobs` at a time, started in order by
// `start(i)` (nullopt: child i was not started, its caller knows why). A slot goes to the
// next child as soon as any child in flight ends, and `ended(i, child, text)` gets each
// ended child with everything it wrote, in the order they end (reap_child it there).
// `tick`, if set, runs before each wait, and waits last at most `tick_ms` (-1: until a child
// writes or ends). If this ends early (an exception from a callback, or poll() failing:
// std::runtime_error), the children in flight are killed and reaped.
void run_children(std::size_t count, int jobs,
                  const std::function<std::optional<Child>(std::size_t)>& start,
                  const std::function<void(std::size_t, Child, std::string)>& ended,
                  const std::function<void()>& tick = {}, int tick_ms = -1);

}  // namespace hgsim::core
