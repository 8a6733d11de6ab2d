#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/) for a bounded time, from the committed seed corpus; fails on the
# first crash, leak, sanitizer report or exception other than InputError (docs/FUZZING.md).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 15)] [TARGET...]   e.g. scripts/fuzz.sh 600 kineto_trace
# Builds ./build-san first (scripts/sanitize.sh). New inputs go to build-san/fuzz/<target>/ (not committed);
# a crashing input is saved as build-san/fuzz/<target>-crash-<sha1>.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
shift || true
build_dir=${CALO_SAN_BUILD_DIR:-build-san}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model_yaml cluster_yaml kineto_trace marker_lines campaign_spec)
CALO_SAN_BUILD_ONLY=1 ./scripts/sanitize.sh
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# One target per core at once (each libFuzzer run is one process): CI's five targets take three rounds of
# SECONDS on 2 cores instead of five.
fuzz_one() {
  local target="$1" work="$build_dir/fuzz/$1" log="$build_dir/fuzz/$1.log"
  mkdir -p "$work"
  # -max_len 16384: inputs as long as the larger seeds; -timeout 10: a hang is a finding; -rss_limit_mb 2048:
  # libFuzzer's default, so a parser that allocates without bound is a finding too.
  if ! "$build_dir/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build_dir/fuzz/$target-" \
    "$work" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "calo fuzz: $target found a crash (log $log); add the input under tests/fuzz/regressions/$target/," \
      "fix the parser and re-run" >&2
    return 1
  fi
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "calo fuzz: $target: $runs runs in ${seconds} s, no crash"
}
failed=0
pids=()
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  pids+=($!)
  if ((${#pids[@]} >= $(nproc))); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit "$failed"
