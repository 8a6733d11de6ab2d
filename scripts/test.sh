#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. GPU tests skip with a printed reason where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${CALO_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
