set -u
out=${OUT:-/tmp/out}; mkdir -p $out
export CALO_DATA_DIR=$PWD/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source bench/gpu/unpack_carry.sh
bin=/tmp/dev; mkdir -p $bin; for f in .carry/dev/*.xz; do xz -dc $f > $bin/$(basename $f .xz); done; chmod +x $bin/*
{
nvidia-smi -L; lscpu | grep "Model name"; nproc
echo "== exec_cuda_tests"; timeout 240 $bin/exec_cuda_tests 2>&1 | tail -4
for a in "" fallback; do echo "== bench --check attention=${a:-cudnn}"; CALO_ATTENTION=$a timeout 120 $bin/calo bench --backend cuda --model llama3-8b --layers 2 --seq 2048 --gbs 2 --steps 2 --warmup 1 --check --out /tmp/b$a 2>&1 | grep -iE "check|wrong|error|step" | head -5; done
true
for b in calo-before calo; do for args in "--model mixtral-8x7b --cluster h100-hgx --gpus 64 --gbs 256 --top 5" "--model llama3-70b --cluster h100-hgx --gpus 64 --gbs 512 --top 5" "--model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 4,8 --mbs 1 --top 5"; do
  s=$(date +%s%N); /usr/bin/time -f "%U user %S sys" /tmp/dev/$b plan $args -q -j 2 --max-minutes 0 --json > /tmp/p.json 2>/tmp/p.err; e=$(date +%s%N)
  echo "== $b wall_ms=$(((e-s)/1000000)) $(tail -1 /tmp/p.err) :: $args"; python3 -c "import json; d=json.load(open('/tmp/p.json')); print('  simulated', d['simulated'], 'first', d['ranking'][0]['layout'])"
done; done
} > $out/summary.txt 2>&1
cat $out/summary.txt
