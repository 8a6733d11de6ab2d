// MoE routing kernel: top-k over router logits per token, then the token's hidden row scaled by its gate
// weight and written to its permuted (expert-grouped) position.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// Routes `rows` tokens of `width` values: router_logits is [rows, experts]; out row = permuted in row times
/// the softmax weight of the token's top-1 of its top-k experts.
void route_tokens(const bf16* in, const bf16* router_logits, bf16* out, std::int64_t rows, std::int64_t width,
                  int experts, int top_k, cudaStream_t stream);

}  // namespace calo::exec::cuda
