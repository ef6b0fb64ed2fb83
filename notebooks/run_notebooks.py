#!/usr/bin/python3
"""Executes notebooks with nbclient, in notebooks/ as the working directory, and checks
that each runs without an error and draws every figure it makes (each cell that calls
plt.subplots shows an image). The executed copies go to --out (never over the committed
notebooks, which carry no outputs).

    PYTHONPATH=build/release/python /usr/bin/python3 notebooks/run_notebooks.py \\
        --out build/release/notebooks notebooks/*.ipynb
"""
import importlib.util
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# scripts/script_cli.py: one-line errors, exit 1, arguments checked before any notebook runs.
_spec = importlib.util.spec_from_file_location(
    "script_cli", os.path.join(HERE, "..", "scripts", "script_cli.py"))
cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli)


def figures_missing(book):
    """The code cells that make a figure but show no image."""
    missing = []
    for i, cell in enumerate(book.cells):
        if cell.cell_type != "code" or "plt.subplots" not in cell.source:
            continue
        if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            missing.append(i)
    return missing


def run(path, out_dir, timeout):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    try:
        book = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as e:  # nbformat's NotJSONError and ValidationError too
        return f"not a notebook ({cli.quoted(e)})", 0.0
    client = NotebookClient(book, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": HERE}})
    start = time.time()
    try:
        client.execute()
    except CellExecutionError as e:
        # A notebook that stops itself on purpose (SystemExit: the module is not on its
        # path) has said what to do in one line: that line alone, no cell dump.
        if e.ename == "SystemExit":
            return e.evalue, time.time() - start
        return f"failed: {e}", time.time() - start
    except TimeoutError as e:
        return f"failed: {cli.quoted(e)}", time.time() - start
    finally:
        nbformat.write(book, os.path.join(out_dir, os.path.basename(path)))
    missing = figures_missing(book)
    images = sum("image/png" in o.get("data", {}) for c in book.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))
    if missing:
        return f"cells {missing} make a figure but show none", time.time() - start
    if images == 0:
        return "draws no figure", time.time() - start
    return None, time.time() - start


def main():
    # The kernels run in notebooks/: PYTHONPATH made absolute still finds the build.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    parser = cli.Parser(description="Executes notebooks and checks their figures.")
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--out", required=True, help="where the executed copies go")
    parser.add_argument("--timeout", type=cli.positive_float, default=120,
                        help="seconds per cell (whole seconds: a fraction is rounded up)")
    args = parser.parse_args()
    # nbclient takes whole seconds.
    args.timeout = math.ceil(args.timeout)
    for path in args.notebooks:
        cli.input_file(path, "")
    cli.output_folder(args.out, "--out", create=True)
    failed = 0
    for path in args.notebooks:
        problem, wall = run(path, args.out, args.timeout)
        name = os.path.basename(path)
        if problem:
            failed += 1
            print(f"{name}: {problem} ({wall:.1f} s)", file=sys.stderr)
        else:
            print(f"{name}: ok, {wall:.1f} s; executed copy in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
