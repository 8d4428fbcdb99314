#!/usr/bin/env bash
# Installs every build and test dependency of trainprof from Debian packages.
# Idempotent: does nothing (not even apt-get update) when all are present.
#   scripts/install_deps.sh          build + tests
#   scripts/install_deps.sh --bench  also the peer for the comparisons in bench/
#                                    (python3-torch: torch.profiler; time, bc:
#                                    bench/cluster_scale.sh)
set -euo pipefail

PACKAGES=(
  build-essential cmake g++ git
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  nlohmann-json3-dev
  libsqlite3-dev sqlite3        # PROFILER_OUTPUT/trainprof.db; the tests query it with the sqlite3 program
  clang-format
  clang libclang-rt-14-dev      # the fuzz targets (fuzz/, scripts/fuzz.sh): -fsanitize=fuzzer
  libtorch-dev zlib1g-dev       # the LibTorch collector, its tests and the demo
  libdeflate-dev                # trace_view.pftrace's compressed packets
  dataset-fashion-mnist         # the demo's data (/usr/share/datasets/fashion-mnist)
  python3-venv python3-dev      # the Python package (scripts/python_env.sh: .venv, torch from PyPI)
  openmpi-bin libopenmpi-dev    # the MPI collector (libtrainprof_mpi, PMPI) and its multi-rank tests
  chromium                      # renders report.html in the tests (python/tests/test_report.py)
  prometheus prometheus-node-exporter  # scrape the flight recorder's metrics in the tests
)
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(python3-torch time bc)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "[deps] installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
