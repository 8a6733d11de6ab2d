#!/usr/bin/env bash
# Per-op timings and power on one GPU for `calo calibrate` (issue 14): Llama3-8B 4 layers (the model file of
# tests/fixtures/h100-runs, data/models/llama3-8b.yaml with num_layers: 4, name llama3-8b-4layers).
# Written for the H100 fixtures; it runs unchanged on any one CUDA GPU (the H200 pass of tests/fixtures/h200-traceops).
#
#   1. here (build machine), repo root:
#        cmake -S . -B build-exec-cuda -G Ninja -DCALO_BUILD_BENCH=ON -DCALO_CUDA=ON && ninja -C build-exec-cuda calo
#        mkdir -p .carry/exec-cuda-bin && for f in calo libcalo_exec_cuda.so; do \
#          strip -o .carry/exec-cuda-bin/$f build-exec-cuda/$f && xz -T2 -6 -f .carry/exec-cuda-bin/$f; done
#        sed -e 's/^name: .*/name: llama3-8b-4layers/' -e 's/^num_layers: .*/num_layers: 4/' \
#          data/models/llama3-8b.yaml >.carry/llama3-8b-4layers.yaml
#      (or `bench/gpu/exec_run.sh stage`, which also builds the test binaries). Check that cmake prints
#      "nvml.h from" and "cuDNN": without .whl/nvml and .whl/cudnn_frontend (scripts/install_deps.sh) the binary
#      reads no power and attention falls back to cuBLASLt, unlike the fixture runs.
#   2. GPU host, repo root (carry .carry/exec-cuda-bin and .carry/llama3-8b-4layers.yaml):
#        bash bench/calibrate/h100_trace_ops.sh [BIN_DIR] [MODEL_YAML]
#      runs, each under its own timeout, within CALIBRATE_RUN_BUDGET_S (default 480 s) in total:
#        tmbs1..tmbs8  --trace-ops --seq 2048 --mbs M --gbs 4M --steps 6 --warmup 2   (M = 1 2 4 8)
#        t8k           --trace-ops --seq 8192 --mbs 1 --gbs 1 --steps 5 --warmup 2
#        t4k           --trace-ops --seq 4096 --mbs 2 --gbs 8 --steps 6 --warmup 2
#        mbs1b..mbs8b  the micro-batch sweep again without --trace-ops (does per-op timing change step or power?;
#                      CALIBRATE_UNTRACED=0 leaves them out)
#        soak          t8k's flags with --steps CALIBRATE_SOAK_STEPS (default 0: not run), a temperature curve long
#                      enough to fit the thermal time constants
#      then `nvidia-smi -q`, and writes $OUT/h100_traceops_runs.tgz (runs/NAME/run.db, NAME.json, NAME.log,
#      nvidia-smi files) and $OUT/summary.txt (step time, tokens/s, mean and peak power, op spans per run).
# Paths are relative to the current directory (the repo root), so the commands stored in each run read as the
# fixture runs' do (`--model .carry/llama3-8b-4layers.yaml`).
set -uo pipefail

bin="${1:-.carry/exec-cuda-bin}"
model="${2:-.carry/llama3-8b-4layers.yaml}"
out="${OUT:-$PWD/calibrate-out}"
budget_s=${CALIBRATE_RUN_BUDGET_S:-480}
mkdir -p "$out"
[ -f "$model" ] || { echo "model file $model missing: create it (see the header of $0)" >&2; exit 2; }

if compgen -G "$bin/calo.xz" >/dev/null; then  # staged compressed: unpack into /tmp
  unpacked="$(mktemp -d /tmp/calo-bin.XXXXXX)"
  xz -dc "$bin/calo.xz" >"$unpacked/calo" && chmod +x "$unpacked/calo"
  # calo's CUDA backend module, opened from calo's own directory
  [ -f "$bin/libcalo_exec_cuda.so.xz" ] && xz -dc "$bin/libcalo_exec_cuda.so.xz" >"$unpacked/libcalo_exec_cuda.so"
  bin="$unpacked"
fi
calo="$bin/calo"
[ -x "$calo" ] || { echo "no calo binary under $bin: stage it (see the header of $0)" >&2; exit 2; }

work="$(mktemp -d /tmp/calo-traceops.XXXXXX)"
mkdir -p "$work/runs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CALO_DATA_DIR="$PWD/data" CALO_CUDA_SYNC_TIMEOUT_S=90
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13.0/lib64 /usr/local/cuda-13.0/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
start_s=$SECONDS
status_file="$work/status.txt"
: >"$status_file"

echo "# h100_trace_ops.sh $(date -u +%FT%TZ) on $(hostname): $(nvidia-smi -L 2>/dev/null | head -1)" | tee -a "$status_file"
nvidia-smi -q -d CLOCK,POWER,TEMPERATURE,PERFORMANCE >"$work/nvidia-smi-before.txt" 2>&1
ldd "$calo" >"$work/ldd.txt" 2>&1
grep -q "not found" "$work/ldd.txt" && echo "WARNING missing shared libraries: $(grep 'not found' "$work/ldd.txt")"

# bench NAME TIMEOUT_S FLAGS...: one `calo bench` run; JSON on stdout -> NAME.json, stderr -> NAME.log.
bench() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget_s - (SECONDS - start_s)))
  if [ "$left" -lt 20 ]; then echo "SKIP $name: time budget used up" | tee -a "$status_file"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$calo" bench --backend cuda --no-progress --json --model "$model" "$@" \
    --out "$work/runs/$name" >"$work/$name.json" 2>"$work/$name.log"
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s (limit $limit s): $*" | tee -a "$status_file"
}

for m in 1 2 4 8; do bench "tmbs$m" 90 --trace-ops --seq 2048 --mbs "$m" --gbs $((4 * m)) --steps 6 --warmup 2; done
bench t8k 90 --trace-ops --seq 8192 --mbs 1 --gbs 1 --steps 5 --warmup 2
bench t4k 90 --trace-ops --seq 4096 --mbs 2 --gbs 8 --steps 6 --warmup 2
if [ "${CALIBRATE_UNTRACED:-1}" != 0 ]; then
  for m in 1 2 4 8; do bench "mbs${m}b" 90 --seq 2048 --mbs "$m" --gbs $((4 * m)) --steps 6 --warmup 2; done
fi
soak_steps=${CALIBRATE_SOAK_STEPS:-0}
[ "$soak_steps" -gt 0 ] && bench soak 150 --trace-ops --seq 8192 --mbs 1 --gbs 1 --steps "$soak_steps" --warmup 2
nvidia-smi -q >"$work/nvidia-smi-q.txt" 2>&1

# Summary: per run, the bench JSON's figures and the op spans stored in its run.db.
python3 - "$work" >"$work/summary.txt" <<'PY'
import json, os, sqlite3, sys
work = sys.argv[1]
names = [name for name in ["tmbs1", "tmbs2", "tmbs4", "tmbs8", "t8k", "t4k", "mbs1b", "mbs2b", "mbs4b", "mbs8b",
                            "soak"] if os.path.exists(os.path.join(work, name + ".json"))]
print(f"{'run':6} {'step_p50_ms':>11} {'step_mean_ms':>12} {'tokens/s':>9} {'mfu':>6} {'mean_W':>7} {'peak_W':>7} "
      f"{'J/step':>7} {'temp_C':>6} {'capthr_s':>8} {'op_spans':>8}  device, attention")
for name in names:
    path = os.path.join(work, name + ".json")
    try:
        text = open(path).read()
        report = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    except (OSError, ValueError):
        try:
            last = open(os.path.join(work, name + ".log")).read().strip().splitlines()[-1:]
        except OSError:
            last = []
        print(f"{name:6} no JSON report; log: {' '.join(last) or '(empty)'}")
        continue
    step, tel, device = report.get("step_time_s", {}), report.get("telemetry", {}), report.get("device", {})
    spans = "-"
    db = os.path.join(work, "runs", name, "run.db")
    if os.path.exists(db):
        with sqlite3.connect(db) as conn:
            spans = conn.execute("select count(*) from span where kind = 'op'").fetchone()[0]
    print(f"{name:6} {1e3 * step.get('p50', float('nan')):11.2f} {1e3 * step.get('mean', float('nan')):12.2f} "
          f"{report.get('tokens_per_s', float('nan')):9.0f} {report.get('mfu', float('nan')):6.3f} "
          f"{tel.get('mean_power_per_device_w', float('nan')):7.1f} {tel.get('peak_power_w', float('nan')):7.1f} "
          f"{tel.get('energy_per_step_j', float('nan')):7.1f} {tel.get('peak_temp_c', float('nan')):6.1f} "
          f"{tel.get('throttle_power_cap_s', float('nan')):8.2f} {spans:>8}  {device.get('name', '?')}, {device.get('attention_impl', '?')}")
PY
cat "$status_file" >>"$work/summary.txt"
echo "# total $((SECONDS - start_s)) s" >>"$work/summary.txt"
cp "$work/summary.txt" "$out/summary.txt"
tar -czf "$out/h100_traceops_runs.tgz" -C "$work" .
cat "$out/summary.txt"
ls -la "$out"
