#!/usr/bin/env bash
# Runs the whole test suite: the default build (warnings as errors), then the
# same tests under ASan+UBSan and under TSan, then the Python package's tests
# (scripts/python_env.sh), then each fuzz target briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs="$(nproc)"
# Every #include goes one way through the layers (docs/ARCHITECTURE.md),
# before anything is built: a wrong one fails here, naming file and line.
echo "=== [layers] include directions"
python3 scripts/check_layers.py
python3 scripts/check_layers.py --self-test
echo "=== [functions] no function over 100 lines or 6 parameters"
python3 scripts/check_functions.py
python3 scripts/check_functions.py --self-test
for preset in default asan tsan; do
  echo "=== [$preset] configure + build"
  cmake --preset "$preset" > /dev/null
  cmake --build --preset "$preset" -j "$jobs"
  echo "=== [$preset] test"
  ctest --preset "$preset" -j "$jobs"
done
# The Python package: .venv with PyPI torch (made once, then reused), the
# package built against it, and its pytest suite.
echo "=== [python] environment + pip install . + pytest"
scripts/python_env.sh
"${TRAINPROF_VENV:-.venv}/bin/python" -m pytest -q python/tests
# Every fuzz target for a short bounded time from its seed corpus (about
# 2 minutes in all): the parsers of outside bytes stay crash-free.
fuzz_seconds="${FUZZ_SECONDS:-20}"
echo "=== [fuzz] build + each target for $fuzz_seconds s"
FUZZ_BUILD_JOBS="$jobs" scripts/fuzz.sh "$fuzz_seconds"
echo "=== all test configurations passed"
