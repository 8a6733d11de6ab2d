// Transformer architecture description (dense GPT/Llama-style and Mixtral-style MoE), loaded from YAML.
#pragma once

#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace calo::model {

/// Feed-forward activation: GELU or squared ReLU (Nemotron-4: relu(x)^2), two matrices each, or a gated one,
/// SwiGLU (Llama) or GeGLU (Grok-1: gelu(gate) * up), with gate, up and down: three matrices.
enum class Activation { kGelu, kSwiGlu, kSquaredRelu, kGeGlu };
/// One activation, the one home of what is known of it: its names, its gate and its cost.
struct ActivationEntry {
  Activation activation;     ///< the enumerator; entries run in declaration order
  const char* name;          ///< its name in a model file ("swiglu")
  const char* label;         ///< as a person reads it ("SwiGLU")
  bool gated;                ///< gate and up projections (three matrices) instead of one (two matrices)
  double flops_per_element;  ///< forward FLOPs per output element of the activation op
};
/// The activation table, one entry per `Activation` in declaration order. FLOPs per output element: GELU's
/// tanh form 8, SwiGLU's sigmoid, product and gate 6, squared ReLU's max and square 2, GeGLU's GELU and the
/// gate's product 9.
inline constexpr std::array<ActivationEntry, 4> kActivations{{
    {Activation::kGelu, "gelu", "GELU", false, 8.0},
    {Activation::kSwiGlu, "swiglu", "SwiGLU", true, 6.0},
    {Activation::kSquaredRelu, "squared_relu", "squared ReLU", false, 2.0},
    {Activation::kGeGlu, "geglu", "GeGLU", true, 9.0},
}};
/// The table entry of `activation` (kActivations is in declaration order: checked where it is defined).
inline const ActivationEntry& activation_entry(Activation activation) {
  return kActivations.at(static_cast<std::size_t>(activation));
}
/// Whether the FFN is gated (gate and up projections, three matrices): SwiGLU and GeGLU.
inline bool is_gated(Activation activation) {
  return activation_entry(activation).gated;
}
/// The activation as a person reads it: "GELU", "SwiGLU", "GeGLU" or "squared ReLU".
inline const char* activation_label(Activation activation) {
  return activation_entry(activation).label;
}
/// Normalization: LayerNorm (scale + bias) or RMSNorm (scale only).
enum class NormKind { kLayerNorm, kRmsNorm };
/// Position encoding: learned absolute embeddings (GPT-3) or rotary (Llama, Mixtral; no parameters).
enum class PositionEmbedding { kLearned, kRope };

/// Most layers a model may have: a limit on the graph an input can ask for (Llama 3 405B has 126).
inline constexpr int kMaxLayers = 1024;
/// Most experts per MoE layer (DeepSeek-V3 has 256).
inline constexpr int kMaxExperts = 4096;

/// One transformer model. Sizes are counts (not bytes); all layers are identical.
struct ModelSpec {
  std::string name;             ///< preset or file name, e.g. "llama3-70b"
  int num_layers = 0;           ///< transformer blocks
  int hidden_size = 0;          ///< model width h
  int ffn_hidden_size = 0;      ///< dense FFN inner width (per expert for MoE)
  int num_attention_heads = 0;  ///< query heads a
  int num_kv_heads = 0;         ///< key/value heads (== heads for MHA, fewer for GQA)
  int head_dim = 0;             ///< per-head width; defaults to hidden_size / num_attention_heads
  int vocab_size = 0;           ///< embedding rows
  int seq_length = 0;           ///< default training sequence length s
  Activation activation = Activation::kSwiGlu;
  NormKind norm = NormKind::kRmsNorm;
  PositionEmbedding position_embedding = PositionEmbedding::kRope;
  bool tied_embeddings = false;      ///< output projection shares the input embedding matrix
  bool linear_bias = false;          ///< linear layers carry bias vectors (GPT-3: yes; Llama: no)
  int num_experts = 0;               ///< routed experts per MoE layer; 0 = dense model
  int moe_top_k = 0;                 ///< experts each token is routed to
  double dropout = 0.0;              ///< hidden/attention dropout probability (GPT-3: 0.1; Llama, Mixtral: 0)
  std::string bytes_dtype = "bf16";  ///< training compute dtype (bf16)

  /// True for a mixture-of-experts model.
  bool is_moe() const { return num_experts > 0; }
  /// Key/value projection width: num_kv_heads * head_dim.
  int kv_size() const { return num_kv_heads * head_dim; }
  /// Query projection width: num_attention_heads * head_dim.
  int q_size() const { return num_attention_heads * head_dim; }
};

/// Parses a model from its YAML/JSON object; `origin` names the source in errors. Throws InputError.
ModelSpec parse_model_spec(const nlohmann::json& object, const std::string& origin);

/// Loads a preset by name (data/models/NAME.yaml, embedded) or a YAML file by path. Throws InputError.
ModelSpec load_model(const std::string& name_or_path);

/// `model` with `layers` transformer layers (same shapes), as `--layers N` asks; the name gets
/// "-slice<layers>". InputError when `layers` is not in [1, model.num_layers].
ModelSpec slice_model(const ModelSpec& model, int layers);

/// The model as a JSON object (same keys as the YAML files).
nlohmann::json to_json(const ModelSpec& spec);

}  // namespace calo::model
