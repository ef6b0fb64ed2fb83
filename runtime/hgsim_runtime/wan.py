"""Emulated WAN: one network namespace per cluster, joined by a router
namespace whose interfaces shape every WAN direction with HTB.

Layout for clusters [a, b] with prefix P:

    P-0 (cluster a)            P-r (router)               P-1 (cluster b)
    wan0 10.213.0.2/24 ---- to0 10.213.0.1/24
                               to1 10.213.1.1/24 ---- wan0 10.213.1.2/24

Traffic a->b leaves the router on `to1`; the HTB qdisc there has one class per
source cluster, selected by the source subnet, at that link's a->b rate. The
reverse direction is shaped on `to0`. Only directions listed in `links` are
shaped: clusters without a link between them still reach each other through
the router, unshaped. Traffic between workers of the same cluster stays inside
that cluster's namespace (loopback) and is never shaped.

Latency: this kernel has no sch_netem (HTB only limits rate), so a direction with a
latency is routed, inside the router, through a userspace delay line (delay_line.py: a TUN
device that holds each packet for the direction's one-way latency, in order) before its HTB
class shapes it. A link then has the configured bandwidth and latency, plus the (tiny)
latency of two veth pairs. `describe()["latency"]` says which way latency was applied.

Whether this process can build it at all is decided once per process by
`shaping_probe()`: root, then a throw-away namespace, a command inside it, a veth
pair and an HTB shaper, each tried for real and removed again. Where a step
fails (not root; a container without CAP_SYS_ADMIN/CAP_NET_ADMIN; AppArmor;
a read-only /proc/sys; a kernel without veth or HTB) nothing is shaped: every
cluster uses 127.0.0.1, and `why_not` says which step failed and what would
make it work.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

# The delay line's TUN device in the router namespace, and the routing table that sends a
# delayed direction's packets into it (any number unused by a fresh namespace: it has only
# local 255, main 254 and default 253).
DELAY_DEVICE = "delay0"
DELAY_TABLE = "100"

# How long the delay line may take to say "ready" (it starts in about 50 ms).
DELAY_LINE_START_S = 10.0

# Packets the delay line's device may queue before the delay line reads them: its reads
# keep up with a shaped direction's packets (at most 1 ms of its rate each, see
# _gso_max_bytes), and a short stall of the delay line must not drop a window's worth.
DELAY_QUEUE_PACKETS = 10000

# Ways `describe()["latency"]["applied_by"]` says the latency was applied.
LATENCY_BY_DELAY_LINE = "delay line"
LATENCY_NOT_APPLIED = "none"

# Why there is no userspace delay line without the namespaces: gloo's TCP connections go
# straight between the ranks' addresses, so the only place to hold their packets is a
# router in their path, and its TUN device needs CAP_NET_ADMIN like the shaper.
NO_DELAY_WITHOUT_NAMESPACES = (
    "links are not shaped, so neither is latency applied: the delay line holds packets in the "
    "emulated WAN's router namespace (a TUN device, which needs CAP_NET_ADMIN as the shaper "
    "does), and without it the workers' gloo connections run straight over loopback")

# Every cluster namespace names its side of the veth the same, so a worker's
# GLOO_SOCKET_IFNAME does not depend on which cluster it is in.
CLUSTER_INTERFACE = "wan0"

# Linux limits interface names to 15 characters (IFNAMSIZ - 1); we keep
# namespace names within the same limit so they stay readable in `ip netns`.
MAX_NAME_CHARS = 15

# Candidate /16s for the emulated WAN, tried in order; the first that overlaps
# no address or route of the host is used, so an address in a log is never
# mistaken for one of the host's networks.
SUBNET_CANDIDATES = [f"10.{second}.0.0/16" for second in range(213, 256)] + [
    f"172.{second}.0.0/16" for second in range(16, 32)
]

# The share of a shaped direction's rate guaranteed to pure TCP ACKs (they may use all of it
# when there is no data; data may use all of it when there are no ACKs).
ACK_SHARE = 0.05

# How long a shaped direction's queue is, in seconds of traffic at its rate (a router's
# buffer of about one WAN round trip).
QUEUE_SECONDS = 0.1

# The emulated links' MTU: 3000 bytes. Every packet costs the CPU the same through two veth
# pairs and the shaper whatever its size, and on a small machine those cycles come out of
# the workers' compute (at 20 Mbit/s with 1500-byte frames the workers' layers ran 20-40%
# slower than alone). Larger frames cost accuracy instead: HTB sends a frame when its bucket
# is not empty and charges it afterwards, so the first message of a burst arrives up to two
# frame-times early (9000 bytes: 7 ms at 20 Mbit/s; a GPipe plan of small int8 messages
# then ran 9-10% faster than simulated, against 1.5-1.7% with 3000; measured). A WAN's
# real MTU changes nothing the simulator models but the header share, which validation
# accounts for.
MTU = 3000

# TCP payload of a full segment with timestamps (MTU - 20 IP - 32 TCP bytes).
TCP_SEGMENT_BYTES = MTU - 52

# A full Ethernet frame.
FRAME_BYTES = MTU + 14


class WanSetupError(RuntimeError):
    """A command that builds or inspects the emulated WAN failed. `detail`, when given, is
    what failed without the step that failed: the command and its message."""

    def __init__(self, what: str, detail: str | None = None):
        super().__init__(what if detail is None else f"{what}: {detail}")
        self.detail = detail if detail is not None else what


@dataclass(frozen=True)
class ShapedDirection:
    """One shaped direction of a WAN link: source cluster to destination cluster."""

    source: str
    destination: str
    rate_bps: float  # bits per second, as in the scenario
    latency_s: float = 0.0  # one-way, as in the scenario


def _run(argv: list[str], *, what: str) -> str:
    """Runs one ip/tc command; on failure raises WanSetupError naming the step."""
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WanSetupError(what, f"`{' '.join(argv)}` could not run: {error}") from error
    if completed.returncode != 0:
        stderr = " ".join(completed.stderr.split()) or "(no message)"
        raise WanSetupError(what, f"`{' '.join(argv)}` exited with status {completed.returncode}: {stderr}")
    return completed.stdout


def list_namespaces() -> list[str]:
    """Names of all network namespaces `ip netns` knows, in its order."""
    output = _run(["ip", "netns", "list"], what="listing network namespaces")
    # Lines look like "hg123-r (id: 4)" or just "hg123-r".
    return [line.split()[0] for line in output.splitlines() if line.strip()]


def _pid_is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    return True


def stale_namespaces(prefix_pattern: str = r"hg(?P<pid>\d+)") -> list[str]:
    """Namespaces left behind by crashed runs (what cleanup_stale removes).

    Only names of the shape EmulatedWan creates are considered: the prefix, then "-r"
    (router), "-<index>" (cluster) or "-probe" (shaping_probe's). When the pattern has a
    group named `pid` (the default prefix "hg<pid>" does), namespaces whose owner is still
    running are not stale, so a concurrent run is never broken. With a pattern without that
    group every match is.
    """
    name_shape = re.compile(rf"^(?:{prefix_pattern})-(?:r|\d+|{PROBE_SUFFIX})$")
    stale = []
    for name in list_namespaces():
        match = name_shape.match(name)
        if match is None:
            continue
        owner = match.groupdict().get("pid")
        if owner is not None and (int(owner) == os.getpid() or _pid_is_running(int(owner))):
            continue
        stale.append(name)
    return stale


def cleanup_stale(prefix_pattern: str = r"hg(?P<pid>\d+)") -> list[str]:
    """Removes the namespaces stale_namespaces() finds; returns the names removed."""
    removed = []
    for name in stale_namespaces(prefix_pattern):
        _run(["ip", "netns", "delete", name], what=f"removing stale namespace {name}")
        removed.append(name)
    return removed


def install_signal_cleanup(wan: "EmulatedWan"):
    """Makes SIGTERM and SIGINT remove `wan`'s namespaces, then stop the program.

    The handler closes the WAN and then raises (KeyboardInterrupt for SIGINT,
    SystemExit(128 + signal) for SIGTERM), so that the supervisor's own
    cleanup still kills the workers while the exception unwinds. A handler
    that was installed before (for example for another EmulatedWan) is called
    after ours. Returns a function that restores the previous handlers.
    """
    previous = {}

    def handle(signum, frame):
        wan.close()
        chained = previous.get(signum)
        if callable(chained):
            chained(signum, frame)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handle)

    def restore():
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


class SignalsDeferred:
    """Blocks SIGINT and SIGTERM for the duration of a cleanup, so that a second
    Ctrl-C cannot stop it half way; blocked signals are delivered afterwards."""

    SIGNALS = {signal.SIGINT, signal.SIGTERM}

    def __enter__(self):
        self.previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        return self

    def __exit__(self, *exc_info):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous_mask)
        return False


# ----- can this process build the emulated WAN? -----------------------------------------

# Linux capability numbers (include/uapi/linux/capability.h).
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21

# The probe's namespace is "hg<pid>-probe": cleanup_stale() removes it when a probe was
# killed half way (SIGKILL cannot be deferred).
PROBE_SUFFIX = "probe"

# What a Docker container needs (from Docker's documentation and its default profiles; no
# Docker on the machines this was written on): the two capabilities; AppArmor's
# docker-default profile denies the mounts `ip netns` makes even with SYS_ADMIN, and writes
# to /proc/sys/net, which Docker also mounts read-only (systempaths).
CONTAINER_HINT = (
    "in Docker: --cap-add NET_ADMIN --cap-add SYS_ADMIN --security-opt apparmor=unconfined "
    "--security-opt systempaths=unconfined, or --privileged"
)

# The steps of the probe, in order, and what each one tries.
PROBE_STEPS = {
    "root": "running as root",
    "tools": "finding `ip` and `tc` (iproute2)",
    "netns": "creating a network namespace (`ip netns add`)",
    "exec": "running a command inside it (`ip netns exec ... sysctl -w net.ipv4.ip_forward=1`)",
    "veth": "creating a veth pair in it (`ip link add ... type veth`)",
    "htb": "shaping with HTB in it (`tc qdisc/class add ... htb`, `tc filter add ... u32`)",
}


@dataclass(frozen=True)
class ShapingVerdict:
    """Whether this process can build the emulated WAN; if not, the probe step that failed
    (a key of PROBE_STEPS), what it said, and what would make it work."""

    usable: bool
    step: str | None = None
    detail: str | None = None
    remedy: str | None = None

    @property
    def reason(self) -> str | None:
        """One line for users: the step, what failed, the remedy. None when usable."""
        if self.usable:
            return None
        return f"{PROBE_STEPS[self.step]} failed: {self.detail}; to shape links, {self.remedy}"


def _effective_capabilities() -> int | None:
    """The CapEff bit mask of this process, or None where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _missing_capabilities() -> list[str]:
    capabilities = _effective_capabilities()
    if capabilities is None:
        return []
    return [name for name, bit in (("CAP_SYS_ADMIN", CAP_SYS_ADMIN), ("CAP_NET_ADMIN", CAP_NET_ADMIN))
            if not capabilities >> bit & 1]


def _remedy(step: str, detail: str) -> str:
    """What would let `step` succeed, from the capabilities this process lacks and the error."""
    missing = _missing_capabilities()
    if step == "root":
        return "run as root (sudo) with CAP_NET_ADMIN and CAP_SYS_ADMIN (" + CONTAINER_HINT + ")"
    if missing:
        return f"this process lacks {' and '.join(missing)}: grant them ({CONTAINER_HINT})"
    if step in ("netns", "exec") and "read-only" in detail.lower():
        return ("/proc/sys or /sys is mounted read-only (Docker does so): in Docker, "
                "--security-opt systempaths=unconfined, or --privileged")
    if step in ("netns", "exec"):
        return ("the capabilities are there but the mounts `ip netns` needs were refused: "
                "AppArmor, SELinux or seccomp confines this process (in Docker: --security-opt "
                "apparmor=unconfined, or --privileged)")
    if step == "veth":
        return "the kernel has no veth driver: `modprobe veth` on the host"
    return "the kernel lacks HTB or the u32 classifier: `modprobe sch_htb cls_u32` on the host"


def _remove_probe_namespace(name: str) -> str | None:
    """Deletes the probe's namespace if it exists, trying twice; a problem if it stays."""
    error = None
    for _ in range(2):
        if name not in _namespaces_or_empty():
            return None
        try:
            _run(["ip", "netns", "delete", name], what=f"removing the probe's namespace {name}")
        except WanSetupError as failure:
            error = failure
    if name not in _namespaces_or_empty():
        return None
    return f"namespace {name} could not be removed ({error}); `ip netns delete {name}` as root"


def _probe_steps(name: str) -> tuple[str, str] | None:
    """Runs the steps that need a namespace; (step, error) for the first that fails."""
    device = "hgprobe0"
    commands = [
        ("netns", ["ip", "netns", "add", name]),
        ("exec", ["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=1"]),
        # Made inside the throw-away namespace: no interface ever appears in the host's, and
        # deleting the namespace deletes the pair.
        ("veth", ["ip", "-n", name, "link", "add", device, "type", "veth", "peer", "name",
                  "hgprobe1"]),
        ("htb", ["tc", "-n", name, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb",
                 "default", "0"]),
        ("htb", ["tc", "-n", name, "class", "add", "dev", device, "parent", "1:", "classid",
                 "1:1", "htb", "rate", "1mbit", "ceil", "1mbit"]),
        ("htb", ["tc", "-n", name, "filter", "add", "dev", device, "parent", "1:", "protocol",
                 "ip", "prio", "1", "u32", "match", "ip", "src", "10.0.0.0/24", "flowid", "1:1"]),
    ]
    for step, argv in commands:
        try:
            _run(argv, what=f"probing: {PROBE_STEPS[step]}")
        except WanSetupError as error:
            return step, error.detail
    return None


def _probe() -> ShapingVerdict:
    if os.geteuid() != 0:
        step, detail = "root", f"the effective user id is {os.geteuid()}"
        return ShapingVerdict(False, step, detail, _remedy(step, detail))
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return ShapingVerdict(False, "tools", f"`{tool}` is not on PATH",
                                  "install iproute2 (apt-get install iproute2)")
    name = f"hg{os.getpid()}-{PROBE_SUFFIX}"
    # Signals wait until the namespace is gone again, so Ctrl-C cannot leave it behind.
    with SignalsDeferred():
        leftover = _remove_probe_namespace(name)  # a killed earlier probe with our pid
        failure = None if leftover else _probe_steps(name)
        leftover = leftover or _remove_probe_namespace(name)
    if leftover:
        return ShapingVerdict(False, "netns", leftover, "remove it and run again")
    if failure:
        step, detail = failure
        return ShapingVerdict(False, step, detail, _remedy(step, detail))
    return ShapingVerdict(True)


_probe_lock = threading.Lock()
_verdict: ShapingVerdict | None = None


def shaping_probe(*, fresh: bool = False) -> ShapingVerdict:
    """Can this process build the emulated WAN? Tries every kind of step EmulatedWan takes on a
    throw-away namespace ("hg<pid>-probe", removed again, signals deferred meanwhile) and says
    which failed and what would make it work. Run once per process (about 50 ms); `fresh`
    runs it again."""
    global _verdict
    with _probe_lock:
        if _verdict is None or fresh:
            _verdict = _probe()
        return _verdict


def _htb_burst_bytes(rate_bps: float) -> int:
    """Token-bucket depth for one HTB class.

    One millisecond of traffic at the class rate, and never less than one full
    frame (HTB needs a frame's worth of tokens): large enough that the kernel's
    timer never starves a 1 Gbit/s class, small enough that a 5 Mbit/s class
    lets through at most one 3 kB frame above its rate after an idle period.
    """
    one_millisecond_bytes = rate_bps / 8 / 1000
    return int(max(FRAME_BYTES, one_millisecond_bytes))


def _queue_frames(rate_bps: float) -> int:
    """Queue of a shaped class: QUEUE_SECONDS of frames at its rate, at least 16 frames."""
    return int(max(16, rate_bps / 8 * QUEUE_SECONDS / FRAME_BYTES))


def _gso_max_bytes(rate_bps: float) -> int:
    """Largest packet handed to the shaper: one millisecond at `rate_bps`, at least one
    frame, at most the 64 KiB of a GSO packet."""
    return int(min(65536, max(FRAME_BYTES, rate_bps / 8 / 1000)))


def _htb_quantum_bytes(rate_bps: float) -> int:
    """Bytes a class may send per round when siblings compete.

    Every class here has ceil == rate, so none borrows and the quantum only
    orders service between classes that are all within their rates; it is set
    explicitly because tc's default (rate / 10) warns outside [1000, 200000].
    """
    return int(min(200_000, max(FRAME_BYTES, rate_bps / 8 / 100)))


def _host_networks() -> list[ipaddress.IPv4Network]:
    """Networks the host already uses (its addresses and routes)."""
    networks = []
    for argv in (["ip", "-o", "-4", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        try:
            output = _run(argv, what="reading the host's networks")
        except WanSetupError:
            continue
        for token in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", output):
            if token.startswith("0.0.0.0"):
                continue  # an unspecified address, not a network in use
            try:
                networks.append(ipaddress.ip_network(token, strict=False))
            except ValueError:
                continue
    return networks


def _choose_subnet() -> ipaddress.IPv4Network:
    used = _host_networks()
    for candidate in SUBNET_CANDIDATES:
        network = ipaddress.ip_network(candidate)
        if not any(network.overlaps(other) for other in used):
            return network
    raise WanSetupError(
        "choosing a subnet: every candidate /16 (10.213-255, 172.16-31) overlaps a host network"
    )


class EmulatedWan:
    """Network namespaces per cluster, joined by a router that shapes WAN links.

    clusters: names, in the order that gives each its index (namespace
        "<prefix>-<index>", subnet 10.x.<index>.0/24).
    links: [{"from": "a", "to": "b", "rate_bps": bits/s from a to b,
             "reverse_rate_bps": bits/s from b to a,
             "latency_s": one-way seconds each way (optional, default 0)}]. Only
        these pairs are shaped and delayed; other pairs of clusters are routed
        unshaped, without delay.
    prefix: start of every namespace name (default "hg<pid>").
    shape: True requires shaping (raise if impossible), False never shapes,
        None (default) shapes when shaping_probe() says this process can.
    """

    def __init__(
        self,
        clusters: list[str],
        links: list[dict],
        *,
        prefix: str | None = None,
        shape: bool | None = None,
    ):
        if not clusters:
            raise ValueError("EmulatedWan: clusters is empty; give at least one cluster name")
        if len(set(clusters)) != len(clusters):
            raise ValueError(f"EmulatedWan: clusters has duplicate names: {clusters}")
        self.clusters = list(clusters)
        self.directions = self._parse_links(links)
        self.prefix = prefix if prefix is not None else f"hg{os.getpid()}"
        self._check_name_lengths()
        self.requested_shape = shape

        self.shaped = False
        self.why_not: str | None = "not started: use EmulatedWan as a context manager"
        self.router_namespace = f"{self.prefix}-r"
        self.cluster_namespaces = {
            cluster: f"{self.prefix}-{index}" for index, cluster in enumerate(self.clusters)
        }
        self.subnet: ipaddress.IPv4Network | None = None
        self._created_namespaces: list[str] = []
        self._owner_pid = os.getpid()
        self.delay_line: subprocess.Popen | None = None
        self.latency_why_not: str | None = "not started: use EmulatedWan as a context manager"

    # ----- configuration checks -------------------------------------------------

    def _parse_links(self, links: list[dict]) -> list[ShapedDirection]:
        directions = []
        seen = set()
        for index, link in enumerate(links):
            where = f"links[{index}]"
            for key in ("from", "to", "rate_bps", "reverse_rate_bps"):
                if key not in link:
                    raise ValueError(
                        f"{where}: missing key '{key}'; a link needs from, to, rate_bps "
                        "and reverse_rate_bps (bits per second)"
                    )
            source, destination = link["from"], link["to"]
            for key, cluster in (("from", source), ("to", destination)):
                if cluster not in self.clusters:
                    raise ValueError(
                        f"{where}.{key}: cluster '{cluster}' is not one of {self.clusters}"
                    )
            if source == destination:
                raise ValueError(f"{where}: 'from' and 'to' are both '{source}'; a link joins two clusters")
            for key in ("rate_bps", "reverse_rate_bps"):
                rate = link[key]
                if not isinstance(rate, (int, float)) or not rate > 0:
                    raise ValueError(f"{where}.{key}: {rate!r} is not a positive number of bits per second")
            latency = link.get("latency_s", 0.0)
            if not isinstance(latency, (int, float)) or not 0 <= latency < float("inf"):
                raise ValueError(f"{where}.latency_s: {latency!r} is not a finite number of "
                                 "seconds >= 0")
            for direction in (
                ShapedDirection(source, destination, float(link["rate_bps"]), float(latency)),
                ShapedDirection(destination, source, float(link["reverse_rate_bps"]),
                                float(latency)),
            ):
                pair = (direction.source, direction.destination)
                if pair in seen:
                    raise ValueError(f"{where}: direction {pair[0]}->{pair[1]} is given twice")
                seen.add(pair)
                directions.append(direction)
        return directions

    def _check_name_lengths(self):
        longest = f"{self.prefix}-{len(self.clusters) - 1}"
        if len(longest) > MAX_NAME_CHARS:
            raise ValueError(
                f"EmulatedWan: prefix '{self.prefix}' makes namespace names like '{longest}' "
                f"({len(longest)} characters); keep them within {MAX_NAME_CHARS}"
            )
        if len(self.clusters) > 250:
            raise ValueError(f"EmulatedWan: {len(self.clusters)} clusters; at most 250 fit one /16")

    # ----- lifecycle -------------------------------------------------------------

    def __enter__(self) -> "EmulatedWan":
        self.open()
        return self

    def __exit__(self, *exc_info) -> bool:
        self.close()
        return False

    def open(self):
        """Builds the namespaces and shaping, or falls back to unshaped loopback."""
        if self.requested_shape is False:
            self._fall_back("shaping disabled by the caller (shape=False): links are not shaped")
            return
        verdict = shaping_probe()
        if not verdict.usable:
            if self.requested_shape:
                raise WanSetupError("EmulatedWan(shape=True)", verdict.reason)
            self._fall_back(f"links are not shaped: {verdict.reason}")
            return
        self._refuse_existing_names()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException as error:
            self.close()
            if self.requested_shape or not isinstance(error, WanSetupError):
                raise
            self._fall_back(f"network namespaces failed, links are not shaped: {error}")
            return
        self.shaped = True
        self.why_not = None

    def _refuse_existing_names(self):
        """Another open WAN with our prefix, or a crashed run's leftovers: using
        them would mix two runs' links, and closing would delete theirs."""
        existing = set(list_namespaces())
        clashes = sorted(existing & {self.router_namespace, *self.cluster_namespaces.values()})
        if clashes:
            raise WanSetupError(
                f"EmulatedWan: namespaces {clashes} already exist; another EmulatedWan with "
                f"prefix '{self.prefix}' is open (pass a different prefix=) or a crashed run "
                "left them (remove them with cleanup_stale())"
            )

    def _fall_back(self, reason: str):
        self.shaped = False
        self.why_not = reason
        self.subnet = None
        self.latency_why_not = NO_DELAY_WITHOUT_NAMESPACES

    def close(self):
        """Removes every namespace this object created. Idempotent; safe to call
        from atexit and signal handlers; does nothing in a forked child."""
        if os.getpid() != self._owner_pid:
            return
        with SignalsDeferred():
            problems = []
            self._stop_delay_line()
            while self._created_namespaces:
                name = self._created_namespaces.pop()
                try:
                    _run(["ip", "netns", "delete", name], what=f"removing namespace {name}")
                except WanSetupError as error:
                    if name in _namespaces_or_empty():
                        problems.append(str(error))
            atexit.unregister(self.close)
        if problems:
            # Raising from cleanup would hide the error that caused it; a
            # leftover namespace is reported and cleanup_stale() removes it.
            print("EmulatedWan.close: " + "; ".join(problems), file=sys.stderr, flush=True)

    # ----- building --------------------------------------------------------------

    def _cluster_subnet(self, index: int) -> ipaddress.IPv4Network:
        base = int(self.subnet.network_address) + (index << 8)
        return ipaddress.ip_network((base, 24))

    def _router_address(self, index: int) -> str:
        return str(self._cluster_subnet(index).network_address + 1)

    def _cluster_address(self, index: int) -> str:
        return str(self._cluster_subnet(index).network_address + 2)

    @staticmethod
    def _router_interface(index: int) -> str:
        return f"to{index}"

    def _add_namespace(self, name: str):
        # Recorded before it exists, so that a signal arriving while `ip`
        # runs still leads close() to remove it.
        self._created_namespaces.append(name)
        _run(["ip", "netns", "add", name], what=f"creating namespace {name}")
        _run(["ip", "-n", name, "link", "set", "lo", "up"], what=f"bringing up lo in {name}")

    def _build(self):
        self.subnet = _choose_subnet()
        router = self.router_namespace
        self._add_namespace(router)
        _run(
            ["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
            what=f"enabling forwarding in {router}",
        )
        for index, cluster in enumerate(self.clusters):
            self._add_cluster(index, cluster)
        for index, cluster in enumerate(self.clusters):
            self._shape_towards(index, cluster)
        self._delay()

    def _add_cluster(self, index: int, cluster: str):
        router, namespace = self.router_namespace, self.cluster_namespaces[cluster]
        router_side = self._router_interface(index)
        where = f"cluster '{cluster}' ({namespace})"
        self._add_namespace(namespace)
        # Created from inside the router, with the peer placed straight into the
        # cluster namespace: no interface ever appears in the host namespace.
        _run(
            ["ip", "-n", router, "link", "add", router_side, "type", "veth",
             "peer", "name", CLUSTER_INTERFACE, "netns", namespace],
            what=f"{where}: creating its veth pair",
        )
        prefix_length = 24
        _run(["ip", "-n", router, "addr", "add", f"{self._router_address(index)}/{prefix_length}",
              "dev", router_side], what=f"{where}: addressing the router side")
        _run(["ip", "-n", namespace, "addr", "add", f"{self._cluster_address(index)}/{prefix_length}",
              "dev", CLUSTER_INTERFACE], what=f"{where}: addressing the cluster side")
        # Segments per packet. With segmentation offload a sender hands the shaper super-
        # packets of up to 64 KiB; HTB lets a packet go whenever its bucket is not empty and
        # charges it afterwards, so at 20 Mbit/s a 33 KB message crossed in 0.4 ms instead of
        # 14 ms (measured): averages right, every message early. Packets are capped at one
        # millisecond at the slowest rate the interface is shaped to (one segment at 20
        # Mbit/s, 64 KiB at 1 Gbit/s, where per-packet work would otherwise cost CPU time).
        for ns, device in ((router, router_side), (namespace, CLUSTER_INTERFACE)):
            _run(["ip", "-n", ns, "link", "set", device, "mtu", str(MTU)],
                 what=f"{where}: MTU {MTU} on {device}")
        leaving = [d.rate_bps for d in self.directions if d.source == cluster]
        arriving = [d.rate_bps for d in self.directions if d.destination == cluster]
        for ns, device, rates in ((namespace, CLUSTER_INTERFACE, leaving),
                                  (router, router_side, arriving)):
            if not rates:
                continue
            size = _gso_max_bytes(min(rates))
            _run(["ip", "-n", ns, "link", "set", device, "gso_max_size", str(size),
                  "gso_max_segs", str(max(1, size // TCP_SEGMENT_BYTES))],
                 what=f"{where}: packets of at most {size} bytes on {device}")
        _run(["ip", "-n", router, "link", "set", router_side, "up"], what=f"{where}: router side up")
        _run(["ip", "-n", namespace, "link", "set", CLUSTER_INTERFACE, "up"], what=f"{where}: cluster side up")
        _run(["ip", "-n", namespace, "route", "add", "default", "via", self._router_address(index)],
             what=f"{where}: default route via the router")
        # Training traffic comes in bursts separated by compute: Linux would shrink the
        # congestion window back to 10 segments after every idle RTO and slow-start each
        # burst again. Long-haul training setups switch this off; so does the emulation.
        _run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
              "net.ipv4.tcp_slow_start_after_idle=0"],
             what=f"{where}: keeping the congestion window across idle periods")

    def _class_id(self, source_index: int) -> str:
        # HTB class ids are hexadecimal; minor 0 is reserved for the qdisc.
        return f"1:{source_index + 1:x}"

    def _shape_towards(self, destination_index: int, destination: str):
        """HTB on the router's interface towards `destination`: one class per
        source cluster that has a link into it; unclassified traffic (no link,
        or the router itself) bypasses the shaper."""
        incoming = [d for d in self.directions if d.destination == destination]
        if not incoming:
            return
        router = self.router_namespace
        device = self._router_interface(destination_index)
        where = f"shaping towards '{destination}' on {router}/{device}"
        # "default 0": packets matching no filter are sent directly, unshaped.
        _run(["tc", "-n", router, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb",
              "default", "0"], what=where)
        for direction in incoming:
            self._shape_direction(router, device, where, direction, destination)

    def _shape_direction(self, router: str, device: str, where: str,
                         direction: ShapedDirection, destination: str):
        """One WAN direction: a class at the link's rate with two children that share it,
        pure TCP ACKs first, everything else after.

        Gloo keeps one TCP connection per pair of ranks and uses it both ways, so the ACKs of
        a -> b data travel b -> a behind b's own data. In one FIFO they would wait a whole
        queue (~100 ms at 20 Mbit/s) and starve the other direction; a WAN router, with its
        far higher rates and per-flow queues, delays them hardly at all, and the simulator
        treats the two directions as independent. So ACKs get priority, within the rate."""
        source_index = self.clusters.index(direction.source)
        parent = self._class_id(source_index)
        rate_bps = direction.rate_bps
        burst = str(_htb_burst_bytes(rate_bps))
        quantum = str(_htb_quantum_bytes(rate_bps))
        rate = f"{int(round(rate_bps))}bit"
        what = f"{where}: class for {direction.source}->{destination}"
        _run(["tc", "-n", router, "class", "add", "dev", device, "parent", "1:", "classid",
              parent, "htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst,
              "quantum", quantum], what=what)
        major, minor = parent.split(":")
        acks, data = f"{major}:{int(minor, 16) + 0x100:x}", f"{major}:{int(minor, 16) + 0x200:x}"
        ack_rate = f"{int(round(rate_bps * ACK_SHARE))}bit"
        data_rate = f"{int(round(rate_bps * (1 - ACK_SHARE)))}bit"
        for child, child_rate, prio in ((acks, ack_rate, "0"), (data, data_rate, "1")):
            _run(["tc", "-n", router, "class", "add", "dev", device, "parent", parent, "classid",
                  child, "htb", "rate", child_rate, "ceil", rate, "burst", burst, "cburst", burst,
                  "quantum", quantum, "prio", prio], what=what)
            # A queue of QUEUE_SECONDS, as a WAN router's buffer: the default 1000 frames are
            # 0.6 s at 20 Mbit/s (the ACKs that ride on data segments would wait as long),
            # and a 20 ms queue drops a 128 KiB message's tail at low rates.
            _run(["tc", "-n", router, "qdisc", "add", "dev", device, "parent", child, "pfifo",
                  "limit", str(_queue_frames(rate_bps))], what=f"{what}: queue")
        subnet = str(self._cluster_subnet(source_index))
        # A pure ACK: TCP, IP header without options, total length < 64, only the ACK flag.
        _run(["tc", "-n", router, "filter", "add", "dev", device, "parent", "1:", "protocol",
              "ip", "prio", "1", "u32", "match", "ip", "src", subnet,
              "match", "ip", "protocol", "6", "0xff", "match", "u8", "0x05", "0x0f", "at", "0",
              "match", "u16", "0x0000", "0xffc0", "at", "2", "match", "u8", "0x10", "0xff", "at",
              "33", "flowid", acks], what=f"{what}: filter for ACKs")
        _run(["tc", "-n", router, "filter", "add", "dev", device, "parent", "1:", "protocol",
              "ip", "prio", "2", "u32", "match", "ip", "src", subnet, "flowid", data],
             what=f"{what}: filter")

    # ----- latency ---------------------------------------------------------------

    def _delay(self):
        """Routes every direction with a latency through the delay line in the router.

        A packet from cluster i to cluster j arriving on to<i> is routed (a rule on its
        input interface and addresses) into the delay line's TUN device; the delay line
        writes it back after the latency, and from the device the main table forwards it to
        to<j>, where HTB shapes it. A delay line that cannot start leaves the links shaped
        without latency, saying why (latency_why_not)."""
        delayed = [d for d in self.directions if d.latency_s > 0]
        if not delayed:
            self.latency_why_not = "no WAN link has a latency"
            return
        try:
            self._start_delay_line(delayed)
            self._route_through_delay_line(delayed)
        except WanSetupError as error:
            self._stop_delay_line()
            self.latency_why_not = f"the delay line could not start, latency is not applied: {error}"
            print(f"EmulatedWan: {self.latency_why_not}", file=sys.stderr, flush=True)
            return
        self.latency_why_not = None

    def _start_delay_line(self, delayed: list[ShapedDirection]):
        router = self.router_namespace
        argv = ["ip", "netns", "exec", router, sys.executable,
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_line.py"),
                DELAY_DEVICE]
        for d in delayed:
            argv += [str(self._cluster_subnet(self.clusters.index(d.source))),
                     str(self._cluster_subnet(self.clusters.index(d.destination))),
                     repr(d.latency_s)]
        what = f"starting the delay line in {router}"
        try:
            # Its standard input is its lifeline: it exits when this process closes the pipe
            # or ends, however it ends.
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        except OSError as error:
            raise WanSetupError(what, f"`{' '.join(argv)}` could not run: {error}") from error
        self.delay_line = process
        ready, _, _ = select.select([process.stdout], [], [], DELAY_LINE_START_S)
        line = process.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self._stop_delay_line()
            stderr = " ".join(process.stderr.read().split())
            raise WanSetupError(what, f"`{' '.join(argv)}` did not start: "
                                      f"{stderr or 'no ready within %g s' % DELAY_LINE_START_S}")

    def _route_through_delay_line(self, delayed: list[ShapedDirection]):
        router = self.router_namespace
        where = f"delay line in {router}"
        _run(["ip", "-n", router, "link", "set", DELAY_DEVICE, "mtu", str(MTU), "txqueuelen",
              str(DELAY_QUEUE_PACKETS), "up"], what=f"{where}: bringing up {DELAY_DEVICE}")
        # Packets come back out of the device with their cluster's source address, which
        # the main table routes to another interface: strict reverse-path filtering would
        # drop them.
        for conf in ("all", DELAY_DEVICE):
            _run(["ip", "netns", "exec", router, "sysctl", "-qw",
                  f"net.ipv4.conf.{conf}.rp_filter=0"], what=f"{where}: rp_filter off on {conf}")
        _run(["ip", "-n", router, "route", "add", "default", "dev", DELAY_DEVICE, "table",
              DELAY_TABLE], what=f"{where}: its routing table")
        for d in delayed:
            source_index = self.clusters.index(d.source)
            _run(["ip", "-n", router, "rule", "add", "iif", self._router_interface(source_index),
                  "from", str(self._cluster_subnet(source_index)),
                  "to", str(self._cluster_subnet(self.clusters.index(d.destination))),
                  "table", DELAY_TABLE],
                 what=f"{where}: routing {d.source}->{d.destination} through it")

    def _stop_delay_line(self):
        """Ends the delay line (closing its lifeline, then killing it). Idempotent."""
        process, self.delay_line = self.delay_line, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def latency_note(self) -> str:
        """One line for a run's output: which way the links' latency was applied."""
        latency = self.latency()
        if latency["applied_by"] == LATENCY_NOT_APPLIED:
            return f"WAN latency not applied: {latency['why_not']}"
        each = ", ".join(f"{link} {seconds * 1e3:g} ms" for link, seconds in
                         latency["one_way_s"].items() if seconds > 0)
        return (f"WAN latency applied by a userspace delay line (no sch_netem in this kernel): "
                f"{each} one way")

    def latency(self) -> dict:
        """How the links' latency was applied: by the delay line, or not (and why)."""
        applied = self.delay_line is not None and self.latency_why_not is None
        return {
            "applied_by": LATENCY_BY_DELAY_LINE if applied else LATENCY_NOT_APPLIED,
            "why_not": None if applied else self.latency_why_not,
            "one_way_s": {f"{d.source}->{d.destination}": d.latency_s if applied else 0.0
                          for d in self.directions},
            "configured_one_way_s": {f"{d.source}->{d.destination}": d.latency_s
                                     for d in self.directions},
            "how": ("each packet of a delayed direction is held for its one-way latency by a "
                    "userspace delay line (a TUN device in the router namespace), in order, "
                    "before HTB shapes its rate; the kernel has no sch_netem" if applied else
                    "no delay is added: a link has only the veth pairs' and the queue's"),
        }

    # ----- queries ---------------------------------------------------------------

    def _index(self, cluster: str) -> int:
        try:
            return self.clusters.index(cluster)
        except ValueError:
            raise KeyError(f"cluster '{cluster}' is not one of {self.clusters}") from None

    def address(self, cluster: str) -> str:
        """The IPv4 address workers of `cluster` bind to and advertise."""
        index = self._index(cluster)
        return self._cluster_address(index) if self.shaped else "127.0.0.1"

    def interface(self, cluster: str) -> str | None:
        """The interface inside the cluster's namespace (for GLOO_SOCKET_IFNAME);
        None when unshaped."""
        self._index(cluster)
        return CLUSTER_INTERFACE if self.shaped else None

    def command_prefix(self, cluster: str) -> list[str]:
        """Prepend to a worker's argv to run it inside its cluster's namespace."""
        self._index(cluster)
        if not self.shaped:
            return []
        return ["ip", "netns", "exec", self.cluster_namespaces[cluster]]

    def counters(self) -> dict[tuple[str, str], int]:
        """Bytes each shaped direction has sent so far, keyed (from, to).

        Read from the HTB class statistics ("Sent N bytes"), so the count
        includes Ethernet, IP and TCP headers as the shaper charged them.
        """
        if not self.shaped:
            return {}
        sent = {}
        for destination_index, destination in enumerate(self.clusters):
            incoming = [d for d in self.directions if d.destination == destination]
            if not incoming:
                continue
            device = self._router_interface(destination_index)
            output = _run(["tc", "-n", self.router_namespace, "-s", "class", "show", "dev", device],
                          what=f"reading counters of {self.router_namespace}/{device}")
            bytes_by_class = _parse_htb_class_bytes(output)
            for direction in incoming:
                class_id = self._class_id(self.clusters.index(direction.source))
                if class_id not in bytes_by_class:
                    raise WanSetupError(
                        f"counters: class {class_id} ({direction.source}->{destination}) missing "
                        f"from `tc -s class show dev {device}` in {self.router_namespace}"
                    )
                sent[(direction.source, destination)] = bytes_by_class[class_id]
        return sent

    def describe(self) -> dict:
        """What this WAN is, for run reports."""
        linked = {(d.source, d.destination) for d in self.directions}
        unlinked = [
            [a, b] for a in self.clusters for b in self.clusters if a != b and (a, b) not in linked
        ]
        return {
            "shaped": self.shaped,
            "why_not": self.why_not,
            "router_namespace": self.router_namespace if self.shaped else None,
            "namespaces": {c: self.cluster_namespaces[c] for c in self.clusters} if self.shaped else {},
            "addresses": {c: self.address(c) for c in self.clusters},
            "interfaces": {c: self.interface(c) for c in self.clusters},
            "subnet": str(self.subnet) if self.subnet else None,
            "directions": [
                {
                    "from": d.source,
                    "to": d.destination,
                    "rate_bps": d.rate_bps,
                    "burst_bytes": _htb_burst_bytes(d.rate_bps),
                }
                for d in self.directions
            ],
            "unshaped_pairs": unlinked,
            "latency": self.latency(),
        }


def _namespaces_or_empty() -> list[str]:
    try:
        return list_namespaces()
    except WanSetupError:
        return []


_CLASS_LINE = re.compile(r"^class htb (\S+) ")
_SENT_LINE = re.compile(r"^\s*Sent (\d+) bytes")


def _parse_htb_class_bytes(text: str) -> dict[str, int]:
    """{"1:1": bytes sent} from `tc -s class show` text (this tc has no JSON for classes)."""
    sent = {}
    current = None
    for line in text.splitlines():
        class_match = _CLASS_LINE.match(line)
        if class_match:
            current = class_match.group(1)
            continue
        sent_match = _SENT_LINE.match(line)
        if sent_match and current is not None:
            sent[current] = int(sent_match.group(1))
            current = None
    return sent
