"""Shared fixtures: the repository root and the built hgsim binary."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(os.environ.get("HGSIM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
EXAMPLES = ROOT / "scenarios" / "examples"


@pytest.fixture
def examples():
    return EXAMPLES


@pytest.fixture(scope="session")
def hgsim_binary():
    path = os.environ.get("HGSIM_BINARY", str(ROOT / "build" / "release" / "apps" / "hgsim"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"the hgsim binary {path} is not built (set HGSIM_BINARY)")
    return path
