#!/usr/bin/env bash
# `calo bench --precision` on one GPU: bf16 against the FP8 recipes the CUDA backend runs (fp8: torchao's
# tensorwise casts; fp8-delayed: Transformer Engine's fused casts), each with --check and then timed, and the
# backend's FP8 GPU tests. Then `calo sim` of each on the calibrated preset of the card.
#   1. here: strip and xz build/calo, build/libcalo_exec_cuda.so (calo's CUDA backend, opened from calo's
#      directory) and build/tests/exec_cuda/exec_cuda_tests into .carry/fp8-bin
#   2. GPU host (carry .carry/fp8-bin): bash bench/fp8_gemm/bench_fp8.sh     -> $OUT/bench_fp8.tar.gz, summary
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(mktemp -d /tmp/calo-fp8.XXXXXX)"
for f in "$repo"/.carry/fp8-bin/*.xz; do xz -dc "$f" >"$bin/$(basename "$f" .xz)"; chmod +x "$bin/$(basename "$f" .xz)"; done
out="${OUT:-$repo/fp8-out}"
work="$bin/runs"
mkdir -p "$out" "$work"
export CALO_DATA_DIR="$repo/data"
summary="$out/bench_fp8_summary.txt"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv | tee "$summary"
timeout 240 "$bin/exec_cuda_tests" --gtest_filter='CudaBackend.RunsFp8*:CudaBackend.AnFp8*:CudaBackend.RunsEveryOpOfTinyDense*:CudaBackend.CheckCatches*' \
  2>&1 | tail -25 | tee -a "$summary"
card=h100-hgx-calibrated
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && card=h200-hgx-calibrated
layers="${FP8_LAYERS:-4}" seq="${FP8_SEQ:-8192}" gbs="${FP8_GBS:-4}"
for precision in bf16 fp8 fp8-delayed; do
  shape=(--model llama3-8b --layers "$layers" --seq "$seq" --gbs "$gbs" --precision "$precision")
  timeout 120 "$bin/calo" bench --backend cuda "${shape[@]}" --steps 2 --warmup 1 --check \
    --out "$work/check-$precision" >"$work/check-$precision.log" 2>&1
  echo "check $precision: rc $? $(grep -i 'check' "$work/check-$precision.log" | tail -1)" | tee -a "$summary"
  timeout 180 "$bin/calo" bench --backend cuda "${shape[@]}" --steps 10 --warmup 3 --json \
    --out "$work/bench-$precision" >"$work/bench-$precision.json" 2>"$work/bench-$precision.err"
  echo "bench $precision: rc $?" | tee -a "$summary"
  python3 - "$work/bench-$precision.json" "$precision" <<'PY' | tee -a "$summary"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as error:
    print(f"  {sys.argv[2]}: no JSON ({error})"); sys.exit(0)
t = d["telemetry"]
device = t["devices"][0]
print(f"  bench {sys.argv[2]}: step p50 {d['step_time_s']['p50']:.4f} s (min {d['step_time_s']['min']:.4f}), "
      f"tokens/s {d['tokens_per_s']:.0f}, MFU {100 * d['mfu']:.1f} %, energy/step {t.get('energy_per_step_j')}, "
      f"mean power {device.get('mean_power_w')} W, peak {device.get('peak_power_w')} W")
PY
  timeout 60 "$bin/calo" sim --cluster "$card" "${shape[@]}" --steps 13 --warmup 3 --no-store --json \
    >"$work/sim-$precision.json" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f'  sim {sys.argv[2]} on $card: iteration_s={d[\"iteration_s\"]:.4f} energy_per_step_j={d[\"energy_per_step_j\"]:.1f} mean_power_w={d[\"mean_power_w\"]:.1f}')" \
    "$work/sim-$precision.json" "$precision" 2>&1 | tee -a "$summary"
done
tar -czf "$out/bench_fp8.tar.gz" -C "$work" . 2>/dev/null
