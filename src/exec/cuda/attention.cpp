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

void run_attention(GemmRunner& gemm, const graph::AttentionShape& shape, const AttentionBuffers& buffers,
                   cudaStream_t stream) {
  const std::int64_t s = shape.seq;        // query rows
  const std::int64_t keys = shape.keys();  // key rows (more or fewer than s on a context-parallel step)
  const std::int64_t shift = keys - s;     // bottom-right causal: query row r sees keys [0, shift + r]
  const std::int64_t d = shape.head_dim;
  const std::int64_t kv_heads = std::max(1, shape.kv_heads);
  const std::int64_t group = std::max<std::int64_t>(1, shape.heads / kv_heads);
  const std::int64_t block_rows = attention_block_rows(s);
  const std::int64_t blocks = s / block_rows;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const std::int64_t score_stride = block_rows * keys;  // per kv head in the score block
  if (shape.backward) {
    const std::size_t kv_bytes = static_cast<std::size_t>(shape.batch) * kv_heads * keys * d * sizeof(bf16);
    CALO_CUDA(cudaMemsetAsync(buffers.d_k, 0, kv_bytes, stream));
    CALO_CUDA(cudaMemsetAsync(buffers.d_v, 0, kv_bytes, stream));
  }
  for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
    for (std::int64_t member = 0; member < group; ++member) {
      // Matrix b of a batched call is kv head b; its query head is b * group + member.
      const std::int64_t q_base = ((batch * shape.heads + member) * s) * d;
      const std::int64_t kv_base = (batch * kv_heads * keys) * d;
      const std::int64_t q_stride = group * s * d;
      const std::int64_t kv_stride = keys * d;
      for (std::int64_t block = 0; block < blocks; ++block) {
        const std::int64_t first_row = block * block_rows;
        const std::int64_t columns = shape.causal ? shift + first_row + block_rows : keys;
        ScoreBlock geometry;
        geometry.batch = kv_heads;
        geometry.batch_stride = score_stride;
        geometry.rows = block_rows;
        geometry.columns = columns;
        geometry.ld = keys;
        geometry.first_row = shift + first_row;  // key position of the block's first query row
        geometry.causal = shape.causal;
        const std::int64_t row_offset = first_row * d;
        // S = scale * Q_blk K^T
        GemmCall scores;
        scores.m = block_rows;
        scores.n = columns;
        scores.k = d;
        scores.transpose_b = true;
        scores.lda = d;
        scores.ldb = d;
        scores.ldc = keys;
        scores.batch = kv_heads;
        scores.stride_a = q_stride;
        scores.stride_b = kv_stride;
        scores.stride_c = score_stride;
        scores.alpha = scale;
        gemm.run(scores, buffers.q + q_base + row_offset, buffers.k + kv_base, buffers.scores, stream);
        causal_softmax(buffers.scores, geometry, stream);
        CALO_CUDA_LAUNCH();
        if (!shape.backward) {
          // O_blk = P V
          GemmCall output;
          output.m = block_rows;
          output.n = d;
          output.k = columns;
          output.lda = keys;
          output.ldb = d;
          output.ldc = d;
          output.batch = kv_heads;
          output.stride_a = score_stride;
          output.stride_b = kv_stride;
          output.stride_c = q_stride;
          gemm.run(output, buffers.scores, buffers.v + kv_base, buffers.o + q_base + row_offset, stream);
          continue;
        }
        const bf16* d_out = buffers.d_out + q_base + row_offset;
        // dV[0:cols] += P^T dO_blk
        GemmCall d_v;
        d_v.m = columns;
        d_v.n = d;
        d_v.k = block_rows;
        d_v.transpose_a = true;
        d_v.lda = keys;
        d_v.ldb = d;
        d_v.ldc = d;
        d_v.batch = kv_heads;
        d_v.stride_a = score_stride;
        d_v.stride_b = q_stride;
        d_v.stride_c = kv_stride;
        d_v.beta = 1.0f;
        gemm.run(d_v, buffers.scores, d_out, buffers.d_v + kv_base, stream);
        // dP = dO_blk V^T
        GemmCall d_prob;
        d_prob.m = block_rows;
        d_prob.n = columns;
        d_prob.k = d;
        d_prob.transpose_b = true;
        d_prob.lda = d;
        d_prob.ldb = d;
        d_prob.ldc = keys;
        d_prob.batch = kv_heads;
        d_prob.stride_a = q_stride;
        d_prob.stride_b = kv_stride;
        d_prob.stride_c = score_stride;
        gemm.run(d_prob, d_out, buffers.v + kv_base, buffers.dscores, stream);
        // dS = P (dP - rowsum(dO o O)) * scale
        softmax_backward(buffers.scores, buffers.dscores, d_out, buffers.o + q_base + row_offset, q_stride, d,
                         scale, geometry, stream);
        CALO_CUDA_LAUNCH();
        // dQ_blk = dS K[0:cols]
        GemmCall d_q;
        d_q.m = block_rows;
        d_q.n = d;
        d_q.k = columns;
        d_q.lda = keys;
        d_q.ldb = d;
        d_q.ldc = d;
        d_q.batch = kv_heads;
        d_q.stride_a = score_stride;
        d_q.stride_b = kv_stride;
        d_q.stride_c = q_stride;
        gemm.run(d_q, buffers.dscores, buffers.k + kv_base, buffers.d_q + q_base + row_offset, stream);
        // dK[0:cols] += dS^T Q_blk
        GemmCall d_k;
        d_k.m = columns;
        d_k.n = d;
        d_k.k = block_rows;
        d_k.transpose_a = true;
        d_k.lda = keys;
        d_k.ldb = d;
        d_k.ldc = d;
        d_k.batch = kv_heads;
        d_k.stride_a = score_stride;
        d_k.stride_b = q_stride;
        d_k.stride_c = kv_stride;
        d_k.beta = 1.0f;
        gemm.run(d_k, buffers.dscores, buffers.q + q_base + row_offset, buffers.d_k + kv_base, stream);
      }
    }
  }
}

}  // namespace calo::exec::cuda
