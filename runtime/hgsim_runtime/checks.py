"""What the live runner refuses before any worker starts, and how it says so.

`hgsim live`, `hgsim validate live` and a worker started by hand (`python3 -m
hgsim_runtime.worker`) check here every value they are given: command-line numbers whole and
finite, with their range in the message; paths UTF-8 and usable (an output folder that exists
or can be created, a trace whose folder can be written, a corpus that is a regular file or a
folder); --compression a JSON object; a job file a job; the torch.distributed environment's
numbers. Each problem is a LiveError naming the option (or file, or variable), the value as
every hgsim message quotes it (`shown`: the C++ `core::excerpt`, at most 60 characters with
terminal controls escaped) and what would be right. The commands print it as one line and
exit 1, as every hgsim command does for bad input or usage (`report`).

hgsim's warnings (the Python module raises them as Python warnings) are printed as the `hgsim`
command prints them, one plain `warning: ...` line each, once (`Warnings`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
import tempfile
import warnings

import hgsim
from hgsim import _hgsim
from hgsim.files import output_refusal

from .plan import LiveError

# The longest --timeout / --stall: 30 days, longer than any live run is meant to take, and well
# inside what gloo's millisecond timeouts and Python's timedelta hold (`inf` overflowed them).
MAX_SECONDS = 30 * 24 * 3600.0
# Seeds: what torch.Generator.manual_seed takes whole (the workers derive their generators'
# seeds from it modulo 2^63 - 1, worker.py and model.py).
MAX_SEED = 2**63 - 1
# A TCP port.
MAX_PORT = 65535
# A line of someone else's message (a C++ diagnostic, a worker's log) is cut here: a diagnostic
# with its location and hint is under 300 characters; a 100 kB value quoted whole is not.
MESSAGE_LINE_CHARS = 400


# ---- quoting ---------------------------------------------------------------------------------

def _utf8(value) -> str:
    """`value` as valid UTF-8 text: a byte of a path that is not UTF-8 (Python holds it as a
    lone surrogate, \\udcff) written \\xff."""
    text = os.fsdecode(value) if isinstance(value, bytes) else str(value)
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:  # a surrogate that no file name byte gives
        raw = text.encode("utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


def shown(value) -> str:
    """`value` as a message quotes it (the rule of every hgsim message, C++ `core::excerpt`):
    terminal controls escaped (\\x1b, \\u202e), at most 60 characters, then the length."""
    return _hgsim.excerpt(_utf8(value))


def escaped(value) -> str:
    """`value` whole with every character a terminal acts on escaped (C++ `core::escaped`):
    for output lines that name a path the user needs whole (`outputs in DIR`)."""
    return _hgsim.escaped(_utf8(value))


def printable_lines(text: str) -> list[str]:
    """The lines of a message made elsewhere (a C++ diagnostic, a worker's last log lines),
    each escaped and cut at MESSAGE_LINE_CHARS."""
    lines = []
    for line in _utf8(text).splitlines() or [""]:
        cut = len(line) > MESSAGE_LINE_CHARS
        lines.append(escaped(line[:MESSAGE_LINE_CHARS])
                     + (f"... ({len(line)} characters)" if cut else ""))
    return lines


_DIAGNOSTIC = re.compile(r"^(?:.*?: )?(error|warning): ")


def is_warning(line: str) -> bool:
    """Whether a line of hgsim's diagnostics is a warning (`[file:line:column: ]warning: ...`)."""
    match = _DIAGNOSTIC.match(line)
    return bool(match) and match.group(1) == "warning"


def report(program: str, error: BaseException, *, prefix: str = "error", shown_warnings=None):
    """Prints `error` on stderr: `PROGRAM: error: MESSAGE`, or, for hgsim's own diagnostics
    (`file:line:column: error: ...`, which carry their severity), their lines as the `hgsim`
    command prints them, less the warnings already printed."""
    lines = printable_lines(str(error))
    if isinstance(error, hgsim.Error) and _DIAGNOSTIC.match(lines[0]):
        seen = shown_warnings or set()
        lines = [line for line in lines if _key_of(line) not in seen]
    else:
        lines[0] = f"{program}: {prefix}: {lines[0]}"
    print("\n".join(lines), file=sys.stderr, flush=True)


def _key_of(line: str) -> str:
    """A diagnostic without its location (`file:line:column: ` or `file: `): the same warning
    reported for a file and for the dict made from it is one warning."""
    match = re.match(r"^(?:.*?: )?((?:error|warning): .*)$", line)
    return match.group(1) if match else line


class Warnings:
    """hgsim's warnings as the command line prints them: one `warning: ...` line each on
    stderr, once, instead of Python's `file:line: UserWarning` with a line of source.

    With --plan, the scenario file's warnings about its own strategy (`SCENARIO:l:c: warning:
    strategy...`) are left out: that strategy is not what runs."""

    def __init__(self, scenario: str | None = None, plan_given: bool = False):
        self.shown: set[str] = set()
        self.skip = (re.compile(re.escape(_utf8(scenario)) + r"(?::\d+:\d+)?: warning: strategy\b")
                     if scenario and plan_given else None)
        self._catcher = None

    def __enter__(self):
        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        # hgsim's are UserWarnings: each one is shown here, repeats are left out below (the
        # default filter would also hide a warning repeated from the same line by another
        # command run in this process).
        warnings.filterwarnings("always", category=UserWarning)
        warnings.showwarning = self.show
        return self

    def __exit__(self, *exc_info):
        self._catcher.__exit__(*exc_info)
        return False

    def show(self, message, category, filename, lineno, file=None, line=None):
        for text in printable_lines(str(message)):
            if self.skip and self.skip.match(text):
                continue
            key = _key_of(text)
            if key in self.shown:
                continue
            self.shown.add(key)
            print(text if _DIAGNOSTIC.match(text) else f"warning: {text}", file=sys.stderr,
                  flush=True)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1 as every hgsim command does (argparse's own code is
    2), and its message quotes the arguments as `shown` does."""

    def error(self, message):
        self.print_usage(sys.stderr)
        words = re.sub(r"\S{61,}", lambda m: shown(m.group()), _utf8(message))
        self.exit(1, f"{self.prog}: error: {printable_lines(words)[0]}\n")


# ---- numbers ---------------------------------------------------------------------------------

def seconds(flag: str, value) -> float:
    """A duration option: finite, above 0, at most MAX_SECONDS."""
    return positive_number(flag, value, "a positive finite number of seconds",
                           high=MAX_SECONDS, high_text=f"at most {MAX_SECONDS:.0f} (30 days)")


def positive_number(flag: str, value, what: str = "a positive finite number", *,
                    high: float = math.inf, high_text: str = "") -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0 < number <= high):
        limit = f", {high_text}" if high_text else ""
        raise LiveError(f"{flag}: expected {what}{limit}, found '{shown(value)}'")
    return number


def integer(flag: str, value, low: int, high: int | None = None, why: str = "") -> int:
    """A whole number from `low` to `high` (no upper bound when None); `why` says why the
    range is what it is."""
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        wanted = (f"an integer from {low} to {high}" if high is not None
                  else f"an integer of at least {low}")
        raise LiveError(f"{flag}: expected {wanted}, found '{shown(value)}'"
                        + (f" ({why})" if why else ""))
    return number


# ---- paths -----------------------------------------------------------------------------------

def utf8_path(flag: str, path: str) -> str:
    """Refuses a path that is not UTF-8 (hgsim reads and writes UTF-8 paths: the scenario
    language, job.json and the messages hold them as text) and the empty path."""
    if path == "":
        raise LiveError(f"{flag}: an empty path")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise LiveError(f"{flag}: the path '{shown(path)}' is not UTF-8; hgsim takes UTF-8 "
                        "paths only: rename it") from None
    return path


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def kind_of(path: str) -> str:
    try:
        return _kind(os.stat(path).st_mode)
    except OSError:
        return "a broken link" if os.path.islink(path) else "missing"


def _can_write_in(flag: str, path: str, folder: str):
    try:
        fd, probe = tempfile.mkstemp(prefix=".hgsim-write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise LiveError(f"{flag} '{shown(path)}': cannot write in '{shown(folder)}': "
                        f"{e.strerror}") from None


def output_folder(flag: str, path: str) -> str:
    """Refuses an output folder that is not a folder and cannot become one, or cannot be
    written in; leaves nothing behind (a folder created to find out is removed again)."""
    utf8_path(flag, path)
    if os.path.isdir(path):
        _can_write_in(flag, path, path)
        return path
    if os.path.lexists(path):
        raise LiveError(f"{flag} '{shown(path)}': not a folder (it is {kind_of(path)})")
    missing, head = [], os.path.abspath(path)
    while not os.path.lexists(head):
        missing.append(head)
        head = os.path.dirname(head)
    if not os.path.isdir(head):
        raise LiveError(f"{flag} '{shown(path)}': cannot create the folder: '{shown(head)}' is "
                        f"{kind_of(head)}, not a folder")
    created = []
    try:
        for folder in reversed(missing):
            os.mkdir(folder)
            created.append(folder)
        _can_write_in(flag, path, path)
    except OSError as e:
        raise LiveError(f"{flag} '{shown(path)}': cannot create the folder: {e.strerror}") \
            from None
    finally:
        for folder in reversed(created):
            try:
                os.rmdir(folder)
            except OSError:
                pass
    return path


def output_file(flag: str, path: str) -> str:
    """Refuses, before the run, a file that could not be written after it: a folder, a path in
    a missing folder or in one this process cannot write in, and a special file the writers
    refuse (hgsim.files.output_refusal: a socket, a block device; a FIFO that nothing reads
    is refused when written). A device or a FIFO with a reader is written directly (as the C++ side does): its write
    errors can only be told when writing."""
    utf8_path(flag, path)
    if os.path.isdir(path):
        raise LiveError(f"{flag} '{shown(path)}': it is a folder; give a file name")
    if os.path.lexists(path) and kind_of(path) not in ("a regular file", "missing"):
        # A device or a FIFO: the writers' own rule (hgsim.files.output_refusal). A FIFO is
        # not opened here (its reader would see the end); atomic_open refuses it when
        # written if nothing reads it then, instead of waiting.
        why = output_refusal(path, probe_fifo=False)
        if why is not None:
            raise LiveError(f"{flag} '{shown(path)}': {why}")
        return path
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LiveError(f"{flag} '{shown(path)}': no folder '{shown(folder)}' to write it in")
    _can_write_in(flag, path, folder)
    return path


def input_source(flag: str, path: str) -> str:
    """A corpus: a regular file, or a folder of them."""
    utf8_path(flag, path)
    kind = kind_of(path)
    if kind == "missing":
        raise LiveError(f"{flag} '{shown(path)}': no such file or folder")
    if kind not in ("a regular file", "a folder"):
        raise LiveError(f"{flag} '{shown(path)}': not a regular file or a folder of text files "
                        f"(it is {kind})")
    if not os.access(path, os.R_OK):
        raise LiveError(f"{flag} '{shown(path)}': cannot be read (permission denied)")
    return path


# ---- --compression ---------------------------------------------------------------------------

_JSON_KIND = {list: "a list", str: "a string", int: "a number", float: "a number",
              bool: "a boolean", type(None): "null"}


def compression_override(text: str | None) -> dict:
    """--compression: a JSON object (its keys and codecs are checked against the scenario's
    in `live.job_from`)."""
    if text is None:
        return {}
    example = """'{"wan_activations": "int8"}'"""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise LiveError(f"--compression '{shown(text)}': not UTF-8 text; expected a JSON "
                        f"object such as {example}") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise LiveError(f"--compression '{shown(text)}': nests too deep; expected a JSON "
                        f"object such as {example}") from None
    except ValueError as e:
        raise LiveError(f"--compression '{shown(text)}': not JSON ({e}); expected a JSON object "
                        f"such as {example}") from None
    if not isinstance(value, dict):
        raise LiveError(f"--compression '{shown(text)}': expected a JSON object such as "
                        f"{example}, found {_JSON_KIND.get(type(value), 'another value')}")
    return value


# ---- a job file and a worker's environment ---------------------------------------------------

# What a job holds, for the runner's --summarise and for a worker started by hand: enough to
# tell a job from another JSON file before anything is started or written.
JOB_KEYS = {"ranks": list, "pipelines": list, "steps": int, "model": dict, "clusters": list,
            "wan": list, "notes": list, "scenario_name": str}
RANK_KEYS = ("rank", "pipeline", "replica", "stage", "dp", "tp", "cluster", "device")


def read_job(path: str, where: str | None = None) -> dict:
    """The job of a live run (`job.json`, written by `hgsim live` and --prepare-only);
    LiveError naming what is wrong for anything else. `where` names the file in messages
    (default: its path, quoted)."""
    where = where or f"'{shown(path)}'"
    kind = kind_of(path)
    if kind == "missing":
        raise LiveError(f"{where}: no such file; expected the job.json of a live run "
                        "(`hgsim live SCENARIO --prepare-only --out DIR` writes DIR/job.json)")
    if kind != "a regular file":
        raise LiveError(f"{where}: not a job: it is {kind}, not a regular file")
    try:
        with open(path, "rb") as f:
            job = json.load(f)
    except RecursionError:
        raise LiveError(f"{where}: not a job: it nests too deep") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise LiveError(f"{where}: not a job: not JSON ({e})") from None
    except OSError as e:
        raise LiveError(f"{where}: cannot read it: {e.strerror}") from None
    if not isinstance(job, dict):
        raise LiveError(f"{where}: not a job: {_JSON_KIND.get(type(job), 'a value')}, "
                        "not an object")
    for key, kind in JOB_KEYS.items():
        if not isinstance(job.get(key), kind) or isinstance(job.get(key), bool):
            raise LiveError(f"{where}: not a job: '{key}' is missing or not "
                            f"{_JSON_KIND.get(kind, 'an object')}")
    for i, role in enumerate(job["ranks"]):
        if not isinstance(role, dict) or any(k not in role for k in RANK_KEYS) \
                or role["rank"] != i:
            raise LiveError(f"{where}: not a job: ranks[{i}] is not rank {i} with "
                            f"{', '.join(RANK_KEYS)}")
    if not job["ranks"] or job["steps"] < 1:
        raise LiveError(f"{where}: not a job: no ranks or no steps")
    return job


def worker_environment(environ, world: int, rank: int | None) -> tuple[int, str, int | None]:
    """(rank, MASTER_ADDR or None, MASTER_PORT or None) of a worker of a job of `world` ranks,
    from --rank or the torch.distributed variables: RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, each checked."""
    if "WORLD_SIZE" in environ:
        size = integer("WORLD_SIZE", environ["WORLD_SIZE"], 1)
        if size != world:
            raise LiveError(f"WORLD_SIZE={size} but the job has {world} ranks")
    if rank is None:
        if "RANK" not in environ:
            raise LiveError("--rank or the RANK environment variable is required")
        rank = integer("RANK", environ["RANK"], 0, world - 1)
    elif not 0 <= rank < world:
        raise LiveError(f"--rank: expected an integer from 0 to {world - 1} (the job's "
                        f"{world} ranks), found '{rank}'")
    port = integer("MASTER_PORT", environ["MASTER_PORT"], 1, MAX_PORT) \
        if "MASTER_PORT" in environ else None
    address = environ.get("MASTER_ADDR")
    if address is not None and not address.strip():
        raise LiveError("MASTER_ADDR: an empty address; give rank 0's address")
    return rank, address, port
