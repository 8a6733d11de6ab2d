// FLOP and activation accounting against hand-computed closed forms and published formulas.
#include "model/accounting.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "model/model_spec.h"

namespace calo::model {
namespace {

TEST(Flops, TinyDenseClosedForm) {
  const ModelSpec spec = load_model("tiny-dense");
  const FlopsPerToken flops = flops_per_token(spec, 128);
  // Linears per layer: 2 x (196,608 + 528,384) = 1,449,984; causal attention 2 a d s = 2*8*32*128 = 65,536.
  EXPECT_DOUBLE_EQ(flops.per_layer_forward, 1449984.0 + 65536.0);
  EXPECT_DOUBLE_EQ(flops.attention_forward, 4 * 65536.0);
  EXPECT_DOUBLE_EQ(flops.logits_forward, 2.0 * 1024 * 256);
  EXPECT_DOUBLE_EQ(flops.forward, 4 * 1515520.0 + 524288.0);  // 6,586,368
  EXPECT_DOUBLE_EQ(flops.backward, 2 * flops.forward);
  EXPECT_DOUBLE_EQ(flops.total(), 3 * 6586368.0);
}

TEST(Flops, TinyMoeCountsTopKExpertsAndRouter) {
  const ModelSpec spec = load_model("tiny-moe");
  const FlopsPerToken flops = flops_per_token(spec, 128);
  // 2 x (attention 196,608 + 2 experts x 393,216 + router 1,024) + attention core 65,536.
  EXPECT_DOUBLE_EQ(flops.per_layer_forward, 2.0 * (196608 + 2 * 393216 + 1024) + 65536);
}

TEST(Flops, SixNRuleOfThumbDiffersOnlyByEmbeddingNormsAndCausalMask) {
  // Rule of thumb (Kaplan et al. 2020; PaLM appendix B): 6 N + 12 L h s per token, with N all parameters and
  // a full (non-causal) attention term. Ours counts matmuls only (no embedding lookup, no norms) and halves
  // the attention term for the causal mask, so: ours = 6N + 12Lhs - 6(N_embedding + N_norms) - 6Lhs, exactly.
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "mixtral-8x22b"}) {
    SCOPED_TRACE(name);
    const ModelSpec spec = load_model(name);
    const ParameterCounts counts = count_parameters(spec);
    const double layers = spec.num_layers, hidden = spec.hidden_size, seq = spec.seq_length;
    const double norms = layers * counts.per_layer_norm + counts.final_norm;
    const double rule = 6 * counts.active_per_token + 12 * layers * hidden * seq;
    const double expected = rule - 6 * (counts.embedding + norms) - 6 * layers * hidden * seq;
    const FlopsPerToken flops = flops_per_token(spec, spec.seq_length);
    EXPECT_NEAR(flops.total() / expected, 1.0, 1e-12);
    // The rule of thumb itself is an upper bound within 20 % for these models. The worst, Llama3-8B, is 15.7
    // % below it: the causal half of 12Lhs is 10.5 % of the rule at s = 8192 and its embedding 5.2 %.
    EXPECT_LT(flops.total(), rule);
    EXPECT_GT(flops.total(), 0.80 * rule);
  }
}

TEST(Flops, Gpt3MatchesMegatronFormulaWithCausalAttention) {
  // Narayanan et al. 2021, eq. (3) without recompute: per token 72 L h^2 (1 + s/(6h) + V/(12 h L)) with a
  // full attention mask; the causal mask halves the s/(6h) term. (Biases and norms are not matmuls.)
  const ModelSpec spec = load_model("gpt3-175b");
  const double layers = 96, hidden = 12288, seq = 2048, vocab = 51200;
  const double causal =
      72 * layers * hidden * hidden * (1 + seq / (12 * hidden) + vocab / (12 * hidden * layers));
  EXPECT_NEAR(flops_per_token(spec, 2048).total() / causal, 1.0, 1e-12);
  const double full_mask =
      72 * layers * hidden * hidden * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers));
  const double non_causal_total =
      flops_per_token(spec, 2048).total() +
      3 * (attention_flops_per_token(spec, 2048, false) - attention_flops_per_token(spec, 2048, true));
  EXPECT_NEAR(non_causal_total / full_mask, 1.0, 1e-12);
}

TEST(Flops, RecomputeAddsAttentionCoreOrWholeLayerForward) {
  const ModelSpec spec = load_model("tiny-dense");
  const FlopsPerToken flops = flops_per_token(spec, 128);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(spec, 128, Recompute::kNone), 0.0);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(spec, 128, Recompute::kSelective), 4 * 65536.0);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(spec, 128, Recompute::kFull), 4 * flops.per_layer_forward);
}

TEST(Flops, OpLevelCheckpointingRecomputesTheKOutputAndUpProjections) {
  // torchtitan's policy saves every matmul output but every second one: of Q, K, V, output, w1, w3, w2 it
  // runs K (h x c), the output projection (q x h) and w3 (h x f) again, 2 FLOPs per multiply-add; the
  // attention kernel's output is saved, so nothing of the core is recomputed.
  const ModelSpec spec = load_model("llama3-8b");
  const double h = 4096, c = 1024, q = 4096, f = 14336;
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(spec, 8192, Recompute::kOp), 32 * 2 * (h * c + q * h + h * f));
}

TEST(Flops, AttentionTermGrowsLinearlyWithSequence) {
  const ModelSpec spec = load_model("llama3-8b");
  const double short_seq = flops_per_token(spec, 4096).attention_forward;
  const double long_seq = flops_per_token(spec, 8192).attention_forward;
  EXPECT_DOUBLE_EQ(long_seq, 2 * short_seq);
  // GQA does not reduce attention-core FLOPs: they depend on the 32 query heads (2 * 32 * 128 * s per layer).
  EXPECT_DOUBLE_EQ(short_seq, 32 * 2.0 * 32 * 128 * 4096);
  EXPECT_THROW(flops_per_token(spec, 0), InputError);
}

// Korthikanti et al. 2022, Table 2, for a GPT-style layer (MHA, f = 4h, GELU, dropout, no flash attention).
TEST(Activations, MatchKorthikantiTableForGpt3WithoutFlashAttention) {
  const ModelSpec spec = load_model("gpt3-175b");
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  const double attention_term = 5 * a * s / h;  // = 80 for GPT-3 at s = 2048
  auto bytes = [&](int tp, bool sp, Recompute recompute) {
    return activation_bytes_per_layer(spec, 2048, 1, tp, sp, recompute, /*flash_attention=*/false);
  };
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kNone), sbh * (34 + attention_term));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kNone), sbh * (10 + 24 / t + attention_term / t));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kNone), sbh / t * (34 + attention_term));
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kSelective), sbh * (10 + 24 / t));
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kSelective), sbh * 34 / t);
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kFull), 2 * sbh);
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kFull), 2 * sbh / t);
}

TEST(Activations, FlashAttentionDropsTheSquaredTermAndKeepsSoftmaxStatistics) {
  const ModelSpec spec = load_model("gpt3-175b");
  const double s = 2048, h = 12288, a = 96, t = 8;
  // With flash attention, selective recompute saves only the fp32 log-sum-exp (4 a bytes per token).
  const double flash = activation_bytes_per_layer(spec, 2048, 1, 8, true, Recompute::kNone);
  const double selective = activation_bytes_per_layer(spec, 2048, 1, 8, true, Recompute::kSelective);
  EXPECT_DOUBLE_EQ(flash, s * h * 34 / t + s * 4 * a / t);
  EXPECT_DOUBLE_EQ(selective, s * h * 34 / t);
}

TEST(Activations, TinyDenseClosedForm) {
  const ModelSpec spec = load_model("tiny-dense");  // no dropout, SwiGLU f=688, GQA g=4 of a=8, d=32
  // Per token: replicated 4 x 2h = 2,048 bytes; split: Q,O 2 x 2 x 256, K,V 2 x 2 x 128, log-sum-exp 4 x 8,
  // SwiGLU 2 x 3 x 688 = 1,536 + 32 + 4,128 = 5,696 bytes.
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 1, false, Recompute::kNone), 128 * 7744.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 2, 1, false, Recompute::kNone), 2 * 128 * 7744.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 2, false, Recompute::kNone),
                   128 * (2048.0 + 5696.0 / 2));
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 2, true, Recompute::kNone), 128 * 7744.0 / 2);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 1, false, Recompute::kSelective), 128 * 7712.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 1, false, Recompute::kFull), 128 * 512.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 2, true, Recompute::kFull), 128 * 256.0);
}

TEST(Activations, TinyMoeKeepsRoutedTokenCopiesPerExpert) {
  const ModelSpec spec = load_model("tiny-moe");
  // Replicated: 2,048 + router probabilities 4 x 4 = 2,064; split: 1,568 + 2 routed x 2 x 3 x 512 = 7,712;
  // not split by tp: 2 routed x (input + output) x 2 x 256 = 2,048 bytes per token.
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 1, false, Recompute::kNone), 128 * 11824.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 128, 1, 2, true, Recompute::kNone),
                   128 * (2064.0 / 2 + 7712.0 / 2 + 2048.0));
}

TEST(Activations, StageExtrasForEmbeddingAndOutput) {
  const ModelSpec tiny = load_model("tiny-dense");
  EXPECT_DOUBLE_EQ(embedding_activation_bytes(tiny, 128, 1, 1, false), 0.0);  // no dropout, nothing kept
  // Final-norm and output-projection inputs (2 x 2h) + fp32 softmax over the vocabulary (4 V / tp) per token.
  EXPECT_DOUBLE_EQ(output_activation_bytes(tiny, 128, 1, 2, true), 128 * (1024.0 / 2 + 4 * 1024.0 / 2));
  const ModelSpec gpt3 = load_model("gpt3-175b");
  EXPECT_DOUBLE_EQ(embedding_activation_bytes(gpt3, 2048, 1, 8, true), 2048 * 12288.0 / 8);
}

TEST(Activations, ByKindLlama3_405bAtTp8WithSequenceParallel) {
  // One layer of Llama 3 405B, 8192 tokens, tp 8 with sequence parallel, flash attention, no recompute: in
  // units of u = s h / t bf16 values (32 MiB): both norm inputs 2 u, the QKV and FFN inputs 2 u, Q and the
  // attention output 2 u with K and V at 8 of 128 heads 2 × 1/16 u, the fp32 log-sum-exp 4 a s / t bytes, and
  // SwiGLU's gate, up and output 3 f / h u = 9.75 u (Korthikanti et al. 2022's terms without dropout).
  const ModelSpec spec = load_model("llama3-405b");
  const std::vector<ActivationTerm> terms =
      layer_activation_terms(spec, 8192, 1, 8, /*sequence_parallel=*/true, Recompute::kNone, true);
  const double u = 8192.0 * 16384 * 2 / 8;
  ASSERT_EQ(terms.size(), 5u);
  EXPECT_EQ(terms[0].kind, "norm inputs (2)");
  EXPECT_DOUBLE_EQ(terms[0].bytes, 2 * u);
  EXPECT_EQ(terms[1].kind, "QKV and FFN inputs");
  EXPECT_DOUBLE_EQ(terms[1].bytes, 2 * u);
  EXPECT_DOUBLE_EQ(terms[2].bytes, (2 + 2.0 / 16) * u);
  EXPECT_EQ(terms[3].kind, "softmax log-sum-exp (fp32)");
  EXPECT_DOUBLE_EQ(terms[3].bytes, 8192.0 * 4 * 128 / 8);
  EXPECT_EQ(terms[4].kind, "FFN inner (gate, up, SwiGLU output)");
  EXPECT_DOUBLE_EQ(terms[4].bytes, 3.0 * 53248 / 16384 * u);
  // Selective recompute drops the softmax statistics; full keeps the layer input alone (u / 1, sequence
  // parallel).
  EXPECT_EQ(layer_activation_terms(spec, 8192, 1, 8, true, Recompute::kSelective, true).size(), 4u);
  const auto full = layer_activation_terms(spec, 8192, 1, 8, true, Recompute::kFull, true);
  ASSERT_EQ(full.size(), 1u);
  EXPECT_DOUBLE_EQ(full[0].bytes, u);
}

TEST(Activations, OpLevelCheckpointingKeepsItsSavedOutputs) {
  // Per token of a Llama3-8B layer, bf16: the layer input 2h, the Q and V projections 2q + 2c, the attention
  // output 2q with its fp32 log-sum-exp 4a, the FFN gate 2f and the FFN output 2h: 63,616 bytes against the
  // 139,392 kept without recompute (docs/METRICS.md); tp 2 with sequence parallel halves every term.
  const ModelSpec spec = load_model("llama3-8b");
  const double h = 4096, q = 4096, c = 1024, a = 32, f = 14336;
  const double per_token = 2 * h + 2 * q + 2 * c + 2 * q + 4 * a + 2 * f + 2 * h;
  EXPECT_DOUBLE_EQ(per_token, 63616.0);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 8192, 2, 1, false, Recompute::kOp), 2 * 8192 * per_token);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(spec, 8192, 2, 2, true, Recompute::kOp), 8192 * per_token);
  EXPECT_EQ(layer_activation_terms(spec, 8192, 1, 1, false, Recompute::kOp, true).front().kind,
            "layer input (the checkpoint)");
}

TEST(Activations, RejectsNonPositiveSizes) {
  const ModelSpec spec = load_model("tiny-dense");
  EXPECT_THROW(activation_bytes_per_layer(spec, 128, 0, 1, false, Recompute::kNone), InputError);
  EXPECT_THROW(activation_bytes_per_layer(spec, 128, 1, 0, false, Recompute::kNone), InputError);
}

}  // namespace
}  // namespace calo::model
