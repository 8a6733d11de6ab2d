// Pointwise kernels: rotary position embedding, residual add, embedding gather.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// RoPE on rows of `head_dim` values (position = row index % positions): out = rotate(in).
void rope(const bf16* in, bf16* out, std::int64_t rows, std::int64_t head_dim, std::int64_t positions,
          cudaStream_t stream);
/// out = a + b over `count` values.
void residual_add(const bf16* a, const bf16* b, bf16* out, std::int64_t count, cudaStream_t stream);
/// out[row] = table[tokens[row]] for `rows` rows of `width` values.
void embedding_gather(const bf16* table, const std::int32_t* tokens, bf16* out, std::int64_t rows,
                      std::int64_t width, cudaStream_t stream);

}  // namespace calo::exec::cuda
