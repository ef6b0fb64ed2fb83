"""hgsim.plots: the figures of a sweep database and of one run, drawn from what hgsim
writes (the database of `hgsim sweep`, the results and trace of `hgsim run`)."""
import json
import os
import pathlib
import shutil
import subprocess

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
