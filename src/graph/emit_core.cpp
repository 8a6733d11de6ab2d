// BuilderCore: the shapes, parameter units and primitive appenders every emitter shares (builder_internal.h).
#include <algorithm>

#include "graph/builder_internal.h"

namespace calo::graph::detail {

BuilderCore::BuilderCore(const model::ModelSpec& model_spec, const parallel::Layout& resolved_layout,
                         const GraphOptions& graph_options, int stage_index, int ep_role,
                         RankProgram& rank_program)
    : model(model_spec),
      layout(resolved_layout),
      options(graph_options),
      stage(stage_index),
      ep_index(ep_role),
      program(rank_program) {
  dims.batch = layout.micro_batch;
  dims.cp = layout.cp;
  dims.seq = layout.seq_length / layout.cp;
  dims.tokens = dims.batch * dims.seq;
  dims.tp = layout.tp;
  dims.sp = layout.sequence_parallel && layout.tp > 1;
  dims.tokens_local = dims.sp ? dims.tokens / dims.tp : dims.tokens;
  dims.hidden = model.hidden_size;
  dims.q_size = model.q_size();
  dims.kv_size = model.kv_size();
  dims.ffn = model.ffn_hidden_size;
  dims.fc1_out = model::is_gated(model.activation) ? 2 * dims.ffn : dims.ffn;
  dims.vocab = model.vocab_size;
  partition = parallel::layer_partition(layout, model.num_layers);
  num_virtual = layout.pp * layout.virtual_stages;
}

namespace {

/// Whether `weight` is a transformer linear, the matrices FP8 recipes run in FP8 (the output layer, the
/// router and the attention core stay bf16).
bool is_fp8_linear(GemmWeight weight) {
  switch (weight) {
    case GemmWeight::kQkv:
    case GemmWeight::kProj:
    case GemmWeight::kFc1:
    case GemmWeight::kFc2:
    case GemmWeight::kExpertFc1:
    case GemmWeight::kExpertFc2:
      return true;
    default:
      return false;
  }
}

/// FLOPs per value cast: |x|, max, x * scale.
constexpr double kCastFlops = 3;

}  // namespace

Fp8CastBytes fp8_cast_bytes(parallel::Precision precision, GemmPass pass, int microbatches) {
  constexpr double kTwoPassCast = 2 * kBf16Bytes + kFp8Bytes;    // read for amax, read again, write FP8
  constexpr double kOnePassCast = kBf16Bytes + kFp8Bytes;        // amax of a row held while it is cast
  constexpr double kTranspose = 2 * kFp8Bytes;                   // read FP8, write it transposed
  constexpr double kCastTranspose = kBf16Bytes + 2 * kFp8Bytes;  // read bf16, write FP8 and its transpose
  const bool forward = pass == GemmPass::kForward, dgrad = pass == GemmPass::kDgrad;
  switch (precision) {
    case parallel::Precision::kFp8Tensorwise:
      if (forward) return {kTwoPassCast, kTwoPassCast, 1, 1};
      if (dgrad) return {kTwoPassCast, kTranspose, 1, 0};  // dY fresh, W^T a copy
      return {kTranspose, kTranspose, 0, 0};               // X^T and dY^T copies
    case parallel::Precision::kFp8Rowwise:
      return {kOnePassCast, kOnePassCast, 1, 1};
    case parallel::Precision::kFp8Delayed: {
      const double per_step = 1.0 / std::max(1, microbatches);
      if (forward) return {2 * kFp8Bytes, kCastTranspose * per_step, 1, per_step};
      if (dgrad) return {kCastTranspose, 0, 1, 0};
      return {};
    }
    case parallel::Precision::kBf16:
      break;
  }
  return {};
}

double BuilderCore::tp_gather_bytes(GemmWeight weight) const {
  // Transformer Engine (delayed scaling) and torchao's tensorwise float8 cast an FP8 linear's
  // sequence-parallel operand on the local shard and gather the FP8 copy; rowwise scales are gathered as
  // bf16.
  const bool fp8_gather = layout.fp8_sequence_gathers() && is_fp8_linear(weight);
  return fp8_gather ? activation_bytes() * kFp8Bytes / kBf16Bytes : activation_bytes();
}

void BuilderCore::fp8_casts(GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k, double products,
                            bool weight_gathered_fp8) {
  const double a_values = products * static_cast<double>(m * k);
  const double b_values = products * static_cast<double>(k * n);
  Fp8CastBytes cast = fp8_cast_bytes(layout.precision, pass, layout.num_microbatches());
  if (weight_gathered_fp8 && pass == GemmPass::kForward) {
    // --fp8-all-gather: the weight arrives in FP8; FSDP cast each rank's shard (1/S of it) before the
    // gather with the scale precomputed after the step: a read of the sharded parameter and an FP8 write.
    const double shard_ranks = layout.hybrid_sharding() ? layout.shard_size() : layout.grad_reduce_size();
    const double parameter_bytes = parallel::is_torchtitan(layout.trainer) ? kFp32Bytes : kBf16Bytes;
    cast.b_per_value = (parameter_bytes + kFp8Bytes) / shard_ranks;
    cast.b_fresh = 0;
  }
  const double bytes = cast.a_per_value * a_values + cast.b_per_value * b_values;
  if (bytes <= 0) return;  // every operand reused from a cast made before
  elementwise(ElementwiseKind::kCast, bytes,
              kCastFlops * (cast.a_fresh * a_values + cast.b_fresh * b_values));
}

int BuilderCore::gemm(GemmWeight weight, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k,
                      int expert, std::int64_t batch) {
  if (defer_wgrads && pass == GemmPass::kWgrad) {
    deferred_wgrads[{current_microbatch, current_chunk}].push_back(
        {weight, m, n, k, expert, batch, current_layer});
    return last_compute;
  }
  const auto products = static_cast<double>(batch);
  const bool fp8 = layout.fp8() && is_fp8_linear(weight);
  // --fp8-all-gather gathers the dense FP8 linears' weights in FP8; the experts' stay bf16 in the gather.
  const bool expert_weight = weight == GemmWeight::kExpertFc1 || weight == GemmWeight::kExpertFc2;
  if (fp8) fp8_casts(pass, m, n, k, products, layout.fp8_all_gather && !expert_weight);
  Op& op = compute_op(OpKind::kGemm);
  const DType fp8_type =  // delayed scaling runs tensorwise-scaled GEMMs
      layout.precision == parallel::Precision::kFp8Rowwise ? DType::kFp8Rowwise : DType::kFp8;
  // The gradient operand's format: e5m2 under torchao's tensorwise default and TE's HYBRID, e4m3 rowwise.
  const bool grad_e5m2 =
      fp8 && pass != GemmPass::kForward && layout.precision != parallel::Precision::kFp8Rowwise;
  op.gemm = GemmShape{m, n, k, fp8 ? fp8_type : DType::kBf16, weight, pass, expert, batch, grad_e5m2};
  op.flops = products * 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double operand_bytes = fp8 ? kFp8Bytes : kBf16Bytes;  // the output is bf16 either way
  op.bytes = products *
             (operand_bytes * static_cast<double>(m * k + k * n) + kBf16Bytes * static_cast<double>(m * n));
  return last_compute;
}

int BuilderCore::elementwise(ElementwiseKind kind, double bytes, double flops) {
  Op& op = compute_op(OpKind::kElementwise);
  op.elementwise = kind;
  op.bytes = bytes;
  op.flops = flops;
  return last_compute;
}

int BuilderCore::attention_op(bool backward, std::int64_t queries, std::int64_t keys, bool causal,
                              int cp_step, int cp_gathered) {
  Op& op = compute_op(OpKind::kAttention);
  AttentionShape& shape = op.attention;
  shape.batch = static_cast<std::int32_t>(dims.batch);
  shape.heads = static_cast<std::int32_t>(model.num_attention_heads / dims.tp);
  shape.kv_heads = static_cast<std::int32_t>(std::max<std::int64_t>(1, model.num_kv_heads / dims.tp));
  shape.seq = static_cast<std::int32_t>(queries);
  shape.kv_seq = cp_step >= 0 || cp_gathered > 0 ? static_cast<std::int32_t>(keys) : 0;
  shape.cp_gathered = static_cast<std::int8_t>(cp_gathered);
  shape.head_dim = model.head_dim;
  shape.causal = causal;
  shape.backward = backward;
  shape.cp_step = cp_step;
  shape.flash2 = layout.attention == parallel::AttentionImpl::kFlash2;
  AttentionShape counted = shape;  // the FLOPs of these rows (kv_seq is 0 outside cp)
  counted.kv_seq = static_cast<std::int32_t>(keys);
  op.flops = attention_flops(counted);
  op.bytes = attention_bytes(counted);
  return last_compute;
}

void BuilderCore::activation(double tokens, std::int64_t ffn_per_rank, bool backward) {
  const double out = tokens * static_cast<double>(ffn_per_rank);
  const double in = model::is_gated(model.activation) ? 2.0 * out : out;
  const double bytes = backward ? (2.0 * in + out) * kBf16Bytes : (in + out) * kBf16Bytes;
  elementwise(ElementwiseKind::kActivation, bytes,
              (backward ? 2.0 : 1.0) * model::activation_entry(model.activation).flops_per_element * out);
}

std::vector<int> BuilderCore::forward_units(int chunk) const {
  std::vector<int> units;
  const int virtual_stage = parallel::virtual_stage(layout, stage, chunk);
  if (virtual_stage == 0) units.push_back(kEmbeddingUnit);
  const auto range = partition[virtual_stage];
  for (int layer = range.first_layer; layer < range.first_layer + range.count; ++layer)
    units.push_back(layer);
  if (virtual_stage == num_virtual - 1) units.push_back(kOutputUnit);
  return units;
}

bool BuilderCore::holds_unit(int unit) const {
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk) {
    auto units = forward_units(chunk);
    if (std::find(units.begin(), units.end(), unit) != units.end()) return true;
  }
  return false;
}

}  // namespace calo::graph::detail
