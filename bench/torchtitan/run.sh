#!/usr/bin/env bash
# torchtitan beside `calo bench` on the GPU host (issue 43): the same Llama3-8B slice trained by torchtitan 0.2.2
# (compile off and on) under `calo record --markers torchtitan`, and by `calo bench --backend cuda`; step time,
# tokens/s, peak memory, mean/peak power per GPU and energy per step of each, in one summary.
#
#   1. here (build machine):  bench/gpu/exec_run.sh stage       builds calo into .carry/exec-cuda-bin
#                             bench/torchtitan/run.sh stage    downloads the wheels, packs them into
#                                                              .carry/torchtitan-site.tar.xz, and copies calo alone
#                                                              into .carry/calo-bin (the repo, the site and all of
#                                                              exec-cuda-bin together pass the 64 MiB carry limit)
#   2. GPU host (repo root, carry .carry/torchtitan-site.tar.xz and .carry/calo-bin):
#                             bash bench/torchtitan/run.sh      [TITAN_LAYERS=4 TITAN_SEQ=8192 TITAN_STEPS=30
#                                                                TITAN_NPROC=1 TITAN_CALO_BIN=.carry/calo-bin
#                                                                TITAN_CASES="eager compile calo"; also profile,
#                                                                selective, memory, float8 (torchao tensorwise,
#                                                                eager and compiled, beside calo-fp8 and calo);
#                                                                on several GPUs fsdp tp pp cp
#                                                                tp-eager pp-eager calo-fsdp calo-fsdp-torchtitan
#                                                                calo-tp calo-pp calo-cp
#                                                                memory-parallel memory-parallel4]
#      writes $OUT/titan_summary.txt (the figures) and $OUT/titan_runs.tar.gz (every log, JSON and run directory).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wheels="$repo/.carry/torchtitan-wheels"  # stage only

if [ "${1:-}" = "stage" ]; then
  set -e
  mkdir -p "$wheels"
  # torchtitan and the pure packages its trainer, model and parallelism code import (not HF datasets: see
  # titan_train.py); --no-deps keeps the set exact. Sizes: docs/DEPENDENCIES.md.
  pip download --no-deps --python-version 3.12 --only-binary=:all: --dest "$wheels" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
    torchtitan==0.2.2 torchdata==0.11.0 tokenizers==0.23.3 einops==0.8.2 tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 shtab==1.13.0 rich==15.0.0 \
    markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0
  # torchao for torchtitan's float8 converter (issue 63): 0.18.0 is the first release built for torch 2.11 (its
  # __init__ refuses its C++ extensions below 2.11). Float8 training (torchao.float8) is pure Python, so the
  # extensions (_C*.so, 13.5 MB of CUTLASS/MX kernels) and spinquant's tables stay behind.
  pip download --no-deps --python-version 3.12 --only-binary=:all: --dest "$wheels" \
    --platform manylinux_2_28_x86_64 torchao==0.18.0
  # Installed here and packed as one xz tarball (the wheels themselves are zip: 7.3 MB; packed: ~3 MB).
  site="$(mktemp -d)"
  pip install --quiet --no-deps --no-index --target "$site" "$wheels"/*.whl
  rm -rf "$site"/bin "$site"/torchtitan/experiments "$site"/torchao/_C*.so "$site"/torchao/prototype/spinquant/_hadamard*
  tar -cJf "$repo/.carry/torchtitan-site.tar.xz" -C "$site" .
  rm -rf "$site" "$wheels"
  du -sh "$repo/.carry/torchtitan-site.tar.xz"
  if [ -f "$repo/.carry/exec-cuda-bin/calo.xz" ]; then
    mkdir -p "$repo/.carry/calo-bin" && cp "$repo/.carry/exec-cuda-bin/calo.xz" "$repo/.carry/calo-bin/"
    # calo's CUDA backend module (calo bench --backend cuda opens it from calo's directory)
    cp "$repo/.carry/exec-cuda-bin/libcalo_exec_cuda.so.xz" "$repo/.carry/calo-bin/"
  else
    echo "no .carry/exec-cuda-bin/calo.xz: run bench/gpu/exec_run.sh stage first, then this again" >&2
  fi
  exit 0
fi

out="${OUT:-$repo/titan-out}"
mkdir -p "$out"
work="$(mktemp -d /tmp/titan.XXXXXX)"
summary="$out/titan_summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

layers="${TITAN_LAYERS:-4}" seq="${TITAN_SEQ:-8192}" steps="${TITAN_STEPS:-30}" nproc="${TITAN_NPROC:-1}"
cases="${TITAN_CASES:-eager compile calo}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CALO_DATA_DIR="$repo/data"
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

mkdir -p "$work/site"
tar -xJf "$repo/.carry/torchtitan-site.tar.xz" -C "$work/site" || say "unpacking .carry/torchtitan-site.tar.xz failed"
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck source=bench/gpu/unpack_carry.sh
source "$repo/bench/gpu/unpack_carry.sh"
bin="$(unpack_carry "$repo/${TITAN_CALO_BIN:-.carry/calo-bin}" titan-calo)"
say "# $(nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv,noheader | head -1)"
say "# torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1 | tail -1); torchtitan 0.2.2; layers $layers seq $seq steps $steps nproc $nproc"

runs="$work/runs"
mkdir -p "$runs"
# titan NAME EXTRA_FLAGS...: torchtitan under calo record (its step lines become the run's steps).
titan() {
  local name="$1"
  shift
  local t0=$SECONDS
  # With several ranks every one prints torchtitan's step lines; only rank 0's reach the console (calo record's
  # markers), each rank's whole output is kept under torchrun-NAME/ (as torchtitan's own run_train.sh does).
  local ranks=()
  [ "$nproc" -gt 1 ] && ranks=(--local-ranks-filter 0 --role rank --tee 3 --log-dir "$runs/torchrun-$name")
  timeout --kill-after=10 "${TITAN_LIMIT_S:-240}" "$bin/calo" record --markers torchtitan --out "$runs/$name" \
    --name "$name" -- torchrun --standalone --nproc_per_node "$nproc" "${ranks[@]}" \
    "$repo/bench/torchtitan/titan_train.py" \
    --layers "$layers" --seq "$seq" --steps "$steps" --dump "$work/dump-$name" --json "$runs/$name.json" "$@" \
    >"$runs/$name.log" 2>&1
  say "== $name: exit $? after $((SECONDS - t0)) s"
  grep -E 'Error|error:' "$runs/$name.log" | tail -3 | sed "s/^/   $name| /" | tee -a "$summary" >/dev/null
  grep -E '^.*step: *[0-9]+ ' "$runs/$name.log" | tail -2 | sed "s/^/   $name| /" | tee -a "$summary" >/dev/null
}
# titan_memory NAME:FLAGS...: one 8-step run per spec (TITAN_MEMORY_SPECS, ;-separated, replaces the list), named
# mem-NAME, compiled unless FLAGS hold --eager.
titan_memory() {
  local specs=("$@") spec flags compile
  [ -n "${TITAN_MEMORY_SPECS:-}" ] && IFS=';' read -r -a specs <<<"$TITAN_MEMORY_SPECS"
  for spec in "${specs[@]}"; do
    flags="${spec#*:}"
    compile="--compile"
    case "$flags" in *--eager*) compile="" flags="${flags/--eager/}" ;; esac
    # shellcheck disable=SC2086
    titan "mem-${spec%%:*}" --steps 8 --warmup 3 $compile $flags
  done
}
# calo_bench NAME FLAGS...: `calo bench --backend cuda` of the same model slice and sequence, layout FLAGS.
calo_bench() {
  local name="$1" t0=$SECONDS
  shift
  timeout --kill-after=10 240 "$bin/calo" bench --backend cuda --model llama3-8b --layers "$layers" --seq "$seq" \
    --steps "$steps" --no-progress --json --out "$runs/$name" "$@" >"$runs/$name.log" 2>&1
  say "== $name: exit $? after $((SECONDS - t0)) s"
}
for case in $cases; do
  case "$case" in
    eager) titan titan-eager ;;
    compile) titan titan-compile --compile ;;
    selective) titan titan-compile-sac --compile --ac selective ;;
    profile) titan titan-profile --compile --steps 8 --profile-step 6 ;;
    # FP8 linears (issue 63): torchtitan's float8 converter, torchao's tensorwise dynamic recipe (its default), the
    # output projection left in bf16 as torchtitan's own llama3 configs filter it (filter_fqns = ["output"]).
    float8)
      titan titan-eager-fp8 -- --model.converters quantize.linear.float8 --quantize.linear.float8.filter_fqns output
      titan titan-compile-fp8 --compile -- --model.converters quantize.linear.float8 \
        --quantize.linear.float8.filter_fqns output
      ;;
    memory)
      # Memory ground truth (issue 39): the allocator's peak per step across sequence, micro-batch and recompute;
      # the model's prediction is `calo model` of the same shapes.
      titan_memory "s8k-none:--seq 8192" "s8k-none-eager:--seq 8192 --eager" \
        "s8k-selective:--seq 8192 --ac selective" "s8k-full:--seq 8192 --ac full" \
        "s8k-mbs2-none:--seq 8192 --local-batch 2" "s16k-none:--seq 16384" "s16k-full:--seq 16384 --ac full" \
        "s4k-mbs4-none:--seq 4096 --local-batch 4"
      ;;
    # Several GPUs (TITAN_NPROC=2 or 4): torchtitan's layouts over all of them, each beside calo's same layout.
    fsdp) titan titan-fsdp --compile ;;
    tp) titan titan-tp --compile --tp "$nproc" ;;
    pp) titan titan-pp --compile --pp "$nproc" --local-batch 4 ;;  # 1F1B, 4 micro-batches of 1 sequence
    cp) titan titan-cp --compile --cp "$nproc" ;;
    # TP or PP alone: torchtitan 0.2.2 trains them in fp32 ("Mixed precision training with TP or PP is only
    # supported when FSDP/HSDP/CP is enabled"): 866 ms and 4.9 s steps on two H200 against calo's 81 and 417 ms
    # (docs/benchmarks/torchtitan.md); eager runs as slowly, so compile is not the cause.
    tp-eager) titan titan-tp-eager --tp "$nproc" ;;
    pp-eager) titan titan-pp-eager --pp "$nproc" --local-batch 4 ;;
    memory-parallel)
      # Memory ground truth on several GPUs (issue 39): FSDP2 (calo's ZeRO 3), CP and DDP, compiled. (TP and PP alone
      # train in fp32 in torchtitan 0.2.2 — "Mixed precision training with TP or PP is only supported when
      # FSDP/HSDP/CP is enabled" — so they need 4 GPUs, TP or PP beside FSDP.) Every rank's peak.
      titan_memory "fsdp-s8k-none:--seq 8192" "fsdp-s8k-full:--seq 8192 --ac full" "fsdp-s16k-none:--seq 16384" \
        "fsdp-s8k-mbs2-none:--seq 8192 --local-batch 2" "fsdp-s8k-none-eager:--seq 8192 --eager" \
        "fsdp-s4k-mbs4-none:--seq 4096 --local-batch 4" "fsdp-s16k-full:--seq 16384 --ac full" \
        "cp-s8k-none:--seq 8192 --cp $nproc" "cp-s16k-none:--seq 16384 --cp $nproc" \
        "cp-s16k-full:--seq 16384 --cp $nproc --ac full" \
        "ddp-s8k-none:--seq 8192 -- --parallelism.data_parallel_replicate_degree $nproc --parallelism.data_parallel_shard_degree 1"
      ;;
    memory-parallel4)
      # Memory ground truth on four GPUs (issue 39 item 1's TP/PP rows; TITAN_NPROC=4): TP2 or PP2 beside FSDP2
      # over the other two (torchtitan's mixed precision needs FSDP2 there), compiled; every rank's peak. The
      # model: `calo model --model llama3-8b --layers 4 --trainer torchtitan --zero 3 --dp 2` with --tp 2 or --pp 2.
      titan_memory "tp2fsdp-s8k-none:--seq 8192 --tp 2" "tp2fsdp-s8k-full:--seq 8192 --tp 2 --ac full" \
        "tp2fsdp-s16k-none:--seq 16384 --tp 2" "tp2fsdp-s8k-mbs2-none:--seq 8192 --tp 2 --local-batch 2" \
        "pp2fsdp-s8k-none:--seq 8192 --pp 2 --local-batch 4" "pp2fsdp-s8k-full:--seq 8192 --pp 2 --local-batch 4 --ac full" \
        "fsdp4-s8k-none:--seq 8192" "cp2fsdp-s16k-none:--seq 16384 --cp 2"
      ;;
    calo) calo_bench calo-bench --gbs "$nproc" --dp "$nproc" ;;
    calo-fp8) calo_bench calo-fp8 --gbs "$nproc" --dp "$nproc" --precision fp8 ;;
    calo-fsdp) calo_bench calo-fsdp --gbs "$nproc" --dp "$nproc" --zero 3 --overlap ;;
    # The same with torchtitan's fp32 gradient reduce-scatters (--trainer torchtitan): the layout as torchtitan runs it.
    calo-fsdp-torchtitan)
      calo_bench calo-fsdp-torchtitan --gbs "$nproc" --dp "$nproc" --zero 3 --overlap --trainer torchtitan
      ;;
    calo-tp) calo_bench calo-tp --gbs 1 --tp "$nproc" ;;
    calo-pp) calo_bench calo-pp --gbs 4 --mbs 1 --pp "$nproc" ;;
    calo-cp) calo_bench calo-cp --gbs 1 --cp "$nproc" ;;
  esac
done

# Side by side: `calo compare` over the recorded runs (step windows, energy per step, mean/peak power), the
# first present run the reference; then torchtitan's own figures (step time from its JSON, peak memory).
present=()
for name in calo-bench titan-eager titan-compile titan-compile-sac calo-fp8 titan-eager-fp8 titan-compile-fp8 calo-fsdp calo-fsdp-torchtitan titan-fsdp calo-tp \
  titan-tp titan-tp-eager calo-pp titan-pp titan-pp-eager calo-cp titan-cp; do
  [ -d "$runs/$name" ] && present+=("$runs/$name")
done
if [ "${#present[@]}" -ge 2 ]; then
  "$bin/calo" compare "${present[@]}" >"$runs/compare.txt" 2>&1
  "$bin/calo" compare "${present[@]}" --json >"$runs/compare.json" 2>/dev/null
  tee -a "$summary" <"$runs/compare.txt"
fi
python3 "$repo/bench/torchtitan/summarize.py" "$runs" | tee -a "$summary"
tar -czf "$out/titan_runs.tar.gz" -C "$work" runs $(cd "$work" && ls -d dump-*/profile_traces 2>/dev/null) \
  2>/dev/null
ls -la "$out"
