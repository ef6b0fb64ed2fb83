"""Starts the training workers inside their clusters' namespaces, watches them,
and on the first failure stops every one of them, children included.

Each worker runs in its own session (so its own process group): a signal to
the group reaches whatever the worker started. While workers run, this
process is a child subreaper, so a worker's child that outlives its parent is
re-parented to us instead of to PID 1 (which, on this machine, reaps orphans
only a second or more later) and we can kill and reap it before returning:
no orphan and no zombie is left behind when run_workers returns or raises.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from hgsim_runtime.wan import EmulatedWan, SignalsDeferred

POLL_SECONDS = 0.1
TERMINATE_GRACE_SECONDS = 3.0
KILL_WAIT_SECONDS = 5.0
LAST_LINES = 20
STARTUP_SECONDS = 60.0  # the least a worker gets to write its first line under --stall
PROGRESS_MARK = "PROGRESS "


@dataclass
class WorkerSpec:
    rank: int
    cluster: str
    argv: list[str]
    env: dict[str, str]  # added to this process's environment, overriding it
    log_path: str  # stdout and stderr of the worker, truncated at start


class WorkerFailed(Exception):
    """The first worker that failed, why, and the end of its log."""

    def __init__(self, rank: int, reason: str, last_lines: list[str], *, cluster: str = "", log_path: str = ""):
        self.rank = rank
        self.reason = reason
        self.last_lines = last_lines
        self.cluster = cluster
        self.log_path = log_path
        super().__init__(rank, reason)

    def __str__(self) -> str:
        where = f" in cluster '{self.cluster}'" if self.cluster else ""
        lines = [f"worker rank {self.rank}{where} failed: {self.reason}; all workers were stopped"]
        if self.log_path:
            lines.append(f"log: {self.log_path}")
        if self.last_lines:
            lines.append(f"last {len(self.last_lines)} lines of its log:")
            lines.extend("  | " + line for line in self.last_lines)
        else:
            lines.append("its log is empty")
        return "\n".join(lines)


# ----- process table helpers ---------------------------------------------------


def _process_table() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state) of every process, from /proc."""
    table = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read().decode(errors="replace")
        except OSError:
            continue  # it exited while we looked
        # The command name is in parentheses and may hold spaces: split after it.
        fields = stat[stat.rindex(")") + 2 :].split()
        table.append((int(entry), int(fields[1]), int(fields[2]), fields[0]))
    return table


def _live_members(groups: set[int]) -> list[int]:
    """Processes in `groups` that still run (zombies do not count)."""
    return [pid for pid, _, group, state in _process_table() if group in groups and state != "Z"]


def _reap_adopted(groups: set[int], leaders: set[int]):
    """Reaps our re-parented children from the workers' groups that have exited.
    Only those: other children of this process belong to other code."""
    me = os.getpid()
    for pid, parent, group, state in _process_table():
        if parent == me and group in groups and pid not in leaders and state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _set_child_subreaper(enabled: bool) -> bool:
    """Sets PR_SET_CHILD_SUBREAPER; returns the previous setting (False when
    prctl is unavailable, in which case orphans go to PID 1 as usual)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0)
        return bool(previous.value)
    except (OSError, AttributeError):
        return False


def _signal_groups(groups: set[int], signum: int):
    # Only groups that still have members: a group id whose members are all
    # gone may be reused by an unrelated process.
    alive = set()
    for _, _, group, state in _process_table():
        if group in groups and state != "Z":
            alive.add(group)
    for group in alive:
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass


def _tail(path: str, count: int = LAST_LINES) -> list[str]:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 64 * 1024))
            text = log.read().decode(errors="replace")
    except OSError as error:
        return [f"(log {path} unreadable: {error})"]
    return text.splitlines()[-count:]


# ----- the supervisor ------------------------------------------------------------


class _Worker:
    def __init__(self, spec: WorkerSpec, process: subprocess.Popen, started: float):
        self.spec = spec
        self.process = process
        self.log_size = 0
        self.last_growth = started
        self.has_output = False  # written its first line: started, so the stall clock runs
        self.read_offset = 0
        self.partial_line = b""


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


class _TerminateAsSystemExit:
    """While workers run, SIGTERM must unwind through our cleanup. If nobody
    installed a handler (default action: die at once, leaving the workers
    running), turn it into SystemExit(143) for the duration."""

    def __enter__(self):
        self.previous = None
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self.previous = signal.signal(signal.SIGTERM, self._raise)
        except ValueError:
            pass  # not the main thread: signal handlers cannot be set here
        return self

    @staticmethod
    def _raise(signum, frame):
        raise SystemExit(128 + signum)

    def __exit__(self, *exc_info):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


def run_workers(
    specs: list[WorkerSpec],
    wan: EmulatedWan,
    *,
    timeout_s: float,
    stall_s: float | None = None,
    progress: Callable[[int, str], None] | None = None,
) -> None:
    """Runs every worker to completion; returns when all exit 0.

    Raises WorkerFailed for the first worker that exits non-zero or by a
    signal, for the whole run exceeding `timeout_s`, or for a worker whose log
    has not grown for `stall_s` seconds. In every case, and on Ctrl-C or
    SIGTERM (re-raised), all workers and their children are stopped first:
    SIGTERM to each process group, SIGKILL after 3 s, then reaped.
    `progress(rank, line)` is called for each log line starting "PROGRESS ".
    """
    was_subreaper = _set_child_subreaper(True)
    workers: list[_Worker] = []
    try:
        with _TerminateAsSystemExit():
            try:
                try:
                    _start_all(specs, wan, workers)
                    _watch(workers, timeout_s=timeout_s, stall_s=stall_s, progress=progress)
                finally:
                    # On success this only sweeps up children a worker left behind.
                    _stop_all(workers)
            except WorkerFailed as failure:
                # Read after the stop, so that what a worker printed while
                # dying (a traceback, say) is in the report.
                if failure.log_path:
                    failure.last_lines = _tail(failure.log_path)
                raise
    finally:
        if not was_subreaper:
            _set_child_subreaper(False)


class _SignalsRecorded:
    """Holds Ctrl-C and SIGTERM back while workers are being started: a signal
    between a fork and the bookkeeping after it would leave a worker nobody
    knows to stop. Blocking the signal mask instead would be inherited by the
    workers through exec; a recording handler is reset by exec. The signals
    are re-raised, to the handlers that were there before, on the way out."""

    def __enter__(self):
        self.pending: list[int] = []
        self.previous = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._record)
        except ValueError:
            pass  # not the main thread: nothing to hold back
        return self

    def _record(self, signum, frame):
        self.pending.append(signum)

    def __exit__(self, *exc_info):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        for signum in self.pending:
            signal.raise_signal(signum)
        return False


def _start_all(specs: list[WorkerSpec], wan: EmulatedWan, workers: list[_Worker]):
    with _SignalsRecorded():
        for spec in specs:
            _start_one(spec, wan, workers)


def _start_one(spec: WorkerSpec, wan: EmulatedWan, workers: list[_Worker]):
    argv = wan.command_prefix(spec.cluster) + list(spec.argv)
    environment = dict(os.environ)
    environment.update(spec.env)
    try:
        with open(spec.log_path, "wb") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
            workers.append(_Worker(spec, process, time.monotonic()))
    except OSError as error:
        raise WorkerFailed(
            spec.rank, f"could not start `{' '.join(argv)}`: {error}", [],
            cluster=spec.cluster, log_path=spec.log_path,
        ) from error


def _watch(workers: list[_Worker], *, timeout_s: float, stall_s: float | None, progress):
    started = time.monotonic()
    while True:
        now = time.monotonic()
        running = 0
        for worker in workers:
            if progress is not None:
                _report_progress(worker, progress)
            returncode = worker.process.poll()
            if returncode is None:
                running += 1
                stalled_for = _seconds_without_output(worker, now)
                # Before its first line a worker is starting (importing torch takes seconds
                # on a loaded machine); it gets STARTUP_SECONDS or stall_s, whichever is
                # longer, so that a peer hung mid-step is the one named.
                allowed = stall_s if worker.has_output else max(stall_s or 0, STARTUP_SECONDS)
                if stall_s is not None and stalled_for >= allowed:
                    _fail(worker, f"no progress for {allowed:g} s"
                          + ("" if worker.has_output else " (it never started: its log is empty)"))
                continue
            if returncode != 0:
                _fail(worker, _exit_reason(returncode))
        if running == 0:
            return
        if now - started >= timeout_s:
            # Name the first worker still running: it is the one we waited for.
            waiting = next(w for w in workers if w.process.returncode is None)
            _fail(waiting, f"timeout after {timeout_s:g} s")
        time.sleep(POLL_SECONDS)


def _seconds_without_output(worker: _Worker, now: float) -> float:
    try:
        size = os.stat(worker.spec.log_path).st_size
    except OSError:
        size = worker.log_size
    if size != worker.log_size:
        worker.log_size = size
        worker.last_growth = now
        worker.has_output = True
    return now - worker.last_growth


def _report_progress(worker: _Worker, progress: Callable[[int, str], None]):
    try:
        with open(worker.spec.log_path, "rb") as log:
            log.seek(worker.read_offset)
            new = log.read()
    except OSError:
        return
    worker.read_offset += len(new)
    *complete, worker.partial_line = (worker.partial_line + new).split(b"\n")
    for raw in complete:
        line = raw.decode(errors="replace").rstrip("\r")
        if line.startswith(PROGRESS_MARK):
            progress(worker.spec.rank, line)


def _fail(worker: _Worker, reason: str):
    # last_lines is filled in by run_workers once every worker has stopped.
    raise WorkerFailed(
        worker.spec.rank, reason, [], cluster=worker.spec.cluster, log_path=worker.spec.log_path
    )


def _stop_all(workers: list[_Worker]):
    """SIGTERM every worker's group, SIGKILL what is left after the grace
    period, reap leaders and adopted children. Signals are held off meanwhile
    so a second Ctrl-C cannot leave workers running."""
    if not workers:
        return
    groups = {worker.process.pid for worker in workers}
    leaders = set(groups)
    with SignalsDeferred():
        _signal_groups(groups, signal.SIGTERM)
        _wait_until_gone(workers, groups, leaders, TERMINATE_GRACE_SECONDS)
        if _live_members(groups):
            _signal_groups(groups, signal.SIGKILL)
            _wait_until_gone(workers, groups, leaders, KILL_WAIT_SECONDS)
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.wait()
        _reap_adopted(groups, leaders)


def _wait_until_gone(workers: list[_Worker], groups: set[int], leaders: set[int], seconds: float):
    deadline = time.monotonic() + seconds
    while True:
        for worker in workers:
            worker.process.poll()
        _reap_adopted(groups, leaders)
        if not _live_members(groups) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)
