#!/usr/bin/env bash
# trainprof's full analysis against torch.profiler's Chrome-trace export for
# the same number of operator events, in one run on this machine.
#
#   bench/analysis_compare.sh [EVENTS]        (default 1000000)
#
# Needs the default build (cmake --preset default && cmake --build --preset
# default) and Debian's python3-torch (/usr/bin/python3), which
# scripts/install_deps.sh --bench installs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --bench
n="${1:-1000000}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
peer="$(/usr/bin/python3 bench/torch_export_compare.py "$n" "$tmp/torch_trace.json")"
ours="$(./build/bin/trainprof_analysis_bench --events "$n" --single --dir "$tmp/trainprof")"
echo "$ours"
echo "torch: $peer"
PEER="$peer" OURS="$ours" python3 - <<'PY'
import json, os, re
peer = json.loads(os.environ["PEER"])
ours = float(re.search(r"single_wall_s=([0-9.]+)", os.environ["OURS"]).group(1))
torch_s = peer["stop_plus_export_s"]
print(f"events {peer['requested_events']}: torch stop+export {torch_s:.2f} s "
      f"(stop {peer['stop_s']:.2f} s, export {peer['export_s']:.2f} s); "
      f"trainprof full analysis {ours:.2f} s; trainprof is {torch_s / ours:.1f}x faster")
PY
