#!/usr/bin/env bash
# The GPU check (issue 16), on a machine with an NVIDIA GPU:
#  1. C++: builds libtrainprof and the trainprof command (build-gpu/), then
#     examples/cuda/vector_steps.cu with nvcc; profiles it with
#     Activity::GPU and checks that kernel_details.csv and op_statistic.csv
#     hold exactly the kernels and copies the program launched.
#  2. Python: trains the demo's CNN on CUDA with no profiler, torch.profiler
#     and trainprof (bench/gpu_compare.py): compares the kernel counts and
#     total kernel time of the two profilers and prints each one's overhead.
#  3. The Python tests marked `device` (pytest -m device): what only a GPU
#     shows, such as CUDA's out-of-memory error reaching the report.
# Without a GPU it says so and exits 0. A part whose tools are missing (cmake,
# nvcc, a CUDA torch) is reported as skipped with the reason; the exit status
# is 1 when a part failed, 2 when every part was skipped.
#
#   scripts/gpu_check.sh [STEPS]      (PYTHON=... picks the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
steps="${1:-50}"

if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to check." \
    "Run scripts/gpu_check.sh on a machine with one."
  exit 0
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  python="${TRAINPROF_VENV:-.venv}/bin/python"
  [[ -x "$python" ]] || python="$(command -v python3 || true)"
fi
out="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
failed=0
ran=0
skip() { echo "gpu_check: SKIPPED $1"; }
fail() {
  echo "gpu_check: FAILED $1"
  failed=1
}

cpp_part() {
  echo "=== [gpu_check] C++: libtrainprof + a CUDA program"
  local nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
  command -v cmake > /dev/null || {
    skip "C++ part: cmake is not installed"
    return
  }
  [[ -x "$nvcc" ]] || {
    skip "C++ part: nvcc not found (set NVCC)"
    return
  }
  if ! cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTRAINPROF_BUILD_TESTS=OFF \
    -DTRAINPROF_BUILD_BENCH=OFF -DTRAINPROF_BUILD_EXAMPLES=OFF -DTRAINPROF_WITH_TORCH=OFF \
    -DTRAINPROF_WITH_MPI=OFF > "$out/cmake.log" 2>&1; then
    tail -20 "$out/cmake.log"
    skip "C++ part: cmake could not configure trainprof here (log above)"
    return
  fi
  ran=1
  grep -q "cupti=ON" "$out/cmake.log" || fail "C++ part: CUPTI's headers were not found by cmake"
  cmake --build build-gpu -j "$(nproc)" --target trainprof trainprof_cli > "$out/build.log" 2>&1 || {
    tail -30 "$out/build.log"
    fail "C++ part: build"
    return
  }
  "$nvcc" -std=c++20 -O2 -Iinclude examples/cuda/vector_steps.cu -o "$out/vector_steps" \
    -Lbuild-gpu/lib -ltrainprof -Xlinker -rpath -Xlinker "$PWD/build-gpu/lib" || {
    fail "C++ part: nvcc vector_steps.cu"
    return
  }
  local log="$out/vector_steps.log"
  "$out/vector_steps" "$out/cpp" 10 2>&1 | tee "$log" || {
    fail "C++ part: vector_steps"
    return
  }
  local run
  run="$(sed -n 's/^run //p' "$log")"
  [[ -n "$run" ]] || {
    fail "C++ part: vector_steps named no run"
    return
  }
  build-gpu/bin/trainprof analyse "$run" || fail "C++ part: trainprof analyse"
  build-gpu/bin/trainprof summary "$run" || true
  "$python" - "$run" "$log" << 'EOF' || fail "C++ part: the tables do not match what the program launched"
import csv, re, sys
from pathlib import Path
run, log = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
kernels, copies = map(int, re.search(r"launched (\d+) kernels, (\d+) copies", log).groups())
rows = list(csv.DictReader(open(run / "PROFILER_OUTPUT" / "kernel_details.csv")))
saxpy = [r for r in rows if r["Name"].startswith("saxpy")]
print(f"kernel_details.csv: {len(saxpy)} saxpy kernels (launched {kernels});",
      f"Type of the first: {saxpy[0]['Type'] if saxpy else '-'}")
ops = list(csv.DictReader(open(run / "PROFILER_OUTPUT" / "op_statistic.csv")))
gpu_copies = sum(int(r["Count"]) for r in ops if r["Core Type"] == "GPU" and r["OP Type"].startswith("Memcpy"))
print(f"op_statistic.csv: {gpu_copies} copies (made {copies})")
ok = len(saxpy) == kernels and gpu_copies == copies and all(r["Type"] == "saxpy steps" for r in saxpy)
sys.exit(0 if ok else 1)
EOF
}

python_part() {
  echo "=== [gpu_check] Python: torch on CUDA, trainprof against torch.profiler"
  [[ -n "$python" && -x "$python" ]] || {
    skip "Python part: no python3"
    return
  }
  "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null || {
    skip "Python part: $python has no torch that sees the GPU"
    return
  }
  if ! "$python" -c "import trainprof" 2> /dev/null; then
    echo "gpu_check: installing the trainprof package into $python's environment"
    "$python" -m pip install --no-build-isolation --no-deps -q . > "$out/pip.log" 2>&1 || {
      tail -20 "$out/pip.log"
      skip "Python part: pip install . failed (scikit-build-core and nanobind are needed offline)"
      return
    }
  fi
  ran=1
  "$python" bench/gpu_compare.py --steps "$steps" || fail "Python part: trainprof and torch.profiler disagree"
}

device_tests() {
  echo "=== [gpu_check] pytest -m device: the tests that need a CUDA device"
  "$python" -c "import pytest, torch, trainprof, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    2> /dev/null || {
    skip "device tests: $python lacks pytest, trainprof or a torch that sees the GPU"
    return
  }
  ran=1
  "$python" -m pytest -q -rs -m device python/tests || fail "device tests (pytest -m device)"
}

cpp_part
python_part
device_tests
echo "gpu_check: outputs under $out"
if [[ $failed -ne 0 ]]; then
  echo "gpu_check: FAILED"
  exit 1
fi
if [[ $ran -eq 0 ]]; then
  echo "gpu_check: every part was skipped"
  exit 2
fi
echo "gpu_check: passed"
