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
the last). Its pseudo-gradient is taken after the step the schedule says (`start_after`) and
all-reduced there; its new value replaces the island's parameters of the fragment after the
step where the simulator has the transfer arrive (`applies_after`, `overlap_steps` later):
the paper's merge with mixing factor alpha = 0, so the inner steps taken meanwhile on that
fragment are discarded. The live worker does the transfer at `start_after` without
overlapping it with the following steps (one thread); the numbers are those of streaming
DiLoCo, the timing is that of a blocking transfer (summary.json says so).

The all-reduce follows the simulator's lowering shard by shard (stage, tensor-parallel rank):
lane j (the j-th holder in every island, L = the fewest holders of an island) ring
all-reduces 1/L of the shard across the islands through the WAN, coded with the outer-sync
codec (an hgsim.TensorCodec per transfer, with error feedback where the codec keeps it; a
coded all-gather hop keeps the decoded value on the sender, so every island ends with
bit-identical numbers), then the holders of each island all-gather the L reduced pieces.
"""

from __future__ import annotations

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


class OuterSync:
    """The outer-sync state of one worker: per fragment its parameters, snapshot, momentum."""

    def __init__(self, worker, spec: dict):
        self.w, self.spec = worker, spec
        self.events = events_of(spec, worker.job["steps"])
        me, roles = worker.me, worker.roles
        self.islands = len(worker.job["pipelines"])
        self.wire = Wire(worker.rank, worker.cluster_of, spec["codec"], worker.cfg.hidden,
                         worker.recorder)
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
        self.pending: dict[int, torch.Tensor] = {}
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

    def after_step(self, done: int) -> list[dict]:
        """Runs what the schedule has after `done` steps: updates that arrive now, then the
        all-reduces that start now. Returns one record per all-reduce started."""
        records = []
        for event in self.events:
            if event["applies_after"] == done and event["start_after"] < done:
                f = event["fragment"]
                self.set_params(self.fragments[f], self.pending.pop(f))
        for event in self.events:
            if event["start_after"] == done:
                records.append(self.sync(event))
        return records

    def sync(self, event: dict) -> dict:
        f = event["fragment"]
        frag = self.fragments[f]
        s = self.w.me["stage"]
        raw0, wire0 = self.wire.wan_raw_bytes, self.wire.wan_wire_bytes
        ACTIVITY.set(f"outer sync fragment {f}")
        start = now()
        g = frag["snapshot"] - self.flat(frag["params"])
        if g.numel():
            self.all_reduce(g, TAG_OUTER * TAG_KIND + (f % 900) * 1000, ("outer", f),
                            f"outer sync fragment {f} stage {s}"
                            + (f" tp {self.w.me['tp']}" if self.w.stage["tp"] > 1 else ""))
        t0 = now()
        g /= self.islands
        lr, mu = self.spec["outer_lr"], self.spec["outer_momentum"]
        frag["momentum"].mul_(mu).add_(g)
        frag["snapshot"] -= lr * (g + mu * frag["momentum"])
        if event["applies_after"] == event["start_after"]:
            self.set_params(frag, frag["snapshot"])
        else:
            self.pending[f] = frag["snapshot"].clone()
        end = now()
        self.w.recorder.span(f"outer optimizer fragment {f} stage {s}", "optimizer", 0, t0, end)
        self.count += 1
        return {"fragment": f, "start_after": event["start_after"],
                "applies_after": event["applies_after"], "start": start, "end": end,
                "values": int(g.numel()),
                "wan_raw_bytes": self.wire.wan_raw_bytes - raw0,
                "wan_wire_bytes": self.wire.wan_wire_bytes - wire0}

    def all_reduce(self, buffer: torch.Tensor, tag: int, key, label: str):
        """Sum of `buffer` over the islands, in place, on every holder of this shard."""
        lanes = min(len(h) for h in self.by_island)
        mine = self.by_island[self.w.me["pipeline"]]
        lane_pieces = comm.intervals(buffer.numel(), lanes)
        lane = mine.index(self.w.rank)
        if lane < lanes:
            a0, a1 = lane_pieces[lane]
            comm.ring_all_reduce(self.wire, buffer[a0:a1], [h[lane] for h in self.by_island],
                                 tag, (key, "lane", lane), f"{label} lane {lane}")
        if len(mine) > 1:
            pieces = lane_pieces + [(0, 0)] * (len(mine) - lanes)
            comm.ring_all_gather(self.wire, buffer, mine, pieces, tag + 400, (key, "gather"),
                                 f"{label} gather")
