# shellcheck shell=bash
# Sourced by the collective sweeps (collective_sweep.sh, group_size_sweep.sh): NCCL's environment for a sweep
# (multicast off, its tuning choices logged) and a fresh work directory $work holding the host's topology
# (topo.txt) and its GPUs' state (smi.txt). Call sweep_gpu_state again to append the state after the sweep.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING
work=$(mktemp -d)
sweep_gpu_state() {
  nvidia-smi --query-gpu=index,name,uuid,clocks.sm,temperature.gpu,power.draw --format=csv >>"$work/smi.txt" 2>&1 || true
}
nvidia-smi topo -m >"$work/topo.txt" 2>&1 || true
sweep_gpu_state
