# shellcheck shell=bash
# Sourced by the GPU-host scripts that run the staged calo (bench/plan_vs_measured/run.sh,
# bench/calibrate/two_gpu_runs.sh): `calo_env REPO CALO SYNC_TIMEOUT_S` exports NCCL's multicast off (the
# lender's rule), the repo's presets, the CUDA backend's sync timeout, the binary ranks re-exec, and the CUDA
# libraries on LD_LIBRARY_PATH.
calo_env() {
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  export CALO_DATA_DIR="$1/data" CALO_EXECUTABLE="$2" CALO_CUDA_SYNC_TIMEOUT_S="$3"
  local dir
  for dir in /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64; do
    [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  return 0
}
