#!/usr/bin/env bash
# Configures and builds Calorimeter into ./build (idempotent; incremental on re-run).
# Environment: CALO_BUILD_DIR (default build), CALO_WERROR (ON in CI), CALO_CMAKE_ARGS (extra flags).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CALO_BUILD_DIR:-build}
werror=${CALO_WERROR:-OFF}
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build_dir" -G Ninja -DCALO_WERROR="$werror" ${CALO_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
