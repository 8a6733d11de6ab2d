// DeviceHolds: cudaMallocFromPoolAsync / cudaFreeAsync on a pool that never trims (exec/cuda/cuda_holds.h).
#include "exec/cuda/cuda_holds.h"

#include <fmt/format.h>

#include <limits>

#include "core/error.h"
#include "core/table.h"
#include "exec/cuda/cuda_check.h"

namespace calo::exec::cuda {

DeviceHolds::~DeviceHolds() {
  if (pool_ == nullptr) return;
  for (void* block : blocks_) {
    if (block != nullptr) cudaFree(block);
  }
  cudaMemPoolDestroy(pool_);
}

void DeviceHolds::hold(std::int32_t slot, std::int64_t bytes, const std::string& what, int rank,
                       std::int64_t operand_bytes, cudaStream_t stream) {
  if (pool_ == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    CALO_CUDA(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
    CALO_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  }
  if (static_cast<size_t>(slot) >= blocks_.size()) blocks_.resize(static_cast<size_t>(slot) + 1, nullptr);
  void* block = nullptr;
  const cudaError_t status =
      cudaMallocFromPoolAsync(&block, static_cast<size_t>(std::max<std::int64_t>(bytes, 1)), pool_, stream);
  if (status != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw RuntimeFailure(fmt::format(
        "rank {}: out of GPU memory holding {} for {} (--memory real: {} held at most so far beside calo's "
        "own operand buffers of {}; {} free of {}): what training holds and the bench's operands do not fit "
        "together; use more tp/pp, --recompute full or a smaller slice",
        rank, core::format_bytes(static_cast<double>(bytes)), what,
        core::format_bytes(static_cast<double>(peak_bytes())),
        core::format_bytes(static_cast<double>(operand_bytes)),
        core::format_bytes(static_cast<double>(free_bytes)),
        core::format_bytes(static_cast<double>(total_bytes))));
  }
  blocks_[static_cast<size_t>(slot)] = block;
}

void DeviceHolds::release(std::int32_t slot, cudaStream_t stream) {
  if (static_cast<size_t>(slot) >= blocks_.size() || blocks_[static_cast<size_t>(slot)] == nullptr) return;
  CALO_CUDA(cudaFreeAsync(blocks_[static_cast<size_t>(slot)], stream));
  blocks_[static_cast<size_t>(slot)] = nullptr;
}

std::int64_t DeviceHolds::peak_bytes() const {
  if (pool_ == nullptr) return 0;
  std::uint64_t used_high = 0;
  CALO_CUDA(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &used_high));
  return static_cast<std::int64_t>(used_high);
}

std::int64_t device_used_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  CALO_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes - free_bytes);
}

}  // namespace calo::exec::cuda
