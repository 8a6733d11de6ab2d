// FP8 casts: amax by a grid-stride block reduction (atomicMax on the float's bits: |x| >= 0 orders as its
// bits), then a saturating cast to e4m3 with the scale taken from that amax. Both read 8 bf16 values (16 bytes)
// a thread and the cast writes 8 bytes: the first H100 bench ran them one value a thread at ~1.2 TB/s, slower
// than the FP8 GEMM they feed (docs/EXECUTION_CUDA.md, "FP8 linears").
#include <cuda_fp8.h>

#include "exec/cuda/fp8.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void zero_kernel(float* value) {
  *value = 0.0f;
}

/// Values a thread reads at once: one 16-byte load of bf16.
constexpr int kVector = 8;

/// Eight bf16 values from one 16-byte load.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 pair[4];
};

/// Eight e4m3 values for one 8-byte store.
struct alignas(8) Fp8x8 {
  __nv_fp8x2_storage_t pair[4];
};

/// Whether `in` (and `out`, if given) allow the 16-byte loads and 8-byte stores of the vector loop.
bool vector_aligned(const void* in, const void* out) {
  return reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 8 == 0;
}

__global__ void amax_kernel(const bf16* in, std::int64_t count, bool vector, float* amax) {
  __shared__ float shared32[32];
  float local = 0.0f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t vectors = vector ? count / kVector : 0;
  const auto* packed = reinterpret_cast<const Bf16x8*>(in);
  for (std::int64_t at = first; at < vectors; at += stride) {
    const Bf16x8 values = packed[at];
    for (const __nv_bfloat162 pair : values.pair) {
      const float2 both = __bfloat1622float2(pair);
      local = fmaxf(local, fmaxf(fabsf(both.x), fabsf(both.y)));
    }
  }
  for (std::int64_t at = vectors * kVector + first; at < count; at += stride)
    local = fmaxf(local, fabsf(__bfloat162float(in[at])));
  const float block = block_max(local, shared32);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(block));
}

__global__ void cast_kernel(const bf16* in, std::int64_t count, bool vector, float* scales, std::uint8_t* out) {
  const float amax = scales[0] > 0.0f ? scales[0] : 1.0f;
  const float scale = kE4m3Max / amax;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t vectors = vector ? count / kVector : 0;
  const auto* packed = reinterpret_cast<const Bf16x8*>(in);
  auto* packed_out = reinterpret_cast<Fp8x8*>(out);
  for (std::int64_t at = first; at < vectors; at += stride) {
    const Bf16x8 values = packed[at];
    Fp8x8 result;
    for (int pair = 0; pair < 4; ++pair) {
      float2 both = __bfloat1622float2(values.pair[pair]);
      both.x *= scale;
      both.y *= scale;
      result.pair[pair] = __nv_cvt_float2_to_fp8x2(both, __NV_SATFINITE, __NV_E4M3);
    }
    packed_out[at] = result;
  }
  for (std::int64_t at = vectors * kVector + first; at < count; at += stride)
    out[at] = __nv_cvt_float_to_fp8(__bfloat162float(in[at]) * scale, __NV_SATFINITE, __NV_E4M3);
  if (blockIdx.x == 0 && threadIdx.x == 0) scales[kFp8ScaleIndex] = amax / kE4m3Max;
}

__global__ void scale_times_kernel(const float* in, float factor, float* out) {
  *out = *in * factor;
}

}  // namespace

void fp8_amax(const bf16* in, std::int64_t count, float* scales, cudaStream_t stream) {
  zero_kernel<<<1, 1, 0, stream>>>(scales);
  const bool vector = vector_aligned(in, nullptr);
  amax_kernel<<<blocks_for(vector ? count / kVector : count), kThreads, 0, stream>>>(in, count, vector, scales);
}

void fp8_cast(const bf16* in, std::int64_t count, float* scales, std::uint8_t* out, cudaStream_t stream) {
  const bool vector = vector_aligned(in, out);
  cast_kernel<<<blocks_for(vector ? count / kVector : count), kThreads, 0, stream>>>(in, count, vector, scales,
                                                                                     out);
}

void fp8_scale_times(const float* in, float factor, float* out, cudaStream_t stream) {
  scale_times_kernel<<<1, 1, 0, stream>>>(in, factor, out);
}

}  // namespace calo::exec::cuda
