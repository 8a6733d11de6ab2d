#!/usr/bin/env bash
# A temperature curve long enough for the thermal constants (issue 14), on one GPU: `calo record` around a
# long steady `calo bench` (Llama3-8B 4 layers, 8K sequence, mbs 1) and a cool-down, from a card idle since
# the machine started. The fixture runs last 2-25 s; a heat sink's time constant is minutes.
#
#   1. here (build machine), repo root: stage the binary and the model file as the header of
#      bench/calibrate/h100_trace_ops.sh says (.carry/calo-bin/calo.xz, .carry/llama3-8b-4layers.yaml).
#   2. GPU host, repo root (carry .carry/calo-bin and .carry/llama3-8b-4layers.yaml):
#        bash bench/calibrate/soak_cooldown.sh [BIN_DIR] [MODEL_YAML]
#      runs, from $OUT's point of view:
#        runs/soakcool  calo record of the whole: idle 5 s, the soak, then SOAK_COOL_S (90) s idle
#        runs/soak      the soak's own bench run: --seq 8192 --mbs 1 --gbs 1 --steps SOAK_STEPS (1400) --warmup 2
#      then, on the same (now warm) card, bench/calibrate/h100_trace_ops.sh's six --trace-ops runs (its
#      CALIBRATE_UNTRACED=0), so the card's short runs come with its long one. Writes $OUT/soak_runs.tgz
#      (runs/NAME/run.db, logs, nvidia-smi before and after) and $OUT/soak_summary.txt.
# Never changes clocks or power limits.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin="$(unpack_carry "$(cd "${1:-.carry/calo-bin}" && pwd)" calo-bin)"
model="${2:-.carry/llama3-8b-4layers.yaml}"
out="${OUT:-$PWD/soak-out}"
soak_steps=${SOAK_STEPS:-1400}
cool_s=${SOAK_COOL_S:-90}
mkdir -p "$out"
[ -x "$bin/calo" ] || { echo "no calo binary under $bin: stage it (see the header of $0)" >&2; exit 2; }
[ -f "$model" ] || { echo "model file $model missing: stage it (see the header of $0)" >&2; exit 2; }

work="$(mktemp -d /tmp/calo-soak.XXXXXX)"
mkdir -p "$work/runs"
pack() {
  cp "$work/summary.txt" "$out/soak_summary.txt" 2>/dev/null
  tar -czf "$out/soak_runs.tgz" -C "$work" . 2>/dev/null
}
trap pack EXIT
trap 'exit 143' TERM INT
export CALO_DATA_DIR="$repo/data" CALO_CUDA_SYNC_TIMEOUT_S=90
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13.0/lib64 /usr/local/cuda-13.0/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
summary() { echo "[soak $(date -u +%T)] $*" | tee -a "$work/summary.txt"; }

summary "$(nvidia-smi -L 2>/dev/null | head -1); $soak_steps steps, ${cool_s} s cool-down"
nvidia-smi -q -d CLOCK,POWER,TEMPERATURE,PERFORMANCE >"$work/nvidia-smi-before.txt" 2>&1
nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv >>"$work/summary.txt" 2>&1
start_s=$SECONDS
# Relative paths, so the stored commands read as the other fixtures' (--model .carry/llama3-8b-4layers.yaml).
timeout --kill-after=10 $((soak_steps / 4 + cool_s + 120)) "$bin/calo" record --quiet --name soakcool \
  --out "$work/runs/soakcool" -- bash -c "sleep 5; '$bin/calo' bench --backend cuda --no-progress --json \
  --model '$model' --seq 8192 --mbs 1 --gbs 1 --steps $soak_steps --warmup 2 --out '$work/runs/soak' \
  >'$work/soak.json' 2>'$work/soak.log'; echo soak exit \$?; sleep $cool_s" >"$work/soakcool.log" 2>&1
summary "record exit $? after $((SECONDS - start_s)) s; $(grep -h 'soak exit' "$work/soakcool.log")"
python3 - "$work/soak.json" >>"$work/summary.txt" 2>&1 <<'PY'
import json, sys
text = open(sys.argv[1]).read()
report = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
tel = report["telemetry"]
print(f"soak: step p50 {1e3 * report['step_time_s']['p50']:.1f} ms, mean {tel['mean_power_per_device_w']:.1f} W, "
      f"peak {tel['peak_power_w']:.1f} W, peak {tel['peak_temp_c']:.0f} C")
PY

# The card's short runs (the other fixtures' trace-ops sweep), into the same work tree.
OUT="$work/traceops" CALIBRATE_UNTRACED=0 CALIBRATE_RUN_BUDGET_S="${SOAK_SWEEP_BUDGET_S:-200}" \
  bash "$repo/bench/calibrate/h100_trace_ops.sh" "$bin" "$model" >"$work/traceops.log" 2>&1
tar -xzf "$work/traceops/h100_traceops_runs.tgz" -C "$work/traceops" ./runs 2>/dev/null
mv "$work/traceops/runs/"* "$work/runs/" 2>/dev/null
rm -f "$work/traceops/h100_traceops_runs.tgz"
cat "$work/traceops/summary.txt" >>"$work/summary.txt" 2>/dev/null
nvidia-smi -q >"$work/nvidia-smi-after.txt" 2>&1
summary "total $((SECONDS - start_s)) s"
cat "$work/summary.txt"
