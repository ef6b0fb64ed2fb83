"""Runs runtime tests where links cannot be shaped, so that the runtime stays usable there:
the probe names the step that fails, shaped tests skip with its reason, everything else
(unshaped live runs, the refusal to validate WAN-bound plans, the supervisor) passes.

    /usr/bin/python3 runtime/tests/restricted.py MODE PYTEST_ARGUMENTS...

MODE is one of
  without-net-admin  root without CAP_SYS_ADMIN and CAP_NET_ADMIN (a container's root, as
                     Docker starts it), made with `capsh --drop=cap_sys_admin,cap_net_admin`
  as-nobody          an ordinary user (nobody), made with `setpriv`

Both need root to take the privileges away; where this does not run as root, or the tool is
missing, it exits 77 (ctest: skipped) saying why. The tests learn from HGSIM_EXPECT_PROBE_STEP
and HGSIM_EXPECT_PROBE_REMEDY what was taken, to check the probe's verdict against it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile

SKIPPED = 77

MODES = {
    "without-net-admin": {"tool": "capsh", "step": "netns",
                          "remedy": "CAP_SYS_ADMIN,CAP_NET_ADMIN,--cap-add SYS_ADMIN"},
    "as-nobody": {"tool": "setpriv", "step": "root", "remedy": "run as root"},
}


def command(mode: str, argv: list[str], home: str) -> list[str]:
    if mode == "without-net-admin":
        # capsh runs bash with the rest; bash's "$@" is argv, quoted as given.
        return ["capsh", "--drop=cap_sys_admin,cap_net_admin", "--", "-c", 'exec "$@"',
                "restricted", *argv]
    nobody = pwd.getpwnam("nobody")
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
            "--clear-groups", *argv]


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in MODES:
        print(__doc__, file=sys.stderr)
        return 2
    mode, pytest_arguments = argv[0], argv[1:]
    if os.geteuid() != 0:
        print(f"skipped: {mode} takes privileges away, and this does not run as root (the "
              "whole suite is then the unprivileged run)")
        return SKIPPED
    tool = MODES[mode]["tool"]
    if shutil.which(tool) is None:
        print(f"skipped: `{tool}` is not installed (Debian: libcap2-bin for capsh, util-linux "
              "for setpriv)")
        return SKIPPED
    with tempfile.TemporaryDirectory(prefix="hgsim-restricted-") as home:
        env = dict(os.environ, HOME=home, PYTHONDONTWRITEBYTECODE="1",
                   HGSIM_EXPECT_PROBE_STEP=MODES[mode]["step"],
                   HGSIM_EXPECT_PROBE_REMEDY=MODES[mode]["remedy"])
        run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--basetemp", os.path.join(home, "pytest"), *pytest_arguments]
        return subprocess.run(command(mode, run, home), env=env, cwd=home).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
