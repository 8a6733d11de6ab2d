#!/usr/bin/env bash
# Two GPUs of one host, one device call: the CUDA backend's 2-rank multi-GPU tests, then measured Llama3-8B
# (4 layers) training steps with tensor and with pipeline parallelism, per-op spans on, so that `calo sim
# --from RUN` with the collective lines (docs/SIMULATOR.md "Collective lines from a size sweep") can be rated
# against a real step's all-reduces and send/recvs, not only a collective sweep.
#
#   1. here (build machine), repo root: bench/gpu/exec_run.sh stage   (calo, exec_cuda_multigpu_tests, ...)
#   2. GPU host (repo root; carry .carry/exec-cuda-bin):
#        bash bench/calibrate/two_gpu_runs.sh [BIN_DIR] [MODEL]      (MODEL: default the llama3-8b-4layers preset)
#      runs, each under its own timeout: the multi-GPU tests (4-rank ones skip with their reason), then
#        tp2    --tp 2 --seq 4096 --mbs 1 --gbs 8 --steps 6 --warmup 2 --trace-ops
#        pp2    --pp 2 --seq 4096 --mbs 1 --gbs 8 --steps 6 --warmup 2 --trace-ops
#        dp2    --dp 2 --seq 4096 --mbs 1 --gbs 8 --steps 6 --warmup 2 --trace-ops
#      and writes $OUT/two_gpu_runs.tgz (runs/NAME/run.db, NAME.json, NAME.log, multigpu.log, nvidia-smi files)
#      and $OUT/summary.txt.
set -uo pipefail

bin="${1:-.carry/exec-cuda-bin}"
model="${2:-llama3-8b-4layers}"
out="${OUT:-$PWD/two-gpu-out}"
mkdir -p "$out"
unpacked="$(mktemp -d /tmp/calo-bin.XXXXXX)"
for packed in "$bin"/*.xz; do
  [ -e "$packed" ] || continue
  xz -dc "$packed" >"$unpacked/$(basename "$packed" .xz)" && chmod +x "$unpacked/$(basename "$packed" .xz)"
done
calo="$unpacked/calo"
[ -x "$calo" ] || { echo "no calo.xz under $bin: stage it (see the header of $0)" >&2; exit 2; }

work="$(mktemp -d /tmp/calo-two-gpu.XXXXXX)"
mkdir -p "$work/runs"
# shellcheck source=bench/gpu/calo_env.sh
source "$PWD/bench/gpu/calo_env.sh"
calo_env "$PWD" "$calo" 90
status="$work/status.txt"
echo "# two_gpu_runs.sh $(date -u +%FT%TZ): $(nvidia-smi -L 2>/dev/null | tr '\n' ' ')" | tee "$status"
nvidia-smi -q -d CLOCK,POWER,TEMPERATURE >"$work/nvidia-smi-before.txt" 2>&1
nvidia-smi topo -m >"$work/topo.txt" 2>&1

if [ -x "$unpacked/exec_cuda_multigpu_tests" ]; then
  t0=$SECONDS
  timeout --kill-after=10 200 "$unpacked/exec_cuda_multigpu_tests" >"$work/multigpu.log" 2>&1
  echo "== multigpu tests: exit $? after $((SECONDS - t0)) s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/multigpu.log" | tr '\n' ' ')" |
    tee -a "$status"
fi

bench() {
  local name="$1"
  shift
  local t0=$SECONDS
  timeout --kill-after=10 100 "$calo" bench --backend cuda --no-progress --json --model "$model" "$@" \
    --out "$work/runs/$name" >"$work/$name.json" 2>"$work/$name.log"
  echo "== $name: exit $? after $((SECONDS - t0)) s: $*" | tee -a "$status"
}
common=(--seq 4096 --mbs 1 --gbs 8 --steps 6 --warmup 2 --trace-ops)
bench tp2 --tp 2 "${common[@]}"
bench pp2 --pp 2 "${common[@]}"
bench dp2 --dp 2 "${common[@]}"
nvidia-smi -q -d CLOCK,POWER,TEMPERATURE >"$work/nvidia-smi-after.txt" 2>&1
cp "$status" "$out/summary.txt"
tar -C "$work" -czf "$out/two_gpu_runs.tgz" .
ls -la "$out"
