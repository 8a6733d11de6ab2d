#!/usr/bin/env bash
# GPU host side of bench/monitor_compare (repo root): unpacks what stage.sh carried, runs monitor_compare.py on
# GPU 0 and packs the results into $OUT/monitor_compare.tar.gz ($OUT/summary.md beside it).
#   bench/monitor_compare/run_on_gpu.sh [extra monitor_compare.py flags, e.g. --rounds 3 --seconds 8]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
carry="$repo/.carry/monitor-compare"
out="${OUT:-$repo/monitor-compare-out}"
work="$(mktemp -d /tmp/monitor-compare.XXXXXX)"
mkdir -p "$out" "$work/lib" "$work/results"
pack() { cp "$work/results/summary.md" "$out/" 2>/dev/null; tar -C "$work" -czf "$out/monitor_compare.tar.gz" results; }
trap pack EXIT
xz -dc "$carry/calo.xz" >"$work/calo" && chmod +x "$work/calo"
xz -dc "$carry/zeus-py312.tar.xz" | tar -C "$work/lib" -xf -
python3 -c "import numpy" 2>/dev/null || xz -dc "$carry/numpy-py312.tar.xz" | tar -C "$work/lib" -xf -
{
  date -u +%FT%TZ; hostname
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv
  python3 --version; nproc
  "$work/calo" --version 2>&1 | head -1
} >"$work/results/host.txt" 2>&1
cat "$work/results/host.txt"
python3 "$repo/bench/monitor_compare/monitor_compare.py" --calo "$work/calo" --pylib "$work/lib" \
  --out "$work/results" "$@" 2>&1 | tee "$work/results/monitor_compare.log"
