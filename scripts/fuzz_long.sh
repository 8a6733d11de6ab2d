#!/usr/bin/env bash
# Long fuzzing runs of several libFuzzer targets at once, for the >= 10^7 runs per target that docs/FUZZING.md
# records (scripts/fuzz.sh is CI's short run). Each target runs in libFuzzer's fork mode with JOBS workers for
# SECONDS, from the committed seed corpus; crashing inputs are kept and counted, not fatal.
#   1. build machine: CALO_SAN_BUILD_ONLY=1 scripts/sanitize.sh, then
#      scripts/fuzz_long.sh stage            copies the fuzz binaries into .carry/fuzz-bin (git-ignored), xz'd
#   2. anywhere:      scripts/fuzz_long.sh SECONDS JOBS TARGET... [-- BIN_DIR]
#      writes $OUT (default build-san/fuzz-long)/fuzz_long.txt (per target: runs, crashes, rate) and
#      fuzz_long.tar.gz (logs, crashing inputs).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "stage" ]; then
  set -e
  carry="$repo/.carry/fuzz-bin"
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$repo"/build-san/tests/fuzz/fuzz_* "$carry/" && rm -f "$carry"/*.cmake
  xz -T2 -6 -f "$carry"/fuzz_*
  du -sh "$carry"
  exit 0
fi
seconds=${1:?seconds per target}
jobs=${2:?workers per target}
shift 2
targets=()
bin_dir="$repo/build-san/tests/fuzz"
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then bin_dir="$2"; break; fi
  targets+=("$1")
  shift
done
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin_dir="$(unpack_carry "$bin_dir" fuzz-bin)"
out="${OUT:-$repo/build-san/fuzz-long}"
work="$(mktemp -d /tmp/fuzz-long.XXXXXX)"
mkdir -p "$out"
export ASAN_OPTIONS="detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for target in "${targets[@]}"; do
  mkdir -p "$work/$target/corpus" "$work/$target/crashes"
  (cd "$work/$target" && "$bin_dir/fuzz_$target" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -print_funcs=0 -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/$target/crashes/" "$work/$target/corpus" "$repo/tests/fuzz/corpus/$target" \
    >"$work/$target/log.txt" 2>&1) &
done
wait
summary="$out/fuzz_long.txt"
{
  echo "host $(hostname), $(nproc) cores, $(date -u +%FT%TZ), ${seconds} s x ${jobs} workers per target"
  for target in "${targets[@]}"; do
    log="$work/$target/log.txt"
    runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    crashes=$(find "$work/$target/crashes" -type f | wc -l)
    status=$(grep -oE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' "$log" | tail -1)
    echo "$target: ${runs:-?} runs, $crashes crashing inputs saved ($status), $(tail -1 "$log")"
  done
} | tee "$summary"
tar -czf "$out/fuzz_long.tar.gz" -C "$work" .
