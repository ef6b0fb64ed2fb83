"""EmulatedWan: namespaces come and go, the shaper holds its rate, and where the probe finds
that links cannot be shaped (not root, capabilities dropped) everything falls back to
unshaped loopback, saying which step failed and what would make it work.

    /usr/bin/python3 -m pytest runtime/tests/test_wan.py -q
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(RUNTIME))

from hgsim_runtime import wan as wan_module  # noqa: E402
from hgsim_runtime.wan import EmulatedWan, cleanup_stale, list_namespaces  # noqa: E402
from hgsim_runtime.wan_check import round_trips, timed_transfer  # noqa: E402

# Short and unique to this test process, so concurrent test runs never meet.
PREFIX = f"hgt{os.getpid()}"


VERDICT = wan_module.shaping_probe()
needs_namespaces = pytest.mark.skipif(not VERDICT.usable, reason=str(VERDICT.reason))


def ours(prefix: str = PREFIX) -> list[str]:
    return [name for name in list_namespaces() if name.startswith(prefix + "-")]


def two_clusters(rate_bps: float = 8e6, reverse_rate_bps: float = 16e6,
                 latency_s: float = 0.0) -> tuple[list[str], list[dict]]:
    return ["a", "b"], [{"from": "a", "to": "b", "rate_bps": rate_bps,
                         "reverse_rate_bps": reverse_rate_bps, "latency_s": latency_s}]


# ----- lifecycle -------------------------------------------------------------------


@needs_namespaces
def test_namespaces_exist_inside_the_block_and_are_gone_after_it():
    clusters, links = two_clusters()
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        assert wan.shaped, wan.why_not
        assert sorted(ours()) == [f"{PREFIX}-0", f"{PREFIX}-1", f"{PREFIX}-r"]
        assert wan.address("a") != wan.address("b")
        assert wan.interface("a") == "wan0"
        assert wan.command_prefix("b") == ["ip", "netns", "exec", f"{PREFIX}-1"]
    assert ours() == []
    wan.close()  # idempotent
    assert ours() == []


@needs_namespaces
def test_namespaces_are_removed_when_the_block_raises():
    clusters, links = two_clusters()
    with pytest.raises(RuntimeError, match="inside the block"):
        with EmulatedWan(clusters, links, prefix=PREFIX):
            assert len(ours()) == 3
            raise RuntimeError("inside the block")
    assert ours() == []


@needs_namespaces
def test_sigterm_to_the_runner_removes_the_namespaces(tmp_path):
    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(RUNTIME)!r})
        from hgsim_runtime.wan import EmulatedWan, install_signal_cleanup
        wan = EmulatedWan(["a", "b"], [], prefix="{PREFIX}s")
        wan.open()  # no with-block: the signal handler must do the cleanup
        install_signal_cleanup(wan)
        print("ready", flush=True)
        time.sleep(30)
    """))
    process = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    assert len(ours(PREFIX + "s")) == 3
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 128 + signal.SIGTERM
    assert ours(PREFIX + "s") == []


@needs_namespaces
def test_cleanup_stale_removes_only_namespaces_of_dead_runs():
    dead_owner = "hg99999999"  # above pid_max: no process has this pid
    live_owner = f"hg{os.getppid()}"
    names = [f"{dead_owner}-r", f"{dead_owner}-0", f"{live_owner}-r", f"{dead_owner}x-0"]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        removed = cleanup_stale()
        assert sorted(removed) == [f"{dead_owner}-0", f"{dead_owner}-r"]
        remaining = list_namespaces()
        assert f"{live_owner}-r" in remaining and f"{dead_owner}x-0" in remaining
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


# ----- shaping ---------------------------------------------------------------------


@needs_namespaces
def test_one_megabyte_at_8_mbit_takes_about_a_second_and_the_reverse_rate_differs():
    megabyte = 1_000_000
    clusters, links = two_clusters(rate_bps=8e6, reverse_rate_bps=16e6)
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        forward_bytes, forward_seconds = timed_transfer(wan, "a", "b", total_bytes=megabyte)
        reverse_bytes, reverse_seconds = timed_transfer(wan, "b", "a", total_bytes=megabyte)
        sent = wan.counters()
    assert forward_bytes == reverse_bytes == megabyte
    # 8 Mbit/s is 1 MB/s of frames; TCP/IP headers make the payload ~4% slower.
    assert 0.8 <= forward_seconds <= 1.5, f"1 MB at 8 Mbit/s took {forward_seconds:.3f} s"
    # Twice the rate back: about half the time.
    assert 1.6 <= forward_seconds / reverse_seconds <= 2.4, (forward_seconds, reverse_seconds)
    assert sent[("a", "b")] >= megabyte
    assert sent[("b", "a")] >= megabyte


@needs_namespaces
def test_clusters_without_a_link_reach_each_other_unshaped():
    links = [{"from": "a", "to": "b", "rate_bps": 8e6, "reverse_rate_bps": 8e6}]
    with EmulatedWan(["a", "b", "c"], links, prefix=PREFIX) as wan:
        started = time.monotonic()
        received, _ = timed_transfer(wan, "a", "c", total_bytes=1_000_000)
        elapsed = time.monotonic() - started
        assert received == 1_000_000
        assert elapsed < 0.8, f"a->c has no link but 1 MB took {elapsed:.2f} s: is it shaped?"
        assert set(wan.counters()) == {("a", "b"), ("b", "a")}
        assert ["a", "c"] in wan.describe()["unshaped_pairs"]


# ----- latency: the userspace delay line --------------------------------------------

# A round trip crosses the link's two directions, each delayed by the one-way latency; the
# path's own cost (two veth pairs each way, the delay line's reads and writes, two Python
# processes) is well under a millisecond here, so a few milliseconds above twice the latency
# is the tolerance on a shared machine. Nothing may arrive early.
ROUND_TRIP_TOLERANCE_S = 0.004


@needs_namespaces
def test_a_link_with_latency_delays_each_direction_by_it():
    """15 ms one way: one-byte round trips take 30 ms (the delay line holds each direction),
    while a pair of clusters without a link is not delayed."""
    links = [{"from": "a", "to": "b", "rate_bps": 8e6, "reverse_rate_bps": 8e6, "latency_s": 0.015}]
    with EmulatedWan(["a", "b", "c"], links, prefix=PREFIX) as wan:
        latency = wan.describe()["latency"]
        delayed = round_trips(wan, "a", "b", rounds=20)
        undelayed = round_trips(wan, "a", "c", rounds=10)
    assert latency["applied_by"] == "delay line" and latency["why_not"] is None
    assert latency["one_way_s"] == {"a->b": 0.015, "b->a": 0.015}
    median = sorted(delayed)[len(delayed) // 2]
    assert min(delayed) >= 0.030, f"a round trip took {min(delayed) * 1e3:.2f} ms, under 30"
    assert median <= 0.030 + ROUND_TRIP_TOLERANCE_S, f"median round trip {median * 1e3:.2f} ms"
    assert max(undelayed) < 0.002, f"a->c has no link but took {max(undelayed) * 1e3:.2f} ms"


@needs_namespaces
def test_a_delayed_link_keeps_its_shaped_rate():
    """8 Mbit/s with 15 ms each way: one stream for 3 s still gets the rate's payload share
    (2948 bytes of payload in a 3014-byte frame), as without latency; the window (30 ms at
    8 Mbit/s is 30 kB) does not bind."""
    clusters, links = two_clusters(rate_bps=8e6, reverse_rate_bps=8e6, latency_s=0.015)
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        assert wan.describe()["latency"]["applied_by"] == "delay line"
        received, seconds = timed_transfer(wan, "a", "b", seconds=3.0)
    payload_rate_bps = 8e6 * wan_module.TCP_SEGMENT_BYTES / wan_module.FRAME_BYTES
    goodput = received * 8 / seconds
    assert 0.92 <= goodput / payload_rate_bps <= 1.02, f"{goodput / 1e6:.3f} Mbit/s"


@needs_namespaces
def test_links_without_latency_start_no_delay_line():
    clusters, links = two_clusters(latency_s=0.0)
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        assert wan.delay_line is None
        latency = wan.describe()["latency"]
    assert latency["applied_by"] == "none"
    assert latency["why_not"] == "no WAN link has a latency"


@needs_namespaces
def test_a_delay_line_that_cannot_start_leaves_the_links_shaped_saying_why(monkeypatch):
    # An interface name with a slash: the kernel refuses it (TUNSETIFF, EINVAL).
    monkeypatch.setattr(wan_module, "DELAY_DEVICE", "bad/name")
    clusters, links = two_clusters(latency_s=0.015)
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        assert wan.shaped and wan.delay_line is None
        latency = wan.describe()["latency"]
        assert latency["applied_by"] == "none"
        assert latency["why_not"].startswith("the delay line could not start")
        assert "creating TUN device" in latency["why_not"], latency["why_not"]
        assert wan.latency_note().startswith("WAN latency not applied: the delay line")
    assert ours() == []


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie, which whoever adopted it has not reaped yet, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_namespaces
def test_the_delay_line_ends_with_the_runner_even_when_it_is_killed(tmp_path):
    """Closing the WAN ends the delay line; so does SIGKILL of the runner, which no handler
    sees (the delay line's standard input is its lifeline); cleanup_stale removes the rest."""
    clusters, links = two_clusters(latency_s=0.015)
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        process = wan.delay_line
        assert process.poll() is None
    assert process.poll() is not None and ours() == []

    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(RUNTIME)!r})
        from hgsim_runtime.wan import EmulatedWan
        wan = EmulatedWan(["a", "b"], {links!r}, prefix="hg{os.getpid() % 10**6}99")
        wan.open()
        print(wan.delay_line.pid, flush=True)
        time.sleep(30)
    """))
    owner = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE, text=True)
    delay_line_pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10
    while running(delay_line_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(delay_line_pid), "the delay line outlived its runner"
    removed = cleanup_stale(rf"hg{os.getpid() % 10**6}99")
    assert sorted(removed) == [f"hg{os.getpid() % 10**6}99-{n}" for n in ("0", "1", "r")]


# ----- fallback and configuration errors (no root needed) --------------------------


def test_shape_false_falls_back_to_unshaped_loopback():
    clusters, links = two_clusters()
    with EmulatedWan(clusters, links, shape=False) as wan:
        assert wan.shaped is False
        assert "shape=False" in wan.why_not
        assert wan.address("a") == wan.address("b") == "127.0.0.1"
        assert wan.command_prefix("a") == []
        assert wan.interface("a") is None
        assert wan.counters() == {}
        description = wan.describe()
        assert description["shaped"] is False and description["why_not"] == wan.why_not
        assert description["latency"]["applied_by"] == "none"
        assert description["latency"]["why_not"] == wan_module.NO_DELAY_WITHOUT_NAMESPACES


def test_not_root_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(wan_module.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(wan_module, "_verdict", None)  # the probe runs again, as user 1000
    clusters, links = two_clusters()
    with EmulatedWan(clusters, links) as wan:
        assert wan.shaped is False
        assert wan.why_not.startswith("links are not shaped: running as root failed: "
                                      "the effective user id is 1000; to shape links, run as root")
    with pytest.raises(wan_module.WanSetupError, match="shape=True.*running as root failed"):
        with EmulatedWan(clusters, links, shape=True):
            pass


# ----- the probe -------------------------------------------------------------------

def host_network_state() -> tuple[list[str], list[str]]:
    """This process's namespaces (the probe's is "hg<pid>-probe"; other tests running
    meanwhile make their own) and the host's interfaces: what a probe must leave as it
    found them."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = sorted(line.split(":")[1].strip() for line in links.splitlines() if ":" in line)
    try:
        namespaces = sorted(n for n in list_namespaces()
                            if n.startswith((f"hg{os.getpid()}-", f"{PREFIX}-")))
    except wan_module.WanSetupError:
        namespaces = []
    return namespaces, names


def test_the_probe_agrees_with_what_the_runner_can_do_and_leaves_nothing():
    """Usable: a WAN that must be shaped is built. Not usable: it is refused with the probe's
    reason, and the default falls back with it. Either way nothing is left behind."""
    before = host_network_state()
    verdict = wan_module.shaping_probe(fresh=True)
    assert host_network_state() == before
    assert wan_module.shaping_probe() is verdict  # once per process
    clusters, links = two_clusters()
    if verdict.usable:
        assert verdict.reason is None
        with EmulatedWan(clusters, links, prefix=PREFIX, shape=True) as wan:
            assert wan.shaped
    else:
        assert verdict.step in wan_module.PROBE_STEPS and verdict.remedy
        with pytest.raises(wan_module.WanSetupError) as refused:
            with EmulatedWan(clusters, links, prefix=PREFIX, shape=True):
                pass
        assert verdict.reason in str(refused.value)
        with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
            assert not wan.shaped and wan.why_not == f"links are not shaped: {verdict.reason}"
    assert host_network_state() == before


# The ctest runs that take capabilities or root away say what they took (runtime/tests/
# restricted.py): the probe must name the step that this breaks, and the remedy what to grant.
EXPECTED_STEP = os.environ.get("HGSIM_EXPECT_PROBE_STEP")


@pytest.mark.skipif(EXPECTED_STEP is None, reason="HGSIM_EXPECT_PROBE_STEP is set by the "
                                                 "restricted runs (runtime/tests/restricted.py)")
def test_the_probe_names_the_step_the_restriction_breaks_and_the_remedy():
    verdict = wan_module.shaping_probe()
    assert not verdict.usable
    assert verdict.step == EXPECTED_STEP, verdict
    for needed in os.environ["HGSIM_EXPECT_PROBE_REMEDY"].split(","):
        assert needed in verdict.remedy, verdict.remedy


@needs_namespaces
def test_a_probe_that_fails_half_way_removes_its_namespace(monkeypatch):
    real_run = wan_module._run

    def no_htb(argv, *, what):
        if argv[0] == "tc":
            raise wan_module.WanSetupError(what, "simulated: no HTB in this kernel")
        return real_run(argv, what=what)

    before = host_network_state()
    monkeypatch.setattr(wan_module, "_run", no_htb)
    verdict = wan_module._probe()
    assert (verdict.usable, verdict.step) == (False, "htb")
    assert verdict.detail == "simulated: no HTB in this kernel"
    assert "modprobe sch_htb" in verdict.remedy  # root with every capability: the kernel
    assert host_network_state() == before


@needs_namespaces
def test_the_probe_retries_a_cleanup_that_failed_once(monkeypatch):
    real_run = wan_module._run
    deletes = []

    def first_delete_fails(argv, *, what):
        if argv[:3] == ["ip", "netns", "delete"]:
            deletes.append(argv[3])
            if len(deletes) == 1:
                raise wan_module.WanSetupError(what, "simulated: device or resource busy")
        return real_run(argv, what=what)

    before = host_network_state()
    monkeypatch.setattr(wan_module, "_run", first_delete_fails)
    assert wan_module._probe().usable
    assert deletes == [f"hg{os.getpid()}-probe"] * 2
    assert host_network_state() == before


@needs_namespaces
def test_a_probe_killed_half_way_is_cleaned_up_by_cleanup_stale():
    dead_probe = "hg99999999-probe"  # above pid_max: no process has this pid
    subprocess.run(["ip", "netns", "add", dead_probe], check=True)
    try:
        assert dead_probe in cleanup_stale()
        assert dead_probe not in list_namespaces()
    finally:
        subprocess.run(["ip", "netns", "delete", dead_probe], capture_output=True)


@pytest.mark.parametrize(
    "link, message",
    [
        ({"from": "a", "to": "z", "rate_bps": 1e6, "reverse_rate_bps": 1e6}, r"links\[0\]\.to: cluster 'z'"),
        ({"from": "a", "to": "b", "rate_bps": 1e6}, r"links\[0\]: missing key 'reverse_rate_bps'"),
        ({"from": "a", "to": "b", "rate_bps": 0, "reverse_rate_bps": 1e6}, r"links\[0\]\.rate_bps: 0 is not"),
        ({"from": "a", "to": "a", "rate_bps": 1e6, "reverse_rate_bps": 1e6}, r"both 'a'"),
        ({"from": "a", "to": "b", "rate_bps": 1e6, "reverse_rate_bps": 1e6, "latency_s": -0.01},
         r"links\[0\]\.latency_s: -0.01 is not a finite number of seconds >= 0"),
    ],
)
def test_bad_links_are_rejected_naming_the_link(link, message):
    with pytest.raises(ValueError, match=message):
        EmulatedWan(["a", "b"], [link], shape=False)


def test_names_longer_than_an_interface_name_are_rejected():
    with pytest.raises(ValueError, match="within 15"):
        EmulatedWan(["a", "b"], [], prefix="a-very-long-prefix", shape=False)


def test_htb_class_statistics_are_parsed_from_text():
    text = textwrap.dedent("""\
        class htb 1:1 root prio 0 rate 8Mbit ceil 8Mbit burst 3027b cburst 3027b
         Sent 1046010 bytes 700 pkt (dropped 0, overlimits 12 requeues 0)
         backlog 0b 0p requeues 0
        class htb 1:a root prio 0 rate 1Gbit ceil 1Gbit burst 125000b cburst 125000b
         Sent 7 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)
    """)
    assert wan_module._parse_htb_class_bytes(text) == {"1:1": 1046010, "1:a": 7}


def test_burst_is_a_frame_at_low_rates_and_a_millisecond_at_high_rates():
    assert wan_module._htb_burst_bytes(5e6) == wan_module.FRAME_BYTES
    assert wan_module._htb_burst_bytes(1e9) == 125_000


@needs_namespaces
def test_a_failure_half_way_through_setup_falls_back_and_leaves_nothing(monkeypatch):
    def broken_veth(self, index, cluster):
        raise wan_module.WanSetupError(f"cluster '{cluster}': creating its veth pair: simulated failure")

    monkeypatch.setattr(EmulatedWan, "_add_cluster", broken_veth)
    clusters, links = two_clusters()
    with EmulatedWan(clusters, links, prefix=PREFIX) as wan:
        assert wan.shaped is False
        assert "simulated failure" in wan.why_not
        assert wan.address("a") == "127.0.0.1"
        assert ours() == []
    with pytest.raises(wan_module.WanSetupError, match="simulated failure"):
        with EmulatedWan(clusters, links, prefix=PREFIX, shape=True):
            pass
    assert ours() == []


@needs_namespaces
def test_a_second_wan_with_the_same_prefix_is_refused_clearly():
    clusters, links = two_clusters()
    with EmulatedWan(clusters, links, prefix=PREFIX):
        with pytest.raises(wan_module.WanSetupError, match="already exist.*prefix="):
            with EmulatedWan(clusters, links, prefix=PREFIX):
                pass
        assert len(ours()) == 3  # the refused one removed nothing of the first
    assert ours() == []
