// Fallback attention: blocked causal QK^T / softmax / PV with cuBLASLt strided-batched GEMMs over kv heads.
#include "exec/cuda/attention.h"

#include <algorithm>
#include <cmath>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/softmax.cuh"

namespace calo::exec::cuda {

std::int64_t attention_query_values(const graph::AttentionShape& shape) {
  return std::int64_t{shape.batch} * shape.heads * shape.seq * shape.head_dim;
}

std::int64_t attention_key_values(const graph::AttentionShape& shape) {
  return std::int64_t{shape.batch} * shape.kv_heads * shape.keys() * shape.head_dim;
}

std::int64_t attention_block_rows(std::int64_t seq) {
  for (const std::int64_t blocks : {8, 4, 2}) {
    if (seq >= 1024 * blocks / 2 && seq % blocks == 0) return seq / blocks;
  }
  return seq;
}

std::int64_t attention_score_block_values(const graph::AttentionShape& shape) {
  return static_cast<std::int64_t>(std::max(1, shape.kv_heads)) * attention_block_rows(shape.seq) *
         shape.keys();
}

namespace {

/// Loop-invariant sizes of one attention op, in values (bf16 elements) unless named otherwise.
struct AttentionLayout {
  std::int64_t query_rows = 0;    ///< shape.seq
  std::int64_t keys = 0;          ///< key rows (more or fewer than query_rows on a context-parallel step)
  std::int64_t causal_shift = 0;  ///< bottom-right causal: query row r sees keys [0, causal_shift + r]
  std::int64_t head_dim = 0;      ///< values per head row
  std::int64_t kv_heads = 1;      ///< matrices per batched call (at least 1)
  std::int64_t group = 1;         ///< query heads per kv head
  std::int64_t block_rows = 0;    ///< query rows per block
  std::int64_t blocks = 0;        ///< blocks per query head
  float scale = 1.0f;             ///< softmax scale 1 / sqrt(head_dim)
  std::int64_t score_stride = 0;  ///< values between kv heads in the score block
  std::int64_t q_stride = 0;      ///< values between the query heads of one batched call
  std::int64_t kv_stride = 0;     ///< values between kv heads
};

/// One query block of one (batch, group member): where its operands start and how many keys it sees.
struct QueryBlock {
  std::int64_t q_offset = 0;  ///< first value of the block in q / o / d_out / d_q
  std::int64_t kv_base = 0;   ///< first value of the batch in k / v / d_k / d_v
  std::int64_t columns = 0;   ///< key columns computed for the block
  ScoreBlock score_geometry;  ///< the block's scores for the softmax kernels
};

/// Derives the loop-invariant sizes of `shape`.
AttentionLayout attention_layout(const graph::AttentionShape& shape) {
  AttentionLayout layout;
  layout.query_rows = shape.seq;
  layout.keys = shape.keys();
  layout.causal_shift = layout.keys - layout.query_rows;
  layout.head_dim = shape.head_dim;
  layout.kv_heads = std::max(1, shape.kv_heads);
  layout.group = std::max<std::int64_t>(1, shape.heads / layout.kv_heads);
  layout.block_rows = attention_block_rows(layout.query_rows);
  layout.blocks = layout.query_rows / layout.block_rows;
  layout.scale = 1.0f / std::sqrt(static_cast<float>(layout.head_dim));
  layout.score_stride = layout.block_rows * layout.keys;
  layout.q_stride = layout.group * layout.query_rows * layout.head_dim;
  layout.kv_stride = layout.keys * layout.head_dim;
  return layout;
}

/// Locates query block `block` of query head `member` of batch `batch` (matrix b of a batched call is kv
/// head b; its query head is b * group + member).
QueryBlock query_block(const graph::AttentionShape& shape, const AttentionLayout& layout, std::int64_t batch,
                       std::int64_t member, std::int64_t block) {
  const std::int64_t d = layout.head_dim;
  const std::int64_t first_row = block * layout.block_rows;
  QueryBlock query;
  query.q_offset = ((batch * shape.heads + member) * layout.query_rows) * d + first_row * d;
  query.kv_base = (batch * layout.kv_heads * layout.keys) * d;
  query.columns = shape.causal ? layout.causal_shift + first_row + layout.block_rows : layout.keys;
  ScoreBlock& geometry = query.score_geometry;
  geometry.batch = layout.kv_heads;
  geometry.batch_stride = layout.score_stride;
  geometry.rows = layout.block_rows;
  geometry.columns = query.columns;
  geometry.ld = layout.keys;
  geometry.first_row = layout.causal_shift + first_row;  // key position of the block's first query row
  geometry.causal = shape.causal;
  return query;
}

/// Row length and batch stride of one operand of the batched attention GEMMs, in values.
struct BatchedOperand {
  std::int64_t ld = 0;      ///< row length
  std::int64_t stride = 0;  ///< values between kv heads
};

/// A score block: rows of `keys` values, one per kv head.
BatchedOperand score_operand(const AttentionLayout& layout) {
  return {layout.keys, layout.score_stride};
}

/// A query-side block (q, o, d_out, d_q): head rows of the group's query heads.
BatchedOperand query_operand(const AttentionLayout& layout) {
  return {layout.head_dim, layout.q_stride};
}

/// Key-side rows (k, v, d_k, d_v): head rows of one kv head.
BatchedOperand kv_operand(const AttentionLayout& layout) {
  return {layout.head_dim, layout.kv_stride};
}

/// An [m, n] = [m, k] x [k, n] product batched over the kv heads, with operands `a`, `b` and `c`.
GemmCall batched_call(const AttentionLayout& layout, std::int64_t m, std::int64_t n, std::int64_t k,
                      BatchedOperand a, BatchedOperand b, BatchedOperand c) {
  return {.m = m,
          .n = n,
          .k = k,
          .lda = a.ld,
          .ldb = b.ld,
          .ldc = c.ld,
          .batch = layout.kv_heads,
          .stride_a = a.stride,
          .stride_b = b.stride,
          .stride_c = c.stride};
}

/// [block rows, columns] score-shaped product of a query-side block and key-side rows transposed (S, dP).
GemmCall rows_by_keys_call(const AttentionLayout& layout, std::int64_t columns) {
  GemmCall call = batched_call(layout, layout.block_rows, columns, layout.head_dim, query_operand(layout),
                               kv_operand(layout), score_operand(layout));
  call.transpose_b = true;
  return call;
}

/// [block rows, head_dim] query-side product of a score block and key-side rows (O, dQ).
GemmCall rows_by_head_dim_call(const AttentionLayout& layout, std::int64_t columns) {
  return batched_call(layout, layout.block_rows, layout.head_dim, columns, score_operand(layout),
                      kv_operand(layout), query_operand(layout));
}

/// [columns, head_dim] key-side gradient accumulated from a score block transposed and a query-side block
/// (dV, dK).
GemmCall keys_by_head_dim_call(const AttentionLayout& layout, std::int64_t columns) {
  GemmCall call = batched_call(layout, columns, layout.head_dim, layout.block_rows, score_operand(layout),
                               query_operand(layout), kv_operand(layout));
  call.transpose_a = true;
  call.beta = 1.0f;
  return call;
}

/// Zeroes d_k and d_v, which the backward blocks accumulate into.
void zero_kv_gradients(const graph::AttentionShape& shape, const AttentionLayout& layout,
                       const AttentionBuffers& buffers, cudaStream_t stream) {
  const std::size_t kv_bytes =
      static_cast<std::size_t>(shape.batch) * layout.kv_heads * layout.keys * layout.head_dim * sizeof(bf16);
  CALO_CUDA(cudaMemsetAsync(buffers.d_k, 0, kv_bytes, stream));
  CALO_CUDA(cudaMemsetAsync(buffers.d_v, 0, kv_bytes, stream));
}

/// Computes the block's probabilities P = softmax(scale * Q_blk K^T) into buffers.scores.
void block_probabilities(GemmRunner& gemm, const AttentionLayout& layout, const QueryBlock& query,
                         const AttentionBuffers& buffers, cudaStream_t stream) {
  GemmCall scores = rows_by_keys_call(layout, query.columns);
  scores.alpha = layout.scale;
  gemm.run(scores, buffers.q + query.q_offset, buffers.k + query.kv_base, buffers.scores, stream);
  causal_softmax(buffers.scores, query.score_geometry, stream);
  CALO_CUDA_LAUNCH();
}

/// Forward: O_blk = P V.
void block_forward(GemmRunner& gemm, const AttentionLayout& layout, const QueryBlock& query,
                   const AttentionBuffers& buffers, cudaStream_t stream) {
  gemm.run(rows_by_head_dim_call(layout, query.columns), buffers.scores, buffers.v + query.kv_base,
           buffers.o + query.q_offset, stream);
}

/// Backward from P: dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)) * scale, dQ = dS K, dK += dS^T Q.
void block_backward(GemmRunner& gemm, const AttentionLayout& layout, const QueryBlock& query,
                    const AttentionBuffers& buffers, cudaStream_t stream) {
  const std::int64_t columns = query.columns;
  const bf16* d_out = buffers.d_out + query.q_offset;
  // dV[0:cols] += P^T dO_blk
  gemm.run(keys_by_head_dim_call(layout, columns), buffers.scores, d_out, buffers.d_v + query.kv_base,
           stream);
  // dP = dO_blk V^T
  gemm.run(rows_by_keys_call(layout, columns), d_out, buffers.v + query.kv_base, buffers.dscores, stream);
  // dS = P (dP - rowsum(dO o O)) * scale
  softmax_backward(buffers.scores, buffers.dscores, d_out, buffers.o + query.q_offset, layout.q_stride,
                   layout.head_dim, layout.scale, query.score_geometry, stream);
  CALO_CUDA_LAUNCH();
  // dQ_blk = dS K[0:cols]
  gemm.run(rows_by_head_dim_call(layout, columns), buffers.dscores, buffers.k + query.kv_base,
           buffers.d_q + query.q_offset, stream);
  // dK[0:cols] += dS^T Q_blk
  gemm.run(keys_by_head_dim_call(layout, columns), buffers.dscores, buffers.q + query.q_offset,
           buffers.d_k + query.kv_base, stream);
}

}  // namespace

void run_attention(GemmRunner& gemm, const graph::AttentionShape& shape, const AttentionBuffers& buffers,
                   cudaStream_t stream) {
  const AttentionLayout layout = attention_layout(shape);
  if (shape.backward) zero_kv_gradients(shape, layout, buffers, stream);
  for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
    for (std::int64_t member = 0; member < layout.group; ++member) {
      for (std::int64_t block = 0; block < layout.blocks; ++block) {
        const QueryBlock query = query_block(shape, layout, batch, member, block);
        block_probabilities(gemm, layout, query, buffers, stream);
        if (shape.backward) {
          block_backward(gemm, layout, query, buffers, stream);
        } else {
          block_forward(gemm, layout, query, buffers, stream);
        }
      }
    }
  }
}

}  // namespace calo::exec::cuda
