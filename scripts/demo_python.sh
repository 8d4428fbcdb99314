#!/usr/bin/env bash
# Sets everything up and runs the main job: Debian packages (compiler, CMake,
# Fashion-MNIST), the Python environment (.venv/ with PyPI torch 2.x, then
# `pip install .` of this checkout), then a PyTorch CNN trained on
# Fashion-MNIST with DataLoader workers, profiled by trainprof with a schedule
# (two recorded cycles, each analysed as it closes), and where the time went
# and where the outputs are.
#   scripts/demo_python.sh [--out DIR] [--steps N] [--schedule W,U,A,R[,S]] [--workers N]
#                          [--flight-recorder [--slow-step N]]  (always on; one planted slow step)
# The C++ (LibTorch) demo: scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/python_env.sh
venv="${TRAINPROF_VENV:-.venv}"
"$venv/bin/python" examples/python/fashion_mnist.py "$@"
