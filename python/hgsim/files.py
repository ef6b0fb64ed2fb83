"""Files written whole or not at all, as hgsim's C++ side writes them (core/files.hpp,
AtomicFile): the text goes to a temporary file beside the target (".NAME.tmp-XXXXXX"), is
flushed to disk and renamed over the target only when complete; an exception (or a
signal's KeyboardInterrupt) removes the temporary file and leaves the target untouched. A
path that is not a regular file (/dev/stdout, /dev/null, a FIFO) is written directly,
since nothing can be renamed over it."""

import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_open(path, mode="w", **kwargs):
    """``with atomic_open(path) as f: ...`` -- like ``open(path, mode)`` for writing, but
    ``path`` holds either its old content or the whole new one, never a part."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, mode, **kwargs) as f:
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
