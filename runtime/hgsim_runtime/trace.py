"""Spans a live worker records, and their merge into one Chrome trace named as the simulator's.

The simulator's trace (sim/trace.cpp) has one process per cluster ("cluster NAME"), two
threads per device ("NAME/nN/gG compute" at tid 2d, "... comm" at 2d+1, d = the device's
index in placement order) and a "WAN" process with one thread per WAN direction
("wan:A->B"). The live trace uses the same pids, tids and names, so the two files open side
by side in Perfetto and line up track by track. As there, slices that overlap on a track
(concurrent sends, WAN transfers of several ranks) go to lanes: lane k >= 1 of track tid is
thread tid + k * LANE_STRIDE, named "... (lane k+1)", and no two slices of a lane overlap
(Perfetto drops a slice that partly overlaps another of its thread). Times are seconds from the start of the first
recorded step.
"""

from __future__ import annotations

import json
import threading

import hgsim
from hgsim.files import atomic_open


class Recorder:
    """Spans of one worker: (name, category, track 0 = compute / 1 = comm, start, end, args).

    Two threads record into it (the main thread and the outer-sync thread, outer.py): the
    lock keeps open_span's index that of its own span while the other thread appends."""

    def __init__(self):
        self.spans: list[list] = []
        self.enabled = True
        self._lock = threading.Lock()

    def span(self, name, category, track, start, end, args=None):
        if self.enabled:
            with self._lock:
                self.spans.append([name, category, track, start, end, args])

    def open_span(self, name, category, track, start, args=None) -> int:
        with self._lock:
            self.spans.append([name, category, track, start, None, args])
            return len(self.spans) - 1

    def close_span(self, index: int, end: float):
        with self._lock:
            self.spans[index][4] = end

    def dump(self, path: str):
        with self._lock:
            finished = [s for s in self.spans if s[4] is not None]
        with atomic_open(path) as f:
            json.dump(finished, f)


class Discard(Recorder):
    """Keeps nothing: the recorder of a wire whose messages its user records as a whole (each
    tensor-parallel collective is one span with the bytes it sent, model.TensorParallel)."""

    def span(self, name, category, track, start, end, args=None):
        pass

    def open_span(self, name, category, track, start, args=None) -> int:
        return -1

    def close_span(self, index: int, end: float):
        pass


# sim::kLaneStride: lane k of a track is thread tid + k * LANE_STRIDE (sim::lane_thread).
LANE_STRIDE = hgsim._hgsim.lane_thread(0, 1)


def _lanes(events, names):
    """Moves each slice of `events` to its lane by the simulator's rule (sim::TrackLanes,
    through the module: the first lane of its track where it overlaps no other, slices taken
    in order of their starts), and returns the thread_name events of the lanes it opened;
    `names` maps (pid, tid) to the track's name."""
    slices = sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["ts"], e["dur"]))
    placed = hgsim._hgsim.trace_lanes([(e["pid"], e["tid"]) for e in slices],
                                      [e["ts"] for e in slices],
                                      [e["ts"] + e["dur"] for e in slices])
    extra = []
    for event, (lane, opened) in zip(slices, placed):
        pid, tid = event["pid"], event["tid"]
        if opened and lane > 0:
            extra.append(_meta("thread_name", pid, hgsim._hgsim.lane_thread(tid, lane),
                               hgsim._hgsim.lane_name(names.get((pid, tid), ""), lane)))
        event["tid"] = hgsim._hgsim.lane_thread(tid, lane)
    return extra


def _meta(what, pid, tid, name):
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {"name": name}}


def merge(path: str, clusters: list[str], devices: list[dict], spans_per_rank: dict[int, list],
          wan_links: list[str], origin: float):
    """Writes the Chrome trace. `devices[d]` = {"rank", "cluster", "name"} in placement order;
    a send whose peer is in another cluster also appears on its WAN direction's track."""
    events = [_meta("process_name", c, 0, f"cluster {name}") for c, name in enumerate(clusters)]
    cluster_index = {name: c for c, name in enumerate(clusters)}
    device_of_rank = {}
    cluster_of_name = {dev["name"]: dev["cluster"] for dev in devices}
    for d, dev in enumerate(devices):
        pid = cluster_index[dev["cluster"]]
        events.append(_meta("thread_name", pid, 2 * d, dev["name"] + " compute"))
        events.append(_meta("thread_name", pid, 2 * d + 1, dev["name"] + " comm"))
        device_of_rank[dev["rank"]] = d
    wan_pid = len(clusters)
    events.append(_meta("process_name", wan_pid, 0, "WAN"))
    wan_tid = {}
    for t, link in enumerate(wan_links):
        wan_tid[link] = t
        events.append(_meta("thread_name", wan_pid, t, link))
    for rank, spans in sorted(spans_per_rank.items()):
        d = device_of_rank[rank]
        dev = devices[d]
        pid = cluster_index[dev["cluster"]]
        for name, category, track, start, end, args in spans:
            event = {"ph": "X", "name": name, "cat": category, "pid": pid, "tid": 2 * d + track,
                     "ts": round((start - origin) * 1e6, 3),
                     "dur": round(max(0.0, end - start) * 1e6, 3)}
            if args:
                args = dict(args)
                for key in ("to", "from"):
                    if key in args:
                        args[key] = devices[device_of_rank[args[key]]]["name"]
                event["args"] = args
            events.append(event)
            peer = args.get("to") if args else None
            if peer is None:
                continue
            peer_cluster = cluster_of_name[peer]
            link = f"wan:{dev['cluster']}->{peer_cluster}"
            if peer_cluster != dev["cluster"] and link in wan_tid:
                events.append(dict(event, pid=wan_pid, tid=wan_tid[link]))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    events += _lanes(events, names)
    with atomic_open(path) as f:
        f.write('{"displayTimeUnit": "ms", "traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in events))
        f.write("\n]}\n")
