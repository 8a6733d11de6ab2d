// Layout space and search on real simulations: enumeration and memory fit, the step-time lower bound against
// the simulator, pruning that never changes the top K, the Pareto front, and refusals of impossible requests.
#include "plan/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <set>
#include <thread>

#include "core/error.h"
#include "graph/graph.h"
#include "graph/op_budget.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "plan/balanced_partition.h"
#include "plan/step_bound.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

SearchRequest small_request(int gpus = 8, int global_batch = 16) {
  SearchRequest request;
  request.space.model = model::load_model("llama3-8b");
  request.space.gpus = gpus;
  request.space.global_batch = global_batch;
  request.space.seq_length = 2048;
  request.cluster = sim::load_cluster("h200-hgx");
  request.top = 5;
  request.threads = 2;
  return request;
}

TEST(LayoutSpace, EveryCandidateIsValidUsesAllGpusAndCarriesTheMemoryVerdict) {
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h200-hgx").gpu.memory_bytes;
  const LayoutSpace space = enumerate_layouts(request);
  ASSERT_GT(space.candidates.size(), 100u);
  std::set<std::string> seen;
  bool has_interleaved = false, has_zero3 = false, has_full = false, has_overlap = false;
  for (const Candidate& candidate : space.candidates) {
    const auto& layout = candidate.layout;
    EXPECT_EQ(layout.world_size(), 8);
    EXPECT_EQ(layout.global_batch, 16);
    EXPECT_NO_THROW(parallel::resolve_layout(request.model, layout));
    EXPECT_EQ(candidate.fits,
              fits_memory(parallel::memory_per_gpu(request.model, layout), request.device_memory_bytes));
    EXPECT_TRUE(seen.insert(calo_flags(layout)).second) << "duplicate " << calo_flags(layout);
    has_interleaved |= layout.schedule == parallel::Schedule::kInterleaved;
    has_zero3 |= layout.zero_stage == 3;
    has_full |= layout.recompute == parallel::Recompute::kFull;
    has_overlap |= layout.overlap_grad_reduce;
  }
  EXPECT_TRUE(has_interleaved && has_zero3 && has_full && has_overlap);
  EXPECT_GT(space.fitting(), 0);
  EXPECT_LT(space.fitting(), static_cast<int>(space.candidates.size()));  // some do not fit 141 GB
}

TEST(LayoutSpace, ThePytorchTrainersAccountingFitsFewerLayoutsAndTheFlagsSayIt) {
  // --trainer pytorch: fp32 master gradients and the loss backward's transient on every layout; the same
  // layouts, each holding more, so no layout fits that did not fit by default, some that did no longer do,
  // and the pasteable flags carry the trainer (so `calo sim` with them refuses or accepts the same way).
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h100-hgx").gpu.memory_bytes;
  const LayoutSpace by_default = enumerate_layouts(request);
  request.trainer = parallel::Trainer::kPytorch;
  const LayoutSpace pytorch = enumerate_layouts(request);
  ASSERT_EQ(pytorch.candidates.size(), by_default.candidates.size());
  for (std::size_t index = 0; index < pytorch.candidates.size(); ++index) {
    const Candidate& candidate = pytorch.candidates[index];
    EXPECT_GT(candidate.memory.total_bytes(), by_default.candidates[index].memory.total_bytes());
    EXPECT_TRUE(!candidate.fits || by_default.candidates[index].fits) << calo_flags(candidate.layout);
    EXPECT_NE(calo_flags(candidate.layout).find("--trainer pytorch"), std::string::npos);
  }
  EXPECT_LT(pytorch.fitting(), by_default.fitting());
  EXPECT_GT(pytorch.fitting(), 0);
}

TEST(LayoutSpace, ZeroTwoAndHybridShardingWithinANodeAreCandidates) {
  // Llama3-8B on 4 nodes of 8: hybrid sharding with S = 8 / tp for every tp with 1 < S < dp.
  SpaceRequest request = small_request(32, 32).space;
  request.device_memory_bytes = sim::load_cluster("h100-hgx").gpu.memory_bytes;
  request.gpus_per_node = 8;
  const LayoutSpace space = enumerate_layouts(request);
  std::set<std::pair<int, int>> hybrid_tp_shard;
  bool has_zero2 = false;
  for (const Candidate& candidate : space.candidates) {
    const auto& layout = candidate.layout;
    has_zero2 |= layout.zero_stage == 2;
    if (layout.hybrid_sharding()) {
      hybrid_tp_shard.insert({layout.tp, layout.shard_size()});
      EXPECT_EQ(layout.tp * layout.shard_size(), 8) << calo_flags(layout);
      EXPECT_NE(calo_flags(layout).find("--zero 3 --fsdp-shard-group " + std::to_string(layout.shard_size())),
                std::string::npos)
          << calo_flags(layout);
      EXPECT_NE(megatron_flags(layout).find("--num-distributed-optimizer-instances " +
                                            std::to_string(layout.dp / layout.shard_size())),
                std::string::npos)
          << megatron_flags(layout);
    }
  }
  EXPECT_TRUE(has_zero2);
  // tp 1 (S 8), 2 (S 4), 4 (S 2); tp 8 leaves S = 1 (no sharding) and is not enumerated.
  EXPECT_EQ(hybrid_tp_shard, (std::set<std::pair<int, int>>{{1, 8}, {2, 4}, {4, 2}}));
}

TEST(LayoutSpace, Gpt3OnEightH100DoesNotFitWithTp8AndNearestFittingFit) {
  SpaceRequest request;
  request.model = model::load_model("gpt3-175b");
  request.gpus = 8;
  request.global_batch = 8;
  request.device_memory_bytes = sim::load_cluster("h100-hgx").gpu.memory_bytes;
  const LayoutSpace space = enumerate_layouts(request);
  EXPECT_EQ(space.fitting(), 0);  // 175 B parameters x 16 bytes do not fit 8 x 80 GB
  SpaceRequest bigger = request;
  bigger.gpus = 64;
  bigger.global_batch = 64;
  const LayoutSpace fits = enumerate_layouts(bigger);
  ASSERT_GT(fits.fitting(), 0);
  parallel::Layout wanted;
  wanted.tp = 8;
  wanted.dp = 8;
  for (const Candidate& candidate : nearest_fitting(fits, wanted, 5)) EXPECT_TRUE(candidate.fits);
}

TEST(Search, LowerBoundNeverExceedsTheSimulatedStepTime) {
  for (const char* model : {"llama3-8b", "tiny-moe"}) {  // dense, and MoE with expert parallelism
    SearchRequest request = small_request();
    request.space.model = model::load_model(model);
    request.space.seq_length = 0;
    request.prune = false;
    const SearchResult result = search_layouts(request);
    ASSERT_GT(result.simulated, 50) << model;
    for (const Evaluation& evaluation : result.evaluations) {
      if (evaluation.verdict != Verdict::kRanked) continue;
      EXPECT_GT(evaluation.lower_bound_s, 0);
      EXPECT_LE(evaluation.lower_bound_s, evaluation.iteration_s * (1 + 1e-9))
          << model << " " << parallel::describe(evaluation.candidate.layout);
    }
  }
}

TEST(Search, LowerBoundCountsCommunicationALayoutCannotHide) {
  // TP8 without overlap: every tensor-parallel collective sits between two dependent GEMMs, so the step is
  // compute plus those collectives. The bound sees them (term d of docs/PLANNER.md), not just the compute.
  const model::ModelSpec model = model::load_model("llama3-8b");
  parallel::Layout layout;
  layout.tp = 8;
  layout.global_batch = 8;
  layout.seq_length = 2048;
  layout = parallel::resolve_layout(model, layout);
  const graph::Graph graph = graph::build_graph(model, layout);
  const sim::ClusterSpec cluster = sim::load_cluster("h200-hgx");
  double compute_s = 0;
  for (const graph::Op& op : graph.programs.front().ops)
    if (op.stream == graph::Stream::kCompute)
      compute_s += sim::compute_cost(cluster.gpu, op).duration_s(1, 1);
  const double bound_s = step_time_lower_bound_s(graph, cluster);
  const double simulated_s = sim::simulate(graph, cluster, {}).iteration_s;
  EXPECT_GT(bound_s, compute_s * 1.05) << "compute " << compute_s << " s";
  EXPECT_LE(bound_s, simulated_s);
}

TEST(LayoutSpace, ConstraintsKeepOnlyTheGivenSettingsAndCountTheRest) {
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h200-hgx").gpu.memory_bytes;
  const LayoutSpace free_space = enumerate_layouts(request);
  request.constraints.tp = {2};
  request.constraints.micro_batch = {1, 2};
  request.constraints.recompute = {parallel::Recompute::kNone};
  request.constraints.overlap = true;
  EXPECT_EQ(request.constraints.describe(), "--tp 2 --mbs 1,2 --recompute none --overlap");
  const LayoutSpace space = enumerate_layouts(request);
  ASSERT_GT(space.candidates.size(), 5u);
  EXPECT_GT(space.excluded, 0);
  EXPECT_EQ(space.candidates.size() + space.invalid + space.excluded,
            free_space.candidates.size() + free_space.invalid);
  for (const Candidate& candidate : space.candidates) {
    const parallel::Layout& layout = candidate.layout;
    EXPECT_EQ(layout.tp, 2);
    EXPECT_TRUE(layout.micro_batch == 1 || layout.micro_batch == 2);
    EXPECT_EQ(layout.recompute, parallel::Recompute::kNone);
    EXPECT_TRUE(layout.overlap_tp_comm || layout.overlap_grad_reduce);
  }
}

// Issue 68: the combinations a schedule refuses (zero bubble with ZeRO-2/3, ...) are counted invalid by
// construction, never resolved; every candidate keeps its schedule's rules.
TEST(LayoutSpace, CombinationsTheirScheduleRefusesAreCountedInvalidWithoutResolving) {
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h200-hgx").gpu.memory_bytes;
  const LayoutSpace space = enumerate_layouts(request);
  EXPECT_GT(space.invalid_by_construction, 0);
  EXPECT_LE(space.invalid_by_construction, space.invalid);  // any others refused by resolve_layout
  for (const Candidate& candidate : space.candidates)
    EXPECT_EQ(parallel::broken_schedule_rule(request.model, candidate.layout), parallel::ScheduleRule::kNone);
  request.constraints.schedule = {parallel::Schedule::kZbH1};
  request.constraints.zero_stage = {2, 3};
  const LayoutSpace refused = enumerate_layouts(request);
  EXPECT_TRUE(refused.candidates.empty());
  EXPECT_GT(refused.invalid, 0);
  EXPECT_EQ(refused.invalid_by_construction, refused.invalid);
}

// Issue 62: --recompute op (torchtitan's op-level checkpointing) was no mode of the space, so `calo plan
// --recompute op` found nothing; it is searched when asked for and in torchtitan's jobs, never for MoE.
TEST(LayoutSpace, OpLevelRecomputeIsSearchedWhenAskedForOrForTorchtitan) {
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h200-hgx").gpu.memory_bytes;
  auto count_op = [](const LayoutSpace& space) {
    return std::count_if(space.candidates.begin(), space.candidates.end(), [](const Candidate& candidate) {
      return candidate.layout.recompute == parallel::Recompute::kOp;
    });
  };
  EXPECT_EQ(count_op(enumerate_layouts(request)), 0);  // the default trainer's space: as before
  request.constraints.recompute = {parallel::Recompute::kOp};
  const LayoutSpace asked = enumerate_layouts(request);
  ASSERT_GT(asked.fitting(), 0);
  EXPECT_EQ(count_op(asked), static_cast<long>(asked.candidates.size()));
  request.constraints.recompute.clear();
  request.trainer = parallel::Trainer::kTorchtitan;
  EXPECT_GT(count_op(enumerate_layouts(request)), 0);
  request.model = model::load_model("tiny-moe");
  request.constraints.recompute = {parallel::Recompute::kOp};
  EXPECT_EQ(count_op(enumerate_layouts(request)), 0);
}

TEST(LayoutSpace, Fp8AllGatherIsOnWhereverItAppliesAndOffElsewhere) {
  // Asked for, --fp8-all-gather rides on every tensorwise FP8 layout under ZeRO-3 over more than one rank
  // (its printed flags carry it); bf16 and the other shardings are searched without it, none refused.
  SpaceRequest request = small_request().space;
  request.device_memory_bytes = sim::load_cluster("h200-hgx").gpu.memory_bytes;
  request.precisions = {parallel::Precision::kBf16, parallel::Precision::kFp8Tensorwise};
  const LayoutSpace without = enumerate_layouts(request);
  request.fp8_all_gather = true;
  const LayoutSpace with = enumerate_layouts(request);
  EXPECT_EQ(with.candidates.size(), without.candidates.size());
  EXPECT_EQ(with.invalid, without.invalid);
  int gathered_fp8 = 0;
  for (const Candidate& candidate : with.candidates) {
    EXPECT_EQ(candidate.layout.fp8_all_gather, candidate.layout.fp8_all_gather_applies())
        << parallel::describe(candidate.layout);
    if (!candidate.layout.fp8_all_gather) continue;
    ++gathered_fp8;
    EXPECT_NE(calo_flags(candidate.layout).find(" --fp8-all-gather"), std::string::npos);
  }
  EXPECT_GT(gathered_fp8, 0);
}

TEST(Search, ConstraintsThatLeaveNothingNameTheValuesThatFit) {
  SearchRequest request = small_request();
  request.space.constraints.tp = {3};  // 32 heads: tp 3 never divides them
  try {
    search_layouts(request);
    FAIL() << "--tp 3 accepted";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("and --tp 3 is valid"), std::string::npos) << message;
    EXPECT_NE(message.find("--tp 1,2,4,8"), std::string::npos) << message;
  }
}

TEST(Search, PowerCapsAreASearchedAxisAndACapNeverSpeedsALayoutUp) {
  SearchRequest request = small_request();
  request.space.constraints.tp = {2};
  request.space.constraints.micro_batch = {1};
  request.power_caps_w = {400, 700};
  request.objective = Objective::kEnergy;
  request.prune = false;
  const SearchResult result = search_layouts(request);
  ASSERT_EQ(result.evaluations.size() % 2, 0u);
  int pairs = 0;
  for (std::size_t index = 0; index + 1 < result.evaluations.size(); index += 2) {
    const Evaluation& low = result.evaluations[index];
    const Evaluation& high = result.evaluations[index + 1];
    EXPECT_EQ(calo_flags(low.candidate.layout), calo_flags(high.candidate.layout));
    EXPECT_EQ(low.power_cap_w, 400);
    EXPECT_EQ(high.power_cap_w, 700);
    if (low.verdict != Verdict::kRanked || high.verdict != Verdict::kRanked) continue;
    EXPECT_GE(low.iteration_s, high.iteration_s) << calo_flags(low.candidate.layout);
    EXPECT_LE(low.cluster_power_w, high.cluster_power_w);
    EXPECT_LE(low.lower_bound_s, low.iteration_s * (1 + 1e-9));
    ++pairs;
  }
  EXPECT_GT(pairs, 5);
  request.power_caps_w = {900};
  EXPECT_THROW(search_layouts(request), InputError);
}

TEST(Search, EquivalentRowsAreThoseWithinThreePercentOfTheFirst) {
  SearchRequest request = small_request();
  request.top = 50;
  const SearchResult result = search_layouts(request);
  const int rows = equivalent_to_first(result, request.objective);
  ASSERT_GE(rows, 1);
  const double first_s = result.evaluations[result.ranking.front()].iteration_s;
  for (int row = 0; row < static_cast<int>(result.ranking.size()); ++row) {
    const double step_s = result.evaluations[result.ranking[row]].iteration_s;
    EXPECT_EQ(row < rows, step_s <= first_s * (1 + kEquivalentFraction)) << row;
  }
}

TEST(LayoutSpace, LongSequencesBringContextParallelLayoutsByDefault) {
  EXPECT_EQ(default_max_cp(kLongSequenceTokens - 1), 1);
  EXPECT_EQ(default_max_cp(kLongSequenceTokens), 16);
  SpaceRequest request = small_request(16, 16).space;
  request.seq_length = 65536;
  request.device_memory_bytes = sim::load_cluster("h100-hgx").gpu.memory_bytes;
  request.max_cp = default_max_cp(request.seq_length);
  const LayoutSpace space = enumerate_layouts(request);
  std::set<int> cp_sizes, fitting_cp_sizes;
  for (const Candidate& candidate : space.candidates) {
    cp_sizes.insert(candidate.layout.cp);
    if (candidate.fits) fitting_cp_sizes.insert(candidate.layout.cp);
    EXPECT_EQ(candidate.layout.tp * candidate.layout.cp * candidate.layout.pp * candidate.layout.dp, 16);
    if (candidate.layout.cp > 1) {
      EXPECT_NE(calo_flags(candidate.layout).find("--cp " + std::to_string(candidate.layout.cp)),
                std::string::npos);
      EXPECT_NE(megatron_flags(candidate.layout).find("--context-parallel-size"), std::string::npos);
    }
  }
  EXPECT_EQ(cp_sizes, (std::set<int>{1, 2, 4, 8, 16}));
  EXPECT_TRUE(fitting_cp_sizes.count(2) && fitting_cp_sizes.count(4)) << "cp layouts should fit at 64K";
  request.max_cp = 1;
  for (const Candidate& candidate : enumerate_layouts(request).candidates) EXPECT_EQ(candidate.layout.cp, 1);
}

TEST(Search, LowerBoundHoldsForContextParallelLayouts) {
  // The ring's attention steps sit on the compute stream and its K/V messages on the cp stream: the bound
  // (busiest stream, pipeline fill and drain) must stay below the simulated step for every cp layout too.
  SearchRequest request = small_request(4, 4);
  request.space.seq_length = 8192;
  request.space.max_cp = 4;
  request.prune = false;
  const SearchResult result = search_layouts(request);
  int context_parallel = 0;
  for (const Evaluation& evaluation : result.evaluations) {
    if (evaluation.verdict != Verdict::kRanked) continue;
    context_parallel += evaluation.candidate.layout.cp > 1 ? 1 : 0;
    EXPECT_LE(evaluation.lower_bound_s, evaluation.iteration_s * (1 + 1e-9))
        << parallel::describe(evaluation.candidate.layout);
  }
  EXPECT_GT(context_parallel, 10);
}

TEST(Search, PruningKeepsTheTopKExactAndSimulatesFewer) {
  for (Objective objective : {Objective::kThroughput, Objective::kEnergy}) {
    SearchRequest request = small_request();
    request.objective = objective;
    const SearchResult pruned = search_layouts(request);
    request.prune = false;
    const SearchResult full = search_layouts(request);
    EXPECT_GT(pruned.pruned, 0) << to_string(objective);
    EXPECT_LT(pruned.simulated, full.simulated);
    ASSERT_GE(pruned.ranking.size(), 5u);
    for (int row = 0; row < 5; ++row) {
      const Evaluation& a = pruned.evaluations[pruned.ranking[row]];
      const Evaluation& b = full.evaluations[full.ranking[row]];
      EXPECT_DOUBLE_EQ(objective == Objective::kEnergy ? a.energy_per_step_j : a.iteration_s,
                       objective == Objective::kEnergy ? b.energy_per_step_j : b.iteration_s)
          << to_string(objective) << " rank " << row + 1;
    }
  }
}

/// Llama 3 405B on `gpus` H100, 16M tokens of 8K sequences, held to the paper's TP8-PP16, mbs 1, no
/// recomputation, overlapped (Table 4's shape); the top 3 on two threads.
SearchRequest llama3_405b_at_tp8_pp16(int gpus) {
  SearchRequest request;
  request.space.model = model::load_model("llama3-405b");
  request.space.gpus = gpus;
  request.space.global_batch = 2048;
  request.space.seq_length = 8192;
  request.cluster = sim::load_cluster("h100-hgx");
  request.space.constraints.tp = {8};
  request.space.constraints.pp = {16};
  request.space.constraints.micro_batch = {1};
  request.space.constraints.recompute = {parallel::Recompute::kNone};
  request.space.constraints.overlap = true;
  request.top = 3;
  request.threads = 2;
  return request;
}

TEST(Search, AtLlama3sShapeThePlannerPicksTheLayoutMetaRan) {
  // Llama 3 405B on 16384 H100, 16M tokens of 8K sequences, at the paper's TP8-PP16 without recomputation:
  // 126 layers split over no power-of-two stages, so the interleaved candidates exist only with Megatron-LM's
  // split that counts the embedding and the loss as a layer each. The first pick is what the Llama 3 paper
  // describes (section 3.3.2): one layer per chunk, the first chunk the embedding alone, the last the output
  // alone, optimizer state and gradients sharded (ZeRO-2), and it fits an H100.
  const SearchRequest request = llama3_405b_at_tp8_pp16(16384);
  const SearchResult result = search_layouts(request);
  ASSERT_FALSE(result.ranking.empty());
  const parallel::Layout& best = result.evaluations[result.ranking.front()].candidate.layout;
  EXPECT_EQ(best.schedule, parallel::Schedule::kInterleaved) << parallel::describe(best);
  EXPECT_EQ(best.virtual_stages, 8) << parallel::describe(best);
  EXPECT_EQ(best.zero_stage, 2) << parallel::describe(best);
  EXPECT_NE(parallel::describe(best).find("layers-0,1x126,0"), std::string::npos) << parallel::describe(best);
  EXPECT_NE(megatron_flags(best).find("--account-for-embedding-in-pipeline-split "
                                      "--account-for-loss-in-pipeline-split"),
            std::string::npos)
      << megatron_flags(best);
  EXPECT_NE(megatron_flags(best).find("--num-layers-per-virtual-pipeline-stage 1 "), std::string::npos)
      << megatron_flags(best);
}

TEST(LayoutSpace, TheCardLimitAdmitsExactlyTheTightLayoutsBeyondTheUsableShare) {
  // The same space under both limits: the card admits every layout the usable share admits, plus exactly
  // the tight ones (beyond usable, within the card), and nothing beyond the card.
  SpaceRequest request = small_request(8, 32).space;
  request.seq_length = 8192;
  request.device_memory_bytes = sim::load_cluster("h100-hgx").gpu.memory_bytes;
  const LayoutSpace usable = enumerate_layouts(request);
  request.memory_limit = MemoryLimit::kCard;
  const LayoutSpace card = enumerate_layouts(request);
  ASSERT_EQ(card.candidates.size(), usable.candidates.size());
  ASSERT_GT(usable.tight(), 0) << "the space should have layouts within 7 GiB of the card";
  EXPECT_EQ(card.fitting(), usable.fitting() + usable.tight());
  const double usable_bytes = usable_memory_bytes(request.device_memory_bytes);
  for (std::size_t index = 0; index < card.candidates.size(); ++index) {
    const Candidate& candidate = card.candidates[index];
    const double bytes = candidate.memory.total_bytes();
    EXPECT_EQ(candidate.tight, bytes > usable_bytes && bytes <= request.device_memory_bytes);
    EXPECT_EQ(candidate.tight, usable.candidates[index].tight);
    EXPECT_EQ(candidate.fits, usable.candidates[index].fits || candidate.tight)
        << calo_flags(candidate.layout);
  }
  EXPECT_EQ(parse_memory_limit("card"), MemoryLimit::kCard);
  EXPECT_THROW(parse_memory_limit("cards"), InputError);
}

TEST(Search, UnderTheCardLimitMetas8192GpuLayoutRanksFirstMarkedTight) {
  // Llama 3 405B on 8192 H100 (Table 4): the paper's layout needs 78.09 GiB of the 79.65 GiB card, beyond
  // the 73.26 usable. By default it is counted as tight and not ranked; under the card limit it ranks first
  // (the interleaved schedule's smaller bubble), marked tight.
  SearchRequest request = llama3_405b_at_tp8_pp16(8192);
  request.space.constraints.zero_stage = {2};
  const SearchResult usable = search_layouts(request);
  ASSERT_FALSE(usable.ranking.empty());
  EXPECT_GE(usable.tight, 1);
  for (std::size_t index : usable.ranking) EXPECT_FALSE(usable.evaluations[index].candidate.tight);
  request.space.memory_limit = MemoryLimit::kCard;
  const SearchResult card = search_layouts(request);
  ASSERT_FALSE(card.ranking.empty());
  EXPECT_EQ(card.tight, usable.tight);
  const Candidate& best = card.evaluations[card.ranking.front()].candidate;
  EXPECT_TRUE(best.tight) << parallel::describe(best.layout);
  EXPECT_EQ(best.layout.virtual_stages, 8) << parallel::describe(best.layout);
  EXPECT_NE(parallel::describe(best.layout).find("layers-0,1x126,0"), std::string::npos);
  EXPECT_LT(card.evaluations[card.ranking.front()].iteration_s,
            usable.evaluations[usable.ranking.front()].iteration_s);
}

TEST(Search, PipelineLayoutsRankAtThePartitionThatBalancesTheirStages) {
  // Llama3-8B's shapes with 16 layers on 4 GPUs, pipelines only: the output layer (128 K vocabulary) makes
  // the last stage of 4,4,4,4 the bottleneck. Ranked at the balanced partition, the best pipeline layout is
  // faster than its uniform partition by what `calo plan partition` finds (-20.7 % on H100); without
  // balancing the search ranks uniform partitions only.
  SearchRequest request = small_request(4, 16);
  request.space.model.num_layers = 16;
  request.space.constraints.pp = {4};
  request.space.constraints.vpp = {1};
  // 1F1B's: ZB-H1's deferred weight gradients absorb part of the imbalance (uniform 0.543 s against 1F1B's
  // 0.576 s on H200), so balancing gains it 14 %.
  request.space.constraints.schedule = {parallel::Schedule::k1F1B};
  const SearchResult balanced = search_layouts(request);
  ASSERT_FALSE(balanced.ranking.empty());
  const Evaluation& best = balanced.evaluations[balanced.ranking.front()];
  EXPECT_TRUE(best.candidate.layout.uneven_partition()) << parallel::describe(best.candidate.layout);
  EXPECT_LT(best.candidate.layout.layers_per_stage.back(), 4)
      << "the output layer's stage holds fewer layers";
  request.balance_partitions = false;
  const SearchResult uniform = search_layouts(request);
  const Evaluation& uniform_best = uniform.evaluations[uniform.ranking.front()];
  EXPECT_FALSE(uniform_best.candidate.layout.uneven_partition());
  EXPECT_LT(best.iteration_s, 0.85 * uniform_best.iteration_s)
      << parallel::describe(best.candidate.layout) << " vs "
      << parallel::describe(uniform_best.candidate.layout);
  // The figures are the balanced layout's own: simulating its flags gives them again.
  sim::SimOptions options;
  options.steps = request.steps;
  const sim::SimResult again =
      sim::simulate(graph::build_graph(request.space.model, best.candidate.layout), request.cluster, options);
  EXPECT_DOUBLE_EQ(again.iteration_s, best.iteration_s);
  EXPECT_NE(calo_flags(best.candidate.layout).find("--layers-per-stage"), std::string::npos);
}

TEST(BalancedPartition, MovesLayersOffTheOutputStageAndLeavesBalancedOrUnpipelinedLayoutsAlone) {
  model::ModelSpec model = model::load_model("llama3-8b");
  model.num_layers = 16;
  const sim::ClusterSpec cluster = sim::load_cluster("h200-hgx");
  parallel::Layout layout;
  layout.pp = 4;
  layout.global_batch = 8;
  layout.seq_length = 2048;
  const graph::Graph graph = graph::build_graph(model, parallel::resolve_layout(model, layout));
  const StageCompute compute = stage_compute(graph, cluster);
  EXPECT_GT(compute.extra_s[3], 1.5 * compute.layers_s[3] / 4)
      << "the output layer and loss weigh > 1.5 layers";
  const std::vector<int> layers = balanced_layers(graph, cluster);
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0] + layers[1] + layers[2] + layers[3], 16);
  EXPECT_LE(layers[3], 2);
  // Balanced already: the same partition again is no change.
  layout.layers_per_stage = layers;
  EXPECT_TRUE(
      balanced_layers(graph::build_graph(model, parallel::resolve_layout(model, layout, true)), cluster)
          .empty());
  parallel::Layout chunks;
  chunks.pp = 2;
  chunks.virtual_stages = 2;
  chunks.schedule = parallel::Schedule::kInterleaved;
  chunks.global_batch = 8;
  chunks.seq_length = 2048;
  EXPECT_TRUE(
      balanced_layers(graph::build_graph(model, parallel::resolve_layout(model, chunks)), cluster).empty());
  parallel::Layout data;
  data.dp = 2;
  data.global_batch = 8;
  EXPECT_TRUE(
      balanced_layers(graph::build_graph(model, parallel::resolve_layout(model, data)), cluster).empty());
}

TEST(Search, ParetoFrontIsExactlyTheUndominatedLayouts) {
  SearchRequest request = small_request();
  request.objective = Objective::kPareto;
  const SearchResult result = search_layouts(request);
  ASSERT_FALSE(result.pareto.empty());
  auto dominated_by = [](const Evaluation& a, const Evaluation& b) {  // b dominates a
    return b.tokens_per_s >= a.tokens_per_s && b.tokens_per_j >= a.tokens_per_j &&
           b.peak_power_w <= a.peak_power_w && b.max_die_c <= a.max_die_c &&
           (b.tokens_per_s > a.tokens_per_s || b.tokens_per_j > a.tokens_per_j ||
            b.peak_power_w < a.peak_power_w || b.max_die_c < a.max_die_c);
  };
  for (std::size_t index : result.ranking) {
    const Evaluation& item = result.evaluations[index];
    bool dominated = false;
    for (std::size_t other : result.ranking) dominated |= dominated_by(item, result.evaluations[other]);
    EXPECT_EQ(item.pareto, !dominated) << parallel::describe(item.candidate.layout);
  }
  // The fastest and the most efficient layouts are both on the front.
  const Evaluation& fastest = result.evaluations[result.pareto.front()];
  EXPECT_TRUE(fastest.pareto);
}

TEST(Search, FrontCornersAreEachFiguresBestOnTheFrontListedOnce) {
  SearchRequest request = small_request();
  request.objective = Objective::kPareto;
  const SearchResult result = search_layouts(request);
  ASSERT_GT(result.pareto.size(), 4u);
  const std::vector<FrontCorner> corners = front_corners(result);
  ASSERT_FALSE(corners.empty());
  ASSERT_LE(corners.size(), 4u);
  // Each figure's best value over the front, and the corner that holds it (its own or an earlier row).
  auto best_over_front = [&](auto value, bool higher) {
    double best = value(result.evaluations[result.pareto.front()]);
    for (std::size_t index : result.pareto) {
      const double v = value(result.evaluations[index]);
      best = higher ? std::max(best, v) : std::min(best, v);
    }
    return best;
  };
  const auto tokens_per_s = [](const Evaluation& e) { return e.tokens_per_s; };
  const auto tokens_per_j = [](const Evaluation& e) { return e.tokens_per_j; };
  const auto peak_w = [](const Evaluation& e) { return e.peak_power_w; };
  const auto die_c = [](const Evaluation& e) { return e.max_die_c; };
  EXPECT_EQ(corners.front().figure, "fastest");
  EXPECT_EQ(corners.front().index, result.pareto.front());
  auto held_by_a_corner = [&](auto value, double best) {
    return std::any_of(corners.begin(), corners.end(),
                       [&](const FrontCorner& c) { return value(result.evaluations[c.index]) == best; });
  };
  EXPECT_TRUE(held_by_a_corner(tokens_per_s, best_over_front(tokens_per_s, true)));
  EXPECT_TRUE(held_by_a_corner(tokens_per_j, best_over_front(tokens_per_j, true)));
  EXPECT_TRUE(held_by_a_corner(peak_w, best_over_front(peak_w, false)));
  EXPECT_TRUE(held_by_a_corner(die_c, best_over_front(die_c, false)));
  for (std::size_t a = 0; a < corners.size(); ++a) {
    EXPECT_TRUE(result.evaluations[corners[a].index].pareto) << corners[a].figure;
    for (std::size_t b = a + 1; b < corners.size(); ++b) EXPECT_NE(corners[a].index, corners[b].index);
  }
}

TEST(Search, PowerBudgetIsRespectedAndAnImpossibleOneRefused) {
  SearchRequest request = small_request();
  const SearchResult free = search_layouts(request);
  ASSERT_FALSE(free.ranking.empty());
  const Evaluation& best = free.evaluations[free.ranking.front()];
  request.power_budget_w = best.cluster_power_w * 0.97;
  const SearchResult limited = search_layouts(request);
  // Layouts drawing less than the fastest one's power remain (a loop over an empty ranking asserts nothing).
  ASSERT_FALSE(limited.ranking.empty());
  for (std::size_t index : limited.ranking)
    EXPECT_LE(limited.evaluations[index].cluster_power_w, request.power_budget_w);
  request.power_budget_w = 8 * request.cluster.gpu.idle_power_w * 0.9;  // below idle: contradictory
  EXPECT_THROW(search_layouts(request), InputError);
}

TEST(Search, NoLayoutForTheGpuCountIsRefusedWithTheNearestFeasibleCount) {
  SearchRequest request = small_request(7, 16);  // 7 GPUs: dp = 7 does not divide 16, pp = 7 not 32 layers
  try {
    search_layouts(request);
    FAIL() << "7 GPUs accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--gpus 8"), std::string::npos) << error.what();
  }
}

TEST(Search, ALayoutWhoseGraphExceedsTheOpBudgetIsTooLargeAndNeverBuiltTheRestRank) {
  // tiny-dense at 1024 layers, 640 sequences on 8 GPUs: dp 1 is 640 micro-batches (~17 M ops, over the
  // budget), dp 8 is 80 (~2 M ops).
  SearchRequest request = small_request(8, 640);
  request.space.model = model::load_model("tiny-dense");
  request.space.model.num_layers = 1024;
  request.space.seq_length = 0;
  request.space.constraints.dp = {1, 8};
  request.space.constraints.micro_batch = {1};
  request.space.constraints.recompute = {parallel::Recompute::kNone};
  request.space.constraints.zero_stage = {0};
  request.space.constraints.overlap = false;
  request.space.constraints.schedule = {parallel::Schedule::k1F1B};
  const SearchResult result = search_layouts(request);
  EXPECT_GT(result.too_large, 0);
  ASSERT_FALSE(result.ranking.empty());
  for (const Evaluation& evaluation : result.evaluations) {
    const parallel::Layout& layout = evaluation.candidate.layout;
    if (!evaluation.candidate.fits) continue;
    SCOPED_TRACE(parallel::describe(layout));
    const bool over = graph::estimated_op_count(request.space.model, layout) > graph::kMaxGraphOps;
    EXPECT_EQ(over, layout.dp == 1);
    EXPECT_EQ(evaluation.verdict == Verdict::kTooLarge, over);
    if (over) {
      EXPECT_NE(evaluation.note.find("M ops (at most 5 M)"), std::string::npos) << evaluation.note;
    }
  }
  EXPECT_GT(result.graph_ops, 0);
  EXPECT_GT(result.estimated_s, 0);
}

TEST(Search, ASpaceEstimatedBeyondMaxMinutesIsRefusedBeforeAnySimulationNamingTheFlags) {
  SearchRequest request = small_request();
  request.max_minutes = 0.001;  // 0.06 s: this space takes about a second on 2 threads
  try {
    search_layouts(request);
    FAIL() << "a space beyond --max-minutes was searched";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("beyond --max-minutes 0.001"), std::string::npos) << message;
    EXPECT_NE(message.find("on 2 threads"), std::string::npos) << message;
    EXPECT_NE(message.find("--mbs 1,2"), std::string::npos) << message;
  }
  request.max_minutes = 0;  // no limit: the estimate is still reported, and near the time the search took
  // Against the search's CPU time per thread, not its wall time: on a loaded 2-core machine the wall time
  // stretches with whatever else runs, the CPU the search needs does not (the estimate's own accuracy against
  // wall time on a quiet machine: bench/plan_search, docs/benchmarks/plan-search.md).
  const std::clock_t started = std::clock();
  const SearchResult result = search_layouts(request);
  const int threads = request.threads > 0
                          ? request.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double cpu_per_thread_s = static_cast<double>(std::clock() - started) / CLOCKS_PER_SEC / threads;
  EXPECT_GT(result.estimated_s, cpu_per_thread_s / 4);
  EXPECT_LT(result.estimated_s, cpu_per_thread_s * 4);
}

// Issue 66 item 3: --max-minutes guarded only the estimate; a search the estimate let through ran on past it.
// The stop now holds the search itself: no evaluation starts that would end past the limit, the ranking holds
// what finished, and a stop before anything was ranked is an error that says what to give.
TEST(Search, TheStopEndsTheSearchAtItsLimitWithWhatFinishedRanked) {
  SearchRequest request = small_request();
  request.power_caps_w = {500, 700};
  request.objective = Objective::kEnergy;
  const SearchResult whole = search_layouts(request);
  ASSERT_EQ(whole.stopped, 0);
  request.stop_after_s = whole.wall_s / 3;
  const SearchResult stopped = search_layouts(request);
  EXPECT_GT(stopped.stopped, 0);
  EXPECT_LT(stopped.simulated, whole.simulated);
  EXPECT_LT(stopped.wall_s, whole.wall_s);
  EXPECT_EQ(stopped.simulated + stopped.pruned + stopped.stopped, whole.simulated + whole.pruned);
  for (std::size_t index : stopped.ranking) EXPECT_EQ(stopped.evaluations[index].verdict, Verdict::kRanked);
  int marked = 0;
  for (const Evaluation& evaluation : stopped.evaluations) {
    if (evaluation.verdict != Verdict::kStopped) continue;
    ++marked;
    EXPECT_NE(evaluation.note.find("--max-minutes"), std::string::npos) << evaluation.note;
  }
  EXPECT_EQ(marked, stopped.stopped);
  request.stop_after_s = 1e-9;  // nothing can start
  try {
    search_layouts(request);
    FAIL() << "a search stopped before any layout was ranked returned a ranking";
  } catch (const RuntimeFailure& error) {
    EXPECT_NE(std::string(error.what()).find("before any layout was ranked"), std::string::npos)
        << error.what();
  }
}

// The progress a search reports is its work: it ends at 1 whatever was pruned, and never runs backwards by
// more than a pruned step's share.
TEST(Search, ProgressFollowsTheWorkAndEndsComplete) {
  SearchRequest request = small_request();
  std::vector<SearchProgress> seen;
  request.progress = [&seen](const SearchProgress& progress) { seen.push_back(progress); };
  const SearchResult result = search_layouts(request);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().steps_done, seen.back().steps_total);
  EXPECT_DOUBLE_EQ(seen.back().fraction(), 1.0);
  EXPECT_GT(result.pruned, 0);
  for (std::size_t index = 1; index < seen.size(); ++index)
    EXPECT_EQ(seen[index].steps_done, seen[index - 1].steps_done + 1);
}

}  // namespace
}  // namespace calo::plan
