#!/usr/bin/env bash
# Sets everything up and runs the main job: dependencies, build, a LibTorch CNN
# trained on Fashion-MNIST and profiled with a schedule (two recorded cycles,
# each analysed as it closes), then where the time went and where the outputs
# are.   scripts/demo.sh [OUTPUT_DIR] [STEPS] [WAIT,WARMUP,ACTIVE,REPEAT[,SKIP_FIRST]]
#        (e.g. scripts/demo.sh out 600 1,1,3,0 records a cycle every 5 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default > /dev/null
cmake --build --preset default -j "$(nproc)" --target trainprof_fashion_mnist_demo trainprof_cli
out="${1:-$PWD/trainprof_output}"
rm -rf "$out"
./build/bin/trainprof_fashion_mnist_demo "$out" "${2:-300}" ${3:+"$3"}
echo
echo "the same report again: ./build/bin/trainprof summary $out"
