#!/usr/bin/env bash
# Energy over sub-second bench windows (issue 40 item 9) on a real multi-GPU host. Stage here:
#   mkdir -p .carry/energy && cp build/calo build/libcalo_exec_cuda.so .carry/energy/ && strip .carry/energy/* &&
#   xz -6 .carry/energy/*
# then on the GPU host (repo root): bench/gpu/energy_window_check.sh [.carry/energy]
# The same 5-step bench (Llama3-8B, 2 layers, seq 4096: ~0.27 s measured) three times on GPU 1 and three
# times on GPU 0, then one 40-step bench on each: energy per step, mean power and step time of each, from
# calo bench --json (energy: the driver's 20 ms power samples over the window, else the counter); logs ->
# $OUT/energy_window.tar.gz.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
carry="${1:-$repo/.carry/energy}"
bin=/tmp/calo-energy-bin
out="${OUT:-$repo/energy-out}"
mkdir -p "$bin" "$out/logs"
for file in "$carry"/*.xz; do xz -dc "$file" > "$bin/$(basename "$file" .xz)"; chmod +x "$bin/$(basename "$file" .xz)"; done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CALO_DATA_DIR="$repo/data"
export CALO_EXECUTABLE="$bin/calo"
log="$out/logs/summary.txt"
cd /tmp
nvidia-smi -L | tee -a "$log"
bench() {  # NAME GPU STEPS
  env CUDA_VISIBLE_DEVICES="$2" "$bin/calo" bench --backend cuda --model llama3-8b --layers 2 --seq 4096 \
    --steps "$3" --warmup 2 --no-progress --json --out "/tmp/ew-$1" > "$out/logs/$1.json" 2> "$out/logs/$1.log"
  python3 - "$1" "$2" "$out/logs/$1.json" <<'PY' | tee -a "$log"
import json, sys
text = open(sys.argv[3]).read()
report = json.loads(text[text.find("{"):])
telemetry = report.get("telemetry", {})
def number(value):
    return float("nan") if value is None else float(value)
step_s = number(report["step_time_s"]["mean"])
energy = number(telemetry.get("energy_per_step_j"))
power = number(telemetry.get("mean_power_per_device_w"))
print(f"{sys.argv[1]:>10} GPU {sys.argv[2]}  step {step_s*1e3:7.2f} ms  energy/step {energy:7.2f} J  "
      f"mean power {power:6.1f} W  power x step {power*step_s:7.2f} J")
PY
}
for round in 1 2 3; do bench "g1-r$round" 1 5; bench "g0-r$round" 0 5; done
bench g1-long 1 40
bench g0-long 0 40
tar -czf "$out/energy_window.tar.gz" -C "$out" logs
