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
  dims.fc1_out = model.activation == model::Activation::kSwiGlu ? 2 * dims.ffn : dims.ffn;
  dims.vocab = model.vocab_size;
  partition = parallel::layer_partition(layout, model.num_layers);
  num_virtual = layout.pp * layout.virtual_stages;
}

int BuilderCore::gemm(GemmWeight weight, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k,
                      int expert, std::int64_t batch) {
  Op& op = compute_op(OpKind::kGemm);
  op.gemm = GemmShape{m, n, k, DType::kBf16, weight, pass, expert, batch};
  const auto products = static_cast<double>(batch);
  op.flops = products * 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  op.bytes = products * kBf16Bytes * static_cast<double>(m * k + k * n + m * n);
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
  AttentionShape counted = shape;  // the FLOPs of these rows (kv_seq is 0 outside cp)
  counted.kv_seq = static_cast<std::int32_t>(keys);
  op.flops = attention_flops(counted);
  op.bytes = attention_bytes(counted);
  return last_compute;
}

void BuilderCore::activation(double tokens, std::int64_t ffn_per_rank, bool backward) {
  const bool swiglu = model.activation == model::Activation::kSwiGlu;
  const double out = tokens * static_cast<double>(ffn_per_rank);
  const double in = swiglu ? 2.0 * out : out;
  const double bytes = backward ? (2.0 * in + out) * kBf16Bytes : (in + out) * kBf16Bytes;
  elementwise(ElementwiseKind::kActivation, bytes, (backward ? 2.0 : 1.0) * (swiglu ? 6.0 : 8.0) * out);
}

std::vector<int> BuilderCore::forward_units(int chunk) const {
  std::vector<int> units;
  const int virtual_stage = chunk * layout.pp + stage;
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
