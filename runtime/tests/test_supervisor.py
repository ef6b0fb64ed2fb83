"""run_workers: success returns, the first failure stops everyone, and no
process (worker or worker's child) outlives the run.

    /usr/bin/python3 -m pytest runtime/tests/test_supervisor.py -q
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RUNTIME))

from hgsim_runtime.supervisor import WorkerFailed, WorkerSpec, run_workers  # noqa: E402
from hgsim_runtime.wan import EmulatedWan, list_namespaces, shaping_probe  # noqa: E402

PYTHON = "/usr/bin/python3"
PREFIX = f"hgs{os.getpid()}"


def unshaped_wan() -> EmulatedWan:
    wan = EmulatedWan(["a", "b"], [], shape=False)
    wan.open()
    return wan


def worker(tmp_path: Path, rank: int, code: str, cluster: str = "a") -> WorkerSpec:
    """A worker running `code`; it first prints its pid as "pid N"."""
    program = "import os, sys, time, subprocess\nprint('pid', os.getpid(), flush=True)\n" + textwrap.dedent(code)
    return WorkerSpec(
        rank=rank,
        cluster=cluster,
        argv=[PYTHON, "-c", program],
        env={"PYTHONUNBUFFERED": "1"},
        log_path=str(tmp_path / f"rank{rank}.log"),
    )


def logged_pids(spec: WorkerSpec, label: str = "pid") -> list[int]:
    lines = Path(spec.log_path).read_text().splitlines()
    return [int(line.split()[1]) for line in lines if line.startswith(label + " ")]


def exists(pid: int) -> bool:
    """In the process table at all, zombies included: a zombie is a leak too."""
    return Path(f"/proc/{pid}").exists()


SLEEPER = "time.sleep(30)\n"


def test_all_workers_succeeding_returns(tmp_path):
    specs = [worker(tmp_path, rank, f"print('done {rank}')") for rank in range(3)]
    run_workers(specs, unshaped_wan(), timeout_s=20)
    for rank, spec in enumerate(specs):
        assert f"done {rank}" in Path(spec.log_path).read_text()


def test_a_worker_exiting_3_stops_the_others(tmp_path):
    specs = [
        worker(tmp_path, 0, SLEEPER),
        worker(tmp_path, 1, "time.sleep(0.3)\nprint('giving up now')\nsys.exit(3)"),
        worker(tmp_path, 2, SLEEPER, cluster="b"),
    ]
    started = time.monotonic()
    with pytest.raises(WorkerFailed) as caught:
        run_workers(specs, unshaped_wan(), timeout_s=20)
    failure = caught.value
    assert (failure.rank, failure.reason) == (1, "exit status 3")
    assert failure.last_lines[-1] == "giving up now"
    assert "worker rank 1 in cluster 'a' failed: exit status 3" in str(failure)
    assert "giving up now" in str(failure)
    # Sleepers die on SIGTERM at once: no waiting for the 3 s grace period.
    assert time.monotonic() - started < 3
    for spec in specs:
        for pid in logged_pids(spec):
            assert not exists(pid), f"rank {spec.rank} (pid {pid}) survived"


def test_a_worker_killed_by_a_signal_is_reported_as_such(tmp_path):
    specs = [worker(tmp_path, 0, "os.kill(os.getpid(), 9)"), worker(tmp_path, 1, SLEEPER)]
    with pytest.raises(WorkerFailed) as caught:
        run_workers(specs, unshaped_wan(), timeout_s=20)
    assert (caught.value.rank, caught.value.reason) == (0, "killed by signal 9")


def test_a_hanging_worker_times_out_with_its_last_line(tmp_path):
    specs = [
        worker(tmp_path, 0, "print('finished quickly')"),
        worker(tmp_path, 1, "print('last words before hanging')\n" + SLEEPER),
    ]
    with pytest.raises(WorkerFailed) as caught:
        run_workers(specs, unshaped_wan(), timeout_s=2)
    failure = caught.value
    assert (failure.rank, failure.reason) == (1, "timeout after 2 s")
    assert "last words before hanging" in failure.last_lines
    assert not exists(logged_pids(specs[1])[0])


def test_a_silent_worker_is_stopped_as_stalled(tmp_path):
    chatty = "for step in range(100):\n    print('step', step)\n    time.sleep(0.1)\n"
    specs = [worker(tmp_path, 0, chatty), worker(tmp_path, 1, "print('one line')\n" + SLEEPER)]
    with pytest.raises(WorkerFailed) as caught:
        run_workers(specs, unshaped_wan(), timeout_s=20, stall_s=1)
    assert (caught.value.rank, caught.value.reason) == (1, "no progress for 1 s")


def test_a_child_of_a_failing_worker_is_not_left_behind(tmp_path):
    spawner = (
        "child = subprocess.Popen(['sleep', '30'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(0.3)\n"
        "sys.exit(3)\n"  # without waiting for its child
    )
    specs = [worker(tmp_path, 0, spawner), worker(tmp_path, 1, SLEEPER)]
    with pytest.raises(WorkerFailed):
        run_workers(specs, unshaped_wan(), timeout_s=20)
    (child,) = logged_pids(specs[0], "child")
    assert not exists(child), f"the worker's child {child} is still in the process table"


def test_a_child_left_by_a_successful_worker_is_not_left_behind(tmp_path):
    spawner = "child = subprocess.Popen(['sleep', '30'])\nprint('child', child.pid, flush=True)\n"
    specs = [worker(tmp_path, 0, spawner)]
    run_workers(specs, unshaped_wan(), timeout_s=20)
    (child,) = logged_pids(specs[0], "child")
    assert not exists(child)


def test_progress_lines_reach_the_callback(tmp_path):
    code = "for step in range(3):\n    print(f'PROGRESS step={step}')\n    print('noise')\n"
    specs = [worker(tmp_path, 0, code), worker(tmp_path, 1, "print('PROGRESS step=0')")]
    seen = []
    run_workers(specs, unshaped_wan(), timeout_s=20, progress=lambda rank, line: seen.append((rank, line)))
    assert sorted(seen) == [(0, "PROGRESS step=0"), (0, "PROGRESS step=1"), (0, "PROGRESS step=2"),
                            (1, "PROGRESS step=0")]


def test_sigterm_to_the_runner_stops_the_workers(tmp_path):
    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(RUNTIME)!r})
        from hgsim_runtime.supervisor import WorkerSpec, run_workers
        from hgsim_runtime.wan import EmulatedWan
        wan = EmulatedWan(["a"], [], shape=False)
        wan.open()
        code = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(30)"
        specs = [WorkerSpec(rank, "a", [{PYTHON!r}, "-c", code], {{}}, f"{tmp_path}/w{{rank}}.log")
                 for rank in range(2)]
        print("starting", flush=True)
        run_workers(specs, wan, timeout_s=60)
    """))
    process = subprocess.Popen([PYTHON, str(runner)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "starting"
    logs = [tmp_path / f"w{rank}.log" for rank in range(2)]

    def pid_in(log):
        match = re.search(r"^pid (\d+)$", log.read_text(), re.M) if log.exists() else None
        return int(match.group(1)) if match else None

    # Generous: under a loaded CI machine starting two interpreters can take seconds.
    deadline = time.monotonic() + 60
    while not all(pid_in(log) for log in logs) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [pid_in(log) for log in logs]
    assert all(pids), f"the workers did not start within 60 s: {[l.read_text() for l in logs]}"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 128 + signal.SIGTERM
    for pid in pids:
        assert not exists(pid), f"worker {pid} outlived its SIGTERMed runner"


def test_a_program_that_cannot_start_is_a_worker_failure(tmp_path):
    spec = WorkerSpec(0, "a", ["/nonexistent/program"], {}, str(tmp_path / "rank0.log"))
    with pytest.raises(WorkerFailed, match="could not start"):
        run_workers([worker(tmp_path, 1, SLEEPER), spec], unshaped_wan(), timeout_s=5)


@pytest.mark.skipif(not shaping_probe().usable, reason=str(shaping_probe().reason))
def test_a_crash_inside_the_emulated_wan_leaves_no_namespace(tmp_path):
    links = [{"from": "a", "to": "b", "rate_bps": 8e6, "reverse_rate_bps": 8e6}]
    with pytest.raises(WorkerFailed):
        with EmulatedWan(["a", "b"], links, prefix=PREFIX) as wan:
            assert wan.shaped, wan.why_not
            specs = [
                worker(tmp_path, 0, "print('in', os.readlink('/proc/self/ns/net'))\nsys.exit(3)"),
                worker(tmp_path, 1, SLEEPER, cluster="b"),
            ]
            run_workers(specs, wan, timeout_s=20)
    assert [name for name in list_namespaces() if name.startswith(PREFIX + "-")] == []
    own_namespace = os.readlink("/proc/self/ns/net")
    assert f"in {own_namespace}" not in Path(specs[0].log_path).read_text()
