#!/bin/sh
# hgsim sweep --mpi under mpirun (3 ranks on this machine: rank 0 owns the database, two
# simulate) writes the same points as -j 1 and -j 2: same settings, status, plan and
# results JSON for every point. Usage: sweep_mpi.sh HGSIM MPIEXEC SCENARIO
set -eu
hgsim=$1 mpiexec=$2 scenario=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$hgsim" sweep "$scenario" -j 1 --db "$dir/j1.sqlite" >/dev/null
"$hgsim" sweep "$scenario" -j 2 --db "$dir/j2.sqlite" >/dev/null
OMPI_MCA_mpi_warn_on_fork=0 "$mpiexec" --oversubscribe --allow-run-as-root -n 3 \
  "$hgsim" sweep "$scenario" --mpi --db "$dir/mpi.sqlite"
for db in j1 j2 mpi; do "$hgsim" results "$dir/$db.sqlite" --json >"$dir/$db.json"; done
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
runs = {n: json.load(open(f"{d}/{n}.json")) for n in ("j1", "j2", "mpi")}
n = runs["j1"]["sweep"]["points"]
for name, run in runs.items():
    points = run["points"]
    assert len(points) == n, f"{name}: {len(points)} points, expected {n}"
    for p, q in zip(points, runs["j1"]["points"]):
        for key in ("point", "settings", "status", "plan", "result", "scenario_hash"):
            assert p[key] == q[key], f"{name}: point {p['point']}: {key} differs from -j 1"
print(f"{n} points: -j 1, -j 2 and mpirun -n 3 --mpi wrote the same results")
PY
