// ZeRO-2, hybrid sharding (HSDP) and FSDP without resharding after forward: the op sequence each emits, the
// groups its collectives use, and hand counts of the closed-form volumes the checker compares against.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/check.h"
#include "graph/graph.h"
#include "model/accounting.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

// tiny-dense: N = 3,426,560 parameters per rank at tp 1 (untied embedding and output head).
constexpr double kTinyParams = 3426560;

Graph build(parallel::Layout layout, const std::string& model_name = "tiny-dense") {
  const model::ModelSpec model = model::load_model(model_name);
  return build_graph(model, parallel::resolve_layout(model, layout));
}

parallel::Layout data_parallel(int dp, int zero_stage, int microbatches) {
  parallel::Layout layout;
  layout.dp = dp;
  layout.zero_stage = zero_stage;
  layout.global_batch = dp * microbatches;
  return layout;
}

/// The data-parallel collectives of a program: (kind, group, bytes, phase, microbatch) in issue order.
std::vector<std::string> dp_collectives(const RankProgram& program) {
  std::vector<std::string> result;
  for (const Op& op : program.ops) {
    if (op.kind != OpKind::kCollective || op.group == GroupKind::kTp) continue;
    result.push_back(fmt::format("{} {} {} {} mb{}", to_string(op.collective), to_string(op.group), op.bytes,
                                 to_string(op.phase), op.microbatch));
  }
  return result;
}

int count(const RankProgram& program, CollectiveKind kind, GroupKind group, Phase phase) {
  int total = 0;
  for (const Op& op : program.ops)
    total +=
        op.kind == OpKind::kCollective && op.collective == kind && op.group == group && op.phase == phase;
  return total;
}

std::string problems_text(const Graph& graph) {
  return to_text(check_graph(graph, DeadlockScope::kAllRanks));
}

TEST(ZeroTwo, WithOneMicrobatchAndOverlapItIsZeroOnesOpSequence) {
  // Megatron-LM's distributed optimizer (ZeRO-1) reduce-scatters each bucket once its last micro-batch's
  // backward is done; ZeRO-2 reduce-scatters every micro-batch's. With one micro-batch these coincide.
  for (int tp : {1, 2}) {
    parallel::Layout layout = data_parallel(4, 1, 1);
    layout.tp = tp;
    layout.overlap_grad_reduce = layout.overlap_param_gather = true;
    const Graph zero1 = build(layout);
    layout.zero_stage = 2;
    const Graph zero2 = build(layout);
    ASSERT_EQ(zero1.programs.size(), zero2.programs.size());
    const auto& ops1 = zero1.programs[0].ops;
    const auto& ops2 = zero2.programs[0].ops;
    ASSERT_EQ(ops1.size(), ops2.size()) << "tp" << tp;
    for (std::size_t index = 0; index < ops1.size(); ++index) {
      EXPECT_EQ(describe(ops1[index]), describe(ops2[index])) << "op " << index;
      EXPECT_EQ(ops1[index].stream, ops2[index].stream) << "op " << index;
      const auto deps1 = zero1.programs[0].deps_of(index);
      const auto deps2 = zero2.programs[0].deps_of(index);
      EXPECT_EQ(std::vector<std::int32_t>(deps1.begin(), deps1.end()),
                std::vector<std::int32_t>(deps2.begin(), deps2.end()))
          << "op " << index;
    }
    EXPECT_EQ(count(zero2.programs[0], CollectiveKind::kReduceScatter, GroupKind::kDp, Phase::kBackward), 6);
  }
}

TEST(ZeroTwo, ReduceScattersEveryMicrobatchAndGathersOnceAfterTheStep) {
  // tiny-dense has 6 units (embedding, 4 layers, head); 3 micro-batches.
  const Graph zero2 = build(data_parallel(2, 2, 3));
  const RankProgram& program = zero2.programs[0];
  EXPECT_EQ(count(program, CollectiveKind::kReduceScatter, GroupKind::kDp, Phase::kBackward), 3 * 6);
  EXPECT_EQ(count(program, CollectiveKind::kAllGather, GroupKind::kDp, Phase::kOptimizer), 6);
  EXPECT_EQ(count(program, CollectiveKind::kAllReduce, GroupKind::kDp, Phase::kBackward), 0);
  // ZeRO-1 reduces once per step.
  const Graph zero1 = build(data_parallel(2, 1, 3));
  EXPECT_EQ(count(zero1.programs[0], CollectiveKind::kReduceScatter, GroupKind::kDp, Phase::kBackward), 6);
  // Volumes: (m + 1) x 2 N bytes per rank for ZeRO-2, 2 x 2 N for ZeRO-1.
  EXPECT_DOUBLE_EQ(comm_volumes(zero2).dp_bytes, 2 * (3 + 1) * 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(comm_volumes(zero1).dp_bytes, 2 * 2 * 2 * kTinyParams);
  EXPECT_EQ(problems_text(zero2), "");
  // The optimizer updates the 1/dp shard, as under ZeRO-1.
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::kOptimizer) {
      EXPECT_DOUBLE_EQ(op.parameters, kTinyParams / 2);
    }
  }
}

TEST(HybridSharding, GathersAndReduceScattersInTheShardGroupAndAllReducesTheShardAcrossGroups) {
  parallel::Layout layout = data_parallel(4, 3, 1);
  layout.fsdp_shard_size = 2;
  const Graph graph = build(layout);
  // Groups: shard groups {0,1} {2,3}, replicate groups {0,2} {1,3}.
  const int shard = graph.group_id(1, GroupKind::kDpShard);
  const int replicate = graph.group_id(1, GroupKind::kDpReplicate);
  ASSERT_GE(shard, 0);
  ASSERT_GE(replicate, 0);
  EXPECT_EQ(graph.groups[shard].ranks, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(graph.groups[replicate].ranks, (std::vector<std::int32_t>{1, 3}));
  const RankProgram& program = graph.programs[0];
  // No collective over the whole dp group.
  for (const Op& op : program.ops) EXPECT_FALSE(op.kind == OpKind::kCollective && op.group == GroupKind::kDp);
  // Each reduce-scatter in the shard group is followed by the all-reduce of its 1/S shard.
  std::vector<const Op*> ops;
  for (const Op& op : program.ops)
    if (op.kind == OpKind::kCollective && op.group != GroupKind::kTp) ops.push_back(&op);
  int pairs = 0;
  for (std::size_t index = 0; index + 1 < ops.size(); ++index) {
    const Op& reduce = *ops[index];
    if (reduce.collective != CollectiveKind::kReduceScatter) continue;
    const Op& all_reduce = *ops[index + 1];
    ASSERT_EQ(all_reduce.collective, CollectiveKind::kAllReduce) << dp_collectives(program)[index];
    EXPECT_EQ(reduce.group, GroupKind::kDpShard);
    EXPECT_EQ(all_reduce.group, GroupKind::kDpReplicate);
    EXPECT_DOUBLE_EQ(all_reduce.bytes, reduce.bytes / 2);
    ++pairs;
  }
  EXPECT_EQ(pairs, 6);
  EXPECT_EQ(count(program, CollectiveKind::kAllGather, GroupKind::kDpShard, Phase::kForward), 6);
  EXPECT_EQ(count(program, CollectiveKind::kAllGather, GroupKind::kDpShard, Phase::kBackward), 6);
  // Hand count over 4 ranks, m = 1: shard group 3 passes (gather fwd, gather bwd, reduce-scatter) x 2N bytes,
  // replicate group one all-reduce of 2N / S.
  const CommVolumes volumes = comm_volumes(graph);
  EXPECT_DOUBLE_EQ(volumes.dp_bytes, 4 * (3 * 2 * kTinyParams + 2 * kTinyParams / 2));
  EXPECT_DOUBLE_EQ(volumes.dp_replicate_bytes, 4 * 2 * kTinyParams / 2);
  // The optimizer updates 1/S of the parameters.
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::kOptimizer) {
      EXPECT_DOUBLE_EQ(op.parameters, kTinyParams / 2);
    }
  }
  EXPECT_EQ(problems_text(graph), "");
}

TEST(HybridSharding, FullShardingKeepsTheDpGroupAndShardOfOneOnlyAllReduces) {
  parallel::Layout layout = data_parallel(4, 3, 1);
  layout.fsdp_shard_size = 4;  // S = dp: plain FSDP
  const Graph full = build(layout);
  EXPECT_LT(full.group_id(0, GroupKind::kDpShard), 0);
  EXPECT_EQ(count(full.programs[0], CollectiveKind::kReduceScatter, GroupKind::kDp, Phase::kBackward), 6);
  layout.fsdp_shard_size = 1;  // S = 1: every rank holds everything; gradients are all-reduced over dp
  const Graph replicated = build(layout);
  EXPECT_EQ(count(replicated.programs[0], CollectiveKind::kAllGather, GroupKind::kDpShard, Phase::kForward),
            0);
  EXPECT_EQ(
      count(replicated.programs[0], CollectiveKind::kAllReduce, GroupKind::kDpReplicate, Phase::kBackward),
      6);
  EXPECT_DOUBLE_EQ(comm_volumes(replicated).dp_bytes, 4 * 2 * kTinyParams);
  EXPECT_EQ(problems_text(replicated), "");
}

TEST(ReshardAfterForward, OffSkipsTheBackwardGatherWithoutPipelining) {
  parallel::Layout layout = data_parallel(2, 3, 3);
  const Graph resharding = build(layout);
  EXPECT_EQ(count(resharding.programs[0], CollectiveKind::kAllGather, GroupKind::kDp, Phase::kBackward),
            3 * 6);
  layout.reshard_after_forward = false;
  const Graph keeping = build(layout);
  const RankProgram& program = keeping.programs[0];
  EXPECT_EQ(count(program, CollectiveKind::kAllGather, GroupKind::kDp, Phase::kForward), 3 * 6);
  EXPECT_EQ(count(program, CollectiveKind::kAllGather, GroupKind::kDp, Phase::kBackward), 0);
  EXPECT_EQ(count(program, CollectiveKind::kReduceScatter, GroupKind::kDp, Phase::kBackward), 3 * 6);
  // 2 ranks x m = 3 x (gather + reduce-scatter) x 2N, against 3 passes when resharding.
  EXPECT_DOUBLE_EQ(comm_volumes(keeping).dp_bytes, 2 * 3 * 2 * 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(comm_volumes(resharding).dp_bytes, 2 * 3 * 3 * 2 * kTinyParams);
  EXPECT_EQ(problems_text(keeping), "");
}

TEST(ReshardAfterForward, OffUnderOneFOneBGathersWhenAChunkWasFreedByABackward) {
  // Stage 0 of pp 2 with 4 micro-batches runs F0 F1 B0 F2 B1 F3 B2 B3. FSDP2 frees after every backward, so
  // F0, F2, F3 gather in forward and B3 (after B2 freed the units) gathers in backward; F1, B0, B1, B2 find
  // them held.
  parallel::Layout layout = data_parallel(2, 3, 4);
  layout.pp = 2;
  layout.reshard_after_forward = false;
  const Graph graph = build(layout);
  const RankProgram& stage0 = graph.programs[0];
  std::vector<int> forward_gathers, backward_gathers;
  for (const Op& op : stage0.ops) {
    if (op.kind != OpKind::kCollective || op.collective != CollectiveKind::kAllGather) continue;
    if (op.layer != 0) continue;  // one unit stands for all
    (op.phase == Phase::kForward ? forward_gathers : backward_gathers).push_back(op.microbatch);
  }
  EXPECT_EQ(forward_gathers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(backward_gathers, (std::vector<int>{3}));
  EXPECT_EQ(problems_text(graph), "");
}

TEST(TorchtitanTrainer, ReducesGradientsInFp32AndGathersParametersInBf16) {
  // torchtitan's FSDP2 and DDP reduce gradients in fp32 (its mixed_precision_reduce default) and gather bf16
  // compute copies: its graph is the default one with every gradient collective's bytes doubled, measured on
  // two H200 as 872 448 000-byte reduce-scatters of a 218 M-parameter layer (docs/benchmarks/torchtitan.md).
  for (int zero_stage : {0, 3}) {
    parallel::Layout layout = data_parallel(2, zero_stage, 2);
    layout.overlap_grad_reduce = layout.overlap_param_gather = zero_stage == 3;
    const Graph reference = build(layout);
    layout.trainer = parallel::Trainer::kTorchtitan;
    const Graph torchtitan = build(layout);
    EXPECT_EQ(problems_text(torchtitan), "") << "zero " << zero_stage;
    const auto& ops = torchtitan.programs[0].ops;
    ASSERT_EQ(ops.size(), reference.programs[0].ops.size());
    int gradients = 0;
    for (std::size_t index = 0; index < ops.size(); ++index) {
      const Op& op = ops[index];
      const Op& base = reference.programs[0].ops[index];
      if (op.kind != OpKind::kCollective || op.group == GroupKind::kTp) {
        EXPECT_EQ(op.bytes, base.bytes) << describe(op);
        continue;
      }
      const bool gradient = op.collective != CollectiveKind::kAllGather;
      gradients += gradient;
      EXPECT_EQ(op.bytes, base.bytes * (gradient ? 2.0 : 1.0)) << describe(op);
      if (gradient) {
        EXPECT_EQ(op.bytes, 4.0 * op.parameters) << describe(op);
      }
    }
    EXPECT_GT(gradients, 0) << "zero " << zero_stage;
  }
}

}  // namespace
}  // namespace calo::graph
