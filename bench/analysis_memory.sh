#!/bin/sh
# Peak memory and time of `trainprof analyse` on large runs (issue 18).
#
#   bench/analysis_memory.sh [MILLIONS_OF_EVENTS ...]     default: 100 300 600
#
# Each size is recorded once by trainprof_analysis_bench (nested ranges on 2
# threads, 100 steps, kept on disk), then analysed by `trainprof analyse`
# under /usr/bin/time -v: wall, user and system time, peak RSS, minor page
# faults, against the bound of 1.5 x raw + 200 MB. With
# BASELINE=/path/to/an/older/trainprof each analysis is paired with one by
# that binary on the same run, alternating. BUILD (default build) and DIR
# (default /tmp/trainprof_memory_bench, needs about 2 x raw + 1 GB free) too.
set -eu
build=${BUILD:-build}
dir=${DIR:-/tmp/trainprof_memory_bench}
rounds=${ROUNDS:-1}
[ $# -gt 0 ] || set -- 100 300 600
printf '%-8s %-9s %-10s %7s %7s %7s %9s %9s %10s %9s\n' events raw_MB binary wall_s user_s sys_s peak_MB bound_MB peak/raw faults
for millions in "$@"; do
  rm -rf "$dir"
  mkdir -p "$dir"
  "$build/bin/trainprof_analysis_bench" --events "${millions}000000" --single --rounds 1 --keep --dir "$dir" \
    > "$dir/record.log" 2>&1
  run=$(ls -d "$dir"/single/*_trainprof)
  raw=$(stat -c %s "$run/raw/host.tpraw")
  events=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['analysis']['events'])" \
    "$run/PROFILER_OUTPUT/profiler_info.json")
  round=0
  while [ "$round" -lt "$rounds" ]; do
    for bin in ${BASELINE:-} "$build/bin/trainprof"; do
      sync
      /usr/bin/time -v "$bin" analyse "$run" > "$dir/time.log" 2>&1 || { cat "$dir/time.log"; exit 1; }
      label=this
      [ "$bin" = "$build/bin/trainprof" ] || label=baseline
      awk -v events="$events" -v raw="$raw" -v name="$label" '
        /Elapsed \(wall clock\)/ { n = split($NF, t, ":"); wall = (n == 3) ? t[1] * 3600 + t[2] * 60 + t[3] : t[1] * 60 + t[2] }
        /User time/ { user = $NF }
        /System time/ { sys = $NF }
        /Maximum resident set size/ { peak = $NF / 1024 }
        /Minor \(reclaiming a frame\)/ { faults = $NF }
        END {
          printf "%-8.1fM %-9.0f %-10s %7.2f %7.2f %7.2f %9.0f %9.0f %10.2f %9d\n", events / 1e6, raw / 1e6, name, wall, user, sys,
                 peak * 1.048576, 1.5 * raw / 1e6 + 200, peak * 1048576 / raw, faults
        }' "$dir/time.log"
    done
    round=$((round + 1))
  done
done
rm -rf "$dir"
