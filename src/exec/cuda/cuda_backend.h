// CUDA backend: one GPU per rank; cuBLASLt GEMMs (bf16, fp32 accumulate), fallback attention (blocked
// cuBLASLt GEMMs + softmax kernels), fused elementwise kernels, AdamW, and NCCL for collectives and
// pipeline send/recv (p2p ops of one Op::p2p_batch posted in one ncclGroupStart/End). One cudaStream_t per
// graph stream, cudaEvent_t for cross-stream dependencies and timing. See docs/EXECUTION_CUDA.md.
#pragma once

#include <string>

#include "exec/backend.h"

namespace calo::exec {

/// Nominal dense bf16 peak FLOP/s of a GPU by product name (0 when unknown) and its source text.
double nominal_bf16_peak_flops(const std::string& device_name, std::string* source = nullptr);

/// The CUDA backend's factory ("cuda"): what libcalo_exec_cuda.so hands to calo (exec/cuda_module.h) and what
/// register_cuda_backend() adds where a binary links the backend itself (its tests and benchmarks).
BackendFactory cuda_backend_factory();

}  // namespace calo::exec
