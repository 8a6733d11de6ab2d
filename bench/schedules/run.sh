#!/usr/bin/env bash
# Pipeline schedules measured and simulated (issue 68): 1F1B, interleaved (vpp 2), ZB-H1 and ZB-V (vpp 2) on one
# graph, tiny-dense with 8 layers at PP4 (one layer a virtual stage, two a stage; or PP2), 8 and 16 micro-batches,
# on the CPU backend with one MPI rank a stage (calo bench --check --trace-ops), then each bench re-simulated with
# `calo sim --from` on cpu-host calibrated to the 1F1B bench of 8 micro-batches (scripts/main.sh's CPU branch);
# then the simulator alone at Llama3-70B scale (TP8-PP4 on h100-hgx-calibrated, 32 and 64 micro-batches).
# Prints Markdown tables for docs/benchmarks/schedules.md; the figures are defined in docs/METRICS.md
# ("Pipeline bubble, measured and simulated", "Bubble energy").
# Usage: bench/schedules/run.sh [BUILD_DIR] [STEPS] [PP]   (default build, 7 measured steps after 2 warm-up, PP4;
# PP ranks, one per core at most for a fair measurement: 4 ranks on fewer cores time-slice and their compute spans
# stretch)
set -euo pipefail
cd "$(dirname "$0")/../.."
calo=$PWD/${1:-build}/calo
steps=${2:-7}
pp=${3:-4}
work=$(mktemp -d /tmp/calo-schedules.XXXXXX)
trap 'rm -rf "$work"' EXIT
sed -e 's/^num_layers: .*/num_layers: 8/' -e 's/^name: .*/name: tiny-dense-8/' data/models/tiny-dense.yaml \
  > "$work/tiny-dense-8.yaml"
model=$work/tiny-dense-8.yaml
schedules=("1f1b" "interleaved --vpp 2" "zb-h1" "zb-v --vpp 2")
echo "# PP$pp; host: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load" \
  "$(cut -d' ' -f1 /proc/loadavg); calo $(git rev-parse --short HEAD)"
for microbatches in 8 16; do
  for schedule in "${schedules[@]}"; do
    name=${schedule%% *}-$microbatches
    # shellcheck disable=SC2086  # the schedule's words are flags
    "$calo" bench --backend cpu --nproc "$pp" --model "$model" --pp "$pp" --gbs "$microbatches" --schedule $schedule \
      --steps "$steps" --warmup 2 --check --trace-ops --out "$work/bench-$name" > "$work/bench-$name.txt"
    grep -q '^#wrong: 0$' "$work/bench-$name.txt" || { cat "$work/bench-$name.txt"; exit 1; }
  done
done
"$calo" calibrate "$work/bench-1f1b-8" --cluster cpu-host --out "$work/cpu-host-calibrated.yaml" \
  > "$work/calibrate.txt"
for microbatches in 8 16; do
  for schedule in "${schedules[@]}"; do
    name=${schedule%% *}-$microbatches
    "$calo" sim --from "$work/bench-$name" --cluster "$work/cpu-host-calibrated.yaml" --json --no-store \
      > "$work/sim-$name.json"
  done
done
for microbatches in 32 64; do
  for schedule in "${schedules[@]}"; do
    name=${schedule%% *}-$microbatches
    # shellcheck disable=SC2086
    "$calo" sim --model llama3-70b --cluster h100-hgx-calibrated --tp 8 --pp 4 --gbs "$microbatches" \
      --schedule $schedule --json --no-store > "$work/sim70b-$name.json"
  done
done
python3 - "$work" <<'EOF'
import glob, json, sqlite3, sys

import yaml

work = sys.argv[1]
names = ["1f1b", "interleaved", "zb-h1", "zb-v"]


def measured(bench_dir):
    """The fastest measured step's time and bubble, 1 - compute-op span time per rank / step time (the fastest:
    the step least slowed by other work on a shared host)."""
    db = sqlite3.connect(glob.glob(f"{bench_dir}/**/run.db", recursive=True)[0])
    steps = db.execute("select step, t_begin_ns, t_end_ns from span where kind = 'step' and rank is null "
                       "and name = 'step'").fetchall()
    ranks = db.execute("select count(distinct rank) from span where kind = 'op'").fetchone()[0]
    step, begin, end = min(steps, key=lambda row: row[2] - row[1])
    busy_ns = db.execute("select sum(t_end_ns - t_begin_ns) from span where kind = 'op' and category = "
                         "'compute' and step = ?", (step,)).fetchone()[0]
    return (end - begin) / 1e9, 1 - busy_ns / (ranks * (end - begin))


def simulated(path):
    with open(path) as file:
        result = json.load(file)
    return result, 1 - result["compute_busy_s"] / result["per_step"][-1]["iteration_s"]


print("\n| micro-batches | schedule | measured step s | measured bubble | simulated step s | simulated bubble "
      "| simulator error |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for microbatches in (8, 16):
    for name in names:
        step_s, bubble = measured(f"{work}/bench-{name}-{microbatches}")
        sim, sim_bubble = simulated(f"{work}/sim-{name}-{microbatches}.json")
        print(f"| {microbatches} | {name} | {step_s:.3f} | {bubble:.1%} | {sim['iteration_s']:.3f} | "
              f"{sim_bubble:.1%} | {sim['iteration_s'] / step_s - 1:+.1%} |")
with open("data/clusters/h100-hgx-calibrated.yaml") as file:
    idle_w = yaml.safe_load(file)["gpu"]["idle_power_w"]
print(f"\n| Llama3-70B TP8-PP4, micro-batches | schedule | simulated step s | compute idle | bubble (wait) per GPU s "
      f"| bubble share | bubble energy kJ (GPUs x wait x {idle_w:.1f} W idle) | energy per step kJ |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for microbatches in (32, 64):
    for name in names:
        sim, idle = simulated(f"{work}/sim70b-{name}-{microbatches}.json")
        print(f"| {microbatches} | {name} | {sim['iteration_s']:.3f} | {idle:.1%} | {sim['wait_s']:.3f} | "
              f"{sim['wait_s'] / sim['per_step'][-1]['iteration_s']:.1%} | "
              f"{sim['gpus'] * sim['wait_s'] * idle_w / 1e3:.2f} | {sim['energy_per_step_j'] / 1e3:.1f} |")
EOF
