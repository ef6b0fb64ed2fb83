#!/usr/bin/env bash
# Builds hgsim and runs its GoogleTest suite on Debian 13 (trixie), whose SimGrid is 4.0, in
# a chroot: what CI (Debian 12, SimGrid 3.32) never sees. Nothing in `make test` calls it.
#
# Usage (as root, on the build machine's cores: prefix it with the build lock if others
# share them):
#   scripts/trixie-build.sh ROOT [GTEST_ARGS...]
#
# ROOT  a Debian 13 root. Created with debootstrap (minbase, from deb.debian.org) when it
#       holds no apt-get; then the packages of scripts/debian-packages.txt's demo and test
#       groups are installed in it by scripts/install-deps.sh. Only Debian's packages are
#       downloaded; the only code built is hgsim's.
# The committed tree (git archive HEAD, not the working tree) is copied to ROOT/src/hgsim,
# configured (Release, CUDA off), built (hgsim, hgsim_tests) and tested there with
# GTEST_ARGS (none: every test). Everything goes to ROOT/src/hgsim-trixie.log too; the last
# lines are SimGrid's version as the library reports it and GoogleTest's summary. /proc and
# /dev are mounted in ROOT while it runs and unmounted on exit, whatever happened.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 ROOT [GTEST_ARGS...]" >&2
  exit 2
fi
root=$(realpath -m "$1")
shift
if [ "$(id -u)" -ne 0 ]; then
  echo "trixie-build.sh: chroot and mount need root" >&2
  exit 1
fi
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
log="$root/src/hgsim-trixie.log"

if [ ! -x "$root/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || {
    echo "trixie-build.sh: $root has no Debian root and debootstrap is missing (apt-get install debootstrap)" >&2
    exit 1
  }
  debootstrap --variant=minbase trixie "$root" http://deb.debian.org/debian
fi

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
mount_once() {  # mount_once TARGET MOUNT-ARGS...: skipped when something is mounted there
  local target=$1
  shift
  mountpoint -q "$target" && return 0
  mount "$@" "$target"
  mounted+=("$target")
}
mount_once "$root/proc" -t proc proc
mount_once "$root/dev" --bind /dev

in_root() {  # a clean environment: no compiler launcher or cache of the host leaks in
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TMPDIR=/tmp \
    chroot "$root" "$@"
}

rm -rf "$root/src/hgsim"
mkdir -p "$root/src/hgsim"
git -C "$repo" archive --format=tar HEAD | tar -x -C "$root/src/hgsim"
commit=$(git -C "$repo" rev-parse --short HEAD)

{
  echo "hgsim $commit on Debian $(cat "$root/etc/debian_version")"
  in_root bash /src/hgsim/scripts/install-deps.sh demo test
  in_root sh -c 'cd /src/hgsim &&
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHGSIM_CUDA=OFF &&
    cmake --build build -j 2 --target hgsim hgsim_tests'
  status=0
  in_root sh -c 'cd /src/hgsim && exec build/tests/hgsim_tests "$@"' hgsim_tests "$@" || status=$?
  in_root sh -c 'cd /src/hgsim && build/apps/hgsim run scenarios/examples/inline-model.yaml --json' |
    grep -o '"simgrid": *"[^"]*"' || true
  echo "hgsim_tests exit status: $status"
  exit "$status"
} 2>&1 | tee "$log"
