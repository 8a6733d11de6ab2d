// Shared device helpers of the CUDA backend kernels: bf16 type, counter-based random numbers (never zero),
// the --check value pattern, block reductions and launch geometry.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace calo::exec::cuda {

/// Storage type of activations, weights and messages.
using bf16 = __nv_bfloat16;

/// Threads per block of the elementwise kernels.
inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `count` elements (capped so that huge buffers still launch).
inline unsigned blocks_for(std::int64_t count, int threads = kThreads) {
  const std::int64_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

#ifdef __CUDACC__
/// splitmix64 finalizer: a counter-based hash.
__device__ __forceinline__ std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Uniform magnitude in [0.5, 1.5) with a random sign, from (seed, index): never zero.
__device__ __forceinline__ float nonzero_random(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t bits = mix64(seed * 0x2545F4914F6CDD1Dull + index);
  const float magnitude = 0.5f + static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
  return (bits & 1) != 0 ? magnitude : -magnitude;
}

/// --check pattern of element `index` sent by global rank `rank` (exact in bf16 when summed by <= 8 ranks).
__device__ __forceinline__ float device_check_value(int rank, std::int64_t index) {
  return static_cast<float>(rank + 1) + 0.5f * static_cast<float>(index % 13);
}

/// Sum over a block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float value, float* shared32) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared32[warp] = value;
  __syncthreads();
  float total = 0.0f;
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int index = 0; index < warps; ++index) total += shared32[index];
  return total;
}

/// Maximum over a block (same rules as block_sum).
__device__ __forceinline__ float block_max(float value, float* shared32) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared32[warp] = value;
  __syncthreads();
  float result = -INFINITY;
  const int warps = static_cast<int>(blockDim.x / 32);
  for (int index = 0; index < warps; ++index) result = fmaxf(result, shared32[index]);
  return result;
}

/// Softmax statistics of one row, block-wide: its largest value and the sum of exp(value - largest).
struct RowSoftmax {
  float max_value;  ///< largest of the row's values
  float sum;        ///< sum over the row of exp(value - max_value)
};

/// The softmax statistics of `row`'s first `width` values, one block per row (same rules as block_sum).
__device__ __forceinline__ RowSoftmax row_softmax(const bf16* row, std::int64_t width, float* shared32) {
  float max_value = -INFINITY;
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x)
    max_value = fmaxf(max_value, __bfloat162float(row[col]));
  max_value = block_max(max_value, shared32);
  float sum = 0.0f;
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x)
    sum += __expf(__bfloat162float(row[col]) - max_value);
  return {max_value, block_sum(sum, shared32)};
}
#endif

}  // namespace calo::exec::cuda
