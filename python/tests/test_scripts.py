"""The scripts in scripts/, validation/ and notebooks/run_notebooks.py: a bad argument, a
missing file or an output that cannot be written is one line 'SCRIPT: error: ...' and exit
status 1, never a traceback, and comes before any long work. A failed comparison or plan is
an exit status 1, never 0. Fast: no simulation runs longer than a second."""
import os
import pathlib
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("HGSIM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def script(path, *args, cwd=None, timeout=60):
    return subprocess.run([PYTHON, str(ROOT / path), *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(out, name, words):
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}: error: "), out.stderr
    assert words in last, last


@pytest.fixture
def fake_hgsim(tmp_path):
    """An hgsim that fails as hgsim plan does on a bad argument: the reason first, then a
    usage pointer."""
    path = tmp_path / "fake-hgsim"
    path.write_text("#!/bin/sh\necho 'hgsim: error: --time-budget: must be > 0' >&2\n"
                    "echo \"run 'hgsim plan --help' for usage\" >&2\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


NOWHERE = "/nonexistent-hgsim-dir"


@pytest.mark.parametrize("path,args,words", [
    ("scripts/check-readme-outputs.py", ["{hgsim}", NOWHERE + "/README.md"], "no such file"),
    ("scripts/check-readme-outputs.py", [NOWHERE + "/hgsim", "README.md"], "no such file"),
    ("scripts/check-readme-outputs.py", ["{hgsim}", "scripts"], "no Markdown files"),
    ("scripts/compare-results.py", [NOWHERE + "/hgsim", "{hgsim}", "x.yaml"], "no such file"),
    ("scripts/compare-results.py", ["{hgsim}", "{hgsim}", "x.yaml", "--tolerance", "nan"],
     "not a finite number"),
    ("scripts/compare-results.py", ["{hgsim}", "{hgsim}", "x.yaml", "--tolerance", "-1"],
     "must be at least 0"),
    ("scripts/reproduce-paper.py", ["--hgsim", NOWHERE + "/hgsim"], "no such file"),
    ("scripts/reproduce-paper.py", ["--time-budget", "-1"], "must be above 0"),
    ("scripts/reproduce-paper.py", ["--time-budget", "inf"], "not a finite number"),
    ("scripts/reproduce-paper.py", ["--out", NOWHERE + "/t.md"], "no folder"),
    ("validation/published.py", ["--csv", NOWHERE + "/runs.csv"], "no such file"),
    ("validation/published.py", ["--out", NOWHERE + "/p.md"], "no folder"),
    ("validation/kernels.py", ["--out", NOWHERE + "/k.md"], "no folder"),
    ("validation/kernels.py", ["--measured", NOWHERE], "no vidur_"),
    ("validation/live-validation.py", ["--repeat", "0"], "must be at least 1"),
    ("validation/live-validation.py", ["--steps", "x"], "not a whole number"),
    ("validation/live-validation.py", ["--render-only", "--json-out", NOWHERE + "/l.json",
                                       "--out", "{tmp}/l.md"], "no such file"),
    ("validation/live-validation.py", ["--json-out", NOWHERE + "/l.json", "--out",
                                       "{tmp}/l.md"], "no folder"),
    ("validation/convergence.py", ["--only", "99", "--out", "{tmp}"], "not a setting number"),
    ("validation/convergence.py", ["--only", "x", "--out", "{tmp}"], "not a setting number"),
    ("validation/convergence.py", ["--only", "-1", "--out", "{tmp}"], "not a setting number"),
    ("validation/convergence.py", ["--only", "0", "--out", NOWHERE], "no such folder"),
    ("validation/convergence.py", ["--seeds", "0", "--diloco"], "must be at least 1"),
    ("validation/duplex.py", ["--rate", "0"], "must be above 0"),
    ("validation/duplex.py", ["--bytes", "-3"], "must be at least 1"),
    ("notebooks/run_notebooks.py", ["--out", "{tmp}", "--timeout", "0", "x.ipynb"],
     "must be above 0"),
    ("notebooks/run_notebooks.py", ["--out", "{tmp}", NOWHERE + "/x.ipynb"], "no such file"),
])
def test_bad_arguments_are_one_line_and_exit_1(path, args, words, hgsim_binary, tmp_path):
    args = [a.format(hgsim=hgsim_binary, tmp=tmp_path) for a in args]
    assert_one_line_error(script(path, *args), os.path.basename(path), words)


def test_live_validation_render_only_refuses_json_it_did_not_write(tmp_path):
    bad = tmp_path / "l.json"
    bad.write_text('{"wan-bound-1f1b": {}}')
    out = script("validation/live-validation.py", "--render-only", "--json-out", bad, "--out",
                 tmp_path / "l.md")
    assert_one_line_error(out, "live-validation.py", "not the JSON live-validation.py writes")


def test_published_refuses_a_row_it_cannot_read(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("id,gpus\nx,abc\n")
    out = script("validation/published.py", "--csv", "runs.csv", "--out", "p.md", cwd=tmp_path)
    assert_one_line_error(out, "published.py", "--csv runs.csv:2: no gpu")


def test_compare_results_fails_when_a_scenario_was_not_compared(hgsim_binary, fake_hgsim,
                                                                tmp_path):
    # wan-sweep.yaml without its sweep: two GPUs, simulated in milliseconds.
    text = (ROOT / "scenarios" / "examples" / "wan-sweep.yaml").read_text()
    scenario = tmp_path / "one.yaml"
    scenario.write_text(text[:text.index("\nsweep:") + 1])
    out = script("scripts/compare-results.py", hgsim_binary, hgsim_binary, scenario)
    assert out.returncode == 0, out.stdout + out.stderr
    # The new binary fails: not compared, exit 1.
    out = script("scripts/compare-results.py", hgsim_binary, fake_hgsim, scenario)
    assert "not compared (old: ok; new: exit 1: hgsim: error: --time-budget" in out.stdout
    assert_one_line_error(out, "compare-results.py", "1 of 1 scenarios could not be compared")
    # Both fail (a missing scenario): exit 1, with hgsim's reason.
    out = script("scripts/compare-results.py", hgsim_binary, hgsim_binary, NOWHERE + "/s.yaml")
    assert "cannot open file" in out.stdout
    assert_one_line_error(out, "compare-results.py", "could not be compared")


def test_reproduce_paper_quotes_the_error_and_fails(fake_hgsim, tmp_path):
    table = tmp_path / "t.md"
    out = script("scripts/reproduce-paper.py", "--hgsim", fake_hgsim, "--out", table)
    assert_one_line_error(out, "reproduce-paper.py", "rows have no plan")
    rows = [l for l in table.read_text().splitlines() if "no plan:" in l]
    assert rows and all("hgsim: error: --time-budget: must be > 0" in r for r in rows)
    assert not any("for usage" in r for r in rows)


def test_published_error_summary_is_the_committed_tables_figures():
    """published-errors.json (what the tool reads) says what published.md's table says:
    mean |error| and mean signed error of each group, refusals apart, by hand."""
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("published", ROOT / "validation/published.py")
    published = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(published)
    summary = published.error_summary({"single-node": [0.1, -0.3, None], "multi-node": [0.2]})
    single = summary["classes"]["datasheet"]["single-node"]
    assert single["runs"] == 2 and single["refused"] == 1 and single["optimistic_runs"] == 1
    assert single["mean_abs_error"] == pytest.approx(0.2)
    assert single["mean_signed_error"] == pytest.approx(-0.1)
    # The iteration time's errors (what hgsim prints beside a time): a throughput 25 % too
    # high is a time 20 % too short; an iteration_s error is the time's own.
    assert published.time_error("mfu", 0.25) == pytest.approx(-0.2)
    assert published.time_error("iteration_s", -0.2) == pytest.approx(-0.2)
    timed = published.error_summary({"single-node": [0.25, -0.2]},
                                    {"single-node": [-0.2, -0.2]})["classes"]["datasheet"]
    assert timed["single-node"]["optimistic_runs"] == 2
    assert timed["single-node"]["mean_signed_time_error"] == pytest.approx(-0.2)
    assert timed["single-node"]["mean_abs_time_error"] == pytest.approx(0.2)
    committed = json.loads((ROOT / "validation/published-errors.json").read_text())
    table = (ROOT / "validation/published.md").read_text()
    for group, figures in committed["classes"]["datasheet"].items():
        assert f"- {group}: {figures['runs'] + figures['refused']} runs, mean |error| " \
               f"{figures['mean_abs_error']:.1%}" in table


def test_published_breakdown_is_the_stages_mean_share_of_the_iteration():
    """The breakdown table's figures: each part's seconds averaged over the stages, as a
    fraction of the iteration (worked by hand for two stages of a 2 s iteration)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("published", ROOT / "validation/published.py")
    published = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(published)
    result = {"stages": [{"breakdown": {"gemm_s": 1.2, "pp_comm_s": 0.3, "bubble_s": 0.5}},
                         {"breakdown": {"gemm_s": 1.0, "attention_s": 0.4, "bubble_s": 0.6}}]}
    parts = published.breakdown(result, 2.0)
    assert parts["gemm"] == pytest.approx(0.55)       # (1.2 + 1.0) / 2 / 2
    assert parts["attention"] == pytest.approx(0.1)   # (0 + 0.4) / 2 / 2
    assert parts["pp_comm"] == pytest.approx(0.075)
    assert parts["bubble"] == pytest.approx(0.275)
    assert sum(parts.values()) == pytest.approx(1.0)
    assert published.breakdown({"stages": []}, 2.0) is None


def test_convergence_loss_summary_is_the_committed_tables_figures():
    """convergence-losses.json (what the planner reads) says what convergence.md's table
    says, and --summary-only writes it again from the committed CSV."""
    import json
    committed = json.loads((ROOT / "validation/convergence-losses.json").read_text())
    table = (ROOT / "validation/convergence.md").read_text()
    for s in committed["settings"]:
        assert f"| {s['setting']} | {s['final_loss']:.4f} | {100 * s['loss_increase']:+.2f}% |" \
            in table


def test_convergence_summary_only_rewrites_the_committed_summary(tmp_path):
    import json
    import shutil
    shutil.copy(ROOT / "validation/convergence.csv", tmp_path / "convergence.csv")
    out = script("validation/convergence.py", "--summary-only", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "convergence-losses.json").read_text()) == \
        json.loads((ROOT / "validation/convergence-losses.json").read_text())
