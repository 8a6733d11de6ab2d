// Presets load and match the published parameter counts; the tiny models match hand-computed closed forms.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "model/accounting.h"
#include "model/model_spec.h"

namespace calo::model {
namespace {

struct PublishedSize {
  const char* preset;
  double total;   // published total parameters
  double active;  // published active parameters per token (== total for dense)
};

// Sources: Llama 3 paper / HF configs (8.03 B, 70.6 B, 405.9 B), GPT-3 paper (175 B), Mixtral paper
// (46.7 B / 12.9 B), Mistral's 8x22B announcement (141 B / 39 B).
constexpr PublishedSize kPublished[] = {
    {"llama3-8b", 8.03e9, 8.03e9},
    {"llama3-70b", 70.6e9, 70.6e9},
    {"llama3-405b", 405.9e9, 405.9e9},
    {"gpt3-175b", 175e9, 175e9},
    {"mixtral-8x7b", 46.7e9, 12.9e9},
    {"mixtral-8x22b", 141e9, 39e9},
    // Llama 2's HF configs' counts; Nemotron-4's reports (15B: 3.2 B embedding + 12.5 B; 340B: 9.4 + 331.6
    // B).
    {"llama2-7b", 6.738e9, 6.738e9},
    {"llama2-13b", 13.016e9, 13.016e9},
    {"llama2-70b", 68.977e9, 68.977e9},
    {"nemotron4-15b", 15.7e9, 15.7e9},
    {"nemotron4-340b", 341.0e9, 341.0e9},
};

// Published to a tenth of a billion or to the billion only (Qwen3 report, Table 2: 30.5 B / 3.3 B, 235 B / 22
// B).
constexpr PublishedSize kPublishedRounded[] = {{"qwen3-30b-a3b", 30.5e9, 3.3e9},
                                               {"qwen3-235b-a22b", 235e9, 22e9}};

TEST(Presets, RoundedPublishedSizesMatchToTheirRounding) {
  for (const auto& published : kPublishedRounded) {
    SCOPED_TRACE(published.preset);
    const ParameterCounts counts = count_parameters(load_model(published.preset));
    EXPECT_NEAR(counts.total / published.total, 1.0, 0.005) << counts.total;
    EXPECT_NEAR(counts.active_per_token / published.active, 1.0, 0.02) << counts.active_per_token;
  }
}

TEST(Presets, SquaredReluIsATwoMatrixMlpWithItsOwnName) {
  const ModelSpec nemotron = load_model("nemotron4-15b");
  EXPECT_EQ(nemotron.activation, Activation::kSquaredRelu);
  EXPECT_EQ(to_json(nemotron)["activation"], "squared_relu");
  EXPECT_EQ(parse_model_spec(to_json(nemotron), "round trip").activation, Activation::kSquaredRelu);
  // Two matrices of hidden x ffn per layer, as GELU's: 2 * 6144 * 24576.
  EXPECT_DOUBLE_EQ(count_parameters(nemotron).per_layer_mlp, 2.0 * 6144 * 24576);
}

TEST(Presets, GrokOneIsAGatedGeluMixtureOfThreeHundredFourteenBillion) {
  const ModelSpec grok = load_model("grok1-314b");
  EXPECT_EQ(grok.activation, Activation::kGeGlu);
  EXPECT_TRUE(is_gated(grok.activation));
  EXPECT_STREQ(activation_label(grok.activation), "GeGLU");
  EXPECT_EQ(to_json(grok)["activation"], "geglu");
  EXPECT_EQ(parse_model_spec(to_json(grok), "round trip").activation, Activation::kGeGlu);
  const ParameterCounts counts = count_parameters(grok);
  // Gate, up and down of hidden x ffn per expert, as SwiGLU's: 8 experts x 3 x 6144 x 32768.
  EXPECT_DOUBLE_EQ(counts.per_layer_mlp, 8 * 3.0 * 6144 * 32768);
  // xAI's "314B" (github.com/xai-org/grok-1 README); the NeMo recipe's Llama 3 vocabulary is 2.8 k rows fewer.
  EXPECT_NEAR(counts.total / 314e9, 1.0, 0.01) << counts.total;
}

TEST(Presets, ParameterCountsMatchPublishedSizesWithinHalfPercent) {
  for (const auto& published : kPublished) {
    SCOPED_TRACE(published.preset);
    const ModelSpec spec = load_model(published.preset);
    const ParameterCounts counts = count_parameters(spec);
    EXPECT_NEAR(counts.total / published.total, 1.0, 0.005) << counts.total;
    EXPECT_NEAR(counts.active_per_token / published.active, 1.0, 0.005) << counts.active_per_token;
  }
}

TEST(Presets, Llama3SeventyBIsExactlyTheHuggingFaceCount) {
  // 80 x (2*8192^2 + 2*8192*1024 + 3*8192*28672 + 2*8192) + 2*128256*8192 + 8192 = 70,553,706,496.
  EXPECT_DOUBLE_EQ(count_parameters(load_model("llama3-70b")).total, 70553706496.0);
  // 32 x (2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096) + 2*128256*4096 + 4096 = 8,030,261,248.
  EXPECT_DOUBLE_EQ(count_parameters(load_model("llama3-8b")).total, 8030261248.0);
}

TEST(Presets, MixtralEightBySevenBTotalAndActiveAreExact) {
  // Per layer: attention 41,943,040; 8 experts x 176,160,768; router 4096*8; norms 2*4096.
  // Total: 32 x 1,451,270,144 + 2*32000*4096 + 4096 = 46,702,792,704.
  // Active: 32 x (41,943,040 + 2*176,160,768 + 32,768 + 8,192) + 262,144,000 + 4096 = 12,879,925,248.
  const ParameterCounts counts = count_parameters(load_model("mixtral-8x7b"));
  EXPECT_DOUBLE_EQ(counts.total, 46702792704.0);
  EXPECT_DOUBLE_EQ(counts.active_per_token, 12879925248.0);
  EXPECT_DOUBLE_EQ(counts.per_expert, 176160768.0);
  EXPECT_DOUBLE_EQ(counts.per_layer_router, 32768.0);
}

TEST(Presets, Gpt3HasBiasesLayerNormLearnedPositionsAndTiedOutput) {
  const ModelSpec spec = load_model("gpt3-175b");
  const ParameterCounts counts = count_parameters(spec);
  const double hidden = 12288;
  EXPECT_DOUBLE_EQ(counts.output, 0.0);  // tied
  EXPECT_DOUBLE_EQ(counts.positions, 2048 * hidden);
  EXPECT_DOUBLE_EQ(counts.embedding, 51200 * hidden + 2048 * hidden);
  EXPECT_DOUBLE_EQ(counts.per_layer_attention, 4 * hidden * hidden + 4 * hidden);  // QKV + proj + biases
  EXPECT_DOUBLE_EQ(counts.per_layer_mlp, 8 * hidden * hidden + 4 * hidden + hidden);
  EXPECT_DOUBLE_EQ(counts.per_layer_norm, 4 * hidden);  // two LayerNorms with scale and bias
  EXPECT_DOUBLE_EQ(counts.active_per_token, counts.total);
}

TEST(Presets, TinyDenseClosedForm) {
  // h=256, f=688, a=8 (d=32), g=4, V=1024, L=4, untied, RMSNorm, SwiGLU.
  const ParameterCounts counts = count_parameters(load_model("tiny-dense"));
  EXPECT_DOUBLE_EQ(counts.per_layer_attention, 256.0 * 256 * 2 + 256.0 * 128 * 2);  // 196,608
  EXPECT_DOUBLE_EQ(counts.per_layer_mlp, 3.0 * 256 * 688);                          // 528,384
  EXPECT_DOUBLE_EQ(counts.per_layer_norm, 512.0);
  EXPECT_DOUBLE_EQ(counts.per_layer_router, 0.0);
  EXPECT_DOUBLE_EQ(counts.embedding, 262144.0);
  EXPECT_DOUBLE_EQ(counts.output, 262144.0);
  EXPECT_DOUBLE_EQ(counts.final_norm, 256.0);
  EXPECT_DOUBLE_EQ(counts.total, 3426560.0);  // 4 x 725,504 + 2 x 262,144 + 256
  EXPECT_DOUBLE_EQ(counts.active_per_token, counts.total);
}

TEST(Presets, TinyMoeClosedForm) {
  // h=256, f=512 per expert, 4 experts top-2: expert 3*256*512 = 393,216; router 256*4.
  const ModelSpec spec = load_model("tiny-moe");
  EXPECT_TRUE(spec.is_moe());
  const ParameterCounts counts = count_parameters(spec);
  EXPECT_DOUBLE_EQ(counts.per_expert, 393216.0);
  EXPECT_DOUBLE_EQ(counts.per_layer_mlp, 4 * 393216.0);
  EXPECT_DOUBLE_EQ(counts.per_layer_router, 1024.0);
  EXPECT_DOUBLE_EQ(counts.total, 7608576.0);             // 4 x 1,771,008 + 2 x 262,144 + 256
  EXPECT_DOUBLE_EQ(counts.active_per_token, 4462848.0);  // minus 4 layers x 2 idle experts x 393,216
}

TEST(Presets, EveryPresetLoadsAndRoundTripsThroughJson) {
  const auto names = core::preset_names("models");
  EXPECT_GE(names.size(), 8u);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const ModelSpec spec = load_model(name);
    EXPECT_EQ(spec.name, name);
    EXPECT_EQ(spec.hidden_size % spec.num_attention_heads, 0);
    const ModelSpec again = parse_model_spec(to_json(spec), "round-trip");
    EXPECT_EQ(to_json(again), to_json(spec));
  }
}

TEST(Presets, PaperWorkloadShapesMatchReference) {
  // docs/STUDY.md workloads table.
  const ModelSpec gpt3 = load_model("gpt3-175b");
  EXPECT_EQ(gpt3.num_layers, 96);
  EXPECT_EQ(gpt3.seq_length, 2048);
  EXPECT_EQ(gpt3.num_kv_heads, 96);
  const ModelSpec llama = load_model("llama3-70b");
  EXPECT_EQ(llama.seq_length, 8192);
  EXPECT_EQ(llama.num_kv_heads, 8);
  const ModelSpec small_mixtral = load_model("mixtral-8x7b");
  EXPECT_EQ(small_mixtral.seq_length, 4096);
  EXPECT_EQ(small_mixtral.moe_top_k, 2);
  const ModelSpec large_mixtral = load_model("mixtral-8x22b");
  EXPECT_EQ(large_mixtral.num_layers, 56);
  EXPECT_EQ(large_mixtral.ffn_hidden_size, 16384);
  EXPECT_EQ(large_mixtral.num_attention_heads, 48);
}

}  // namespace
}  // namespace calo::model
