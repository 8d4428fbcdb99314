#!/usr/bin/env bash
# Makes the Python environment of trainprof and installs this checkout in it:
#   .venv/ (python3 -m venv; TRAINPROF_VENV overrides the place) with torch 2.x
#   from PyPI, numpy, pytest, nanobind, scikit-build-core, torch-tb-profiler,
#   holistictraceanalysis and msprof-analyze, then
#   `pip install .` (the package, the torch collector built against that
#   torch, the `trainprof` command).
# Reuses what exists: a present .venv with its packages is not reinstalled
# (torch's wheel pulls several GB of CUDA libraries), and pip keeps its cache;
# the package build is incremental (build-python/).
#   scripts/python_env.sh     then: .venv/bin/python -m pytest python/tests
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${TRAINPROF_VENV:-.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "[python] creating $venv with $("$python" --version)"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
# torch-tb-profiler and holistictraceanalysis (HTA): the tests load our
# traces in both (python/tests/test_peers.py); msprof-analyze, MindSpore's
# cluster tool, reads our cluster layout (python/tests/test_msprof_analyze.py);
# perfetto carries Perfetto's trace protos, which decode our trace_view.pftrace
# (python/tests/test_perfetto.py).
# transformers, accelerate: Hugging Face's Trainer (python/tests/test_hf_trainer.py).
# mcp: the Model Context Protocol's client, which drives `trainprof mcp`
# (python/tests/test_mcp.py).
requirements=("torch>=2.7" numpy pytest "nanobind>=2.2" "scikit-build-core>=0.11" torch-tb-profiler holistictraceanalysis
  "msprof-analyze>=26.2" perfetto transformers accelerate mcp)
if ! "$py" -c "import torch, numpy, pytest, nanobind, scikit_build_core, torch_tb_profiler, hta, msprof_analyze, perfetto, transformers, accelerate, mcp" 2> /dev/null; then
  echo "[python] installing ${requirements[*]} (torch brings its CUDA libraries: several GB, once)"
  start=$SECONDS
  "$py" -m pip install --progress-bar off -q "${requirements[@]}"
  echo "[python] installed in $((SECONDS - start)) s"
fi

# traceinsight, HTA's name since 2026, installs the same module `hta`: it
# goes into a directory of its own, which its test puts first on the path
# (its other requirements are HTA's, installed above).
if [ ! -f "$venv/traceinsight/hta/trace_analysis.py" ]; then
  "$py" -m pip install --progress-bar off -q --no-deps --target "$venv/traceinsight" "traceinsight>=0.6"
fi

echo "[python] pip install . (trainprof $(sed -n 's/^project(trainprof VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt))"
start=$SECONDS
# No build isolation: the build uses this environment's nanobind and
# scikit-build-core, and the collector compiles against its torch.
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$py" -m pip install --no-build-isolation --no-deps --progress-bar off -q .
echo "[python] trainprof installed in $((SECONDS - start)) s: $("$py" -c 'import trainprof; print(trainprof.__version__, "torch collector:", trainprof.torch_collector_status() or "loaded")')"
