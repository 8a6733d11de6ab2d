// Execution graph: structure of the op sequence, shared programs, and every checker on many layouts.
#include "graph/graph.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "graph/check.h"
#include "graph/json.h"
#include "model/accounting.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

struct Case {
  std::string model;
  parallel::Layout layout;
  bool sequence_parallel_explicit = false;
  double imbalance = 1.0;
};

Graph build(const Case& test_case) {
  const model::ModelSpec spec = model::load_model(test_case.model);
  const parallel::Layout layout =
      parallel::resolve_layout(spec, test_case.layout, test_case.sequence_parallel_explicit);
  GraphOptions options;
  options.expert_load_imbalance = test_case.imbalance;
  return build_graph(spec, layout, options);
}

parallel::Layout make_layout(int tp, int pp, int dp, int micro_batch, int global_batch) {
  parallel::Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.micro_batch = micro_batch;
  layout.global_batch = global_batch;
  return layout;
}

std::string label(const Case& test_case) {
  const auto& layout = test_case.layout;
  return fmt::format("{} tp{} pp{} dp{} ep{} sp{} zero{} recompute={} sched={} vpp{} overlap={}{}{} imb={}",
                     test_case.model, layout.tp, layout.pp, layout.dp, layout.ep, layout.sequence_parallel,
                     layout.zero_stage, parallel::to_string(layout.recompute),
                     parallel::to_string(layout.schedule), layout.virtual_stages, layout.overlap_tp_comm,
                     layout.overlap_grad_reduce, layout.overlap_param_gather, test_case.imbalance);
}

/// The small-model layout matrix: every option crossed with a few sizes.
std::vector<Case> small_cases() {
  std::vector<Case> cases;
  for (const char* model_name : {"tiny-dense", "tiny-moe"}) {
    const bool moe = std::string(model_name) == "tiny-moe";
    for (int tp : {1, 2}) {
      for (int pp : {1, 2, 4}) {
        for (int dp : {1, 2, 4}) {
          for (int zero : {0, 1, 2, 3}) {
            for (auto recompute : {model::Recompute::kNone, model::Recompute::kSelective,
                                   model::Recompute::kFull, model::Recompute::kOp}) {
              if (moe && recompute == model::Recompute::kOp) continue;  // refused: dense models only
              for (bool overlap : {false, true}) {
                Case test_case{model_name, make_layout(tp, pp, dp, 2, 2 * dp * 4)};
                test_case.layout.zero_stage = zero;
                test_case.layout.recompute = recompute;
                test_case.layout.overlap_tp_comm = test_case.layout.overlap_grad_reduce = overlap;
                test_case.layout.overlap_param_gather = overlap && zero > 0;
                if (moe) test_case.layout.ep = dp >= 2 ? 2 : 1;
                cases.push_back(test_case);
              }
            }
          }
        }
      }
    }
  }
  // Schedules, interleaving, no sequence parallel, uneven partition, expert imbalance, full ep.
  for (auto schedule : {parallel::Schedule::kGpipe, parallel::Schedule::k1F1B}) {
    Case test_case{"tiny-dense", make_layout(2, 4, 2, 1, 16)};
    test_case.layout.schedule = schedule;
    cases.push_back(test_case);
  }
  {
    Case test_case{"tiny-dense", make_layout(1, 2, 2, 1, 16)};
    test_case.layout.schedule = parallel::Schedule::kInterleaved;
    test_case.layout.virtual_stages = 2;
    cases.push_back(test_case);
    test_case.layout.overlap_grad_reduce = test_case.layout.overlap_param_gather = true;
    test_case.layout.zero_stage = 1;
    cases.push_back(test_case);
  }
  {
    Case test_case{"tiny-dense", make_layout(2, 2, 2, 1, 8)};
    test_case.layout.sequence_parallel = false;
    test_case.sequence_parallel_explicit = true;
    cases.push_back(test_case);
    test_case.layout.overlap_tp_comm = true;
    test_case.layout.recompute = model::Recompute::kFull;
    cases.push_back(test_case);
  }
  {
    Case test_case{"tiny-dense", make_layout(1, 2, 1, 1, 4)};
    test_case.layout.layers_per_stage = {1, 3};
    cases.push_back(test_case);
  }
  for (double imbalance : {1.0, 1.5, 2.0}) {
    Case test_case{"tiny-moe", make_layout(2, 2, 4, 1, 16), false, imbalance};
    test_case.layout.ep = 4;
    cases.push_back(test_case);
  }
  return cases;
}

TEST(GraphChecks, SmallLayoutsPassEveryChecker) {
  int checked = 0;
  for (const Case& test_case : small_cases()) {
    Graph graph;
    try {
      graph = build(test_case);
    } catch (const InputError& error) {
      ADD_FAILURE() << label(test_case) << ": " << error.what();
      continue;
    }
    const auto problems = check_graph(graph, DeadlockScope::kAllRanks);
    EXPECT_TRUE(problems.empty()) << label(test_case) << "\n" << to_text(problems);
    ++checked;
  }
  EXPECT_GT(checked, 600);
}

TEST(GraphChecks, LargeModelsPassWithSharedPrograms) {
  std::vector<Case> cases;
  Case gpt{"gpt3-175b", make_layout(8, 16, 64, 1, 1536)};
  cases.push_back(gpt);
  gpt.layout.recompute = model::Recompute::kFull;
  gpt.layout.zero_stage = 1;
  gpt.layout.overlap_tp_comm = gpt.layout.overlap_grad_reduce = gpt.layout.overlap_param_gather = true;
  cases.push_back(gpt);
  Case llama{"llama3-70b", make_layout(8, 4, 2, 1, 128)};
  cases.push_back(llama);
  llama.layout.zero_stage = 3;
  llama.layout.pp = 1;
  llama.layout.dp = 8;
  cases.push_back(llama);
  Case llama_interleaved{"llama3-70b", make_layout(4, 4, 4, 1, 128)};
  llama_interleaved.layout.schedule = parallel::Schedule::kInterleaved;
  llama_interleaved.layout.virtual_stages = 5;
  cases.push_back(llama_interleaved);
  Case mixtral{"mixtral-8x7b", make_layout(1, 2, 32, 1, 128)};
  mixtral.layout.ep = 8;
  cases.push_back(mixtral);
  mixtral.layout.tp = 2;
  mixtral.layout.dp = 16;
  mixtral.layout.ep = 4;
  mixtral.imbalance = 1.25;
  cases.push_back(mixtral);
  for (const Case& test_case : cases) {
    const Graph graph = build(test_case);
    EXPECT_LE(graph.programs.size(), static_cast<std::size_t>(graph.layout.pp * graph.layout.ep));
    const auto problems = check_graph(graph, DeadlockScope::kRepresentative);
    EXPECT_TRUE(problems.empty()) << label(test_case) << "\n" << to_text(problems);
  }
}

TEST(GraphChecks, RepresentativeDeadlockScopeAgreesWithAllRanks) {
  for (const Case& test_case : small_cases()) {
    if (test_case.layout.pp < 2) continue;
    const Graph graph = build(test_case);
    EXPECT_EQ(check_deadlock(graph, DeadlockScope::kAllRanks).empty(),
              check_deadlock(graph, DeadlockScope::kRepresentative).empty())
        << label(test_case);
  }
}

// ---- the checkers find what is wrong
// ----------------------------------------------------------------------------

Graph expanded_tiny(int tp, int pp, int dp) {
  Case test_case{"tiny-dense", make_layout(tp, pp, dp, 1, dp * 4)};
  return expand_programs(build(test_case));
}

int first_op(const RankProgram& program, OpKind kind, GroupKind group = GroupKind::kTp) {
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    if (op.kind == kind && (kind != OpKind::kCollective || op.group == group)) return static_cast<int>(index);
  }
  return -1;
}

TEST(GraphCheckers, CollectiveOfDifferentSizeOnOneMemberIsReported) {
  Graph graph = expanded_tiny(2, 2, 2);
  ASSERT_TRUE(check_collectives(graph).empty());
  RankProgram& program = graph.programs[3];
  const int index = first_op(program, OpKind::kCollective, GroupKind::kTp);
  ASSERT_GE(index, 0);
  program.ops[index].bytes += 2;
  const auto problems = check_collectives(graph);
  ASSERT_EQ(problems.size(), 1u) << to_text(problems);
  EXPECT_NE(problems[0].message.find("rank 3"), std::string::npos) << problems[0].message;
}

TEST(GraphCheckers, CollectivesInDifferentOrderAreReported) {
  Graph graph = expanded_tiny(2, 1, 2);
  RankProgram& program = graph.programs[1];
  std::vector<int> tp_ops;
  for (std::size_t index = 0; index < program.ops.size(); ++index)
    if (program.ops[index].kind == OpKind::kCollective && program.ops[index].group == GroupKind::kTp)
      tp_ops.push_back(static_cast<int>(index));
  // Swap an all-gather with a reduce-scatter of the same size.
  int gather = -1, scatter = -1;
  for (int index : tp_ops) {
    if (gather < 0 && program.ops[index].collective == CollectiveKind::kAllGather) gather = index;
    if (scatter < 0 && program.ops[index].collective == CollectiveKind::kReduceScatter) scatter = index;
  }
  ASSERT_GE(gather, 0);
  ASSERT_GE(scatter, 0);
  std::swap(program.ops[gather].collective, program.ops[scatter].collective);
  EXPECT_FALSE(check_collectives(graph).empty());
}

TEST(GraphCheckers, MissingReceiveIsReportedAndDeadlocks) {
  Graph graph = expanded_tiny(1, 2, 1);
  ASSERT_TRUE(check_point_to_point(graph).empty());
  ASSERT_TRUE(check_deadlock(graph).empty());
  RankProgram& program = graph.programs[1];
  const int index = first_op(program, OpKind::kRecv);
  ASSERT_GE(index, 0);
  program.ops[index].tag += 1000;  // now matches no send
  EXPECT_FALSE(check_point_to_point(graph).empty());
  const auto deadlock = check_deadlock(graph);
  ASSERT_FALSE(deadlock.empty());
  EXPECT_NE(deadlock[0].message.find("stuck"), std::string::npos);
}

TEST(GraphCheckers, SendBeforeReceiveOnBothSidesDeadlocks) {
  // GPipe with stage 1 reordered so that it sends its gradient before receiving the next activation, while
  // stage 0 waits to send that activation first: a cycle of blocking sends.
  Graph graph = expanded_tiny(1, 2, 1);
  RankProgram& program = graph.programs[1];
  std::vector<int> pp_ops;
  for (std::size_t index = 0; index < program.ops.size(); ++index)
    if (program.ops[index].stream == Stream::kPpComm) pp_ops.push_back(static_cast<int>(index));
  // Stage 1 receives activation mb0, later sends gradient mb0. Move the last send to the very front of the
  // stream by swapping it with the first receive: it can never match (stage 0 has not computed anything).
  ASSERT_GE(pp_ops.size(), 2u);
  std::swap(program.ops[pp_ops.front()], program.ops[pp_ops.back()]);
  EXPECT_FALSE(check_deadlock(graph).empty());
}

TEST(GraphCheckers, WrongGemmFlopsAreReported) {
  Graph graph = expanded_tiny(2, 2, 1);
  ASSERT_TRUE(check_flops(graph).empty());
  const int index = first_op(graph.programs[0], OpKind::kGemm);
  graph.programs[0].ops[index].flops *= 1.001;
  const auto problems = check_flops(graph);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("GEMM"), std::string::npos);
}

TEST(GraphCheckers, MissingAttentionIsReported) {
  Graph graph = expanded_tiny(1, 1, 1);
  const int index = first_op(graph.programs[0], OpKind::kAttention);
  graph.programs[0].ops[index].flops = 0;
  const auto problems = check_flops(graph);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("attention"), std::string::npos);
}

TEST(GraphCheckers, ExtraCommunicationIsReported) {
  Graph graph = expanded_tiny(2, 2, 2);
  ASSERT_TRUE(check_comm_volumes(graph).empty());
  const int index = first_op(graph.programs[0], OpKind::kCollective, GroupKind::kDp);
  ASSERT_GE(index, 0);
  graph.programs[0].ops[index].bytes *= 2;
  const auto problems = check_comm_volumes(graph);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].message.substr(0, 2), "dp");
}

// ---- structure
// ----------------------------------------------------------------------------------------------

TEST(GraphStructure, ProgramsAreSharedPerStage) {
  const Graph graph = build(Case{"llama3-70b", make_layout(8, 4, 4, 1, 64)});
  EXPECT_EQ(graph.programs.size(), 4u);
  EXPECT_EQ(graph.world_size(), 128);
  for (int rank = 0; rank < graph.world_size(); ++rank)
    EXPECT_EQ(graph.program(rank).stage, rank / 32);  // rank = tp + 8 (dp + 4 pp)
}

TEST(GraphStructure, ImbalanceSplitsProgramsByExpertIndex) {
  const Graph graph = build(Case{"tiny-moe", make_layout(1, 2, 4, 1, 8), false, 2.0});
  // ep defaults to 1 here: nothing to split.
  EXPECT_EQ(graph.programs.size(), 2u);
  Case split{"tiny-moe", make_layout(1, 2, 4, 1, 8), false, 2.0};
  split.layout.ep = 4;
  const Graph by_ep = build(split);
  EXPECT_EQ(by_ep.programs.size(), 8u);
  // Expert 0 is hot: its GEMM has twice the mean tokens; the others share the rest.
  double hot = 0, cold = 0;
  for (const Op& op : by_ep.programs[0].ops)
    if (op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kExpertFc1 &&
        op.gemm.pass == GemmPass::kForward)
      hot = static_cast<double>(op.gemm.m);
  for (const Op& op : by_ep.programs[1].ops)
    if (op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kExpertFc1 &&
        op.gemm.pass == GemmPass::kForward)
      cold = static_cast<double>(op.gemm.m);
  // mean = ep * tokens * top_k / E = 4 * 128 * 2 / 4 = 256.
  EXPECT_DOUBLE_EQ(hot, 512);
  EXPECT_DOUBLE_EQ(cold, 171);  // 512 left over 3 experts: 171, 171, 170
}

TEST(GraphStructure, SequenceParallelGathersBeforeColumnAndScattersAfterRow) {
  const Graph graph = build(Case{"tiny-dense", make_layout(2, 1, 1, 1, 1)});
  const auto ops = materialize(graph, 0);
  // First layer forward: norm, all-gather, qkv gemm, rope, attention, proj gemm, reduce-scatter.
  std::vector<std::string> names;
  for (const auto& rank_op : ops) {
    if (rank_op.op.layer != 0 || rank_op.op.phase != Phase::kForward) continue;
    names.push_back(
        describe(rank_op.op).substr(0, describe(rank_op.op).find(' ', describe(rank_op.op).find(' ') + 1)));
    if (names.size() == 7) break;
  }
  const std::vector<std::string> expected = {"elementwise norm", "all_gather tp", "gemm qkv",
                                             "elementwise rope", "attention fwd", "gemm proj",
                                             "reduce_scatter tp"};
  EXPECT_EQ(names, expected);
}

TEST(GraphStructure, WithoutSequenceParallelRowOutputIsAllReduced) {
  Case test_case{"tiny-dense", make_layout(2, 1, 1, 1, 1)};
  test_case.layout.sequence_parallel = false;
  test_case.sequence_parallel_explicit = true;
  const Graph graph = build(test_case);
  int all_reduce = 0, gathers = 0;
  for (const Op& op : graph.programs[0].ops) {
    if (op.kind != OpKind::kCollective || op.group != GroupKind::kTp) continue;
    if (op.collective == CollectiveKind::kAllReduce) ++all_reduce;
    if (op.collective == CollectiveKind::kAllGather) ++gathers;
  }
  // 4 layers x (2 fwd + 2 bwd) + embedding (1) + cross entropy (2) + logits backward (1).
  EXPECT_EQ(all_reduce, 4 * 4 + 1 + 2 + 1);
  EXPECT_EQ(gathers, 0);
}

TEST(GraphStructure, NoOverlapMakesComputeWaitOnEveryTpCollective) {
  const Graph graph = build(Case{"tiny-dense", make_layout(2, 1, 1, 1, 1)});
  const RankProgram& program = graph.programs[0];
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    if (op.kind != OpKind::kCollective || op.group != GroupKind::kTp) continue;
    // The next compute op depends on this collective.
    for (std::size_t next = index + 1; next < program.ops.size(); ++next) {
      if (program.ops[next].stream != Stream::kCompute) continue;
      auto deps = program.deps_of(next);
      EXPECT_NE(std::find(deps.begin(), deps.end(), static_cast<std::int32_t>(index)), deps.end())
          << "op " << index << " " << describe(op);
      break;
    }
  }
}

TEST(GraphStructure, OverlapLetsDgradRunBesideTheInputGather) {
  Case test_case{"tiny-dense", make_layout(2, 1, 1, 1, 1)};
  test_case.layout.overlap_tp_comm = true;
  const Graph graph = build(test_case);
  const RankProgram& program = graph.programs[0];
  int checked = 0;
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    if (op.kind != OpKind::kGemm || op.gemm.weight != GemmWeight::kQkv || op.gemm.pass != GemmPass::kDgrad)
      continue;
    // The all-gather right before qkv dgrad is not a dependency of dgrad but of the following wgrad.
    const int gather = static_cast<int>(index) - 1;
    ASSERT_EQ(program.ops[gather].collective, CollectiveKind::kAllGather);
    auto dgrad_deps = program.deps_of(index);
    EXPECT_EQ(std::find(dgrad_deps.begin(), dgrad_deps.end(), gather), dgrad_deps.end());
    std::size_t wgrad = index + 1;
    while (program.ops[wgrad].kind != OpKind::kGemm) ++wgrad;
    auto wgrad_deps = program.deps_of(wgrad);
    EXPECT_NE(std::find(wgrad_deps.begin(), wgrad_deps.end(), gather), wgrad_deps.end());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(GraphStructure, OverlappedGradReduceIsIssuedDuringBackward) {
  Case test_case{"tiny-dense", make_layout(1, 1, 2, 1, 4)};
  test_case.layout.overlap_grad_reduce = true;
  const Graph graph = build(test_case);
  const RankProgram& program = graph.programs[0];
  // The first dp all-reduce comes before the last backward GEMM.
  const int reduce = first_op(program, OpKind::kCollective, GroupKind::kDp);
  int last_gemm = -1;
  for (std::size_t index = 0; index < program.ops.size(); ++index)
    if (program.ops[index].kind == OpKind::kGemm) last_gemm = static_cast<int>(index);
  EXPECT_LT(reduce, last_gemm);
  // Without overlap, all of them come after.
  test_case.layout.overlap_grad_reduce = false;
  const Graph serial = build(test_case);
  int serial_last_gemm = -1;
  for (std::size_t index = 0; index < serial.programs[0].ops.size(); ++index)
    if (serial.programs[0].ops[index].kind == OpKind::kGemm) serial_last_gemm = static_cast<int>(index);
  EXPECT_GT(first_op(serial.programs[0], OpKind::kCollective, GroupKind::kDp), serial_last_gemm);
}

TEST(GraphStructure, RecomputeReRunsForward) {
  Case test_case{"tiny-dense", make_layout(1, 1, 1, 1, 1)};
  const auto count = [](const Graph& graph, OpKind kind, Phase phase) {
    int total = 0;
    for (const Op& op : graph.programs[0].ops) total += op.kind == kind && op.phase == phase;
    return total;
  };
  test_case.layout.recompute = model::Recompute::kSelective;
  const Graph selective = build(test_case);
  EXPECT_EQ(count(selective, OpKind::kAttention, Phase::kRecompute), 4);
  EXPECT_EQ(count(selective, OpKind::kGemm, Phase::kRecompute), 0);
  test_case.layout.recompute = model::Recompute::kFull;
  const Graph full = build(test_case);
  EXPECT_EQ(count(full, OpKind::kAttention, Phase::kRecompute), 4);
  EXPECT_EQ(count(full, OpKind::kGemm, Phase::kRecompute), 4 * 4);  // qkv, proj, fc1, fc2 per layer
}

TEST(GraphStructure, MoeDispatchesWithAllToAll) {
  Case test_case{"tiny-moe", make_layout(1, 1, 4, 1, 4)};
  test_case.layout.ep = 4;
  const Graph graph = build(test_case);
  int all_to_all = 0, router = 0, experts = 0;
  for (const Op& op : graph.programs[0].ops) {
    all_to_all += op.kind == OpKind::kCollective && op.collective == CollectiveKind::kAllToAll;
    router += op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kRouter;
    experts += op.kind == OpKind::kGemm && op.gemm.weight == GemmWeight::kExpertFc1;
  }
  EXPECT_EQ(all_to_all, 4 * 4);  // 4 layers x (dispatch, combine) x (fwd, bwd)
  EXPECT_EQ(router, 4 * 3);      // fwd, dgrad, wgrad
  EXPECT_EQ(experts, 4 * 3);     // one local expert
}

TEST(GraphStructure, MoeTensorGatherWaitsForDispatchAndCombineForScatter) {
  Case test_case{"tiny-moe", make_layout(2, 1, 4, 1, 4)};
  test_case.layout.ep = 4;
  const Graph graph = build(test_case);
  const RankProgram& program = graph.programs[0];
  int checked = 0;
  for (std::size_t index = 1; index < program.ops.size(); ++index) {
    const Op& op = program.ops[index];
    const Op& before = program.ops[index - 1];
    if (op.kind != OpKind::kCollective || before.kind != OpKind::kCollective) continue;
    if (op.group != GroupKind::kEp && before.group != GroupKind::kEp) continue;
    // all_to_all (ep) -> all_gather (tp), and reduce_scatter (tp) -> all_to_all (ep), on different streams.
    ASSERT_NE(op.stream, before.stream);
    auto deps = program.deps_of(index);
    EXPECT_NE(std::find(deps.begin(), deps.end(), static_cast<std::int32_t>(index - 1)), deps.end())
        << describe(before) << " -> " << describe(op);
    ++checked;
  }
  EXPECT_EQ(checked, 4 * 4);  // 4 layers x (dispatch->gather, scatter->combine) x (fwd, bwd)
}

TEST(GraphStructure, MaterializeGivesEachEpRankItsOwnExperts) {
  Case test_case{"tiny-moe", make_layout(1, 1, 4, 1, 4)};
  test_case.layout.ep = 4;
  const Graph graph = build(test_case);
  ASSERT_EQ(graph.programs.size(), 1u);  // uniform load: one shared program
  for (int rank = 0; rank < 4; ++rank) {
    std::set<int> experts;
    for (const auto& rank_op : materialize(graph, rank))
      if (rank_op.op.kind == OpKind::kGemm && rank_op.op.gemm.expert >= 0)
        experts.insert(rank_op.op.gemm.expert);
    EXPECT_EQ(experts, std::set<int>{rank}) << "rank " << rank;
  }
}

TEST(GraphStructure, MaterializeResolvesPeersAndGroups) {
  const Graph graph = build(Case{"tiny-dense", make_layout(2, 2, 2, 1, 4)});
  const auto ops = materialize(graph, 5);  // tp 1, dp 0, stage 1
  bool saw_recv = false;
  for (const auto& rank_op : ops) {
    if (rank_op.op.kind == OpKind::kRecv) {
      EXPECT_EQ(rank_op.peer_rank, 1);
      saw_recv = true;
    }
    if (rank_op.op.kind == OpKind::kCollective) {
      const auto& members = graph.groups[rank_op.group_id].ranks;
      EXPECT_NE(std::find(members.begin(), members.end(), 5), members.end());
    }
  }
  EXPECT_TRUE(saw_recv);
  EXPECT_THROW(materialize(graph, 8), InputError);
}

TEST(GraphStructure, MoeWithTensorParallelNeedsSequenceParallel) {
  Case test_case{"tiny-moe", make_layout(2, 1, 2, 1, 2)};
  test_case.layout.sequence_parallel = false;
  test_case.sequence_parallel_explicit = true;
  EXPECT_THROW(build(test_case), InputError);
}

TEST(GraphJson, ExportCarriesProgramsAndGroups) {
  const Graph graph = build(Case{"tiny-dense", make_layout(2, 2, 1, 1, 2)});
  const nlohmann::json json = to_json(graph);
  EXPECT_EQ(json["programs"].size(), 2u);
  EXPECT_EQ(json["program_of_rank"].size(), 4u);
  EXPECT_EQ(json["programs"][0]["ops"].size(), graph.programs[0].ops.size());
  const auto& first = json["programs"][0]["ops"][0];
  EXPECT_EQ(first["kind"], "elementwise");
  EXPECT_EQ(first["stream"], "compute");
  bool saw_send = false;
  for (const auto& op : json["programs"][0]["ops"]) {
    if (op["kind"] != "send") continue;
    EXPECT_EQ(op["peer_stage"], 1);
    EXPECT_GE(op["p2p_batch"].get<int>(), 0);
    saw_send = true;
  }
  EXPECT_TRUE(saw_send);
  const nlohmann::json rank = to_json(graph, 3);
  EXPECT_EQ(rank["rank"], 3);
  EXPECT_EQ(rank["ops"].size(), graph.program(3).ops.size());
  // Rank 3 = tp 1 of stage 1: its receives come from rank 1 and its collectives name their members.
  for (const auto& op : rank["ops"]) {
    if (op["kind"] == "recv") {
      EXPECT_EQ(op["peer_rank"], 1);
    }
    if (op["kind"] == "collective" && op["group"] == "tp") {
      EXPECT_EQ(op["group_ranks"], nlohmann::json({2, 3}));
    }
  }
}

}  // namespace
}  // namespace calo::graph
