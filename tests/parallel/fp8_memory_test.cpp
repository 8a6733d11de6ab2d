// FP8 in the memory model (docs/METRICS.md "FP8 training"): torchao's recipes hold what bf16 holds,
// --fp8-all-gather gathers the dense FP8 linears' weights at 1 byte, Transformer Engine's delayed scaling
// keeps FP8 weight copies, their amax history and FP8-saved linear inputs; and the layout refuses
// --fp8-all-gather where it cannot apply, naming the flag.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/model_spec.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::parallel {
namespace {

// Llama3-8B's FP8 linears per layer (tp 1): attention 2·4096·4096 + 2·4096·1024, SwiGLU FFN 3·4096·14336.
constexpr double kLlamaFp8PerLayer = 41'943'040.0 + 176'160'768.0;
// A layer's norms (two RMSNorms of 4096), which stay bf16 in the gather.
constexpr double kLlamaNormsPerLayer = 8192.0;
// TE's amax history per FP8 linear: 5 tensors x 1024 entries x 4 bytes.
constexpr double kAmaxHistoryPerLinear = 5 * 1024 * 4.0;

Layout llama_layout(Precision precision) {
  Layout layout;
  layout.micro_batch = 1;
  layout.seq_length = 8192;
  layout.precision = precision;
  return layout;
}

MemoryBreakdown memory(Layout layout, int stage = 0) {
  const model::ModelSpec model = model::load_model("llama3-8b");
  return memory_for_stage(model, resolve_layout(model, layout), stage);
}

TEST(Fp8Memory, TorchaoRecipesHoldWhatBf16Holds) {
  // Float8Linear saves its bf16 input and weight and casts again in backward: nothing FP8 outlives a GEMM.
  const MemoryBreakdown bf16 = memory(llama_layout(Precision::kBf16));
  for (const Precision precision : {Precision::kFp8Tensorwise, Precision::kFp8Rowwise}) {
    const MemoryBreakdown fp8 = memory(llama_layout(precision));
    EXPECT_EQ(fp8.total_bytes(), bf16.total_bytes()) << to_string(precision);
    EXPECT_EQ(fp8.activations_bytes, bf16.activations_bytes);
    EXPECT_EQ(fp8.fp8_weights_bytes, 0.0);
    EXPECT_EQ(describe_terms(fp8), describe_terms(bf16));
  }
}

TEST(Fp8Memory, DelayedScalingKeepsEachLinearsFp8WeightAndTransposeAndItsAmaxHistory) {
  const MemoryBreakdown bf16 = memory(llama_layout(Precision::kBf16));
  const MemoryBreakdown delayed = memory(llama_layout(Precision::kFp8Delayed));
  // 32 layers x (2 bytes a matrix parameter + 4 linears' amax history).
  const double expected = 32 * (2 * kLlamaFp8PerLayer + 4 * kAmaxHistoryPerLinear);
  EXPECT_DOUBLE_EQ(delayed.fp8_weights_bytes, expected);
  EXPECT_DOUBLE_EQ(expected, 13'961'265'152.0);
  EXPECT_EQ(delayed.weights_bytes, bf16.weights_bytes);  // the bf16 weights are still there
  EXPECT_NE(describe_terms(delayed).find("FP8 weight copies "), std::string::npos) << describe_terms(delayed);
  EXPECT_EQ(to_json(delayed)["fp8_weights_bytes"], expected);
  EXPECT_FALSE(to_json(bf16).contains("fp8_weights_bytes"));
  // Under FSDP TE casts from each gathered unit and keeps no copy: the amax history alone.
  Layout fsdp = llama_layout(Precision::kFp8Delayed);
  fsdp.dp = 2;
  fsdp.zero_stage = 3;
  EXPECT_DOUBLE_EQ(memory(fsdp).fp8_weights_bytes, 32 * 4 * kAmaxHistoryPerLinear);
}

TEST(Fp8Memory, DelayedScalingSavesTheLinearsInputsInFp8) {
  // Per token and layer: QKV and FFN inputs 2h -> h each, the SwiGLU output f bytes less, an FP8 copy of the
  // attention output (q) more: 139,392 -> 120,960 bytes.
  const double tokens = 8192, layers = 32;
  const MemoryBreakdown bf16 = memory(llama_layout(Precision::kBf16));
  const MemoryBreakdown delayed = memory(llama_layout(Precision::kFp8Delayed));
  EXPECT_DOUBLE_EQ(bf16.activations_bytes - delayed.activations_bytes, layers * tokens * (139'392 - 120'960));
  bool fp8_inputs = false;
  for (const model::ActivationTerm& term : delayed.activations_by_kind)
    fp8_inputs |= term.kind == "QKV and FFN inputs (FP8)" && term.bytes == layers * tokens * 2 * 4096;
  EXPECT_TRUE(fp8_inputs);
  // Full recompute keeps the bf16 layer input either way.
  Layout full = llama_layout(Precision::kFp8Delayed);
  full.recompute = Recompute::kFull;
  Layout full_bf16 = full;
  full_bf16.precision = Precision::kBf16;
  EXPECT_EQ(memory(full).activations_bytes, memory(full_bf16).activations_bytes);
}

TEST(Fp8Memory, Fp8AllGatherHoldsEachGatheredLayersFp8LinearsAtOneByte) {
  // pp 4: stage 1 holds layers 8-15 only, so its largest gathered unit is a layer.
  Layout layout = llama_layout(Precision::kFp8Tensorwise);
  layout.pp = 4;
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.global_batch = 8;
  Layout gathered_fp8 = layout;
  gathered_fp8.fp8_all_gather = true;
  const double layer = kLlamaFp8PerLayer + kLlamaNormsPerLayer;  // 218,112,000 parameters
  // The gathered layer: 2 bytes a parameter, against 2·layer − P8 with its FP8 linears at 1 byte.
  EXPECT_DOUBLE_EQ(memory(layout, 1).weights_bytes - memory(gathered_fp8, 1).weights_bytes,
                   kLlamaFp8PerLayer);
  EXPECT_DOUBLE_EQ(2 * layer - kLlamaFp8PerLayer, 218'120'192.0);
  // Without resharding every unit of the stage stays gathered: 8 layers' FP8 linears at 1 byte.
  layout.reshard_after_forward = gathered_fp8.reshard_after_forward = false;
  EXPECT_DOUBLE_EQ(memory(layout, 1).weights_bytes - memory(gathered_fp8, 1).weights_bytes,
                   8 * kLlamaFp8PerLayer);
  // torchtitan's compute copy under FSDP2 is the gathered unit; under pp it does not reshard after forward
  // (apply_fsdp), so the stage's 8 layers stay gathered, their FP8 linears at 1 byte.
  layout.reshard_after_forward = gathered_fp8.reshard_after_forward = true;
  layout.trainer = gathered_fp8.trainer = Trainer::kTorchtitan;
  EXPECT_DOUBLE_EQ(memory(layout, 1).weights_bytes - memory(gathered_fp8, 1).weights_bytes,
                   8 * kLlamaFp8PerLayer);
}

TEST(Fp8Memory, Fp8AllGatherIsRefusedWithoutTensorwiseFp8OrFsdpNamingTheFlag) {
  const model::ModelSpec model = model::load_model("llama3-8b");
  Layout layout = llama_layout(Precision::kFp8Tensorwise);
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.fp8_all_gather = true;
  EXPECT_NO_THROW(resolve_layout(model, layout));
  const auto refusal = [&](Layout refused) {
    try {
      resolve_layout(model, refused);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  for (const Precision precision : {Precision::kBf16, Precision::kFp8Rowwise, Precision::kFp8Delayed}) {
    Layout other = layout;
    other.precision = precision;
    const std::string message = refusal(other);
    EXPECT_NE(message.find("--fp8-all-gather"), std::string::npos) << message;
    EXPECT_NE(message.find(to_string(precision)), std::string::npos) << message;
  }
  Layout zero1 = layout;
  zero1.zero_stage = 1;
  EXPECT_NE(refusal(zero1).find("--fp8-all-gather changes FSDP's parameter all-gather"), std::string::npos);
  Layout one_rank = layout;
  one_rank.dp = 1;
  EXPECT_NE(refusal(one_rank).find("shard group 1"), std::string::npos) << refusal(one_rank);
}

TEST(Fp8Memory, Fp8AllGatherIsNamedInTheLayoutStringAndStoredConfig) {
  Layout layout = llama_layout(Precision::kFp8Tensorwise);
  layout.dp = 2;
  layout.zero_stage = 3;
  layout.global_batch = 2;
  EXPECT_FALSE(to_json(layout).contains("fp8_all_gather"));
  layout.fp8_all_gather = true;
  EXPECT_NE(describe(layout).find(" fp8-all-gather"), std::string::npos) << describe(layout);
  EXPECT_TRUE(layout_from_json(to_json(layout)).fp8_all_gather);
}

}  // namespace
}  // namespace calo::parallel
