#!/usr/bin/env bash
# Runs the whole test suite: the default build (warnings as errors), then the
# same tests under ASan+UBSan and under TSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs="$(nproc)"
for preset in default asan tsan; do
  echo "=== [$preset] configure + build"
  cmake --preset "$preset" > /dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== [$preset] test"
  ctest --preset "$preset" -j "$jobs"
done
echo "=== all test configurations passed"
