// TensorEmitter: a parameter unit's compute with its tensor-parallel collectives (builder_internal.h).
#include "graph/builder_internal.h"

namespace calo::graph::detail {

namespace {

/// Unfused softmax FLOPs per score: scale, mask, max, subtract, exp, sum, divide.
constexpr double kSoftmaxFlopsPerScore = 7.0;
/// Softmax backward FLOPs per score: dS = P (dP - rowsum(dP o P)).
constexpr double kSoftmaxBackwardFlopsPerScore = 4.0;

}  // namespace

void TensorEmitter::unit_forward(int unit) {
  if (unit == kEmbeddingUnit) {
    embedding_forward();
  } else if (unit == kOutputUnit) {
    output_forward();
  } else {
    layer_forward();
  }
}

void TensorEmitter::unit_backward(int unit) {
  if (unit == kEmbeddingUnit) {
    embedding_backward();
  } else if (unit == kOutputUnit) {
    output_backward();
  } else {
    layer_backward();
  }
}

// ---- a transformer layer
// ------------------------------------------------------------------------------------

void TensorEmitter::layer_forward() {
  const std::int64_t tp = dims_.tp;
  norm(false);
  column_forward(GemmWeight::kQkv, (dims_.q_size + 2 * dims_.kv_size) / tp);
  rope(false);
  attention(false);
  row_forward(GemmWeight::kProj, dims_.q_size / tp);
  residual(false);
  norm(false);
  if (model_.is_moe()) {
    expert_.moe_forward();
  } else {
    column_forward(GemmWeight::kFc1, dims_.fc1_out / tp);
    core_.activation(static_cast<double>(dims_.tokens), dims_.ffn / tp, false);
    row_forward(GemmWeight::kFc2, dims_.ffn / tp);
  }
  residual(false);
}

void TensorEmitter::layer_backward() {
  const std::int64_t tp = dims_.tp;
  if (layout_.recompute == model::Recompute::kFull) {
    core_.phase = Phase::kRecompute;
    layer_forward();
    core_.phase = Phase::kBackward;
  }
  if (layout_.recompute == model::Recompute::kOp) op_recompute();
  residual(true);
  if (model_.is_moe()) {
    expert_.moe_backward();
  } else {
    row_backward(GemmWeight::kFc2, dims_.ffn / tp);
    core_.activation(static_cast<double>(dims_.tokens), dims_.ffn / tp, true);
    column_backward(GemmWeight::kFc1, dims_.fc1_out / tp);
  }
  norm(true);
  residual(true);
  row_backward(GemmWeight::kProj, dims_.q_size / tp);
  if (layout_.recompute == model::Recompute::kSelective) {
    core_.phase = Phase::kRecompute;
    attention(false);
    core_.phase = Phase::kBackward;
  }
  attention(true);
  rope(true);
  column_backward(GemmWeight::kQkv, (dims_.q_size + 2 * dims_.kv_size) / tp);
  norm(true);
}

/// torchtitan's op-level selective checkpointing, as its backward reaches the layer: the ops its policy did
/// not save run again (the norms, the K projection, RoPE, the output projection, the residual, the FFN's up
/// projection and its activation); their tensor-parallel collectives are not re-run (the saved reduce-scatter
/// outputs stand in; an all-gather before a recomputed matmul is left out of the model).
void TensorEmitter::op_recompute() {
  const std::int64_t tp = dims_.tp;
  core_.phase = Phase::kRecompute;
  norm(false);
  core_.gemm(GemmWeight::kQkv, GemmPass::kForward, dims_.tokens, dims_.kv_size / tp, dims_.hidden);
  rope(false);
  core_.gemm(GemmWeight::kProj, GemmPass::kForward, dims_.tokens, dims_.hidden, dims_.q_size / tp);
  residual(false);
  norm(false);
  core_.gemm(GemmWeight::kFc1, GemmPass::kForward, dims_.tokens, dims_.ffn / tp, dims_.hidden);
  core_.activation(static_cast<double>(dims_.tokens), dims_.ffn / tp, false);
  core_.phase = Phase::kBackward;
}

// ---- embedding and output head
// ------------------------------------------------------------------------------

void TensorEmitter::embedding_forward() {
  const double elements = static_cast<double>(dims_.tokens * dims_.hidden);
  const bool learned = model_.position_embedding == model::PositionEmbedding::kLearned;
  core_.elementwise(ElementwiseKind::kEmbedding, (learned ? 4.0 : 2.0) * elements * kBf16Bytes,
                    learned ? elements : 0.0);
  if (dims_.tp > 1)
    core_.blocking(
        BuilderCore::collective_op(dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                                   GroupKind::kTp, core_.activation_bytes(), Stream::kTpComm, core_.phase));
}

void TensorEmitter::embedding_backward() {
  if (dims_.sp)
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                              core_.activation_bytes(), Stream::kTpComm, core_.phase));
  const double elements = static_cast<double>(dims_.tokens * dims_.hidden);
  core_.elementwise(ElementwiseKind::kEmbedding, 3.0 * elements * kBf16Bytes, elements);
}

double TensorEmitter::cross_entropy_elements() const {
  return static_cast<double>(dims_.tokens * (dims_.vocab / dims_.tp));
}

void TensorEmitter::output_forward() {
  norm(false);
  column_forward(GemmWeight::kLogits, dims_.vocab / dims_.tp);
  const double elements = cross_entropy_elements();
  core_.elementwise(ElementwiseKind::kCrossEntropy, elements * (kBf16Bytes + kFp32Bytes), 5.0 * elements);
  if (dims_.tp > 1) {
    // Vocabulary-parallel cross entropy: all-reduce the max logit, then the target logit and sum of exps.
    const double tokens = static_cast<double>(dims_.tokens);
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllReduce, GroupKind::kTp, tokens * kFp32Bytes,
                                              Stream::kTpComm, core_.phase));
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllReduce, GroupKind::kTp,
                                              2.0 * tokens * kFp32Bytes, Stream::kTpComm, core_.phase));
  }
}

void TensorEmitter::output_backward() {
  const double elements = cross_entropy_elements();
  core_.elementwise(ElementwiseKind::kCrossEntropy, elements * (kBf16Bytes + kFp32Bytes), 2.0 * elements);
  column_backward(GemmWeight::kLogits, dims_.vocab / dims_.tp);
  norm(true);
}

// ---- the attention core
// -------------------------------------------------------------------------------------

/// The attention core as the layout runs it: batched GEMM + softmax + batched GEMM (unfused; validation
/// keeps it to cp = 1), the context-parallel all-gather or ring, or one fused op.
int TensorEmitter::attention(bool backward) {
  if (layout_.attention == parallel::AttentionImpl::kUnfused) {
    unfused_attention(backward);
    return core_.last_compute;
  }
  if (dims_.cp > 1 && layout_.cp_comm == parallel::CpComm::kAllGather)
    return context_.gathered_attention(backward);
  if (dims_.cp > 1 && layout_.cp_comm == parallel::CpComm::kTorch)
    return context_.torch_ring_attention(backward);
  if (dims_.cp > 1) return context_.ring_attention(backward);
  return core_.attention_op(backward, dims_.seq, dims_.seq, true, -1);
}

/// Unfused attention (Megatron-LM's CoreAttention with FusedScaleMaskSoftmax): full s x s products per
/// (sequence, head) — the causal mask is applied in the softmax, so nothing is skipped — K and V expanded
/// to every query head, and the softmax output kept for backward (the s^2 activations).
void TensorEmitter::unfused_attention(bool backward) {
  const std::int64_t s = dims_.seq;
  const std::int64_t d = model_.head_dim;
  const std::int64_t products = dims_.batch * (model_.num_attention_heads / dims_.tp);
  const double scores = static_cast<double>(products) * static_cast<double>(s) * static_cast<double>(s);
  const bool dropout = model_.dropout > 0.0;
  // The softmax carries the attention shape so executors know its rows (s keys per query position).
  AttentionShape shape;
  shape.batch = static_cast<std::int32_t>(dims_.batch);
  shape.heads = static_cast<std::int32_t>(products / dims_.batch);
  shape.kv_heads = shape.heads;  // expanded to every query head
  shape.seq = static_cast<std::int32_t>(s);
  shape.head_dim = static_cast<std::int32_t>(d);
  shape.causal = true;
  shape.backward = backward;
  if (!backward) {
    core_.gemm(GemmWeight::kAttnScore, GemmPass::kForward, s, s, d, -1, products);
    // Read S, write P (bf16); with dropout also the mask (1 byte) and the dropped-out P.
    const int softmax = core_.elementwise(ElementwiseKind::kSoftmax,
                                          scores * (2.0 * kBf16Bytes + (dropout ? 1.0 + kBf16Bytes : 0.0)),
                                          kSoftmaxFlopsPerScore * scores);
    core_.program.ops[softmax].attention = shape;
    core_.gemm(GemmWeight::kAttnContext, GemmPass::kForward, s, d, s, -1, products);
    return;
  }
  core_.gemm(GemmWeight::kAttnContext, GemmPass::kDgrad, s, s, d, -1, products);
  core_.gemm(GemmWeight::kAttnContext, GemmPass::kWgrad, s, d, s, -1, products);
  // Read P and dP, write dS (bf16); with dropout also read the mask.
  const int softmax =
      core_.elementwise(ElementwiseKind::kSoftmax, scores * (3.0 * kBf16Bytes + (dropout ? 1.0 : 0.0)),
                        kSoftmaxBackwardFlopsPerScore * scores);
  core_.program.ops[softmax].attention = shape;
  core_.gemm(GemmWeight::kAttnScore, GemmPass::kDgrad, s, d, s, -1, products);
  core_.gemm(GemmWeight::kAttnScore, GemmPass::kWgrad, s, d, s, -1, products);
}

// ---- tensor-parallel linears (Megatron-LM ColumnParallelLinear / RowParallelLinear)
// ----------------------

/// Forward of a column-parallel linear: all-gather the sequence-parallel input first.
void TensorEmitter::column_forward(GemmWeight weight, std::int64_t out_per_rank) {
  if (dims_.sp)
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                              core_.tp_gather_bytes(weight), Stream::kTpComm, core_.phase));
  core_.gemm(weight, GemmPass::kForward, dims_.tokens, out_per_rank, dims_.hidden);
}

/// Forward of a row-parallel linear: reduce-scatter (sequence parallel) or all-reduce the output.
void TensorEmitter::row_forward(GemmWeight weight, std::int64_t in_per_rank) {
  core_.gemm(weight, GemmPass::kForward, dims_.tokens, dims_.hidden, in_per_rank);
  if (dims_.tp > 1)
    core_.blocking(
        BuilderCore::collective_op(dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                                   GroupKind::kTp, core_.activation_bytes(), Stream::kTpComm, core_.phase));
}

/// Backward of a row-parallel linear: all-gather the sequence-parallel output gradient, then dgrad and
/// wgrad.
void TensorEmitter::row_backward(GemmWeight weight, std::int64_t in_per_rank) {
  if (dims_.sp)
    core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                              core_.tp_gather_bytes(weight), Stream::kTpComm, core_.phase));
  core_.gemm(weight, GemmPass::kDgrad, dims_.tokens, in_per_rank, dims_.hidden);
  core_.gemm(weight, GemmPass::kWgrad, in_per_rank, dims_.hidden, dims_.tokens);
}

/// Backward of a column-parallel linear. Sequence parallel re-gathers the input for wgrad; the input
/// gradient is reduce-scattered (SP) or all-reduced. With TP overlap the gather runs beside dgrad and the
/// reduction beside wgrad (Megatron-LM's asynchronous backward communication); without, each blocks.
void TensorEmitter::column_backward(GemmWeight weight, std::int64_t out_per_rank) {
  const bool overlap = layout_.overlap_tp_comm;
  const CollectiveKind reduce = dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
  if (!overlap) {
    if (dims_.sp)
      core_.blocking(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                                core_.tp_gather_bytes(weight), Stream::kTpComm, core_.phase));
    core_.gemm(weight, GemmPass::kDgrad, dims_.tokens, dims_.hidden, out_per_rank);
    core_.gemm(weight, GemmPass::kWgrad, dims_.hidden, out_per_rank, dims_.tokens);
    if (dims_.tp > 1)
      core_.blocking(BuilderCore::collective_op(reduce, GroupKind::kTp, core_.activation_bytes(),
                                                Stream::kTpComm, core_.phase));
    return;
  }
  int gather = -1;
  if (dims_.sp) {
    Op op = BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                       core_.tp_gather_bytes(weight), Stream::kTpComm, core_.phase);
    gather = core_.add(op, {core_.last_compute});
  }
  const int dgrad = core_.gemm(weight, GemmPass::kDgrad, dims_.tokens, dims_.hidden, out_per_rank);
  int reduction = -1;
  if (dims_.tp > 1)
    reduction = core_.add(BuilderCore::collective_op(reduce, GroupKind::kTp, core_.activation_bytes(),
                                                     Stream::kTpComm, core_.phase),
                          {dgrad});
  if (gather >= 0) core_.waits.push_back(gather);
  core_.gemm(weight, GemmPass::kWgrad, dims_.hidden, out_per_rank, dims_.tokens);
  if (reduction >= 0) core_.waits.push_back(reduction);
}

// ---- elementwise helpers
// ------------------------------------------------------------------------------------

void TensorEmitter::norm(bool backward) {
  const double elements = core_.local_activation_elements();
  const double per_element = model_.norm == model::NormKind::kLayerNorm ? 5.0 : 4.0;
  core_.elementwise(ElementwiseKind::kNorm, (backward ? 3.0 : 2.0) * elements * kBf16Bytes,
                    (backward ? 2.0 : 1.0) * per_element * elements);
}

void TensorEmitter::residual(bool backward) {
  (void)backward;
  const double elements = core_.local_activation_elements();
  core_.elementwise(ElementwiseKind::kResidualAdd, 3.0 * elements * kBf16Bytes, elements);
}

void TensorEmitter::rope(bool backward) {
  (void)backward;
  if (model_.position_embedding != model::PositionEmbedding::kRope) return;
  const double elements = static_cast<double>(dims_.tokens * (dims_.q_size + dims_.kv_size) / dims_.tp);
  core_.elementwise(ElementwiseKind::kRope, 2.0 * elements * kBf16Bytes, 3.0 * elements);
}

}  // namespace calo::graph::detail
