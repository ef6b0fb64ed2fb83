"""What the scripts in scripts/ and validation/ share on their command line: every problem
is one line `SCRIPT: error: WHAT` and exit status 1 (as every hgsim command), checked before
any long work; never a Python traceback.

Loaded by path (the scripts need no installed package):

    _spec = importlib.util.spec_from_file_location("script_cli", PATH_OF_THIS_FILE)
"""
import argparse
import json
import math
import os
import sys

# What a message quotes of an argument: enough to recognise it (hgsim's core::excerpt).
QUOTED_CHARS = 60


def quoted(text):
    """``text`` as a message quotes it: controls escaped, at most QUOTED_CHARS characters."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                    for c in text[:QUOTED_CHARS])
    return shown + (f"... ({len(text)} characters)" if len(text) > QUOTED_CHARS else "")


class ScriptError(Exception):
    """A problem the script reports as one line (the message) and exit status 1."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1 like every other problem (argparse's own code
    is 2), after the usage line."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def run(main, prog=None):
    """Calls ``main()`` and returns its exit status; a ScriptError is one line and 1."""
    prog = prog or os.path.basename(sys.argv[0])
    try:
        return main()
    except ScriptError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def positive_int(text):
    """argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def positive_float(text):
    """argparse type: a finite number above 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: must be above 0")
    return value


def finite_float(text):
    """argparse type: a finite number (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{quoted(text)}: not a finite number")
    return value


def input_file(path, option):
    """ScriptError unless ``path`` is a readable regular file."""
    where = f"{option} {quoted(path)}" if option else quoted(path)
    if not os.path.exists(path):
        raise ScriptError(f"{where}: no such file")
    if not os.path.isfile(path):
        raise ScriptError(f"{where}: not a regular file")
    if not os.access(path, os.R_OK):
        raise ScriptError(f"{where}: cannot read it (permission denied)")
    return path


def executable(path, option):
    """ScriptError unless ``path`` is an executable file (the hgsim binary)."""
    input_file(path, option)
    if not os.access(path, os.X_OK):
        raise ScriptError(f"{option} {quoted(path)}: not executable")
    return path


def output_file(path, option):
    """ScriptError unless ``path`` can be written: its folder exists and is writable, and
    it is not a folder itself. Call before any long work."""
    where = f"{option} {quoted(path)}"
    if os.path.isdir(path):
        raise ScriptError(f"{where}: is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ScriptError(f"{where}: no folder {quoted(folder)} to write it in")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ScriptError(f"{where}: cannot write it (permission denied)")
    return path


def output_folder(path, option, create=False):
    """ScriptError unless ``path`` is a writable folder (made first when ``create``)."""
    where = f"{option} {quoted(path)}"
    if create and not os.path.exists(path):
        try:
            os.makedirs(path)
        except OSError as e:
            raise ScriptError(f"{where}: cannot make the folder ({e.strerror or e})") from None
    if not os.path.isdir(path):
        raise ScriptError(f"{where}: no such folder")
    if not os.access(path, os.W_OK):
        raise ScriptError(f"{where}: cannot write in it (permission denied)")
    return path


def first_error_line(stderr, fallback="failed"):
    """The line of a command's stderr that says what went wrong: the first holding
    'error', else the last line, else ``fallback``."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines[-1:] or [fallback])[0]


def why_failed(completed):
    """What a failed hgsim command said: the first error of its --json diagnostics, else the
    first stderr line holding 'error' (not the last line, which may be a usage pointer),
    else its exit status."""
    try:
        for d in json.loads(completed.stdout).get("diagnostics", []):
            if d.get("severity") == "error":
                key = f"{d['key']}: " if d.get("key") else ""
                return key + d.get("message", "failed")
    except (ValueError, AttributeError, TypeError):
        pass
    return first_error_line(completed.stderr, f"exit status {completed.returncode}")
