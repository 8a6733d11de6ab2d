#!/usr/bin/env bash
# The seven searches of docs/measurements/plan-search-log.md (2026-11-30; rerun in
# docs/benchmarks/plan-search.md) and the 4-cap energy search of issue 66: each one's wall time, chapter 1's, the estimate, the probe / whole-graph /
# simulated work. Usage: searches.sh CALO [THREADS]
set -euo pipefail
calo=$1
threads=${2:-0}
jobs=()
[ "$threads" -gt 0 ] && jobs=(-j "$threads")
run() {
  local name=$1
  shift
  "$calo" plan "$@" "${jobs[@]}" -q --json --max-minutes 0 | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$name', ' '.join(f'{k}={d[k]:.4g}' for k in ['wall_s', 'bound_wall_s', 'estimated_s', 'probe_ops', 'graph_ops', 'built_ops', 'simulated', 'pruned']), f\"ratio={d['wall_s'] / d['estimated_s']:.2f}\")"
}
run llama3-70b-64 --model llama3-70b --cluster h100-hgx --gpus 64 --gbs 512 --top 5
run llama3-70b-64-readme --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --top 5 --tp 4,8 --mbs 1
run gpt3-8192 --model gpt3-175b --cluster h200-hgx --gpus 8192 --gbs 1536 --top 10
run mixtral-64 --model mixtral-8x7b --cluster h100-hgx --gpus 64 --gbs 256 --top 5
run llama3-8b-16-caps --model llama3-8b --cluster h100-hgx-calibrated --gpus 16 --gbs 128 --top 10 --power-cap 400,550,700
run llama3-8b-8-energy --model llama3-8b --cluster h200-hgx-calibrated --gpus 8 --gbs 64 --top 10 --objective energy
run llama3-8b-8-pareto --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3 --objective pareto
# Issue 66 item 3: four power caps by energy (estimated 84 s, ran 9 min 57 s before simulation cost followed ops).
run llama3-70b-64-caps-energy --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --top 5 \
  --power-cap 400,500,600,700 --objective energy
