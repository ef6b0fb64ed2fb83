"""Files written whole or not at all, as hgsim's C++ side writes them (core/files.hpp,
AtomicFile): the text goes to a temporary file beside the target (".NAME.tmp-XXXXXX"), is
flushed to disk and renamed over the target only when complete; an exception (or a
signal's KeyboardInterrupt) removes the temporary file and leaves the target untouched. A
path that is not a regular file is checked by output_refusal (a FIFO that nothing reads is
refused, never waited on) and written directly, since nothing can be renamed over it."""

import contextlib
import errno
import os
import stat
import tempfile


def _open_special(path):
    """(fd, None) for a path that exists and is not a regular file and may be written, or
    (None, why) -- core/files.cpp output_refusal's rule, which a test holds this to."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return None, "it is a directory; give a file name"
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        return None, (f"it is {kind}; hgsim writes a regular file, a character device "
                      "(/dev/null) or a FIFO that something reads")
    try:
        # O_NONBLOCK: a FIFO with no reader fails at once (ENXIO) instead of waiting.
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        if e.errno == errno.ENXIO and stat.S_ISFIFO(mode):
            return None, ("it is a FIFO (named pipe) that nothing reads; start its reader "
                          "first, or name a regular file")
        return None, e.strerror
    os.set_blocking(fd, True)
    return fd, None


def output_refusal(path, probe_fifo=True):
    """Why ``path`` may not be an output file, or None when it may: a path that does not
    exist yet, a regular file, a character device (/dev/null) or a FIFO that something
    reads. A directory, a block device, a socket and a FIFO that nothing reads are refused
    (the rule of hgsim's C++ writers, core/files.hpp output_refusal). Asking opens a FIFO
    for writing and closes it, which its reader sees as the end: a check made long before
    the write passes ``probe_fifo=False`` and leaves the FIFO to atomic_open."""
    path = os.fspath(path)
    if not os.path.exists(path) or os.path.isfile(path):
        return None
    if not probe_fifo and stat.S_ISFIFO(os.stat(path).st_mode):
        return None
    fd, why = _open_special(path)
    if fd is not None:
        os.close(fd)
    return why


@contextlib.contextmanager
def atomic_open(path, mode="w", **kwargs):
    """``with atomic_open(path) as f: ...`` -- like ``open(path, mode)`` for writing, but
    ``path`` holds either its old content or the whole new one, never a part."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        fd, why = _open_special(path)
        if fd is None:
            raise OSError(errno.EINVAL, f"cannot write '{path}': {why}")
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=folder)
    try:
        # mkstemp makes the file 0600; a written file gets the usual 0666 less the umask.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
