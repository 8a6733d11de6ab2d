// One test per layout rule of resolve_layout: the exact message (rule + nearby valid choice) is checked.
#include "parallel/validate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/schedule.h"

namespace calo::parallel {
namespace {

/// A Llama3-70B-shaped dense model: 80 layers, 64 heads, 8 kv heads, ffn 28672, seq 4096.
model::ModelSpec dense_model() {
  model::ModelSpec spec;
  spec.name = "dense-80l";
  spec.num_layers = 80;
  spec.hidden_size = 8192;
  spec.ffn_hidden_size = 28672;
  spec.num_attention_heads = 64;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.vocab_size = 128256;
  spec.seq_length = 4096;
  return spec;
}

/// A Mixtral-8x7B-shaped MoE model: 32 layers, 8 experts top-2.
model::ModelSpec moe_model() {
  model::ModelSpec spec;
  spec.name = "moe-8e";
  spec.num_layers = 32;
  spec.hidden_size = 4096;
  spec.ffn_hidden_size = 14336;
  spec.num_attention_heads = 32;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.vocab_size = 32000;
  spec.seq_length = 4096;
  spec.num_experts = 8;
  spec.moe_top_k = 2;
  return spec;
}

/// The InputError message resolve_layout throws, or "(accepted)" when it accepts the layout.
std::string error_of(const model::ModelSpec& model, const Layout& layout,
                     bool sequence_parallel_explicit = false) {
  try {
    resolve_layout(model, layout, sequence_parallel_explicit);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(Validate, EverySizeMustBeAtLeastOne) {
  Layout layout;
  layout.tp = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "tp=0 is not a valid tensor-parallel size: sizes must be >= 1; try tp=1");
  layout = Layout{};
  layout.pp = -2;
  EXPECT_EQ(error_of(dense_model(), layout),
            "pp=-2 is not a valid pipeline-parallel size: sizes must be >= 1; try pp=1");
  layout = Layout{};
  layout.dp = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "dp=0 is not a valid data-parallel size: sizes must be >= 1; try dp=1");
  layout = Layout{};
  layout.ep = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "ep=0 is not a valid expert-parallel size: sizes must be >= 1; try ep=1");
  layout = Layout{};
  layout.micro_batch = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "micro-batch=0 is not a valid micro-batch size: sizes must be >= 1; try micro-batch=1");
  layout = Layout{};
  layout.virtual_stages = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "vpp=0 is not a valid number of model chunks per stage: sizes must be >= 1; try vpp=1");
}

TEST(Validate, ContextParallelSizeMustBeAtLeastOne) {
  Layout layout;
  layout.cp = 0;
  EXPECT_EQ(error_of(dense_model(), layout),
            "cp=0 is not a valid context-parallel size: sizes must be >= 1; try cp=1");
}

TEST(Validate, ContextParallelNeedsSequenceMultipleOfTwoCp) {
  Layout layout;
  layout.cp = 3;  // 4096 tokens: 2*cp = 6 does not divide them
  EXPECT_EQ(error_of(dense_model(), layout),
            "cp=3 needs the sequence length 4096 to be a multiple of 2*cp = 6 (each rank holds 2 of the 2*cp "
            "chunks of the causal load-balanced ring); try cp=2 or cp=4, or try --seq 4092 or --seq 4098");
  layout.seq_length = 4098;  // 4098 = 6 * 683: accepted
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
  layout.seq_length = 4095;  // cp=3 divides 4095 but 2*cp = 6 does not
  EXPECT_EQ(error_of(dense_model(), layout).substr(0, 60),
            "cp=3 needs the sequence length 4095 to be a multiple of 2*cp");
}

TEST(Validate, ContextParallelWithSequenceParallelNeedsLocalTokensDivisibleByTp) {
  Layout layout;
  layout.cp = 2;
  layout.tp = 8;
  layout.seq_length = 4104;  // 4 chunks of 1026: each rank's 2052 tokens are not a multiple of tp = 8
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "sequence parallel splits each rank's 2052 tokens (sequence 4104 / cp=2) over tp=8, which does not "
      "divide them; try 4096 or 4128 (sequence length) or --no-sequence-parallel");
  layout.seq_length = 131072;
  layout.cp = 16;
  const Layout resolved = resolve_layout(dense_model(), layout);
  EXPECT_EQ(resolved.world_size(), 8 * 16);
  EXPECT_EQ(resolved.grad_reduce_size(), 16);
  EXPECT_EQ(resolved.global_batch, 1);  // cp does not multiply the sequences per step
}

TEST(Validate, ContextParallelCarriesExpertsOverItsReplicas) {
  Layout layout;
  layout.cp = 2;
  layout.dp = 2;
  layout.ep = 4;  // the dp x cp = 4 replicas form one expert group
  EXPECT_EQ(error_of(moe_model(), layout), "(accepted)");
  layout.ep = 8;
  EXPECT_EQ(error_of(moe_model(), layout),
            "ep=8 does not divide dp x cp = 2 x 2 (expert parallelism is carved out of the data- and "
            "context-parallel ranks, as in Megatron-Core); try ep=4");
}

TEST(Validate, OpLevelCheckpointingIsForDenseModels) {
  Layout layout;
  layout.recompute = Recompute::kOp;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
  EXPECT_NE(error_of(moe_model(), layout)
                .find("--recompute op (torchtitan's op-level checkpointing) is "
                      "modelled for dense models; moe-8e has experts"),
            std::string::npos)
      << error_of(moe_model(), layout);
}

TEST(Validate, GlobalBatchAndSequenceLengthMustNotBeNegative) {
  Layout layout;
  layout.dp = 4;
  layout.global_batch = -8;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "global batch -8 is negative; give a positive number of sequences, or 0 for micro-batch × dp = 4");
  layout = Layout{};
  layout.seq_length = -1;
  EXPECT_EQ(error_of(dense_model(), layout),
            "sequence length -1 is negative; give a positive number of tokens, or 0 for the model's default");
}

TEST(Validate, SequenceLengthMustBePositiveAfterDefaults) {
  model::ModelSpec model = dense_model();
  model.seq_length = 0;  // a model file without a default length
  EXPECT_EQ(error_of(model, Layout{}),
            "sequence length must be positive: the model gives none; set it with --seq (e.g. --seq 2048)");
  Layout layout;
  layout.seq_length = 2048;
  EXPECT_EQ(resolve_layout(model, layout).seq_length, 2048);
}

TEST(Validate, ZeroStageMustBeZeroToThree) {
  Layout layout;
  layout.zero_stage = 4;
  EXPECT_EQ(error_of(dense_model(), layout),
            "zero stage 4 is not supported: use 0 (none), 1 (sharded optimizer state), 2 (sharded optimizer "
            "state and gradients) or 3 (fully sharded, FSDP); try 3");
  layout.zero_stage = -1;
  EXPECT_EQ(error_of(dense_model(), layout),
            "zero stage -1 is not supported: use 0 (none), 1 (sharded optimizer state), 2 (sharded optimizer "
            "state and gradients) or 3 (fully sharded, FSDP); try 0");
  for (int stage : {0, 1, 2, 3}) {
    layout.zero_stage = stage;
    EXPECT_EQ(error_of(dense_model(), layout), "(accepted)") << "zero " << stage;
  }
}

TEST(Validate, ShardGroupMustDivideDataParallel) {
  Layout layout;
  layout.dp = 12;
  layout.zero_stage = 3;
  layout.fsdp_shard_size = 5;
  EXPECT_EQ(error_of(dense_model(), layout),
            "--fsdp-shard-group 5 does not divide dp=12 (the shard groups tile the data-parallel ranks); try "
            "--fsdp-shard-group 4 or --fsdp-shard-group 6");
  layout.fsdp_shard_size = -2;
  EXPECT_EQ(error_of(dense_model(), layout),
            "--fsdp-shard-group -2 is negative; give a divisor of dp=12, or 0 for dp (full sharding)");
  layout.fsdp_shard_size = 4;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
  EXPECT_TRUE(resolve_layout(dense_model(), layout).hybrid_sharding());
  layout.fsdp_shard_size = 12;  // S = dp: full sharding, no replicate group
  EXPECT_FALSE(resolve_layout(dense_model(), layout).hybrid_sharding());
}

TEST(Validate, HybridShardingNeedsZeroThree) {
  Layout layout;
  layout.dp = 8;
  layout.fsdp_shard_size = 4;
  layout.zero_stage = 2;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "hybrid sharding (--fsdp-shard-group 4) shards parameters, which needs --zero 3 (zero stage is 2); "
      "add --zero 3 or drop --fsdp-shard-group");
  layout.zero_stage = 3;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

TEST(Validate, KeepingGatheredParametersNeedsZeroThree) {
  Layout layout;
  layout.dp = 8;
  layout.reshard_after_forward = false;
  layout.zero_stage = 1;
  EXPECT_EQ(error_of(dense_model(), layout),
            "--fsdp-reshard-after-forward off keeps gathered parameters, which needs --zero 3 (zero stage is "
            "1); add --zero 3 or drop the flag");
  layout.zero_stage = 3;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

TEST(Validate, TensorParallelMustDivideAttentionHeads) {
  Layout layout;
  layout.tp = 5;
  EXPECT_EQ(error_of(dense_model(), layout), "tp=5 does not divide 64 attention heads; try 4 or 8");
}

TEST(Validate, TensorParallelMustDivideKeyValueHeads) {
  Layout layout;
  layout.tp = 16;  // divides 64 heads but not 8 kv heads: Megatron-LM requires num_query_groups % tp == 0
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "tp=16 does not divide 8 key/value heads (query groups are split over tp, as in Megatron-LM); try 8");
  layout.tp = 8;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

TEST(Validate, TensorParallelMustDivideFfnHiddenSize) {
  model::ModelSpec model = dense_model();
  model.ffn_hidden_size = 700;  // 700 = 4 * 175
  Layout layout;
  layout.tp = 8;
  EXPECT_EQ(error_of(model, layout), "tp=8 does not divide ffn hidden size 700; try 4");
  model::ModelSpec moe = moe_model();
  moe.ffn_hidden_size = 14340;
  EXPECT_EQ(error_of(moe, layout), "tp=8 does not divide ffn hidden size 14340 (per expert); try 4");
}

TEST(Validate, SequenceParallelNeedsSequenceLengthDivisibleByTp) {
  Layout layout;
  layout.tp = 8;
  layout.seq_length = 100;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "sequence parallel splits each sequence of 100 tokens over tp=8, which does not divide it; try 96 or "
      "104 (sequence length) or --no-sequence-parallel");
  layout.sequence_parallel = false;
  EXPECT_EQ(error_of(dense_model(), layout, /*sequence_parallel_explicit=*/true), "(accepted)");
}

TEST(Validate, SequenceParallelFollowsTpAndIsOffWithoutTp) {
  Layout layout;
  layout.tp = 4;
  EXPECT_TRUE(resolve_layout(dense_model(), layout).sequence_parallel);  // default: on when tp > 1
  layout.sequence_parallel = false;
  EXPECT_FALSE(resolve_layout(dense_model(), layout, true).sequence_parallel);  // explicit off is kept
  layout.tp = 1;
  layout.sequence_parallel = true;
  // Nothing to split with tp = 1: turned off (a no-op, as Megatron-LM does), not an error.
  EXPECT_FALSE(resolve_layout(dense_model(), layout, true).sequence_parallel);
}

TEST(Validate, PipelineStagesMustNotExceedLayers) {
  model::ModelSpec model = dense_model();
  model.num_layers = 4;
  Layout layout;
  layout.pp = 8;
  EXPECT_EQ(error_of(model, layout), "pp=8 × vpp=1 = 8 stages exceed the 4 layers of dense-80l; try pp=4");
}

TEST(Validate, UniformPartitionMustDivideLayers) {
  Layout layout;
  layout.pp = 3;
  EXPECT_EQ(error_of(dense_model(), layout),
            "pp=3 × vpp=1 = 3 stages divide neither the 80 layers of dense-80l nor 82 (the layers with the "
            "embedding "
            "and the loss counted as one each); try pp=2 or pp=4, or give an explicit --layers-per-stage");
  layout.schedule = Schedule::kInterleaved;
  layout.pp = 4;
  layout.virtual_stages = 3;
  layout.global_batch = 8;
  EXPECT_EQ(error_of(dense_model(), layout),
            "pp=4 × vpp=3 = 12 stages divide neither the 80 layers of dense-80l nor 82 (the layers with the "
            "embedding and the loss counted as one each); try vpp=2 or vpp=4, or give an explicit "
            "--layers-per-stage");
}

TEST(Validate, ExplicitPartitionNeedsOneEntryPerVirtualStage) {
  Layout layout;
  layout.pp = 2;
  layout.layers_per_stage = {40, 20, 20};
  EXPECT_EQ(error_of(dense_model(), layout), "layers per stage lists 3 entries but pp=2 × vpp=1 needs 2");
}

TEST(Validate, ExplicitPartitionHasNoEmptyStage) {
  Layout layout;
  layout.pp = 4;
  layout.layers_per_stage = {40, 0, 20, 20};
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "layers per stage entry 1 is 0: every (virtual) stage but the first and the last needs at least one "
      "layer (the first may hold the embedding alone and the last the output alone, as Llama 3's pipeline "
      "does)");
  layout.layers_per_stage = {0, 40, 40, 0};  // the edges may be empty: embedding alone, output alone
  EXPECT_EQ(resolve_layout(dense_model(), layout).layers_per_stage, (std::vector<int>{0, 40, 40, 0}));
}

TEST(Validate, StagesThatDivideTheLayersWithEmbeddingAndLossGetMegatronsEdgeAccountedSplit) {
  // Megatron-LM's --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split: with the
  // embedding and the loss as a layer each, 82 layers over 2 × 41 or 41 virtual stages; the first and last
  // virtual stage are one layer short. Llama 3 405B (126 layers) at PP16: 1F1B 7, 8, ..., 8, 7; interleaved
  // vpp 8 one layer per chunk with the first chunk the embedding alone and the last the output alone (the
  // Llama 3 paper, section 3.3.2).
  Layout layout;
  layout.pp = 41;
  layout.dp = 1;
  EXPECT_EQ(resolve_layout(dense_model(), layout).layers_per_stage.front(), 1);
  model::ModelSpec llama = dense_model();
  llama.num_layers = 126;
  layout.pp = 16;
  std::vector<int> one_f_one_b(16, 8);
  one_f_one_b.front() = one_f_one_b.back() = 7;
  EXPECT_EQ(resolve_layout(llama, layout).layers_per_stage, one_f_one_b);
  layout.schedule = Schedule::kInterleaved;
  layout.virtual_stages = 8;
  layout.global_batch = 32;
  std::vector<int> one_per_chunk(128, 1);
  one_per_chunk.front() = one_per_chunk.back() = 0;
  EXPECT_EQ(resolve_layout(llama, layout).layers_per_stage, one_per_chunk);
  layout.virtual_stages = 2;
  const std::vector<int> two_chunks = resolve_layout(llama, layout).layers_per_stage;
  EXPECT_EQ(two_chunks.front(), 3);
  EXPECT_EQ(two_chunks[1], 4);
  EXPECT_EQ(two_chunks.back(), 3);
  EXPECT_EQ(partition_text(one_per_chunk), "0,1x126,0");  // as --layers-per-stage takes it
  EXPECT_EQ(partition_text({3, 4, 4, 3}), "3,4,4,3");     // runs shorter than three stay as they are
  EXPECT_EQ(partition_text({2, 2, 2}), "2x3");
  EXPECT_EQ(parallel::edge_accounted_partition(126, 12), std::vector<int>{});  // 128 % 12 != 0
  EXPECT_EQ(parallel::edge_accounted_partition(126, 1), std::vector<int>{});   // one stage: uniform
}

TEST(Validate, ExplicitPartitionMustSumToLayers) {
  Layout layout;
  layout.pp = 4;
  layout.layers_per_stage = {19, 21, 21, 21};
  EXPECT_EQ(error_of(dense_model(), layout),
            "layers per stage sum to 82 but dense-80l has 80 layers; change the entries by -2");
  layout.layers_per_stage = {17, 21, 21, 21};  // uneven but complete: accepted as given
  EXPECT_EQ(resolve_layout(dense_model(), layout).layers_per_stage, (std::vector<int>{17, 21, 21, 21}));
}

TEST(Validate, InterleavedNeedsVirtualStagesAndPipeline) {
  Layout layout;
  layout.pp = 4;
  layout.schedule = Schedule::kInterleaved;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "interleaved schedule needs vpp >= 2 model chunks per stage (vpp=1); try vpp=2, or --schedule 1f1b");
  layout.pp = 1;
  layout.virtual_stages = 2;
  EXPECT_EQ(error_of(dense_model(), layout),
            "interleaved schedule needs pipeline parallelism; try pp=2 or more, or --schedule 1f1b");
}

TEST(Validate, VirtualStagesNeedInterleavedSchedule) {
  Layout layout;
  layout.pp = 4;
  layout.virtual_stages = 2;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "vpp=2 model chunks per stage need --schedule interleaved or zb-v; or use vpp=1 with --schedule 1f1b");
}

TEST(Validate, InterleavedMicrobatchesMustBeMultipleOfPp) {
  Layout layout;
  layout.pp = 4;
  layout.virtual_stages = 2;
  layout.schedule = Schedule::kInterleaved;
  layout.dp = 8;
  layout.global_batch = 48;  // 6 micro-batches
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "interleaved schedule needs the number of micro-batches (6 = global batch 48 / (micro-batch × dp = 8)) "
      "to be a multiple of pp=4; try 32 or 64 (global batch)");
  layout.global_batch = 64;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

// Issue 68: a schedule's rules have one home, broken_schedule_rule, which resolve_layout refuses by (each
// with its message, in the order it checked them before) and `calo plan`'s enumeration skips by without
// resolving.
TEST(Validate, EachScheduleRuleIsRefusedWithItsMessage) {
  Layout layout;
  layout.pp = 4;
  layout.dp = 2;
  layout.global_batch = 16;  // 8 micro-batches
  layout.schedule = Schedule::kZbH1;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kNone);
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
  layout.zero_stage = 2;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kUnshardedGradients);
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "--schedule zb-h1 defers weight gradients past each micro-batch's backward, which ZeRO-2 and FSDP "
      "reduce-scatter there; use --zero 0 or 1, or --schedule 1f1b");
  layout.zero_stage = 1;
  layout.overlap_grad_reduce = true;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kReductionAfterW);
  EXPECT_NE(error_of(dense_model(), layout).find("the gradient reduction waits for the last of them"),
            std::string::npos);
  layout.overlap_grad_reduce = false;
  layout.schedule = Schedule::kZbV;
  layout.virtual_stages = 2;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kNone);
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
  layout.global_batch = 12;  // 6 micro-batches: no multiple of pp, and ZeRO-2 besides: the batch rule first
  layout.zero_stage = 2;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kMicrobatchMultiple);
  EXPECT_NE(error_of(dense_model(), layout).find("zb-v schedule needs the number of micro-batches (6"),
            std::string::npos);
  layout.global_batch = 16;
  layout.zero_stage = 0;
  layout.virtual_stages = 4;
  EXPECT_EQ(broken_schedule_rule(dense_model(), layout), ScheduleRule::kFixedChunks);
  EXPECT_EQ(error_of(dense_model(), layout),
            "--schedule zb-v runs two model chunks per stage in a V; give --vpp 2 (vpp=4)");
  layout.virtual_stages = 2;
  model::ModelSpec tied = dense_model();
  tied.tied_embeddings = true;
  EXPECT_EQ(broken_schedule_rule(tied, layout), ScheduleRule::kUntiedEmbeddings);
  EXPECT_NE(error_of(tied, layout).find("dense-80l ties them: untied models only"), std::string::npos);
}

TEST(Validate, ExpertParallelOnlyForMoe) {
  Layout layout;
  layout.dp = 4;
  layout.ep = 2;
  EXPECT_EQ(error_of(dense_model(), layout),
            "ep=2 needs a mixture-of-experts model, but dense-80l is dense; use ep=1");
}

TEST(Validate, ExpertParallelMustDivideDataParallel) {
  Layout layout;
  layout.dp = 8;
  layout.ep = 3;
  EXPECT_EQ(error_of(moe_model(), layout),
            "ep=3 does not divide dp x cp = 8 x 1 (expert parallelism is carved out of the data- and "
            "context-parallel ranks, as in Megatron-Core); try ep=2 or ep=4");
}

TEST(Validate, ExpertParallelMustDivideExperts) {
  Layout layout;
  layout.dp = 16;
  layout.ep = 16;
  EXPECT_EQ(error_of(moe_model(), layout), "ep=16 does not divide the 8 experts of moe-8e; try ep=8");
  layout.ep = 8;
  EXPECT_EQ(error_of(moe_model(), layout), "(accepted)");
}

TEST(Validate, GlobalBatchMustBeMultipleOfMicroBatchTimesDp) {
  Layout layout;
  layout.dp = 8;
  layout.global_batch = 100;
  EXPECT_EQ(error_of(dense_model(), layout),
            "global batch 100 is not a multiple of micro-batch × dp = 1 × 8 = 8; try 96 or 104");
  layout.global_batch = 5;  // below one step: only the upper multiple is a valid choice
  EXPECT_EQ(error_of(dense_model(), layout),
            "global batch 5 is not a multiple of micro-batch × dp = 1 × 8 = 8; try 8");
}

TEST(Validate, OverlapParamGatherNeedsShardedState) {
  Layout layout;
  layout.dp = 4;
  layout.overlap_param_gather = true;
  EXPECT_EQ(error_of(dense_model(), layout),
            "overlapping the parameter all-gather needs sharded state: use --zero 1, 2 or 3 (fsdp), or drop "
            "--overlap-param");
  layout.zero_stage = 1;
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

TEST(Validate, FillsDefaults) {
  Layout layout;
  layout.tp = 8;
  layout.pp = 4;
  layout.dp = 2;
  layout.micro_batch = 2;
  Layout resolved = resolve_layout(dense_model(), layout);
  EXPECT_EQ(resolved.global_batch, 4);  // micro_batch * dp
  EXPECT_EQ(resolved.num_microbatches(), 1);
  EXPECT_EQ(resolved.seq_length, 4096);
  EXPECT_TRUE(resolved.sequence_parallel);
  EXPECT_EQ(resolved.layers_per_stage, (std::vector<int>{20, 20, 20, 20}));
  EXPECT_EQ(resolved.world_size(), 64);
}

TEST(Validate, AcceptsLargeRealisticLayouts) {
  model::ModelSpec gpt3 = dense_model();
  gpt3.num_layers = 96;
  gpt3.num_attention_heads = 96;
  gpt3.num_kv_heads = 96;
  gpt3.ffn_hidden_size = 4 * 12288;
  gpt3.seq_length = 2048;
  Layout layout;
  layout.tp = 8;
  layout.pp = 16;
  layout.dp = 64;
  layout.global_batch = 1536;
  layout.zero_stage = 1;
  layout.overlap_grad_reduce = layout.overlap_param_gather = layout.overlap_tp_comm = true;
  Layout resolved = resolve_layout(gpt3, layout);
  EXPECT_EQ(resolved.world_size(), 8192);
  EXPECT_EQ(resolved.num_microbatches(), 24);
  layout.schedule = Schedule::kInterleaved;
  layout.virtual_stages = 2;
  layout.global_batch = 2048;  // 32 micro-batches: a multiple of pp = 16
  EXPECT_EQ(resolve_layout(gpt3, layout).layers_per_stage.size(), 32u);
}

}  // namespace
TEST(Validate, ContextParallelNeedsTheFusedCoreAndFullSharding) {
  Layout layout;
  layout.cp = 2;
  layout.attention = AttentionImpl::kUnfused;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "cp=2 needs the fused attention core (context parallelism runs flash-attention chunks against each "
      "K/V block); use --attention fused or --cp 1");
  layout.attention = AttentionImpl::kFused;
  layout.dp = 4;
  layout.zero_stage = 3;
  layout.fsdp_shard_size = 2;
  EXPECT_EQ(
      error_of(dense_model(), layout),
      "cp=2 with hybrid sharding (--fsdp-shard-group 2) is not modelled (parameters would shard over part of "
      "the dp-cp group); drop --fsdp-shard-group or use --cp 1");
  layout.fsdp_shard_size = 0;  // full sharding over dp * cp is modelled
  EXPECT_EQ(error_of(dense_model(), layout), "(accepted)");
}

}  // namespace calo::parallel
