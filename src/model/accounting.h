// Parameter, FLOP and activation-memory accounting of a transformer (formulas in docs/METRICS.md).
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"

namespace calo::model {

/// Activation recomputation: none, selective (attention core, as Megatron-LM), full (whole layer), or op
/// (torchtitan's op-level selective checkpointing: every matmul output but every second one and the attention
/// kernel's outputs saved, the rest recomputed; dense models).
enum class Recompute { kNone, kSelective, kFull, kOp };

/// Parameter counts (numbers of scalars).
struct ParameterCounts {
  double total = 0;                ///< all parameters (every expert counted)
  double active_per_token = 0;     ///< parameters a token passes through (top-k experts only)
  double embedding = 0;            ///< input embedding (+ learned positions)
  double output = 0;               ///< untied output projection (0 when tied)
  double per_layer_attention = 0;  ///< QKV + output projection (+ biases) of one layer
  double per_layer_mlp = 0;        ///< dense FFN of one layer (for MoE: all experts of one layer)
  double per_layer_router = 0;     ///< MoE router of one layer
  double per_layer_norm = 0;       ///< norms of one layer
  double final_norm = 0;           ///< final norm
  double positions = 0;            ///< of `embedding`: learned position table (0 for RoPE)
  double per_expert = 0;           ///< one expert's FFN (MoE; 0 for dense)
  /// Matrices of one layer's attention projections (QKV and output), biases excluded: what FP8 recipes cast.
  double per_layer_attention_matrices = 0;
  /// Matrices of one FFN (one expert's for MoE), biases excluded.
  double per_ffn_matrices = 0;
  /// All parameters of one transformer layer (attention + FFN/experts + router + norms).
  double per_layer() const { return per_layer_attention + per_layer_mlp + per_layer_router + per_layer_norm; }
};

/// Counts parameters of `spec`.
ParameterCounts count_parameters(const ModelSpec& spec);

/// Matrix-multiply FLOPs per token (2 FLOPs per multiply-add), including the attention score and value
/// products (causal: half of s^2) and the output logits.
struct FlopsPerToken {
  double forward = 0;            ///< forward pass
  double backward = 0;           ///< backward pass (2x forward)
  double attention_forward = 0;  ///< of `forward`: QK^T and AV products only
  double logits_forward = 0;     ///< of `forward`: output projection to the vocabulary (2 V h)
  double per_layer_forward = 0;  ///< of `forward`: one transformer layer (linears, router, attention core)
  /// forward + backward (model FLOPs, used for MFU).
  double total() const { return forward + backward; }
};

/// FLOPs per token at sequence length `seq_length` (active experts only for MoE).
FlopsPerToken flops_per_token(const ModelSpec& spec, int seq_length);

/// Forward QK^T + AV FLOPs per token of all layers: 4 L a d s (full mask) or 2 L a d s (causal, half of s^2).
double attention_flops_per_token(const ModelSpec& spec, int seq_length, bool causal);

/// Extra forward FLOPs per token re-executed by recomputation (0 for none; attention core for selective;
/// the whole layer forward except logits for full).
double recompute_flops_per_token(const ModelSpec& spec, int seq_length, Recompute recompute);

/// One kind of tensor a transformer layer keeps for backward and its bytes (one micro-batch, one tp rank).
struct ActivationTerm {
  std::string kind;  ///< what is kept, e.g. "FFN inner (gate, up, SwiGLU output)"
  double bytes = 0;  ///< bytes per micro-batch on one tensor-parallel rank
};

/// The kinds activation_bytes_per_layer sums (docs/METRICS.md "Activations by kind"), in the layer's order;
/// zero terms are left out. `fp8_saved_inputs`: the transformer linears save their input as FP8 (1 byte a
/// value) for the weight gradient, as Transformer Engine does (docs/METRICS.md "FP8 training"); without
/// recomputation or under selective only (full and op checkpointing keep what their policy names).
std::vector<ActivationTerm> layer_activation_terms(const ModelSpec& spec, int seq_length, int micro_batch,
                                                   int tp, bool sequence_parallel, Recompute recompute,
                                                   bool flash_attention, bool fp8_saved_inputs = false);

/// Activation bytes one transformer layer keeps for backward, for one micro-batch on one tensor-parallel rank
/// (Korthikanti et al. 2022, bf16, with flash attention: no s^2 term), under the given sequence parallel and
/// recompute settings. Full recompute keeps only the layer input.
double activation_bytes_per_layer(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel, Recompute recompute);

/// As above; `flash_attention` = false keeps the softmax output (and dropout mask/output when dropout > 0) of
/// size a s^2 per sequence, as in Korthikanti et al.'s 34 s b h + 5 a s^2 b.
double activation_bytes_per_layer(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel, Recompute recompute, bool flash_attention);

/// Extra activation bytes the first pipeline stage keeps per micro-batch: the embedding dropout mask (if
/// any).
double embedding_activation_bytes(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                                  bool sequence_parallel);

/// Extra activation bytes the last pipeline stage keeps per micro-batch: final-norm input, output-projection
/// input and the fp32 softmax of the vocabulary-parallel cross entropy (4 s b V / tp).
double output_activation_bytes(const ModelSpec& spec, int seq_length, int micro_batch, int tp,
                               bool sequence_parallel);

}  // namespace calo::model
