// SwiGLU activation kernel: out = silu(gate) * up, gate and up the two halves of each input row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// SwiGLU over `rows` rows: in is [rows, 2*width] (gate | up), out is [rows, width].
void swiglu(const bf16* in, bf16* out, std::int64_t rows, std::int64_t width, cudaStream_t stream);

}  // namespace calo::exec::cuda
