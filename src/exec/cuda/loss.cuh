// Softmax cross-entropy kernel (loss and gradient in one pass over the logits of each row).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// For each of `rows` rows of `width` logits: loss[row] = logsumexp - logit[target], grad = softmax - onehot.
void cross_entropy(const bf16* logits, const std::int32_t* targets, bf16* grad, float* loss,
                   std::int64_t rows, std::int64_t width, cudaStream_t stream);

}  // namespace calo::exec::cuda
