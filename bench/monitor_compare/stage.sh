#!/usr/bin/env bash
# Stages what bench/monitor_compare needs on the GPU host, which has no package registry, into
# .carry/monitor-compare (git-ignored; carry it with the run, ~50 MB):
#   calo.xz                  the calo binary of BUILD_DIR (default build), stripped and compressed
#   zeus-py312.tar.xz        Zeus (PyPI `zeus`, ZEUS_SPEC, default 0.16.0) and its dependencies for CPython 3.12,
#                            unpacked wheels without numpy (PyTorch's host has one) ...
#   numpy-py312.tar.xz       ... and numpy apart, unpacked only where the host lacks it
#   bench/monitor_compare/stage.sh [BUILD_DIR]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$repo/build}"
carry="$repo/.carry/monitor-compare"
spec="zeus==${ZEUS_VERSION:-0.16.0}"
mkdir -p "$carry"
[ -x "$build/calo" ] || { echo "stage.sh: $build/calo not found: build first (./scripts/build.sh)" >&2; exit 2; }
strip -o "$carry/calo" "$build/calo"
xz -T2 -6 -f "$carry/calo"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet "$spec" --python-version 3.12 --implementation cp --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/wheels"
mkdir -p "$work/lib"
for wheel in "$work/wheels"/*.whl; do unzip -q -o "$wheel" -d "$work/lib"; done
find "$work/lib" -type d \( -name tests -o -name __pycache__ \) -prune -exec rm -rf {} +
tar -C "$work/lib" --exclude='./numpy' --exclude='./numpy.libs' --exclude='./numpy-*' -cf - . | xz -T2 -6 >"$carry/zeus-py312.tar.xz"
tar -C "$work/lib" -cf - $(cd "$work/lib" && ls -d numpy numpy.libs numpy-* 2>/dev/null) | xz -T2 -6 >"$carry/numpy-py312.tar.xz"
ls -la "$carry"
echo "carry size $(du -sm "$carry" | cut -f1) MiB (limit 64 MiB for all carried paths together)"
