// graph::OpKind::kAttention on CUDA: cuDNN SDPA (cudnn_attention.cpp) where CALO_ATTENTION and the shape
// allow, else the cuBLASLt fallback (attention.cpp); --check compares rows 0 and seq-1 of the last head of
// the last sequence of a forward with a host reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/cuda/attention.h"
#include "exec/cuda/cuda_internal.h"

namespace calo::exec::cuda {
namespace {

/// Whether `shape` runs on cuDNN SDPA under CALO_ATTENTION; logs (rank 0, once) why not when it falls back.
bool choose_cudnn_attention(CudaContext& context, const graph::AttentionShape& shape) {
  std::string why;
  if (context.attention_mode == AttentionMode::kFallback) {
    why = "CALO_ATTENTION=fallback";
  } else {
    if (!context.cudnn_attention) context.cudnn_attention = std::make_unique<CudnnAttention>();
    why = context.cudnn_attention->prepare(shape);
    if (why.empty()) return true;
    if (context.attention_mode == AttentionMode::kCudnn)
      throw RuntimeFailure(fmt::format("rank {}: CALO_ATTENTION=cudnn but cuDNN SDPA cannot run {}: {}",
                                       context.rank, describe_attention_shape(shape), why));
    why = fmt::format("cuDNN SDPA unsupported for shape {}: {}", describe_attention_shape(shape), why);
  }
  if (!context.attention_fallback_logged && context.rank == 0 && context.config.notice)
    context.config.notice(fmt::format("calo: attention: {}; using the cuBLASLt fallback", why));
  context.attention_fallback_logged = true;
  return false;
}

/// Grows the cuDNN attention workspace of graph stream `kind` to at least `bytes` (prepare only: nothing
/// runs).
void reserve_attention_workspace(CudaContext& context, graph::Stream kind, std::int64_t bytes) {
  auto& [pointer, size] = context.attention_workspace[static_cast<int>(kind)];
  if (bytes <= size) return;
  if (pointer != nullptr) {
    CALO_CUDA(cudaFree(pointer));
    context.allocations.erase(std::find(context.allocations.begin(), context.allocations.end(), pointer));
    context.allocated_bytes -= size;
  }
  pointer = context.allocate(static_cast<std::size_t>(bytes), "attn.workspace");
  size = bytes;
}

/// Attention buffers [q, k, v, o, scores, dscores, d_out, d_q, d_k, d_v, stats]: the cuDNN path needs the
/// fp32 stats (log-sum-exp) and a workspace per stream, the fallback the score blocks
/// (docs/EXECUTION_CUDA.md).
void prepare_attention(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t q_values = attention_query_values(shape);
  const std::int64_t kv_values = attention_key_values(shape);
  prepared.cudnn_attention = choose_cudnn_attention(context, shape);
  prepared.buffers.assign(11, nullptr);
  prepared.buffers[0] = context.shared("attn.q", q_values, seed);
  prepared.buffers[1] = context.shared("attn.k", kv_values, seed + 1);
  prepared.buffers[2] = context.shared("attn.v", kv_values, seed + 2);
  prepared.buffers[3] = context.shared("attn.o", q_values, seed + 3);
  if (shape.backward) {
    prepared.buffers[6] = context.shared("attn.do", q_values, seed + 6);
    prepared.buffers[7] = context.shared("attn.dq", q_values, seed + 7);
    prepared.buffers[8] = context.shared("attn.dk", kv_values, seed + 8);
    prepared.buffers[9] = context.shared("attn.dv", kv_values, seed + 9);
  }
  if (prepared.cudnn_attention) {
    // Shared by (role, size) like o: the forward of a shape writes it, the backward of that shape reads it.
    prepared.buffers[10] =
        context.shared_f32("attn.stats", attention_stats_values(shape), seed + 10, 1.0f, false);
    reserve_attention_workspace(context, prepared.rank_op.op.stream,
                                context.cudnn_attention->workspace_bytes(shape));
  } else {
    const std::int64_t score_values = attention_score_block_values(shape);
    prepared.buffers[4] = context.shared("attn.scores", score_values, seed + 4);
    if (shape.backward) prepared.buffers[5] = context.shared("attn.dscores", score_values, seed + 5);
  }
  ++(prepared.cudnn_attention ? context.attention_ops_cudnn : context.attention_ops_fallback);
  context.device.attention_impl = context.attention_ops_cudnn > 0 && context.attention_ops_fallback > 0
                                      ? fmt::format("{}+{}", kAttentionImplCudnn, kAttentionImplFallback)
                                  : context.attention_ops_cudnn > 0 ? kAttentionImplCudnn
                                                                    : kAttentionImplFallback;
}

/// Offset (values) of the last head of the last sequence in the attention output: --check verifies its
/// rows 0 and seq-1.
std::int64_t attention_checked_head(const graph::AttentionShape& shape) {
  return ((std::int64_t{shape.batch} - 1) * shape.heads + shape.heads - 1) * shape.seq * shape.head_dim;
}

/// Row 0 of the checked head of `op`'s output (where an injected attention fault goes).
void* attention_checked_row(const CudaOp& op) {
  return static_cast<bf16*>(op.buffers[3]) + attention_checked_head(op.rank_op.op.attention);
}

void snapshot_attention(CudaContext& context, CudaOp& op, cudaStream_t stream) {
  const auto& shape = op.rank_op.op.attention;
  const std::int64_t head_base = attention_checked_head(shape);
  const std::int64_t d = shape.head_dim;
  context.snapshot_range(op, op.buffers[3], {{head_base, d}, {head_base + (shape.seq - 1) * d, d}}, stream);
}

/// The unit's run (named apart from the fallback's cuda::run_attention, which it calls).
void run_attention_op(CudaContext& context, CudaOp& prepared, cudaStream_t stream) {
  const graph::Op& op = prepared.rank_op.op;
  AttentionBuffers buffers;
  buffers.q = static_cast<const bf16*>(prepared.buffers[0]);
  buffers.k = static_cast<const bf16*>(prepared.buffers[1]);
  buffers.v = static_cast<const bf16*>(prepared.buffers[2]);
  buffers.o = static_cast<bf16*>(prepared.buffers[3]);
  buffers.scores = static_cast<bf16*>(prepared.buffers[4]);
  buffers.dscores = static_cast<bf16*>(prepared.buffers[5]);
  buffers.d_out = static_cast<const bf16*>(prepared.buffers[6]);
  buffers.d_q = static_cast<bf16*>(prepared.buffers[7]);
  buffers.d_k = static_cast<bf16*>(prepared.buffers[8]);
  buffers.d_v = static_cast<bf16*>(prepared.buffers[9]);
  buffers.stats = static_cast<float*>(prepared.buffers[10]);
  if (prepared.cudnn_attention) {
    context.cudnn_attention->run(op.attention, buffers,
                                 context.attention_workspace[static_cast<int>(op.stream)].first, stream);
  } else {
    cuda::run_attention(context.gemm_runner(stream), op.attention, buffers, stream);
  }
  if (!op.attention.backward) {
    if (context.inject("attention")) context.corrupt(attention_checked_row(prepared), stream);
    if (context.config.check) snapshot_attention(context, prepared, stream);
  }
}

void verify_attention(CudaContext& context, CudaOp& op) {
  const auto& shape = op.rank_op.op.attention;
  const std::int64_t s = shape.seq;
  const std::int64_t keys = shape.keys();
  const std::int64_t shift = keys - s;  // bottom-right causal: row r sees keys [0, shift + r]
  const std::int64_t d = shape.head_dim;
  const std::int64_t group = std::max(1, shape.heads / std::max(1, shape.kv_heads));
  const std::int64_t head = shape.heads - 1;
  const std::int64_t batch = shape.batch - 1;
  const std::int64_t kv_head = head / group;
  const std::int64_t q_base = (batch * shape.heads + head) * s * d;
  const std::int64_t kv_base = (batch * shape.kv_heads + kv_head) * keys * d;
  const auto q = context.read_strided(op.buffers[0], q_base, s * d, 1);
  const auto k = context.read_strided(op.buffers[1], kv_base, keys * d, 1);
  const auto v = context.read_strided(op.buffers[2], kv_base, keys * d, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::int64_t wrong = 0;
  std::string failure;
  int row_slot = 0;
  for (const std::int64_t row : {std::int64_t{0}, s - 1}) {
    const std::int64_t visible = shape.causal ? shift + row + 1 : keys;
    std::vector<double> p(static_cast<size_t>(visible));
    double max_score = -INFINITY;
    for (std::int64_t col = 0; col < visible; ++col) {
      double dot = 0;
      for (std::int64_t x = 0; x < d; ++x)
        dot += q[static_cast<size_t>(row * d + x)] * k[static_cast<size_t>(col * d + x)];
      p[static_cast<size_t>(col)] = dot * scale;
      max_score = std::max(max_score, p[static_cast<size_t>(col)]);
    }
    double sum = 0;
    for (double& value : p) sum += (value = std::exp(value - max_score));
    for (std::int64_t x = 0; x < d; ++x) {
      double want = 0;
      for (std::int64_t col = 0; col < visible; ++col)
        want += p[static_cast<size_t>(col)] / sum * v[static_cast<size_t>(col * d + x)];
      const double got = bf16_to_float(op.snapshot.bf16_values()[row_slot * d + x]);
      // bf16 scores and probabilities: a few bf16 ulps of the output scale (values are O(1)).
      if (std::abs(got - want) > 3e-2 * (1.0 + std::abs(want))) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): O[{},{}] = {} but the host reference says {}", op.index,
                                graph::describe(op.rank_op.op), row, x, got, want);
      }
    }
    ++row_slot;
  }
  context.checks.add(2 * d, wrong, failure);
}

}  // namespace

const CudaOpUnit kAttentionUnit = {prepare_attention, run_attention_op, verify_attention};

}  // namespace calo::exec::cuda
