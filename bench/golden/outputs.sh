#!/usr/bin/env bash
# Writes the JSON (and report HTML) outputs of the commands a restructuring must leave unchanged, one file per
# command, so that two builds can be diffed: bench/golden/outputs.sh CALO OUT_DIR, then
# bench/golden/compare.py BEFORE_DIR AFTER_DIR. Wall times, dates and run directories are dropped by compare.py.
set -uo pipefail
calo="$(realpath "$1")"
out="$(realpath -m "$2")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
run() {  # run NAME ARGS...: stdout into NAME.json, the exit code beside it
  local name="$1"
  shift
  "$calo" "$@" >"$out/$name.json" 2>"$out/$name.stderr"
  echo "$?" >"$out/$name.rc"
}
run model-70b model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128 --json
run model-list model --list --json
run graph-check graph --model tiny-dense --tp 2 --pp 2 --check --json
run graph-moe-check graph --model tiny-moe --tp 2 --dp 2 --ep 2 --pp 2 --check --json
run sim-8b sim --model llama3-8b --cluster h100-hgx-calibrated --gpus 8 --tp 2 --pp 2 --gbs 32 --zero 1 --steps 2 \
  --per-gpu --json --out "$work/sim-8b"
run sim-70b sim --model llama3-70b --cluster h100-hgx --gpus 64 --tp 4 --pp 4 --gbs 512 --zero 1 --overlap --json \
  --no-op-spans --out "$work/sim-70b"
run plan-8b plan --model llama3-8b --cluster h100-hgx-calibrated --gpus 8 --gbs 32 --top 5 --json
run plan-power plan power --model llama3-8b --cluster h200-hgx --pp 4 --gbs 8 --json
run cluster-show cluster show h100-hgx-calibrated --json
run bench-cpu bench --backend cpu --model tiny-dense --tp 2 --nproc 2 --steps 2 --check --trace-ops --json --out "$work/bench"
run calibrate calibrate "$work/bench" --cluster cpu-host --out "$work/fitted.yaml" --json
cp "$work/fitted.yaml" "$out/calibrate-cluster.yaml" 2>/dev/null
run report report "$work/sim-8b" --out "$work/report.html" --json
cp "$work/report.html" "$out/report.html" 2>/dev/null
run record record --json --out "$work/record" -- sleep 0.3
run devices devices --json
cp -r "$work/record" "$work/record2"
run merge merge "$work/record" "$work/record2" --out "$work/merged" --json
echo "outputs in $out"
