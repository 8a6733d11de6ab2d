// Attention softmax kernels of the fallback attention (exec/cuda/attention.h): causal row softmax over a
// block of score rows (forward), and dS = P * (dP - rowsum(dO * O)) * scale (backward).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "exec/cuda/common.cuh"

namespace calo::exec::cuda {

/// Score block geometry: `batch` matrices (stride `batch_stride` values), `rows` rows each with leading
/// dimension `ld`; row r of the block is query position first_row + r and sees keys [0, first_row + r]
/// (causal) or [0, columns) otherwise; columns in [visible, columns) are written as zero.
struct ScoreBlock {
  std::int64_t batch = 1;         ///< matrices in the block (kv heads of one call)
  std::int64_t batch_stride = 0;  ///< values between matrices
  std::int64_t rows = 0;          ///< query rows per matrix
  std::int64_t columns = 0;       ///< key columns computed for these rows
  std::int64_t ld = 0;            ///< leading dimension (values per row)
  std::int64_t first_row = 0;     ///< query position of row 0
  bool causal = true;             ///< causal mask
};

/// In place: scores (already scaled) -> probabilities, row-wise over the visible columns.
void causal_softmax(bf16* scores, const ScoreBlock& block, cudaStream_t stream);

/// In place: dprob -> dscore = prob * (dprob - rowsum(d_out * out)) * scale. d_out/out rows have `head_dim`
/// values; matrix b of the block uses rows at d_out + b * qkv_stride + r * head_dim (same for out).
void softmax_backward(const bf16* prob, bf16* dprob, const bf16* d_out, const bf16* out,
                      std::int64_t qkv_stride, std::int64_t head_dim, float scale, const ScoreBlock& block,
                      cudaStream_t stream);

}  // namespace calo::exec::cuda
