#!/usr/bin/env bash
# The asymmetric pipeline, measured -> planned -> run -> verified, in one command (issue 38 item 4). For each
# scenario: `calo bench --trace-ops` of the uniform partition (measure), `calo plan partition --from` that run
# (plan: each GPU's speed from its op spans, its extra heat from what the simulator does not explain), then
# `calo bench` of the planned partition with its stage -> GPU order and of the study's static even/odd split,
# under the same load; the summary sets the measured gain of each beside the planner's predicted gain.
#
#   GPU host (repo root, carry a staged calo: bench/gpu/exec_run.sh stage):
#     bash bench/partition_loop/run.sh [BIN_DIR]               (default .carry/exec-cuda-bin)
#   any host, on CPU ranks (what the test runs):
#     PL_BACKEND=cpu PL_MODEL=tiny-dense PL_PP=2 PL_GBS=4 PL_SEQ=128 PL_LAYERS=4 bash bench/partition_loop/run.sh build
#
# Scenarios (PL_SCENARIOS, space-separated; default "quiet slow:2 hot:1" on 4 GPUs):
#   quiet    nothing else runs;
#   slow:G   a co-running bf16 GEMM process on GPU G, bursty (PL_LOAD_BURST_MS on / PL_LOAD_IDLE_MS off), for
#            every bench of the scenario: the job's kernels share the GPU, so it is slower per unit of work;
#   hot:G    the same GEMM process heats GPU G at full load for PL_HEAT_S seconds before each bench and stops:
#            the card is hot (its heatsink stays warm through a short bench) without sharing it.
#   Never by changing clocks, power limits or settings.
# Environment: PL_MODEL (llama3-8b), PL_LAYERS (16), PL_SEQ (2048), PL_GBS (16), PL_PP (the GPUs, or 2 on CPU),
#   PL_STEPS / PL_WARMUP (6 / 2), PL_PLAN_STEPS (8), PL_BACKEND (cuda), PL_CLUSTER (the card's calibrated preset;
#   cpu-host on CPU), PL_BUDGET_S (whole script, 540). Writes $OUT/partition_loop.tgz (every run, plan and log)
#   and $OUT/summary.txt.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
backend="${PL_BACKEND:-cuda}"
if [ "$backend" = cpu ]; then
  bin="$(cd "${1:-$repo/build}" && pwd)"
else
  # shellcheck source=bench/gpu/unpack_carry.sh
  source "$repo/bench/gpu/unpack_carry.sh"
  bin="$(unpack_carry "$(cd "${1:-$repo/.carry/exec-cuda-bin}" && pwd)" calo-bin)"
fi
calo="$bin/calo"
[ -x "$calo" ] || { echo "no calo under $bin: build it (CPU) or stage it (see the header of $0)" >&2; exit 2; }
# shellcheck source=bench/gpu/calo_env.sh
source "$repo/bench/gpu/calo_env.sh"
calo_env "$repo" "$calo" 60

if [ "$backend" = cpu ]; then
  gpus="${PL_PP:-2}"
  cluster="${PL_CLUSTER:-cpu-host}"
else
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$gpus" -ge 2 ] || { echo "needs 2 or more GPUs for a pipeline; nvidia-smi -L lists $gpus" >&2; exit 2; }
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
    *H200*) cluster="${PL_CLUSTER:-h200-hgx-calibrated}" ;;
    *) cluster="${PL_CLUSTER:-h100-hgx-calibrated}" ;;
  esac
fi
pp="${PL_PP:-$gpus}"
default_scenarios="quiet slow:$((pp / 2)) hot:$((pp / 4))"
[ "$backend" = cpu ] && default_scenarios="quiet"
read -r -a scenarios <<<"${PL_SCENARIOS:-$default_scenarios}"
job=(--model "${PL_MODEL:-llama3-8b}" --layers "${PL_LAYERS:-16}" --seq "${PL_SEQ:-2048}" --gbs "${PL_GBS:-16}"
  --pp "$pp")
steps=(--steps "${PL_STEPS:-6}" --warmup "${PL_WARMUP:-2}")
budget_s=${PL_BUDGET_S:-540}
out="${OUT:-$PWD/partition-loop-out}"
work="$(mktemp -d /tmp/partition-loop.XXXXXX)"
mkdir -p "$out"
summary="$work/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
say "# partition loop: ${job[*]} on $pp x $backend ($cluster), scenarios ${scenarios[*]}"
if [ "$backend" = cuda ]; then
  nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv >"$work/host.txt" 2>&1
fi

load_pid=""
# start_load GPU [BURST_MS IDLE_MS]: a bf16 GEMM process on GPU (bursty when both times are given).
start_load() {
  local args=(--device "$1" --seconds 3600)
  [ $# -ge 3 ] && args+=(--burst-ms "$2" --idle-ms "$3")
  python3 "$repo/bench/gpu/gemm_load.py" "${args[@]}" >>"$work/load.log" 2>&1 &
  load_pid=$!
  sleep 3  # its GEMMs are running before the job starts
}
stop_load() {
  [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null
  load_pid=""
}
trap stop_load EXIT

# bench SCENARIO LABEL [FLAGS...]: one calo bench under the scenario's load; prints its p50 step time.
bench() {
  local scenario="$1" label="$2"
  shift 2
  local kind="${scenario%%:*}" gpu="${scenario#*:}" dir="$work/$scenario_dir"
  if [ "$kind" = slow ]; then start_load "$gpu" "${PL_LOAD_BURST_MS:-20}" "${PL_LOAD_IDLE_MS:-60}"; fi
  if [ "$kind" = hot ]; then
    start_load "$gpu"
    sleep "${PL_HEAT_S:-40}"
    stop_load
  fi
  local left=$((budget_s - SECONDS))
  [ "$left" -gt 20 ] || { stop_load; say "SKIP $scenario/$label: time budget used up" >&2; return 1; }
  timeout --kill-after=10 "$((left < 120 ? left : 120))" "$calo" bench --backend "$backend" --no-progress --json \
    "${job[@]}" "${steps[@]}" --nproc "$pp" "$@" --out "$dir/runs/$label" >"$dir/$label.json" 2>"$dir/$label.log"
  local rc=$?
  stop_load
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step_time_s']['p50'])" "$dir/$label.json" \
    2>/dev/null || { say "FAIL $scenario/$label: exit $rc ($(tail -1 "$dir/$label.log"))" >&2; return 1; }
}

failures=0
for scenario in "${scenarios[@]}"; do
  scenario_dir="${scenario/:/-gpu}"
  mkdir -p "$work/$scenario_dir/runs"
  dir="$work/$scenario_dir"
  # Every bench traces its ops, so each carries the same (small) event overhead and can feed the next plan.
  uniform_s=$(bench "$scenario" uniform --trace-ops) || { failures=$((failures + 1)); continue; }
  "$calo" plan partition "${job[@]}" --cluster "$cluster" --steps "${PL_PLAN_STEPS:-8}" --json \
    --from "$dir/runs/uniform" >"$dir/plan.json" 2>"$dir/plan.log" || {
    say "FAIL $scenario/plan: $(tail -1 "$dir/plan.log")"
    failures=$((failures + 1))
    continue
  }
  read -r best_layers best_order even_layers < <(python3 - "$dir/plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
join = lambda values: ",".join(str(v) for v in values)
even = plan["even_odd"]["layers_per_stage"] if plan["even_odd"].get("layers_per_stage") else []
print(join(plan["best"]["layers_per_stage"]), join(plan["best"]["gpu_of_stage"]), join(even) or "-")
PY
  )
  planned_s=$(bench "$scenario" planned --trace-ops --layers-per-stage "$best_layers" --stage-gpus "$best_order") ||
    { failures=$((failures + 1)); continue; }
  even_s=""
  if [ "$even_layers" != "-" ]; then even_s=$(bench "$scenario" even-odd --trace-ops --layers-per-stage "$even_layers"); fi
  python3 - "$dir/plan.json" "$scenario" "$uniform_s" "$planned_s" "${even_s:-nan}" "$best_layers" \
    "$best_order" <<'PY' | tee -a "$summary"
import json, math, sys
plan = json.load(open(sys.argv[1]))
scenario, uniform, planned, even = sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
gain = lambda before, after: 100.0 * (1.0 - after / before)
predicted = gain(plan["uniform"]["iteration_s"], plan["best"]["iteration_s"])
speeds = ", ".join(f"{s:.3f}" for s in plan["speed_factors"])
heat = ", ".join(f"{h:+.1f}" for h in plan["inlet_offset_c"])
print(f"== {scenario}: read speed per GPU {speeds}; extra inlet {heat} C")
print(f"   planned --layers-per-stage {sys.argv[6]} --stage-gpus {sys.argv[7]}")
print(f"   measured step (p50): uniform {uniform:.4f} s, planned {planned:.4f} s"
      + ("" if math.isnan(even) else f", even/odd {even:.4f} s"))
line = f"   gain of the plan: measured {gain(uniform, planned):+.1f} %, predicted {predicted:+.1f} %"
line += f" (error {gain(uniform, planned) - predicted:+.1f} points)"
if not math.isnan(even) and plan["even_odd"].get("iteration_s"):
    line += (f"; even/odd: measured {gain(uniform, even):+.1f} %, predicted "
             f"{gain(plan['uniform']['iteration_s'], plan['even_odd']['iteration_s']):+.1f} %")
print(line)
PY
done
cp "$summary" "$out/"
tar -C "$work" -czf "$out/partition_loop.tgz" .
say "# every run, plan and log: $out/partition_loop.tgz"
[ "$failures" -eq 0 ] || { say "# $failures scenario(s) failed: see the FAIL lines"; exit 1; }
