"""Figures of hgsim's results (matplotlib, drawn off-screen).

Two figures, each a function and a command (``python3 -m hgsim.plots ...``, which is what
``hgsim plot`` and ``hgsim run --plot`` run):

* :func:`plot_sweep` -- a metric of a sweep database's points against one axis, one line
  per value of another (``hgsim plot DB --x AXIS --y METRIC [--color AXIS] --out FILE``);
* :func:`plot_run` -- one simulated iteration: the time of each stage split into compute,
  exposed communication, bubble and idle; every WAN direction's throughput over the
  iteration against its bandwidth (from the Chrome trace); each stage's memory per GPU
  against the GPU's capacity (``hgsim run SCENARIO --plot FILE``).

The file type follows the extension: ``.png`` or ``.svg``.
"""

import argparse
import json
import os
import re
import sqlite3
import sys

from .files import atomic_open

COLUMNS = ("iteration_time_s", "tokens_per_s", "mfu", "wall_s", "point")
UNITS = {"iteration_time_s": "s", "tokens_per_s": "tokens/s", "wall_s": "s"}
QUANTITY_UNITS = {"bandwidth": "Gbit/s", "duration": "ms", "bytes": "GiB"}
QUANTITY_SCALE = {"bandwidth": 8e-9, "duration": 1e3, "bytes": 1 / 2**30}


class PlotError(ValueError):
    """A figure that cannot be drawn from what was given (the message says why)."""


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _check_out(out):
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".png", ".svg"):
        raise PlotError(f"--out {out}: the figure is written as .png or .svg (by the extension)")


def axis_values(values):
    """Sweep values as numbers: numbers as they are, quantities ("10Gbps", "15ms", "80GiB")
    in Gbit/s, ms or GiB (the scenario loader's parser); anything else stays text (an
    ordinal axis in order of appearance). Returns (numbers or texts, unit or None)."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return list(values), None
    from . import parse_quantity, Error
    for kind in ("bandwidth", "duration", "bytes"):
        try:
            return [parse_quantity(str(v), kind) * QUANTITY_SCALE[kind] for v in values], \
                QUANTITY_UNITS[kind]
        except Error:
            continue
    return [v if isinstance(v, str) else json.dumps(v) for v in values], None


def read_sweep(db):
    """(sweep info, rows) of a sweep database; rows are dicts with settings and result
    parsed."""
    if not os.path.isfile(db):
        raise PlotError(f"{db}: no such file (hgsim sweep writes the database)")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "points" not in tables:
            raise PlotError(f"{db} is not a sweep database (no points table)")
        info = con.execute("SELECT scenario_file, axes, points FROM sweep").fetchone()
        rows = []
        for point, settings, status, it, tps, mfu, wall, result in con.execute(
                "SELECT point, settings, status, iteration_time_s, tokens_per_s, mfu, wall_s, "
                "result FROM points ORDER BY point"):
            rows.append({"point": point, "settings": json.loads(settings), "status": status,
                         "iteration_time_s": it, "tokens_per_s": tps, "mfu": mfu,
                         "wall_s": wall, "result": json.loads(result) if result else None})
    finally:
        con.close()
    sweep = {"scenario_file": info[0], "axes": json.loads(info[1]), "points": info[2]} \
        if info else {"scenario_file": db, "axes": [], "points": len(rows)}
    return sweep, rows


def _metric(row, name):
    if name in COLUMNS:
        return row[name]
    value = row["result"].get(name) if row["result"] else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def plot_sweep(db, x, y, out, color=None):
    """Draws metric ``y`` of the sweep's ok points against axis ``x`` (one line per value of
    axis ``color``) into ``out``. ``y`` is a column (iteration_time_s, tokens_per_s, mfu,
    wall_s) or a number of the results JSON (model_tflops_per_gpu, ...)."""
    _check_out(out)
    sweep, rows = read_sweep(db)
    axes = sweep["axes"]
    for name, what in ((x, "--x"), (color, "--color")):
        if name is not None and name not in axes and name != "point":
            raise PlotError(f"{what} {name}: not an axis of this sweep; axes: "
                            + (", ".join(axes) or "none (the scenario has no sweep)"))
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise PlotError(f"{db}: no point finished ok; nothing to draw")
    if _metric(ok[0], y) is None:
        names = list(COLUMNS[:-1]) + sorted(k for k, v in ok[0]["result"].items()
                                            if isinstance(v, (int, float)))
        raise PlotError(f"--y {y}: not a number of the points; numbers: {', '.join(names)}")

    def setting(row, name):
        return row["point"] if name == "point" else row["settings"].get(name)

    xs, x_unit = axis_values([setting(r, x) for r in ok])
    ordinal = bool(xs) and isinstance(xs[0], str)
    order = list(dict.fromkeys(xs)) if ordinal else None
    groups = {}
    for r, xv in zip(ok, xs):
        key = json.dumps(setting(r, color)) if color else None
        groups.setdefault(key, []).append((order.index(xv) if ordinal else xv, _metric(r, y)))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, points in groups.items():
        points.sort()
        label = f"{color}={json.loads(key)}" if key is not None else None
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    if ordinal:
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels(order)
    elif xs and min(xs) > 0 and max(xs) / min(xs) >= 100:
        ax.set_xscale("log")
    ax.set_xlabel(x + (f" ({x_unit})" if x_unit else ""))
    ax.set_ylabel(y + (f" ({UNITS[y]})" if y in UNITS else ""))
    name = os.path.basename(sweep["scenario_file"])
    ax.set_title(f"{name}: {len(ok)} of {sweep['points']} points (simulated by hgsim sweep)")
    if color:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_open(out, "wb") as f:
        fig.savefig(f, format=os.path.splitext(out)[1].lower()[1:])
    plt.close(fig)
    return out


def stage_breakdown(result):
    """Per (pipeline, stage): the mean over its GPUs of compute, exposed communication,
    bubble and idle seconds, and its memory per GPU and capacity."""
    stages = {}
    for d in result["devices"]:
        s = stages.setdefault((d["pipeline"], d["stage"]), {
            "cluster": d["cluster"], "gpu": d["gpu"], "n": 0, "compute_s": 0.0,
            "comm_exposed_s": 0.0, "bubble_s": 0.0, "idle_s": 0.0, "peak_bytes": 0.0,
            "capacity_bytes": d["memory"]["capacity_bytes"]})
        s["n"] += 1
        for k in ("compute_s", "comm_exposed_s", "bubble_s", "idle_s"):
            s[k] += d[k]
        s["peak_bytes"] = max(s["peak_bytes"], d["memory"]["peak_bytes"])
    for s in stages.values():
        for k in ("compute_s", "comm_exposed_s", "bubble_s", "idle_s"):
            s[k] /= s["n"]
    return dict(sorted(stages.items()))


def wan_throughput(trace, iteration_s, bins=200):
    """Each WAN direction's throughput over the iteration from a Chrome trace written by
    hgsim: every message's bytes spread evenly over its time on the link. Returns
    {link name: (bin centres in s, bytes per second)}."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    wan_pid = None
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "WAN":
            wan_pid = e["pid"]
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == wan_pid:
            # Messages that overlap on a link go to its lanes ("wan:a->b (lane 2)", see
            # sim/trace.hpp): every lane's bytes are the link's.
            names[e["tid"]] = re.sub(r" \(lane \d+\)$", "", e["args"]["name"])
    width = iteration_s / bins
    series = {name: [0.0] * bins for name in names.values()}
    for e in events:
        if e.get("ph") != "X" or e["pid"] != wan_pid or e["dur"] <= 0:
            continue
        start, end = e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6
        rate = e.get("args", {}).get("bytes", 0) / (end - start)
        b = max(0, int(start / width))
        while b < bins and b * width < end:
            overlap = min(end, (b + 1) * width) - max(start, b * width)
            if overlap > 0:
                series[names[e["tid"]]][b] += rate * overlap / width
            b += 1
    centres = [(b + 0.5) * width for b in range(bins)]
    return {name: (centres, values) for name, values in series.items()}


def wan_capacities(scenario):
    """Bytes per second of every WAN direction of a scenario, by the simulator's link
    names ("wan:a->b")."""
    from . import load_scenario, parse_quantity
    s = load_scenario(scenario)
    out = {}
    for w in s.get("wan", []):
        a, b = w["between"] if "between" in w else (w["from"], w["to"])
        forward = parse_quantity(w["bandwidth"], "bandwidth")
        back = parse_quantity(w["reverse_bandwidth"], "bandwidth") \
            if w.get("reverse_bandwidth") else forward
        out[f"wan:{a}->{b}"] = forward
        out[f"wan:{b}->{a}"] = back
    return out


def plot_run(result, out, trace=None, scenario=None):
    """One iteration's figure: stage time breakdown, WAN throughput over the iteration
    (needs ``trace``; against the scenario's bandwidth when ``scenario`` is given), memory
    per stage against capacity."""
    _check_out(out)
    if isinstance(result, (str, os.PathLike)):
        with open(result) as f:
            result = json.load(f)
    if isinstance(trace, (str, os.PathLike)):
        with open(trace) as f:
            trace = json.load(f)
    stages = stage_breakdown(result)
    labels = [f"p{p} s{s}\n{v['cluster']}" for (p, s), v in stages.items()]
    T = result["iteration_time_s"]
    plt = _pyplot()
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(8, 10))

    left = [0.0] * len(stages)
    for key, label in (("compute_s", "compute"), ("comm_exposed_s", "exposed comm"),
                       ("bubble_s", "bubble"), ("idle_s", "idle")):
        widths = [v[key] for v in stages.values()]
        a1.barh(labels, widths, left=left, label=label)
        left = [l + w for l, w in zip(left, widths)]
    a1.invert_yaxis()
    a1.set_xlabel("seconds of the iteration (mean over the stage's GPUs)")
    a1.set_title(f"{result['scenario']}: one iteration, {T:.4g} s (simulated)")
    a1.legend(fontsize="small", ncol=4, loc="lower right")

    if trace is not None:
        capacities = wan_capacities(scenario) if scenario else {}
        for name, (t, rate) in wan_throughput(trace, T).items():
            line = a2.plot(t, [r * 8e-9 for r in rate], label=name)[0]
            if name in capacities:
                a2.axhline(capacities[name] * 8e-9, color=line.get_color(), ls="--", lw=0.8)
        a2.set_xlim(0, T)
        a2.set_xlabel("time in the iteration (s)")
        a2.set_ylabel("Gbit/s")
        a2.set_title("WAN throughput per direction (dashed: the scenario's bandwidth)")
        if a2.lines:
            a2.legend(fontsize="small")
        else:
            a2.text(0.5, 0.5, "no WAN traffic", ha="center", transform=a2.transAxes)
    else:
        a2.text(0.5, 0.5, "no trace given: no WAN time series", ha="center",
                transform=a2.transAxes)

    gib = 2**30
    a3.bar(labels, [v["peak_bytes"] / gib for v in stages.values()], label="peak per GPU")
    a3.scatter(labels, [v["capacity_bytes"] / gib for v in stages.values()], marker="_", s=900,
               color="red", label="GPU capacity", zorder=3)
    a3.set_ylabel("GiB")
    a3.set_title("memory per GPU by stage (models/: estimate) against capacity")
    a3.legend(fontsize="small")
    fig.tight_layout()
    with atomic_open(out, "wb") as f:
        fig.savefig(f, format=os.path.splitext(out)[1].lower()[1:])
    plt.close(fig)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="hgsim plot")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sweep", help="a sweep database's points")
    s.add_argument("db")
    s.add_argument("--x", required=True, help="the axis along x (an axis path, or point)")
    s.add_argument("--y", required=True, help="the metric (iteration_time_s, tokens_per_s, "
                   "mfu, wall_s, or a number of the results JSON)")
    s.add_argument("--color", help="one line per value of this axis")
    s.add_argument("--out", required=True, help="FILE.png or FILE.svg")
    r = sub.add_parser("run", help="one simulated iteration")
    r.add_argument("--result", required=True, help="hgsim run --json's output")
    r.add_argument("--trace", help="hgsim run --trace's output (WAN time series)")
    r.add_argument("--scenario", help="the scenario (WAN bandwidths)")
    r.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        if args.what == "sweep":
            plot_sweep(args.db, args.x, args.y, args.out, args.color)
        else:
            plot_run(args.result, args.out, args.trace, args.scenario)
    except (PlotError, sqlite3.Error) as e:
        print(f"hgsim plot: {e}", file=sys.stderr)
        return 1
    print(f"hgsim plot: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
