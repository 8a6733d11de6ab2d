// FP8 casts (e4m3, dynamic tensorwise scaling as torchao's default recipe): the amax of a bf16 tensor, and
// its cast to FP8 with the scale that maps the amax to e4m3's largest finite value (448).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// Largest finite e4m3 value.
inline constexpr float kE4m3Max = 448.0f;
/// Floats of a tensor's scales buffer: the amax at [0], the dequantisation scale at [kFp8ScaleIndex], 16
/// bytes in (cuBLASLt refuses a scale pointer that is not 16-byte aligned).
inline constexpr int kFp8ScaleFloats = 8;
/// Where the dequantisation scale sits in a scales buffer.
inline constexpr int kFp8ScaleIndex = 4;

/// scales[0] = max |in| over `count` values (one read of the tensor); `scales` holds kFp8ScaleFloats.
void fp8_amax(const bf16* in, std::int64_t count, float* scales, cudaStream_t stream);
/// out = e4m3(in * 448 / scales[0]) saturated to the finite range (a second read of the tensor, one FP8
/// write); scales[kFp8ScaleIndex] = scales[0] / 448, the dequantisation scale a GEMM multiplies them by.
void fp8_cast(const bf16* in, std::int64_t count, float* scales, std::uint8_t* out, cudaStream_t stream);
/// out = in * factor (one float on the device): a wrong dequantisation scale for --check's fault injection.
void fp8_scale_times(const float* in, float factor, float* out, cudaStream_t stream);

}  // namespace calo::exec::cuda
