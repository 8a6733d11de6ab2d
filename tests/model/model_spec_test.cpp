// Bad model files are rejected with an InputError that names the file and the offending key.
#include "model/model_spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/scratch.h"
#include "core/config.h"
#include "core/error.h"

namespace calo::model {
namespace {

const char* kValid =
    "name: m\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 128\nnum_attention_heads: 4\n"
    "vocab_size: 100\nseq_length: 16\n";

// Parses `text` as a model file and returns the InputError message (empty if it parsed).
std::string error_of(const std::string& text) {
  try {
    parse_model_spec(core::parse_yaml(text, "bad.yaml"), "bad.yaml");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

void expect_error_naming(const std::string& text, const std::string& key) {
  const std::string message = error_of(text);
  EXPECT_NE(message.find("bad.yaml"), std::string::npos) << "text: " << text << "\nmessage: " << message;
  EXPECT_NE(message.find(key), std::string::npos) << "text: " << text << "\nmessage: " << message;
}

TEST(ModelSpec, MinimalFileGetsDefaults) {
  const ModelSpec spec = parse_model_spec(core::parse_yaml(kValid, "ok.yaml"), "ok.yaml");
  EXPECT_EQ(spec.num_kv_heads, 4);  // MHA by default
  EXPECT_EQ(spec.head_dim, 16);
  EXPECT_EQ(spec.activation, Activation::kSwiGlu);
  EXPECT_EQ(spec.norm, NormKind::kRmsNorm);
  EXPECT_FALSE(spec.is_moe());
  EXPECT_EQ(spec.moe_top_k, 0);
  EXPECT_DOUBLE_EQ(spec.dropout, 0.0);
}

TEST(ModelSpec, MissingRequiredKeyIsNamed) {
  expect_error_naming(
      "name: m\nnum_layers: 2\nffn_hidden_size: 128\nnum_attention_heads: 4\nvocab_size: 100\n"
      "seq_length: 16\n",
      "'hidden_size'");
}

TEST(ModelSpec, WrongTypeIsNamed) {
  expect_error_naming(std::string(kValid) + "num_kv_heads: many\n", "'num_kv_heads'");
  expect_error_naming(std::string(kValid) + "tied_embeddings: 3\n", "'tied_embeddings'");
}

TEST(ModelSpec, NonPositiveSizeIsNamed) {
  std::string text = kValid;
  text.replace(text.find("num_layers: 2"), 13, "num_layers: 0");
  expect_error_naming(text, "'num_layers'");
}

TEST(ModelSpec, UnknownKeyIsNamedWithTheKnownOnes) {
  const std::string message = error_of(std::string(kValid) + "hiden_size: 3\n");
  EXPECT_NE(message.find("'hiden_size'"), std::string::npos) << message;
  EXPECT_NE(message.find("hidden_size"), std::string::npos) << message;
}

TEST(ModelSpec, BadChoiceListsTheValidOnes) {
  const std::string message = error_of(std::string(kValid) + "activation: relu\n");
  EXPECT_NE(message.find("'activation'"), std::string::npos) << message;
  EXPECT_NE(message.find("swiglu"), std::string::npos) << message;
  expect_error_naming(std::string(kValid) + "norm: batchnorm\n", "'norm'");
  expect_error_naming(std::string(kValid) + "position_embedding: alibi\n", "'position_embedding'");
}

TEST(ModelSpec, InconsistentHeadsAreRejected) {
  expect_error_naming(std::string(kValid) + "num_kv_heads: 3\n", "num_kv_heads");
  std::string text = kValid;
  text.replace(text.find("hidden_size: 64"), 15, "hidden_size: 66");
  expect_error_naming(text, "'head_dim'");
}

TEST(ModelSpec, MoeSettingsAreChecked) {
  expect_error_naming(std::string(kValid) + "num_experts: 4\nmoe_top_k: 5\n", "'moe_top_k'");
  expect_error_naming(std::string(kValid) + "moe_top_k: 2\n", "'moe_top_k'");
  expect_error_naming(std::string(kValid) + "num_experts: -1\n", "'num_experts'");
  // Counts beyond int were cast unchecked: 4294967298 experts became 2 (found while writing the model_yaml
  // fuzz target).
  expect_error_naming(std::string(kValid) + "num_experts: 4294967298\nmoe_top_k: 2\n", "'num_experts'");
  expect_error_naming(std::string(kValid) + "num_experts: 8\nmoe_top_k: 4294967298\n", "'moe_top_k'");
  const ModelSpec moe =
      parse_model_spec(core::parse_yaml(std::string(kValid) + "num_experts: 4\n", "ok.yaml"), "ok.yaml");
  EXPECT_EQ(moe.moe_top_k, 2);  // Mixtral's top-2 by default
}

TEST(ModelSpec, DropoutAndDtypeAreChecked) {
  expect_error_naming(std::string(kValid) + "dropout: 1.5\n", "'dropout'");
  expect_error_naming(std::string(kValid) + "dtype: fp8\n", "dtype");
}

TEST(ModelSpec, LoadsAFileByPathAndNamesMissingFiles) {
  const std::string path = calo::testing::scratch_path("model.yaml").string();
  {
    std::ofstream file(path);
    file << kValid;
  }
  const ModelSpec spec = load_model(path);
  EXPECT_EQ(spec.num_layers, 2);
  std::filesystem::remove(path);
  try {
    load_model(path);
    FAIL() << "expected InputError for a removed file";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
}

TEST(ModelSpec, UnknownPresetListsPresets) {
  try {
    load_model("llama9-1t");
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("llama3-70b"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace calo::model
