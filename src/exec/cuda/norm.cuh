// RMSNorm kernel: y = x / sqrt(mean(x^2) + eps) * weight over rows of `width` (bf16 in/out, fp32 math).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// RMSNorm of `rows` rows of `width` values: reads in + weight, writes out (one block per row).
void rms_norm(const bf16* in, const bf16* weight, bf16* out, std::int64_t rows, std::int64_t width,
              cudaStream_t stream);

}  // namespace calo::exec::cuda
