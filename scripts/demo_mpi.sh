#!/usr/bin/env bash
# The distributed demo: 4 MPI ranks train the demo's CNN on shards of
# Fashion-MNIST, averaging gradients with MPI_Allreduce (LibTorch, OpenMPI,
# libtrainprof_mpi); rank 2 is made slow; then `trainprof cluster` names the
# rank the others wait for and why.
#   scripts/demo_mpi.sh [OUTPUT_DIR] [STEPS=40] [extra demo options, e.g. --slow-data or --slow-rank 1]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default > /dev/null
cmake --build --preset default -j "$(nproc)" --target trainprof_distributed_demo trainprof_cli
out="${1:-$PWD/trainprof_mpi_output}"
steps="${2:-40}"
shift $(( $# > 2 ? 2 : $# ))
extra=("$@")
[ ${#extra[@]} -eq 0 ] && extra=(--slow-rank 2 --slow-ms 30)
rm -rf "$out"
# --oversubscribe: 4 ranks on a machine with fewer cores; yield_when_idle: a
# waiting rank gives its core to the others instead of spinning.
mpirun --oversubscribe --allow-run-as-root -np 4 -x OMPI_MCA_mpi_yield_when_idle=1 \
  ./build/bin/trainprof_distributed_demo "$out" "$steps" "${extra[@]}"
echo
./build/bin/trainprof cluster "$out"
echo "per-rank outputs: $out/*_trainprof/PROFILER_OUTPUT/ (trace_view.json: the Communication tracks)"
