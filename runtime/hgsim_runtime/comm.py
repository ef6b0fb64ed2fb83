"""Point-to-point traffic of a live worker: resharding between stages, rings, WAN codecs.

Everything goes over torch.distributed point-to-point messages on the default group, so
that each transfer can be coded where it crosses the WAN, exactly where the simulator codes
it (sim/collectives.hpp `Sender::send`): encode on the sender, decode on the receiver. Tags
keep messages between the same two ranks apart.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import hgsim

from .trace import Recorder

# Message tags: kind * TAG_KIND + detail (4 is outer.py's TAG_OUTER).
TAG_KIND = 1_000_000
TAG_ACTIVATIONS, TAG_GRADIENTS, TAG_RING = 1, 2, 3
TAG_TENSOR_PARALLEL = 5  # the collectives inside a stage (model.TensorParallel)


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def intervals(total: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) of `parts` near-equal consecutive pieces of `total` elements."""
    base, extra = divmod(total, parts)
    out, at = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((at, at + n))
        at += n
    return out


def codec_shape(elements: int, columns: int) -> list[int]:
    """The shape a WAN codec sees: rows of the hidden size, the last one zero-padded (the
    simulator's rule, compress::wan_codec_shape through _hgsim)."""
    return hgsim._hgsim.codec_shape(elements, columns)


def padded(flat: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """`flat` with zeros after it up to the codec's shape (itself when it fills it)."""
    size = shape[0] * shape[1]
    if flat.numel() == size:
        return flat
    out = torch.zeros(size, dtype=flat.dtype)
    out[: flat.numel()] = flat
    return out


class Activity:
    """What a thread of a worker is doing, for the watchdog that reports hangs: a
    description and the rank it waits for (None while computing). `ACTIVITY` is the main
    thread's and only the main thread sets it; a thread the main thread waits for (the
    outer-sync thread, outer.py) has its own, named as `via` while the main thread waits."""

    def __init__(self):
        self.since, self.what, self.peer, self.via = now(), "starting", None, None

    def set(self, what: str, peer: int | None = None, via: "Activity | None" = None):
        self.since, self.what, self.peer, self.via = now(), what, peer, via

    def describe(self) -> tuple[float, str, int | None]:
        """Since when the thread does what (the later of its own change and its `via`'s),
        what, and the rank it waits for (through `via`)."""
        if self.via is None:
            return self.since, self.what, self.peer
        since, what, peer = self.via.describe()
        return max(self.since, since), f"{self.what} ({what})", peer


ACTIVITY = Activity()


class Directions:
    """One process group per direction of every pair: messages from a lower to a higher
    rank go on `up`, the others on `down`. Gloo keeps one TCP connection per pair and group;
    sending both ways at once on one connection got about half of each direction of a shaped
    link (validation/duplex.py), while the simulator, and a router, treat the two directions
    as independent. Every rank must create them, in the same order, after
    init_process_group."""

    up = None
    down = None

    @classmethod
    def create(cls):
        world = list(range(dist.get_world_size()))
        cls.up = dist.new_group(world)
        cls.down = dist.new_group(world)

    @classmethod
    def group(cls, sender: int, receiver: int):
        return cls.up if sender < receiver else cls.down


class Wire:
    """Sends and receives flat fp32 tensors between ranks, coding the ones that cross the WAN.

    `codec` is the scenario's codec for this traffic class (None or "none": send raw fp32).
    Error-feedback state lives in one hgsim.TensorCodec per `key` (a transfer that repeats
    every step with the same shape). A wire belongs to one thread at a time; `activity` is
    that thread's (ACTIVITY: the main thread's).
    """

    def __init__(self, me: int, cluster_of: list[str], codec, columns: int, recorder: Recorder,
                 activity: Activity = ACTIVITY):
        self.me, self.cluster_of, self.columns = me, cluster_of, columns
        self.activity = activity
        self.codec = None if codec in (None, "none") or (
            isinstance(codec, dict) and codec.get("codec", "none") == "none") else codec
        self.recorder = recorder
        self.codecs: dict = {}
        self.pending: list = []  # (work, span index) of sends not known to be done
        self.wan_raw_bytes = 0
        self.wan_wire_bytes = 0
        self.sent_bytes = 0  # every byte this wire sent, WAN or not

    def crosses_wan(self, peer: int) -> bool:
        return self.cluster_of[peer] != self.cluster_of[self.me]

    def coded(self, peer: int) -> bool:
        return self.codec is not None and self.crosses_wan(peer)

    def _tensor_codec(self, key, elements: int):
        codec = self.codecs.get(key)
        if codec is None:
            codec = hgsim.TensorCodec(self.codec, codec_shape(elements, self.columns))
            self.codecs[key] = codec
        return codec

    def encode(self, key, flat: torch.Tensor, label: str) -> torch.Tensor:
        t0 = now()
        codec = self._tensor_codec(key, flat.numel())
        encoded = torch.from_numpy(codec.encode(padded(flat, list(codec.shape))))
        self.recorder.span(f"encode {label}", "codec", 0, t0, now())
        return encoded

    def decode(self, encoded: torch.Tensor, out: torch.Tensor, label: str) -> torch.Tensor:
        t0 = now()
        shape = codec_shape(out.numel(), self.columns)
        if shape[0] * shape[1] == out.numel():
            hgsim.decode(encoded.numpy(), out=out)
        else:
            whole = torch.empty(shape[0] * shape[1], dtype=torch.float32)
            hgsim.decode(encoded.numpy(), out=whole)
            out.copy_(whole[: out.numel()])
        self.recorder.span(f"decode {label}", "codec", 0, t0, now())
        return out

    def send(self, flat: torch.Tensor, peer: int, tag: int, key, label: str, category: str):
        """Starts sending `flat` (contiguous fp32) to `peer`, coded where it crosses the WAN;
        returns at once."""
        payload = flat.contiguous()
        if self.coded(peer):
            payload = self.encode(key, payload, label)
        self.send_payload(payload, flat.numel(), peer, tag, label, category)

    def send_payload(self, payload: torch.Tensor, values: int, peer: int, tag: int, label: str,
                     category: str):
        """Starts sending `payload` as it is (raw fp32, or already encoded) for `values` fp32
        values, counting its WAN bytes; returns at once."""
        nbytes = payload.numel() * payload.element_size()
        self.sent_bytes += nbytes
        if self.crosses_wan(peer):
            self.wan_raw_bytes += values * 4
            self.wan_wire_bytes += nbytes
        t0 = now()
        work = dist.isend(payload, peer, tag=tag, group=Directions.group(self.me, peer))
        args = {"bytes": nbytes, "to": peer}
        self.pending.append((work, self.recorder.open_span(label, category, 1, t0, args), payload))

    def post_recv(self, out: torch.Tensor, peer: int, tag: int, label: str) -> tuple:
        """Posts a receive into the contiguous fp32 tensor `out` and returns at once. Gloo
        sends only once the receiver has posted (a rendezvous), so posting early lets a
        transfer run while this rank computes, as the simulator's transfers do."""
        buffer = out
        if self.coded(peer):
            size = hgsim.encoded_bytes(self.codec, codec_shape(out.numel(), self.columns))
            buffer = torch.empty(size, dtype=torch.uint8)
        return (dist.irecv(buffer, peer, tag=tag, group=Directions.group(peer, self.me)),
                buffer, out, peer, label)

    def wait_recv(self, posted: tuple, category: str) -> torch.Tensor:
        """Waits for a posted receive (decoding it if it was coded)."""
        work, buffer, out, peer, label = posted
        t0 = now()
        self.activity.set(f"receiving {label}", peer)
        work.wait()
        nbytes = buffer.numel() * buffer.element_size()
        self.recorder.span(label, category, 1, t0, now(), {"bytes": nbytes, "from": peer})
        if buffer is not out:
            self.decode(buffer, out, label)
        return out

    def recv(self, out: torch.Tensor, peer: int, tag: int, label: str, category: str):
        """Receives into the contiguous fp32 tensor `out` from `peer` (decoding if coded)."""
        return self.wait_recv(self.post_recv(out, peer, tag, label), category)

    def poll(self):
        """Closes the spans of sends that have finished."""
        still = []
        for work, span, payload in self.pending:
            if work.is_completed():
                self.recorder.close_span(span, now())
            else:
                still.append((work, span, payload))
        self.pending = still

    def drain(self):
        """Waits for every send this wire started."""
        for work, span, _ in self.pending:
            work.wait()
            self.recorder.close_span(span, now())
        self.pending = []


def ring_reduce_scatter(wire: Wire, buffer: torch.Tensor, members: list[int], pieces,
                        tag: int, key, label: str):
    """Textbook ring reduce-scatter over `members` (in ring order): after k-1 steps member i
    holds the sum of piece i. `pieces` are [start, end) per member (some may be empty)."""
    k = len(members)
    i = members.index(wire.me)
    nxt, prv = members[(i + 1) % k], members[(i - 1) % k]
    for step in range(k - 1):
        s0, s1 = pieces[(i - step - 1) % k]
        r0, r1 = pieces[(i - step - 2) % k]
        incoming = torch.empty(r1 - r0)
        if s1 > s0 or r1 > r0:
            if s1 > s0:
                wire.send(buffer[s0:s1].clone(), nxt, tag + step, (key, "rs", step), label,
                          "dp_comm")
            if r1 > r0:
                wire.recv(incoming, prv, tag + step, label, "dp_comm")
                buffer[r0:r1] += incoming
    wire.drain()


def ring_all_gather(wire: Wire, buffer: torch.Tensor, members: list[int], pieces, tag: int, key,
                    label: str):
    """Textbook ring all-gather: member i starts with piece i; after k-1 steps all hold all.

    A coded hop changes what it carries; the sender keeps the decoded value itself so that
    every member ends with identical numbers (replicas must not drift apart)."""
    k = len(members)
    i = members.index(wire.me)
    nxt, prv = members[(i + 1) % k], members[(i - 1) % k]
    for step in range(k - 1):
        s0, s1 = pieces[(i - step) % k]
        r0, r1 = pieces[(i - step - 1) % k]
        if s1 > s0:
            piece = buffer[s0:s1].clone()
            if wire.coded(nxt):
                encoded = wire.encode((key, "ag", step), piece, label)
                wire.decode(encoded, buffer[s0:s1], label)  # what the receiver will hold
                wire.send_payload(encoded, piece.numel(), nxt, tag + 100 + step, label,
                                  "dp_comm")
            else:
                wire.send(piece, nxt, tag + 100 + step, None, label, "dp_comm")
        if r1 > r0:
            wire.recv(buffer[r0:r1], prv, tag + 100 + step, label, "dp_comm")
    wire.drain()


def ring_all_reduce(wire: Wire, buffer: torch.Tensor, members: list[int], tag: int, key,
                    label: str):
    if len(members) < 2:
        return
    pieces = intervals(buffer.numel(), len(members))
    ring_reduce_scatter(wire, buffer, members, pieces, tag, key, label)
    ring_all_gather(wire, buffer, members, pieces, tag, key, label)


def lane_plan(by_cluster: list[list[int]], me: int):
    """The hierarchical all-reduce's lanes as the simulator lays them out (one rule:
    sim::hierarchical_lanes and hierarchical_lane_member, through the module): the lane count,
    the members that run each lane (one per cluster), and `me`'s cluster with, per member of
    it, the consecutive lanes it carries."""
    sizes = [len(c) for c in by_cluster]
    lanes = hgsim._hgsim.hierarchical_lanes(sizes)
    across = [[c[hgsim._hgsim.hierarchical_lane_member(j, lanes, len(c))] for c in by_cluster]
              for j in range(lanes)]
    mine = next(c for c in by_cluster if me in c)
    carried = [[j for j in range(lanes)
                if hgsim._hgsim.hierarchical_lane_member(j, lanes, len(mine)) == m]
               for m in range(len(mine))]
    return lanes, across, mine, carried


def hierarchical_all_reduce(wire: Wire, buffer: torch.Tensor, by_cluster: list[list[int]],
                            tag: int, key, label: str):
    """Reduce-scatter inside each cluster onto its members' lanes (one lane per member of the
    largest cluster; a smaller cluster's member carries several), ring all-reduce of each
    lane's piece across clusters (the only WAN traffic), all-gather inside each cluster: the
    simulator's hierarchical_all_reduce."""
    lanes, across, mine, carried = lane_plan(by_cluster, wire.me)
    lane_pieces = intervals(buffer.numel(), lanes)
    # A member's piece: its lanes' pieces, which are consecutive.
    pieces = [(lane_pieces[c[0]][0], lane_pieces[c[-1]][1]) if c else (0, 0) for c in carried]
    if len(mine) > 1:
        ring_reduce_scatter(wire, buffer, mine, pieces, tag, (key, "intra"), label + " intra")
    for lane in carried[mine.index(wire.me)]:
        a0, a1 = lane_pieces[lane]
        ring_all_reduce(wire, buffer[a0:a1], across[lane], tag + 200,
                        (key, "lane", lane), label + " inter")
    if len(mine) > 1:
        ring_all_gather(wire, buffer, mine, pieces, tag + 400, (key, "intra"), label + " intra")