#!/usr/bin/env bash
# Fused (cuDNN SDPA) against unfused (cuBLASLt batched GEMM + softmax + GEMM) attention in `calo bench` on one
# GPU, and the CUDA tests of the unfused path (issue 16, item 4). Two steps:
#   1. build machine:  bench/exec_gpu/attention_kinds.sh stage [BUILD_DIR]   (default build; must have CUDA)
#      copies calo, its CUDA backend module libcalo_exec_cuda.so and exec_cuda_tests into
#      .carry/attention-kinds (git-ignored), stripped and xz-compressed.
#   2. GPU host:       bench/exec_gpu/attention_kinds.sh [BIN_DIR]           (default .carry/attention-kinds)
#      runs the unfused-path gpu tests, then for Llama3-8B 4 layers at seq 2048 and 8192 one `calo bench` per
#      attention kind (3 warm-up + 10 steps), and writes $OUT/attention_kinds.txt (the figures) and
#      $OUT/attention_kinds.tar.gz (logs, JSON reports and run directories).
# Compare with the simulator on this machine: bench/exec_gpu/attention_kinds_sim.py $OUT/attention_kinds.tar.gz
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ "${1:-}" = "stage" ]; then
  set -e
  build="${2:-$repo/build}"
  carry="$repo/.carry/attention-kinds"
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$build/calo" "$build/libcalo_exec_cuda.so" "$(find "$build" -name exec_cuda_tests -type f -perm -u+x | head -1)" \
    "$carry/"
  strip "$carry"/* && xz -T2 -6 -f "$carry"/*
  du -sh "$carry"
  exit 0
fi
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin="$(unpack_carry "$(cd "${1:-$repo/.carry/attention-kinds}" && pwd)" attention-kinds)"
out="${OUT:-$repo/attention-kinds-out}"
work="$(mktemp -d /tmp/attention-kinds-work.XXXXXX)"
mkdir -p "$out"
summary="$out/attention_kinds.txt"
export CALO_DATA_DIR="$repo/data"
for dir in /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
{
  nvidia-smi --query-gpu=name,driver_version,power.limit,temperature.gpu --format=csv,noheader
  echo "== gpu tests (unfused path)"
  timeout 240 "$bin/exec_cuda_tests" \
    --gtest_filter='CudaGemm.*:CudaBackend.RunsUnfused*:CudaBackend.RunsEveryOp*:CudaBackend.IsRegistered' \
    >"$work/gpu_tests.log" 2>&1
  echo "exit $?"
  grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) ' "$work/gpu_tests.log"
  for seq in 2048 8192; do
    for attention in fused unfused; do
      name="llama3-8b-4l-seq$seq-$attention"
      timeout 200 "$bin/calo" bench --backend cuda --model llama3-8b --layers 4 --seq "$seq" --gbs 1 \
        --attention "$attention" --warmup 3 --steps 10 --json --out "$work/runs/$name" \
        >"$work/$name.json" 2>"$work/$name.log"
      echo "== $name: exit $?"
      python3 - "$work/$name.json" <<'EOF'
import json, sys
try:
    text = open(sys.argv[1]).read()
    report = json.loads(text[text.rfind("\n{") + 1 if "\n{" in text else text.find("{"):])
    step = report["step_time_s"]
    print(f"   step mean {step['mean']:.4f} s (min {min(step['all']):.4f}), mfu {report.get('mfu', 0):.3f}, "
          f"tokens/s {report.get('tokens_per_s', 0):.0f}, attention {report.get('device', {}).get('attention_impl')}")
except Exception as error:  # the log says why
    print(f"   no report: {error}")
EOF
    done
  done
} 2>&1 | tee "$summary"
tar -czf "$out/attention_kinds.tar.gz" -C "$work" .
