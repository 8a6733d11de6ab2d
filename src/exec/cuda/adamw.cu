// AdamW kernel (float4-vectorized where aligned).
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {
namespace {

__device__ __forceinline__ void adamw_one(float& param, float grad, float& m, float& v,
                                          const AdamWConfig& c) {
  m = c.beta1 * m + (1.0f - c.beta1) * grad;
  v = c.beta2 * v + (1.0f - c.beta2) * grad * grad;
  param -= c.lr * (m / (sqrtf(v) + c.eps) + c.weight_decay * param);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t count,
                             AdamWConfig config) {
  const std::int64_t vectors = count / 4;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < vectors;
       at += stride) {
    float4 p = reinterpret_cast<float4*>(param)[at];
    const float4 g = reinterpret_cast<const float4*>(grad)[at];
    float4 mm = reinterpret_cast<float4*>(m)[at];
    float4 vv = reinterpret_cast<float4*>(v)[at];
    adamw_one(p.x, g.x, mm.x, vv.x, config);
    adamw_one(p.y, g.y, mm.y, vv.y, config);
    adamw_one(p.z, g.z, mm.z, vv.z, config);
    adamw_one(p.w, g.w, mm.w, vv.w, config);
    reinterpret_cast<float4*>(param)[at] = p;
    reinterpret_cast<float4*>(m)[at] = mm;
    reinterpret_cast<float4*>(v)[at] = vv;
  }
  for (std::int64_t at = vectors * 4 + blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       at < count; at += stride)
    adamw_one(param[at], grad[at], m[at], v[at], config);
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t count,
                const AdamWConfig& config, cudaStream_t stream) {
  adamw_kernel<<<blocks_for(count / 4 + 1), kThreads, 0, stream>>>(param, grad, m, v, count, config);
}

}  // namespace calo::exec::cuda
