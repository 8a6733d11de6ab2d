// Device operands of one attention shape for the CUDA benchmarks of bench/exec_gpu: random bf16 inputs,
// output and gradient buffers, the cuDNN softmax statistics and the fallback's score blocks, freed on scope
// exit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/cuda/attention.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/init.cuh"
#include "graph/graph.h"

namespace calo::bench {

/// Every buffer an attention call of `shape` reads or writes (exec::cuda::AttentionBuffers), on the device.
class AttentionOperands {
 public:
  /// q, k, v, o and d_out random in [-1, 1) (seeds first_seed .. first_seed + 4, filled on `stream`); the
  /// gradients, stats and score blocks are left as allocated.
  AttentionOperands(const graph::AttentionShape& shape, std::uint64_t first_seed, cudaStream_t stream) {
    const std::int64_t q_values = exec::cuda::attention_query_values(shape);
    const std::int64_t kv_values = exec::cuda::attention_key_values(shape);
    const std::int64_t score_values = exec::cuda::attention_score_block_values(shape);
    buffers.q = random_bf16(q_values, first_seed, stream);
    buffers.k = random_bf16(kv_values, first_seed + 1, stream);
    buffers.v = random_bf16(kv_values, first_seed + 2, stream);
    buffers.o = random_bf16(q_values, first_seed + 3, stream);
    buffers.d_out = random_bf16(q_values, first_seed + 4, stream);
    buffers.d_q = static_cast<exec::cuda::bf16*>(allocate(q_values * 2));
    buffers.d_k = static_cast<exec::cuda::bf16*>(allocate(kv_values * 2));
    buffers.d_v = static_cast<exec::cuda::bf16*>(allocate(kv_values * 2));
    buffers.scores = static_cast<exec::cuda::bf16*>(allocate(score_values * 2));
    buffers.dscores = static_cast<exec::cuda::bf16*>(allocate(score_values * 2));
    buffers.stats = static_cast<float*>(allocate(exec::cuda::attention_stats_values(shape) * 4));
  }
  ~AttentionOperands() {
    for (void* pointer : allocations_) cudaFree(pointer);
  }
  AttentionOperands(const AttentionOperands&) = delete;
  AttentionOperands& operator=(const AttentionOperands&) = delete;

  /// A device buffer of at least `bytes` (256 at the least) that lives as long as the operands.
  void* allocate(std::int64_t bytes) {
    void* pointer = nullptr;
    CALO_CUDA(cudaMalloc(&pointer, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 256))));
    allocations_.push_back(pointer);
    return pointer;
  }

  exec::cuda::AttentionBuffers buffers;  ///< the call's operands

 private:
  exec::cuda::bf16* random_bf16(std::int64_t values, std::uint64_t seed, cudaStream_t stream) {
    auto* pointer = static_cast<exec::cuda::bf16*>(allocate(values * 2));
    exec::cuda::fill_random_bf16(pointer, values, seed, 1.0f, stream);
    return pointer;
  }
  std::vector<void*> allocations_;
};

}  // namespace calo::bench
