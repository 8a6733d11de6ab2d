#!/usr/bin/env bash
# The job's GPUs on a real multi-GPU host (issue 40 item 6), with real NVML and CUDA. Stage here:
#   mkdir -p .carry/scope && cp build/calo build/libcalo_exec_cuda.so build/tests/exec_cuda/exec_cuda_multigpu_tests \
#     .carry/scope/ &&
#   strip .carry/scope/* && xz -6 .carry/scope/*
# then on the GPU host (repo root): bench/gpu/gpu_scope_check.sh [.carry/scope]
# Runs the labelled multigpu test CudaMultiGpu.TelemetryRecordsTheJobsGpusNotTheHosts, then shows by hand what
# calo record and calo bench record with and without CUDA_VISIBLE_DEVICES and --gpus; logs -> $OUT/gpu_scope.tar.gz.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
carry="${1:-$repo/.carry/scope}"
bin=/tmp/calo-scope-bin
out="${OUT:-$repo/scope-out}"
mkdir -p "$bin" "$out/logs"
for file in "$carry"/*.xz; do xz -dc "$file" > "$bin/$(basename "$file" .xz)"; chmod +x "$bin/$(basename "$file" .xz)"; done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CALO_DATA_DIR="$repo/data"
export CALO_EXECUTABLE="$bin/calo"
log="$out/logs/summary.txt"
run() { echo "\$ $*" | tee -a "$log"; "$@" >> "$log" 2>&1; echo "rc $?" | tee -a "$log"; }
cd /tmp
run nvidia-smi -L
run "$bin/exec_cuda_multigpu_tests" --gtest_filter='CudaMultiGpu.TelemetryRecordsTheJobsGpusNotTheHosts'
run "$bin/calo" record --quiet --out /tmp/scope-all -- sleep 2
run env CUDA_VISIBLE_DEVICES=1 "$bin/calo" record --quiet --out /tmp/scope-cvd1 -- sleep 2
run "$bin/calo" record --gpus 0 --quiet --out /tmp/scope-flag0 -- sleep 2
run "$bin/calo" record --gpus O --quiet --out /tmp/scope-bad -- sleep 1
run env CUDA_VISIBLE_DEVICES=1 "$bin/calo" bench --backend cuda --model llama3-8b --layers 2 --seq 4096 --steps 5 \
  --warmup 2 --no-progress --out /tmp/scope-bench-gpu1
run "$bin/calo" bench --backend cuda --model llama3-8b --layers 2 --seq 4096 --steps 5 --warmup 2 --no-progress \
  --out /tmp/scope-bench-default
run "$bin/calo" compare /tmp/scope-bench-gpu1 /tmp/scope-bench-default
tar -czf "$out/gpu_scope.tar.gz" -C "$out" logs
cat "$log"
