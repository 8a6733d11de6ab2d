// Pointwise kernels: RoPE, residual add, embedding gather.
#include "exec/cuda/pointwise.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void rope_kernel(const bf16* in, bf16* out, std::int64_t rows, std::int64_t head_dim,
                            std::int64_t positions) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t pairs = rows * half;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < pairs;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = at / half;
    const std::int64_t pair = at % half;
    const float position = static_cast<float>(row % positions);
    const float frequency =
        __powf(500000.0f, -2.0f * static_cast<float>(pair) / static_cast<float>(head_dim));
    float sine = 0.0f;
    float cosine = 0.0f;
    __sincosf(position * frequency, &sine, &cosine);
    const float x0 = __bfloat162float(in[row * head_dim + pair]);
    const float x1 = __bfloat162float(in[row * head_dim + pair + half]);
    out[row * head_dim + pair] = __float2bfloat16(x0 * cosine - x1 * sine);
    out[row * head_dim + pair + half] = __float2bfloat16(x1 * cosine + x0 * sine);
  }
}

__global__ void residual_add_kernel(const bf16* a, const bf16* b, bf16* out, std::int64_t count) {
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[at] = __float2bfloat16(__bfloat162float(a[at]) + __bfloat162float(b[at]));
}

__global__ void embedding_gather_kernel(const bf16* table, const std::int32_t* tokens, bf16* out,
                                        std::int64_t rows, std::int64_t width) {
  const std::int64_t count = rows * width;
  for (std::int64_t at = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; at < count;
       at += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = at / width;
    out[at] = table[static_cast<std::int64_t>(tokens[row]) * width + at % width];
  }
}

}  // namespace

void rope(const bf16* in, bf16* out, std::int64_t rows, std::int64_t head_dim, std::int64_t positions,
          cudaStream_t stream) {
  rope_kernel<<<blocks_for(rows * head_dim / 2), kThreads, 0, stream>>>(in, out, rows, head_dim,
                                                                        positions < 1 ? 1 : positions);
}

void residual_add(const bf16* a, const bf16* b, bf16* out, std::int64_t count, cudaStream_t stream) {
  residual_add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(a, b, out, count);
}

void embedding_gather(const bf16* table, const std::int32_t* tokens, bf16* out, std::int64_t rows,
                      std::int64_t width, cudaStream_t stream) {
  embedding_gather_kernel<<<blocks_for(rows * width), kThreads, 0, stream>>>(table, tokens, out, rows, width);
}

}  // namespace calo::exec::cuda
