#!/usr/bin/env bash
# CUDA execution backend on the GPU host (exec-cuda). Two steps:
#   1. here (build machine):  bench/gpu/exec_run.sh stage [BUILD_DIR]     (default build-exec-cuda)
#      builds calo, its CUDA backend module libcalo_exec_cuda.so (calo opens it from its own directory),
#      exec_gpu_bench, exec_cuda_tests, exec_cuda_multigpu_tests and copies them into .carry/exec-cuda-bin
#      (git-ignored; carry it with the run), stripped and xz-compressed (~100 MB stripped, ~12 MB compressed;
#      the run unpacks them into /tmp, side by side).
#   2. GPU host (repo root):  bench/gpu/exec_run.sh [BIN_DIR]             (default .carry/exec-cuda-bin)
#      runs, most important first, each under its own timeout and within ~7.5 minutes in total; a failing
#      piece is logged and the rest continue:
#        calo bench 1 GPU Llama3-8B 4 layers seq 8192 (cuDNN attention, then CALO_ATTENTION=fallback) |
#        PyTorch eager reference (torch_reference.py) | exec_gpu_bench 1 GPU (GEMM ops vs cuBLASLt alone,
#        attention cuDNN vs fallback, fwd+bwd) | calo bench 4 GPUs: Llama3-8B TP2-PP2,
#        Llama3-70B slice TP4, Mixtral-8x7B slice EP4 | exec_gpu_bench 4 GPUs TP4 (collectives vs NCCL loop)
#        | cp_attention_bench 1 GPU (ring-step attention shapes vs sim and cp = 1) | long-context calo bench
#        steps 1 GPU (EXEC_LONG_SEQS) | gpu tests | multigpu tests
#      and writes $OUT/exec_cuda_summary.txt (the figures) and $OUT/exec_cuda_logs.tar.gz (every log/JSON).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

if [ "${1:-}" = "stage" ]; then
  set -e
  build="${2:-$repo/build-exec-cuda}"
  export CCACHE_NOHASHDIR=1
  cmake -S "$repo" -B "$build" -G Ninja -DCALO_BUILD_BENCH=ON -DCALO_CUDA=ON >/dev/null
  targets="calo exec_gpu_bench cp_attention_bench"
  for extra in exec_cuda_tests exec_cuda_multigpu_tests; do
    if ninja -C "$build" -t targets all 2>/dev/null | grep -q "^$extra:"; then targets="$targets $extra"; fi
  done
  ninja -C "$build" -j"${JOBS:-2}" $targets
  mkdir -p "$repo/.carry/exec-cuda-bin"
  for binary in calo libcalo_exec_cuda.so exec_gpu_bench cp_attention_bench; do
    cp "$build/$binary" "$repo/.carry/exec-cuda-bin/"
  done
  for test in exec_cuda_tests exec_cuda_multigpu_tests; do
    found="$(find "$build" -name "$test" -type f -perm -u+x | head -1)"
    [ -n "$found" ] && cp "$found" "$repo/.carry/exec-cuda-bin/"
  done
  strip "$repo/.carry/exec-cuda-bin/"* 2>/dev/null || true
  for binary in "$repo/.carry/exec-cuda-bin/"*; do
    case "$binary" in *.xz) ;; *) xz -T2 -6 -f "$binary" ;; esac
  done
  ls -la "$repo/.carry/exec-cuda-bin"
  size_mib=$(du -sm "$repo/.carry/exec-cuda-bin" | cut -f1)
  echo "carry size ${size_mib} MiB (limit 64 MiB for all carried paths together)"
  exit 0
fi

# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin="$(unpack_carry "$(cd "${1:-$repo/.carry/exec-cuda-bin}" && pwd)" exec-cuda-bin)"
out="${OUT:-$repo/exec-cuda-out}"
mkdir -p "$out"
logs="$(mktemp -d /tmp/exec-cuda-logs.XXXXXX)"
summary="$out/exec_cuda_summary.txt"
: >"$summary"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CALO_DATA_DIR="$repo/data" CALO_CUDA_SYNC_TIMEOUT_S=90
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-13.0/lib64 /usr/local/cuda-13.0/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
start_s=$SECONDS
budget_s=${EXEC_RUN_BUDGET_S:-450}

say() { echo "$*" | tee -a "$summary"; }
# run NAME TIMEOUT_S COMMAND...: logs to $logs/NAME.log; never stops the script.
run() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget_s - (SECONDS - start_s)))
  if [ "$left" -lt 20 ]; then say "SKIP $name: time budget used up"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  say "== $name: exit $rc after $((SECONDS - t0)) s (limit $limit s)"
  return 0
}
# figures NAME PATTERN: copies matching lines of a log into the summary.
figures() { grep -E "$2" "$logs/$1.log" 2>/dev/null | sed "s/^/   $1| /" | tee -a "$summary" >/dev/null; }
# bench_figures NAME: step time, MFU, TFLOP/s, power, temperature, energy and check from `calo bench --json`.
bench_figures() {
  python3 - "$logs/$1.log" "$1" <<'PY' 2>/dev/null | tee -a "$summary"
import json, sys
text = open(sys.argv[1]).read()
start = text.find("{")
if start < 0:
    print(f"   {sys.argv[2]}| no JSON report"); sys.exit(0)
report = json.JSONDecoder().raw_decode(text[start:])[0]
def flat(prefix, value, out):
    if isinstance(value, dict):
        for key, inner in value.items(): flat(f"{prefix}.{key}" if prefix else key, inner, out)
    elif not isinstance(value, list):
        out[prefix] = value
values = {}
flat("", report, values)
keys = [k for k in values if any(word in k for word in ("step_time_s.mean", "step_time_s.p50", "step_time_s.p99",
        "mfu", "tflops", "power", "temp", "energy", "throttle", "tokens_per_s", "slice", "check.wrong",
        "op_counts_match", "device.name", "attention_impl"))]
print(f"   {sys.argv[2]}| " + ", ".join(f"{k}={values[k]}" for k in keys))
PY
}

say "# exec_run.sh $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi -L >"$logs/nvidia-smi.log" 2>&1; nvidia-smi >>"$logs/nvidia-smi.log" 2>&1
say "# $(nvidia-smi -L 2>/dev/null | head -1) x $(nvidia-smi -L 2>/dev/null | wc -l)"
ldd "$bin/calo" >"$logs/ldd.log" 2>&1
grep -q "not found" "$logs/ldd.log" && say "WARNING missing shared libraries: $(grep 'not found' "$logs/ldd.log" | tr -s ' \t' ' ')"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
bench_common=(bench --backend cuda --no-progress --json)

# EXEC_PARTS picks what runs (default all): "1gpu" (calo vs PyTorch, GEMMs vs cuBLASLt), "4gpu", "cp" (context-
# parallel attention shapes on one GPU), "long" (long-context calo bench steps), "tests".
parts=" ${EXEC_PARTS:-1gpu 4gpu cp long tests} "
has_part() { [[ "$parts" == *" $1 "* ]]; }

# 1. One GPU: calo vs PyTorch eager, Llama3-8B 4 layers, seq 8192, mbs 1.
if has_part 1gpu; then
run calo_1gpu_llama8b_4l 120 "$bin/calo" "${bench_common[@]}" --model llama3-8b --layers 4 --seq 8192 --mbs 1 \
  --gbs 1 --steps 5 --warmup 2 --out /tmp/exec-cuda-runs/1gpu
bench_figures calo_1gpu_llama8b_4l
run calo_1gpu_llama8b_4l_fallback 120 env CALO_ATTENTION=fallback "$bin/calo" "${bench_common[@]}" --model llama3-8b \
  --layers 4 --seq 8192 --mbs 1 --gbs 1 --steps 5 --warmup 2 --out /tmp/exec-cuda-runs/1gpu-fallback
bench_figures calo_1gpu_llama8b_4l_fallback
run torch_reference 150 python3 "$repo/bench/exec_gpu/torch_reference.py" --layers 4 --seq 8192 --steps 8 \
  --warmup 3 --json "$logs/torch_reference.json"
figures torch_reference '^(#|torch_|headline)'
run exec_gpu_bench_1gpu 150 "$bin/exec_gpu_bench" --model llama3-8b --layers 4 --seq 8192 --gbs 1 --steps 3
figures exec_gpu_bench_1gpu '^(step_ms|gemm_throughput|attention_ms_per_step|# sm clock| *b=.*(fwd|bwd) |headline)'
fi

# 2. Four GPUs.
if ! has_part 4gpu; then
  say "SKIP 4-GPU runs: not in EXEC_PARTS"
elif [ "$gpus" -ge 4 ]; then
  run calo_4gpu_llama8b_tp2pp2 120 "$bin/calo" "${bench_common[@]}" --model llama3-8b --tp 2 --pp 2 --gbs 8 \
    --seq 8192 --steps 6 --warmup 1 --nproc 4 --out /tmp/exec-cuda-runs/8b
  bench_figures calo_4gpu_llama8b_tp2pp2
  run calo_4gpu_llama70b_slice_tp4 120 "$bin/calo" "${bench_common[@]}" --model llama3-70b --tp 4 --layers 4 \
    --gbs 1 --seq 8192 --steps 40 --warmup 2 --nproc 4 --out /tmp/exec-cuda-runs/70b
  bench_figures calo_4gpu_llama70b_slice_tp4
  run calo_4gpu_mixtral_slice_ep4 120 "$bin/calo" "${bench_common[@]}" --model mixtral-8x7b --dp 4 --ep 4 \
    --layers 4 --gbs 4 --seq 4096 --steps 40 --warmup 2 --nproc 4 --out /tmp/exec-cuda-runs/mixtral
  bench_figures calo_4gpu_mixtral_slice_ep4
  run exec_gpu_bench_4gpu_tp4 120 "$bin/exec_gpu_bench" --model llama3-70b --tp 4 --layers 2 --gbs 1 --seq 8192 \
    --steps 3 --nproc 4
  figures exec_gpu_bench_4gpu_tp4 '^(step_ms|gemm_throughput|collective_busbw|headline)'
  # The three 4-GPU runs in one report (real telemetry, step spans, per-GPU heatmap): brought back as is.
  runs=()
  for run_dir in /tmp/exec-cuda-runs/8b /tmp/exec-cuda-runs/70b /tmp/exec-cuda-runs/mixtral; do
    [ -f "$run_dir/run.db" ] && runs+=("$run_dir")
  done
  if [ "${#runs[@]}" -gt 0 ]; then
    run report_4gpu 60 "$bin/calo" report "${runs[@]}" --out "$out/report_4gpu.html"
  fi
else
  say "SKIP 4-GPU runs: $gpus GPU(s) visible"
fi

# 3. Context parallel on one GPU: every ring-step / gathered-chunk attention shape of Llama3-8B at 32K and 128K
# tokens through cuDNN, against the simulator and against cp = 1's attention / cp (the ring's NCCL side needs
# several GPUs: the multigpu tests).
if has_part cp && [ -x "$bin/cp_attention_bench" ]; then
  run cp_attention_32k_cp4 90 "$bin/cp_attention_bench" --model llama3-8b --seq 32768 --cp 4
  figures cp_attention_32k_cp4 '^(#|cp|slowest)'
  run cp_attention_32k_cp4_allgather 90 "$bin/cp_attention_bench" --model llama3-8b --seq 32768 --cp 4 \
    --cp-comm allgather
  figures cp_attention_32k_cp4_allgather '^(#|cp|slowest)'
  run cp_attention_128k_cp8 150 "$bin/cp_attention_bench" --model llama3-8b --seq 131072 --cp 8 --iters 3
  figures cp_attention_128k_cp8 '^(# cp|slowest)'
fi

# 3b. Long-context steps on one GPU (attention-dominated), with per-op spans, for `calo sim` / `calo calibrate`
# on the build machine: Llama3-8B 2 layers at EXEC_LONG_SEQS tokens (default 16K and 32K). The run directories
# come back packed in long_context_runs.tar.gz.
if has_part long; then
  for seq in ${EXEC_LONG_SEQS:-16384 32768}; do
    run "calo_1gpu_llama8b_2l_seq$seq" 150 "$bin/calo" "${bench_common[@]}" --model llama3-8b --layers 2 \
      --seq "$seq" --mbs 1 --gbs 1 --steps 6 --warmup 2 --trace-ops --out "/tmp/exec-cuda-runs/long-$seq"
    bench_figures "calo_1gpu_llama8b_2l_seq$seq"
  done
  (cd /tmp/exec-cuda-runs && tar -czf "$out/long_context_runs.tar.gz" long-* 2>/dev/null)
fi

# 4. Tests.
has_part tests && [ -x "$bin/exec_cuda_tests" ] && run gpu_tests 120 "$bin/exec_cuda_tests"
figures gpu_tests '^\[  (PASSED|FAILED|SKIPPED) '
has_part tests && [ -x "$bin/exec_cuda_multigpu_tests" ] && run multigpu_tests 200 env CALO_EXECUTABLE="$bin/calo" \
  "$bin/exec_cuda_multigpu_tests"
figures multigpu_tests '^\[  (PASSED|FAILED|SKIPPED) '

# Ratio calo fwd+bwd vs PyTorch, from the two logs.
calo_fb=$(grep -oE 'fwd_bwd_ms [0-9.]+' "$logs/exec_gpu_bench_1gpu.log" 2>/dev/null | awk '{print $2}')
torch_fb=$(grep -oE 'torch_fwd_bwd_ms [0-9.]+' "$logs/torch_reference.log" 2>/dev/null | awk '{print $2}')
if [ -n "$calo_fb" ] && [ -n "$torch_fb" ]; then
  say "calo fwd+bwd ${calo_fb} ms vs PyTorch eager ${torch_fb} ms: $(awk -v a="$calo_fb" -v b="$torch_fb" \
    'BEGIN{printf "%+.1f %%", 100*(a-b)/b}') (target within +-15 %)"
fi
say "# total $((SECONDS - start_s)) s"
tar -czf "$out/exec_cuda_logs.tar.gz" -C "$logs" . 2>/dev/null
ls -la "$out"
