#!/usr/bin/env bash
# The cluster pass at 64, 256 and 1,024 ranks (docs/SCALE.md): synthetic
# rank summaries written by trainprof's own writer (10 steps, 20 allreduces
# and 2 sends a step, 8 ranks a host), then trainprof::cluster on them in a
# process of its own: wall time, peak resident memory, output sizes; then
# the same pass spread over K processes of an MPI job (`mpirun -np K
# trainprof cluster --mpi`, K from $MPI_PROCESSES, default "1 2 4"; empty:
# none): the job's wall time, each process's time and peak memory.
#   bench/cluster_scale.sh [BUILD_DIR=build] [RANKS...]
set -euo pipefail
build="${1:-build}"
shift || true
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(64 256 1024)
read -r -a processes <<< "${MPI_PROCESSES-1 2 4}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for n in "${ranks[@]}"; do
  echo "== $n ranks"
  "$build/bin/trainprof_cluster_scale" generate "$tmp/$n" "$n"
  "$build/bin/trainprof_cluster_scale" cluster "$tmp/$n"
  for k in "${processes[@]}"; do
    start=$(date +%s.%N)
    mpirun --oversubscribe --allow-run-as-root -np "$k" \
      /usr/bin/time -f "  process: %e s, peak RSS %M KB" \
      "$build/bin/trainprof" cluster --mpi --progress "$tmp/$n" 2>&1 >/dev/null | grep -E "^  process:|^\[cluster\]" || true
    end=$(date +%s.%N)
    echo "cluster --mpi on $k process(es): $(echo "$end - $start" | bc) s (mpirun's start included)"
  done
  rm -rf "${tmp:?}/$n"
done
