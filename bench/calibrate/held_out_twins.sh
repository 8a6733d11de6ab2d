#!/usr/bin/env bash
# The calibrated presets on runs no fit saw: each held-out run's twin (`calo sim --from RUN`) rated by `calo
# compare`, one line per run and preset, and `calo validate` over the multi-GPU candidates of the held-out hosts.
# Usage: bench/calibrate/held_out_twins.sh CALO [PRESET...]   (presets: names or YAML files; default: both
# shipped calibrated presets). Runs on the 2-core VM, no GPU: ~1 min. docs/benchmarks/calibration.md "The one
# energy figure".
set -euo pipefail
calo=$(realpath "$1")
shift
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(h100-hgx-calibrated h200-hgx-calibrated)
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

unpack() {  # FIXTURE -> $work/FIXTURE/runs
  mkdir -p "$work/$1"
  local archive
  archive=$(ls "$root/tests/fixtures/$1"/runs.t*z)
  tar -xaf "$archive" -C "$work/$1"
}

# One line per run: the twin's error of step (mean and median), mean and peak power, energy per step.
twins() {  # PRESET RUN...
  local preset=$1
  shift
  for run in "$@"; do
    rm -rf "$work/twin"
    "$calo" sim --from "$run" --cluster "$preset" --out "$work/twin" >/dev/null
    "$calo" compare --json "$run" "$work/twin" | python3 -c '
import json, sys
rows = {row["key"]: row for row in json.load(sys.stdin)["rows"]}
keys = ["step_time_mean_s", "step_time_p50_s", "power_gpu_mean_w", "power_gpu_peak_w", "energy_per_step_j"]
cells = []
for key in keys:
    error = rows.get(key, {}).get("sim_error", [None, None])[1]
    cells.append("-" if error is None else f"{error * 100:+.1f}%")
print(f"{sys.argv[1]:<26} {sys.argv[2]:<24}", "  ".join(f"{c:>7}" for c in cells))' \
      "$(basename "$(dirname "$(dirname "$run")")")/$(basename "$run")" "$(basename "$preset")"
  done
}

unpack h100-traceops-c
unpack h100-sweep-d
unpack h100-traceops-f
unpack h100-traceops-g
for fixture in h200x4-plan-vs-measured h200x2-plan-vs-measured-b h200x2-plan-vs-measured; do unpack "$fixture"; done

for preset in "${presets[@]}"; do
  case "$preset" in
  *h100*)
    echo "# $preset: H100 cards no fit saw (step mean, step p50, mean power, peak power, energy per step)"
    twins "$preset" "$work"/h100-traceops-c/runs/{tmbs1,tmbs2,tmbs4,tmbs8,t8k,t4k,soak} \
      "$work"/h100-sweep-d/runs/lmbs{1,2,4,8} "$work"/h100-traceops-{f,g}/runs/{tmbs1,tmbs2,tmbs4,tmbs8,t8k,t4k}
    ;;
  *h200*)
    echo "# $preset: multi-GPU candidates of held-out hosts and shapes (calo validate)"
    for pair in h200x4-plan-vs-measured:dense2k h200x4-plan-vs-measured:dense8k h200x4-plan-vs-measured:moe2k \
      h200x2-plan-vs-measured-b:dense2k h200x2-plan-vs-measured-b:dense8k h200x2-plan-vs-measured-b:moe2k \
      h200x2-plan-vs-measured:dense4k h200x2-plan-vs-measured:moe4k h200x2-plan-vs-measured:dense2kw; do
      runs="$work/${pair%%:*}/runs"
      shape=${pair##*:}
      echo "## ${pair%%:*} $shape"
      "$calo" validate "$runs/$shape"/* --cluster "$preset" --plan "$runs/plans/$shape.json" |
        grep -E "Spearman rho, (step|energy)|largest"
    done
    ;;
  esac
done
