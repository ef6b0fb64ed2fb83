"""`hgsim validate live SCENARIO [--plan PLAN] [--steps N] [--json] ...`

Simulated against live, on this machine:
 1. prepares the live job (the scaled model, the plan) as `hgsim live` does;
 2. profiles that model's layer, head and optimizer on this CPU with one thread, alone (kept
    for reference: it shows how far the cores' speed drifts);
 3. measures the unshaped loopback path the workers use inside a cluster (gloo ping-pong);
 4. runs the plan live over the shaped links; after each step every worker times one layer,
    the head and an Adam step as the profiler does (hgsim_runtime.profile, all workers at
    once, outside the step): the layer profile ("hgsim-layer-profile/1") of the run's own
    seconds;
 5. simulates the plan on a scenario that says what the live run has: the scaled model in
    fp32 without recomputation, that profile as every GPU's compute, the shaped WAN rates,
    the measured loopback for NVLink/NIC, and for the WAN's latency the scenario's plus the
    loopback's where the delay line applied it (the loopback's alone where it did not);
 6. reports iteration time, per-stage compute, exposed communication and WAN bytes side by
    side with the relative error of each (--json: the object below).

    {"iteration_time_s": {"sim": s, "live": l, "rel_error": (s - l) / l},
     "wan_bytes": {"sim": ..., "live": ..., "rel_error": ..., "live_source": ...},
     "stages": [{"pipeline": 0, "stage": 0, "device": "a/n0/g0",
                 "compute_s": {...}, "comm_exposed_and_bubble_s": {...}}, ...], ...}

On two cores, at most two workers may compute at once for the comparison to hold (the
simulator gives each GPU its own processor): the command refuses plans with more than
`--cores` workers (default: the machine's CPU count) unless --allow-shared-cores.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import statistics
import sys
import tempfile

import hgsim
from hgsim.files import atomic_open

from . import checks
from . import live
from . import wan
from . import profile as profiling
from .plan import LiveError


def build_parser() -> checks.Parser:
    p = live.build_parser("hgsim validate live")
    p.description = "Simulate a plan and run it live on this machine; compare."
    p.set_defaults(steps=6)
    p.add_argument("--cores", default=os.cpu_count() or 1,
                   help="CPU cores the workers may use at once (default: all)")
    p.add_argument("--allow-shared-cores", action="store_true",
                   help="run even when more workers than cores compute at once")
    p.add_argument("--repeats", default=profiling.REPEATS,
                   help=f"profiler repetitions per shape (default {profiling.REPEATS})")
    return p


def check_arguments(args) -> None:
    """The options `hgsim live` takes (live.check_arguments) and validation's own, before
    anything is profiled or started: the live profile needs a step after the first (step 0
    warms up and is not timed), and `hgsim live`'s options that do something else than
    validating are refused rather than ignored."""
    for flag, given in (("--prepare-only", args.prepare_only), ("--summarise", args.summarise),
                        ("--inject-failure", args.inject_failure)):
        if given:
            raise LiveError(f"{flag} is an option of `hgsim live`, not of `hgsim validate live`")
    args.steps = checks.integer("--steps", args.steps, 2,
                                why="step 0 warms up; the profile and the times come from the "
                                    "steps after it")
    args.repeats = checks.integer("--repeats", args.repeats, 1)
    args.cores = checks.integer("--cores", args.cores, 1, os.cpu_count() or 1,
                                why="the cores of this machine")
    live.check_arguments(args)


def rel_error(sim: float, live_value: float) -> float | None:
    return (sim - live_value) / live_value if live_value else None


def compare(sim: float, live_value: float) -> dict:
    return {"sim": sim, "live": live_value, "rel_error": rel_error(sim, live_value)}


# Payload bytes per Ethernet frame of a full TCP segment on the emulated links (wan.py).
TCP_PAYLOAD_PER_FRAME = wan.TCP_SEGMENT_BYTES / wan.FRAME_BYTES

# Where the links cannot be shaped the workers talk over unshaped loopback, and the
# simulation is given that loopback for the WAN too: the comparison is fair but leaves the WAN
# model unchecked. A plan is validated that way only when the scenario's WAN accounts for at
# most this share of its simulated iteration: half the 10% goal of validation/live.md, so
# what goes unchecked stays well inside what validation claims.
UNSHAPED_WAN_SHARE_LIMIT = 0.05


# ---- the loopback the workers use inside a cluster ----------------------------------------

def _ignore_ctrl_c():
    """In a measuring child: Ctrl-C reaches the whole process group, and the parent, which
    kills its children on the way out (`_result_of`), says it once; the child would print a
    traceback."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pingpong(rank: int, port: int, sizes: list[int], repeats: int, queue):
    import time
    _ignore_ctrl_c()

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    out = {}
    for size in sizes:
        buf = torch.zeros(size // 4)
        times = []
        for i in range(repeats + 2):
            dist.barrier()
            t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
            if i >= 2:
                times.append(time.clock_gettime(time.CLOCK_MONOTONIC) - t0)
        out[size] = statistics.median(times) / 2  # one way
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def _result_of(children, queue, timeout_s: float, what: str):
    """The first result a child puts on `queue`; LiveError at once when every child has
    ended without one, or after `timeout_s`, instead of waiting out the timeout. The children
    are killed when this ends otherwise (Ctrl-C included)."""
    import queue as queues
    import time
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                return queue.get(timeout=0.5)
            except queues.Empty:
                pass
            dead = [c for c in children if not c.is_alive()]
            if len(dead) == len(children) or any(c.exitcode for c in dead):
                codes = ", ".join(str(c.exitcode) for c in dead)
                raise LiveError(f"{what} ended without a result (exit status {codes})")
        raise LiveError(f"{what} gave no result within {timeout_s:.0f} s")
    except BaseException:
        for c in children:
            c.kill()
            c.join(timeout=5)
        raise


def measure_loopback(repeats: int = 20) -> dict:
    """One-way time of a small and a 4 MiB gloo message between two processes over loopback:
    latency = small, bandwidth = 4 MiB / (large - small)."""
    import random
    small, large = 4, 4 << 20
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = random.randint(20000, 59999)
    procs = [ctx.Process(target=_pingpong, args=(r, port, [small, large], repeats, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    times = _result_of(procs, queue, 120, "the loopback ping-pong")
    for p in procs:
        p.join(timeout=30)
    latency = times[small]
    bandwidth = large / max(times[large] - latency, 1e-9)
    return {"latency_s": latency, "bandwidth_bytes_per_s": bandwidth,
            "method": f"gloo send/recv ping-pong over 127.0.0.1, medians of {repeats}"}


# ---- the layer profile, measured where the workers would run ------------------------------

def _profile_child(job, repeats, queue):
    _ignore_ctrl_c()
    lines = []
    result = profiling.profile_job(job, repeats=repeats, echo=lines.append)
    queue.put((result, lines))


def profile_in_child(job: dict, repeats: int, echo) -> dict:
    """The layer profile, measured in a fresh process started as the workers are (the same
    allocator settings, a clean heap): measured in this long-lived process it came out up to
    25% slower than the workers' own layers."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_profile_child, args=(job, repeats, queue))
    child.start()
    result, lines = _result_of([child], queue, 600, "the layer profiler")
    child.join(timeout=60)
    for line in lines:
        echo(line)
    return result


def layer_drift(isolated: dict, during: dict) -> float:
    """Layer forward + backward during the run over the same alone before it (first shape)."""
    def layer(profile):
        e = next(e for e in profile["entries"] if e["what"] == "layer")
        return e["forward_s"] + e["backward_s"]
    return layer(during) / layer(isolated)


# ---- the scenario the simulator sees ------------------------------------------------------

def live_scenario(job: dict, loopback: dict, *, wan_shaped: bool = True,
                  wan_delayed: bool = False) -> dict:
    """The scenario the live run really is (the job's, `plan.live_run_scenario`: scaled
    model, fp32, no recomputation, the run's codecs) with the measured loopback inside
    clusters and the shaped WAN rates with the loopback latency, plus the scenario's own when
    the delay line applied it (`wan_delayed`); when the links were not shaped, the loopback
    for the WAN as well."""
    s = copy.deepcopy(job["live_scenario"])
    link = {"bandwidth": f"{loopback['bandwidth_bytes_per_s']:.6g}B/s",
            "latency": f"{loopback['latency_s'] * 1e6:.6g}us"}
    for c in s["clusters"]:
        c["nvlink"] = dict(link)
        c["nic"] = dict(link)
        # The loopback rate is measured: the simulator takes it as it is, not as a datasheet
        # figure NCCL reaches a share of.
        c["calibration"] = dict(c.get("calibration", {}), nvlink_efficiency=1)
        c.pop("oversubscription", None)
    for w in s.get("wan", []):
        # tc shapes Ethernet frames; a full TCP segment carries TCP_SEGMENT_BYTES of payload
        # in a FRAME_BYTES frame, so payload moves at that share of the shaped rate.
        for key in ("bandwidth", "reverse_bandwidth"):
            if key in w and not wan_shaped:
                w[key] = link["bandwidth"]
            elif key in w:
                rate = hgsim.parse_quantity(w[key], "bandwidth") * TCP_PAYLOAD_PER_FRAME
                w[key] = f"{rate:.9g}B/s"
        own = hgsim.parse_quantity(w["latency"], "duration") if wan_delayed else 0.0
        w["latency"] = f"{(own + loopback['latency_s']) * 1e6:.6g}us"
        w.pop("trace", None)
    s.setdefault("simulation", {})
    # gloo sends the messages between two ranks in order on one connection (measured).
    s["simulation"] = dict(s["simulation"], fidelity="full", pipeline_messages="in_order")
    if job.get("outer_sync"):
        # DiLoCo: the run's steps with their outer syncs, on the same schedule.
        s["simulation"]["iterations"] = job["steps"]
    else:
        s["simulation"].pop("iterations", None)
    return s


# Links that cost next to nothing, for wan_share: 10 GB/s without latency, above the loopback
# measured here (1-5 GB/s) and within the NVLink of the scenarios' GPUs (the simulator warns
# about a link faster than the GPU's).
INSTANT_LINK = {"latency_s": 0.0, "bandwidth_bytes_per_s": 10e9}


def wan_share(job: dict, profile_path: str) -> dict:
    """How much of the plan's simulated iteration its WAN links account for, with compute
    from the layer profile and every other link free: simulated with the WAN at its shaped
    rates, and with the WAN free too. Needs no measurement but the profile, so that a plan
    that cannot be validated is refused before the loopback is measured."""
    times = {shaped: hgsim.simulate(live_scenario(job, INSTANT_LINK, wan_shaped=shaped), None,
                                    layer_profile=profile_path)["iteration_time_s"]
             for shaped in (True, False)}
    return {"over_wan_s": times[True], "without_wan_s": times[False],
            "share": (times[True] - times[False]) / times[True] if times[True] else 0.0}


def refuse_if_wan_bound(share: dict, why_unshaped: str):
    """LiveError when links cannot be shaped and the plan's time depends on its WAN."""
    if share["share"] <= UNSHAPED_WAN_SHARE_LIMIT:
        return
    raise LiveError(
        f"this plan's time depends on its WAN links (simulated {share['over_wan_s']:.4f} s per "
        f"iteration over them, {share['without_wan_s']:.4f} s without them: "
        f"{share['share']:.0%} of the iteration; over unshaped links only plans where it is at "
        f"most {UNSHAPED_WAN_SHARE_LIMIT:.0%} are validated), and the links are not shaped: "
        f"{why_unshaped}")


def sim_stage_rows(sim: dict, live_summary: dict) -> list[dict]:
    rows = []
    sim_devices = {d["id"]: d for d in sim["devices"]}
    iteration_live = live_summary["iteration_time_s"]
    for d in live_summary["devices"]:
        sd = sim_devices.get(d["name"])
        if sd is None:
            continue
        waiting_sim = sd["comm_exposed_s"] + sd["bubble_s"] + sd["idle_s"]
        rows.append({"pipeline": d["pipeline"], "stage": d["stage"], "device": d["name"],
                     "rank": d["rank"],
                     "compute_s": compare(sd["compute_s"], d["compute_s"]),
                     "comm_exposed_and_bubble_s": compare(waiting_sim,
                                                          iteration_live - d["compute_s"]),
                     "sim_comm_exposed_s": sd["comm_exposed_s"], "sim_bubble_s": sd["bubble_s"]})
    return rows


def sim_wan_bytes(sim: dict) -> float:
    return sum(l["bytes"] for l in sim["links"] if l["kind"] == "wan")


def run(args, echo) -> dict:
    check_arguments(args)
    job = live.prepare(args)
    workers = len(job["ranks"])
    if workers > args.cores and not args.allow_shared_cores:
        raise LiveError(f"the plan has {workers} workers and --cores {args.cores}: "
                        "the simulator gives every GPU its own processor, so more workers "
                        "than cores computing at once would not compare (--allow-shared-cores "
                        "to run anyway)")
    live.check_run(job)
    out_dir = args.out or tempfile.mkdtemp(prefix="hgsim-validate-")
    os.makedirs(out_dir, exist_ok=True)
    echo(f"profiling the live model's layers on this CPU, alone ({args.repeats} repeats per "
         "shape)")
    isolated = profile_in_child(job, args.repeats, echo)
    isolated_path = os.path.join(out_dir, "layer-profile-isolated.json")
    with atomic_open(isolated_path) as f:
        json.dump(isolated, f, indent=1)
    # Refused here where it is known that the links will not be shaped; checked again after
    # the run where they could not be built after all.
    share = wan_share(job, isolated_path) if job["wan"] else None
    why_unshaped = "--no-shape was given" if args.no_shape else wan.shaping_probe().reason
    if why_unshaped and share:
        refuse_if_wan_bound(share, why_unshaped)
    echo("measuring the loopback path inside clusters")
    loopback = measure_loopback()
    echo(f"  one-way latency {loopback['latency_s'] * 1e6:.1f} us, "
         f"bandwidth {loopback['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s")
    echo(f"running live ({args.steps} steps; every worker times the layers after each step)")
    live_trace = args.trace or os.path.join(out_dir, "live-trace.json")
    job = dict(job, profile_between_steps=True)
    summary = live.execute(job, out_dir, shape=not args.no_shape, timeout_s=args.timeout,
                           stall_s=args.stall, trace_path=live_trace, echo=echo)
    shaped = summary["wan"]["shaped"]
    if not shaped and share:
        refuse_if_wan_bound(share, why_unshaped or summary["wan"]["why_not"])
    # The speed of this machine's cores drifts over seconds (a shared virtual machine): the
    # profile the simulation uses is the one the workers measured between the live steps,
    # in the run's own seconds. The isolated profile is kept to show the drift.
    layer_profile = profiling.profile_from_run(job, out_dir)
    drift = layer_drift(isolated, layer_profile)
    echo(f"  layers during the run / alone before it: {drift:.3f}")
    profile_path = os.path.join(out_dir, "layer-profile.json")
    with atomic_open(profile_path) as f:
        json.dump(layer_profile, f, indent=1)
    latency = summary["wan"].get("latency", {})
    delayed = latency.get("applied_by") == wan.LATENCY_BY_DELAY_LINE
    scenario = live_scenario(job, loopback, wan_shaped=shaped, wan_delayed=delayed)
    with atomic_open(os.path.join(out_dir, "live-scenario.json")) as f:
        json.dump(scenario, f, indent=1)
    echo("simulating")
    sim_trace = os.path.join(out_dir, "sim-trace.json")
    sim = hgsim.simulate(scenario, None, layer_profile=profile_path, trace=sim_trace)
    echo(f"  simulated iteration {sim['iteration_time_s']:.4f} s")
    steps = summary["steps"]
    live_wan = sum(summary["wan_bytes"]["shaped_interfaces"].values()) / steps if shaped else \
        summary["wan_bytes"]["sent_by_workers_wire"] / steps
    iteration = compare(sim["iteration_time_s"], summary["iteration_time_s"])
    outer_syncs = None
    if job.get("outer_sync"):
        # The live iteration time is the mean of the steps after the first (step 0 warms up);
        # the simulated one the mean of the same iterations.
        times = sim["iteration_times_s"][1:] or sim["iteration_times_s"]
        iteration = compare(sum(times) / len(times), summary["iteration_time_mean_s"])
        o, lo = sim["outer_sync"], summary["outer_syncs"]
        outer_syncs = {
            "count": {"sim": o["count"], "live": lo["count"]},
            "seconds_per_sync": compare(o["time_s"] / o["count"] if o["count"] else 0.0,
                                        sum(lo["seconds"]) / lo["count"] if lo["count"]
                                        else 0.0),
            "exposed_s_per_sync": compare(o["exposed_s"] / o["count"] if o["count"] else 0.0,
                                          sum(lo["exposed_s"]) / lo["count"] if lo["count"]
                                          else 0.0),
            "bytes_per_sync": compare(o["bytes"] / o["count"] if o["count"] else 0.0,
                                      sum(lo["bytes_per_sync"]) / lo["count"] if lo["count"]
                                      else 0.0),
            "note": "live seconds: first worker starting the all-reduce to the last finishing "
                    "its outer step; live exposed: the last worker to reach the step the "
                    "update applies after to the last having it (simulated: how long the "
                    "phase ran past the end of its steps); live bytes: the encoded messages "
                    "the workers sent (simulated: what crossed the WAN)"}
    result = {
        "scenario": job["scenario_name"],
        "plan": {"schedule": job["schedule"], "micro_batch": job["micro_batch"],
                 "pipelines": job["pipelines"]},
        "compression": job["compression"],
        "iteration_time_s": iteration,
        "wan_bytes": dict(compare(sim_wan_bytes(sim), live_wan),
                          live_source="bytes counted by tc on the shaped interfaces per step "
                                      "(TCP/IP headers and gloo's own messages included)"
                          if summary["wan"].get("shaped") else
                          "bytes the workers sent across clusters per step (links not shaped)",
                          live_payload=summary["wan_bytes"]["sent_by_workers_wire"] / steps),
        "stages": sim_stage_rows(sim, summary),
        "live": {"steps": steps, "final_loss": summary["loss"], "out_dir": out_dir,
                 "iteration_time_range_s": summary["iteration_time_range_s"],
                 "trace": live_trace, "shaped": summary["wan"].get("shaped"),
                 "why_not_shaped": summary["wan"].get("why_not")},
        "sim": {"trace": sim_trace, "provenance": sim.get("provenance"),
                "layer_profile": profile_path,
                "layer_time_during_run_over_alone": drift},
        "loopback": loopback,
        "model": job["model"], "seq_len": job["seq_len"],
        "outer_syncs": outer_syncs,
        "wan_share": share,
        "notes": summary["notes"] + [
            "the simulation is given the scenario's WAN latency plus the measured loopback's "
            "(the delay line applied it)" if delayed else
            "the WAN's latency was not applied live: the simulation is given the measured "
            "loopback latency for it",
            "compute in the simulation: this CPU's layer profile, timed by the workers between "
            "the live steps"],
    }
    if not shaped and share:
        result["notes"].append(
            f"the WAN links were not shaped, so the simulation gives them the loopback the "
            f"workers used; at the scenario's rates they account for {share['share']:.1%} of "
            f"the simulated iteration, which this validation leaves unchecked")
    with atomic_open(os.path.join(out_dir, "validation.json")) as f:
        json.dump(result, f, indent=1)
    return result


def _fmt(x, unit=""):
    if x is None:
        return "-"
    return f"{x:.4g}{unit}"


def print_result(r: dict, echo=print):
    echo(f"validation of {r['scenario']} ({r['plan']['schedule']}, "
         f"activations {json.dumps(r['compression'].get('wan_activations', 'none'))})")
    echo(f"{'':28}{'simulated':>12}{'live':>12}{'error':>9}")

    def row(name, c, scale=1.0, unit=""):
        err = c["rel_error"]
        echo(f"{name:28}{_fmt(c['sim'] * scale, unit):>12}{_fmt(c['live'] * scale, unit):>12}"
             f"{(f'{err * 100:+.1f}%' if err is not None else '-'):>9}")

    row("iteration time (s)", r["iteration_time_s"])
    row("WAN bytes per step (MB)", r["wan_bytes"], 1e-6)
    if r.get("outer_syncs"):
        o = r["outer_syncs"]
        echo(f"outer syncs: {o['count']['sim']} simulated, {o['count']['live']} live")
        row("  seconds per outer sync", o["seconds_per_sync"])
        row("  exposed s per outer sync", o["exposed_s_per_sync"])
        row("  WAN MB per outer sync", o["bytes_per_sync"], 1e-6)
    for st in r["stages"]:
        row(f"  {st['device']} compute (s)", st["compute_s"])
        row(f"  {st['device']} waiting (s)", st["comm_exposed_and_bubble_s"])
    echo(f"live WAN bytes: {r['wan_bytes']['live_source']}")
    for note in r["notes"]:
        echo(f"note: {note}")
    echo(f"outputs: {r['live']['out_dir']} (validation.json, traces, layer profile)")


def _run(args) -> int:
    echo = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    result = run(args, echo)
    with live.standard_output():
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print_result(result)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return live.run_command("hgsim validate live", args, _run)


if __name__ == "__main__":
    sys.exit(main())
