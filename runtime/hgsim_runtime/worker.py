"""One live worker: one "GPU" of the plan, one process, one CPU thread (with streaming DiLoCo
a second one carries the outer all-reduces, outer.py).

    /usr/bin/python3 -m hgsim_runtime.worker --job JOB.json --rank R

`hgsim live` (runtime/hgsim_runtime/live.py) writes the job and starts one worker per GPU of
the plan; across real machines the same command runs with MASTER_ADDR, MASTER_PORT taken from
the environment. The worker joins torch.distributed (gloo), builds its shard of the model and
plays the plan's schedule for its stage, step after step:

- forward and backward of each micro-batch in the schedule's order (GPipe, 1F1B), receiving
  activations / sending them on, resharded between stages of different dp x tp in the resolved
  plan's pieces (the simulator's, sim/resolved_plan.hpp), coded with the scenario's
  `wan_activations` codec where they cross the WAN; without sequence parallelism a stage of
  tp > 1 then all-gathers the tp slices across tp, with it each tp rank keeps its slice (its
  tokens), as the simulator's `connect`; the tensor-parallel collectives inside a stage
  (model.py) are rings on a wire of their own;
- with sequence parallelism, the all-reduce across tp of the gradients of the norms and
  row-parallel biases (model.StageModule.reduce_sequence_parallel_gradients);
- after its last backward, the gradient sync of every segment of layers it holds, in buckets,
  with every GPU holding the same layers (ring, or hierarchical when they span clusters), coded
  with `wan_gradients` on the WAN hops, with error feedback;
- the optimizer step (Adam).

It writes its spans (rank<R>.spans.json) and per-step records (rank<R>.steps.jsonl) into the
job's output folder.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from hgsim import _hgsim

from . import checks
from . import comm
from .comm import ACTIVITY, TAG_ACTIVATIONS, TAG_GRADIENTS, TAG_KIND, TAG_RING, Wire, now
from .model import GptConfig, StageModule, TensorParallel
from .outer import OuterSync
from .plan import LiveError
from .trace import Discard, Recorder


@dataclass
class StageRef:
    pipeline: int
    replica: int
    stage: int


def schedule_ops(schedule: str, stages: int, stage: int, micro_batches: int) -> list[tuple]:
    """The order in which one stage runs forward (F) and backward (B) passes of its
    micro-batches: the simulator's schedule (models/schedule.hpp, through _hgsim), whose
    model chunks the live runner does not have (it refuses the interleaved schedule)."""
    return [(kind, mb) for kind, mb, _ in _hgsim.schedule(schedule, stages, stage, micro_batches)]


def data_seed(seed: int, step: int) -> int:
    """The seed of a step's batch offsets. Modulo 2^63 - 1, as model._generator's: every seed
    up to checks.MAX_SEED gives one torch takes (the seeds of the runs before were below the
    modulus and draw what they always drew)."""
    return (seed * 7919 + step) % (2**63 - 1)


class Worker:
    def __init__(self, job: dict, rank: int):
        self.job, self.rank = job, rank
        self.roles = job["ranks"]
        self.me = self.roles[rank]
        self.recorder = Recorder()
        self.cfg = GptConfig.of_job(job)
        self.pipeline = job["pipelines"][self.me["pipeline"]]
        self.stages = self.pipeline["stages"]
        self.stage = self.stages[self.me["stage"]]
        self.first = self.me["stage"] == 0
        self.last = self.me["stage"] == len(self.stages) - 1
        self.micro_batch = job["micro_batch"]
        self.cluster_of = [r["cluster"] for r in self.roles]

    # ---- set-up -----------------------------------------------------------------------------

    def rank_of(self, stage: int, dp: int, tp: int) -> int:
        me = self.me
        for r in self.roles:
            if (r["pipeline"], r["replica"], r["stage"], r["dp"], r["tp"]) == (
                    me["pipeline"], me["replica"], stage, dp, tp):
                return r["rank"]
        raise KeyError((stage, dp, tp))

    def make_groups(self):
        """Every rank creates every tensor-parallel group, in one order (torch.distributed's
        rule); each keeps its own."""
        groups: dict[tuple, list[int]] = {}
        for r in self.roles:
            key = (r["pipeline"], r["replica"], r["stage"], r["dp"])
            groups.setdefault(key, []).append(r["rank"])
        self.tp_group, self.tp_members = None, [self.rank]
        for key in sorted(groups):
            ranks = sorted(groups[key], key=lambda x: self.roles[x]["tp"])
            if len(ranks) < 2:
                continue
            group = dist.new_group(ranks)
            if self.rank in ranks:
                self.tp_group, self.tp_members = group, ranks

    def build(self):
        torch.manual_seed(self.job["seed"])
        self.make_groups()
        comm.Directions.create()
        first_layer = sum(s["layers"] for s in self.stages[: self.me["stage"]])
        # A stage lies in one cluster: its collectives never cross the WAN, nothing is coded.
        tp_wire = Wire(self.rank, self.cluster_of, None, self.cfg.hidden, Discard())
        self.tp = TensorParallel(self.me["tp"], self.stage["tp"], tp_wire, self.tp_members,
                                 sequence_parallel=self.job.get("sequence_parallel", False))
        self.tp.recorder = self.recorder
        self.module = StageModule(self.cfg, first_layer, self.stage["layers"], self.first,
                                  self.last, self.job["seed"], self.tp)
        self.optimizer = torch.optim.Adam(self.module.parameters(), lr=self.job["lr"])
        compression = self.job.get("compression", {})
        h = self.cfg.hidden
        self.activation_wire = Wire(self.rank, self.cluster_of, compression.get("wan_activations"),
                                    h, self.recorder)
        self.gradient_wire = Wire(self.rank, self.cluster_of, compression.get("wan_gradients"),
                                  h, self.recorder)
        corpus = np.fromfile(self.job["corpus"], dtype=np.uint8)
        if corpus.size < self.cfg.seq_len + 2:
            raise SystemExit(f"corpus {self.job['corpus']}: {corpus.size} bytes, need more than "
                             f"seq_len + 1 = {self.cfg.seq_len + 1}")
        self.corpus = torch.from_numpy(corpus.astype(np.int64))
        spec = self.job.get("outer_sync")
        self.outer = OuterSync(self, spec) if spec else None

    # ---- data -------------------------------------------------------------------------------

    def batch(self, step: int, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Input and target bytes of this rank's dp slice of micro-batch `mb` in `step`: the
        global batch draws its sequences at random offsets (seeded by step), in the order
        pipelines, replicas, micro-batches, sequences."""
        job, me = self.job, self.me
        g = torch.Generator().manual_seed(data_seed(job["seed"], step))
        n = sum(p["replicas"] * p["micro_batches"] for p in job["pipelines"]) * self.micro_batch
        offsets = torch.randint(0, self.corpus.numel() - self.cfg.seq_len - 1, (n,), generator=g)
        base = sum(p["replicas"] * p["micro_batches"]
                   for p in job["pipelines"][: me["pipeline"]]) * self.micro_batch
        base += (me["replica"] * self.pipeline["micro_batches"] + mb) * self.micro_batch
        per_dp = self.micro_batch // self.stage["dp"]
        base += me["dp"] * per_dp
        rows = offsets[base: base + per_dp]
        index = rows[:, None] + torch.arange(self.cfg.seq_len + 1)[None, :]
        window = self.corpus[index]
        return window[:, :-1], window[:, 1:]

    # ---- stage boundaries (resharding) ------------------------------------------------------

    def boundary_elements(self) -> int:
        return self.micro_batch * self.cfg.seq_len * self.cfg.hidden

    def my_slice(self) -> tuple[int, int]:
        """[start, end) of this rank's slice of the boundary tensor: 1 / (dp x tp) of it, dp
        major, tp minor (the reshard pieces' slices)."""
        n, n_me = self.boundary_elements(), self.stage["dp"] * self.stage["tp"]
        k = self.me["dp"] * self.stage["tp"] + self.me["tp"]
        return k * n // n_me, (k + 1) * n // n_me

    def held(self) -> tuple[int, int]:
        """[start, end) of the boundary tensor this rank's stage output holds: its slice with
        sequence parallelism (its tokens), else its dp slice whole."""
        if self.tp.splits_sequence:
            return self.my_slice()
        n, dp = self.boundary_elements(), self.stage["dp"]
        return self.me["dp"] * n // dp, (self.me["dp"] + 1) * n // dp

    def overlaps(self, other_stage: int):
        """The pieces of the boundary tensor (flattened, n values) this rank exchanges with
        `other_stage`: the resolved plan's reshard pieces of that boundary (the simulator's,
        sim/resolved_plan.hpp), where each side's slices are dp-major, tp-minor; yields
        (peer, start, end, my slice, its slice) for every piece of my slice."""
        n = self.boundary_elements()
        s = self.me["stage"]
        forward = other_stage == s + 1  # else the boundary from other_stage to this stage
        pieces = self.job["reshard"][self.me["pipeline"]][s if forward else other_stage]
        other = self.stages[other_stage]
        mine = self.me["dp"] * self.stage["tp"] + self.me["tp"]
        for from_slice, to_slice, begin, end, units in pieces:
            ours, theirs = (from_slice, to_slice) if forward else (to_slice, from_slice)
            if ours != mine:
                continue
            peer = self.rank_of(other_stage, theirs // other["tp"], theirs % other["tp"])
            yield peer, begin * n // units, end * n // units, mine, theirs

    def send_boundary(self, flat: torch.Tensor, to_stage: int, tag: int, label: str):
        """Sends this rank's tp slice of the boundary tensor to the ranks of `to_stage` whose
        slices overlap it; `flat` is what this rank holds (`held`)."""
        offset = self.held()[0]
        for peer, a, b, mine, theirs in self.overlaps(to_stage):
            self.activation_wire.send(flat[a - offset: b - offset], peer, tag,
                                      (tag, mine, theirs), label, "pp_comm")

    def post_boundary(self, from_stage: int, tag: int, label: str) -> tuple:
        """Posts the receives of this rank's tp slice of the boundary tensor from
        `from_stage` (one per overlapping sender slice); recv_boundary waits for them."""
        lo, hi = self.my_slice()
        mine = torch.empty(hi - lo)
        posted = [self.activation_wire.post_recv(mine[a - lo: b - lo], peer, tag, label)
                  for peer, a, b, _, _ in self.overlaps(from_stage)]
        return mine, posted

    def recv_boundary(self, posted_boundary: tuple) -> torch.Tensor:
        """What this rank holds of a boundary tensor (`held`): its posted pieces, then,
        without sequence parallelism, an all-gather of the tp slices across its tp group."""
        mine, posted = posted_boundary
        for p in posted:
            self.activation_wire.wait_recv(p, "pp_comm")
        if self.stage["tp"] == 1 or self.tp.splits_sequence:
            return mine
        t0 = now()
        parts = [torch.empty_like(mine) for _ in range(self.stage["tp"])]
        dist.all_gather(parts, mine, group=self.tp_group)
        self.recorder.span("gather activations across tp", "pp_comm", 1, t0, now())
        return torch.cat(parts)

    # ---- one step ---------------------------------------------------------------------------

    def run_step(self, step: int) -> dict:
        s, p = self.me["stage"], len(self.stages)
        m = self.pipeline["micro_batches"]
        per_dp = self.micro_batch // self.stage["dp"]
        shape = (per_dp, self.cfg.seq_len, self.cfg.hidden)
        if self.tp.splits_sequence:  # the rank's tokens
            shape = (per_dp * self.cfg.seq_len // self.stage["tp"], self.cfg.hidden)
        # The loss is the mean over the batch whose gradients are summed: the global batch,
        # or with outer sync the island's (islands step on their own).
        batch = self.job["global_batch"] if self.outer is None else \
            self.pipeline["replicas"] * self.pipeline["micro_batches"] * self.micro_batch
        scale = 1.0 / (batch * self.cfg.seq_len)
        saved, loss_sum, compute_s = {}, 0.0, 0.0
        first_span = len(self.recorder.spans)
        # Every receive of the step is posted now, so that each transfer starts as soon as
        # its sender sends (see Wire.post_recv).
        activations, gradients = {}, {}
        for mb in range(m):
            if not self.first:
                activations[mb] = self.post_boundary(
                    s - 1, TAG_ACTIVATIONS * TAG_KIND + mb,
                    f"activations stage {s - 1} -> {s} mb {mb}")
            if not self.last:
                gradients[mb] = self.post_boundary(
                    s + 1, TAG_GRADIENTS * TAG_KIND + mb, f"gradients stage {s + 1} -> {s} mb {mb}")
        for op, mb in schedule_ops(self.job["schedule"], p, s, m):
            if op == "F":
                tokens, targets = self.batch(step, mb)
                if self.first:
                    x = tokens
                else:
                    x = self.recv_boundary(activations.pop(mb))
                    x = x.view(shape).requires_grad_()
                ACTIVITY.set(f"forward stage {s} mb {mb}")
                t0 = now()
                out = self.module(x, targets if self.last else None)
                t1 = now()
                self.recorder.span(f"forward stage {s} mb {mb}", "forward", 0, t0, t1)
                compute_s += t1 - t0
                if self.last:
                    loss_sum += out.item()
                    out = out * scale
                else:
                    self.send_boundary(out.detach().reshape(-1), s + 1,
                                       TAG_ACTIVATIONS * TAG_KIND + mb,
                                       f"activations stage {s} -> {s + 1} mb {mb}")
                saved[mb] = (x, out)
            else:
                x, out = saved.pop(mb)
                if self.last:
                    grad = None
                else:
                    grad = self.recv_boundary(gradients.pop(mb))
                    grad = grad.view(shape)
                ACTIVITY.set(f"backward stage {s} mb {mb}")
                t0 = now()
                out.backward(grad)
                t1 = now()
                self.recorder.span(f"backward stage {s} mb {mb}", "backward", 0, t0, t1)
                compute_s += t1 - t0
                if not self.first:
                    self.send_boundary(x.grad.reshape(-1), s - 1, TAG_GRADIENTS * TAG_KIND + mb,
                                       f"gradients stage {s} -> {s - 1} mb {mb}")
            self.activation_wire.poll()
        if self.tp.splits_sequence:
            ACTIVITY.set(f"sequence-parallel gradients stage {s}")
            self.module.reduce_sequence_parallel_gradients()
        self.sync_gradients()
        ACTIVITY.set(f"optimizer stage {s}")
        t0 = now()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        t1 = now()
        self.recorder.span(f"optimizer stage {s}", "optimizer", 0, t0, t1)
        compute_s += t1 - t0
        self.activation_wire.drain()
        report_loss = self.last and self.me["tp"] == 0
        return {"loss_sum": loss_sum if report_loss else 0.0,
                "tokens": (m * per_dp * self.cfg.seq_len) if report_loss else 0,
                "compute_s": compute_s,
                "tp_comm_s": sum(sp[4] - sp[3] for sp in self.recorder.spans[first_span:]
                                 if sp[1] == "tp_comm")}

    # ---- gradient sync ----------------------------------------------------------------------

    def holders(self, segment: dict) -> list[list[int]]:
        """The members of this rank's ring for a segment, grouped by cluster (clusters in
        scenario order): the rank with this tp index in every dp group of every replica of
        every pipeline's holding stage, in placement order."""
        members = []
        for r in self.roles:
            if (r["stage"] == segment["holders"][r["pipeline"]] and r["tp"] == self.me["tp"]
                    and (self.outer is None or r["pipeline"] == self.me["pipeline"])):
                # With outer sync (DiLoCo) every step synchronises inside the island only.
                members.append(r["rank"])
        clusters = self.job["clusters"]
        return [[x for x in members if self.cluster_of[x] == c] for c in clusters
                if any(self.cluster_of[x] == c for x in members)]

    def bucket_plan(self) -> list[tuple[dict, int, int]]:
        """(segment, first bucket number, buckets) for every segment whose gradients are
        synced, in the simulator's order (last layers first) and numbering, both from the
        resolved plan: every rank numbers every bucket alike, so tags and names agree."""
        return [(segment, segment["first_bucket"], segment["buckets"])
                for segment in reversed(self.job["segments"]) if segment["buckets"] > 0]

    def sync_gradients(self):
        algorithm = self.job["grad_sync"]["algorithm"]
        for segment, first_bucket, count in self.bucket_plan():
            if segment["holders"][self.me["pipeline"]] != self.me["stage"]:
                continue
            by_cluster = self.holders(segment)
            members = [x for c in by_cluster for x in c]
            params = self.module.segment_parameters(segment["first_layer"], segment["layers"])
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            if flat.numel() != self.cfg.segment_parameters(segment["first_layer"],
                                                           segment["layers"], self.stage["tp"]):
                raise RuntimeError("gradient sync: segment parameter count disagrees with "
                                   "GptConfig.segment_parameters")
            for b, (b0, b1) in enumerate(comm.intervals(flat.numel(), count)):
                if b1 <= b0:
                    continue
                number = first_bucket + b
                name = f"dp bucket {number}"
                tag = TAG_RING * TAG_KIND + (number % 900) * 1000
                piece = flat[b0:b1]
                if len(by_cluster) > 1 and algorithm == "hierarchical":
                    comm.hierarchical_all_reduce(self.gradient_wire, piece, by_cluster, tag,
                                                 number, name)
                else:
                    comm.ring_all_reduce(self.gradient_wire, piece, members, tag, number, name)
            at = 0
            for p in params:
                n = p.grad.numel()
                p.grad.copy_(flat[at: at + n].view_as(p.grad))
                at += n

    def named_weights(self) -> dict:
        """This rank's parameters named by model layer ("blocks.<layer>.<name>"), for tests
        that compare them with a model held whole."""
        out = {}
        first = self.module.first_layer
        for name, p in self.module.named_parameters():
            if name.startswith("blocks."):
                _, i, rest = name.split(".", 2)
                name = f"blocks.{first + int(i)}.{rest}"
            out[name] = p.detach().clone()
        return out

    # ---- profiling in the run ------------------------------------------------------------------

    def profile_between_steps(self) -> dict:
        """One layer's forward and backward (this rank's shard, collectives left out), the
        head's on the last stage, and an Adam step over as many parameters as this rank
        holds: timed after each step, outside it, while every other worker does the same. The
        cores of a shared machine change speed over seconds; timed here, the layer costs the
        simulator gets are those of the run's own seconds (`hgsim validate live`)."""
        from .profile import profile_shapes_once
        if not hasattr(self, "_profiler"):
            self._profiler = profile_shapes_once(self.cfg, self.job["seed"],
                                                 self.micro_batch // self.stage["dp"],
                                                 self.stage["tp"], self.last,
                                                 sum(p.numel() for p in self.module.parameters()))
        return self._profiler()

    # ---- the run ----------------------------------------------------------------------------

    def run(self):
        out_dir = self.job["out_dir"]
        fail = self.job.get("inject_failure")
        steps_file = open(os.path.join(out_dir, f"rank{self.rank}.steps.jsonl"), "w")
        # Streaming DiLoCo with overlap_steps = inner_steps / fragments starts fragment 0's
        # sync before the first step (its records come with the step it applies after).
        early = self.outer.after_step(0) if self.outer is not None else []
        for step in range(self.job["steps"]):
            if fail and fail["rank"] == self.rank and fail["step"] == step:
                print(f"injected failure: {fail['mode']} at step {step}", flush=True)
                if fail["mode"] == "crash":
                    os._exit(3)
                ACTIVITY.set("injected hang")
                while True:
                    time.sleep(3600)
            ACTIVITY.set(f"barrier before step {step}", -1)
            dist.barrier()
            start = now()
            record = self.run_step(step)
            if self.outer is not None:
                record["outer_syncs"] = early + self.outer.after_step(step + 1)
                early = []
                if step + 1 == self.job["steps"]:
                    record["outer_syncs"] += self.outer.finish()
            end = now()
            # Replicas of a stage shard must hold identical weights (tests compare this).
            record["weights_checksum"] = float(sum(p.detach().double().sum()
                                                   for p in self.module.parameters()))
            if self.job.get("profile_between_steps"):
                record["profile"] = self.profile_between_steps()
            wires = [self.activation_wire, self.gradient_wire] + (
                [self.outer.wire] if self.outer is not None else [])
            record.update(step=step, rank=self.rank, start=start, end=end,
                          wan_raw_bytes=sum(w.wan_raw_bytes for w in wires),
                          wan_wire_bytes=sum(w.wan_wire_bytes for w in wires))
            steps_file.write(json.dumps(record) + "\n")
            steps_file.flush()
            loss = (f" loss {record['loss_sum'] / record['tokens']:.4f}"
                    if record["tokens"] else "")
            print(f"PROGRESS step {step + 1}/{self.job['steps']}{loss} (rank {self.rank}'s step: "
                  f"{end - start:.3f} s)", flush=True)
        dist.barrier()
        self.recorder.dump(os.path.join(out_dir, f"rank{self.rank}.spans.json"))
        if self.job.get("dump_weights"):
            torch.save(self.named_weights(), os.path.join(out_dir, f"rank{self.rank}.weights.pt"))
        steps_file.close()


def watchdog(stall_s: float):
    """Prints one STALLED line when the main thread has been doing the same thing for
    `stall_s`: what, and which rank it waits for, so that the runner can tell the rank that
    hangs from the ranks that wait for it (live.py `find_culprit`)."""
    reported = None
    while True:
        time.sleep(min(1.0, stall_s / 4))
        since, what, peer = ACTIVITY.describe()
        if now() - since >= stall_s and reported != since:
            waiting = "" if peer is None else (" waiting for all ranks" if peer < 0
                                              else f" waiting for rank {peer}")
            print(f"STALLED {now() - since:.0f} s: {what};{waiting}", flush=True)
            reported = since


def setup(argv=None) -> tuple[dict, int, str, str]:
    """The job, this worker's rank and rank 0's address and port, from the command line and
    the torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each
    checked before anything starts: LiveError saying which and why."""
    parser = checks.Parser(prog="hgsim_runtime.worker")
    parser.add_argument("--job", required=True)
    parser.add_argument("--rank", default=None, help="this worker's rank (default: $RANK)")
    args = parser.parse_args(argv)
    job = checks.read_job(args.job)
    world = len(job["ranks"])
    rank = None if args.rank is None else checks.integer("--rank", args.rank, 0, world - 1)
    rank, address, port = checks.worker_environment(os.environ, world, rank)
    if not isinstance(job.get("out_dir"), str):
        raise LiveError(f"'{checks.shown(args.job)}': not a job a worker can run: no "
                        "out_dir (written by `hgsim live --prepare-only`)")
    job["timeout_s"] = checks.seconds("the job's timeout_s", job.get("timeout_s"))
    address = address or job.get("master_addr", "127.0.0.1")
    port = port or checks.integer("the job's master_port", job.get("master_port", 29500), 1,
                                  checks.MAX_PORT)
    os.makedirs(job["out_dir"], exist_ok=True)
    return job, rank, address, str(port)


def main(argv=None):
    try:
        job, rank, addr, port = setup(argv)
    except LiveError as e:
        raise SystemExit(f"hgsim_runtime.worker: error: {e}") from None
    except OSError as e:
        raise SystemExit(f"hgsim_runtime.worker: error: '{checks.shown(e.filename)}': "
                         f"{e.strerror}") from None
    torch.set_num_threads(1)
    world = len(job["ranks"])
    if job.get("pin_cores"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    print(f"rank {rank}/{world} joining tcp://{addr}:{port} "
          f"(iface {os.environ.get('GLOO_SOCKET_IFNAME', 'default')})", flush=True)
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=job["timeout_s"]))
    if job.get("stall_s"):
        import threading
        threading.Thread(target=watchdog, args=(job["stall_s"] / 2,), daemon=True).start()
    worker = Worker(job, rank)
    worker.build()
    worker.run()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
