"""A userspace delay line: a TUN device that holds every packet of a WAN direction for that
direction's one-way latency, then hands it back to the kernel, in order.

    ip netns exec ROUTER /usr/bin/python3 delay_line.py DEVICE SOURCE DESTINATION SECONDS ...

This kernel has no sch_netem, so the emulated WAN (wan.py) routes each delayed direction
through this device inside its router namespace: a packet from SOURCE (a network, e.g.
10.213.0.0/24) to DESTINATION that arrives on the cluster's interface is routed into the
device, read here and stamped with the time it was read, written back at that time plus
SECONDS, and forwarded by the kernel to the destination's interface, whose HTB class shapes
its rate. A FIFO of constant delay followed by the shaper delivers every packet when the
shaper alone would have, plus the delay: the order and the rate are kept. Packets of no
listed direction are written back at once.

The device is opened with virtio-net headers and TCP segmentation offload, so the kernel
hands over a sender's segmentation-offload packets whole (up to 64 KiB, capped per
direction by wan.py) instead of one read per 3000-byte frame: at 1 Gbit/s that is about
2 000 reads per second rather than 42 000. Each packet is written back with its header
unchanged; nothing here parses more than the IPv4 addresses.

The script prints "ready" once the device exists, and exits when its standard input closes
(the runner that started it ended, however it ended) or on SIGTERM. Only the standard
library: it runs under whatever Python the runner has, without hgsim on its path.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import ipaddress
import os
import select
import signal
import struct
import sys
import time

# linux/if_tun.h
TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04

# sizeof(struct virtio_net_hdr) (linux/virtio_net.h), the device's default header size.
VNET_HEADER_BYTES = 10

# The largest packet the device hands over: a 64 KiB offload packet and its header.
READ_BYTES = 65536 + VNET_HEADER_BYTES + 256

# Offsets of the IPv4 source and destination addresses after the virtio-net header.
SOURCE_AT = VNET_HEADER_BYTES + 12
DESTINATION_AT = VNET_HEADER_BYTES + 16


class Direction:
    """Packets from `source` to `destination` (IPv4 networks), held `delay_s` each."""

    def __init__(self, source: str, destination: str, delay_s: float):
        self.source = ipaddress.ip_network(source)
        self.destination = ipaddress.ip_network(destination)
        self.delay_s = delay_s
        self.held: collections.deque = collections.deque()  # (release time, packet)
        self._source = (int(self.source.network_address), int(self.source.netmask))
        self._destination = (int(self.destination.network_address),
                             int(self.destination.netmask))

    def matches(self, source: int, destination: int) -> bool:
        network, mask = self._source
        if source & mask != network:
            return False
        network, mask = self._destination
        return destination & mask == network


def parse_directions(arguments: list[str]) -> list[Direction]:
    """SOURCE DESTINATION SECONDS, repeated."""
    if not arguments or len(arguments) % 3:
        raise ValueError("give SOURCE DESTINATION SECONDS for every delayed direction")
    directions = []
    for i in range(0, len(arguments), 3):
        source, destination, seconds = arguments[i:i + 3]
        delay_s = float(seconds)
        if not delay_s >= 0:
            raise ValueError(f"delay {seconds!r} of {source} -> {destination} is not >= 0 s")
        directions.append(Direction(source, destination, delay_s))
    return directions


def open_device(name: str) -> int:
    """Creates TUN device `name` in this process's network namespace; its file descriptor,
    non-blocking. The device lives as long as the descriptor."""
    if len(name.encode()) > 15:  # IFNAMSIZ - 1; the ioctl would cut it short silently
        raise OSError(errno.EINVAL, f"'{name}' is longer than 15 bytes")
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI |
                                           IFF_VNET_HDR))
    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    return fd


def direction_of(directions: list[Direction], packet: bytes) -> Direction | None:
    if len(packet) < DESTINATION_AT + 4 or packet[VNET_HEADER_BYTES] >> 4 != 4:
        return None  # not IPv4: not one of ours
    source = int.from_bytes(packet[SOURCE_AT:SOURCE_AT + 4], "big")
    destination = int.from_bytes(packet[DESTINATION_AT:DESTINATION_AT + 4], "big")
    return next((d for d in directions if d.matches(source, destination)), None)


def write(fd: int, packet: bytes):
    try:
        os.write(fd, packet)
    except (BlockingIOError, OSError):
        pass  # the kernel refused it (a full backlog): a drop, as a router's would be


def run(fd: int, directions: list[Direction], control: int):
    """Reads, holds and writes back packets until `control` (standard input) closes."""
    while True:
        heads = [d.held[0][0] for d in directions if d.held]
        timeout = max(0.0, min(heads) - time.monotonic()) if heads else None
        readable, _, _ = select.select([fd, control], [], [], timeout)
        if control in readable and not os.read(control, 4096):
            return
        if fd in readable:
            while True:
                try:
                    packet = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    break
                read_at = time.monotonic()
                direction = direction_of(directions, packet)
                if direction is None or direction.delay_s == 0:
                    write(fd, packet)
                else:
                    direction.held.append((read_at + direction.delay_s, packet))
        now = time.monotonic()
        for direction in directions:
            while direction.held and direction.held[0][0] <= now:
                write(fd, direction.held.popleft()[1])


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        directions = parse_directions(argv[1:])
    except ValueError as error:
        print(f"delay_line: {error}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        fd = open_device(argv[0])
    except OSError as error:
        print(f"delay_line: creating TUN device {argv[0]}: {error.strerror}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    run(fd, directions, sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
