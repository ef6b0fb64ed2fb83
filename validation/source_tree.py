"""The two helpers every validation script loads from the source tree, not from an
installed module: hgsim.files.atomic_open (the rule of core/files.hpp's AtomicFile: a table
is written whole or not at all) and scripts/script_cli.py (one-line errors, exit 1,
arguments checked before any long work).

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from source_tree import ROOT, files, cli
"""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _load(name, *parts):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


files = _load("hgsim_files", "python", "hgsim", "files.py")
cli = _load("script_cli", "scripts", "script_cli.py")
