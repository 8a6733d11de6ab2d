#!/usr/bin/env bash
# The collective sweep at every group size one host allows, for fitting (and holding out) how collective time
# moves with the members: bench/gpu/collective_sweep.py over 4, 3 and 2 ranks (GPUs 0..n-1), NCCL's own protocol
# choice, the four collectives. Usage (on a host with >= 4 GPUs): bench/gpu/group_size_sweep.sh OUT_DIR [SIZES]
# SIZES: the group sizes, largest first (default "4 3 2"). Writes OUT_DIR/group-sizes.tar.gz: n<N>/ (rank<R>.json.gz,
# sizes.json, nccl.log.gz) per group size, topo.txt and smi.txt. docs/SIMULATOR.md "Collective time by group size".
set -euo pipefail
out=${1:?usage: group_size_sweep.sh OUT_DIR [SIZES]}
sizes=${2:-"4 3 2"}
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/gpu/sweep_env.sh
source "$here/sweep_env.sh"
port=29561
for n in $sizes; do
  mkdir -p "$work/n$n"
  started=$SECONDS
  python3 "$here/collective_sweep.py" --gpus "$n" --out "$work/n$n" --port "$port" \
    --kinds all_reduce,all_gather,reduce_scatter,all_to_all >"$work/n$n/nccl.log" 2>&1 ||
    { tail -20 "$work/n$n/nccl.log"; exit 1; }
  echo "group_size_sweep.sh: $n ranks took $((SECONDS - started)) s: $(grep -m1 "^collective_sweep:" "$work/n$n/nccl.log" || tail -1 "$work/n$n/nccl.log")"
  gzip -9 "$work/n$n/nccl.log"
  port=$((port + 1))
done
sweep_gpu_state
mkdir -p "$out"
tar -C "$work" -czf "$out/group-sizes.tar.gz" .
ls -la "$out"
