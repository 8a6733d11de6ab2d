#include "model/model_spec.h"

#include <fmt/format.h>

#include "core/config.h"
#include "core/error.h"
#include "core/json_fields.h"

namespace calo::model {
namespace {

static_assert(
    [] {
      for (std::size_t index = 0; index < kActivations.size(); ++index)
        if (static_cast<std::size_t>(kActivations[index].activation) != index) return false;
      return true;
    }(),
    "kActivations lists the activations in declaration order");

/// The name and the value of one choice: a (name, value) pair, or an activation's table entry.
template <typename Enum>
std::pair<const char*, Enum> choice_of(const std::pair<const char*, Enum>& choice) {
  return choice;
}
std::pair<const char*, Activation> choice_of(const ActivationEntry& entry) {
  return {entry.name, entry.activation};
}

/// The value of the choice named `text` among `choices`; InputError naming `key` and every choice otherwise.
template <typename Enum, typename Choices>
Enum parse_choice(const std::string& text, const std::string& key, const std::string& origin,
                  const Choices& choices) {
  std::string names;
  for (const auto& choice : choices) {
    const auto [name, value] = choice_of(choice);
    if (text == name) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  throw InputError(origin + ": '" + key + "' must be one of " + names + ", got '" + text + "'");
}
template <typename Enum>
Enum parse_choice(const std::string& text, const std::string& key, const std::string& origin,
                  std::initializer_list<std::pair<const char*, Enum>> choices) {
  return parse_choice<Enum, std::initializer_list<std::pair<const char*, Enum>>>(text, key, origin, choices);
}

}  // namespace

ModelSpec parse_model_spec(const nlohmann::json& object, const std::string& origin) {
  core::ConfigReader reader(object, origin);
  reader.reject_unknown_keys({"name",
                              "description",
                              "source",
                              "num_layers",
                              "hidden_size",
                              "ffn_hidden_size",
                              "num_attention_heads",
                              "num_kv_heads",
                              "head_dim",
                              "vocab_size",
                              "seq_length",
                              "activation",
                              "norm",
                              "position_embedding",
                              "tied_embeddings",
                              "linear_bias",
                              "num_experts",
                              "moe_top_k",
                              "dropout",
                              "dtype"});
  ModelSpec spec;
  spec.name = reader.get_string("name");
  auto positive = [&](const char* key) {
    long long value = reader.get_int(key);
    require_input(value > 0 && value < (1LL << 31),
                  origin + ": '" + key + "' must be a positive integer, got " + std::to_string(value));
    return static_cast<int>(value);
  };
  spec.num_layers = positive("num_layers");
  require_input(
      spec.num_layers <= kMaxLayers,
      fmt::format("{}: 'num_layers' = {} is beyond the {} calo models (the largest published models "
                  "have ~130); the graph of each layer is built and simulated",
                  origin, spec.num_layers, kMaxLayers));
  spec.hidden_size = positive("hidden_size");
  spec.ffn_hidden_size = positive("ffn_hidden_size");
  spec.num_attention_heads = positive("num_attention_heads");
  spec.num_kv_heads = reader.has("num_kv_heads") ? positive("num_kv_heads") : spec.num_attention_heads;
  if (!reader.has("head_dim")) {
    require_input(spec.hidden_size % spec.num_attention_heads == 0,
                  origin + ": 'hidden_size' (" + std::to_string(spec.hidden_size) +
                      ") must be a multiple of 'num_attention_heads' (" +
                      std::to_string(spec.num_attention_heads) + "), or give 'head_dim' explicitly");
  }
  spec.head_dim = reader.has("head_dim") ? positive("head_dim") : spec.hidden_size / spec.num_attention_heads;
  spec.vocab_size = positive("vocab_size");
  spec.seq_length = positive("seq_length");
  spec.activation =
      parse_choice<Activation>(reader.get_string("activation", "swiglu"), "activation", origin, kActivations);
  spec.norm = parse_choice<NormKind>(reader.get_string("norm", "rmsnorm"), "norm", origin,
                                     {{"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRmsNorm}});
  spec.position_embedding = parse_choice<PositionEmbedding>(
      reader.get_string("position_embedding", "rope"), "position_embedding", origin,
      {{"learned", PositionEmbedding::kLearned}, {"rope", PositionEmbedding::kRope}});
  spec.tied_embeddings = reader.get_bool("tied_embeddings", false);
  spec.linear_bias = reader.get_bool("linear_bias", false);
  auto count = [&](const char* key, long long fallback) {  // was cast to int unchecked: 2^32 + 2 became 2
    long long value = reader.get_int(key, fallback);
    require_input(
        value >= 0 && value < (1LL << 31),
        origin + ": '" + key + "' must be an integer in 0..2147483647, got " + std::to_string(value));
    return static_cast<int>(value);
  };
  spec.num_experts = count("num_experts", 0);
  spec.moe_top_k = count("moe_top_k", spec.num_experts > 0 ? 2 : 0);
  require_input(
      spec.num_experts <= kMaxExperts,
      fmt::format("{}: 'num_experts' = {} is beyond the {} calo models (each expert is an op of the graph)",
                  origin, spec.num_experts, kMaxExperts));
  spec.dropout = reader.get_double("dropout", 0.0);
  spec.bytes_dtype = reader.get_string("dtype", "bf16");

  require_input(spec.num_attention_heads % spec.num_kv_heads == 0,
                origin + ": num_attention_heads (" + std::to_string(spec.num_attention_heads) +
                    ") must be a multiple of num_kv_heads (" + std::to_string(spec.num_kv_heads) + ")");
  require_input(spec.num_experts >= 0,
                origin + ": 'num_experts' must be >= 0 (0 = dense), got " + std::to_string(spec.num_experts));
  require_input(spec.num_experts != 0 || spec.moe_top_k == 0,
                origin + ": 'moe_top_k' is set but 'num_experts' is 0; set num_experts or remove moe_top_k");
  require_input(spec.dropout >= 0.0 && spec.dropout < 1.0,
                origin + ": 'dropout' must be a probability in [0, 1), got " + std::to_string(spec.dropout));
  require_input(spec.num_experts == 0 || (spec.moe_top_k >= 1 && spec.moe_top_k <= spec.num_experts),
                origin + ": 'moe_top_k' must be between 1 and num_experts (" +
                    std::to_string(spec.num_experts) + "), got " + std::to_string(spec.moe_top_k));
  require_input(spec.bytes_dtype == "bf16",
                origin + ": only dtype bf16 is supported, got '" + spec.bytes_dtype + "'");
  return spec;
}

ModelSpec load_model(const std::string& name_or_path) {
  nlohmann::json object = core::load_preset_or_file("models", name_or_path);
  return parse_model_spec(object, name_or_path);
}

namespace {

/// The members written as they are; to_json adds the derived and named ones.
CALO_JSON_WRITER(write_plain_fields, ModelSpec, name, num_layers, hidden_size, ffn_hidden_size,
                 num_attention_heads, num_kv_heads, head_dim, vocab_size, seq_length, tied_embeddings,
                 linear_bias, num_experts, moe_top_k, dropout)

}  // namespace

nlohmann::json to_json(const ModelSpec& spec) {
  nlohmann::json json;
  write_plain_fields(json, spec);
  json.update(
      {{"activation", activation_entry(spec.activation).name},
       {"norm", spec.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"},
       {"position_embedding", spec.position_embedding == PositionEmbedding::kLearned ? "learned" : "rope"},
       {"dtype", spec.bytes_dtype}});
  return json;
}

ModelSpec slice_model(const ModelSpec& model, int layers) {
  require_input(layers >= 1 && layers <= model.num_layers,
                fmt::format("--layers {}: model {} has {} layers; give 1..{}", layers, model.name,
                            model.num_layers, model.num_layers));
  ModelSpec sliced = model;
  if (layers != model.num_layers) {
    sliced.num_layers = layers;
    sliced.name = fmt::format("{}-slice{}", model.name, layers);
  }
  return sliced;
}

}  // namespace calo::model
