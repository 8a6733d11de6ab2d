#!/usr/bin/env bash
# What `calo sim` stores and what `calo report` draws at scale (issue 40 item 5): a 64-GPU run stored with each
# --op-spans choice (wall time, run directory size, op spans kept), then GPT3-175B on 8192 H200 stored and
# reported (wall time, report size). Prints '#' configuration, a table, and a headline line.
# Usage: bench/sim_store/run.sh [BUILD_DIR]   (default build; runs land under a temporary directory)
set -euo pipefail
calo=${1:-build}/calo
work=$(mktemp -d /tmp/calo-bench-sim-store.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "# host: $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); calo: $calo"
seconds() { local start=$1; echo "scale=2; ($(date +%s%N) - start) / 1000000000" | sed "s/start/$start/" | bc; }
echo "| case | wall s | stored MB | op spans (GPUs) |"
echo "| --- | --- | --- | --- |"
for mode in all distinct none; do
  start=$(date +%s%N)
  "$calo" sim --model llama3-70b --cluster h100-hgx --gpus 64 --tp 8 --pp 4 --gbs 512 --steps 3 \
    --op-spans "$mode" --out "$work/s64-$mode" > /dev/null
  wall=$(seconds "$start")
  size=$(du -sm "$work/s64-$mode" | cut -f1)
  spans=$(sqlite3 "$work/s64-$mode/run.db" "select count(*) || ' (' || count(distinct rank) || ')' from span where kind = 'op'")
  echo "| Llama3-70B TP8-PP4-DP2, 64 H100, 3 steps, --op-spans $mode | $wall | $size | $spans |"
  rm -rf "$work/s64-$mode"
done
start=$(date +%s%N)
"$calo" sim --model gpt3-175b --cluster h200-hgx --gpus 8192 --tp 8 --pp 16 --gbs 1536 --steps 3 \
  --out "$work/s8192" > /dev/null
sim_wall=$(seconds "$start")
size=$(du -sm "$work/s8192" | cut -f1)
echo "| GPT3-175B TP8-PP16-DP64, 8192 H200, 3 steps (default) | $sim_wall | $size | - |"
start=$(date +%s%N)
"$calo" report "$work/s8192" --out "$work/report.html" > /dev/null
report_wall=$(seconds "$start")
report_kib=$(( $(stat -c %s "$work/report.html") / 1024 ))
echo "| calo report of that run | $report_wall | ${report_kib} KiB HTML | - |"
echo "headline: 8192-GPU report ${report_kib} KiB in ${report_wall} s; 64-GPU sim stored in the table above"
