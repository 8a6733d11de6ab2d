// Device memory held for `calo bench --memory real` (Backend::hold / release): stream-ordered allocations
// from a memory pool of its own, which keeps what it reserved (as PyTorch's caching allocator does), so the
// pool's high-water mark is the ledger's peak as the streams really ran.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace calo::exec::cuda {

/// The pool and the allocation of each ledger slot on one device.
class DeviceHolds {
 public:
  /// Binds to device `device`; the pool is created by the first hold.
  explicit DeviceHolds(int device) : device_(device) {}
  DeviceHolds(const DeviceHolds&) = delete;
  DeviceHolds& operator=(const DeviceHolds&) = delete;
  /// Frees every held block and destroys the pool (the device must be idle).
  ~DeviceHolds();
  /// Enqueues an allocation of `bytes` on `stream` under `slot`; throws RuntimeFailure naming `what`, rank
  /// `rank`, the backend's own operand buffers (`operand_bytes`) and the device's memory when it has no room.
  void hold(std::int32_t slot, std::int64_t bytes, const std::string& what, int rank,
            std::int64_t operand_bytes, cudaStream_t stream);
  /// Enqueues the free of `slot`'s block on `stream`.
  void release(std::int32_t slot, cudaStream_t stream);
  /// Most bytes the pool had in use at once (0 before the first hold).
  std::int64_t peak_bytes() const;

 private:
  int device_ = 0;
  cudaMemPool_t pool_ = nullptr;
  std::vector<void*> blocks_;
};

/// Device memory in use (total - free) on the current device.
std::int64_t device_used_bytes();

}  // namespace calo::exec::cuda
