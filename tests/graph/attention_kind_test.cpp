// Attention implementation (fused flash-style or unfused GEMM + softmax + GEMM) and Megatron-LM's pipeline
// scatter/gather in the execution graph: op sequences, FLOP and volume checkers, memory (issue 16, items 3
// and 4).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/check.h"
#include "graph/graph.h"
#include "model/accounting.h"
#include "model/model_spec.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

parallel::Layout resolved(const model::ModelSpec& model, parallel::Layout layout, bool sp_explicit = false) {
  return parallel::resolve_layout(model, layout, sp_explicit);
}

TEST(AttentionKind, UnfusedCoreIsBatchedGemmSoftmaxGemmOverEverySequenceAndHead) {
  const model::ModelSpec model = model::load_model("llama3-8b");
  parallel::Layout layout;
  layout.tp = 2;
  layout.micro_batch = 2;
  layout.seq_length = 512;
  layout.attention = parallel::AttentionImpl::kUnfused;
  const Graph graph = build_graph(model, resolved(model, layout));
  const auto& ops = graph.program(0).ops;
  EXPECT_TRUE(
      std::none_of(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::kAttention; }));
  const std::int64_t products = 2 * model.num_attention_heads / 2;  // micro-batch x heads per tp rank
  int scores = 0, contexts = 0, softmaxes = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kAttnScore &&
        op.gemm.pass == GemmPass::kForward) {
      ++scores;
      EXPECT_EQ(op.gemm.batch, products);
      EXPECT_EQ(op.gemm.m, 512);
      EXPECT_EQ(op.gemm.n, 512);
      EXPECT_EQ(op.gemm.k, model.head_dim);
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * products * 512.0 * 512.0 * model.head_dim);
    }
    if (op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kAttnContext &&
        op.gemm.pass == GemmPass::kForward) {
      ++contexts;
      EXPECT_EQ(op.gemm.m, 512);
      EXPECT_EQ(op.gemm.n, model.head_dim);
      EXPECT_EQ(op.gemm.k, 512);
    }
    if (op.kind == OpKind::kElementwise && op.elementwise == ElementwiseKind::kSoftmax) {
      ++softmaxes;
      EXPECT_EQ(op.attention.seq, 512);
      EXPECT_EQ(std::int64_t{op.attention.batch} * op.attention.heads, products);
    }
  }
  // One forward per layer; backward has one softmax backward per layer.
  EXPECT_EQ(scores, model.num_layers);
  EXPECT_EQ(contexts, model.num_layers);
  EXPECT_EQ(softmaxes, 2 * model.num_layers);
  EXPECT_EQ(span_name(ops[0]).rfind("elementwise", 0), 0u);  // the sequence still starts with the embedding
}

TEST(AttentionKind, UnfusedDoesTheFullScoresSoAttentionFlopsDoubleAndEveryCheckerPasses) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  for (const auto recompute :
       {parallel::Recompute::kNone, parallel::Recompute::kSelective, parallel::Recompute::kFull}) {
    parallel::Layout layout;
    layout.tp = 2;
    layout.pp = 2;
    layout.dp = 2;
    layout.global_batch = 8;
    layout.seq_length = 128;
    layout.recompute = recompute;
    const parallel::Layout fused_layout = resolved(model, layout);
    layout.attention = parallel::AttentionImpl::kUnfused;
    const parallel::Layout unfused_layout = resolved(model, layout);
    const Graph fused = build_graph(model, fused_layout);
    const Graph unfused = build_graph(model, unfused_layout);
    const FlopTotals fused_flops = flop_totals(fused);
    const FlopTotals unfused_flops = flop_totals(unfused);
    EXPECT_NEAR(unfused_flops.attention / fused_flops.attention, 2.0, 1e-12)
        << parallel::to_string(recompute);
    EXPECT_NEAR(unfused_flops.gemm, fused_flops.gemm, 1e-9 * fused_flops.gemm);
    EXPECT_TRUE(check_graph(unfused, DeadlockScope::kAllRanks).empty())
        << to_text(check_graph(unfused, DeadlockScope::kAllRanks));
  }
}

TEST(AttentionKind, Flash2IsTheFusedCoreMarkedForItsKernelWithTheSameFlopsAndMemory) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  parallel::Layout layout;
  layout.seq_length = 64;
  layout.global_batch = 1;
  const parallel::Layout fused_layout = resolved(model, layout);
  layout.attention = parallel::parse_attention("flash2");
  const parallel::Layout flash2_layout = resolved(model, layout);
  EXPECT_NE(parallel::describe(flash2_layout).find("flash2-attn"), std::string::npos);
  const Graph fused = build_graph(model, fused_layout);
  const Graph flash2 = build_graph(model, flash2_layout);
  ASSERT_EQ(fused.program(0).ops.size(), flash2.program(0).ops.size());
  int attention_ops = 0;
  for (size_t i = 0; i < fused.program(0).ops.size(); ++i) {
    const Op& a = fused.program(0).ops[i];
    const Op& b = flash2.program(0).ops[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_DOUBLE_EQ(a.flops, b.flops);
    if (a.kind != OpKind::kAttention) continue;
    ++attention_ops;
    EXPECT_FALSE(a.attention.flash2);
    EXPECT_TRUE(b.attention.flash2);
  }
  EXPECT_GT(attention_ops, 0);
  EXPECT_TRUE(check_graph(flash2, DeadlockScope::kAllRanks).empty());
  EXPECT_DOUBLE_EQ(parallel::memory_per_gpu(model, flash2_layout).total_bytes(),
                   parallel::memory_per_gpu(model, fused_layout).total_bytes());
}

TEST(AttentionKind, TheCheckerCatchesAnUnfusedCoreCountedAsCausal) {
  // A graph whose softmax masks half the scores away in FLOPs too (as a wrong closed form would) must fail.
  const model::ModelSpec model = model::load_model("tiny-dense");
  parallel::Layout layout;
  layout.seq_length = 128;
  layout.attention = parallel::AttentionImpl::kUnfused;
  Graph graph = expand_programs(build_graph(model, resolved(model, layout)));
  for (Op& op : graph.programs[0].ops)
    if (op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kAttnScore) op.flops /= 2;
  const auto problems = check_flops(graph);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].message.find("attention FLOPs"), std::string::npos) << problems[0].message;
}

TEST(AttentionKind, UnfusedKeepsTheScoresForBackwardInTheMemoryModel) {
  // GPT-3 175B (dropout 0.1): unfused keeps 5 a s bytes more per token and tp rank than flash's 4 a of
  // log-sum-exp — Korthikanti et al.'s 5 a s^2 b term.
  const model::ModelSpec model = model::load_model("gpt3-175b");
  const int seq = 2048, mbs = 1, tp = 8;
  const double a = model.num_attention_heads;
  const double fused =
      model::activation_bytes_per_layer(model, seq, mbs, tp, true, model::Recompute::kNone, true);
  const double unfused =
      model::activation_bytes_per_layer(model, seq, mbs, tp, true, model::Recompute::kNone, false);
  EXPECT_DOUBLE_EQ(unfused - fused, seq * mbs * (5.0 * a * seq - 4.0 * a) / tp);
  parallel::Layout layout;
  layout.tp = tp;
  layout.pp = 8;
  layout.dp = 1;
  layout.global_batch = 16;
  const parallel::MemoryBreakdown fused_memory = parallel::memory_per_gpu(model, resolved(model, layout));
  layout.attention = parallel::AttentionImpl::kUnfused;
  const parallel::MemoryBreakdown unfused_memory = parallel::memory_per_gpu(model, resolved(model, layout));
  const double layers = model.num_layers / 8.0;
  EXPECT_NEAR(unfused_memory.activations_bytes - fused_memory.activations_bytes,
              unfused_memory.inflight_microbatches * layers * (unfused - fused), 1.0);
  EXPECT_DOUBLE_EQ(unfused_memory.weights_bytes, fused_memory.weights_bytes);
  // Selective recompute drops the core's activations: the two implementations then keep the same bytes.
  EXPECT_DOUBLE_EQ(
      model::activation_bytes_per_layer(model, seq, mbs, tp, true, model::Recompute::kSelective, false),
      model::activation_bytes_per_layer(model, seq, mbs, tp, true, model::Recompute::kSelective, true));
}

/// Sends and TP all-gathers of stage 1's program (receives from stage 0 and sends back gradients).
struct PipelineTraffic {
  std::vector<double> send_bytes;
  int gathers_after_receive = 0;
};

PipelineTraffic traffic(const Graph& graph, int rank) {
  PipelineTraffic result;
  const auto& program = graph.program(rank);
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    if (op.kind == OpKind::kSend) result.send_bytes.push_back(op.bytes);
    if (op.kind == OpKind::kCollective && op.group == GroupKind::kTp &&
        op.collective == CollectiveKind::kAllGather)
      for (std::int32_t dep : program.deps_of(index))
        if (program.ops[static_cast<std::size_t>(dep)].kind == OpKind::kRecv) ++result.gathers_after_receive;
  }
  return result;
}

TEST(PipelineScatterGather, WithoutSequenceParallelEachTpRankSendsASliceAndGathersOnArrival) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  parallel::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.global_batch = 4;
  layout.seq_length = 128;
  layout.sequence_parallel = false;
  const parallel::Layout on = resolved(model, layout, /*sp_explicit=*/true);
  ASSERT_TRUE(on.scatter_gather_in_effect());
  const Graph graph = build_graph(model, on);
  const double activation = 2.0 * 128 * model.hidden_size;  // bf16, one sequence
  const PipelineTraffic first = traffic(graph, 0);          // stage 0: sends 4 activations
  ASSERT_EQ(first.send_bytes.size(), 4u);
  for (double bytes : first.send_bytes) EXPECT_DOUBLE_EQ(bytes, activation / 2);
  EXPECT_EQ(first.gathers_after_receive, 4);  // the 4 gradients it receives
  EXPECT_EQ(traffic(graph, graph.world_size() - 1).gathers_after_receive, 4);
  EXPECT_TRUE(check_graph(graph, DeadlockScope::kAllRanks).empty())
      << to_text(check_graph(graph, DeadlockScope::kAllRanks));

  layout.pipeline_scatter_gather = false;
  const Graph off = build_graph(model, resolved(model, layout, true));
  const PipelineTraffic whole = traffic(off, 0);
  for (double bytes : whole.send_bytes) EXPECT_DOUBLE_EQ(bytes, activation);
  EXPECT_EQ(whole.gathers_after_receive, 0);
  // The closed forms move the bytes from the pipeline class to the TP class.
  const CommVolumes with = comm_volumes(graph), without = comm_volumes(off);
  EXPECT_DOUBLE_EQ(with.pp_bytes * 2, without.pp_bytes);
  EXPECT_DOUBLE_EQ(with.tp_bytes - without.tp_bytes, without.pp_bytes);
}

TEST(PipelineScatterGather, SequenceParallelActivationsAreAlreadySplitSoNothingChanges) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  parallel::Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.global_batch = 4;
  layout.seq_length = 128;
  const parallel::Layout sp = resolved(model, layout);  // sequence parallel on by default with tp > 1
  ASSERT_TRUE(sp.sequence_parallel);
  EXPECT_FALSE(sp.scatter_gather_in_effect());
  EXPECT_EQ(traffic(build_graph(model, sp), 0).gathers_after_receive, 0);
}

TEST(PipelineScatterGather, EveryLayoutOfAGridPassesEveryCheckerWithEitherAttentionKind) {
  int checked = 0;
  // MoE needs sequence parallel with tp > 1 (as Megatron-LM), so scatter/gather never applies to it.
  const model::ModelSpec model = model::load_model("tiny-dense");
  for (bool sequence_parallel : {false, true}) {
    for (int tp : {2, 4}) {
      for (int pp : {2, 4}) {
        for (int vpp : {1, 2}) {
          for (int factor : {1, 2}) {
            for (const auto attention :
                 {parallel::AttentionImpl::kFused, parallel::AttentionImpl::kUnfused}) {
              parallel::Layout layout;
              layout.tp = tp;
              layout.pp = pp;
              layout.dp = 2;
              layout.schedule = vpp > 1 ? parallel::Schedule::kInterleaved : parallel::Schedule::k1F1B;
              layout.virtual_stages = vpp;
              layout.global_batch = factor * pp * layout.dp;
              layout.seq_length = 64;
              layout.sequence_parallel = sequence_parallel;
              layout.attention = attention;
              parallel::Layout valid;
              try {
                valid = resolved(model, layout, true);
              } catch (const std::exception&) {
                continue;
              }
              const Graph graph = build_graph(model, valid);
              const auto problems = check_graph(graph, DeadlockScope::kAllRanks);
              EXPECT_TRUE(problems.empty()) << parallel::describe(valid) << "\n" << to_text(problems);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace calo::graph
