#!/usr/bin/env bash
# `calo bench --memory real` on the GPU host (issue 39 item 2): Llama3-8B slices at 8K tokens held as training
# holds them, on one GPU and on two, each run's held peak, device memory in use and the model's figure, and
# the same layout with `--memory model` for the step-time cost of the holds.
#
#   1. here (build machine), repo root: strip + xz build-exec-cuda/calo and its CUDA backend module
#      libcalo_exec_cuda.so into .carry/calo-bin (`for f in calo libcalo_exec_cuda.so; do strip -o /tmp/$f
#      build-exec-cuda/$f && xz -T2 -c /tmp/$f > .carry/calo-bin/$f.xz; done`)
#   2. GPU host, repo root (carry .carry/calo-bin):  bash bench/memory_real/run.sh [BIN_DIR]
#      writes $OUT/memory_real.tgz (NAME.json, NAME.err per run, nvidia-smi), $OUT/memory_real.txt (table) and
#      $OUT/memory_real.jsonl (the lines of tests/fixtures/memory-real-h200x2, by bench/memory_real/fixture.py).
#      MEMORY_REAL_CASES="l8 l11-carve ..." runs only the named cases (default: every one).
#      The *-carve cases (H100, 2026-12-06) are layouts the model admits whose holdings fit the GPU but not
#      beside the bench's operand buffers: --memory real carves the operands out of the holds (docs/EXECUTION.md).
set -uo pipefail
repo="$PWD"
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
# shellcheck source=bench/gpu/calo_env.sh
source "$repo/bench/gpu/calo_env.sh"
bin="$(unpack_carry "$(cd "${1:-.carry/calo-bin}" && pwd)" calo-bin)"
calo="$bin/calo"
out="${OUT:-$PWD/memory-real-out}"
work="$(mktemp -d /tmp/memory-real.XXXXXX)"
mkdir -p "$out"
calo_env "$repo" "$calo" 120
gpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
nvidia-smi -L >"$work/gpus.txt" 2>&1

# run NAME GPUS ARGS...: one bench run (skipped with its reason when the host has fewer GPUs).
run() {
  local name="$1" need="$2"
  shift 2
  if [ -n "${MEMORY_REAL_CASES:-}" ] && [[ " $MEMORY_REAL_CASES " != *" $name "* ]]; then return; fi
  if [ "$gpus" -lt "$need" ]; then
    echo "$name: skipped, needs $need GPUs, this host has $gpus" | tee -a "$work/status.txt"
    return
  fi
  local visible
  visible="$(seq -s, 0 $((need - 1)))"
  CUDA_VISIBLE_DEVICES="$visible" timeout 300 "$calo" bench --model llama3-8b --backend cuda --seq 8192 \
    --steps 3 --warmup 1 --no-progress --json --out "$work/runs/$name" "$@" \
    >"$work/$name.json" 2>"$work/$name.err"
  echo "$name: exit $? ($*)" | tee -a "$work/status.txt"
}

run l8-model 1 --mbs 1 --layers 8 --gbs 8 --memory model
run l8 1 --mbs 1 --layers 8 --gbs 8 --memory real
run l8-full 1 --mbs 1 --layers 8 --gbs 8 --recompute full --memory real
run l8-mbs2-full 1 --layers 8 --mbs 2 --gbs 8 --recompute full --memory real
run l16 1 --mbs 1 --layers 16 --gbs 4 --memory real
run l20-edge 1 --mbs 1 --layers 20 --gbs 4 --memory real
run l24-edge 1 --mbs 1 --layers 24 --gbs 4 --memory real
run l24-edge-model 1 --mbs 1 --layers 24 --gbs 4 --memory model
run l28-full-edge 1 --mbs 1 --layers 28 --gbs 4 --recompute full --memory real
run l10-carve 1 --mbs 1 --layers 10 --gbs 4 --memory real
run l11-carve 1 --mbs 1 --layers 11 --gbs 4 --memory real
run l11-carve-model 1 --mbs 1 --layers 11 --gbs 4 --memory model
run l15-full-carve 1 --mbs 1 --layers 15 --gbs 4 --recompute full --memory real
run l15-full-model 1 --mbs 1 --layers 15 --gbs 4 --recompute full --memory model
run pp2 2 --mbs 1 --layers 8 --pp 2 --gbs 8 --memory real
run fsdp2 2 --mbs 1 --layers 8 --dp 2 --zero 3 --overlap --gbs 8 --memory real
run zero2 2 --mbs 1 --layers 8 --dp 2 --zero 2 --overlap --gbs 8 --memory real
run fsdp2-keep 2 --mbs 1 --layers 8 --dp 2 --zero 3 --fsdp-reshard-after-forward off --gbs 8 --memory real

python3 - "$work" >"$out/memory_real.txt" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
gib = 1024 ** 3
print("| run | step s | rank | held peak GiB | model GiB | model error | device in use GiB | beyond held GiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for path in sorted(work.glob("*.json")):
    try:
        report = json.loads(path.read_text())
    except ValueError:
        print(f"| {path.stem} | failed: {(work / (path.stem + '.err')).read_text()[-300:].strip()} |")
        continue
    step = report["step_time_s"]["mean"]
    for row in report.get("memory_real", {}).get("ranks", [{}]):
        if not row:
            print(f"| {path.stem} | {step:.4f} | | | | | | |")
            continue
        held, used = row["held_peak_bytes"] / gib, row["device_used_bytes"] / gib
        print(f"| {path.stem} | {step:.4f} | {row['rank']} | {held:.2f} | {row['model_bytes'] / gib:.2f} | "
              f"{row['model_error'] * 100:+.1f} % | {used:.2f} | {used - held:.2f} |")
PY
cat "$out/memory_real.txt"
python3 "$repo/bench/memory_real/fixture.py" "$work" >"$out/memory_real.jsonl"
tar -C "$work" -czf "$out/memory_real.tgz" --exclude='*.db-wal' --exclude='run.db' .
