// Softmax cross-entropy kernel: one block per row, three passes (max, sum, gradient).
#include "exec/cuda/loss.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void cross_entropy_kernel(const bf16* logits, const std::int32_t* targets, bf16* grad, float* loss,
                                     std::int64_t width) {
  __shared__ float shared32[32];
  const bf16* row = logits + blockIdx.x * width;
  bf16* row_grad = grad + blockIdx.x * width;
  const auto [max_value, sum] = row_softmax(row, width, shared32);
  const std::int64_t target = targets[blockIdx.x] % width;
  const float inverse = 1.0f / sum;
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x) {
    const float probability = __expf(__bfloat162float(row[col]) - max_value) * inverse;
    row_grad[col] = __float2bfloat16(probability - (col == target ? 1.0f : 0.0f));
  }
  if (threadIdx.x == 0) loss[blockIdx.x] = logf(sum) + max_value - __bfloat162float(row[target]);
}

}  // namespace

void cross_entropy(const bf16* logits, const std::int32_t* targets, bf16* grad, float* loss,
                   std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  if (rows <= 0) return;
  cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, grad, loss,
                                                                             width);
}

}  // namespace calo::exec::cuda
