// The feed-forward activation's elementwise op in the graph: squared ReLU (Nemotron-4) moves what GELU moves
// and counts 2 FLOPs an element against GELU's 8 (docs/METRICS.md "Elementwise FLOPs").
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

}  // namespace
}  // namespace calo::graph
