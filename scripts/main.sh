#!/usr/bin/env bash
# The main job: install, build, and characterize what this machine has, ending in an HTML report.
#  - GPUs present (and a CUDA build): `calo bench` of a Llama3-8B-shaped layout sized to the GPUs, recorded.
#  - No GPU: the CPU backend runs a tiny model over 4 MPI ranks (TP2-PP2), and `calo sim` projects
#    Llama3-70B on a 64-GPU H200 cluster (TP8-PP4-DP2) and the measured 4xH200 host; then `calo report`.
# Runs land in runs/main-<time>/; the report path is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
calo=${CALO_BUILD_DIR:-build}/calo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stamp=$(date +%Y%m%d-%H%M%S)
root="runs/main-$stamp"
mkdir -p "$root"
runs=()

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi

echo "== devices =="
"$calo" devices || true
echo

if ((gpus > 0)); then
  tp=1
  for candidate in 8 4 2; do if ((gpus % candidate == 0 && candidate <= gpus)); then tp=$candidate; break; fi; done
  dp=$((gpus / tp))
  # A 4-layer slice of Llama3-8B (same layer shapes), as a model file so bench and sim run the same graph.
  sed -e 's/^num_layers: .*/num_layers: 4/' -e 's/^name: .*/name: llama3-8b-4layers/' data/models/llama3-8b.yaml \
    > "$root/llama3-8b-4layers.yaml"
  echo "== calo bench: Llama3-8B 4-layer slice, TP$tp-DP$dp on $gpus GPU(s) =="
  "$calo" bench --model "$root/llama3-8b-4layers.yaml" --tp "$tp" --dp "$dp" --gbs $((8 * dp)) --nproc "$gpus" \
    --backend cuda --steps 10 --warmup 3 --out "$root/bench-gpu"
  runs+=("$root/bench-gpu")
  echo
  echo "== calo sim: the same layout on the modeled 4xH200 host =="
  "$calo" sim --model "$root/llama3-8b-4layers.yaml" --tp "$tp" --dp "$dp" --gbs $((8 * dp)) --cluster h200x4-nvswitch \
    --gpus "$gpus" --steps 10 --out "$root/sim-gpu" || true
  [ -d "$root/sim-gpu" ] && runs+=("$root/sim-gpu")
else
  echo "== no GPU found: CPU backend, tiny-dense TP2-PP2 on 4 MPI ranks =="
  "$calo" bench --model tiny-dense --tp 2 --pp 2 --gbs 8 --nproc 4 --backend cpu --steps 5 --warmup 2 --check \
    --out "$root/bench-cpu"
  runs+=("$root/bench-cpu")
  echo
  echo "== calo sim: Llama3-70B TP8-PP4-DP2 on 64 H200 (8 HGX nodes), 20 iterations with power and heat =="
  "$calo" sim --model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128 --cluster h200-hgx --gpus 64 --steps 20 \
    --out "$root/sim-llama3-70b"
  runs+=("$root/sim-llama3-70b")
fi
echo
echo "== report =="
"$calo" report "${runs[@]}" --out "$root/report.html"
echo "report: $root/report.html"
