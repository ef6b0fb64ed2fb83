#!/usr/bin/python3
"""Writes the notebooks of this folder from the readable source below (one list of cells
per notebook). Edit here, then run `/usr/bin/python3 notebooks/make_notebooks.py`; the
.ipynb files are committed without outputs (`make notebooks` executes them)."""
import os

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = '''\
%matplotlib inline
import json, os, tempfile
import matplotlib.pyplot as plt
import hgsim  # from PYTHONPATH: `make notebooks` points it at build/release/python
ROOT = os.path.abspath(os.path.join(os.getcwd(), ".."))  # notebooks run in notebooks/
'''


def nb(name, cells):
    book = new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                   "language": "python"}
    book.cells = [new_markdown_cell(c[3:]) if c.startswith("md:") else new_code_cell(c)
                  for c in cells]
    for i, cell in enumerate(book.cells):
        cell["id"] = f"{name[:20]}-{i}"
    nbformat.write(book, os.path.join(HERE, name + ".ipynb"))


# ---- 1. pipeline schedules and bubbles --------------------------------------------------
nb("01-pipeline-schedules", [
    """md:# Pipeline schedules and their bubbles

A pipeline of `p` stages runs `m` micro-batches. In GPipe every stage does all its forwards,
then all its backwards; in 1F1B (PipeDream-Flush) a stage alternates one forward and one
backward after a warm-up, which bounds the activations it holds; the interleaved schedule
gives each GPU `v` smaller stages. With equal stages the idle share of a stage's time (the
*bubble*) has a closed form:

* GPipe and 1F1B: `(p - 1) / (m + p - 1)`
* interleaved with `v` virtual stages: `(p - 1) / (v m + p - 1)`

Here the simulator plays each schedule on `p` GPUs joined by links so fast that transfers
cost nothing (the closed forms' setting), and we compare.""",
    SETUP,
    '''def pipeline(schedule, p=4, m=8, v=1):
    """p single-GPU stages of 16/p layers each (a small vocabulary, so that the first and
    last stages are barely heavier) on a network that costs nothing."""
    return {
        "name": f"{schedule}-p{p}-m{m}",
        "model": {"name": "mid", "layers": 16, "hidden": 2048, "heads": 16, "vocab": 1000},
        "training": {"global_batch": m, "seq_len": 1024, "precision": "bf16"},
        "clusters": [{"name": "c", "gpu": "H100-80GB-SXM", "nodes": p, "gpus_per_node": 1,
                      "nvlink": {"bandwidth": "450GB/s", "latency": "0s"},
                      "nic": {"bandwidth": "1000TB/s", "latency": "0s"}}],
        "strategy": {"schedule": schedule, "virtual_stages": v, "micro_batch": 1,
                     "pipelines": [{"micro_batches": m,
                                    "stages": [{"cluster": "c", "layers": 16 // p}] * p}]},
    }

def bubble_share(result):
    """The simulated bubble: the share of the iteration a stage does not compute (mean over
    the stages; the network costs nothing here)."""
    T = result["iteration_time_s"]
    return sum(1 - d["compute_s"] / T for d in result["devices"]) / len(result["devices"])

def closed_form(schedule, p, m, v=1):
    return (p - 1) / ((v if schedule == "interleaved" else 1) * m + p - 1)''',
    '''p = 4
rows = []
for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
    for m in (4, 8, 16, 32):
        r = hgsim.simulate(pipeline(schedule, p, m, v))
        rows.append((schedule, m, bubble_share(r), closed_form(schedule, p, m, v),
                     r["iteration_time_s"]))
print(f"{'schedule':12} {'m':>3} {'simulated':>10} {'closed form':>12} {'iteration':>10}")
for s, m, sim, cf, t in rows:
    print(f"{s:12} {m:3d} {sim:10.3f} {cf:12.3f} {t * 1e3:8.2f} ms")''',
    '''fig, ax = plt.subplots(figsize=(6, 4))
for schedule, marker in (("gpipe", "o"), ("1f1b", "s"), ("interleaved", "^")):
    ms = [r[1] for r in rows if r[0] == schedule]
    ax.plot(ms, [r[3] for r in rows if r[0] == schedule], "--", color="gray")
    ax.plot(ms, [r[2] for r in rows if r[0] == schedule], marker, label=f"{schedule} (simulated)")
ax.set_xscale("log", base=2)
ax.set_xlabel("micro-batches m")
ax.set_ylabel("bubble share of a stage's span")
ax.set_title(f"p = {p} stages; dashed: closed forms")
ax.legend();''',
    """md:The simulated shares follow the closed forms; what is left between them is the optimizer
step, computed once per iteration after the last backward (it counts as compute, so the
simulated share sits a little below the closed form when `m` is small), and the last
stage's output layer, which makes it slightly heavier. Now the timelines, from the Chrome trace the simulator writes (the same file
opens in Perfetto):""",
    '''def timeline(schedule, ax, p=4, m=8, v=1):
    trace_file = os.path.join(tempfile.mkdtemp(), "trace.json")
    r = hgsim.simulate(pipeline(schedule, p, m, v), trace=trace_file)
    with open(trace_file) as f:
        events = json.load(f)["traceEvents"]
    colours = {"forward": "tab:blue", "backward": "tab:orange", "optimizer": "tab:green",
               "bubble": "lightgray"}
    for e in events:
        if e.get("ph") != "X" or e["tid"] % 2 or e["cat"] not in colours:
            continue  # compute tracks only (even thread ids)
        ax.broken_barh([(e["ts"] / 1e3, e["dur"] / 1e3)], (e["tid"] // 2 - 0.4, 0.8),
                       color=colours[e["cat"]], edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {s}" for s in range(p)])
    ax.invert_yaxis()
    ax.set_title(f"{schedule}: {r['iteration_time_s'] * 1e3:.2f} ms")

fig, axes = plt.subplots(3, 1, figsize=(9, 6), sharex=True)
for ax, (schedule, v) in zip(axes, (("gpipe", 1), ("1f1b", 1), ("interleaved", 2))):
    timeline(schedule, ax, v=v)
axes[-1].set_xlabel("ms (blue forward, orange backward, gray bubble)")
fig.tight_layout()''',
])

# ---- 2. geo-distribution ----------------------------------------------------------------
nb("02-geo-distribution", [
    """md:# Where geo-distribution stops hurting

Two sites with one 4-GPU node each, joined by a WAN. Two ways to use both:

* **pipeline across**: one pipeline, its first half in one site, its second in the other;
  only activations (and their gradients) cross the WAN, once per micro-batch;
* **data parallel across**: a full replica in each site; every iteration's gradients are
  all-reduced across the WAN.

Activations per micro-batch are far smaller than the model's gradients, so at low bandwidth
the pipeline wins; at high bandwidth data parallelism wins (no pipeline bubble). Where is
the crossover, and what do latency and the TCP window change?""",
    SETUP,
    '''MODEL = {"name": "gpt-small", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000}

def two_sites(plan, bandwidth="10Gbps", latency="10ms", window="1GiB"):
    """8 sequences of 4096 tokens per iteration; a TCP window (per flow) large enough not
    to cap the WAN unless `window` says otherwise."""
    cluster = lambda name: {"name": name, "gpu": "A100-80GB-SXM", "nodes": 1, "gpus_per_node": 4,
                            "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                            "nic": {"bandwidth": "200Gbps", "latency": "2us"}}
    if plan == "pipeline across":
        pipelines = [{"micro_batches": 8, "stages": [{"cluster": "a", "tp": 4, "layers": 4},
                                                     {"cluster": "b", "tp": 4, "layers": 4}]}]
    else:
        pipelines = [{"micro_batches": 4, "stages": [{"cluster": "a", "tp": 4, "layers": 8}]},
                     {"micro_batches": 4, "stages": [{"cluster": "b", "tp": 4, "layers": 8}]}]
    s = {"name": plan, "model": MODEL,
         "training": {"global_batch": 8, "seq_len": 4096, "precision": "bf16"},
         "clusters": [cluster("a"), cluster("b")],
         "wan": [{"between": ["a", "b"], "bandwidth": bandwidth, "latency": latency}],
         "strategy": {"schedule": "1f1b", "micro_batch": 1, "pipelines": pipelines,
                      "grad_sync": {"algorithm": "ring", "bucket": "25MB"}},
         "simulation": {"tcp_window": window}}
    return s

PLANS = ("pipeline across", "data parallel across")''',
    '''bandwidths = ["300Mbps", "1Gbps", "3Gbps", "10Gbps", "30Gbps", "100Gbps", "400Gbps"]
gbps = [hgsim.parse_quantity(b, "bandwidth") * 8e-9 for b in bandwidths]
by_bandwidth = {plan: [hgsim.simulate(two_sites(plan, b))["iteration_time_s"]
                       for b in bandwidths] for plan in PLANS}
fig, ax = plt.subplots(figsize=(6, 4))
for plan, times in by_bandwidth.items():
    ax.plot(gbps, times, "o-", label=plan)
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("WAN bandwidth (Gbit/s), 10 ms"); ax.set_ylabel("iteration (s, simulated)")
ax.legend(); ax.set_title("pipeline across vs data parallel across")
crossing = [g for g, p, d in zip(gbps, *by_bandwidth.values()) if d < p]
print("data parallel across is faster from", crossing[0] if crossing else "none of these",
      "Gbit/s on")''',
    '''latencies = ["1ms", "10ms", "30ms", "100ms"]
ms = [hgsim.parse_quantity(l, "duration") * 1e3 for l in latencies]
fig, ax = plt.subplots(figsize=(6, 4))
for plan in PLANS:
    ax.plot(ms, [hgsim.simulate(two_sites(plan, "10Gbps", l))["iteration_time_s"]
                 for l in latencies], "o-", label=plan)
ax.set_xscale("log"); ax.set_xlabel("WAN latency (ms), 10 Gbit/s")
ax.set_ylabel("iteration (s, simulated)"); ax.legend();''',
    """md:**The TCP window.** One TCP flow cannot carry more than its window per round trip:
`window / RTT`. Over a long fat pipe this caps the data-parallel all-reduce long before the
link's bandwidth does (the simulator models the window as a per-flow cap,
`simulation.tcp_window`).""",
    '''windows = ["1MiB", "4MiB", "16MiB", "64MiB", "256MiB"]
latency = "50ms"
times = [hgsim.simulate(two_sites("data parallel across", "10Gbps", latency, w))["iteration_time_s"]
         for w in windows]
cap = [hgsim.parse_quantity(w, "bytes") * 8e-9 / (2 * hgsim.parse_quantity(latency, "duration"))
       for w in windows]
fig, ax1 = plt.subplots(figsize=(6, 4))
ax1.plot(windows, times, "o-", label="iteration (simulated)")
ax1.set_ylabel("iteration (s)"); ax1.set_xlabel(f"TCP window, 10 Gbit/s, {latency}")
ax2 = ax1.twinx()
ax2.plot(windows, cap, "s--", color="gray", label="window / RTT")
ax2.set_ylabel("one flow's cap (Gbit/s)")
fig.legend(loc="upper center");''',
])

# ---- 3. compression ---------------------------------------------------------------------
nb("03-compression", [
    """md:# Compression on the WAN: bytes, time and loss

What a codec saves in bytes is exact (the codecs' encoded size), what it saves in time
depends on how WAN-bound the plan is (the simulator), and what it costs in accuracy is
measured by training (the live runner's convergence runs, `validation/convergence.csv`).""",
    SETUP,
    '''shape = (4096, 1024)
raw = 4 * shape[0] * shape[1]
names, ratios = [], []
for c in hgsim.codecs():
    names.append(c["name"])
    ratios.append(hgsim.encoded_bytes(c["name"], shape) / raw)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.bar(names, ratios)
ax.set_yscale("log"); ax.set_ylabel("encoded / fp32 bytes")
ax.set_title(f"a {shape[0]}x{shape[1]} tensor, each codec's defaults (exact sizes)")
plt.xticks(rotation=45);''',
    '''def wan_bound(codec):
    """A 1F1B pipeline across a 1 Gbit/s WAN: activations cross it every micro-batch."""
    cluster = lambda name, gpu: {"name": name, "gpu": gpu, "nodes": 1, "gpus_per_node": 1,
                                 "nvlink": {"bandwidth": "300GB/s", "latency": "1us"},
                                 "nic": {"bandwidth": "100Gbps", "latency": "2us"}}
    return {"name": f"wan-bound-{codec}",
            "model": {"name": "small", "layers": 8, "hidden": 1024, "heads": 16, "vocab": 32000},
            "training": {"global_batch": 16, "seq_len": 1024, "precision": "bf16"},
            "clusters": [cluster("a", "A100-80GB-SXM"), cluster("b", "A100-80GB-SXM")],
            "wan": [{"between": ["a", "b"], "bandwidth": "1Gbps", "latency": "20ms"}],
            "strategy": {"schedule": "1f1b", "micro_batch": 1, "pipelines": [
                {"micro_batches": 16, "stages": [{"cluster": "a", "layers": 4},
                                                 {"cluster": "b", "layers": 4}]}]},
            "compression": {"wan_activations": codec, "wan_gradients": "none"}}

codecs = ["none", "fp16", "fp8-e4m3", "int8", "int4"]
results = {c: hgsim.simulate(wan_bound(c)) for c in codecs}
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(codecs, [results[c]["iteration_time_s"] for c in codecs])
ax.set_ylabel("iteration (s, simulated)"); ax.set_title("WAN activations codec, 1 Gbit/s")
for c in codecs:
    act = results[c]["compression"]
    print(c, json.dumps(act)[:160])''',
    """md:And the price in loss, from the live runner: the same model, seed and data trained for
400 steps under each setting across an emulated WAN (`validation/convergence.py`; see
`validation/convergence.md`).""",
    '''import csv
with open(os.path.join(ROOT, "validation", "convergence.csv")) as f:
    table = list(csv.DictReader(f))
settings = [k for k in table[0] if k != "step"]
steps = [int(r["step"]) for r in table]
def smooth(values, n=20):
    return [sum(values[max(0, i - n + 1):i + 1]) / len(values[max(0, i - n + 1):i + 1])
            for i in range(len(values))]
fig, ax = plt.subplots(figsize=(7, 4))
for s in settings:
    ax.plot(steps, smooth([float(r[s]) for r in table]), label=s)
ax.set_xlabel("step"); ax.set_ylabel("loss (nats/byte, mean of 20 steps)")
ax.legend(fontsize="small")
for s in settings:
    last = [float(r[s]) for r in table[-40:]]
    print(f"{s:60s} final loss {sum(last) / len(last):.4f}")''',
])

# ---- 4. the planner ---------------------------------------------------------------------
nb("04-planner", [
    """md:# The planner

`hgsim.plan` searches heterogeneous plans (per-cluster stages with their own tensor- and
data-parallel degrees and layer counts, replicas taking unequal shares of the batch) with
an analytic cost model, simulates the best few and keeps the fastest; with
`baselines=True` it also plans and simulates Megatron-style, data-parallel-only, uniform
pipeline, Metis-like and DT-FM-like plans. Here on two unlike clusters: four A100s and
eight T4s, a WAN between them.""",
    SETUP,
    '''scenario = {
    "name": "a100-and-t4",
    "model": {"name": "gpt-1b", "layers": 16, "hidden": 2048, "heads": 16, "vocab": 32000},
    "training": {"global_batch": 64, "seq_len": 1024, "precision": "fp16", "recompute": "selective"},
    "clusters": [
        {"name": "fast", "gpu": "A100-80GB-SXM", "nodes": 1, "gpus_per_node": 4,
         "nvlink": {"bandwidth": "300GB/s", "latency": "1us"}, "nic": {"bandwidth": "200Gbps", "latency": "2us"}},
        {"name": "slow", "gpu": "T4-16GB", "nodes": 2, "gpus_per_node": 4,
         "nvlink": {"bandwidth": "16GB/s", "latency": "5us"}, "nic": {"bandwidth": "25Gbps", "latency": "5us"}}],
    "wan": [{"between": ["fast", "slow"], "bandwidth": "5Gbps", "latency": "10ms"}],
    "strategy": "auto",
    "simulation": {"fidelity": "folded"},
}
result = hgsim.plan(scenario, time_budget_s=4, verify=3, baselines=True)
best = result["best"]
print(best["description"])
print(f"{best['iteration_time_s']:.3f} s per iteration (simulated), "
      f"{result['search']['candidates_evaluated']} candidates costed in {result['search']['search_s']:.1f} s")''',
    """md:**The search space and the model.** The best candidates by the analytic model, and for
the ones simulated, the model's prediction against the simulator's time:""",
    '''fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
ranked = result["ranked"]
a1.barh(range(len(ranked)), [r["analytic_time_s"] for r in ranked])
a1.set_yticks(range(len(ranked)))
a1.set_yticklabels([r["description"][:48] for r in ranked], fontsize=6)
a1.invert_yaxis(); a1.set_xlabel("analytic iteration (s)"); a1.set_title("best candidates")
points = [(v["analytic_time_s"], v["simulated_time_s"], "planner") for v in result["verified"]]
points += [(b["analytic_time_s"], b["iteration_time_s"], b["name"]) for b in result["baselines"]
           if b["feasible"]]
for a, s, name in points:
    a2.scatter(s, a)
    a2.annotate(name, (s, a), fontsize=7)
top = max(max(p[0], p[1]) for p in points) * 1.1
a2.plot([0, top], [0, top], "--", color="gray")
a2.set_xlabel("simulated (s)"); a2.set_ylabel("analytic model (s)"); a2.set_title("model vs simulation")
fig.tight_layout()''',
    '''names = ["planner"] + [b["name"] for b in result["baselines"]]
times = [best["iteration_time_s"]] + [b["iteration_time_s"] or 0 for b in result["baselines"]]
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.bar(names, times, color=["tab:green"] + ["tab:gray"] * (len(names) - 1))
ax.set_ylabel("iteration (s, simulated)"); ax.set_title("planner against the baselines (0: no feasible plan)")
plt.xticks(rotation=30)
for b in result["baselines"]:
    if not b["feasible"]:
        print(b["name"], "infeasible:", b["why"])''',
    """md:**Heterogeneous stages and unequal shares.** The chosen plan's pipelines: each stage's
cluster, GPU, parallel degrees and layers, and how many micro-batches each pipeline takes
(a pipeline on slower GPUs may take fewer):""",
    '''plan = best["plan"]
gpu_of = {c["name"]: c["gpu"] for c in scenario["clusters"]}
fig, ax = plt.subplots(figsize=(8, 1 + 0.8 * len(plan["pipelines"])))
for i, p in enumerate(plan["pipelines"]):
    left = 0
    for st in p["stages"]:
        colour = "tab:blue" if st["cluster"] == "fast" else "tab:orange"
        ax.barh(i, st["layers"], left=left, color=colour, edgecolor="black")
        ax.text(left + st["layers"] / 2, i, f"{gpu_of[st['cluster']].split('-')[0]}\\ntp{st.get('tp', 1)} dp{st.get('dp', 1)}",
                ha="center", va="center", fontsize=7)
        left += st["layers"]
    print(f"pipeline {i}: {p.get('replicas', 1)} replica(s), {p['micro_batches']} micro-batches, stages:",
          [(st["cluster"], st["layers"]) for st in p["stages"]])
ax.set_yticks(range(len(plan["pipelines"])))
ax.set_yticklabels([f"pipeline {i}\\n{p['micro_batches']} mb" for i, p in enumerate(plan["pipelines"])])
ax.set_xlabel("layers (blue: A100 stages, orange: T4 stages)")
fig.tight_layout()''',
    """md:Whether the planner uses the T4s depends on the WAN and the model. Why it may give a
replica on slower GPUs *fewer* micro-batches can be seen directly: one pipeline on the
A100s, one on the T4s (two stages), gradients synchronised hierarchically across a fast
WAN, and the batch of 64 sequences split between them in different shares. Equal shares make
the A100s wait for the T4s; the best share is near the ratio of their peak FLOP/s.""",
    '''import copy

def two_pipelines(fast):
    """The batch split: `fast` sequences to an A100 pipeline, the rest to a T4 one, across
    a WAN fast enough (400 Gbit/s) that compute decides."""
    s = copy.deepcopy(scenario)
    s["wan"] = [{"between": ["fast", "slow"], "bandwidth": "400Gbps", "latency": "1ms"}]
    s["simulation"] = {"fidelity": "folded", "tcp_window": "1GiB"}
    s["strategy"] = {"schedule": "1f1b", "micro_batch": 1, "grad_sync": {"algorithm": "hierarchical"},
                     "pipelines": [
        {"micro_batches": fast, "stages": [{"cluster": "fast", "tp": 4, "layers": 16}]},
        {"micro_batches": 64 - fast, "stages": [{"cluster": "slow", "tp": 4, "layers": 8},
                                                {"cluster": "slow", "tp": 4, "layers": 8}]}]}
    return s

shares = [16, 24, 32, 40, 44, 48, 52, 56, 60]
times = [hgsim.simulate(two_pipelines(f))["iteration_time_s"] for f in shares]
peak = {"fast": 4 * 312, "slow": 8 * 65}  # fp16 TFLOPS (hgsim gpus: datasheets)
proportional = 64 * peak["fast"] / (peak["fast"] + peak["slow"])
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(shares, times, "o-")
ax.axvline(32, color="gray", ls=":", label="equal shares")
ax.axvline(proportional, color="tab:green", ls="--", label="proportional to peak FLOP/s")
ax.set_xlabel("sequences (of 64) on the A100 pipeline"); ax.set_ylabel("iteration (s, simulated)")
ax.legend(fontsize="small")
print("fastest share:", shares[times.index(min(times))], "sequences on the A100s")''',
])

# ---- 5. reproducing a paper -------------------------------------------------------------
nb("05-reproducing-a-paper", [
    """md:# Reproducing a paper: Yuan et al.'s network settings and the planner's table

Yuan et al. (*Decentralized Training of Foundation Models in Heterogeneous Environments*,
NeurIPS 2022, "DT-FM") evaluate five network settings, from one data centre to eight
regions around the world. `scenarios/paper/dtfm-*.yaml` write them down;
`scripts/reproduce-paper.py` plans each with the baselines into
`validation/paper-table.md`. This notebook shows the settings and reruns two of them end
to end (with a short search budget, so that it runs in a minute or two).""",
    SETUP,
    '''import glob
settings = []
for path in sorted(glob.glob(os.path.join(ROOT, "scenarios", "paper", "dtfm-*.yaml"))):
    s = hgsim.load_scenario(path)
    gpus = sum(c["nodes"] * c["gpus_per_node"] for c in s["clusters"])
    wan = [(hgsim.parse_quantity(w["bandwidth"], "bandwidth") * 8e-9,
            hgsim.parse_quantity(w["latency"], "duration") * 1e3) for w in s["wan"]]
    settings.append((s["name"], len(s["clusters"]), gpus, wan))
    slowest = f"{min(w[0] for w in wan):.2f} Gbit/s" if wan else "-"
    print(f"{s['name']:22} {len(s['clusters'])} clusters, {gpus} GPUs, {len(wan)} WAN links, "
          f"slowest {slowest}")
fig, ax = plt.subplots(figsize=(6, 4))
for name, _, _, wan in settings:
    if wan:
        ax.scatter([w[1] for w in wan], [w[0] for w in wan], label=name)
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("WAN latency (ms)"); ax.set_ylabel("WAN bandwidth (Gbit/s)")
ax.set_title("the WAN links of the five settings"); ax.legend(fontsize="small");''',
    '''def published_row(name):
    """The planner's time in the committed table (validation/paper-table.md), codecs on."""
    with open(os.path.join(ROOT, "validation", "paper-table.md")) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 3 and cells[1] == name and cells[2] != "off":
                return float(cells[3])

rows = {}
for name in ("dtfm-2-spot", "dtfm-4-four-regions"):
    r = hgsim.plan(os.path.join(ROOT, "scenarios", "paper", name + ".yaml"), time_budget_s=3,
                   verify=2, baselines=True)
    rows[name] = r
    print(f"{name}: planner {r['best']['iteration_time_s']:.3f} s here, "
          f"{published_row(name)} s in validation/paper-table.md (20 s budget)")''',
    '''fig, axes = plt.subplots(1, len(rows), figsize=(11, 4))
for ax, (name, r) in zip(axes, rows.items()):
    names = [b["name"] for b in r["baselines"]]
    speedups = [b["iteration_time_s"] / r["best"]["iteration_time_s"] if b["feasible"] else 0
                for b in r["baselines"]]
    ax.bar(names, speedups)
    ax.axhline(1, color="gray", ls="--")
    ax.set_title(f"{name}: baseline / planner")
    ax.set_ylabel("slower than the planner (x; 0: infeasible)")
    ax.tick_params(axis="x", rotation=45)
fig.tight_layout()''',
])
