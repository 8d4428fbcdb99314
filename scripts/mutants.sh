#!/usr/bin/env bash
# The mutation check: plants plausible one-line bugs, one at a time, in a
# scratch copy of the committed tree, builds it incrementally and runs the
# tests that should catch each; prints which survive. A surviving mutant is
# a bug users could hit that no test notices: add the test, not an excuse.
#
#   scripts/mutants.sh [SCRATCH_DIR] [FIRST-LAST]
#
# SCRATCH_DIR (default /tmp/trainprof-mutants) holds a clone of HEAD and its
# own build (the first run builds it whole: about 15 minutes on 2 cores;
# later runs update it). FIRST-LAST runs part of the list (1-based).
# C++ mutants run the gtest binary with a filter; Python mutants run pytest
# against the scratch's python/ with the installed extension module
# (scripts/python_env.sh first). Exit status 1 when one survived.
#
# The list: FILE @@ the line's text (found exactly once) @@ its replacement
# @@ gtest:FILTER or pytest:ARGS. It grows with each new output.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scratch="${1:-/tmp/trainprof-mutants}"
range="${2:-}"
venv="${TRAINPROF_VENV:-$root/.venv}"

mutants() {
  cat <<'EOF'
src/core/recorder.cc @@ tb->dropped.fetch_add(1, std::memory_order_relaxed); @@ (void)tb; @@ gtest:Recording.*:Reliability.*
src/core/flusher.cc @@ stats_.events_lost += lost; @@ (void)lost; @@ gtest:Reliability.*:Process.*
src/raw/raw_reader.cc @@ return chunk_crc(h, payload) == h.crc; @@ return chunk_crc(h, payload) == h.crc || true; @@ gtest:RawReader.*
src/raw/raw_reader.cc @@ expected = int64_t{sequence} + 1; @@ expected = int64_t{sequence}; @@ gtest:RawReader.*
src/analysis/step_selection.cc @@ auto inside = [&](uint64_t t) { return selection.keeps(t); }; @@ auto inside = [&](uint64_t) { return true; }; @@ gtest:Analysis.StepSelection
src/analysis/self_time.cc @@ parent.self_ns -= std::min(parent.self_ns, overlap); @@ parent.self_ns -= std::min(parent.self_ns, overlap / 2); @@ gtest:Analysis.*
src/analysis/step_trace.cc @@ row.data_wait_ns = length(subtract(waiting, comm_union)); @@ row.data_wait_ns = length(waiting); @@ gtest:Analysis.StepTrace*
src/analysis/step_trace.cc @@ computing = subtract(computing, waiting); @@ (void)waiting; @@ gtest:Analysis.StepTrace*
src/analysis/step_trace.cc @@ row.bubble_ns = comm.receive_ns; @@ row.bubble_ns = 0; @@ gtest:Analysis.StepTrace*
src/analysis/memory.cc @@ row.release_total_reserved = r.total_reserved; @@ row.release_total_reserved = r.total_allocated; @@ gtest:Analysis.Memory*
src/exporter/csv_tables.cc @@ .fixed(static_cast<double>(r.total_reserved) / kBytesPerMB, 6) @@ .fixed(static_cast<double>(r.total_allocated) / kBytesPerMB, 6) @@ gtest:Analysis.Memory*
src/exporter/csv_tables.cc @@ .us(r.data_wait_ns); @@ .us(r.free_ns); @@ gtest:Analysis.StepTraceBreakdownAddsUp
src/analysis/cluster.cc @@ for (const Member& m : list) last = std::max(last, m.call->start_ns); @@ for (const Member& m : list) last = std::max(last, m.call->end_ns); @@ gtest:Cluster.*:CommunicationJson.*
src/analysis/cluster.cc @@ (s.data_wait_separate ? 0 : st.data_wait_ns) + (it != in_flight_waited.end() ? it->second : 0); @@ (s.data_wait_separate && false ? 0 : st.data_wait_ns) + (it != in_flight_waited.end() ? it->second : 0); @@ gtest:Cluster.*
src/analysis/rank_summary.cc @@ return local - static_cast<uint64_t>(offset_at(m, local)); @@ return local + static_cast<uint64_t>(offset_at(m, local)); @@ gtest:RankSummary.*
src/analysis/rank_summary.cc @@ return prev->offset_ns + static_cast<int64_t>(f * static_cast<double>(next->offset_ns - prev->offset_ns)); @@ return prev->offset_ns + static_cast<int64_t>(0 * f * static_cast<double>(next->offset_ns - prev->offset_ns)); @@ gtest:RankSummary.*
src/analysis/collective_numbering.cc @@ gaps.push_back(a > b ? a - b : b - a); @@ gaps.push_back(a > b ? a - a : b - b); @@ gtest:CollectiveNumbering.*
src/analysis/collective_numbering.cc @@ return g.origin.starts_with("torch.distributed"); @@ return g.origin.starts_with("torch.distributed") || true; @@ gtest:CollectiveNumbering.*
src/exporter/communication_json.cc @@ if (link.mb > 0 && link.ms <= 0) entry["Only Waited"] = true; @@ (void)entry; @@ gtest:Cluster.*:CommunicationJson.*
src/pipeline/run_info.cc @@ model.clock_problem = clock_exchange_problem(*sync); @@ model.clock_problem = clock_exchange_problem(*sync).substr(0, 0); @@ gtest:Cluster.*:RankSummary.*:Analysis.*
src/exporter/csv_tables.cc @@ .us(r.total_ns / r.count) @@ .us(r.total_ns) @@ gtest:CsvTables.*
src/exporter/csv_tables.cc @@ .us(r.device_self_ns) @@ .us(r.device_total_ns) @@ gtest:CsvTables.*
src/exporter/csv_tables.cc @@ .us(r.wait_ns) @@ .us(r.dur_ns) @@ gtest:CsvTables.*
src/exporter/csv_tables.cc @@ csv.us(r.release_ns + offset).us(r.release_ns - r.alloc_ns); @@ csv.us(r.release_ns + offset).us(r.release_ns); @@ gtest:CsvTables.*
src/exporter/csv_tables.cc @@ if (std::isnan(v)) @@ if (false && std::isnan(v)) @@ gtest:CsvTables.*
src/exporter/csv_tables.cc @@ r.free_ns, r.stage_ns, r.bubble_ns, @@ r.free_ns, r.bubble_ns, r.stage_ns, @@ gtest:CsvTables.*
src/analysis/dataset_statistics.cc @@ if (d.custom_info != 0 && d.start_ns >= t.info_at) { @@ if (d.custom_info != 0) { @@ gtest:CsvTables.*
src/core/option_table.cc @@ {"profile_memory", "bool", "", "profile_memory", true, "profile(profile_memory)", @@ {"profile_memory", "bool", "", "profile_memory", false, "profile(profile_memory)", @@ gtest:OptionTable.*:Cli.TheGuides*
src/core/options.cc @@ for (const OptionSpec& spec : option_table()) j[spec.name] = spec.write(o); @@ for (const OptionSpec& spec : option_table()) if (spec.type[0] != 'u') j[spec.name] = spec.write(o); @@ gtest:OptionTable.*:EnvOptions.*
python/trainprof/_validate.py @@ if value < minimum: @@ if value < minimum - 1: @@ pytest:python/tests/test_api.py
python/trainprof/_data.py @@ _record([("DataLoader", "wait", start, _ticks(), f"workers={self._num_workers}")]) @@ _record([("DataLoader", "fetch", start, _ticks(), f"workers={self._num_workers}")]) @@ pytest:python/tests/test_dataloader.py
python/trainprof/_distributed.py @@ best = (t1 - t0, (t0 + t1) // 2 - theirs, (t0 + t1) // 2) @@ best = (t1 - t0, theirs - (t0 + t1) // 2, (t0 + t1) // 2) @@ pytest:python/tests/test_distributed.py -k clock_offsets
EOF
}

say() { printf '[mutants] %s\n' "$*"; }

# The scratch: HEAD's tree, built once with the default preset.
if [ ! -d "$scratch/tree/.git" ]; then
  mkdir -p "$scratch"
  git clone --quiet "$root" "$scratch/tree"
else
  git -C "$scratch/tree" fetch --quiet "$root" HEAD
  git -C "$scratch/tree" reset --quiet --hard FETCH_HEAD
fi
tree="$scratch/tree"
say "scratch $tree at $(git -C "$tree" rev-parse --short HEAD); building the tests and their helper programs"
(cd "$tree" && cmake --preset default > /dev/null) || { say "cannot configure $tree"; exit 2; }
# The test binary and the helper programs its tests run (a mutant of the
# library must reach them too, or a test through a helper cannot catch it).
mapfile -t targets < <(cmake --build "$tree/build" --target help | sed -n 's/^\.\.\. \(trainprof_test[s_][a-z_]*\).*/\1/p')
build_tests() { cmake --build "$tree/build" -j "$(nproc)" --target "${targets[@]}"; }
build_tests > "$scratch/build.log" 2>&1 || { say "the unmutated tree does not build: $scratch/build.log"; exit 2; }
tests_bin="$tree/build/bin/trainprof_tests"
# Python: a copy of the installed package (its extension and libraries)
# with the scratch's .py files over it, mutated one at a time.
installed="$(ls -d "$venv"/lib/python3*/site-packages/trainprof 2>/dev/null | head -1 || true)"
pkg="$scratch/pkg"
sync_python() { cp "$tree"/python/trainprof/*.py "$pkg/trainprof/"; }
if [ -n "$installed" ]; then
  rm -rf "$pkg" && mkdir -p "$pkg" && cp -r "$installed" "$pkg/trainprof" && sync_python
fi
# shellcheck disable=SC2086  # pytest's ARGS are words
run_check() {  # CHECK LOG: 0 when the tests pass
  case "$1" in
    gtest:*) "$tests_bin" --gtest_filter="${1#gtest:}" >> "$2" 2>&1 ;;
    pytest:*) (cd "$tree" && PYTHONPATH="$pkg" "$venv/bin/python" -m pytest -q -x -p no:cacheprovider ${1#pytest:} >> "$2" 2>&1) ;;
  esac
}
# Each check passes on the unmutated tree, or a failure would count as a catch.
while IFS= read -r check; do
  if [[ "$check" == pytest:* && -z "$installed" ]]; then continue; fi
  run_check "$check" "$scratch/baseline.log" || { say "fails unmutated: $check ($scratch/baseline.log)"; exit 2; }
done < <(mutants | sed 's/.* @@ //' | sort -u)
say "every check passes unmutated"

first=1 last=1000000
if [ -n "$range" ]; then first="${range%-*}" last="${range#*-}"; fi
n=0 caught=0 survived=0 start_all=$SECONDS
survivors=()
while IFS= read -r spec; do
  n=$((n + 1))
  [ "$n" -lt "$first" ] || [ "$n" -gt "$last" ] && continue
  file="${spec%% @@ *}" rest="${spec#* @@ }"
  original="${rest%% @@ *}" rest="${rest#* @@ }"
  replacement="${rest%% @@ *}" check="${rest#* @@ }"
  t0=$SECONDS
  # Exactly one occurrence, or the list is stale: say so, not a silent pass.
  if ! python3 - "$tree/$file" "$original" "$replacement" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"found {text.count(old)} times, not once: {old!r}")
open(path, "w").write(text.replace(old, new))
PY
  then
    say "#$n $file: the list is stale (see above)"; survived=$((survived + 1)); survivors+=("#$n stale: $file"); continue
  fi
  result="SURVIVED"
  : > "$scratch/mutant$n.log"
  case "$check" in
    gtest:*)
      if ! build_tests >> "$scratch/mutant$n.log" 2>&1; then
        result="invalid: does not build (fix the list)"
      elif ! run_check "$check" "$scratch/mutant$n.log"; then
        result="caught"
      fi ;;
    pytest:*)
      if [ -z "$installed" ]; then
        result="not run (scripts/python_env.sh)"
      else
        sync_python
        run_check "$check" "$scratch/mutant$n.log" || result="caught"
      fi ;;
  esac
  git -C "$tree" checkout --quiet -- "$file"
  [ -z "$installed" ] || sync_python
  case "$result" in
    caught*) caught=$((caught + 1)) ;;
    SURVIVED) survived=$((survived + 1)); survivors+=("#$n $file: $original") ;;
    *) survived=$((survived + 1)); survivors+=("#$n $file: $result") ;;
  esac
  printf '[mutants] #%-2d %-40s %-26s %4ds\n' "$n" "$file" "$result" $((SECONDS - t0))
done < <(mutants)
# The tree as it was, built, for the next run.
build_tests > /dev/null 2>&1 || true
say "$caught caught, $survived survived, in $((SECONDS - start_all)) s (logs: $scratch/mutant*.log)"
for s in "${survivors[@]}"; do say "survivor $s"; done
[ "$survived" -eq 0 ]
