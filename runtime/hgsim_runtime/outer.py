"""DiLoCo's outer synchronisation in a live worker (`strategy.outer_sync`).

Islands are the plan's pipelines (each with its replicas), as in the simulator
(sim/outer_sync.hpp). Inside an island gradients are all-reduced every step as without outer
sync (worker.py restricts the gradient rings to the island); across islands, at the steps the
simulator's schedule gives (`hgsim.outer_sync_events`, sim/iterations.hpp), each fragment's
pseudo-gradient (its parameters at the last outer sync minus its parameters now) is averaged
over the islands and applied by the outer optimizer:

    g = mean over islands of (snapshot - parameters)
    v = mu * v + g                       (v starts at 0)
    snapshot = snapshot - lr * (g + mu * v)
    parameters = snapshot                (at the step the update applies)

which is PyTorch's SGD with nesterov=True, dampening 0, no weight decay, on the snapshot with
the pseudo-gradient as its gradient: the outer optimizer of DiLoCo (Douillard et al. 2023,
arXiv:2311.08105, Algorithm 1, "OuterOpt = Nesterov"). With one island and lr 1, mu 0 it
leaves the parameters as they are.

Streaming DiLoCo (fragments F > 1, Douillard et al. 2025, arXiv:2501.18512): fragment f is
the layers `hgsim.fragment_layers` gives (embeddings with fragment 0, final norm and head with
the last). Its pseudo-gradient is taken on the main thread after the step the schedule says
(`start_after`); its all-reduce and outer step run on the worker's sync thread while the main
thread goes on with the next `overlap_steps` inner steps, as the simulator's window phase
plays them side by side (sim/iterations.hpp). After the step where the simulator has the
transfer arrive (`applies_after`) the main thread waits for it (the exposed part, recorded as
`exposed_s` and the span "outer sync wait fragment F"; the simulator's outer_sync.exposed_s
is the same wait, how long the window ran past the end of its steps) and the new value
replaces the island's parameters of the fragment: the paper's merge with mixing factor
alpha = 0, so the inner steps taken meanwhile on that fragment are discarded. Blocking DiLoCo
(`applies_after == start_after`) syncs on the main thread, all of it exposed.

Threads. One sync thread per worker runs the transfers one after the other in the order they
start, on the OuterSync's one Wire (its codecs' error feedback and byte counters are touched
by that thread only while a transfer is in flight, and by the main thread only in blocking
DiLoCo, when no transfer is in flight). One thread rather than one per fragment: the
simulator never has two fragments in flight (a window's sync ends before the next phase
starts, and `overlap_steps` <= H / F), every worker then posts the ring's messages in the
same order, and a schedule that did overlap two would queue the second rather than split the
WAN between them. The pseudo-gradient is taken on the main thread and the parameters set
there, so the numbers do not depend on the timing: a run ends with the same weights however
the transfers and the steps interleave. The sync thread sends on the same process groups as
the main thread (comm.Directions) with its own tags (TAG_OUTER), between ranks of different
islands, which exchange nothing else; gloo (torch 1.13) delivered 16 MB messages from a
second thread correctly while the main thread exchanged small ones on the same groups, and
its Work.wait releases the GIL (a computing main thread kept its speed). The main thread's
`comm.ACTIVITY` is its own; the sync thread reports into `OuterSync.activity`, which the
watchdog follows while the main thread waits for it. trace.Recorder takes a lock.

The all-reduce follows the simulator's lowering shard by shard (stage, tensor-parallel rank):
lane j (the j-th holder in every island, L = the fewest holders of an island) ring
all-reduces 1/L of the shard across the islands through the WAN, coded with the outer-sync
codec (an hgsim.TensorCodec per transfer, with error feedback where the codec keeps it; a
coded all-gather hop keeps the decoded value on the sender, so every island ends with
bit-identical numbers), then the holders of each island all-gather the L reduced pieces.
"""

from __future__ import annotations

import queue
import threading

import hgsim
import torch

from . import comm
from .comm import ACTIVITY, TAG_KIND, Wire, now

TAG_OUTER = 4


def spec_of(plan: dict) -> dict | None:
    """The job's outer-sync settings from the plan (None without outer sync)."""
    o = plan.get("outer_sync", "none")
    if not isinstance(o, dict) or o.get("method", "none") == "none":
        return None
    fragments, overlap = int(o.get("fragments", 1)), int(o.get("overlap_steps", 1))
    return {"method": o["method"], "inner_steps": int(o["inner_steps"]),
            "fragments": fragments, "overlap_steps": overlap,
            "codec": o.get("codec", "none"), "outer_lr": float(o.get("outer_lr", 0.7)),
            "outer_momentum": float(o.get("outer_momentum", 0.9))}


def events_of(spec: dict, steps: int) -> list[dict]:
    """The simulator's schedule of the outer syncs in `steps` steps."""
    return hgsim.outer_sync_events(steps, spec["inner_steps"], spec["fragments"],
                                   spec["overlap_steps"])


class Transfer:
    """One fragment's all-reduce and outer step, from its start to the step it applies."""

    def __init__(self, event: dict, g: torch.Tensor, record: dict):
        self.event, self.g, self.record = event, g, record
        self.done = threading.Event()
        self.values: torch.Tensor | None = None  # the fragment's new parameters
        self.error: BaseException | None = None


class OuterSync:
    """The outer-sync state of one worker: per fragment its parameters, snapshot, momentum;
    the transfers in flight, and the thread that runs them."""

    def __init__(self, worker, spec: dict):
        self.w, self.spec = worker, spec
        self.events = events_of(spec, worker.job["steps"])
        me, roles = worker.me, worker.roles
        self.islands = len(worker.job["pipelines"])
        # The sync thread's own activity: ACTIVITY is the main thread's alone.
        self.activity = comm.Activity()
        self.wire = Wire(worker.rank, worker.cluster_of, spec["codec"], worker.cfg.hidden,
                         worker.recorder, self.activity)
        # The holders of this rank's shard (stage, tp rank) in every island, in placement
        # order (replica, dp rank): sim/outer_sync.cpp `outer_all_reduce`.
        self.by_island = [[r["rank"] for r in roles if r["pipeline"] == i
                           and r["stage"] == me["stage"] and r["tp"] == me["tp"]]
                          for i in range(self.islands)]
        stage_first = sum(s["layers"] for s in worker.stages[: me["stage"]])
        stage_end = stage_first + worker.stage["layers"]
        self.fragments = []
        for f in range(spec["fragments"]):
            a, b = hgsim.fragment_layers(worker.cfg.layers, f, spec["fragments"])
            lo, hi = max(a, stage_first), min(b, stage_end)
            params = worker.module.segment_parameters(lo, hi - lo) if hi > lo else []
            flat = self.flat(params)
            self.fragments.append({"params": params, "snapshot": flat,
                                   "momentum": torch.zeros_like(flat), "layers": (a, b)})
        self.in_flight: dict[int, Transfer] = {}  # by fragment
        self.queue: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None  # started by the first streaming sync
        self.count = 0

    @staticmethod
    def flat(params) -> torch.Tensor:
        if not params:
            return torch.zeros(0)
        return torch.cat([p.detach().reshape(-1) for p in params]).clone()

    def set_params(self, fragment: dict, values: torch.Tensor):
        at = 0
        with torch.no_grad():
            for p in fragment["params"]:
                n = p.numel()
                p.copy_(values[at: at + n].view_as(p))
                at += n

    # ---- on the main thread -------------------------------------------------------------

    def after_step(self, done: int) -> list[dict]:
        """Runs what the schedule has after `done` steps (0: before the first): the updates
        that apply now (waiting for their transfers), then the all-reduces that start now.
        Returns one record per all-reduce finished: a blocking one at once, a streaming one
        at the step its update applies."""
        records = []
        for event in self.events:
            if event["applies_after"] == done and event["start_after"] < done:
                records.append(self.apply(event["fragment"]))
        for event in self.events:
            if event["start_after"] == done:
                record = self.start(event)
                if record is not None:
                    records.append(record)
        return records

    def start(self, event: dict) -> dict | None:
        """Takes the fragment's pseudo-gradient now, on the main thread (so the numbers do not
        depend on the timing); blocking DiLoCo then syncs it here (returns its record),
        streaming hands it to the sync thread (returns None)."""
        f = event["fragment"]
        if f in self.in_flight:
            raise RuntimeError(f"outer sync of fragment {f} after step {event['start_after']}: "
                               "the fragment's previous sync has not applied yet (the "
                               "schedule, hgsim.outer_sync_events, never does this)")
        frag = self.fragments[f]
        ACTIVITY.set(f"outer sync fragment {f}", via=self.activity)
        start = now()
        g = frag["snapshot"] - self.flat(frag["params"])
        transfer = Transfer(event, g, {"fragment": f, "start_after": event["start_after"],
                                       "applies_after": event["applies_after"],
                                       "start": start, "values": int(g.numel())})
        if event["applies_after"] == event["start_after"]:
            self.run_transfer(transfer)
            self.set_params(frag, transfer.values)
            transfer.record["exposed_s"] = now() - start
            transfer.record["wait_start"] = start
            return transfer.record
        if self.thread is None:
            self.thread = threading.Thread(target=self.serve, name="outer sync", daemon=True)
            self.thread.start()
        self.in_flight[f] = transfer
        self.queue.put(transfer)
        return None

    def apply(self, f: int) -> dict:
        """Waits for fragment f's transfer (the exposed part of the sync) and sets the
        fragment's parameters to its result."""
        transfer = self.in_flight.pop(f)
        self.wait(transfer)
        self.set_params(self.fragments[f], transfer.values)
        return transfer.record

    def wait(self, transfer: Transfer):
        f = transfer.event["fragment"]
        ACTIVITY.set(f"outer sync wait fragment {f}", via=self.activity)
        t0 = now()
        transfer.done.wait()
        t1 = now()
        if transfer.error is not None:
            raise RuntimeError(f"outer sync of fragment {f} (started after step "
                               f"{transfer.event['start_after']}) failed on the sync thread: "
                               f"{transfer.error}") from transfer.error
        self.w.recorder.span(f"outer sync wait fragment {f}", "wait", 0, t0, t1)
        transfer.record["exposed_s"] = t1 - t0
        transfer.record["wait_start"] = t0

    def finish(self) -> list[dict]:
        """After the last step: joins the transfers still in flight and stops the sync
        thread. The simulator has none (phase_order plays an unfinished last round as inner
        steps only, so every window ends inside the run); one would have its update dropped,
        as the run ends before the step it applies after."""
        records = []
        for f in sorted(self.in_flight):
            transfer = self.in_flight.pop(f)
            self.wait(transfer)
            records.append(dict(transfer.record, applied=False))
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None
        return records

    # ---- on the sync thread (or the main thread, blocking) --------------------------------

    def serve(self):
        """The sync thread: runs the transfers one after the other, in the order they
        started (every worker the same), until finish() sends None."""
        while True:
            transfer = self.queue.get()
            if transfer is None:
                return
            try:
                self.run_transfer(transfer)
            except BaseException as e:  # handed to the main thread, which raises it
                transfer.error = e
            finally:
                self.activity.set("idle")
                transfer.done.set()

    def run_transfer(self, transfer: Transfer):
        """The fragment's all-reduce across islands and its outer optimizer step; only this
        touches the fragment's snapshot and momentum, and the wire, while it runs."""
        f = transfer.event["fragment"]
        frag = self.fragments[f]
        s = self.w.me["stage"]
        raw0, wire0 = self.wire.wan_raw_bytes, self.wire.wan_wire_bytes
        g = transfer.g
        if g.numel():
            self.all_reduce(g, TAG_OUTER * TAG_KIND + (f % 900) * 1000, ("outer", f),
                            f"outer sync fragment {f} stage {s}"
                            + (f" tp {self.w.me['tp']}" if self.w.stage["tp"] > 1 else ""))
        t0 = now()
        g /= self.islands
        lr, mu = self.spec["outer_lr"], self.spec["outer_momentum"]
        frag["momentum"].mul_(mu).add_(g)
        frag["snapshot"] -= lr * (g + mu * frag["momentum"])
        transfer.values = frag["snapshot"].clone()
        end = now()
        self.w.recorder.span(f"outer optimizer fragment {f} stage {s}", "optimizer", 0, t0, end)
        self.count += 1
        transfer.record.update(end=end, wan_raw_bytes=self.wire.wan_raw_bytes - raw0,
                               wan_wire_bytes=self.wire.wan_wire_bytes - wire0)

    def all_reduce(self, buffer: torch.Tensor, tag: int, key, label: str):
        """Sum of `buffer` over the islands, in place, on every holder of this shard."""
        lanes, across, mine, carried = comm.lane_plan(self.by_island, self.w.rank)
        lane_pieces = comm.intervals(buffer.numel(), lanes)
        for lane in carried[mine.index(self.w.rank)]:
            a0, a1 = lane_pieces[lane]
            comm.ring_all_reduce(self.wire, buffer[a0:a1], across[lane], tag,
                                 (key, "lane", lane), f"{label} lane {lane}")
        if len(mine) > 1:
            pieces = [(lane_pieces[c[0]][0], lane_pieces[c[-1]][1]) if c else (0, 0)
                      for c in carried]
            comm.ring_all_gather(self.wire, buffer, mine, pieces, tag + 400, (key, "gather"),
                                 f"{label} gather")
