#!/usr/bin/env bash
# The cluster pass at 64, 256 and 1,024 ranks (docs/SCALE.md): synthetic
# rank summaries written by trainprof's own writer (10 steps, 20 allreduces
# and 2 sends a step, 8 ranks a host), then trainprof::cluster on them in a
# process of its own: wall time, peak resident memory, output sizes.
#   bench/cluster_scale.sh [BUILD_DIR=build] [RANKS...]
set -euo pipefail
build="${1:-build}"
shift || true
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(64 256 1024)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for n in "${ranks[@]}"; do
  echo "== $n ranks"
  "$build/bin/trainprof_cluster_scale" generate "$tmp/$n" "$n"
  "$build/bin/trainprof_cluster_scale" cluster "$tmp/$n"
  rm -rf "${tmp:?}/$n"
done
