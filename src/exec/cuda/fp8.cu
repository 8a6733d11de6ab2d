// FP8 casts: amax by a grid-stride block reduction (atomicMax on the float's bits: |x| >= 0 orders as its
// bits), then a saturating cast to e4m3 with the scale taken from that amax.
#include <cuda_fp8.h>

#include "exec/cuda/fp8.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void zero_kernel(float* value) {
  *value = 0.0f;
}

__global__ void amax_kernel(const bf16* in, std::int64_t count, float* amax) {
  __shared__ float shared32[32];
  float local = 0.0f;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    local = fmaxf(local, fabsf(__bfloat162float(in[at])));
  const float block = block_max(local, shared32);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(block));
}

__global__ void cast_kernel(const bf16* in, std::int64_t count, float* scales, std::uint8_t* out) {
  const float amax = scales[0] > 0.0f ? scales[0] : 1.0f;
  const float scale = kE4m3Max / amax;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[at] = __nv_cvt_float_to_fp8(__bfloat162float(in[at]) * scale, __NV_SATFINITE, __NV_E4M3);
  if (blockIdx.x == 0 && threadIdx.x == 0) scales[kFp8ScaleIndex] = amax / kE4m3Max;
}

__global__ void scale_times_kernel(const float* in, float factor, float* out) {
  *out = *in * factor;
}

}  // namespace

void fp8_amax(const bf16* in, std::int64_t count, float* scales, cudaStream_t stream) {
  zero_kernel<<<1, 1, 0, stream>>>(scales);
  amax_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, count, scales);
}

void fp8_cast(const bf16* in, std::int64_t count, float* scales, std::uint8_t* out, cudaStream_t stream) {
  cast_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, count, scales, out);
}

void fp8_scale_times(const float* in, float factor, float* out, cudaStream_t stream) {
  scale_times_kernel<<<1, 1, 0, stream>>>(in, factor, out);
}

}  // namespace calo::exec::cuda
