#!/usr/bin/env bash
# Builds the telemetry GPU-host binaries on this (build) machine and copies them into .carry/telemetry-bin
# (git-ignored) so that the GPU host needs no compiler or Debian packages:
#   bench/gpu/stage.sh [BUILD_DIR]      (default build-telemetry)
# Then on the GPU host (repo root): bench/gpu/run_all.sh .carry/telemetry-bin
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$repo/build-telemetry}"
export CCACHE_NOHASHDIR=1
[ -f "$repo/.whl/nvml/include/nvml.h" ] || bash "$repo/scripts/install_deps.sh"
cmake -S "$repo" -B "$build" -G Ninja -DCALO_BUILD_BENCH=ON -DCALO_CUDA=ON >/dev/null
ninja -C "$build" -j"${JOBS:-1}" calo telemetry_overhead_bench gemm_load nvml_query_lab
mkdir -p "$repo/.carry/telemetry-bin"
cp "$build/calo" "$build/telemetry_overhead_bench" "$build/gemm_load" "$build/nvml_query_lab" "$repo/.carry/telemetry-bin/"
# calo's CUDA backend is a module beside it (libcalo_exec_cuda.so), opened by `calo bench --backend cuda`.
cp "$build/libcalo_exec_cuda.so" "$repo/.carry/telemetry-bin/"
ls -la "$repo/.carry/telemetry-bin"
