// Operand initialization kernels.
#include "exec/cuda/init.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void fill_random_bf16_kernel(bf16* data, std::int64_t count, std::uint64_t seed, float scale) {
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    data[at] = __float2bfloat16(nonzero_random(seed, static_cast<std::uint64_t>(at)) * scale);
}

__global__ void fill_random_f32_kernel(float* data, std::int64_t count, std::uint64_t seed, float scale,
                                       bool positive) {
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float value = nonzero_random(seed, static_cast<std::uint64_t>(at)) * scale;
    data[at] = positive ? fabsf(value) : value;
  }
}

__global__ void fill_check_bf16_kernel(bf16* data, std::int64_t count, int rank, std::int64_t index_offset) {
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    data[at] = __float2bfloat16(device_check_value(rank, index_offset + at));
}

__global__ void fill_indices_kernel(std::int32_t* data, std::int64_t count, std::uint64_t seed,
                                    std::int32_t modulo) {
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    data[at] = static_cast<std::int32_t>(mix64(seed + static_cast<std::uint64_t>(at)) %
                                         static_cast<std::uint64_t>(modulo));
}

}  // namespace

void fill_random_bf16(bf16* data, std::int64_t count, std::uint64_t seed, float scale, cudaStream_t stream) {
  fill_random_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, seed, scale);
}

void fill_random_f32(float* data, std::int64_t count, std::uint64_t seed, float scale, bool positive,
                     cudaStream_t stream) {
  fill_random_f32_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, seed, scale, positive);
}

void fill_check_bf16(bf16* data, std::int64_t count, int rank, std::int64_t index_offset,
                     cudaStream_t stream) {
  fill_check_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, rank, index_offset);
}

void fill_indices(std::int32_t* data, std::int64_t count, std::uint64_t seed, std::int32_t modulo,
                  cudaStream_t stream) {
  fill_indices_kernel<<<blocks_for(count), kThreads, 0, stream>>>(data, count, seed, modulo < 1 ? 1 : modulo);
}

}  // namespace calo::exec::cuda
