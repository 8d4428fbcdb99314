#!/usr/bin/env bash
# The PMPI layer's cost per call: plain MPI, the layer loaded while no run
# records, and the layer recording; 2 ranks on this machine, ROUNDS rounds
# alternating the three, median per operation.
#   bench/mpi_overhead.sh [BUILD_DIR=build] [ROUNDS=5] [ITERATIONS=20000]
set -euo pipefail
build="${1:-build}"
rounds="${2:-5}"
iterations="${3:-20000}"
run() { mpirun --oversubscribe --allow-run-as-root -np 2 --mca btl self,vader "$@"; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
  run "$build/bin/trainprof_mpi_overhead_bare" "$iterations" >> "$tmp/bare"
  run "$build/bin/trainprof_mpi_overhead" "$iterations" >> "$tmp/idle"
  run "$build/bin/trainprof_mpi_overhead" "$iterations" record >> "$tmp/record"
done
python3 - "$tmp" <<'PY'
import statistics, sys, collections
d = sys.argv[1]
res = {}
for mode in ("bare", "idle", "record"):
    per = collections.defaultdict(list)
    for line in open(f"{d}/{mode}"):
        name, ns = line.rsplit(" ", 1)
        per[name].append(float(ns))
    res[mode] = {k: statistics.median(v) for k, v in per.items()}
print(f"{'operation':32} {'bare ns':>9} {'layer, idle':>12} {'recording':>10} {'added idle':>11} {'added rec.':>11}")
for name, bare in res["bare"].items():
    idle, rec = res["idle"][name], res["record"][name]
    print(f"{name:32} {bare:9.0f} {idle:12.0f} {rec:10.0f} {idle - bare:+11.0f} {rec - bare:+11.0f}")
PY
