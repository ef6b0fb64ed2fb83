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

What cannot be drawn raises :class:`PlotError` naming the file or argument and what is
wrong (the commands print it as one line and exit 1): an output path that is not .png/.svg
or lies in a missing folder (checked before anything is read), a file that is not a sweep
database, a damaged point of one (an error naming its column, never skipped). Messages
quote at most QUOTED_CHARS characters of any input, control characters escaped.
"""

import argparse
import contextlib
import json
import math
import os
import re
import sqlite3
import sys
import urllib.parse
from array import array

import numpy as np

from . import _hgsim
from .files import atomic_open

COLUMNS = ("iteration_time_s", "tokens_per_s", "mfu", "wall_s", "point")
UNITS = {"iteration_time_s": "s", "tokens_per_s": "tokens/s", "wall_s": "s"}
QUANTITY_UNITS = {"bandwidth": "Gbit/s", "duration": "ms", "bytes": "GiB"}
QUANTITY_SCALE = {"bandwidth": 8e-9, "duration": 1e3, "bytes": 1 / 2**30}

# What a message quotes of an input (a path, an argument, a value of the database): enough
# to recognise it; a megabyte value or a terminal escape sequence stays out of the terminal.
QUOTED_CHARS = 60
# The names a message lists (axes, numbers of the results) before "... (N more)".
LISTED_NAMES = 20
# Lines of a figure (one per value of --color): matplotlib's colour cycle has 10, and a
# legend of more than a few dozen entries covers the plot.
MAX_LINES = 50
# Points read before the duplicates among them are dropped (24 bytes each: 6 MB).
COMPACTED_POINTS = 2**18
# Values of a text (ordinal) x axis, one tick label each: beyond this the labels overlap.
MAX_TICKS = 200
# Plans named in a sweep figure's key (P1, P2, ...), a line or two each: more would cover
# the figure; the points of any further plan are marked as "another plan".
MAX_PLANS = 12
# Points labelled with their plan's name beside them: past this the labels cover the lines,
# and the markers (one shape per plan) and the key say it alone.
MAX_LABELLED_POINTS = 60
# Characters of a plan's description per line of the key, and its lines at most (then
# "..."; hgsim results prints it whole).
PLAN_KEY_WIDTH = 100
PLAN_KEY_LINES = 3
# The marker of each named plan, in order (another plan: "x").
PLAN_MARKERS = "osD^vP*Xph<>"


class PlotError(_hgsim.Error):
    """A figure that cannot be drawn from what was given (the message says why). An
    :class:`hgsim.Error` (a ``ValueError``), as every problem the module reports."""


def shown(text):
    """``text`` as a message quotes it: the rule of every hgsim message (C++
    ``core::excerpt``): terminal controls escaped (``\\x1b``, ``\\u202e``), at most 60
    characters, then the length."""
    return _hgsim.excerpt(_utf8(text))


def _utf8(text):
    """``text`` as valid UTF-8 (a file name from the command line may hold lone surrogates,
    which are written as ``\\udcxx``)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def _shown_message(text, limit=4 * QUOTED_CHARS):
    """A whole message of someone else's words (argparse's, SQLite's) as one short line."""
    cut = len(text) > limit
    return _escaped(text[:limit]) + ("..." if cut else "")


def _escaped(text):
    """``text`` with every character a terminal acts on escaped (C++ ``core::escaped``)."""
    return _hgsim.escaped(_utf8(text))


def _label(text):
    """Text of the figure (title, axis names, legend): as a message shows it, with ``$``
    kept from starting matplotlib's mathtext (whose parse errors end the drawing)."""
    return shown(text).replace("$", r"\$")


def _lines(*pieces):
    """A label of several lines: each piece escaped as :func:`_label` does (a newline in a
    cluster's name shows as ``\\x0a``), joined by real newlines."""
    return "\n".join(_label(piece) for piece in pieces)


def _listed(names):
    names = list(names)
    listed = ", ".join(shown(n) for n in names[:LISTED_NAMES])
    more = len(names) - LISTED_NAMES
    return listed + (f", ... ({more} more)" if more > 0 else "")


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _check_out(out, option):
    """The figure's path, checked before any work is done: .png or .svg (by the
    extension), in a folder that exists. ``option`` is how the caller named it."""
    where = f"{option} {shown(out)}"
    ext = os.path.splitext(out)[1].lower()
    if ext not in (".png", ".svg"):
        raise PlotError(f"{where}: the figure is written as .png or .svg (by the extension)")
    if "\0" in out:
        raise PlotError(f"{where}: a path has no NUL character")
    if os.path.isdir(out):
        raise PlotError(f"{where}: is a directory; give a FILE.png or FILE.svg")
    folder = os.path.dirname(out)
    if folder and not os.path.isdir(folder):
        raise PlotError(f"{where}: no such directory {shown(folder)}")


def _save(fig, out, option):
    try:
        with atomic_open(out, "wb") as f:
            fig.savefig(f, format=os.path.splitext(out)[1].lower()[1:])
    except OSError as e:
        raise PlotError(f"{option} {shown(out)}: cannot write: {e.strerror or e}") from None


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


# ---- the sweep database (apps/results_db.cpp writes it) -----------------------------------

@contextlib.contextmanager
def open_sweep(db):
    """The sweep database ``db`` opened read-only: yields (connection, its sweep as
    {"scenario_file", "axes", "points"}). Nothing of the database changes, not even its
    journal mode (SQLite may add the -shm and -wal files a WAL database is read with).
    Text columns come as bytes: JSON is parsed from them, and a value that is not UTF-8 is
    an error of its point, not of the whole query. PlotError for a path that is not a sweep
    database, named in the message."""
    db = os.fspath(db)
    if "\0" in db or not os.path.exists(db):
        raise PlotError(f"{shown(db)}: no such file (hgsim sweep writes the database)")
    if not os.path.isfile(db):
        raise PlotError(f"{shown(db)}: not a regular file (hgsim sweep writes the database)")
    # A URI quotes the path: "?" or "#" in a file name would start its query or fragment.
    uri = "file:" + urllib.parse.quote(os.path.abspath(db)) + "?mode=ro"
    with _sqlite_errors(db):
        con = sqlite3.connect(uri, uri=True)
    try:
        con.text_factory = bytes
        with _sqlite_errors(db):
            info = _sweep_info(con, db)
        yield con, info
    finally:
        con.close()


@contextlib.contextmanager
def _sqlite_errors(db):
    """SQLite's errors ("file is not a database", "database disk image is malformed") as
    PlotError naming the database."""
    try:
        yield
    except sqlite3.Error as e:
        raise PlotError(f"{shown(db)}: {_shown_message(str(e))} (SQLite)") from None


def _sweep_info(con, db):
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for table in ("sweep", "points"):
        if table.encode() not in tables:
            raise PlotError(f"{shown(db)}: not a sweep database (no {table} table; "
                            "hgsim sweep writes one)")
    row = con.execute("SELECT scenario_file, axes, points FROM sweep").fetchone()
    if row is None:
        return {"scenario_file": db, "axes": [], "points": None}
    scenario_file, axes, points = row
    axes = _json(axes, f"{shown(db)}: sweep: axes", error=PlotError)
    if not isinstance(axes, list) or not all(isinstance(a, str) for a in axes):
        raise PlotError(f"{shown(db)}: sweep: axes: not a list of axis names")
    if not isinstance(points, int) or points < 0:
        raise PlotError(f"{shown(db)}: sweep: points: {_what(points)}, not a count of points")
    scenario_file = scenario_file.decode("utf-8", "replace") \
        if isinstance(scenario_file, bytes) else str(scenario_file)
    return {"scenario_file": scenario_file, "axes": axes, "points": points}


class _PointError(PlotError):
    """A damaged value of one point; the message says the column, the reader adds the
    database and the point."""


def _json(value, column, error=_PointError):
    """A JSON column's value parsed; ``error`` naming ``column`` for anything else."""
    if not isinstance(value, bytes):
        raise error(f"{column}: {_what(value)}, not JSON text")
    return _loads(value, column, error)


def _loads(data, where, error):
    """JSON ``data`` (bytes) parsed; ``error`` naming ``where`` for anything else."""
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not JSON ({e.msg} at character {e.pos})") from None
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise error(f"{where}: not JSON we read ({_shown_message(str(e))})") from None


def _what(value):
    """A value of the database as a message names it."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "text " + shown(repr(value)[2:-1])
    if isinstance(value, (dict, list)):
        return "a JSON " + ("object" if isinstance(value, dict) else "array")
    return shown(json.dumps(value) if isinstance(value, str) else value)


def _number(value):
    """``value`` as a float when it is a finite number (not a bool), else None."""
    try:
        if not isinstance(value, bool) and isinstance(value, (int, float)) \
                and math.isfinite(value):
            return float(value)
    except OverflowError:  # an integer beyond a float's range
        pass
    return None


def _finite(value, column):
    """``value`` as a float; _PointError naming ``column`` when not a finite number."""
    number = _number(value)
    if number is None:
        raise _PointError(f"{column}: {_what(value)}, not a finite number")
    return number


class _Distinct:
    """The distinct values of an axis over the points, in order of appearance; each point
    keeps the index of its value (8 bytes a point, whatever the value)."""

    def __init__(self):
        self.index = {}
        self.values = []

    @staticmethod
    def _key(value):
        return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) \
            else (type(value), value)

    def __contains__(self, value):
        return self._key(value) in self.index

    def add(self, value):
        key = self._key(value)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.values)
            self.values.append(value)
        return i


class _PointNumbers:
    """The x of the axis "point": the point's number itself, nothing to remember."""

    values = None

    def add(self, point):
        return point


class SweepPoints:
    """What a figure draws of a sweep's ok points: ``x_values``, ``line_values`` and
    ``plan_values`` (the distinct values of the x and --color axes and the distinct plans
    the points ran, each as :func:`hgsim._hgsim.point_choice` names it, in order of
    appearance), ``count`` (the ok points read) and :meth:`drawn`, the distinct (line,
    x index, y, plan index) of the points (for the axis "point", the point number in place
    of the x index). Points drawn on top of each other with the same plan are kept once, so
    memory follows what the figure shows, not the rows of the database (10^6 points of 6
    settings: a few MB). Past MAX_PLANS plans the others share the index MAX_PLANS."""

    def __init__(self, x):
        self.x_values = _PointNumbers() if x == "point" else _Distinct()
        self.line_values = _Distinct()
        self.plan_values = _Distinct()
        self.count = 0
        self._new = array("d")  # (line, x index, y, plan) of the points since the last compaction
        self._kept = np.empty((0, 4))

    def add(self, line, x_index, y, plan=0):
        self._new.extend((line, x_index, y, plan))
        self.count += 1
        # Compacting when the new points outnumber the kept ones sorts each point O(log n)
        # times; the floor keeps the sorts few when nearly every point is a duplicate.
        if len(self._new) >= 4 * max(COMPACTED_POINTS, len(self._kept)):
            self._compact()

    def add_plan(self, text):
        """The index of the plan named ``text`` (MAX_PLANS for any past the first
        MAX_PLANS)."""
        if text not in self.plan_values and len(self.plan_values.values) >= MAX_PLANS:
            return MAX_PLANS
        return self.plan_values.add(text)

    def drawn(self):
        """(n, 4) array of the distinct (line, x index, y, plan), sorted."""
        self._compact()
        return self._kept

    def _compact(self):
        new = np.frombuffer(self._new, dtype=float).reshape(-1, 4)
        self._kept = np.unique(np.concatenate((self._kept, new)), axis=0)
        self._new = array("d")


def sweep_points(con, db, axes, x, y, color=None):
    """The SweepPoints of metric ``y`` against axis ``x`` (and ``color``) of the database
    ``db`` (``con``, ``axes``: :func:`open_sweep`'s), read a row at a time in point order.

    A damaged point (settings or result that is not JSON, or not an object; an axis without
    a value; a NULL, text or non-finite number where ``y`` is read) is an error naming the
    database, the point and the column, not a point skipped: a figure must not quietly
    leave out what the database says finished ok."""
    for name, option in ((x, "--x"), (color, "--color")):
        if name is not None and name not in axes and name != "point":
            raise PlotError(f"{option} {shown(name)}: not an axis of this sweep; axes: "
                            + (_listed(axes) or "none (the scenario has no sweep)"))
    needs_settings = x != "point" or (color is not None and color != "point")
    drawn = SweepPoints(x)
    plans = {}  # (plan, choice) column texts -> the plan's index in drawn
    with _sqlite_errors(db):
        has_choice = _check_columns(con, db, y)
        # A database of an older hgsim has no choice column: its points' plans name them.
        query = (f"SELECT point, {'settings' if needs_settings else 'NULL'}, "
                 f"{y if y in COLUMNS else 'result'}, plan, "
                 f"{'choice' if has_choice else 'NULL'} FROM points WHERE status = 'ok' "
                 "ORDER BY point")
        for point, settings, y_column, plan, choice in con.execute(query):
            try:
                values = _settings(settings) if needs_settings else {}
                x_index = drawn.x_values.add(_setting(point, values, x))
                line = drawn.line_values.add(_setting(point, values, color)) if color else 0
                y_value = _y(y_column, y, first=drawn.count == 0)
                key = (plan, choice) if choice is None else choice
                if key not in plans:
                    if len(plans) > 4 * MAX_PLANS:  # a memo, not a record of every plan
                        plans.clear()
                    plans[key] = drawn.add_plan(_plan_text(plan, choice))
                drawn.add(line, x_index, y_value, plans[key])
            except _PointError as e:
                raise PlotError(f"{shown(db)}: point {_what(point)}: {e}") from None
            if line >= MAX_LINES:
                raise PlotError(f"--color {shown(color)}: more than {MAX_LINES} values "
                                "(a line each); choose an axis with fewer")
    return drawn


def _check_columns(con, db, y):
    """Refuses a points table without the columns a figure reads; whether it has the
    choice column (an older hgsim's has not)."""
    have = {r[1].decode() for r in con.execute("PRAGMA table_info(points)")}
    for column in ("point", "settings", "status", "plan", y if y in COLUMNS else "result"):
        if column not in have:
            raise PlotError(f"{shown(db)}: the points table has no column {column} "
                            "(not written by hgsim sweep?)")
    return "choice" in have


def _plan_text(plan, choice):
    """What a point ran, as ``hgsim results`` says it ("8 GPUs (a 4, b 4); <plan>", or
    "plan not recorded"), from its plan and choice columns."""
    for value, column in ((plan, "plan"), (choice, "choice")):
        if value is not None and not isinstance(value, bytes):
            raise _PointError(f"{column}: {_what(value)}, not JSON text")
    try:
        return _hgsim.point_choice(plan=plan, choice=choice)["text"]
    except _hgsim.Error as e:
        raise _PointError(str(e)) from None


def _settings(settings):
    values = _json(settings, "settings")
    if not isinstance(values, dict):
        raise _PointError(f"settings: {_what(values)}, not an object of axis values")
    return values


def _setting(point, values, name):
    """The point's value of axis ``name`` (a finite number, or text for an ordinal axis)."""
    if name == "point":
        return _finite(point, "point")
    if name not in values:
        raise _PointError(f"settings: no value of the axis {shown(name)}")
    value = values[name]
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and _number(value) is None:
        _finite(value, f"settings: {shown(name)}")
    return value


def _y(column, y, first):
    """The point's value of metric ``y``: its column, or its number in the results JSON
    (whose absence from the first point is an error of --y)."""
    if y in COLUMNS:
        return _finite(column, y)
    result = _json(column, "result")
    if not isinstance(result, dict):
        raise _PointError(f"result: {_what(result)}, not an object")
    value = result.get(y)
    if first and (isinstance(value, bool) or not isinstance(value, (int, float))):
        numbers = dict.fromkeys(list(COLUMNS[:-1]) + sorted(
            k for k, v in result.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)))
        raise PlotError(f"--y {shown(y)}: not a number of the points; numbers: "
                        + _listed(numbers))
    number = _number(value)
    return number if number is not None else _finite(value, f"result: {shown(y)}")


def _x_positions(values, x):
    """(position of each distinct x value, tick labels of a text axis or None, unit)."""
    numbers, unit = axis_values(values)
    if not isinstance(numbers[0], str):
        if not all(math.isfinite(n) for n in numbers):
            raise PlotError(f"--x {shown(x)}: a value is not a finite quantity")
        return numbers, None, unit
    ticks = list(dict.fromkeys(numbers))
    if len(ticks) > MAX_TICKS:
        raise PlotError(f"--x {shown(x)}: {len(ticks)} different values that are not "
                        f"numbers; a figure marks at most {MAX_TICKS} as text")
    where = {t: i for i, t in enumerate(ticks)}
    return [where[t] for t in numbers], ticks, unit


def plot_sweep(db, x, y, out, color=None):
    """Draws metric ``y`` of the sweep's ok points against axis ``x`` (one line per value of
    axis ``color``) into ``out``. ``y`` is a column (iteration_time_s, tokens_per_s, mfu,
    wall_s) or a number of the results JSON (model_tflops_per_gpu, ...).

    Reads the database a row at a time and keeps only the numbers drawn. What cannot be
    drawn raises PlotError naming the database, argument or path and what is wrong: an
    output that is not .png/.svg or is in a missing folder (checked before reading), a file
    that is not a sweep database, a damaged point (an error, never skipped: see
    :func:`sweep_points`)."""
    db, out = os.fspath(db), os.fspath(out)
    _check_out(out, "--out")
    with open_sweep(db) as (con, sweep):
        drawn = sweep_points(con, db, sweep["axes"], x, y, color)
    if not drawn.count:
        raise PlotError(f"{shown(db)}: no point finished ok; nothing to draw")
    points = drawn.drawn()
    if x == "point":
        xs, ticks, x_unit = points[:, 1], None, None
    else:
        positions, ticks, x_unit = _x_positions(drawn.x_values.values, x)
        xs = np.asarray(positions, dtype=float)[points[:, 1].astype(np.int64)]
    line_values = drawn.line_values.values if color else [None]
    plans = drawn.plan_values.values
    key_lines = _plan_key(plans, points)
    plt = _pyplot()
    # The key of the plans sits under the axes, a line of text each.
    key_height = 0.2 * len(key_lines) + 0.3
    fig, ax = plt.subplots(figsize=(7, 4.5 + key_height))
    for line, value in enumerate(line_values):
        mine = points[:, 0] == line
        order = np.lexsort((points[mine, 2], xs[mine]))
        label = _label(f"{color}={value}") if color else None
        ax.plot(xs[mine][order], points[mine, 2][order], label=label)
    _mark_plans(ax, xs, points)
    if ticks is not None:
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels([_label(t) for t in ticks])
    elif xs.min() > 0 and xs.max() / xs.min() >= 100:
        ax.set_xscale("log")
    ax.set_xlabel(_label(x) + (f" ({x_unit})" if x_unit else ""))
    ax.set_ylabel(_label(y) + (f" ({UNITS[y]})" if y in UNITS else ""))
    name = _label(os.path.basename(sweep["scenario_file"]))
    of = f" of {sweep['points']}" if sweep["points"] is not None else ""
    ax.set_title(f"{name}: {drawn.count}{of} points (simulated by hgsim sweep)")
    if color:
        ax.legend(fontsize="small")
    fig.text(0.01, 0.01, "\n".join(key_lines), fontsize="x-small", va="bottom", ha="left",
             family="monospace")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, key_height / (4.5 + key_height), 1, 1))
    try:
        _save(fig, out, "--out")
    finally:
        plt.close(fig)
    return out


def _plan_name(index):
    return f"P{int(index) + 1}" if index < MAX_PLANS else "another plan"


def _plan_key(plans, points):
    """The figure's key of the plans the points ran: "P1 (o): 8 GPUs (a 4, b 4); ..." a
    plan, its description cut into lines of PLAN_KEY_WIDTH characters (escaped as every
    label is)."""
    lines = ["plans the points ran (marker: plan):"]
    for i, text in enumerate(plans):
        head = f"{_plan_name(i)} ({PLAN_MARKERS[i % len(PLAN_MARKERS)]}): "
        body = _escaped(_utf8(text)).replace("$", r"\$")
        width = PLAN_KEY_WIDTH - len(head)
        pieces = [body[k:k + width] for k in range(0, len(body), width)] or [""]
        if len(pieces) > PLAN_KEY_LINES:
            pieces = pieces[:PLAN_KEY_LINES]
            pieces[-1] = pieces[-1][:-3] + "..."
        lines.append(head + pieces[0])
        lines.extend(" " * len(head) + piece for piece in pieces[1:])
    if (points[:, 3] >= MAX_PLANS).any():
        lines.append(f"another plan (x): the points of plans past the first {MAX_PLANS}")
    return lines


def _mark_plans(ax, xs, points):
    """Marks each point with its plan's marker and, when the points are few, its plan's
    name beside it: points drawn on top of each other list every plan they ran
    ("P1, P2")."""
    for plan in np.unique(points[:, 3]):
        mine = points[:, 3] == plan
        if plan >= MAX_PLANS:  # an unfilled marker: no face to leave empty
            ax.scatter(xs[mine], points[mine, 2], marker="x", s=36, color="black", zorder=3)
            continue
        ax.scatter(xs[mine], points[mine, 2], marker=PLAN_MARKERS[int(plan)], s=36,
                   facecolors="none", edgecolors="black", linewidths=0.8, zorder=3)
    if len(points) > MAX_LABELLED_POINTS:
        return
    at = {}
    for x, (_, _, y, plan) in zip(xs, points):
        names = at.setdefault((float(x), float(y)), [])
        if _plan_name(plan) not in names:
            names.append(_plan_name(plan))
    for (x, y), names in at.items():
        ax.annotate(", ".join(names), (x, y), textcoords="offset points", xytext=(4, 4),
                    fontsize="x-small")


def stage_breakdown(result):
    """Per (pipeline, stage): the mean over its GPUs of compute, exposed communication,
    bubble and idle seconds, and its memory per GPU and capacity. PlotError for a
    ``result`` that is not what ``hgsim run --json`` prints (``hgsim.simulate`` returns)."""
    try:
        return _stages(result)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PlotError(f"result: not hgsim run --json's output ({type(e).__name__} "
                        f"{shown(e)})") from None


def _stages(result):
    devices = result["devices"]
    if not isinstance(devices, list) or not devices:
        raise ValueError("devices: not a list of the GPUs' results")
    stages = {}
    for d in devices:
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


# Bins of a WAN time series: a figure 8 inches wide shows no more than a few thousand.
MAX_BINS = 100_000


def _iteration_seconds(value, where):
    """``value`` as the positive, finite length of an iteration in seconds; PlotError
    naming ``where`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise PlotError(f"{where}: {_what(value)}, not a positive number of seconds")
    return float(value)


def _bins(bins):
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) \
            or not 1 <= bins <= MAX_BINS:
        raise PlotError(f"bins: {_what(bins)}, not a whole number from 1 to {MAX_BINS}")
    return int(bins)


def wan_throughput(trace, iteration_s, bins=200):
    """Each WAN direction's throughput over the iteration from a Chrome trace written by
    hgsim: every message's bytes spread evenly over its time on the link. Returns
    {link name: (bin centres in s, bytes per second)}. PlotError for an ``iteration_s``
    that is not a positive number of seconds, ``bins`` not from 1 to MAX_BINS, or a trace
    that hgsim did not write."""
    iteration_s = _iteration_seconds(iteration_s, "iteration_s")
    bins = _bins(bins)
    try:
        return _wan_series(trace, iteration_s, bins)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        raise PlotError(f"trace: not a trace hgsim run wrote ({type(e).__name__} "
                        f"{shown(e)})") from None


def _wan_series(trace, iteration_s, bins):
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


def _wan_bytes(result):
    """Bytes the result counts on its WAN links (0 when it has none)."""
    return sum(float(l.get("bytes", 0)) for l in result.get("links", [])
               if isinstance(l, dict) and l.get("kind") == "wan")


def _traced_bytes(series, width):
    return sum(sum(rate) * width for _, rate in series.values())


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


def _json_file(path, option):
    """A JSON file hgsim wrote (``option`` names where it was given); PlotError otherwise."""
    where = f"{option} {shown(os.fspath(path))}"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PlotError(f"{where}: cannot read: {e.strerror or e}") from None
    return _loads(data, where, PlotError)


def plot_run(result, out, trace=None, scenario=None, out_option="--out"):
    """One iteration's figure: stage time breakdown, WAN throughput over the iteration
    (needs ``trace``; against the scenario's bandwidth when ``scenario`` is given), memory
    per stage against capacity. ``out_option`` is the caller's name of ``out`` in messages
    (``hgsim run`` passes ``--plot``). PlotError for an output that is not .png/.svg or is
    in a missing folder (checked before anything is read), and for a result or trace that
    is not what hgsim run writes."""
    out = os.fspath(out)
    _check_out(out, out_option)
    result_option, trace_option = "--result", "--trace"
    if isinstance(result, (str, os.PathLike)):
        result_option = f"--result {shown(os.fspath(result))}"
        result = _json_file(result, "--result")
    if isinstance(trace, (str, os.PathLike)):
        trace_option = f"--trace {shown(os.fspath(trace))}"
        trace = _json_file(trace, "--trace")
    try:
        stages = _stages(result)
        T = result["iteration_time_s"]
        title = f"{_label(result['scenario'])}: one iteration"
        wan_bytes = _wan_bytes(result)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PlotError(f"{result_option}: not hgsim run --json's output "
                        f"({type(e).__name__} {shown(e)})") from None
    T = _iteration_seconds(T, f"{result_option}: iteration_time_s")
    title += f", {T:.4g} s (simulated)"
    bins = 200
    try:
        series = _wan_series(trace, T, bins) if trace is not None else None
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as e:
        raise PlotError(f"{trace_option}: not a trace hgsim run wrote "
                        f"({type(e).__name__} {shown(e)})") from None
    # A trace written with a filter (--trace-filter, trace_filter=) may hold only part of
    # the WAN messages, or none: its series would draw idle links that were not.
    traced = _traced_bytes(series, T / bins) if series is not None else 0.0
    partial = series is not None and wan_bytes > 0 and traced < wan_bytes * (1 - 1e-6)
    labels = [_lines(f"p{p} s{s}", v["cluster"]) for (p, s), v in stages.items()]
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
    a1.set_title(title)
    a1.legend(fontsize="small", ncol=4, loc="lower right")

    if partial and traced == 0:
        a2.text(0.5, 0.5, f"the trace filter removed the WAN transfers\n({wan_bytes / 1e6:.4g} "
                "MB crossed the WAN): no WAN time series", ha="center", va="center",
                transform=a2.transAxes)
    elif series is not None:
        capacities = wan_capacities(scenario) if scenario else {}
        for name, (t, rate) in series.items():
            line = a2.plot(t, [r * 8e-9 for r in rate], label=_label(name))[0]
            if name in capacities:
                a2.axhline(capacities[name] * 8e-9, color=line.get_color(), ls="--", lw=0.8)
        a2.set_xlim(0, T)
        a2.set_xlabel("time in the iteration (s)")
        a2.set_ylabel("Gbit/s")
        a2.set_title("WAN throughput per direction (dashed: the scenario's bandwidth)"
                     + (f"\nonly {100 * traced / wan_bytes:.3g}% of the WAN bytes: the trace "
                        "filter removed the rest" if partial else ""))
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
    try:
        _save(fig, out, out_option)
    finally:
        plt.close(fig)
    return out


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1 as every hgsim command does (argparse's own
    code is 2), and its message quotes the arguments as :func:`shown` does."""

    def error(self, message):
        self.print_usage(sys.stderr)
        words = re.sub(r"\S{%d,}" % (QUOTED_CHARS + 1), lambda m: shown(m.group()), message)
        self.exit(1, f"{self.prog}: error: {_shown_message(words)}\n")


def main(argv=None):
    """``hgsim plot`` (``sweep``) and ``hgsim run --plot`` (``run``): 0 when the figure is
    written; 1 with a one-line message naming the file or argument for anything else."""
    parser = _Parser(prog="hgsim plot")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sweep", help="a sweep database's points")
    s.add_argument("db")
    s.add_argument("--x", required=True, help="the axis along x (an axis path, or point)")
    s.add_argument("--y", required=True, help="the metric (iteration_time_s, tokens_per_s, "
                   "mfu, wall_s, or a number of the results JSON)")
    s.add_argument("--color", help="one line per value of this axis")
    s.add_argument("--out", required=True, help="FILE.png or FILE.svg")
    r = sub.add_parser("run", help="one simulated iteration (what hgsim run --plot runs: "
                       "messages name the output --plot)")
    r.add_argument("--result", required=True, help="hgsim run --json's output")
    r.add_argument("--trace", help="hgsim run --trace's output (WAN time series)")
    r.add_argument("--scenario", help="the scenario (WAN bandwidths)")
    r.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    command = "hgsim plot" if args.what == "sweep" else "hgsim run"
    from . import Error
    try:
        if args.what == "sweep":
            plot_sweep(args.db, args.x, args.y, args.out, args.color)
        else:
            plot_run(args.result, args.out, args.trace, args.scenario, out_option="--plot")
    except (PlotError, Error) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 1
    print(f"{command}: wrote {shown(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
