"""hgsim.plots: the figures of a sweep database and of one run, drawn from what hgsim
writes (the database of `hgsim sweep`, the results and trace of `hgsim run`)."""
import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import warnings

import pytest

from hgsim import plots

ROOT = pathlib.Path(os.environ.get("HGSIM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture(scope="module")
def sweep_db(hgsim_binary, tmp_path_factory):
    """One sweep for every test here (wan-sweep.yaml: 6 small points)."""
    examples = ROOT / "scenarios" / "examples"
    tmp_path = tmp_path_factory.mktemp("sweep")
    scenario = tmp_path / "wan-sweep.yaml"
    shutil.copy(examples / "wan-sweep.yaml", scenario)
    db = tmp_path / "s.sqlite"
    out = subprocess.run([hgsim_binary, "sweep", str(scenario), "-j", "2", "--db", str(db)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return db


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_sweep_figure_png_and_svg(sweep_db, hgsim_binary, tmp_path):
    png = tmp_path / "f.png"
    plots.plot_sweep(sweep_db, "wan[*].bandwidth", "iteration_time_s", png, color="training.seq_len")
    assert is_png(png)
    svg = tmp_path / "f.svg"
    out = subprocess.run([hgsim_binary, "plot", str(sweep_db), "--x", "wan[*].bandwidth", "--y",
                          "model_tflops_per_gpu", "--out", str(svg)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "<svg" in svg.read_text()


def test_sweep_figure_refuses_what_it_cannot_draw(sweep_db, hgsim_binary, tmp_path):
    with pytest.raises(plots.PlotError, match="not an axis of this sweep; axes: wan"):
        plots.plot_sweep(sweep_db, "wan.bandwidth", "mfu", tmp_path / "f.png")
    with pytest.raises(plots.PlotError, match="not a number of the points"):
        plots.plot_sweep(sweep_db, "wan[*].bandwidth", "devices", tmp_path / "f.png")
    with pytest.raises(plots.PlotError, match=".png or .svg"):
        plots.plot_sweep(sweep_db, "wan[*].bandwidth", "mfu", tmp_path / "f.jpg")
    out = subprocess.run([hgsim_binary, "plot", str(tmp_path / "none.sqlite"), "--x", "a", "--y",
                          "mfu", "--out", str(tmp_path / "f.png")], capture_output=True, text=True)
    assert out.returncode == 1 and "no such file" in out.stderr


def test_quantities_become_numbers_in_one_unit():
    assert plots.axis_values(["1Gbps", "100Mbps"]) == ([1.0, 0.1], "Gbit/s")
    assert plots.axis_values(["1ms", "1s"]) == ([1.0, 1000.0], "ms")
    assert plots.axis_values([1, 2]) == ([1, 2], None)
    assert plots.axis_values(["int8", "none"]) == (["int8", "none"], None)


def test_run_figure_and_its_wan_series(examples, hgsim_binary, tmp_path):
    # wan-sweep.yaml without its sweep: two GPUs, a pipeline across a WAN.
    text = (examples / "wan-sweep.yaml").read_text()
    scenario = tmp_path / "one.yaml"
    scenario.write_text(text[:text.index("\nsweep:") + 1])
    trace = tmp_path / "t.json"
    out = subprocess.run([hgsim_binary, "run", str(scenario), "--json", "--trace", str(trace),
                          "--plot", str(tmp_path / "run.png")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert is_png(tmp_path / "run.png")
    result = json.loads(out.stdout)
    # Each stage's four parts add up to the iteration.
    for stage in plots.stage_breakdown(result).values():
        total = stage["compute_s"] + stage["comm_exposed_s"] + stage["bubble_s"] + stage["idle_s"]
        assert total == pytest.approx(result["iteration_time_s"], rel=1e-6)
    # The throughput series carries every WAN byte of the trace: its integral over the
    # iteration is the bytes of the WAN events, per direction.
    events = json.loads(trace.read_text())
    series = plots.wan_throughput(events, result["iteration_time_s"], bins=50)
    assert series
    wan_pid = next(e["pid"] for e in events["traceEvents"]
                   if e.get("ph") == "M" and e["args"].get("name") == "WAN")
    width = result["iteration_time_s"] / 50
    total_series = sum(sum(v) * width for _, v in series.values())
    total_events = sum(e["args"]["bytes"] for e in events["traceEvents"]
                       if e.get("ph") == "X" and e["pid"] == wan_pid and e["dur"] > 0)
    assert total_series == pytest.approx(total_events, rel=1e-6)
    capacities = plots.wan_capacities(str(scenario))
    assert capacities["wan:east->west"] == pytest.approx(10e9 / 8)
    # A series per link (its lanes folded in), named as the scenario's directions.
    assert set(series) <= set(capacities)


# ---- hostile input: every problem is one line naming the file or argument, exit 1 ---------

# The schema hgsim sweep writes (apps/results_db.cpp, kSchema).
SCHEMA = """
CREATE TABLE sweep (
  id INTEGER PRIMARY KEY CHECK (id = 1), scenario_file TEXT NOT NULL, scenario TEXT NOT NULL,
  hgsim_version TEXT NOT NULL, options TEXT NOT NULL, axes TEXT NOT NULL,
  points INTEGER NOT NULL, started_at TEXT NOT NULL);
CREATE TABLE points (
  point INTEGER PRIMARY KEY, settings TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'failed')), error TEXT,
  iteration_time_s REAL, tokens_per_s REAL, mfu REAL, plan TEXT, result TEXT,
  finished_at TEXT NOT NULL, wall_s REAL NOT NULL, scenario_hash TEXT NOT NULL);
"""
AXES = ["wan[*].bandwidth", "training.seq_len"]


def crafted_db(path, *damage, points=6, axes=AXES):
    """A sweep database as hgsim sweep writes it (6 ok points of wan-sweep's two axes),
    then the SQL statements ``damage`` applied; journal mode DELETE, as a copied file has."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    con.execute("INSERT INTO sweep VALUES (1, '/s/wan-sweep.yaml', '{}', '0.1.0', '{}', ?, ?, "
                "'2026-01-01T00:00:00Z')", (json.dumps(axes), points))
    for p in range(1, points + 1):
        settings = {"wan[*].bandwidth": ["100Mbps", "1Gbps", "10Gbps"][p % 3],
                    "training.seq_len": [256, 1024][p % 2]}
        con.execute("INSERT INTO points VALUES (?, ?, 'ok', NULL, ?, ?, ?, '{}', ?, "
                    "'2026-01-01T00:00:01Z', 0.1, 'h')",
                    (p, json.dumps(settings), 1.0 / p, 1000.0 * p, 0.1 * p,
                     json.dumps({"model_tflops_per_gpu": 2.0 * p, "gpus": 2})))
    for statement in damage:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def plot_command(hgsim_binary, *args):
    return subprocess.run([hgsim_binary, "plot", *map(str, args)], capture_output=True,
                          text=True, errors="backslashreplace", timeout=60)


def plot_main(capsys, *args):
    """What hgsim plot runs (plots.main), in this process: no interpreter to start."""
    status = plots.main(["sweep", *map(str, args)])
    return subprocess.CompletedProcess(args, status, "", capsys.readouterr().err)


def shown(path):
    """A path as the messages quote it (cut to 60 characters: pytest's folders are longer)."""
    return plots.shown(str(path))


def assert_refused(out, *parts):
    """Exit 1 and one short line of message, with every one of ``parts``: no traceback,
    no control character, no quoted input of more than 60 characters."""
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    message = out.stderr.strip().splitlines()[-1]
    for part in parts:
        assert part in message, message
    assert not any(ord(c) < 32 or ord(c) == 127 for c in out.stderr.replace("\n", "")), \
        repr(out.stderr)
    assert len(message) < 400, len(message)
    return message


def test_an_output_in_a_missing_folder_is_refused_before_reading(hgsim_binary, tmp_path,
                                                                  capsys):
    db = crafted_db(tmp_path / "s.sqlite")
    missing = tmp_path / "nodir" / "f.png"
    assert_refused(plot_command(hgsim_binary, db, "--x", AXES[0], "--y", "mfu", "--out", missing),
                   f"hgsim plot: --out {shown(missing)}: no such directory {shown(missing.parent)}")
    # Checked first: even a database that is not one is not read.
    text = tmp_path / "text.sqlite"
    text.write_text("hello")
    assert_refused(plot_main(capsys, text, "--x", "a", "--y", "mfu", "--out", missing),
                   "no such directory")
    assert_refused(plot_main(capsys, db, "--x", AXES[0], "--y", "mfu", "--out", tmp_path),
                   "the figure is written as .png or .svg")
    folder = tmp_path / "folder.png"
    folder.mkdir()
    assert_refused(plot_main(capsys, db, "--x", AXES[0], "--y", "mfu", "--out", folder),
                   f"--out {shown(folder)}: is a directory")
    # A folder where nothing can be created (even by root): the write's error, named.
    assert_refused(plot_main(capsys, db, "--x", AXES[0], "--y", "mfu", "--out",
                             "/proc/hgsim-plot.png"),
                   "--out /proc/hgsim-plot.png: cannot write:")


def test_run_plot_names_its_own_option(examples, hgsim_binary, tmp_path):
    text = (examples / "wan-sweep.yaml").read_text()
    scenario = tmp_path / "one.yaml"
    scenario.write_text(text[:text.index("\nsweep:") + 1])
    missing = tmp_path / "nodir" / "r.png"
    # hgsim run checks --plot's folder and extension before it simulates.
    for plot, says in [(missing, "no folder"), (tmp_path / "r.jpg", "expected FILE.png or FILE.svg")]:
        out = subprocess.run([hgsim_binary, "run", str(scenario), "--plot", str(plot)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stderr
        assert "error: --plot: " in out.stderr and says in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and "simulated" not in out.stderr, out.stderr
    # What hgsim run --plot runs, when the plotter is called with such an output itself.
    result = tmp_path / "r.json"
    result.write_text("{}")
    out = subprocess.run([sys.executable, "-m", "hgsim.plots", "run", "--result", str(result),
                          "--out", "r.jpg"], capture_output=True, text=True, timeout=60)
    assert_refused(out, "hgsim run: --plot r.jpg: the figure is written as .png or .svg")
    out = subprocess.run([sys.executable, "-m", "hgsim.plots", "run", "--result", str(result),
                          "--out", str(tmp_path / "r.png")], capture_output=True, text=True,
                         timeout=60)
    assert_refused(out, f"--result {shown(result)}: not hgsim run --json's output")


DEEP = "'{\"k\":' || replace(hex(zeroblob(100000)), '00', '[') || " \
       "replace(hex(zeroblob(100000)), '00', ']') || '}'"


@pytest.mark.parametrize("damage, y, message", [
    ("UPDATE points SET settings = '{not json' WHERE point = 2", "mfu",
     "point 2: settings: not JSON (Expecting property name enclosed in double quotes"),
    (f"UPDATE points SET settings = {DEEP} WHERE point = 2", "mfu",
     "point 2: settings: JSON nested too deeply"),
    ("UPDATE points SET settings = '[1, 2]' WHERE point = 2", "mfu",
     "point 2: settings: a JSON array, not an object of axis values"),
    ("UPDATE points SET settings = '{}' WHERE point = 3", "mfu",
     "point 3: settings: no value of the axis wan[*].bandwidth"),
    ("UPDATE points SET mfu = NULL WHERE point = 2", "mfu",
     "point 2: mfu: NULL, not a finite number"),
    ("UPDATE points SET iteration_time_s = 'fast' WHERE point = 4", "iteration_time_s",
     "point 4: iteration_time_s: text fast, not a finite number"),
    ("UPDATE points SET tokens_per_s = 1e308 * 10 WHERE point = 2", "tokens_per_s",
     "point 2: tokens_per_s: inf, not a finite number"),
    ("UPDATE points SET result = 'garbage' WHERE point = 5", "model_tflops_per_gpu",
     "point 5: result: not JSON (Expecting value at character 0)"),
    ("UPDATE points SET result = NULL WHERE point = 2", "model_tflops_per_gpu",
     "point 2: result: NULL, not JSON text"),
    ("UPDATE points SET result = '{\"gpus\": 2}' WHERE point = 2", "model_tflops_per_gpu",
     "point 2: result: model_tflops_per_gpu: NULL, not a finite number"),
    ("UPDATE sweep SET axes = 'not json'", "mfu",
     "sweep: axes: not JSON (Expecting value at character 0)"),
    ("UPDATE sweep SET axes = '[1, 2]'", "mfu", "sweep: axes: not a list of axis names"),
])
def test_a_damaged_point_is_named_with_its_column(tmp_path, capsys, damage, y, message):
    db = crafted_db(tmp_path / "d.sqlite", damage)
    out = plot_main(capsys, db, "--x", AXES[0], "--y", y, "--color", AXES[1],
                    "--out", tmp_path / "f.png")
    assert_refused(out, f"hgsim plot: {shown(db)}: {message}")
    assert not (tmp_path / "f.png").exists()


def test_not_a_sweep_database_is_named(hgsim_binary, tmp_path, capsys):
    args = ("--x", AXES[0], "--y", "mfu", "--out", tmp_path / "f.png")
    text = tmp_path / "text.sqlite"
    text.write_text("not a database, but long enough to have a header of one" * 10)
    assert_refused(plot_command(hgsim_binary, text, *args),
                   f"{shown(text)}: file is not a database (SQLite)")
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    assert_refused(plot_main(capsys, empty, *args),
                   f"{shown(empty)}: not a sweep database (no sweep table")
    no_sweep = crafted_db(tmp_path / "n.sqlite", "DROP TABLE sweep")
    assert_refused(plot_main(capsys, no_sweep, *args),
                   f"{shown(no_sweep)}: not a sweep database (no sweep table")
    old = crafted_db(tmp_path / "o.sqlite", "ALTER TABLE points DROP COLUMN mfu")
    assert_refused(plot_main(capsys, old, *args),
                   f"{shown(old)}: the points table has no column mfu")
    assert_refused(plot_main(capsys, tmp_path, *args),
                   f"{shown(tmp_path)}: not a regular file")


def test_plotting_leaves_the_database_as_it_was(hgsim_binary, tmp_path):
    db = crafted_db(tmp_path / "s.sqlite")
    before = db.read_bytes()
    out = plot_command(hgsim_binary, db, "--x", AXES[0], "--y", "mfu", "--out", tmp_path / "f.png")
    assert out.returncode == 0, out.stderr
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png", "s.sqlite"]


def test_usage_errors_exit_1_with_one_short_line(hgsim_binary, tmp_path):
    out = plot_command(hgsim_binary)
    assert_refused(out, "the following arguments are required: db, --x, --y, --out")
    out = plot_command(hgsim_binary, "db", "--x", "a", "--y", "b", "--out", "c.png",
                       "--bogus", "\x1b[31m" + "z" * 100_000)
    message = assert_refused(out, "unrecognized arguments: --bogus \\x1b[31mzzz")
    assert "z" * 61 not in message


def test_control_characters_and_long_values_are_escaped(hgsim_binary, tmp_path):
    evil_axis = "\x1b]0;title\x07" + "a" * 1000
    db = crafted_db(tmp_path / "s.sqlite", axes=AXES + [evil_axis])
    out = plot_command(hgsim_binary, db, "--x", "\x1b[31m" + "x" * 100_000, "--y", "mfu",
                       "--out", tmp_path / "f.png")
    message = assert_refused(out, "--x \\x1b[31mxxx", "not an axis of this sweep; axes: "
                             "wan[*].bandwidth, training.seq_len, \\x1b]0;title\\x07aaa")
    assert "x" * 61 not in message and "a" * 61 not in message
    bad_text = crafted_db(tmp_path / "t.sqlite",
                          "UPDATE points SET mfu = '\x1b[2J\x07' || hex(zeroblob(10000)) "
                          "WHERE point = 2")
    message = assert_refused(plot_command(hgsim_binary, bad_text, "--x", AXES[0], "--y", "mfu",
                                          "--out", tmp_path / "f.png"),
                             "point 2: mfu: text \\x1b[2J\\x07000")
    assert "0" * 61 not in message
    # Text values of an ordinal axis become tick labels, escaped (matplotlib would warn of
    # the missing glyphs, quoting them raw) and cut; a "$" does not start mathtext.
    ordinal = crafted_db(tmp_path / "o.sqlite", "UPDATE points SET settings = json_set(settings, "
                         "'$.\"wan[*].bandwidth\"', '\x1b[31m$\\frac$' || hex(zeroblob(5000)))"
                         " WHERE point = 2")
    out = plot_command(hgsim_binary, ordinal, "--x", AXES[0], "--y", "mfu", "--out",
                       tmp_path / "f.png")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stderr and "Traceback" not in out.stderr
    assert is_png(tmp_path / "f.png")


def test_shown_escapes_and_cuts():
    assert plots.shown("plain") == "plain"
    assert plots.shown("a\x1b[31m\x07\x00\u202e") == "a\\x1b[31m\\x07\\x00\\u202e"
    long = plots.shown("s" * 30 + "m" * 10**6 + "e" * 30)
    assert long == "s" * 30 + "m" * 30 + "... (1000060 characters)"
    assert plots.shown("bad\udce9name") == "bad\\udce9name"  # a lone surrogate from argv


def test_only_the_points_drawn_are_kept(tmp_path, monkeypatch):
    # 600 points of 6 settings: what is drawn (and kept) is 6 distinct (line, x, y), also
    # when compaction runs many times during the read.
    monkeypatch.setattr(plots, "COMPACTED_POINTS", 4)
    db = crafted_db(tmp_path / "s.sqlite", points=600)
    con = sqlite3.connect(db)
    con.execute("UPDATE points SET mfu = 0.1 * (1 + point % 6)")
    con.commit()
    con.close()
    with plots.open_sweep(db) as (con, sweep):
        drawn = plots.sweep_points(con, str(db), sweep["axes"], AXES[0], "mfu", AXES[1])
    assert drawn.count == 600
    assert drawn.drawn().shape == (6, 4)
    assert drawn.x_values.values == ["1Gbps", "10Gbps", "100Mbps"]
    assert drawn.line_values.values == [1024, 256]
    plots.plot_sweep(db, AXES[0], "mfu", tmp_path / "f.svg", color=AXES[1])
    assert "600 of 600 points" in (tmp_path / "f.svg").read_text()


def test_a_color_axis_of_too_many_values_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "MAX_LINES", 1)
    db = crafted_db(tmp_path / "s.sqlite")
    with pytest.raises(plots.PlotError, match=r"--color training.seq_len: more than 1 values"):
        plots.plot_sweep(db, AXES[0], "mfu", tmp_path / "f.png", color=AXES[1])


# ---- what each point ran: the plan's name beside it, the key naming every plan ----------

def sweep_figure(monkeypatch, db, *args, **kwargs):
    """The figure plot_sweep draws (not written): (key text, labels beside the points)."""
    seen = []
    monkeypatch.setattr(plots, "_save", lambda fig, *a: seen.append(fig))
    plots.plot_sweep(db, *args, **kwargs)
    fig = seen[0]
    key = "\n".join(t.get_text() for t in fig.texts)
    return key, sorted(t.get_text() for t in fig.get_axes()[0].texts)


def results_json(hgsim_binary, db):
    out = subprocess.run([hgsim_binary, "results", str(db), "--json"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["points"]


def test_the_sweep_figure_names_the_plan_each_point_ran(sweep_db, hgsim_binary, monkeypatch,
                                                        tmp_path):
    # wan-sweep.yaml runs one plan at every point: the key names it as hgsim results does
    # (its GPUs per cluster and its description), and every point carries its name.
    points = results_json(hgsim_binary, sweep_db)
    choices = {(p["choice"]["gpus_used"], p["choice"]["plan"]) for p in points}
    assert len(choices) == 1
    (gpus, plan), = choices
    assert gpus == 2
    key, labels = sweep_figure(monkeypatch, sweep_db, "wan[*].bandwidth", "iteration_time_s",
                               tmp_path / "f.png", color="training.seq_len")
    assert f"P1 (o): 2 GPUs (east 1, west 1); {plan}"[:100] in key, key
    assert labels and set(labels) == {"P1"}


def test_points_on_top_of_each_other_name_every_plan(hgsim_binary, monkeypatch, tmp_path):
    # Points 1 and 4 (1Gbps, seq_len 1024 and 256) drawn at one place with different plans:
    # the label there names both, and the key says what each is; the points of an older
    # hgsim's rows (no choice, a plan that does not read) say "plan not recorded".
    one = {"plan": "gpipe; 1 x [a 1 stage tp4]", "gpus_used": 4,
           "gpus_per_cluster": [{"cluster": "a", "gpus": 4}]}
    two = {"plan": "1f1b; 1 x [a 1 stage tp4 > b 1 stage tp4]", "gpus_used": 8,
           "gpus_per_cluster": [{"cluster": "a", "gpus": 4}, {"cluster": "b", "gpus": 4}]}
    db = crafted_db(tmp_path / "s.sqlite", "ALTER TABLE points ADD COLUMN choice TEXT",
                    f"UPDATE points SET choice = '{json.dumps(one)}' WHERE point = 1",
                    f"UPDATE points SET choice = '{json.dumps(two)}' WHERE point = 4",
                    "UPDATE points SET mfu = 0.5 WHERE point IN (1, 4)")
    key, labels = sweep_figure(monkeypatch, db, AXES[0], "mfu", tmp_path / "f.png")
    texts = {p["point"]: p for p in results_json(hgsim_binary, db)}
    assert texts[1]["choice"] == one and texts[2]["choice"] is None
    assert "P1 (o): 4 GPUs (a 4); gpipe; 1 x [a 1 stage tp4]" in key, key
    assert "P2 (s): plan not recorded" in key, key
    assert "P3 (D): 8 GPUs (a 4, b 4); 1f1b; 1 x [a 1 stage tp4 > b 1 stage tp4]" in key, key
    assert "P1, P3" in labels, labels
    # A database of an older hgsim (no choice column at all) draws, every plan unrecorded.
    old = crafted_db(tmp_path / "old.sqlite")
    key, labels = sweep_figure(monkeypatch, old, AXES[0], "mfu", tmp_path / "f.png")
    assert "P1 (o): plan not recorded" in key and "P2" not in key, key
    # A choice that is not what hgsim sweep writes is refused, naming the point and column.
    bad = crafted_db(tmp_path / "bad.sqlite", "ALTER TABLE points ADD COLUMN choice TEXT",
                     "UPDATE points SET choice = '[1]' WHERE point = 2")
    with pytest.raises(plots.PlotError, match=r"point 2: choice: expected an object"):
        plots.plot_sweep(bad, AXES[0], "mfu", tmp_path / "f.png")


# ---- the run figure's labels, arguments and filtered traces ------------------------------

@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """wan-sweep.yaml without its sweep, simulated: (scenario path, result, WAN-only trace)."""
    import hgsim
    tmp_path = tmp_path_factory.mktemp("run")
    text = (ROOT / "scenarios" / "examples" / "wan-sweep.yaml").read_text()
    scenario = tmp_path / "one.yaml"
    scenario.write_text(text[:text.index("\nsweep:") + 1])
    trace = tmp_path / "wan.json"
    with warnings.catch_warnings():  # the scenario's TCP window advice
        warnings.simplefilter("ignore")
        result = hgsim.simulate(str(scenario), trace=str(trace), trace_filter="tracks=wan")
    return scenario, result, trace


def stage_labels(monkeypatch, result, out, **kwargs):
    """The y tick labels of the stage panel plot_run draws."""
    seen = []
    monkeypatch.setattr(plots, "_save", lambda fig, *a: seen.append(
        [t.get_text() for t in fig.get_axes()[0].get_yticklabels()]))
    plots.plot_run(result, out, **kwargs)
    return seen[0]


def test_stage_labels_are_two_lines_with_the_cluster_escaped(one_run, monkeypatch, tmp_path):
    _, result, _ = one_run
    labels = stage_labels(monkeypatch, result, tmp_path / "f.png")
    assert labels and all("\\x" not in label for label in labels)
    assert all(label.count("\n") == 1 for label in labels)
    assert labels[0].split("\n")[1] == result["devices"][0]["cluster"]
    hostile = {**result, "devices": [{**d, "cluster": "ev\x1bil\nname"} for d in result["devices"]]}
    labels = stage_labels(monkeypatch, hostile, tmp_path / "f.png")
    assert all(label.split("\n")[1] == "ev\\x1bil\\x0aname" for label in labels)


def test_run_helpers_refuse_bad_arguments_by_name(one_run, tmp_path):
    import hgsim
    _, result, trace = one_run
    events = json.loads(trace.read_text())
    for bad in (0.0, -1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises(plots.PlotError, match="^iteration_s: .*not a positive number"):
            plots.wan_throughput(events, bad)
    for bins in (0, -1, 1.5, 10**9, None):
        with pytest.raises(plots.PlotError, match="^bins: "):
            plots.wan_throughput(events, 1.0, bins=bins)
    with pytest.raises(plots.PlotError, match="^trace: not a trace hgsim run wrote"):
        plots.wan_throughput({"events": []}, 1.0)
    for bad in ({}, {"devices": []}, {"devices": [{}]}, None):
        with pytest.raises(plots.PlotError, match="^result: not hgsim run --json's output"):
            plots.stage_breakdown(bad)
    assert issubclass(plots.PlotError, hgsim.Error) and issubclass(plots.PlotError, ValueError)
    # The result's iteration time is to blame, not the (good) trace.
    for bad in (0, -0.5, float("nan")):
        with pytest.raises(plots.PlotError, match="^--result: iteration_time_s: .*not a positive"):
            plots.plot_run({**result, "iteration_time_s": bad}, tmp_path / "f.png", trace=events)
    assert not (tmp_path / "f.png").exists()


def wan_panel_texts(monkeypatch, result, trace, scenario, out):
    seen = []
    monkeypatch.setattr(plots, "_save", lambda fig, *a: seen.append(fig.get_axes()[1]))
    plots.plot_run(result, out, trace=trace, scenario=scenario)
    panel = seen[0]
    return panel.get_title(), [t.get_text() for t in panel.texts], len(panel.lines)


def test_a_filtered_trace_does_not_draw_idle_wan_links(one_run, monkeypatch, tmp_path):
    import hgsim
    scenario, result, trace = one_run
    title, texts, lines = wan_panel_texts(monkeypatch, result, str(trace), str(scenario),
                                          tmp_path / "f.png")
    assert lines > 0 and not texts and "filter" not in title
    # kind=forward keeps no WAN message (the WAN carries the pipeline's sends).
    filtered = tmp_path / "forward.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = hgsim.simulate(str(scenario), trace=str(filtered), trace_filter="kind=forward")
    title, texts, lines = wan_panel_texts(monkeypatch, result, str(filtered), str(scenario),
                                          tmp_path / "f.png")
    assert lines == 0 and any("the trace filter removed the WAN transfers" in t for t in texts)
