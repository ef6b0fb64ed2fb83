#!/bin/sh
# The memory of `hgsim sweep` while a 1000-point grid streams into its database: the
# resident memory of the hgsim process (not its point processes) sampled every half
# second, printed with the number of points in the database at that moment.
#   bench/sweep_memory.sh [build/release/apps/hgsim] [-j N]
set -eu
hgsim=${1:-build/release/apps/hgsim}
jobs=${2:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$hgsim" sweep scenarios/scale/sweep-1000.yaml -j "$jobs" --db "$dir/s.sqlite" >/dev/null 2>"$dir/err" &
pid=$!
echo "points_done rss_kib"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || true)
  done_points=$(/usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from points').fetchone()[0])" "$dir/s.sqlite" 2>/dev/null || echo 0)
  [ -n "$rss" ] && echo "$done_points $rss"
  sleep 0.5
done
wait "$pid" || true
tail -1 "$dir/err"
