"""Measures what the emulated WAN really delivers: one TCP stream through a
shaped direction versus its configured rate, and the unshaped paths for scale.

    cd runtime && sudo /usr/bin/python3 -m hgsim_runtime.wan_check

It also measures one-byte round trips through the delay line (wan.py's latency) per
configured one-way latency. The sender and receiver are small Python socket programs run
inside the cluster namespaces with `ip netns exec`; the receiver times from the first
byte to end of stream and reports payload bytes (TCP goodput), while the
shaper charges whole frames, so goodput sits a few per cent under the rate.
`timed_transfer` is also what the tests use to check the shaper.
"""

from __future__ import annotations

import json
import subprocess
import sys

from hgsim_runtime.wan import EmulatedWan

PYTHON = "/usr/bin/python3"
CHUNK_BYTES = 64 * 1024

# The start of every listener: listens on an ephemeral port of the address it is given, says
# which, and accepts one connection.
_ACCEPT = r"""
import json, socket, sys, time
listener = socket.socket()
listener.bind((sys.argv[1], 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
connection, _ = listener.accept()
"""

# Counts bytes until EOF.
_RECEIVER = _ACCEPT + r"""
received = 0
first = None
while True:
    data = connection.recv(1 << 20)
    if not data:
        break
    if first is None:
        first = time.monotonic()
    received += len(data)
end = time.monotonic()
print(json.dumps({"bytes": received, "seconds": end - (first or end)}), flush=True)
"""

# Sends either a fixed number of bytes or for a fixed time, then closes.
_SENDER = r"""
import socket, sys, time
address, port, total_bytes, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
chunk = b"x" * (64 * 1024)
connection = socket.create_connection((address, port))
sent = 0
deadline = time.monotonic() + seconds
while (sent < total_bytes) if total_bytes > 0 else (time.monotonic() < deadline):
    piece = chunk if total_bytes <= 0 else chunk[: min(len(chunk), total_bytes - sent)]
    connection.sendall(piece)
    sent += len(piece)
connection.shutdown(socket.SHUT_WR)
connection.recv(1)  # wait for the receiver to close: all bytes arrived
connection.close()
"""

# Echoes every byte it reads back at once, until EOF.
_ECHO = _ACCEPT + r"""
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = connection.recv(1 << 16)
    if not data:
        break
    connection.sendall(data)
"""

# Sends one byte, waits for its echo, `rounds` times; prints each round trip in seconds.
_PING = r"""
import json, socket, sys, time
address, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
connection = socket.create_connection((address, port))
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(rounds):
    start = time.monotonic()
    connection.sendall(b"x")
    if connection.recv(1) != b"x":
        sys.exit("the echo closed the connection")
    times.append(time.monotonic() - start)
connection.close()
print(json.dumps(times), flush=True)
"""


def _converse(wan: EmulatedWan, listener: str, destination: str, client: str, source: str,
              arguments: list[str], what: str) -> tuple[str, str]:
    """Runs the `listener` script in `destination`'s namespace on its address (it prints its
    port first), then the `client` script in `source`'s with the address, the port and
    `arguments`; returns what the client printed and what the listener printed after its
    port, once both have ended."""
    server = subprocess.Popen(
        wan.command_prefix(destination) + [PYTHON, "-c", listener, wan.address(destination)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = server.stdout.readline().strip()
        if not port:
            raise RuntimeError(f"{what}: the listener in '{destination}' did not start")
        said = subprocess.run(
            wan.command_prefix(source)
            + [PYTHON, "-c", client, wan.address(destination), port, *arguments],
            check=True, timeout=60, stdout=subprocess.PIPE, text=True,
        ).stdout
        heard = server.stdout.read()
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return said, heard


def round_trips(wan: EmulatedWan, source: str, destination: str, *, rounds: int = 20) -> list[float]:
    """Seconds of `rounds` round trips of one byte over TCP (no Nagle) from a process in
    `source`'s namespace to an echo in `destination`'s and back: the two directions' one-way
    latencies plus the path's own (veth pairs, two Python processes), without queueing."""
    said, _ = _converse(wan, _ECHO, destination, _PING, source, [str(rounds)], "round_trips")
    return json.loads(said)


def timed_transfer(
    wan: EmulatedWan,
    source: str,
    destination: str,
    *,
    total_bytes: int = 0,
    seconds: float = 0.0,
    source_runs_in: str | None = None,
) -> tuple[int, float]:
    """One TCP stream from a process in `source`'s namespace to a listener on
    `destination`'s address (run in `destination`'s namespace). Sends
    `total_bytes`, or for `seconds` when total_bytes is 0. Returns (payload
    bytes received, seconds from first byte to end of stream)."""
    if (total_bytes > 0) == (seconds > 0):
        raise ValueError("timed_transfer: give exactly one of total_bytes and seconds")
    _, heard = _converse(wan, _RECEIVER, destination, _SENDER, source_runs_in or source,
                         [str(total_bytes), str(seconds)], "timed_transfer")
    result = json.loads(heard)
    return result["bytes"], result["seconds"]


# A full-size TCP segment carries 1448 payload bytes (MSS 1460 less 12 bytes
# of timestamp option) in a 1514-byte Ethernet frame; HTB charges the frame.
EXPECTED_GOODPUT_FRACTION = 1448 / 1514


def main() -> int:
    seconds = 2.0
    rows = []  # (path, configured bits/s or None, goodput bits/s, frame bits/s or None)
    for rate_bps in (5e6, 20e6, 200e6, 1000e6):
        links = [{"from": "a", "to": "b", "rate_bps": rate_bps, "reverse_rate_bps": rate_bps}]
        with EmulatedWan(["a", "b", "c"], links, prefix="hgcheck") as wan:
            if not wan.shaped:
                print(f"cannot measure: {wan.why_not}")
                return 1
            received, elapsed = timed_transfer(wan, "a", "b", seconds=seconds)
            frame_bytes = wan.counters()[("a", "b")]
            rows.append(("a->b shaped", rate_bps, received * 8 / elapsed, frame_bytes * 8 / elapsed))
            if rate_bps == 20e6:
                received, elapsed = timed_transfer(wan, "a", "c", seconds=seconds)
                rows.append(("a->c no link: routed, unshaped", None, received * 8 / elapsed, None))
                received, elapsed = timed_transfer(wan, "a", "a", seconds=seconds)
                rows.append(("a->a inside one namespace", None, received * 8 / elapsed, None))
    print(f"{'path':<32} {'configured':>11} {'goodput':>11} {'goodput/rate':>13} {'frames/rate':>12}")
    for label, configured_bps, goodput_bps, frame_bps in rows:
        configured = f"{configured_bps / 1e6:.0f} Mbit/s" if configured_bps else "-"
        goodput_ratio = f"{goodput_bps / configured_bps:.3f}" if configured_bps else "-"
        frame_ratio = f"{frame_bps / configured_bps:.3f}" if configured_bps else "-"
        print(f"{label:<32} {configured:>11} {goodput_bps / 1e6:>6.1f} Mbit/s {goodput_ratio:>13} {frame_ratio:>12}")
    print(
        f"one TCP stream, Python sockets, {seconds:g} s each, timed at the receiver from first byte to end;\n"
        f"goodput = payload bytes; frames = bytes the shaper charged (Ethernet + IP + TCP headers);\n"
        f"a full-size segment's payload is {EXPECTED_GOODPUT_FRACTION:.3f} of its frame."
    )
    return latency_table()


def latency_table(rate_bps: float = 20e6, rounds: int = 20) -> int:
    """One-byte round trips and one stream's goodput through the delay line, per latency."""
    print(f"\n{'one-way latency':>15} {'applied by':>11} {'RTT min':>9} {'RTT median':>11} "
          f"{'goodput/rate':>13}   ({rate_bps / 1e6:g} Mbit/s, {rounds} round trips)")
    for latency_s in (0.0, 0.015, 0.030):
        links = [{"from": "a", "to": "b", "rate_bps": rate_bps, "reverse_rate_bps": rate_bps,
                  "latency_s": latency_s}]
        with EmulatedWan(["a", "b"], links, prefix="hgcheck") as wan:
            if not wan.shaped:
                print(f"cannot measure: {wan.why_not}")
                return 1
            times = sorted(round_trips(wan, "a", "b", rounds=rounds))
            received, elapsed = timed_transfer(wan, "a", "b", seconds=3.0)
            applied = wan.describe()["latency"]["applied_by"]
        print(f"{latency_s * 1e3:>12g} ms {applied:>11} {times[0] * 1e3:>6.2f} ms "
              f"{times[len(times) // 2] * 1e3:>8.2f} ms {received * 8 / elapsed / rate_bps:>13.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
