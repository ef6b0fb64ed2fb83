"""hgsim.files.atomic_open: a written file holds its old content or the whole new one."""

import os
import stat

import pytest

from hgsim.files import atomic_open, output_refusal


def leftovers(folder):
    return [n for n in os.listdir(folder) if ".tmp-" in n]


def test_a_failure_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write("half of the new")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_a_complete_write_replaces_the_file_with_the_usual_permissions(tmp_path):
    target = tmp_path / "loss.csv"
    umask = os.umask(0o022)
    try:
        with atomic_open(target, newline="") as f:
            f.write("step,loss\n0,1.5\n")
    finally:
        os.umask(umask)
    assert target.read_text() == "step,loss\n0,1.5\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert leftovers(tmp_path) == []
    with atomic_open(target, "wb") as f:
        f.write(b"\x89PNG")
    assert target.read_bytes() == b"\x89PNG"


def test_a_special_file_is_written_directly():
    with atomic_open("/dev/null") as f:
        f.write("discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # not replaced by a regular file


def test_only_whole_file_modes():
    with pytest.raises(ValueError, match="mode"):
        with atomic_open("/dev/null", "a"):
            pass


def test_special_outputs_follow_the_writers_rule(tmp_path):
    # core/files.hpp output_refusal's rule (tests/test_hostile_inputs.cpp SpecialOutputs holds
    # the C++ side to the same cases): a FIFO that nothing reads is refused at once, never
    # waited on; a FIFO that something reads, /dev/null and a new path are written.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    why = output_refusal(fifo)
    assert why.startswith("it is a FIFO (named pipe) that nothing reads")
    with pytest.raises(OSError, match="that nothing reads"):
        with atomic_open(fifo) as f:
            f.write("x")
    assert output_refusal(tmp_path).startswith("it is a directory")
    assert output_refusal("/dev/null") is None
    assert output_refusal(tmp_path / "new.json") is None
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert output_refusal(fifo) is None
        with atomic_open(fifo) as f:
            f.write("read")
        assert os.read(reader, 100) == b"read"
    finally:
        os.close(reader)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
