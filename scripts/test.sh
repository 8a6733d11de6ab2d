#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test. GPU tests skip with a printed reason where no GPU exists.
# Then the ASan+UBSan build's tests (scripts/sanitize.sh) and each fuzz target for CALO_FUZZ_SECONDS (default
# 10) s (scripts/fuzz.sh); CALO_SANITIZE_STEPS=0 skips those two. Each step's wall time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
step() {
  local name="$1" started=$SECONDS
  shift
  "$@"
  echo "calo test: step '$name' took $((SECONDS - started)) s"
}
step "install deps" ./scripts/install_deps.sh
step "build" ./scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
step "tests" ctest --test-dir "${CALO_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
if [ "${CALO_SANITIZE_STEPS:-1}" != "0" ]; then
  step "sanitizer build + tests" ./scripts/sanitize.sh
  step "fuzz" ./scripts/fuzz.sh "${CALO_FUZZ_SECONDS:-10}"
fi
