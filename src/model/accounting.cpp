// Parameter, FLOP and activation accounting; every formula here is written out in docs/METRICS.md
// ("Model accounting").
#include "model/accounting.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace calo::model {
namespace {

constexpr double kBf16Bytes = 2.0;  // activations are stored in bf16
constexpr double kFp32Bytes = 4.0;  // softmax statistics, router probabilities, cross-entropy softmax
constexpr double kMaskBytes = 1.0;  // dropout masks: one byte per element
constexpr double kFp8Bytes = 1.0;   // an FP8 (e4m3) value

// Weights of one FFN (one expert for MoE), biases excluded: 2 h f (GELU) or 3 h f (gated: SwiGLU, GeGLU).
double ffn_weights(const ModelSpec& spec) {
  const double matrices = is_gated(spec.activation) ? 3.0 : 2.0;
  return matrices * spec.hidden_size * static_cast<double>(spec.ffn_hidden_size);
}

// Biases of one FFN: f + h (GELU) or 2 f + h (gated).
double ffn_biases(const ModelSpec& spec) {
  if (!spec.linear_bias) return 0.0;
  const double inner = is_gated(spec.activation) ? 2.0 * spec.ffn_hidden_size : spec.ffn_hidden_size;
  return inner + spec.hidden_size;
}

// Weights of the attention projections: Q (h x a d), K and V (h x g d), output (a d x h).
double attention_weights(const ModelSpec& spec) {
  const double hidden = spec.hidden_size;
  return hidden * spec.q_size() * 2.0 + hidden * spec.kv_size() * 2.0;
}

// Parameters of one norm: scale (+ bias for LayerNorm).
double norm_parameters(const ModelSpec& spec) {
  return spec.norm == NormKind::kLayerNorm ? 2.0 * spec.hidden_size : spec.hidden_size;
}

void require_positive(int value, const char* what) {
  require_input(value > 0, std::string(what) + " must be positive, got " + std::to_string(value));
}

}  // namespace

ParameterCounts count_parameters(const ModelSpec& spec) {
  ParameterCounts counts;
  const double hidden = spec.hidden_size;
  counts.per_layer_attention = attention_weights(spec);
  counts.per_layer_attention_matrices = counts.per_layer_attention;
  counts.per_ffn_matrices = ffn_weights(spec);
  if (spec.linear_bias) counts.per_layer_attention += spec.q_size() + 2.0 * spec.kv_size() + hidden;
  const double one_ffn = ffn_weights(spec) + ffn_biases(spec);
  if (spec.is_moe()) {
    counts.per_expert = one_ffn;
    counts.per_layer_mlp = spec.num_experts * one_ffn;
    counts.per_layer_router = hidden * spec.num_experts;
  } else {
    counts.per_layer_mlp = one_ffn;
  }
  counts.per_layer_norm = 2.0 * norm_parameters(spec);
  counts.final_norm = norm_parameters(spec);
  counts.positions = spec.position_embedding == PositionEmbedding::kLearned ? spec.seq_length * hidden : 0.0;
  counts.embedding = static_cast<double>(spec.vocab_size) * hidden + counts.positions;
  counts.output = spec.tied_embeddings ? 0.0 : static_cast<double>(spec.vocab_size) * hidden;
  counts.total = counts.embedding + counts.output + spec.num_layers * counts.per_layer() + counts.final_norm;
  const double idle_experts = spec.is_moe() ? spec.num_experts - spec.moe_top_k : 0;
  counts.active_per_token = counts.total - spec.num_layers * idle_experts * counts.per_expert;
  return counts;
}

double attention_flops_per_token(const ModelSpec& spec, int seq_length, bool causal) {
  require_positive(seq_length, "sequence length");
  // Per layer and token: QK^T is a*d*s multiply-adds, AV the same; causal masking halves both.
  const double full = 4.0 * spec.num_attention_heads * spec.head_dim * static_cast<double>(seq_length);
  return spec.num_layers * (causal ? full / 2.0 : full);
}

FlopsPerToken flops_per_token(const ModelSpec& spec, int seq_length) {
  FlopsPerToken flops;
  const double experts_per_token = spec.is_moe() ? spec.moe_top_k : 1;
  const double router = spec.is_moe() ? static_cast<double>(spec.hidden_size) * spec.num_experts : 0.0;
  const double linear_weights = attention_weights(spec) + experts_per_token * ffn_weights(spec) + router;
  flops.attention_forward = attention_flops_per_token(spec, seq_length, /*causal=*/true);
  flops.per_layer_forward = 2.0 * linear_weights + flops.attention_forward / spec.num_layers;
  flops.logits_forward = 2.0 * static_cast<double>(spec.vocab_size) * spec.hidden_size;
  flops.forward = spec.num_layers * flops.per_layer_forward + flops.logits_forward;
  flops.backward = 2.0 * flops.forward;
  return flops;
}

double recompute_flops_per_token(const ModelSpec& spec, int seq_length, Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return 0.0;
    case Recompute::kSelective:
      return attention_flops_per_token(spec, seq_length, /*causal=*/true);
    case Recompute::kFull: {
      const FlopsPerToken flops = flops_per_token(spec, seq_length);
      return flops.forward - flops.logits_forward;
    }
    case Recompute::kOp:
      // The matmuls torchtitan's policy does not save: the K and output projections and the FFN's up
      // projection (w3) of every layer.
      return spec.num_layers * 2.0 * spec.hidden_size *
             (static_cast<double>(spec.kv_size()) + static_cast<double>(spec.q_size()) +
              spec.ffn_hidden_size);
  }
  return 0.0;
}

double activation_bytes_per_layer(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel, Recompute recompute) {
  return activation_bytes_per_layer(spec, seq_length, micro_batch, tp, sequence_parallel, recompute,
                                    /*flash_attention=*/true);
}

namespace {

/// What torchtitan's op-level selective checkpointing keeps of a dense layer, per `replicated` and `split`
/// tokens (their counts on a rank for full-width and tp-split tensors): the checkpoint's input, the outputs
/// of the first, third, fifth and seventh matmul (Q, V, the FFN gate w1, the FFN output w2; the K, output and
/// up projections are recomputed), and the attention kernel's output with its fp32 log-sum-exp.
std::vector<ActivationTerm> op_checkpoint_terms(const ModelSpec& spec, double replicated, double split) {
  const double hidden = spec.hidden_size;
  return {{"layer input (the checkpoint)", replicated * kBf16Bytes * hidden},
          {"Q and V projections (saved matmul outputs)",
           split * kBf16Bytes * (static_cast<double>(spec.q_size()) + static_cast<double>(spec.kv_size()))},
          {"attention output and log-sum-exp (fp32)",
           split * (kBf16Bytes * static_cast<double>(spec.q_size()) + kFp32Bytes * spec.num_attention_heads)},
          {"FFN gate projection (saved matmul output)", split * kBf16Bytes * spec.ffn_hidden_size},
          {"FFN output (saved matmul output)", replicated * kBf16Bytes * hidden}};
}

}  // namespace

std::vector<ActivationTerm> layer_activation_terms(const ModelSpec& spec, int seq_length, int micro_batch,
                                                   int tp, bool sequence_parallel, Recompute recompute,
                                                   bool flash_attention, bool fp8_saved_inputs) {
  require_positive(seq_length, "sequence length");
  require_positive(micro_batch, "micro-batch size");
  require_positive(tp, "tensor-parallel size");
  const double tokens = static_cast<double>(seq_length) * micro_batch;
  const double hidden = spec.hidden_size;
  const double tp_size = tp;
  // Tensors of the full hidden width that tensor parallelism replicates; sequence parallel splits them over
  // tp. Tensors split over tp (heads, FFN columns) are divided by tp; routed token copies by neither.
  const double replicated = tokens / (sequence_parallel ? tp_size : 1.0);
  const double split = tokens / tp_size;
  std::vector<ActivationTerm> terms;
  const auto add = [&terms](std::string kind, double bytes) {
    if (bytes > 0) terms.push_back({std::move(kind), bytes});
  };
  if (recompute == Recompute::kFull) {
    add("layer input (the checkpoint)", replicated * kBf16Bytes * hidden);
    return terms;
  }
  if (recompute == Recompute::kOp) return op_checkpoint_terms(spec, replicated, split);
  const bool dropout = spec.dropout > 0.0;
  // Transformer Engine saves an FP8 linear's input as FP8 (its transpose, for the weight gradient): the QKV
  // and FFN (expert) inputs at 1 byte; the MoE router's input stays bf16; the attention output stays bf16
  // for the attention kernel's backward, with an FP8 copy beside it for the projection's.
  const double linear_input_bytes = fp8_saved_inputs ? kFp8Bytes : kBf16Bytes;
  add("norm inputs (2)", replicated * 2.0 * kBf16Bytes * hidden);
  if (spec.is_moe()) {
    add(fp8_saved_inputs ? "QKV (FP8) and router inputs" : "QKV and router/expert inputs",
        replicated * (linear_input_bytes + kBf16Bytes) * hidden);
  } else {
    add(fp8_saved_inputs ? "QKV and FFN inputs (FP8)" : "QKV and FFN inputs",
        replicated * 2.0 * linear_input_bytes * hidden);
  }
  add("dropout masks (2)", dropout ? replicated * 2.0 * kMaskBytes * hidden : 0.0);
  add("Q, K, V and attention output", split * kBf16Bytes * (2.0 * spec.q_size() + 2.0 * spec.kv_size()));
  add("attention output (FP8 copy, the projection's input)",
      fp8_saved_inputs ? split * kFp8Bytes * spec.q_size() : 0.0);
  const double heads = spec.num_attention_heads;
  if (recompute != Recompute::kSelective) {
    if (flash_attention) {
      add("softmax log-sum-exp (fp32)", split * kFp32Bytes * heads);
    } else {
      // Softmax output (2 a s), and with dropout its mask (a s) and the dropped-out probabilities (2 a s).
      add("softmax probabilities (a s per token)",
          split * heads * seq_length * (kBf16Bytes + (dropout ? kMaskBytes + kBf16Bytes : 0.0)));
    }
  }
  // FFN inner tensors: GELU keeps its input and output (2 x f); SwiGLU keeps gate+up (2 f) and its output
  // (f).
  // Under FP8 the activation's output (the down projection's input) is saved as FP8.
  const bool gated = is_gated(spec.activation);
  const std::string gate = activation_label(spec.activation);
  const double ffn_inner = (kBf16Bytes * (gated ? 2.0 : 1.0) + linear_input_bytes) * spec.ffn_hidden_size;
  const std::string inner_kind =
      gated ? (fp8_saved_inputs ? "FFN inner (gate, up; " + gate + " output in FP8)"
                                : "FFN inner (gate, up, " + gate + " output)")
            : (fp8_saved_inputs ? "FFN inner (GELU input; output in FP8)" : "FFN inner (GELU input, output)");
  if (spec.is_moe()) {
    add("router probabilities (fp32)", replicated * kFp32Bytes * spec.num_experts);
    add("expert " + inner_kind.substr(4) + " x top-k", split * spec.moe_top_k * ffn_inner);
    // Each routed token copy: permuted expert input and expert output (kept for the combine weights'
    // gradient). Tokens are gathered over the tp group before the experts, so these are not divided by tp.
    add(fp8_saved_inputs ? "routed token copies (expert input in FP8, output)"
                         : "routed token copies (expert input, output)",
        tokens * spec.moe_top_k * (linear_input_bytes + kBf16Bytes) * hidden);
  } else {
    add(inner_kind, split * ffn_inner);
  }
  return terms;
}

double activation_bytes_per_layer(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel, Recompute recompute, bool flash_attention) {
  double bytes = 0;
  for (const ActivationTerm& term : layer_activation_terms(spec, seq_length, micro_batch, tp,
                                                           sequence_parallel, recompute, flash_attention))
    bytes += term.bytes;
  return bytes;
}

double embedding_activation_bytes(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel) {
  if (spec.dropout <= 0.0) return 0.0;
  const double tokens = static_cast<double>(seq_length) * micro_batch;
  return tokens * kMaskBytes * spec.hidden_size / (sequence_parallel ? tp : 1);
}

double output_activation_bytes(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                               bool sequence_parallel) {
  const double tokens = static_cast<double>(seq_length) * micro_batch;
  const double hidden_tensors = 2.0 * kBf16Bytes * spec.hidden_size / (sequence_parallel ? tp : 1);
  const double cross_entropy = kFp32Bytes * static_cast<double>(spec.vocab_size) / tp;
  return tokens * (hidden_tensors + cross_entropy);
}

}  // namespace calo::model
