// Memory per GPU against hand-computed numbers for the tiny models (written by the model helper, who owns
// src/parallel/memory.cpp).
#include "parallel/memory.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/accounting.h"
#include "model/model_spec.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"

namespace calo::parallel {
namespace {

// tiny-dense: N = 3,426,560 parameters; one layer 725,504 (attention 196,608, SwiGLU 528,384, norms 512);
// embedding = output = 262,144; final norm 256. One layer keeps 991,232 activation bytes per micro-batch
// (s = 128, tp = 1); the last stage adds 128 x (2 x 2 x 256 + 4 x 1024) = 655,360 bytes per micro-batch.
constexpr double kTinyParams = 3426560;
constexpr double kTinyLayerParams = 725504;
constexpr double kTinyLayerActivations = 991232;
constexpr double kTinyOutputActivations = 655360;

Layout resolved(const model::ModelSpec& model, Layout layout) {
  return resolve_layout(model, layout);
}

TEST(Memory, SingleGpuHoldsEverything) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, Layout{}));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.activations_bytes, 4 * kTinyLayerActivations + kTinyOutputActivations);
  EXPECT_EQ(memory.inflight_microbatches, 1);
  EXPECT_EQ(memory.stage, 0);
  EXPECT_DOUBLE_EQ(memory.total_bytes(),
                   16 * kTinyParams + 4 * kTinyLayerActivations + kTinyOutputActivations);
}

TEST(Memory, ZeroOneShardsOnlyTheOptimizerAndZeroThreeShardsEverything) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.dp = 4;
  layout.zero_stage = 1;
  MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 4);

  layout.zero_stage = 3;
  memory = memory_per_gpu(model, resolved(model, layout));
  // Sharded weights plus one gathered layer; sharded gradients plus the layer awaiting its reduce-scatter.
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams / 4 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams / 4 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 4);

  layout.overlap_param_gather = true;  // prefetch: two gathered layers
  memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams / 4 + 4 * kTinyLayerParams);
}

TEST(Memory, ZeroTwoShardsGradientsBeyondTheBucketInFlight) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.dp = 4;
  layout.zero_stage = 2;
  MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams);
  // The 1/dp gradient shard plus the full gradient of the unit being reduced (the largest unit: a layer).
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams / 4 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 4);
  layout.overlap_grad_reduce = true;  // one unit reduces while the next one's gradient is computed
  memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams / 4 + 4 * kTinyLayerParams);
  // Against ZeRO-1 at dp 4: 2N - (N/2 + 2 layer) = 1.5 N - 2 layer bytes saved.
  layout.zero_stage = 1;
  const MemoryBreakdown zero1 = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(zero1.gradients_bytes - memory.gradients_bytes, 1.5 * kTinyParams - 4 * kTinyLayerParams);
}

TEST(Memory, HybridShardingShardsOverTheShardGroupOnly) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.dp = 8;
  layout.zero_stage = 3;
  layout.fsdp_shard_size = 2;
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams / 2 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams / 2 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 2);
}

TEST(Memory, KeepingParametersAfterForwardHoldsEveryGatheredUnitOfTheStage) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.dp = 4;
  layout.zero_stage = 3;
  layout.reshard_after_forward = false;
  MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams / 4 + 2 * kTinyParams);
  // Stage 1 of pp 2 holds its own units only: layers 2, 3 and the head (262,144 + final norm 256).
  layout.pp = 2;
  layout.global_batch = 8;
  memory = memory_for_stage(model, resolved(model, layout), 1);
  const double stage1 = 2 * kTinyLayerParams + 262144 + 256;
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * stage1 / 4 + 2 * stage1);
}

TEST(Memory, TorchtitansFsdpUnderPipelineKeepsTheStageGatheredAndItsFp32GradientsAccumulated) {
  // torchtitan does not reshard after forward under pp (apply_fsdp at 9dec370) and PyTorch's pipeline
  // schedule reduce-scatters after the last micro-batch, accumulating each unsharded gradient in fp32 (the
  // reduce dtype): stage 1 of pp 2 (layers 2, 3 and the head) keeps 4 B/param of fp32 shards + 2 B/param
  // gathered in weights and 4 B/param of accumulated gradients beside its activations (4 sequences a
  // micro-batch, so that the end of forward is the peak).
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.dp = 4;
  layout.pp = 2;
  layout.zero_stage = 3;
  layout.micro_batch = 4;
  layout.global_batch = 32;
  layout.trainer = Trainer::kTorchtitan;
  const MemoryBreakdown memory = memory_for_stage(model, resolved(model, layout), 1);
  const double stage1 = 2 * kTinyLayerParams + 262144 + 256;
  EXPECT_FALSE(memory.at_backward_end);
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 4 * stage1 / 4 + 2 * stage1);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 4 * stage1);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 8 * stage1 / 4);
  EXPECT_DOUBLE_EQ(memory.activations_bytes, 4 * (2 * kTinyLayerActivations + kTinyOutputActivations));
  // Reserved: the reduce-scatter stream's fp32 shards and largest unit's fp32 input (a layer), the all-gather
  // stream's largest gathered unit (bf16) and its input shard (docs/METRICS.md "Reserved memory").
  const double pools = 4 * (stage1 / 4 + kTinyLayerParams) + 2 * kTinyLayerParams * (1 + 1.0 / 4);
  EXPECT_DOUBLE_EQ(memory.reserved_bytes, memory.total_bytes() + pools);
  // The default trainer keeps no reserved figure.
  layout.trainer = Trainer::kDefault;
  EXPECT_EQ(memory_for_stage(model, resolved(model, layout), 1).reserved_bytes, 0.0);
}

// Llama3-70B on nodes of 8 H100 (80 GB), tp 1, pp 1, dp 64 (8 nodes). Hybrid sharding within a node (S = 8)
// keeps 16 bytes / 8 = 2 bytes of weights, gradients and optimizer per parameter: 141 GB of state, more than
// an H100 holds; full sharding (S = 64) needs 17.6 GB. The largest unit (gathered once, reduced once) is the
// output head: the 128256 x 8192 matrix plus the final norm's 8192.
TEST(Memory, Llama70bHybridShardingWithinANodeDoesNotFitAnH100AndFullShardingDoes) {
  const model::ModelSpec model = model::load_model("llama3-70b");
  const double params = model::count_parameters(model).total;
  const double head = 128256.0 * 8192 + 8192;
  Layout layout;
  layout.dp = 64;
  layout.zero_stage = 3;
  layout.fsdp_shard_size = 8;
  layout.recompute = Recompute::kFull;
  layout.seq_length = 8192;
  const MemoryBreakdown hybrid = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(hybrid.weights_bytes, 2 * params / 8 + 2 * head);
  EXPECT_DOUBLE_EQ(hybrid.gradients_bytes, 2 * params / 8 + 2 * head);
  EXPECT_DOUBLE_EQ(hybrid.optimizer_bytes, 12 * params / 8);
  EXPECT_NEAR(params / 1e9, 70.55, 0.01);
  EXPECT_NEAR((hybrid.weights_bytes + hybrid.gradients_bytes + hybrid.optimizer_bytes) / 1e9, 145.3, 0.1);
  const double h100_bytes = 80.0 * 1024 * 1024 * 1024;
  EXPECT_GT(hybrid.total_bytes(), usable_memory_bytes(h100_bytes));
  layout.fsdp_shard_size = 0;  // full sharding over 64
  const MemoryBreakdown full = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(full.optimizer_bytes, 12 * params / 64);
  EXPECT_NEAR((full.weights_bytes + full.gradients_bytes + full.optimizer_bytes) / 1e9, 21.84, 0.01);
  EXPECT_LT(full.total_bytes(), usable_memory_bytes(h100_bytes));
}

TEST(Memory, TensorParallelSplitsMatricesButNotNorms) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.tp = 2;
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  const double per_rank = 4 * ((196608.0 + 528384.0) / 2 + 512) + 262144.0 / 2 * 2 + 256;
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * per_rank);
  // Sequence parallel is on by default with tp > 1: everything per layer is halved; the output stage keeps
  // 128 x (1,024 / 2 + 4 x 1,024 / 2) bytes.
  EXPECT_DOUBLE_EQ(memory.activations_bytes, 4 * kTinyLayerActivations / 2 + 128 * (512.0 + 2048.0));
}

TEST(Memory, OneFOneBStageHoldsPipelineDepthMinusStageMicrobatches) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.pp = 4;
  layout.global_batch = 8;  // 8 micro-batches
  layout = resolved(model, layout);
  for (int stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE(stage);
    const MemoryBreakdown memory = memory_for_stage(model, layout, stage);
    EXPECT_EQ(memory.inflight_microbatches, 4 - stage);
    EXPECT_EQ(memory.inflight_microbatches, peak_inflight_passes(layout, stage));
    const double output = stage == 3 ? kTinyOutputActivations : 0.0;
    EXPECT_DOUBLE_EQ(memory.activations_bytes, (4 - stage) * (kTinyLayerActivations + output));
  }
  // Stage 0 holds the embedding, stage 3 the output projection and final norm.
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 0).weights_bytes, 2 * (kTinyLayerParams + 262144));
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 3).weights_bytes, 2 * (kTinyLayerParams + 262144 + 256));
  const MemoryBreakdown most_loaded = memory_per_gpu(model, layout);
  EXPECT_EQ(most_loaded.stage, 0);
  EXPECT_DOUBLE_EQ(most_loaded.total_bytes(), 16 * (kTinyLayerParams + 262144) + 4 * kTinyLayerActivations);
}

TEST(Memory, FewerMicrobatchesThanStagesLimitInflight) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.pp = 4;
  layout.global_batch = 2;
  EXPECT_EQ(memory_for_stage(model, resolved(model, layout), 0).inflight_microbatches, 2);
}

TEST(Memory, GpipeHoldsEveryMicrobatch) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.pp = 4;
  layout.global_batch = 8;
  layout.schedule = Schedule::kGpipe;
  layout = resolved(model, layout);
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(memory_for_stage(model, layout, stage).inflight_microbatches, 8);
  }
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 1).activations_bytes, 8 * kTinyLayerActivations);
}

TEST(Memory, InterleavedFirstStageMatchesKorthikanti) {
  // pp = 2, v = 2, m = 4, one layer per chunk. Megatron's warm-up on stage 0 is 2 (pp - 1) + (v - 1) pp = 4
  // chunk passes, plus one in steady state: 5 chunk-layers = L/pp x pp (1 + (pp - 1) / (pp v)) = 2 x 2
  // x 1.25.
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.pp = 2;
  layout.virtual_stages = 2;
  layout.schedule = Schedule::kInterleaved;
  layout.global_batch = 4;
  layout = resolved(model, layout);
  const MemoryBreakdown first = memory_for_stage(model, layout, 0);
  EXPECT_DOUBLE_EQ(first.activations_bytes, 5 * kTinyLayerActivations);
  EXPECT_EQ(peak_inflight_passes(layout, 0), 5);
  // Stage 0 holds virtual stages 0 (embedding) and 2; stage 1 holds 1 and 3 (output, final norm).
  EXPECT_DOUBLE_EQ(first.weights_bytes, 2 * (2 * kTinyLayerParams + 262144));
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 1).weights_bytes,
                   2 * (2 * kTinyLayerParams + 262144 + 256));
}

TEST(Memory, ExplicitPartitionMovesLayers) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.pp = 2;
  layout.global_batch = 2;
  layout.layers_per_stage = {1, 3};
  layout = resolved(model, layout);
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 0).activations_bytes, 2 * kTinyLayerActivations);
  EXPECT_DOUBLE_EQ(memory_for_stage(model, layout, 1).activations_bytes,
                   3 * kTinyLayerActivations + kTinyOutputActivations);
  EXPECT_EQ(memory_per_gpu(model, layout).stage, 1);
}

TEST(Memory, FullRecomputeKeepsOnlyLayerInputs) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.recompute = Recompute::kFull;
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.activations_bytes, 4 * 128 * 512.0 + kTinyOutputActivations);
}

TEST(Memory, ExpertsAreShardedOverExpertParallelAndOptimizerOverExpertDataParallel) {
  // tiny-moe: dense part per rank 4 x (196,608 + 1,024 router + 512) + 2 x 262,144 + 256 = 1,317,120;
  // experts 4 layers x 393,216 x 4 experts / ep.
  const model::ModelSpec model = model::load_model("tiny-moe");
  Layout layout;
  layout.dp = 4;
  layout.ep = 4;
  layout.zero_stage = 1;
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  const double dense = 1317120, experts = 4 * 393216.0;
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * (dense + experts));
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * (dense / 4 + experts / 1));  // dp / ep = 1 replica of experts
  layout.ep = 2;
  const MemoryBreakdown half = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(half.weights_bytes, 2 * (dense + 2 * experts));
  EXPECT_DOUBLE_EQ(half.optimizer_bytes, 12 * (dense / 4 + 2 * experts / 2));
}

TEST(Memory, TiedEmbeddingIsCopiedToTheLastStageOnlyWithPipelining) {
  const model::ModelSpec model = model::load_model("gpt3-175b");
  const double total = model::count_parameters(model).total;
  Layout single;
  EXPECT_DOUBLE_EQ(memory_per_gpu(model, resolved(model, single)).weights_bytes, 2 * total);
  Layout pipelined;
  pipelined.pp = 2;
  pipelined = resolved(model, pipelined);
  const double both_stages = memory_for_stage(model, pipelined, 0).weights_bytes +
                             memory_for_stage(model, pipelined, 1).weights_bytes;
  EXPECT_DOUBLE_EQ(both_stages, 2 * (total + 51200.0 * 12288));
}

TEST(Memory, Llama70bOnSixteenGpusFitsTheExpectedRange) {
  // TP8-PP2-DP1 (a layout of the study), ZeRO-1 off: 16 bytes per parameter over 16 GPUs = 70.55 GB per GPU
  // before activations, minus the replicated norms' share.
  const model::ModelSpec model = model::load_model("llama3-70b");
  Layout layout;
  layout.tp = 8;
  layout.pp = 2;
  layout.global_batch = 128;
  layout = resolved(model, layout);
  const MemoryBreakdown memory = memory_per_gpu(model, layout);
  const double total = model::count_parameters(model).total;
  EXPECT_NEAR((memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes) / (16 * total / 16),
              1.0, 0.02);
  EXPECT_EQ(memory.inflight_microbatches, 2);
}

// The study's Llama3-70B TP2-PP8 run on 32 H200 (its NeMo config: seq 8192, micro-batch 1, global batch 128,
// sequence parallel, flash attention, no recomputation, distributed_fused_adam = ZeRO-1 over dp 2) ran on a
// GPU the driver reports as 143771 MiB. Hand count of stage 0 (10 layers + the 128256 x 8192 embedding, / tp
// 2): per layer per token, bytes: norm inputs and the QKV/FFN inputs 4 x 2h / tp (sequence parallel), Q and
// the attention output 2 x 2h / tp, K and V 2 x 2 x 1024 / tp, log-sum-exp 4 x 64 / tp, SwiGLU 2 x 3f / tp =
// 137,344 bytes (33.5 s b h / t: Korthikanti et al.'s 34 s b h / t with GQA's smaller K, V and SwiGLU's wider
// FFN, no dropout); 8 micro-batches in flight x 10 layers x 8192 tokens. Weights: 10 bytes/param (bf16
// weights and gradients, 12 bytes of fp32 master + Adam over dp 2).
TEST(Memory, StudyLlama70bTp2Pp8MatchesTheHandCountAndFitsTheH200ItRanOn) {
  const model::ModelSpec model = model::load_model("llama3-70b");
  Layout layout;
  layout.tp = 2;
  layout.pp = 8;
  layout.dp = 2;
  layout.global_batch = 128;
  layout.zero_stage = 1;
  layout.sequence_parallel = true;
  const MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_EQ(memory.stage, 0);
  EXPECT_EQ(memory.inflight_microbatches, 8);
  const double per_token_layer =
      4 * 2 * 8192 / 2.0 + (2 * 2 * 8192 + 2 * 2 * 1024 + 4 * 64 + 2 * 3 * 28672) / 2.0;
  EXPECT_DOUBLE_EQ(per_token_layer, 137344);
  EXPECT_NEAR(memory.activations_bytes, 8 * 10 * 8192 * per_token_layer, 1.0);
  const double layer_params = 8192.0 * (8192 + 2 * 1024) + 8192.0 * 8192 + 3 * 8192.0 * 28672;
  const double stage0_params = (10 * layer_params + 128256.0 * 8192) / 2 + 10 * 2 * 8192;  // + the two norms
  EXPECT_NEAR(memory.weights_bytes + memory.gradients_bytes + memory.optimizer_bytes, 10 * stage0_params,
              1e-6 * 10 * stage0_params);
  const double h200_bytes = 143771.0 * 1024 * 1024;
  EXPECT_NEAR(memory.total_bytes() / 1073741824.0, 128.57, 0.01);
  EXPECT_LE(memory.total_bytes(), usable_memory_bytes(h200_bytes)) << "the study ran this layout on an H200";
  // The former rule (90 % of the device) refused it.
  EXPECT_GT(memory.total_bytes(), 0.90 * h200_bytes);
  // TP1-PP16 (also in the study's list) holds every layer's activations on stage 0 without tensor parallel
  // splitting: no reserve makes that fit.
  layout.tp = 1;
  layout.pp = 16;
  layout.sequence_parallel = false;
  EXPECT_GT(memory_per_gpu(model, resolved(model, layout)).total_bytes(), h200_bytes);
}

TEST(Memory, UsableMemoryLeavesRuntimeAndFragmentation) {
  const double gib = 1073741824.0;
  EXPECT_DOUBLE_EQ(usable_memory_bytes(80 * gib), 80 * gib * 0.97 - 4 * gib);
  EXPECT_DOUBLE_EQ(usable_memory_bytes(2 * gib), 0.0);
}

TEST(Memory, RejectsStageOutsideThePipeline) {
  const model::ModelSpec model = model::load_model("tiny-dense");
  const Layout layout = resolved(model, Layout{});
  EXPECT_THROW(memory_for_stage(model, layout, 1), InputError);
}

}  // namespace
TEST(Memory, ContextParallelSplitsActivationsNotWeights) {
  // cp = 2: each rank keeps the activations of 64 of the 128 tokens (flash attention: linear in tokens);
  // weights, gradients and optimizer state are replicated over the cp ranks, as over dp ranks.
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.cp = 2;
  MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.activations_bytes, (4 * kTinyLayerActivations + kTinyOutputActivations) / 2);
  layout.cp = 4;
  memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.activations_bytes, (4 * kTinyLayerActivations + kTinyOutputActivations) / 4);
}

TEST(Memory, ZeroShardsOverDataTimesContextParallelRanks) {
  // Megatron-LM's distributed optimizer shards over the dp-cp group: dp 2 x cp 2 = 4 shards.
  const model::ModelSpec model = model::load_model("tiny-dense");
  Layout layout;
  layout.cp = 2;
  layout.dp = 2;
  layout.zero_stage = 1;
  MemoryBreakdown memory = memory_per_gpu(model, resolved(model, layout));
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 4);
  layout.zero_stage = 3;
  memory = memory_per_gpu(model, resolved(model, layout));
  // As with dp 4 alone: the shard plus one gathered layer, and the layer awaiting its reduce-scatter.
  EXPECT_DOUBLE_EQ(memory.weights_bytes, 2 * kTinyParams / 4 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.gradients_bytes, 2 * kTinyParams / 4 + 2 * kTinyLayerParams);
  EXPECT_DOUBLE_EQ(memory.optimizer_bytes, 12 * kTinyParams / 4);
}

}  // namespace calo::parallel
