// Fallback attention (documented in docs/EXECUTION_CUDA.md): causal GQA attention as blocked cuBLASLt GEMMs
// and softmax kernels. Query rows are split into blocks; block i multiplies only keys [0, (i+1) * block), so
// the causal half is skipped, and the score block ([kv heads, block, seq] bf16) is the only scratch.
// Backward recomputes the probabilities (as flash attention does) and forms dV, dP, dS, dQ, dK.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"
#include "exec/cuda/gemm.h"
#include "graph/graph.h"

namespace calo::exec::cuda {

/// Device buffers of one attention op; q/o/d_out/d_q are [batch, heads, seq, head_dim], k/v/d_k/d_v are
/// [batch, kv_heads, keys(), head_dim] (keys() = seq outside context parallelism), scores/dscores hold one
/// score block (fallback only).
struct AttentionBuffers {
  const bf16* q = nullptr;      ///< queries
  const bf16* k = nullptr;      ///< keys
  const bf16* v = nullptr;      ///< values
  bf16* o = nullptr;            ///< output (forward writes it; backward reads it)
  const bf16* d_out = nullptr;  ///< backward: gradient of the output
  bf16* d_q = nullptr;          ///< backward: gradient of the queries
  bf16* d_k = nullptr;          ///< backward: gradient of the keys (accumulated over the group)
  bf16* d_v = nullptr;          ///< backward: gradient of the values (accumulated over the group)
  bf16* scores = nullptr;       ///< scratch of attention_score_block_values() values
  bf16* dscores = nullptr;      ///< backward scratch of the same size
  float* stats = nullptr;  ///< cuDNN only: softmax log-sum-exp [batch, heads, seq, 1] (fwd writes, bwd reads)
};

/// Values of one query-side tensor of `shape` (q, o, d_out, d_q): batch * heads * seq * head_dim.
std::int64_t attention_query_values(const graph::AttentionShape& shape);

/// Values of one key-side tensor of `shape` (k, v, d_k, d_v): batch * kv_heads * keys() * head_dim.
std::int64_t attention_key_values(const graph::AttentionShape& shape);

/// Query rows per block for sequence length `seq` (a divisor of seq).
std::int64_t attention_block_rows(std::int64_t seq);

/// Values in one score block of `shape`.
std::int64_t attention_score_block_values(const graph::AttentionShape& shape);

/// Enqueues forward (shape.backward false) or backward attention on `stream`; with keys() != seq the causal
/// mask is bottom-right aligned (query row r sees keys [0, keys() - seq + r]).
void run_attention(GemmRunner& gemm, const graph::AttentionShape& shape, const AttentionBuffers& buffers,
                   cudaStream_t stream);

}  // namespace calo::exec::cuda
