#!/usr/bin/env bash
# Sets everything up and runs the main job: dependencies, build, a profiled
# multi-threaded training run analysed as it goes, and a summary of where the
# time went and where the outputs are.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default > /dev/null
cmake --build --preset default -j "$(nproc)" --target trainprof_example_threads trainprof_cli
out="${1:-$PWD/trainprof_output}"
rm -rf "$out"
./build/bin/trainprof_example_threads "$out" 12
echo
./build/bin/trainprof summary "$out"
