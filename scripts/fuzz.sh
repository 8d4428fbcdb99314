#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan) in build-fuzz/ and
# runs each for SECONDS (default 600) from its seed corpus fuzz/corpus/<target>/.
# Prints per target: seconds, runs, exec/s, crashes. Exits non-zero when a
# target crashed, naming the file that holds the crashing input.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# New inputs found go to build-fuzz/corpus/<target>/ (not the committed seeds);
# crashes to build-fuzz/crashes/<target>/. A crash becomes a regression test
# in tests/ with the input embedded or under tests/data/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(raw_reader analyse metadata_json options_json csv_reader host_flame elf_symbols dynamic_config proc_stats rank_summary
           metrics_request mcp_message)
fi
jobs="${FUZZ_BUILD_JOBS:-$(nproc)}"

cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINPROF_BUILD_FUZZ=ON -DTRAINPROF_BUILD_TESTS=OFF -DTRAINPROF_BUILD_BENCH=OFF \
  -DTRAINPROF_BUILD_EXAMPLES=OFF -DTRAINPROF_WITH_TORCH=OFF -DTRAINPROF_WITH_MPI=OFF > /dev/null
cmake --build build-fuzz --target trainprof_fuzz -j "$jobs"

failed=0
printf '%-14s %8s %12s %10s %8s\n' target seconds runs exec/s crashes
for t in "${targets[@]}"; do
  work="build-fuzz/corpus/$t"
  crashes="build-fuzz/crashes/$t"
  log="build-fuzz/fuzz_$t.log"
  mkdir -p "$work" "$crashes"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds=("fuzz/corpus/$t")
  rc=0
  # -rss_limit_mb: the reader must not allocate from what the bytes claim.
  "build-fuzz/bin/fuzz_$t" "$work" "${seeds[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -timeout=10 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" > "$log" 2>&1 || rc=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  found="$(find "$crashes" -type f | wc -l)"
  printf '%-14s %8s %12s %10s %8s\n' "$t" "$seconds" "${runs:-?}" "${speed:-?}" "$found"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    echo "  $t failed (exit $rc): crashing input(s) in $crashes/, log $log" >&2
    grep -m3 -E "ERROR|SUMMARY|runtime error|deadly signal" "$log" | sed 's/^/    /' >&2 || true
  fi
done
exit "$failed"
