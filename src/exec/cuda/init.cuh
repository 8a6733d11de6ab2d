// Operand initialization kernels: random values (never zero) and the --check value pattern.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// Fills `count` bf16 values with ±[0.5,1.5) * scale from (seed, index).
void fill_random_bf16(bf16* data, std::int64_t count, std::uint64_t seed, float scale, cudaStream_t stream);
/// Fills `count` fp32 values with ±[0.5,1.5) * scale; absolute values when `positive`.
void fill_random_f32(float* data, std::int64_t count, std::uint64_t seed, float scale, bool positive,
                     cudaStream_t stream);
/// Fills element i with check_value(rank, index_offset + i) (see exec/cuda/cuda_backend.cpp).
void fill_check_bf16(bf16* data, std::int64_t count, int rank, std::int64_t index_offset,
                     cudaStream_t stream);
/// Fills `count` int32 indices uniformly in [0, modulo).
void fill_indices(std::int32_t* data, std::int64_t count, std::uint64_t seed, std::int32_t modulo,
                  cudaStream_t stream);

}  // namespace calo::exec::cuda
