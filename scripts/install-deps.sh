#!/usr/bin/env bash
# Installs the Debian packages of scripts/debian-packages.txt that are missing, for the
# groups named (demo, python, live, notebooks, test; every group when none is named).
# Runs 'apt-get update' at most once, and only when something has to be installed.
# Usage: install-deps.sh [GROUP...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list="$here/debian-packages.txt"

known=$(sed -n 's/^#[[:space:]]*group:[[:space:]]*\([[:alnum:]_-]*\).*/\1/p' "$list")
for g in "$@"; do
  if ! grep -qx -- "$g" <<< "$known"; then
    echo "install-deps.sh: error: unknown group '$g'; the groups are: $(echo $known)" >&2
    exit 1
  fi
done
wanted=" ${*:-$(echo $known)} "

missing=()
group=
while IFS= read -r line; do
  if [[ $line =~ ^#[[:space:]]*group:[[:space:]]*([[:alnum:]_-]+) ]]; then
    group=${BASH_REMATCH[1]}
    continue
  fi
  pkg=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' <<< "$line")
  [ -n "$pkg" ] || continue
  [[ $wanted == *" $group "* ]] || continue
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done < "$list"

[ ${#missing[@]} -eq 0 ] && exit 0

echo "hgsim: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "hgsim: not root; run as root, or: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
