#!/usr/bin/env bash
# Copies this machine's build of calo and bench_plan_search into .carry/plan-bin (git-ignored) for
# device_times.sh on a many-core host:  bench/plan_search/stage.sh [BUILD_DIR]   (default build-exec-cuda)
# calo is stripped and xz-compressed (34 MB of CUDA kernels -> 4.5 MB): the lender carries 64 MiB in all.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$repo/build-exec-cuda}"
ninja -C "$build" calo bench_plan_search
mkdir -p "$repo/.carry/plan-bin"
cp "$build/calo" "$build/bench/plan_search/bench_plan_search" "$repo/.carry/plan-bin/"
strip "$repo/.carry/plan-bin/calo" "$repo/.carry/plan-bin/bench_plan_search"
xz -f -T2 -6 "$repo/.carry/plan-bin/calo"
