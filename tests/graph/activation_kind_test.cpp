// The feed-forward activation's elementwise op in the graph: squared ReLU (Nemotron-4) moves what GELU moves
// and counts 2 FLOPs an element against GELU's 8; GeGLU (Grok-1) moves what SwiGLU moves and counts 9
// (docs/METRICS.md "Elementwise FLOPs").
#include <gtest/gtest.h>

#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

struct ActivationTotals {
  double flops = 0;
  double bytes = 0;
};

ActivationTotals activation_totals(model::Activation activation) {
  model::ModelSpec model = model::load_model("nemotron4-15b");
  model.activation = activation;
  model.num_layers = 2;
  parallel::Layout layout;
  layout.seq_length = 512;
  const Graph graph = build_graph(model, parallel::resolve_layout(model, layout));
  ActivationTotals totals;
  for (const Op& op : graph.program(0).ops) {
    if (op.kind != OpKind::kElementwise || op.elementwise != ElementwiseKind::kActivation) continue;
    totals.flops += op.flops;
    totals.bytes += op.bytes;
  }
  return totals;
}

TEST(ActivationKind, SquaredReluMovesWhatGeluMovesAtAQuarterOfItsFlops) {
  const ActivationTotals relu2 = activation_totals(model::Activation::kSquaredRelu);
  const ActivationTotals gelu = activation_totals(model::Activation::kGelu);
  ASSERT_GT(gelu.flops, 0);
  EXPECT_DOUBLE_EQ(relu2.bytes, gelu.bytes);
  EXPECT_DOUBLE_EQ(relu2.flops * 4, gelu.flops);
  // Forward and backward of 2 layers over 512 tokens of FFN 24576: (1 + 2) x 2 x 512 x 24576 x 2 FLOPs.
  EXPECT_DOUBLE_EQ(relu2.flops, 3.0 * 2 * 512 * 24576 * 2);
}

TEST(ActivationKind, GeGluMovesWhatSwiGluMovesWithTheGeluTanhFormsFlops) {
  const ActivationTotals geglu = activation_totals(model::Activation::kGeGlu);
  const ActivationTotals swiglu = activation_totals(model::Activation::kSwiGlu);
  const ActivationTotals gelu = activation_totals(model::Activation::kGelu);
  ASSERT_GT(swiglu.flops, 0);
  // Gated: two inputs (gate and up) an output element, as SwiGLU; GELU reads one.
  EXPECT_DOUBLE_EQ(geglu.bytes, swiglu.bytes);
  EXPECT_GT(geglu.bytes, gelu.bytes);
  // 9 FLOPs an element (GELU's 8 and the gate's product) against SwiGLU's 6.
  EXPECT_DOUBLE_EQ(geglu.flops * 6, swiglu.flops * 9);
}

}  // namespace
}  // namespace calo::graph
