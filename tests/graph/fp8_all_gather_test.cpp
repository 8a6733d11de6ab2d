// FP8 in the graph beyond the GEMMs (docs/METRICS.md "FP8 training"): --fp8-all-gather's FSDP gathers at
// 1 byte per dense FP8 linear parameter and its amax all-reduce, which graph/check.cpp's closed form must
// agree with on every sharding.
#include <gtest/gtest.h>

#include <string>

#include "graph/check.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

// tiny-dense's FP8 linears per layer (h 256, q 256, kv 128, f 688): 2·256·256 + 2·256·128 + 3·256·688.
constexpr double kTinyFp8PerLayer = 196'608.0 + 528'384.0;
// Its layer: those and two RMSNorms of 256.
constexpr double kTinyLayer = kTinyFp8PerLayer + 512.0;

parallel::Layout fsdp_layout(bool fp8_all_gather) {
  parallel::Layout layout;
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.global_batch = 4;
  layout.precision = parallel::Precision::kFp8Tensorwise;
  layout.fp8_all_gather = fp8_all_gather;
  return layout;
}

Graph build(const parallel::Layout& layout, const std::string& model_name = "tiny-dense") {
  const model::ModelSpec model = model::load_model(model_name);
  return build_graph(model, parallel::resolve_layout(model, layout));
}

TEST(Fp8AllGather, EachLayersGatherMovesItsFp8LinearsAtOneByteAndTheScalesAreAllReducedOnce) {
  for (const bool fp8_all_gather : {false, true}) {
    const Graph graph = build(fsdp_layout(fp8_all_gather));
    int layer_gathers = 0, scale_reductions = 0;
    for (const Op& op : graph.program(0).ops) {
      if (op.kind != OpKind::kCollective) continue;
      if (op.collective == CollectiveKind::kAllGather && op.layer >= 0) {
        EXPECT_DOUBLE_EQ(op.bytes, fp8_all_gather ? 2 * kTinyLayer - kTinyFp8PerLayer : 2 * kTinyLayer);
        ++layer_gathers;
      }
      if (op.collective == CollectiveKind::kAllReduce && op.phase == Phase::kOptimizer) {
        EXPECT_DOUBLE_EQ(op.bytes, 4.0 * 4 * 4);  // one fp32 amax per linear: 4 layers x 4 linears
        EXPECT_EQ(op.group, GroupKind::kDp);
        ++scale_reductions;
      }
    }
    EXPECT_EQ(layer_gathers, 4 * 2 * 2);  // 4 layers, forward and backward, 2 micro-batches
    EXPECT_EQ(scale_reductions, fp8_all_gather ? 1 : 0);
  }
}

TEST(Fp8AllGather, TheCheckersClosedFormAgreesOnEveryShardingAndCatchesAWrongGather) {
  parallel::Layout hybrid = fsdp_layout(true);
  hybrid.dp = 4;
  hybrid.fsdp_shard_size = 2;
  hybrid.global_batch = 8;
  parallel::Layout no_reshard = fsdp_layout(true);
  no_reshard.reshard_after_forward = false;
  parallel::Layout pipelined = fsdp_layout(true);
  pipelined.pp = 2;
  pipelined.global_batch = 8;
  parallel::Layout torchtitan = fsdp_layout(true);
  torchtitan.trainer = parallel::Trainer::kTorchtitan;
  parallel::Layout overlapped = fsdp_layout(true);
  overlapped.overlap_param_gather = overlapped.overlap_grad_reduce = true;
  for (const parallel::Layout& layout :
       {fsdp_layout(true), hybrid, no_reshard, pipelined, torchtitan, overlapped}) {
    const Graph graph = expand_programs(build(layout));
    EXPECT_EQ(to_text(check_comm_volumes(graph)), "") << parallel::describe(graph.layout);
  }
  parallel::Layout moe = fsdp_layout(true);
  moe.global_batch = 2;
  const Graph moe_graph = expand_programs(build(moe, "tiny-moe"));
  EXPECT_EQ(to_text(check_comm_volumes(moe_graph)), "");
  // A gather at bf16's bytes under --fp8-all-gather is a wrong graph: the checker says so.
  Graph wrong = expand_programs(build(fsdp_layout(true)));
  for (Op& op : wrong.programs[0].ops) {
    if (op.kind == OpKind::kCollective && op.collective == CollectiveKind::kAllGather && op.layer == 0) {
      op.bytes = 2 * kTinyLayer;
      break;
    }
  }
  EXPECT_NE(to_text(check_comm_volumes(wrong)).find("dp bytes"), std::string::npos);
}

TEST(Fp8AllGather, ForwardCastsOnlyThisRanksShardOfAGatheredWeight) {
  // Forward's B (the weight) under --fp8-all-gather: read the bf16 shard (1/2 of it) and write FP8,
  // (2 + 1) / 2 bytes per value, no amax; A as before, 5 bytes per value.
  const auto first_forward_cast = [](const Graph& graph) {
    for (const Op& op : graph.program(0).ops)
      if (op.kind == OpKind::kElementwise && op.elementwise == ElementwiseKind::kCast &&
          op.phase == Phase::kForward)
        return op;
    return Op{};
  };
  const Op plain = first_forward_cast(build(fsdp_layout(false)));
  const Op gathered = first_forward_cast(build(fsdp_layout(true)));
  // The first FP8 GEMM is QKV: A 128 tokens x 256, B 256 x (256 + 2·128).
  const double a_values = 128.0 * 256, b_values = 256.0 * 512;
  EXPECT_DOUBLE_EQ(plain.bytes, 5 * a_values + 5 * b_values);
  EXPECT_DOUBLE_EQ(gathered.bytes, 5 * a_values + 1.5 * b_values);
  EXPECT_DOUBLE_EQ(gathered.flops, 3 * a_values);
}

}  // namespace
}  // namespace calo::graph
