#!/usr/bin/env bash
# The main job: install, build, and tell one story about this machine, ending in an HTML report and a
# five-line summary.
#  1. Measure: `calo bench` of one graph (model + layout) on what is here — the GPUs (a 4-layer Llama3-8B slice
#     sized to them) or, without a GPU, the CPU backend (tiny-dense over one MPI rank per core, at most 4:
#     TP2-PP2 on 4 cores, TP2 on 2) — and of a second shape of it held out of the calibration: the same model
#     and layout at another sequence length (4x on the CPU, half on GPUs), another share of attention in
#     the step.
#  2. Calibrate the cluster file on the first bench alone (`calo calibrate`, per-op spans from --trace-ops):
#     the CPU host's cpu-host file, or the GPU's preset; where the calibration does not fit, the stock file is
#     used and the error says how far stock is off.
#     Simulate the held-out bench on it (`calo sim --from`): the report puts the two side by side as
#     simulated vs measured with an error column (docs/REPORTS.md), and its verdict leads with that error,
#     out-of-sample: the simulator never saw that run.
#  3. Project: `calo sim` of a large cluster (Llama3-70B TP8-PP4-DP2 on 64 H200), a separate section of the
#     report ("Projection"), never compared with the measurement (another graph).
# Runs land in runs/main-<time>/; the log ends with the summary (figures from `calo compare --json`, also kept
# as compare.json there).
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

# The graph of this story: model file + layout flags, shared by the bench and its simulation; the held-out
# shape differs from it in the sequence length alone.
if ((gpus > 0)); then
  tp=1
  for candidate in 8 4 2; do if ((gpus % candidate == 0 && candidate <= gpus)); then tp=$candidate; break; fi; done
  dp=$((gpus / tp))
  # A 4-layer slice of Llama3-8B (same layer shapes), as a model file so bench and sim run the same graph.
  sed -e 's/^num_layers: .*/num_layers: 4/' -e 's/^name: .*/name: llama3-8b-4layers/' data/models/llama3-8b.yaml \
    > "$root/llama3-8b-4layers.yaml"
  model="$root/llama3-8b-4layers.yaml"
  layout=(--tp "$tp" --pp 1 --dp "$dp" --mbs 1 --gbs $((8 * dp)))
  seq=4096 held_out_seq=2048
  steps=10 warmup=3
  bench=(--backend cuda --nproc "$gpus" --trace-ops)
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  what="Llama3-8B 4-layer slice, TP$tp-DP$dp on $gpus GPU(s)"
  device="$gpus x $gpu_name"
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
    layout=(--tp 2 --pp 2 --dp 1 --mbs 1 --gbs 8) ranks=4 shape=TP2-PP2
  elif ((cores >= 2)); then
    layout=(--tp 2 --pp 1 --dp 1 --mbs 1 --gbs 8) ranks=2 shape=TP2
  else
    layout=(--tp 1 --pp 1 --dp 1 --mbs 1 --gbs 8) ranks=1 shape=TP1
  fi
  seq=128 held_out_seq=512
  steps=5 warmup=2
  bench=(--backend cpu --nproc "$ranks" --check --trace-ops)
  what="tiny-dense $shape on $ranks MPI rank(s) of $cores core(s), CPU backend (no GPU found)"
  device="$ranks MPI rank(s) of $cores CPU core(s), CPU backend (no GPU found)"
  stock_cluster=cpu-host
fi

echo "== 1. measure: calo bench, $what, seq $seq =="
"$calo" bench --model "$model" "${layout[@]}" --seq "$seq" "${bench[@]}" --steps "$steps" --warmup "$warmup" \
  --out "$root/bench"
runs+=("$root/bench")
echo
echo "== 1b. measure the held-out shape: the same at seq $held_out_seq (not calibrated on) =="
"$calo" bench --model "$model" "${layout[@]}" --seq "$held_out_seq" "${bench[@]}" --steps "$steps" \
  --warmup "$warmup" --out "$root/held-out"
runs+=("$root/held-out")
echo

cluster=$stock_cluster
echo "== 2a. calibrate: fit cluster '$stock_cluster' to the first bench alone (docs/SIMULATOR.md, Calibration) =="
if "$calo" calibrate "$root/bench" --cluster "$stock_cluster" --out "$root/$stock_cluster-calibrated.yaml"; then
  cluster="$root/$stock_cluster-calibrated.yaml"
else
  echo "calo: calibration did not fit this bench (see above); simulating on the stock '$stock_cluster' instead"
fi
echo
echo "== 2. simulate the held-out shape (seq $held_out_seq) on cluster '$cluster': an out-of-sample check =="
# The held-out bench's twin: its model, layout, warm-up and measured steps and start temperature (comparisons
# skip the warm-up; compare rates every figure against the bench).
"$calo" sim --from "$root/held-out" --cluster "$cluster" --out "$root/sim-held-out"
runs+=("$root/sim-held-out")
echo

echo "== 3. projection: Llama3-70B TP8-PP4-DP2 on 64 H200 (8 HGX nodes), 20 iterations with power and heat =="
"$calo" sim --model llama3-70b --tp 8 --pp 4 --dp 2 --gbs 128 --cluster h200-hgx --gpus 64 --steps 20 \
  --out "$root/projection-llama3-70b"
runs+=("$root/projection-llama3-70b")
echo

echo "== report =="
"$calo" report "${runs[@]}" --title "Calorimeter: measured, simulated out-of-sample, projected" \
  --out "$root/report.html"
echo

# The summary, from `calo compare --json` of the same runs (run 1 bench, 2 held out, 3 its simulation,
# 4 the projection).
"$calo" compare "${runs[@]}" --json > "$root/compare.json"
echo "== summary =="
python3 - "$root/compare.json" "$device" "$root/report.html" <<'PY'
import json, sys
data, device, report = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
rows = {row["key"]: row for row in data["rows"]}
labels, info = data["runs"], data["run_info"]
bench, held_out, sim, projection = 0, 1, 2, 3
def value(key, run):
    return rows[key]["values"][run] if key in rows else None
def seconds(value_s):
    return "n/a" if value_s is None else f"{value_s * 1e3:.1f} ms" if value_s < 1 else f"{value_s:.2f} s"
def count(value):
    return "n/a" if value is None else f"{value:,.0f}"
def error(key):
    err = rows[key]["sim_error"][sim] if key in rows else None
    return None if err is None else f"{err * 100:+.1f} %"
energy = error("energy_per_step_j")
if info[sim]["placeholder_power"]:
    energy = "n/a (the CPU host's simulated power is a placeholder, and no power was measured here)"
elif energy is None:
    energy = "n/a (the held-out bench measured no power)"
power_gpu, power_all = value("power_gpu_mean_w", projection), value("power_total_mean_w", projection)
print(f"measured:   {labels[bench]} on {device}: step time {seconds(value('step_time_mean_s', bench))} (mean), "
      f"{count(value('tokens_per_s', bench))} tokens/s")
print(f"held out:   {labels[held_out]} ({info[held_out]['run_dir']}): measured "
      f"{seconds(value('step_time_p50_s', held_out))}, simulated {seconds(value('step_time_p50_s', sim))} "
      f"(median step), {info[sim].get('sample_text', 'no comparison')}")
print(f"error:      step time {error('step_time_p50_s') or 'n/a'}, energy per step {energy}")
print(f"projection: {labels[projection]}: step time {seconds(value('step_time_mean_s', projection))} (mean), "
      f"{count(value('tokens_per_s', projection))} tokens/s, "
      + ("power n/a" if power_gpu is None else f"{power_gpu:.0f} W mean per GPU ({power_all / 1e3:.1f} kW in all)"))
print(f"report:     {report}")
PY
