// Attention softmax kernels (one block per score row).
#include "exec/cuda/softmax.cuh"

namespace calo::exec::cuda {
namespace {

__device__ __forceinline__ std::int64_t visible_columns(const ScoreBlock& block, std::int64_t row) {
  const std::int64_t visible = block.causal ? block.first_row + row + 1 : block.columns;
  return visible < block.columns ? visible : block.columns;
}

__global__ void causal_softmax_kernel(bf16* scores, ScoreBlock block) {
  __shared__ float shared32[32];
  const std::int64_t matrix = blockIdx.x / block.rows;
  const std::int64_t row = blockIdx.x % block.rows;
  bf16* values = scores + matrix * block.batch_stride + row * block.ld;
  const std::int64_t visible = visible_columns(block, row);
  const auto [max_value, sum] = row_softmax(values, visible, shared32);
  const float inverse = 1.0f / sum;
  for (std::int64_t col = threadIdx.x; col < block.columns; col += blockDim.x) {
    const float probability =
        col < visible ? __expf(__bfloat162float(values[col]) - max_value) * inverse : 0.0f;
    values[col] = __float2bfloat16(probability);
  }
}

__global__ void softmax_backward_kernel(const bf16* prob, bf16* dprob, const bf16* d_out, const bf16* out,
                                        std::int64_t qkv_stride, std::int64_t head_dim, float scale,
                                        ScoreBlock block) {
  __shared__ float shared32[32];
  const std::int64_t matrix = blockIdx.x / block.rows;
  const std::int64_t row = blockIdx.x % block.rows;
  const std::int64_t offset = matrix * block.batch_stride + row * block.ld;
  const bf16* d_out_row = d_out + matrix * qkv_stride + row * head_dim;
  const bf16* out_row = out + matrix * qkv_stride + row * head_dim;
  float dot = 0.0f;
  for (std::int64_t col = threadIdx.x; col < head_dim; col += blockDim.x)
    dot += __bfloat162float(d_out_row[col]) * __bfloat162float(out_row[col]);
  dot = block_sum(dot, shared32);
  const std::int64_t visible = visible_columns(block, row);
  for (std::int64_t col = threadIdx.x; col < block.columns; col += blockDim.x) {
    const float value = col < visible ? __bfloat162float(prob[offset + col]) *
                                            (__bfloat162float(dprob[offset + col]) - dot) * scale
                                      : 0.0f;
    dprob[offset + col] = __float2bfloat16(value);
  }
}

}  // namespace

void causal_softmax(bf16* scores, const ScoreBlock& block, cudaStream_t stream) {
  const std::int64_t rows = block.batch * block.rows;
  if (rows <= 0) return;
  causal_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, block);
}

void softmax_backward(const bf16* prob, bf16* dprob, const bf16* d_out, const bf16* out,
                      std::int64_t qkv_stride, std::int64_t head_dim, float scale, const ScoreBlock& block,
                      cudaStream_t stream) {
  const std::int64_t rows = block.batch * block.rows;
  if (rows <= 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      prob, dprob, d_out, out, qkv_stride, head_dim, scale, block);
}

}  // namespace calo::exec::cuda
