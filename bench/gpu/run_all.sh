#!/usr/bin/env bash
# Telemetry on the GPU host (issue 3): calo devices, calo probe, sampler overhead and jitter, capture ratio,
# and bf16 GEMM throughput with `calo record` on vs off (alternating runs, medians). Results go under $OUT.
#   bench/gpu/run_all.sh [BIN_DIR]    BIN_DIR holds calo, telemetry_overhead_bench, gemm_load (bench/gpu/stage.sh)
# Tunables (environment): PROBE_SECONDS=5 OVERHEAD_SECONDS=30 CAPTURE_SECONDS=20 PAIRS=5 RUN_SECONDS=20 LAB=1 LAB_ONLY=0
#   CAPTURE_FAST_PERIODS="5ms 20ms" (extra capture runs at these fast periods, besides the defaults)
# Never changes clocks or power limits. About 8 minutes on 4×H200 with the defaults.
# The device tool brings back only a few files: everything is written to a scratch directory and packed into
# $OUT/telemetry_results.tar.gz at the end; $OUT/run_all.log holds the headline lines.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(cd "${1:-$repo/.carry/telemetry-bin}" && pwd)"
final_out="${OUT:-$repo/gpu-results}"
mkdir -p "$final_out"
out="$(mktemp -d /tmp/calo-telemetry-results.XXXXXX)"
pack() {  # leaves exactly run_all.log and telemetry_results.tar.gz in $OUT
  cp "$out/run_all.log" "$final_out/run_all.log" 2>/dev/null
  tar -C "$out" --exclude='./runs' -czf "$final_out/telemetry_results.tar.gz" . 2>/dev/null
}
trap pack EXIT
trap 'exit 143' TERM INT  # a run cut short (timeout) still packs what it has
probe_seconds="${PROBE_SECONDS:-5}"
capture_fast_periods="${CAPTURE_FAST_PERIODS-5ms 20ms}"  # set it empty for none
overhead_seconds="${OVERHEAD_SECONDS:-30}"
capture_seconds="${CAPTURE_SECONDS:-20}"
pairs="${PAIRS:-5}"
run_seconds="${RUN_SECONDS:-20}"
log() { echo "[run_all $(date +%T)] $*" | tee -a "$out/run_all.log"; }

gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
log "host $(hostname), $gpus GPU(s), bin $bin"
nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv \
  > "$out/nvidia-smi.csv" 2>&1

# GEMM load: the cuBLAS binary, or the PyTorch script if the binary cannot run on this host.
# libcublas.so.13 may live only inside PyTorch's pip packages: put those directories on the loader path.
cublas_dirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
found = {os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "nvidia", "**", "libcublas*.so*"), recursive=True)}
print(":".join(sorted(found)))
PY
)
[ -n "$cublas_dirs" ] && export LD_LIBRARY_PATH="$cublas_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
gemm_cmd=("$bin/gemm_load")
if ! "$bin/gemm_load" --seconds 0.1 --size 1024 > "$out/gemm_selftest.txt" 2>&1; then
  log "gemm_load binary failed ($(tail -1 "$out/gemm_selftest.txt")); using bench/gpu/gemm_load.py"
  gemm_cmd=(python3 "$repo/bench/gpu/gemm_load.py")
fi
gemm_all() {  # gemm_all SECONDS: one GEMM process per GPU, in parallel
  local seconds=$1 pids=()
  for ((gpu = 0; gpu < gpus; gpu++)); do
    "${gemm_cmd[@]}" --device "$gpu" --seconds "$seconds" &
    pids+=($!)
  done
  local status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}
export -f gemm_all 2>/dev/null || true

log "calo devices"
"$bin/calo" devices > "$out/devices.txt" 2>&1
"$bin/calo" devices --json > "$out/devices.json" 2>&1
# nvml_query_lab: costs of alternative queries for the expensive counters, cold vs hot fast-group reads,
# nvmlDeviceGetSamples buffers, and the shape of short-lived values, on GPU 0 idle and under bursty GEMMs.
if [ -x "$bin/nvml_query_lab" ] && [ "${LAB:-1}" = 1 ]; then
  log "nvml_query_lab, GPU 0 idle"
  "$bin/nvml_query_lab" --device 0 --samples-seconds 3 --flicker-seconds 5 > "$out/nvml_lab_idle.txt" 2>&1
  log "nvml_query_lab, GPU 0 under 200 ms on / 200 ms off GEMM bursts on every GPU"
  lab_load_pids=()
  for ((gpu = 0; gpu < gpus; gpu++)); do
    "${gemm_cmd[@]}" --device "$gpu" --seconds 150 --burst-ms 200 --idle-ms 200 > /dev/null 2>&1 &
    lab_load_pids+=($!)
  done
  sleep 3
  "$bin/nvml_query_lab" --device 0 --samples-seconds 3 --flicker-seconds 5 > "$out/nvml_lab_burst.txt" 2>&1
  for ((gpu = 1; gpu < gpus; gpu++)); do  # update phase of the other GPUs (compare the "ticks" lines)
    "$bin/nvml_query_lab" --device "$gpu" --parts flicker --flicker-seconds 5 > "$out/nvml_lab_burst_gpu$gpu.txt" 2>&1
  done
  kill "${lab_load_pids[@]}" 2>/dev/null
  wait "${lab_load_pids[@]}" 2>/dev/null
  grep -E "^(cost|samples|flicker|ticks|wakeup)" "$out"/nvml_lab_burst*.txt | tee -a "$out/run_all.log"
fi

[ "${LAB_ONLY:-0}" = 1 ] && { log "LAB_ONLY=1: done"; exit 0; }
log "calo probe --seconds $probe_seconds (idle GPUs)"
"$bin/calo" probe --seconds "$probe_seconds" > "$out/probe_idle.txt" 2>&1
tail -1 "$out/probe_idle.txt" | tee -a "$out/run_all.log"

log "overhead, idle GPUs: fast 10 ms, slow 1 s, ${overhead_seconds} s"
"$bin/telemetry_overhead_bench" --mode overhead --seconds "$overhead_seconds" --fast-period 10ms --slow-period 1s \
  > "$out/overhead_idle.txt" 2>&1
tail -1 "$out/overhead_idle.txt" | tee -a "$out/run_all.log"

log "overhead under GEMM load on every GPU"
gemm_all $((overhead_seconds + 10)) > "$out/overhead_load_gemm.txt" 2>&1 &
load_pid=$!
sleep 5
"$bin/telemetry_overhead_bench" --mode overhead --seconds "$overhead_seconds" --fast-period 10ms --slow-period 1s \
  > "$out/overhead_load.txt" 2>&1
wait $load_pid
tail -1 "$out/overhead_load.txt" | tee -a "$out/run_all.log"

log "overhead under GEMM load at calo record's default periods"
gemm_all $((overhead_seconds + 10)) > /dev/null 2>&1 &
load_pid=$!
sleep 5
"$bin/telemetry_overhead_bench" --mode overhead --seconds "$overhead_seconds" --default-periods \
  > "$out/overhead_default_load.txt" 2>&1
wait $load_pid
tail -1 "$out/overhead_default_load.txt" | tee -a "$out/run_all.log"

# capture_run FILE [ARGS...]: capture ratio while every GPU alternates 200 ms of GEMMs and 200 ms of sleep in one
# long-lived process (the fixture's burst phase). Restarting GEMM processes instead (the first runs) stalls NVML
# for tens of ms at every CUDA context creation and churns mem_used.
capture_run() {
  local file="$1"
  shift
  local pids=()
  for ((gpu = 0; gpu < gpus; gpu++)); do
    "${gemm_cmd[@]}" --device "$gpu" --seconds $((capture_seconds + 5)) --burst-ms 200 --idle-ms 200 > /dev/null 2>&1 &
    pids+=($!)
  done
  sleep 2
  "$bin/telemetry_overhead_bench" --mode capture --seconds "$capture_seconds" --sources nvml "$@" > "$out/$file" 2>&1
  wait "${pids[@]}"
  tail -1 "$out/$file" | tee -a "$out/run_all.log"
}
log "capture ratio under bursty GEMM load, default periods, ${capture_seconds} s"
capture_run capture.txt
for period in $capture_fast_periods; do
  log "capture ratio under bursty GEMM load, fast metrics at $period, ${capture_seconds} s"
  capture_run "capture_fast_$period.txt" --fast-period "$period"
done

log "calo probe under GEMM load"
gemm_all $((probe_seconds * 6 + 15)) > /dev/null 2>&1 &
load_pid=$!
sleep 5
"$bin/calo" probe --seconds "$probe_seconds" > "$out/probe_load.txt" 2>&1
wait $load_pid
tail -1 "$out/probe_load.txt" | tee -a "$out/run_all.log"

log "GEMM throughput, recording off vs on (calo record, default periods), $pairs pairs x ${run_seconds} s"
: > "$out/gemm_onoff.tsv"
for ((pair = 0; pair < pairs; pair++)); do
  for mode in off on; do
    # Alternate which mode goes first so warm-up and heat favour neither.
    if (( pair % 2 == 1 )); then mode=$([ "$mode" = off ] && echo on || echo off); fi
    file="$out/gemm_${mode}_${pair}.txt"
    if [ "$mode" = on ]; then
      "$bin/calo" record --out "$out/runs/gemm-on-$pair" --name gemm-on -- \
        bash -c "$(declare -p gemm_cmd gpus); $(declare -f gemm_all); gemm_all $run_seconds" > "$file" 2>&1
    else
      gemm_all "$run_seconds" > "$file" 2>&1
    fi
    total=$(grep -o '= [0-9.]* TFLOP/s' "$file" | awk '{sum += $2} END {printf "%.3f", sum}')
    printf '%s\t%d\t%s\n' "$mode" "$pair" "$total" >> "$out/gemm_onoff.tsv"
    log "  pair $pair $mode: $total TFLOP/s (sum over GPUs)"
  done
done
python3 - "$out/gemm_onoff.tsv" <<'PY' | tee "$out/gemm_onoff_summary.txt" | tee -a "$out/run_all.log"
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]) if line.strip()]
values = {"off": [], "on": []}
for mode, _, total in rows:
    values[mode].append(float(total))
off, on = statistics.median(values["off"]), statistics.median(values["on"])
print(f"# runs off: {values['off']}")
print(f"# runs on:  {values['on']}")
print(f"gemm throughput: off median {off:.2f} TFLOP/s, on median {on:.2f} TFLOP/s, "
      f"loss {100 * (off - on) / off:.3f} % (target <= 0.3 %)")
PY
# One recorded run's summary (per-GPU energy, power, throttle) and its schedule with measured costs.
[ -f "$out/runs/gemm-on-0/run.db" ] && python3 "$repo/bench/gpu/check_power_samples.py" "$out/runs/gemm-on-0" \
  2>&1 | tee "$out/power_samples_check.txt" | tee -a "$out/run_all.log"
[ -f "$out/runs/gemm-on-0/run.db" ] && python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select config_json from run").fetchone()[0])' \
  "$out/runs/gemm-on-0/run.db" > "$out/gemm_on_0_config.json" 2>&1
log "done; results packed into $final_out/telemetry_results.tar.gz"
