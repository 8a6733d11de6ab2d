#!/usr/bin/env bash
# One device call's worth of collective data: NCCL's own protocol choice over the size sweep, then each
# protocol forced (NCCL_PROTO=LL, LL128, Simple) so that each one's time-by-size line is measured on its own.
# Usage (on a host with >= 2 GPUs): bench/gpu/collective_sweep.sh OUT_DIR [GPUS]
# Writes OUT_DIR/collectives.tar.gz: auto/ ll/ ll128/ simple/, each rank<N>.json.gz + sizes.json + nccl.log.gz,
# and topo.txt (nvidia-smi topo -m) and smi.txt.
set -euo pipefail
out=${1:?usage: collective_sweep.sh OUT_DIR [GPUS]}
gpus=${2:-2}
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=bench/gpu/sweep_env.sh
source "$here/sweep_env.sh"
run() {
  local name=$1 proto=$2 port=$3
  mkdir -p "$work/$name"
  local started=$SECONDS
  if [ "$proto" = auto ]; then
    env -u NCCL_PROTO python3 "$here/collective_sweep.py" --gpus "$gpus" --out "$work/$name" --port "$port" \
      >"$work/$name/nccl.log" 2>&1
  else
    NCCL_PROTO=$proto python3 "$here/collective_sweep.py" --gpus "$gpus" --out "$work/$name" --port "$port" \
      --reps 3 >"$work/$name/nccl.log" 2>&1
  fi
  echo "collective_sweep.sh: $name ($proto) took $((SECONDS - started)) s: $(grep -m1 "^collective_sweep:" "$work/$name/nccl.log" || tail -1 "$work/$name/nccl.log")"
  gzip -9 "$work/$name/nccl.log"
}
run auto auto 29541
run ll LL 29542
run ll128 LL128 29543
run simple Simple 29544
mkdir -p "$out"
tar -C "$work" -czf "$out/collectives.tar.gz" .
ls -la "$out"
