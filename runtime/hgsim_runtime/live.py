"""`hgsim live SCENARIO [--plan PLAN.json] [--steps N] [--trace FILE] [--scale-model ...]`

Trains a scaled copy of the scenario's model under its plan with one CPU worker process per
GPU of the plan, over emulated WAN links (runtime/hgsim_runtime/wan.py), and writes:
  OUT/loss.csv       loss and iteration time per step
  OUT/summary.json   iteration time, per-device compute, WAN bytes, notes
  OUT/rank<R>.log    each worker's output
  --trace FILE       one Chrome trace whose tracks are named as the simulator's

Exit status (as every hgsim command): 0 when every worker finished; 1 for bad input or usage
(the problem is printed as one line, before any worker starts: checks.py) and when the run
failed (a worker crashed or hung: all workers are ended, the namespaces removed, the failing
rank and its last lines printed); 130 on Ctrl-C (workers and namespaces removed first).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import errno
import json
import math
import os
import random
import socket
import statistics
import sys
import tempfile
import warnings

import hgsim
from hgsim.files import atomic_open

from . import checks
from . import outer
from . import plan as planning
from . import trace as tracing
from .plan import LiveError
from .supervisor import WorkerFailed, WorkerSpec, run_workers
from .wan import EmulatedWan, WanSetupError, install_signal_cleanup


def build_parser(prog="hgsim live") -> checks.Parser:
    # Numbers are read as text and checked whole by check_arguments, which names the option,
    # the value and the range.
    p = checks.Parser(prog=prog, description=__doc__.split("\n\n")[1])
    p.add_argument("scenario", help="scenario YAML/JSON")
    p.add_argument("--plan", help="plan JSON/YAML (default: the scenario's strategy, or the "
                                  "planner's plan for strategy: auto)")
    p.add_argument("--steps", default=5, help="training steps (default 5)")
    p.add_argument("--trace", help="write the merged Chrome trace here")
    p.add_argument("--scale-model", help="KEY=VALUE,... with KEY in hidden, heads, ffn_hidden, "
                                         "seq_len, micro_batch")
    p.add_argument("--out", help="output folder (default: a new temporary folder)")
    p.add_argument("--corpus", default=planning.default_corpus(),
                   help="text file or folder of text files (default: %(default)s)")
    p.add_argument("--seed", default=1234, help="0 to 2^63 - 1 (default 1234)")
    p.add_argument("--lr", default=1e-3, help="Adam learning rate (default 1e-3)")
    p.add_argument("--timeout", default=900, help="seconds for the whole run (default 900)")
    p.add_argument("--stall", default=180,
                   help="a worker silent this many seconds counts as hung (default 180; a worker "
                        "that has not written its first line yet gets at least 60)")
    p.add_argument("--max-workers", default=16, help="the most workers a plan may have "
                                                     "(default 16)")
    p.add_argument("--no-shape", action="store_true", help="do not create namespaces or shape")
    p.add_argument("--compression", help="JSON object overriding the scenario's compression, "
                                         "e.g. '{\"wan_activations\": \"int8\"}'")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--inject-failure", help="testing aid: RANK:STEP:crash|hang")
    p.add_argument("--prepare-only", action="store_true",
                   help="write OUT/job.json and print the command of every rank, for running "
                        "across machines (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)")
    p.add_argument("--summarise", action="store_true",
                   help="SCENARIO is an output folder of a finished run (job.json and every "
                        "rank's files): write loss.csv, summary.json and --trace from it")
    return p


def check_arguments(args) -> None:
    """Every option's value, checked whole before anything is resolved, created or started
    (checks.py: the option, the value and what would be right); numbers converted in place.
    Safe to call twice."""
    args.steps = checks.integer("--steps", args.steps, 1)
    args.seed = checks.integer("--seed", args.seed, 0, checks.MAX_SEED)
    args.lr = checks.positive_number("--lr", args.lr, "a positive finite learning rate")
    args.timeout = checks.seconds("--timeout", args.timeout)
    args.stall = checks.seconds("--stall", args.stall)
    args.max_workers = checks.integer("--max-workers", args.max_workers, 1)
    checks.utf8_path("SCENARIO", args.scenario)
    if args.plan is not None:
        checks.utf8_path("--plan", args.plan)
    checks.input_source("--corpus", args.corpus)
    if args.out is not None:
        checks.output_folder("--out", args.out)
    if args.trace is not None:
        checks.output_file("--trace", args.trace)
    args.compression_override = checks.compression_override(args.compression)
    args.scale = planning.parse_scale(args.scale_model)
    args.failure = parse_failure(args.inject_failure)


def prepare(args) -> dict:
    """The job every worker reads, from the command line (checked first)."""
    check_arguments(args)
    resolved = hgsim.resolve(args.scenario, args.plan)
    job = job_from(resolved, compression=args.compression_override, scale=args.scale,
                   steps=args.steps, seed=args.seed, lr=args.lr, max_workers=args.max_workers,
                   timeout_s=args.timeout, corpus=args.corpus)
    job["inject_failure"] = check_failure(args.failure, job)
    return job


def checked_codecs(codecs: dict, override: dict | None) -> dict:
    """--compression's codecs: each key one of the scenario's compression keys, each value a
    codec the codec catalog takes (its check, through `hgsim.encoded_bytes`)."""
    for key, spec in (override or {}).items():
        if key not in codecs:
            raise LiveError(f"--compression: unknown key '{checks.shown(key)}'; valid: "
                            f"{', '.join(codecs)}")
        try:
            hgsim.encoded_bytes(spec, 1024)
        except hgsim.Error as e:
            # The catalog's message starts with its own severity and key ("error: codec: ").
            problem = str(e).removeprefix("error: ").removeprefix("codec: ")
            raise LiveError(f"--compression: {key}: {problem}") from None
    return dict(override or {})


def job_from(resolved: dict, *, compression=None, scale=None, steps=5, seed=1234, lr=1e-3,
             max_workers=16, timeout_s=900.0, corpus=None) -> dict:
    """The job from a resolved scenario and plan (`hgsim.resolve`): the scaled model, the plan
    as it runs live (`compression` overrides codecs), resolved again on the scenario the live
    run is, so that placement, segments, gradient buckets and reshard pieces are the
    simulator's; LiveError for what cannot run live."""
    scenario, plan = resolved["scenario"], copy.deepcopy(resolved["plan"])
    codecs = dict(resolved["compression"], **checked_codecs(resolved["compression"], compression))
    scale = scale or {}
    live_model, seq_len, notes = planning.scaled_model(resolved["model"],
                                                       scenario["training"]["seq_len"], scale)
    if "micro_batch" in scale:
        plan["micro_batch"] = scale["micro_batch"]
    planning.check_executable(plan, live_model, max_workers, resolved["gpus_used"])
    run_scenario = planning.live_run_scenario(scenario, live_model, seq_len, plan, codecs)
    try:
        with warnings.catch_warnings():
            # The scenario and plan given were warned about when they were resolved; this is
            # the same plan on the scaled model, and its warnings would repeat those.
            warnings.simplefilter("ignore")
            live_plan = hgsim.resolve(run_scenario)
    except hgsim.Error as e:
        scaled = ", ".join(f"{k}={v}" for k, v in scale.items())
        # Its errors only: its warnings repeat those of the scenario and plan given.
        errors = [line for line in str(e).splitlines() if not checks.is_warning(line)]
        raise LiveError("the scenario of the live run (the plan on the scaled model"
                        + (f", --scale-model {scaled}" if scaled else "")
                        + ", fp32, no recomputation) is refused:\n" + "\n".join(errors)) \
            from None
    planning.check_resolved(live_plan)
    recompute = resolved["choices"]["recompute"]
    if recompute != "none":
        notes.append(f"recompute: {recompute} is not executed live: the workers keep all "
                     "activations (validation simulates the same)")
    zero = resolved["choices"].get("zero", 0)
    if zero:
        notes.append(f"ZeRO stage {zero} is not executed live: every dp rank keeps whole "
                     "weights, gradients and Adam states and all-reduces the gradients "
                     "(validation simulates the same)")
    precision = resolved["choices"]["precision"]
    if precision != "fp32":
        notes.append(f"precision {precision} -> fp32 (CPU workers)")
    plan = live_plan["plan"]
    if live_plan["choices"]["sequence_parallel"] and any(
            st["tp"] > 1 for p in plan["pipelines"] for st in p["stages"]):
        notes.append("sequence parallelism: besides the blocks' reduce-scatters and "
                     "all-gathers (the simulator's), stages of tp > 1 all-reduce their norms' "
                     "and row-parallel biases' gradients across tp once a step, the first "
                     "stage all-gathers the embedding's gradient and the last stage the tokens "
                     "before the head once a micro-batch: traffic the simulator does not have")
    outer_sync = outer.spec_of(plan)
    if outer_sync and outer_sync["fragments"] > 1:
        notes.append("streaming DiLoCo: each fragment's all-reduce runs on a second thread of "
                     "every worker alongside the following overlap_steps inner steps; its "
                     "update applies at the step the simulator has it arrive, the workers "
                     "waiting there for it if it has not (outer_syncs.exposed_s)")
    return {
        "scenario_name": scenario.get("name", ""),
        "model": live_model, "seq_len": seq_len, "seed": seed, "lr": lr,
        "steps": steps, "schedule": plan["schedule"],
        "micro_batch": plan["micro_batch"], "global_batch": planning.global_batch(plan),
        "pipelines": plan["pipelines"], "plan": plan,
        "sequence_parallel": live_plan["choices"]["sequence_parallel"],
        "grad_sync": {"algorithm": plan["grad_sync"]["algorithm"]},
        "compression": codecs, "ranks": live_plan["ranks"], "segments": live_plan["segments"],
        "reshard": live_plan["reshard"], "live_scenario": run_scenario,
        "outer_sync": outer_sync,
        "clusters": [c["name"] for c in scenario["clusters"]],
        "wan": planning.wan_links(scenario), "scenario": scenario, "notes": notes,
        "timeout_s": timeout_s, "corpus": corpus or planning.default_corpus(),
    }


def parse_failure(text: str | None) -> dict | None:
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 3 or parts[2] not in ("crash", "hang") or not all(
            x.isdigit() for x in parts[:2]):
        raise LiveError(f"--inject-failure '{checks.shown(text)}': expected RANK:STEP:crash|hang")
    return {"rank": int(parts[0]), "step": int(parts[1]), "mode": parts[2]}


def check_failure(failure: dict | None, job: dict) -> dict | None:
    """--inject-failure's rank and step must be the job's: a failure that never happens would
    let a test of failures pass without one."""
    if failure is None:
        return None
    ranks, steps = len(job["ranks"]), job["steps"]
    text = f"{failure['rank']}:{failure['step']}:{failure['mode']}"
    if failure["rank"] >= ranks:
        raise LiveError(f"--inject-failure {text}: rank {failure['rank']} is not one of the "
                        f"plan's ranks 0..{ranks - 1}")
    if failure["step"] >= steps:
        raise LiveError(f"--inject-failure {text}: step {failure['step']} is past the run's "
                        f"steps 0..{steps - 1} (--steps {steps})")
    return failure


def available_memory_bytes() -> float | None:
    """What this machine can give the workers: MemAvailable (/proc/meminfo), less where a
    cgroup (v2) limit leaves less; None when neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                found.append(int(limit) - int(f.read()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_memory(job: dict, available: float | None = None) -> None:
    """Refuses a live model that cannot fit in this machine's memory, before any worker
    starts (a worker would try to allocate it and die). The estimate is the simulator's
    (models/: weights, gradients, Adam states and activations of each GPU's stage) for the
    scenario the live run is, with standard attention: the workers hold the whole s x s
    attention scores (model.Block). Every worker runs on this machine: their peaks add up.
    Each worker also holds about 250 MB of interpreter and torch (measured: 257 MB maximum
    resident size after importing the worker), which is left out so that only a model that
    cannot fit is refused."""
    available = available_memory_bytes() if available is None else available
    if available is None:
        return
    scenario = copy.deepcopy(job["live_scenario"])
    scenario["training"] = dict(scenario["training"], attention="standard")
    scenario["simulation"] = dict(scenario.get("simulation", {}), fidelity="folded")
    scenario["simulation"].pop("iterations", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warned about when the plan was resolved
            devices = hgsim.simulate(scenario, None, allow_oom=True)["devices"]
    except hgsim.Error:
        return  # what the simulator cannot play the live run may still run: no estimate
    need = sum(d["memory"]["peak_bytes"] for d in devices)
    if need <= available:
        return
    largest = max(devices, key=lambda d: d["memory"]["peak_bytes"])
    model = job["model"]
    gib = 2**30
    raise LiveError(
        f"the live model needs about {need / gib:.1f} GiB for its {len(devices)} workers, more "
        f"than the {available / gib:.1f} GiB this machine has available ({largest['id']} "
        f"alone {largest['memory']['peak_bytes'] / gib:.1f} GiB; the simulator's estimate of "
        "weights, gradients, Adam states and activations in fp32 with the whole attention "
        f"scores); the model is hidden {model['hidden']}, {model['layers']} layers, seq_len "
        f"{job['seq_len']}, micro_batch {job['micro_batch']}: choose smaller ones with "
        "--scale-model")


def check_run(job: dict) -> None:
    """What can only be checked once the job is known, before any worker starts: the corpus
    holds a sequence, the model fits in memory."""
    if os.path.isfile(job["corpus"]):  # a folder is gathered into one file by `execute`
        planning.corpus_file(job["corpus"], "", job["seq_len"] + 2)
    check_memory(job)


def master_port(address: str) -> int:
    """A port for rank 0's rendezvous that nothing holds now, chosen below the kernel's
    ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), which the kernel hands to every
    outgoing connection: a random port among those collided with one now and then ("Address
    already in use"). Each choice is tried by binding it; where the address cannot be bound
    here (it lives in an emulated cluster's namespace) the choice is kept untried."""
    low, high = 20000, 32767
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
        if ephemeral_low - 1 >= low + 1000:
            high = ephemeral_low - 1
    except (OSError, ValueError, IndexError):
        pass
    port = random.randint(low, high)
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((address, port))
                return port
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    return port
        port = random.randint(low, high)
    return port


def execute(job: dict, out_dir: str, *, shape: bool = True, timeout_s: float = 900,
            stall_s: float | None = 180, trace_path: str | None = None, echo=print) -> dict:
    """Runs the job's workers over the emulated WAN; returns the summary. WorkerFailed when a
    worker crashes or hangs (everything is cleaned up first)."""
    os.makedirs(out_dir, exist_ok=True)
    job = dict(job, out_dir=os.path.abspath(out_dir), stall_s=stall_s)
    job["corpus"] = planning.corpus_file(job["corpus"], out_dir, job["seq_len"] + 2)
    # shape=None: shaped where the probe says it can be, else unshaped loopback (warned below).
    wan = EmulatedWan(job["clusters"], job["wan"], shape=None if shape else False)
    with wan:
        install_signal_cleanup(wan)
        job["master_addr"] = wan.address(job["ranks"][0]["cluster"])
        job["master_port"] = master_port(job["master_addr"])
        described = wan.describe()
        if not described["shaped"] and shape and job["wan"]:
            unshaped = ("the workers talk over unshaped loopback, so the run's times leave out "
                        f"the scenario's WAN links; {described['why_not']}")
            print(f"warning: {unshaped}", file=sys.stderr, flush=True)
            job["notes"] = job["notes"] + [unshaped]
        elif not described["shaped"]:
            echo(f"note: {described['why_not']}")
        if job["wan"]:
            job["notes"] = job["notes"] + [wan.latency_note()]
        job_path = os.path.join(out_dir, "job.json")
        with atomic_open(job_path) as f:
            json.dump(job, f, indent=1)
        specs = []
        python = os.environ.get("HGSIM_PYTHON", sys.executable)
        for role in job["ranks"]:
            env = dict(os.environ)
            env.update(MASTER_ADDR=job["master_addr"], MASTER_PORT=str(job["master_port"]),
                       RANK=str(role["rank"]), WORLD_SIZE=str(len(job["ranks"])),
                       OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            iface = wan.interface(role["cluster"])
            env["GLOO_SOCKET_IFNAME"] = iface or "lo"
            specs.append(WorkerSpec(rank=role["rank"], cluster=role["cluster"],
                                    argv=[python, "-m", "hgsim_runtime.worker", "--job", job_path,
                                          "--rank", str(role["rank"])],
                                    env=env,
                                    log_path=os.path.join(out_dir, f"rank{role['rank']}.log")))
        reporter = _loss_rank(job)

        def progress(rank, line):
            if rank == reporter:
                echo(line.removeprefix("PROGRESS ").strip())

        before = wan.counters()
        try:
            run_workers(specs, wan, timeout_s=timeout_s, stall_s=stall_s, progress=progress)
        except WorkerFailed as failure:
            raise find_culprit(failure, specs) from None
        after = wan.counters()
    shaped_bytes = {f"{a}->{b}": after.get((a, b), 0) - before.get((a, b), 0)
                    for (a, b) in after}
    return summarise(job, out_dir, described, shaped_bytes, trace_path)


def find_culprit(failure: WorkerFailed, specs: list) -> WorkerFailed:
    """When the run stalled, the rank the supervisor noticed first may only be waiting for
    another. Each worker's watchdog printed what it was doing (STALLED ...; waiting for rank
    N): follow the waits to the rank that waits for nobody."""
    if "no progress" not in failure.reason and "timeout" not in failure.reason:
        return failure
    waits, stalled = {}, set()
    for spec in specs:
        try:
            with open(spec.log_path, errors="replace") as f:
                lines = [line for line in f if line.startswith("STALLED")]
        except OSError:
            continue
        if not lines:
            continue
        stalled.add(spec.rank)
        tail = lines[-1]
        if "waiting for rank " in tail:
            waits[spec.rank] = int(tail.rsplit("waiting for rank ", 1)[1].split()[0])
        elif "waiting for all ranks" in tail:
            waits[spec.rank] = -1
    blocked_elsewhere = [r for r in stalled if r not in waits]
    if len(blocked_elsewhere) != 1:
        return failure
    culprit = blocked_elsewhere[0]
    if culprit == failure.rank:
        return failure
    spec = next(s for s in specs if s.rank == culprit)
    from .supervisor import _tail
    return WorkerFailed(culprit, f"{failure.reason} (hung; rank {failure.rank} and others were "
                        "waiting for it)", _tail(spec.log_path), cluster=spec.cluster,
                        log_path=spec.log_path)


def _loss_rank(job: dict) -> int:
    last = len(job["pipelines"][0]["stages"]) - 1
    return next(r["rank"] for r in job["ranks"] if r["pipeline"] == 0 and r["replica"] == 0
                and r["stage"] == last and r["dp"] == 0 and r["tp"] == 0)


# What a worker writes for each step (worker.Worker.run), all of it read by `summarise`.
STEP_KEYS = ("step", "rank", "start", "end", "loss_sum", "tokens", "compute_s", "wan_raw_bytes",
             "wan_wire_bytes")


def read_steps(job: dict, out_dir: str) -> dict[int, list[dict]]:
    """Every rank's step records (rank<R>.steps.jsonl), by step. A run is complete when every
    rank recorded every step (a worker writes a step's line once it has finished the step);
    LiveError, naming the ranks that fell short, for one that is not: its loss and times
    would describe another run than the one asked for."""
    steps: dict[int, list[dict]] = {}
    short = []
    for role in job["ranks"]:
        path = os.path.join(out_dir, f"rank{role['rank']}.steps.jsonl")
        try:
            with open(path, "rb") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise LiveError(f"'{checks.shown(path)}': rank {role['rank']}'s step records cannot "
                            f"be read: {e.strerror}") from None
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or any(
                    not isinstance(record.get(k), (int, float)) for k in STEP_KEYS):
                raise LiveError(f"'{checks.shown(path)}' line {number}: not a step record of "
                                "a live worker")
            steps.setdefault(record["step"], []).append(record)
        if len(lines) < job["steps"]:
            short.append(f"rank {role['rank']} recorded {len(lines)} of {job['steps']} steps")
    if short:
        raise LiveError(f"'{checks.shown(out_dir)}': the run did not finish: "
                        f"{'; '.join(short)} (the rank logs say why); a summary needs every "
                        "rank's steps")
    return steps


def summarise(job, out_dir, described, shaped_bytes, trace_path) -> dict:
    """loss.csv and summary.json of a finished run, then the trace: a trace that cannot be
    written (a full disk) leaves the results written, and says where they are."""
    steps = read_steps(job, out_dir)
    rows = []
    for step in sorted(steps):
        records = steps[step]
        tokens = sum(r["tokens"] for r in records)
        rows.append({"step": step,
                     "loss": sum(r["loss_sum"] for r in records) / tokens if tokens else None,
                     "iteration_time_s": max(r["end"] for r in records)
                     - min(r["start"] for r in records),
                     "tokens": tokens})
    with atomic_open(os.path.join(out_dir, "loss.csv"), newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "iteration_time_s", "tokens"])
        for r in rows:
            w.writerow([r["step"], f"{r['loss']:.6f}", f"{r['iteration_time_s']:.6f}",
                        r["tokens"]])
    # Step 0 warms up allocators and connections: timings are medians over the later steps.
    timed = [r for r in rows if r["step"] > 0] or rows
    devices = []
    for role in job["ranks"]:
        records = [r for s in steps.values() for r in s if r["rank"] == role["rank"]]
        later = [r for r in records if r["step"] > 0] or records
        devices.append({"rank": role["rank"], "name": role["device"], "cluster": role["cluster"],
                        "pipeline": role["pipeline"], "stage": role["stage"],
                        "compute_s": statistics.median(r["compute_s"] for r in later)})
    last = steps[max(steps)]
    summary = {
        "scenario": job["scenario_name"], "steps": len(rows),
        "iteration_time_mean_s": statistics.mean(r["iteration_time_s"] for r in timed),
        "iteration_time_s": statistics.median(r["iteration_time_s"] for r in timed),
        "iteration_time_range_s": [min(r["iteration_time_s"] for r in timed),
                                   max(r["iteration_time_s"] for r in timed)],
        "loss": rows[-1]["loss"], "devices": devices,
        "wan_bytes": {"sent_by_workers_raw": sum(r["wan_raw_bytes"] for r in last),
                      "sent_by_workers_wire": sum(r["wan_wire_bytes"] for r in last),
                      "shaped_interfaces": shaped_bytes},
        "wan": described, "notes": job["notes"], "model": job["model"],
        "provenance": "measured: live run on this machine",
        "out_dir": out_dir, "loss_csv": os.path.join(out_dir, "loss.csv"),
    }
    diverged = next((r for r in rows if r["loss"] is not None and not math.isfinite(r["loss"])),
                    None)
    if diverged:
        summary["notes"] = summary["notes"] + [
            f"the loss is {diverged['loss']} from step {diverged['step']} on: training diverged "
            f"(--lr {job.get('lr')} may be too high)"]
    if job.get("outer_sync"):
        summary["outer_syncs"] = outer_sync_summary(job, steps)
    summary_path = os.path.join(out_dir, "summary.json")
    with atomic_open(summary_path) as f:
        json.dump(summary, f, indent=1)
    if trace_path:
        write_trace(job, out_dir, trace_path)
        summary["trace"] = trace_path
        with atomic_open(summary_path) as f:
            json.dump(summary, f, indent=1)
    return summary


def write_trace(job: dict, out_dir: str, trace_path: str):
    """The run's Chrome trace from every rank's spans; LiveError when it cannot be written
    (the results, already written, are kept)."""
    spans = {}
    for role in job["ranks"]:
        path = os.path.join(out_dir, f"rank{role['rank']}.spans.json")
        try:
            with open(path) as f:
                spans[role["rank"]] = json.load(f)
        except (OSError, ValueError) as e:
            raise LiveError(f"--trace: rank {role['rank']}'s spans '{checks.shown(path)}' "
                            f"cannot be read ({getattr(e, 'strerror', None) or e}); loss.csv "
                            f"and summary.json are in {checks.escaped(out_dir)}") from None
    origin = min(s[3] for v in spans.values() for s in v) if any(spans.values()) else 0.0
    links = [f"wan:{w['from']}->{w['to']}" for w in job["wan"]] + \
            [f"wan:{w['to']}->{w['from']}" for w in job["wan"]]
    devices_in_order = [{"rank": r["rank"], "cluster": r["cluster"], "name": r["device"]}
                        for r in job["ranks"]]
    try:
        tracing.merge(trace_path, job["clusters"], devices_in_order, spans, links, origin)
    except OSError as e:
        raise LiveError(f"--trace '{checks.shown(trace_path)}': cannot write it: "
                        f"{e.strerror}; loss.csv and summary.json are in "
                        f"{checks.escaped(out_dir)}") from None


def outer_sync_summary(job: dict, steps: dict) -> dict:
    """`outer_syncs` of summary.json: every fragment all-reduce of the run, with the WAN
    bytes all workers sent for it and its time (first worker starting it to last finishing)."""
    syncs: dict[tuple, list[dict]] = {}
    for records in steps.values():
        for r in records:
            for s in r.get("outer_syncs", []):
                syncs.setdefault((s["start_after"], s["fragment"]), []).append(s)
    rows = []
    for (after, fragment), parts in sorted(syncs.items()):
        # Exposed: how long the last worker to reach the update waited for it, the
        # simulator's "how long the window ran past the end of its steps".
        reached = max(p["wait_start"] for p in parts)
        rows.append({"fragment": fragment, "after_step": after,
                     "applies_after_step": parts[0]["applies_after"],
                     "wan_bytes": sum(p["wan_wire_bytes"] for p in parts),
                     "wan_raw_bytes": sum(p["wan_raw_bytes"] for p in parts),
                     "seconds": max(p["end"] for p in parts) - min(p["start"] for p in parts),
                     "exposed_s": max(0.0, max(p["wait_start"] + p["exposed_s"] for p in parts)
                                      - reached)})
    o = job["outer_sync"]
    return {"method": "streaming diloco" if o["fragments"] > 1 else "diloco",
            "inner_steps": o["inner_steps"], "fragments": o["fragments"],
            "overlap_steps": o["overlap_steps"], "codec": o["codec"],
            "outer_optimizer": "nesterov (PyTorch SGD nesterov=True semantics)",
            "outer_lr": o["outer_lr"], "outer_momentum": o["outer_momentum"],
            "count": len(rows),
            "bytes_per_sync": [r["wan_bytes"] for r in rows],
            "seconds": [r["seconds"] for r in rows],
            "exposed_s": [r["exposed_s"] for r in rows],
            "syncs": rows,
            "provenance": "measured: live run on this machine; bytes are the encoded messages "
                          "the workers sent across clusters for each fragment all-reduce, "
                          "seconds from the first worker starting it to the last finishing "
                          "its outer optimizer step; exposed_s from the last worker reaching "
                          "the step the update applies after to the last one having it (a "
                          "blocking sync: all of it)"}


def print_summary(summary: dict, echo=print):
    echo(f"live run of {summary['scenario']}: {summary['steps']} steps")
    echo(f"  iteration time  {summary['iteration_time_s']:.4f} s (median of steps after the "
         "first; measured)")
    echo(f"  final loss      {summary['loss']:.4f} nats/byte")
    wb = summary["wan_bytes"]
    echo(f"  WAN bytes       {wb['sent_by_workers_wire']:.0f} sent by workers "
         f"({wb['sent_by_workers_raw']:.0f} before coding), all steps")
    for link, n in sorted(wb["shaped_interfaces"].items()):
        echo(f"    {link}: {n} bytes counted by tc on the shaped interface")
    if "outer_syncs" in summary:
        o = summary["outer_syncs"]
        mean_bytes = sum(o["bytes_per_sync"]) / max(o["count"], 1)
        mean_s = sum(o["seconds"]) / max(o["count"], 1)
        mean_exposed = sum(o["exposed_s"]) / max(o["count"], 1)
        echo(f"  outer syncs     {o['count']} ({o['method']}, H = {o['inner_steps']}, "
             f"{o['fragments']} fragment(s)): {mean_bytes:.0f} WAN bytes and {mean_s:.4f} s "
             f"per sync on average, {mean_exposed:.4f} s of it exposed (measured)")
    for d in summary["devices"]:
        echo(f"  {d['name']:<16} rank {d['rank']:<3} stage {d['stage']}  compute "
             f"{d['compute_s']:.4f} s per step")
    for note in summary["notes"]:
        echo(f"  note: {note}")
    echo(f"  outputs in {checks.escaped(summary['out_dir'])} (loss.csv, summary.json, rank "
         "logs)")
    if "trace" in summary:
        echo(f"  trace: {checks.escaped(summary['trace'])}")


def prepare_only(job: dict, args) -> int:
    """The job for workers on several machines: no namespaces, no shaping (the real network
    is the WAN), the usual torch.distributed environment."""
    out_dir = os.path.abspath(checks.output_folder("--out", args.out or "hgsim-live-job"))
    os.makedirs(out_dir, exist_ok=True)
    job = dict(job, out_dir=out_dir, stall_s=args.stall)
    job["corpus"] = planning.corpus_file(args.corpus, out_dir, job["seq_len"] + 2)
    path = os.path.join(out_dir, "job.json")
    with atomic_open(path) as f:
        json.dump(job, f, indent=1)
    shown_path = checks.escaped(path)
    print(f"wrote {shown_path}; on the machine of each rank (same paths, or copy the folder):")
    for role in job["ranks"]:
        print(f"  MASTER_ADDR=<rank 0's address> MASTER_PORT=29500 RANK={role['rank']} "
              f"WORLD_SIZE={len(job['ranks'])} /usr/bin/python3 -m hgsim_runtime.worker "
              f"--job {shown_path}    # {role['device']}")
    print(f"then gather every rank's files into {checks.escaped(out_dir)} and run "
          f"`hgsim live {checks.escaped(out_dir)} --summarise [--trace FILE]`")
    return 0


def summarise_folder(args) -> int:
    """`hgsim live DIR --summarise`: the results of a run whose workers were started by hand
    (--prepare-only), from its job.json and every rank's files; refused for a run that did
    not finish (read_steps)."""
    folder = checks.utf8_path("DIR", args.scenario)
    if not os.path.isdir(folder):
        raise LiveError(f"--summarise '{checks.shown(folder)}': not a folder (it is "
                        f"{checks.kind_of(folder)}); give the output folder of a run, which "
                        "holds job.json and the rank files")
    if args.trace is not None:
        checks.output_file("--trace", args.trace)
    job = checks.read_job(os.path.join(folder, "job.json"),
                          f"--summarise '{checks.shown(folder)}': job.json")
    try:
        summary = summarise(job, folder, {"shaped": False, "why_not": "run across machines"},
                            {}, args.trace)
    except (KeyError, TypeError, IndexError) as e:
        raise LiveError(f"--summarise '{checks.shown(folder)}': job.json does not describe "
                        f"the rank files ({type(e).__name__}: {checks.shown(e)})") from None
    print_result(summary, args.json)
    return 0


def print_result(summary: dict, as_json: bool):
    with standard_output():
        if as_json:
            print(json.dumps(summary, indent=1))
        else:
            print_summary(summary)


@contextlib.contextmanager
def standard_output():
    """Prints the result and flushes it, so that a write error (a full disk, `> /dev/full`)
    is reported as the command's, exit 1, and not by the interpreter at exit."""
    try:
        yield
        sys.stdout.flush()
    except OSError as e:
        # Nothing more can be written there; what is left in the buffer is dropped, or the
        # interpreter would try again at exit and print its own report.
        sys.stdout = open(os.devnull, "w")
        raise LiveError(f"cannot write the output: {e.strerror}") from None


def _run(args) -> int:
    if args.summarise:
        return summarise_folder(args)
    job = prepare(args)
    if args.prepare_only:
        return prepare_only(job, args)
    check_run(job)
    out_dir = args.out or tempfile.mkdtemp(prefix="hgsim-live-")
    echo = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    for note in job["notes"]:
        echo(f"note: {note}")
    summary = execute(job, out_dir, shape=not args.no_shape, timeout_s=args.timeout,
                      stall_s=args.stall, trace_path=args.trace, echo=echo)
    print_result(summary, args.json)
    return 0


def run_command(program: str, args, run) -> int:
    """`run(args)` with every failure said in one line (or the failing worker's report) and
    the exit status of every hgsim command: 1 for bad input and failed runs, 130 on Ctrl-C;
    hgsim's warnings printed once, as plain lines (checks.Warnings)."""
    with checks.Warnings(args.scenario, plan_given=args.plan is not None) as warned:
        try:
            return run(args)
        except KeyboardInterrupt:
            # Workers and namespaces were removed as the interrupt unwound (supervisor, wan).
            print(f"{program}: interrupted", file=sys.stderr)
            return 130
        except (LiveError, hgsim.Error, WanSetupError) as e:
            checks.report(program, e, shown_warnings=warned.shown)
        except WorkerFailed as e:
            checks.report(program, e, prefix="the run failed")
        except OSError as e:
            where = f"'{checks.shown(e.filename)}': " if e.filename else ""
            checks.report(program, LiveError(f"{where}{e.strerror or e}"))
        finally:
            # Ctrl-C or a failure may leave the progress lines or summary in the buffer.
            try:
                sys.stdout.flush()
            except OSError:
                sys.stdout = open(os.devnull, "w")
        return 1


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("hgsim live", args, _run)


if __name__ == "__main__":
    sys.exit(main())
