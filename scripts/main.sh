#!/usr/bin/env bash
# The main job: install, build, and tell one story about this machine, ending in an HTML report.
#  1. Measure: `calo bench` of one graph (model + layout) on what is here — the GPUs (a 4-layer Llama3-8B slice
#     sized to them) or, without a GPU, the CPU backend (tiny-dense over one MPI rank per core, at most 4:
#     TP2-PP2 on 4 cores, TP2 on 2).
#  2. Simulate the same graph (same model file, same layout flags) on a cluster file; the report puts the two
#     side by side as simulated vs measured with an error column (docs/REPORTS.md).
#     The cluster file is calibrated from the bench of step 1 (`calo calibrate`, per-op spans from --trace-ops):
#     the CPU host's cpu-host file, or the GPU's preset; where the GPU has no preset of its model, the stock
#     file is used and the error says how far stock is off.
#  3. Project: `calo sim` of a large cluster (Llama3-70B TP8-PP4-DP2 on 64 H200), a separate section of the
#     report ("Projection"), never compared with the measurement (another graph).
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

# The graph of this story: model file + layout flags, shared by the bench and its simulation.
if ((gpus > 0)); then
  tp=1
  for candidate in 8 4 2; do if ((gpus % candidate == 0 && candidate <= gpus)); then tp=$candidate; break; fi; done
  dp=$((gpus / tp))
  # A 4-layer slice of Llama3-8B (same layer shapes), as a model file so bench and sim run the same graph.
  sed -e 's/^num_layers: .*/num_layers: 4/' -e 's/^name: .*/name: llama3-8b-4layers/' data/models/llama3-8b.yaml \
    > "$root/llama3-8b-4layers.yaml"
  model="$root/llama3-8b-4layers.yaml"
  layout=(--tp "$tp" --pp 1 --dp "$dp" --mbs 1 --gbs $((8 * dp)) --seq 4096)
  steps=10 warmup=3
  bench=(--backend cuda --nproc "$gpus" --trace-ops)
  what="Llama3-8B 4-layer slice, TP$tp-DP$dp on $gpus GPU(s)"
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case "$gpu_name" in
    *H200*) stock_cluster=h200x4-nvswitch ;;
    *) stock_cluster=h100-hgx ;;
  esac
else
  # One MPI rank per core at most: ranks sharing a core time-slice, and the step measured is the scheduler's,
  # not the graph's (4 ranks on 2 cores measured 61 % slower than the calibrated simulation of the same graph).
  cores=$(nproc)
  model=tiny-dense
  if ((cores >= 4)); then
    layout=(--tp 2 --pp 2 --dp 1 --mbs 1 --gbs 8 --seq 128) ranks=4 shape=TP2-PP2
  elif ((cores >= 2)); then
    layout=(--tp 2 --pp 1 --dp 1 --mbs 1 --gbs 8 --seq 128) ranks=2 shape=TP2
  else
    layout=(--tp 1 --pp 1 --dp 1 --mbs 1 --gbs 8 --seq 128) ranks=1 shape=TP1
  fi
  steps=5 warmup=2
  bench=(--backend cpu --nproc "$ranks" --check --trace-ops)
  what="tiny-dense $shape on $ranks MPI rank(s) of $cores core(s), CPU backend (no GPU found)"
  stock_cluster=cpu-host
fi

echo "== 1. measure: calo bench, $what =="
"$calo" bench --model "$model" "${layout[@]}" "${bench[@]}" --steps "$steps" --warmup "$warmup" --out "$root/bench"
runs+=("$root/bench")
echo

cluster=$stock_cluster
echo "== 2a. calibrate: fit cluster '$stock_cluster' to the bench (docs/SIMULATOR.md, Calibration) =="
if "$calo" calibrate "$root/bench" --cluster "$stock_cluster" --out "$root/$stock_cluster-calibrated.yaml"; then
  cluster="$root/$stock_cluster-calibrated.yaml"
else
  echo "calo: calibration did not fit this bench (see above); simulating on the stock '$stock_cluster' instead"
fi
echo
echo "== 2. simulate the same graph on cluster '$cluster' =="
# The bench's twin: its model, layout, warm-up and measured steps and start temperature (comparisons skip the
# warm-up; compare rates every figure against the bench).
"$calo" sim --from "$root/bench" --cluster "$cluster" --out "$root/sim"
runs+=("$root/sim")
echo

echo "== 3. projection: Llama3-70B TP8-PP4-DP2 on 64 H200 (8 HGX nodes), 20 iterations with power and heat =="
"$calo" sim --model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128 --cluster h200-hgx --gpus 64 --steps 20 \
  --out "$root/projection-llama3-70b"
runs+=("$root/projection-llama3-70b")
echo

echo "== report =="
"$calo" report "${runs[@]}" --title "Calorimeter: measured, simulated, projected" --out "$root/report.html"
echo "report: $root/report.html"
