#!/usr/bin/env bash
# Plan, then measure what was planned, on one GPU host in one command: for each model shape, `calo plan` ranks
# every layout of this host's GPUs on the calibrated preset of its card; the best candidate of every layout
# family (tp, pp, dp, cp, ep) and the top ranks run with `calo bench --backend cuda --trace-ops`; then
# `calo validate` (here, or on the build machine from the tarball) sets the planner's prediction beside each
# measurement: step time, energy per step, mean and peak power per GPU, Spearman rho, first pick's regret.
#
#   1. build machine, repo root: bench/gpu/exec_run.sh stage        (or any staged calo built with -DCALO_CUDA=ON)
#   2. GPU host, repo root (carry .carry/exec-cuda-bin):
#        bash bench/plan_vs_measured/run.sh [BIN_DIR] [SHAPE ...]
#      SHAPE is NAME:MODEL:LAYERS:SEQ:GBS (MODEL a preset of data/models), default
#        dense2k:llama3-8b:16:2048:16  dense8k:llama3-8b:16:8192:4  moe2k:mixtral-8x7b:4:2048:16
#      Environment: PVM_TOP (top ranks run besides each family's best, default 2), PVM_MAX_RUNS (per shape,
#      default 9), PVM_BUDGET_S (whole script, default 520), PVM_STEPS / PVM_WARMUP (default 4 / 2).
#      Writes $OUT/SHAPE.tgz per shape (SHAPE/plan.json, SHAPE/model.yaml, SHAPE/runs/LABEL/run.db,
#      SHAPE/LABEL.json and .log), $OUT/host.txt and $OUT/summary.txt (every table).
#   3. build machine: tar -xzf SHAPE.tgz; for each SHAPE:
#        build/calo validate SHAPE/runs/* --cluster h200-hgx-calibrated --plan SHAPE/plan.json   (h100-... on H100)
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin="$(unpack_carry "$(cd "${1:-$repo/.carry/exec-cuda-bin}" && pwd)" calo-bin)"
shift || true
calo="$bin/calo"
[ -x "$calo" ] || { echo "no calo under ${1:-.carry/exec-cuda-bin}: stage it (see the header of $0)" >&2; exit 2; }
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(dense2k:llama3-8b:16:2048:16 dense8k:llama3-8b:16:8192:4 moe2k:mixtral-8x7b:4:2048:16)

out="${OUT:-$PWD/plan-vs-measured-out}"
work="$(mktemp -d /tmp/plan-vs-measured.XXXXXX)"
mkdir -p "$out"
# shellcheck source=bench/gpu/calo_env.sh
source "$repo/bench/gpu/calo_env.sh"
calo_env "$repo" "$calo" 60
budget_s=${PVM_BUDGET_S:-520}
top=${PVM_TOP:-2}
max_runs=${PVM_MAX_RUNS:-9}
steps=${PVM_STEPS:-4}
warmup=${PVM_WARMUP:-2}
summary="$work/summary.txt"
say() { echo "$*" | tee -a "$summary"; }

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -gt 0 ] || { echo "no GPU: nvidia-smi -L lists none" >&2; exit 2; }
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) cluster=h200-hgx-calibrated ;;
  *) cluster=h100-hgx-calibrated ;;
esac
{
  date -u +%FT%TZ
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm,temperature.gpu --format=csv
  nvidia-smi topo -m
} >"$work/host.txt" 2>&1
say "# plan_vs_measured: $gpus GPUs, cluster $cluster, shapes ${shapes[*]}"

# pick PLAN_JSON TOP MAX: one "label<TAB>flags" line per run: the top ranks, then each family's best.
pick() {
  python3 - "$@" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
top, most = int(sys.argv[2]), int(sys.argv[3])
ranked = sorted((c for c in plan.get("candidates", plan["ranking"]) if c.get("iteration_s", 0) > 0),
                key=lambda c: c["iteration_s"])
def family(c):
    l = c["layout_json"]
    parts = [f"{k}{l.get(k, 1)}" for k in ("tp", "cp", "pp", "dp", "ep") if l.get(k, 1) > 1]
    return "-".join(parts) or "single"
chosen, seen = [], set()
for c in ranked[:top]:
    chosen.append(c); seen.add(family(c))
for c in ranked:
    if family(c) not in seen:
        chosen.append(c); seen.add(family(c))
for c in chosen[:most]:
    rank = ranked.index(c) + 1
    print(f"r{rank:03d}-{family(c)}\t{c['calo_flags']}")
PY
}

for shape in "${shapes[@]}"; do
  IFS=: read -r name model layers seq gbs <<<"$shape"
  dir="$work/$name"
  mkdir -p "$dir/runs"
  sed -e "s/^num_layers:.*/num_layers: $layers/" -e "s/^name:.*/name: $model-${layers}layers/" \
    "$repo/data/models/$model.yaml" >"$dir/model.yaml"
  t0=$SECONDS
  timeout 120 "$calo" plan --model "$dir/model.yaml" --cluster "$cluster" --gpus "$gpus" --gbs "$gbs" \
    --seq "$seq" --all --no-prune --json >"$dir/plan.json" 2>"$dir/plan.log"
  say "== $name plan: exit $? after $((SECONDS - t0)) s ($model $layers layers, seq $seq, gbs $gbs)"
  pick "$dir/plan.json" "$top" "$max_runs" >"$dir/picked.tsv" 2>>"$dir/plan.log" || {
    say "   no candidates: $(tail -1 "$dir/plan.log")"
    continue
  }
  while IFS=$'\t' read -r label flags; do
    left=$((budget_s - SECONDS))
    if [ "$left" -lt 25 ]; then say "SKIP $name/$label: time budget used up"; continue; fi
    limit=$((left < 90 ? left : 90))
    t0=$SECONDS
    # shellcheck disable=SC2086  # flags is the planner's word list
    timeout --kill-after=10 "$limit" "$calo" bench --backend cuda --no-progress --json --trace-ops \
      --model "$dir/model.yaml" $flags --steps "$steps" --warmup "$warmup" --out "$dir/runs/$label" \
      >"$dir/$label.json" 2>"$dir/$label.log"
    rc=$?
    step=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['step_time_s']['p50'],4))" \
      "$dir/$label.json" 2>/dev/null)
    say "== $name/$label: exit $rc after $((SECONDS - t0)) s, step ${step:-?} s: $flags"
  done <"$dir/picked.tsv"
  if "$calo" validate --help >/dev/null 2>&1; then
    "$calo" validate "$dir"/runs/* --cluster "$cluster" --plan "$dir/plan.json" 2>&1 | tee -a "$summary"
  fi
done
cp "$summary" "$work/host.txt" "$out/"
# One tarball per shape: a device call returns files of at most 16 MiB each (8 files).
for shape in "${shapes[@]}"; do
  name="${shape%%:*}"
  [ -d "$work/$name" ] && tar -C "$work" -czf "$out/$name.tgz" "$name"
done
ls -la "$out"
