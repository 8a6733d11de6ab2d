#!/usr/bin/env bash
# Wall time of `calo plan` on the spaces of docs/benchmarks/plan-search.md on a host with
# many cores (the lent GPU host: 16), beside its own estimate (issue 41: a search's time known before it runs).
# Stage the binaries first (bench/plan_search/stage.sh), then on that host from the repo root:
#   bench/plan_search/device_times.sh OUT_DIR
set -u
out="${1:?usage: device_times.sh OUT_DIR}"
bin=/tmp/plan-bin
mkdir -p "$bin"
xz -dc .carry/plan-bin/calo.xz >"$bin/calo"
chmod +x "$bin/calo"
source bench/gpu/calo_env.sh
calo_env "$PWD" "$bin/calo" 60
run() {
  local started ended rc
  started=$(date +%s%N)
  "$@" >/tmp/plan-run.txt 2>&1
  rc=$?
  ended=$(date +%s%N)
  echo "== rc=$rc wall_ms=$(((ended - started) / 1000000)) :: $*"
  grep -E '^# [0-9]|pruned search|error' /tmp/plan-run.txt | head -8
}
{
  nproc
  lscpu | grep -E "Model name|^CPU\(s\)"
  uptime
  run $bin/calo plan --model llama3-70b --cluster h100-hgx --gpus 64 --gbs 512 --top 5 -q
  run $bin/calo plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 4,8 --mbs 1 --top 5 -q
  run $bin/calo plan --model mixtral-8x7b --cluster h100-hgx --gpus 64 --gbs 256 --top 5 -q
  run $bin/calo plan --model gpt3-175b --cluster h200-hgx --gpus 8192 --gbs 1536 --top 10 -q
  run $bin/calo plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3 -q
  # Two threads of the same host: the 2-core VM's thread count on cores nothing else shares.
  run $bin/calo plan --model llama3-70b --cluster h100-hgx --gpus 64 --gbs 512 --top 5 -q -j 2 --max-minutes 0
  run $bin/calo plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 4,8 --mbs 1 --top 5 -q -j 2 --max-minutes 0
  run $bin/calo plan --model mixtral-8x7b --cluster h100-hgx --gpus 64 --gbs 256 --top 5 -q -j 2 --max-minutes 0
} >"$out/plan_device.txt" 2>&1
