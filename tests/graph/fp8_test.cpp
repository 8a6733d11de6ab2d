// FP8 linears in the graph: which GEMMs turn FP8, the cast work each recipe adds (docs/METRICS.md "FP8
// training"), and what stays the same (model FLOPs, collectives).
#include <gtest/gtest.h>

#include "graph/builder_internal.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

/// Llama3-8B sliced to 2 layers at seq 1024, TP2 x DP2, two micro-batches, at `precision`.
Graph llama_graph(parallel::Precision precision) {
  const model::ModelSpec model = model::slice_model(model::load_model("llama3-8b"), 2);
  parallel::Layout layout;
  layout.tp = 2;
  layout.dp = 2;
  layout.micro_batch = 1;
  layout.global_batch = 4;
  layout.seq_length = 1024;
  layout.precision = precision;
  return build_graph(model, parallel::resolve_layout(model, layout));
}

bool is_linear(GemmWeight weight) {
  return weight == GemmWeight::kQkv || weight == GemmWeight::kProj || weight == GemmWeight::kFc1 ||
         weight == GemmWeight::kFc2;
}

TEST(Fp8Graph, TheTransformerLinearsTurnFp8AndTheOutputLayerStaysBf16) {
  const Graph graph = llama_graph(parallel::Precision::kFp8Tensorwise);
  int fp8_gemms = 0, bf16_logits = 0;
  for (const Op& op : graph.program(0).ops) {
    if (op.kind != OpKind::kGemm) continue;
    if (is_linear(op.gemm.weight)) {
      EXPECT_EQ(op.gemm.dtype, DType::kFp8) << describe(op);
      // 1-byte operands, bf16 output.
      const double m = op.gemm.m, n = op.gemm.n, k = op.gemm.k;
      EXPECT_DOUBLE_EQ(op.bytes, m * k + k * n + 2 * m * n) << describe(op);
      ++fp8_gemms;
    } else if (op.gemm.weight == GemmWeight::kLogits) {
      EXPECT_EQ(op.gemm.dtype, DType::kBf16);
      ++bf16_logits;
    }
  }
  // 2 layers x 4 linears x 3 passes (forward, dgrad, wgrad) x 2 micro-batches.
  EXPECT_EQ(fp8_gemms, 2 * 4 * 3 * 2);
  EXPECT_GT(bf16_logits, 0);
}

TEST(Fp8Graph, EachRecipeCastsAsItsKernelsDo) {
  // Tensorwise: every pass casts (backward's operands are transposed copies); delayed scaling casts nothing
  // for wgrad (the forward's cast-transpose made X^T, the dgrad's made dY^T).
  const auto casts = [](parallel::Precision precision) {
    int count = 0;
    const Graph graph = llama_graph(precision);
    for (const Op& op : graph.program(0).ops)
      count += op.kind == OpKind::kElementwise && op.elementwise == ElementwiseKind::kCast;
    return count;
  };
  EXPECT_EQ(casts(parallel::Precision::kBf16), 0);
  EXPECT_EQ(casts(parallel::Precision::kFp8Tensorwise), 2 * 4 * 3 * 2);
  EXPECT_EQ(casts(parallel::Precision::kFp8Rowwise), 2 * 4 * 3 * 2);
  EXPECT_EQ(casts(parallel::Precision::kFp8Delayed), 2 * 4 * 2 * 2);
}

TEST(Fp8Graph, CastBytesPerValueFollowFromTheKernelsReadsAndWrites) {
  using detail::fp8_cast_bytes;
  // Tensorwise forward: amax pass reads bf16 (2 B), the cast pass reads it again and writes FP8 (2 + 1 B).
  const auto forward = fp8_cast_bytes(parallel::Precision::kFp8Tensorwise, GemmPass::kForward, 4);
  EXPECT_DOUBLE_EQ(forward.a_per_value, 5);
  EXPECT_DOUBLE_EQ(forward.b_per_value, 5);
  // Its wgrad reads FP8 copies and writes them transposed: 1 + 1 B, no fresh cast.
  const auto wgrad = fp8_cast_bytes(parallel::Precision::kFp8Tensorwise, GemmPass::kWgrad, 4);
  EXPECT_DOUBLE_EQ(wgrad.a_per_value, 2);
  EXPECT_DOUBLE_EQ(wgrad.a_fresh, 0);
  // Rowwise: one pass, read bf16 and write FP8: 3 B, in every pass.
  EXPECT_DOUBLE_EQ(fp8_cast_bytes(parallel::Precision::kFp8Rowwise, GemmPass::kDgrad, 4).b_per_value, 3);
  // Delayed: the producer writes FP8 and its transpose (2 B); the weight's cast-transpose (2 + 1 + 1 B) once
  // a step, shared by its 4 micro-batches.
  const auto delayed = fp8_cast_bytes(parallel::Precision::kFp8Delayed, GemmPass::kForward, 4);
  EXPECT_DOUBLE_EQ(delayed.a_per_value, 2);
  EXPECT_DOUBLE_EQ(delayed.b_per_value, 4.0 / 4);
  EXPECT_DOUBLE_EQ(fp8_cast_bytes(parallel::Precision::kBf16, GemmPass::kForward, 4).a_per_value, 0);
}

TEST(Fp8Graph, ModelFlopsAreThoseOfBf16AndSequenceParallelGathersOfFp8LinearsMoveFp8) {
  const Graph bf16 = llama_graph(parallel::Precision::kBf16);
  const Graph delayed = llama_graph(parallel::Precision::kFp8Delayed);
  const Graph tensorwise = llama_graph(parallel::Precision::kFp8Tensorwise);
  const Graph rowwise = llama_graph(parallel::Precision::kFp8Rowwise);
  ASSERT_TRUE(bf16.layout.sequence_parallel);  // tp 2: sequence parallel on by default
  const auto flops = [](const Graph& graph) {
    double total = 0;
    for (const Op& op : graph.program(0).ops) total += model_flops(op);
    return total;
  };
  EXPECT_DOUBLE_EQ(flops(delayed), flops(bf16));
  // Bytes of the tensor-parallel collectives by kind, of the first micro-batch's layers (layer >= 0).
  struct TpBytes {
    double gathers = 0, scatters = 0;
  };
  const auto tp_bytes = [](const Graph& graph) {
    TpBytes bytes;
    for (const Op& op : graph.program(0).ops) {
      if (op.kind != OpKind::kCollective || op.group != GroupKind::kTp || op.layer < 0) continue;
      (op.collective == CollectiveKind::kAllGather ? bytes.gathers : bytes.scatters) += op.bytes;
    }
    return bytes;
  };
  // A layer gathers six times (QKV and FC1 inputs forward, the projection's and FC2's output gradients and
  // the QKV and FC1 inputs again backward), every one an operand of an FP8 linear: Transformer Engine and
  // torchao's tensorwise recipe cast the local shard and gather FP8, half the bf16 bytes; rowwise gathers
  // bf16.
  EXPECT_GT(tp_bytes(bf16).gathers, 0);
  EXPECT_DOUBLE_EQ(tp_bytes(delayed).gathers, tp_bytes(bf16).gathers / 2);
  EXPECT_DOUBLE_EQ(tp_bytes(tensorwise).gathers, tp_bytes(bf16).gathers / 2);
  EXPECT_DOUBLE_EQ(tp_bytes(rowwise).gathers, tp_bytes(bf16).gathers);
  // Reduce-scatters carry the GEMMs' bf16 outputs under every recipe.
  EXPECT_DOUBLE_EQ(tp_bytes(delayed).scatters, tp_bytes(bf16).scatters);
  // The output layer stays bf16, and so does its gather.
  const auto logits_gathers = [](const Graph& graph) {
    double bytes = 0;
    for (const Op& op : graph.program(0).ops)
      if (op.kind == OpKind::kCollective && op.group == GroupKind::kTp && op.layer < 0 &&
          op.collective == CollectiveKind::kAllGather)
        bytes += op.bytes;
    return bytes;
  };
  EXPECT_DOUBLE_EQ(logits_gathers(delayed), logits_gathers(bf16));
}

TEST(Fp8Gradients, TheGradientOperandIsE5m2UnderTensorwiseAndDelayedAndE4m3Rowwise) {
  for (const auto precision : {parallel::Precision::kBf16, parallel::Precision::kFp8Tensorwise,
                               parallel::Precision::kFp8Rowwise, parallel::Precision::kFp8Delayed}) {
    const bool e5m2_backward =
        precision == parallel::Precision::kFp8Tensorwise || precision == parallel::Precision::kFp8Delayed;
    int e5m2 = 0;
    const Graph graph = llama_graph(precision);
    for (const Op& op : graph.program(0).ops) {
      if (op.kind != OpKind::kGemm) continue;
      const bool backward_fp8 = op.gemm.dtype != DType::kBf16 && op.gemm.pass != GemmPass::kForward;
      EXPECT_EQ(op.gemm.grad_e5m2, backward_fp8 && e5m2_backward) << describe(op);
      e5m2 += op.gemm.grad_e5m2;
    }
    // 2 layers x 4 linears x 2 backward passes x 2 micro-batches.
    EXPECT_EQ(e5m2, e5m2_backward ? 2 * 4 * 2 * 2 : 0) << parallel::to_string(precision);
  }
}

}  // namespace
}  // namespace calo::graph
