"""The notebooks (notebooks/): make_notebooks.py is their source of truth, and a notebook
started without the module on its path says how to set it in one line. (The notebooks'
own checks, closed forms and counts, run inside them: ctest's notebook_* tests.)"""
import os
import pathlib
import shutil
import subprocess
import sys

import nbformat

ROOT = pathlib.Path(os.environ.get("HGSIM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
NOTEBOOKS = ROOT / "notebooks"
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def committed():
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_committed_notebooks_are_what_make_notebooks_writes(tmp_path):
    shutil.copy(NOTEBOOKS / "make_notebooks.py", tmp_path)
    subprocess.run([PYTHON, str(tmp_path / "make_notebooks.py")], check=True, timeout=60)
    written = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert written == [p.name for p in committed()], "run notebooks/make_notebooks.py"
    for path in committed():
        assert (tmp_path / path.name).read_text() == path.read_text(), \
            f"{path.name} differs from make_notebooks.py's: run notebooks/make_notebooks.py"


def test_every_notebook_checks_for_the_module_first():
    for path in committed():
        book = nbformat.read(path, as_version=4)
        first = next(c for c in book.cells if c.cell_type == "code")
        assert "except ImportError" in first.source and "PYTHONPATH=" in first.source, path.name
        # every figure is explained: a markdown cell right after each cell that draws one
        for i, cell in enumerate(book.cells):
            if cell.cell_type == "code" and "plt.subplots" in cell.source:
                assert i + 1 < len(book.cells) and book.cells[i + 1].cell_type == "markdown", \
                    f"{path.name}: cell {i} draws a figure that no markdown cell follows"


def test_a_notebook_without_the_module_says_how_to_set_it_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([PYTHON, str(NOTEBOOKS / "run_notebooks.py"), "--out", str(tmp_path),
                          str(committed()[0])], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "hgsim is not importable" in lines[0] and "PYTHONPATH=" in lines[0], lines[0]
    assert "Traceback" not in out.stderr and "ModuleNotFoundError" not in out.stderr
    # In Jupyter the cell shows the same line, and no traceback of the import.
    book = nbformat.read(tmp_path / committed()[0].name, as_version=4)
    first = next(c for c in book.cells if c.cell_type == "code")
    errors = [o for o in first.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "SystemExit", first.outputs
    assert not any(o.output_type == "stream" for o in first.outputs), first.outputs
