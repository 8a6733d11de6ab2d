// RMSNorm kernel.
#include "exec/cuda/norm.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void rms_norm_kernel(const bf16* in, const bf16* weight, bf16* out, std::int64_t width) {
  __shared__ float shared32[32];
  const bf16* row_in = in + blockIdx.x * width;
  bf16* row_out = out + blockIdx.x * width;
  float squares = 0.0f;
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x) {
    const float value = __bfloat162float(row_in[col]);
    squares += value * value;
  }
  const float inverse = rsqrtf(block_sum(squares, shared32) / static_cast<float>(width) + 1e-6f);
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x)
    row_out[col] = __float2bfloat16(__bfloat162float(row_in[col]) * inverse * __bfloat162float(weight[col]));
}

}  // namespace

void rms_norm(const bf16* in, const bf16* weight, bf16* out, std::int64_t rows, std::int64_t width,
              cudaStream_t stream) {
  if (rows <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(in, weight, out, width);
}

}  // namespace calo::exec::cuda
