// SwiGLU activation kernel.
#include "exec/cuda/activation.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void swiglu_kernel(const bf16* in, bf16* out, std::int64_t rows, std::int64_t width) {
  const std::int64_t count = rows * width;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = at / width;
    const std::int64_t col = at % width;
    const float gate = __bfloat162float(in[row * 2 * width + col]);
    const float up = __bfloat162float(in[row * 2 * width + width + col]);
    out[at] = __float2bfloat16(gate / (1.0f + __expf(-gate)) * up);
  }
}

}  // namespace

void swiglu(const bf16* in, bf16* out, std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  swiglu_kernel<<<blocks_for(rows * width), kThreads, 0, stream>>>(in, out, rows, width);
}

}  // namespace calo::exec::cuda
