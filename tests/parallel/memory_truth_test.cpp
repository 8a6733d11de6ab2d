// The memory model against what a real PyTorch training step held on one H200
// (tests/fixtures/memory-truth-h200, issue 39 item 1): every measured configuration, term by term. The
// issue's target is 5 % on the peak; the bounds below are today's errors (docs/benchmarks/memory.md "Memory
// model against PyTorch"), so that the model cannot drift further from measurement unnoticed, and tighten as
// the model is reconciled (issue 39 item 3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::parallel {
namespace {

struct Truth {
  nlohmann::json row;
  MemoryBreakdown model;
};

Recompute recompute_named(const std::string& name) {
  if (name == "full") return Recompute::kFull;
  if (name == "selective") return Recompute::kSelective;
  return Recompute::kNone;
}

// The layout a fixture line ran: one GPU unless it names its world, tp, pp, cp and data parallelism
// (torchtitan's FSDP2 is calo's ZeRO 3 over dp * cp ranks; DDP and one GPU are ZeRO 0).
Layout line_layout(const nlohmann::json& row) {
  Layout layout;
  layout.tp = row.value("tp", 1);
  layout.pp = row.value("pp", 1);
  layout.cp = row.value("cp", 1);
  layout.dp = row.value("world", 1) / (layout.tp * layout.pp * layout.cp);
  layout.zero_stage = row.value("data_parallel", "none") == "fsdp" ? 3 : 0;
  layout.micro_batch = row.at("mbs").get<int>();
  layout.global_batch = layout.micro_batch * layout.dp;
  layout.seq_length = row.at("seq").get<int>();
  return layout;
}

// Every line of the fixture file `name` (under tests/fixtures/`dir`) with the model's breakdown for the same
// model slice and layout; `recompute_of` maps the line's recompute name to the model's.
std::vector<Truth> load_lines(const std::string& name, Recompute (*recompute_of)(const std::string&),
                              Trainer trainer = Trainer::kDefault,
                              const std::string& dir = "memory-truth-h200") {
  std::ifstream in(std::string(CALO_SOURCE_DIR) + "/tests/fixtures/" + dir + "/" + name);
  EXPECT_TRUE(in.good()) << "tests/fixtures/" << dir << "/" << name;
  std::vector<Truth> truths;
  std::string line;
  while (std::getline(in, line)) {
    Truth truth;
    truth.row = nlohmann::json::parse(line);
    model::ModelSpec model = model::load_model("llama3-8b");
    model.num_layers = truth.row.at("layers").get<int>();
    Layout layout = line_layout(truth.row);
    layout.recompute = recompute_of(truth.row.at("recompute").get<std::string>());
    layout.trainer = trainer;
    truth.model = memory_per_gpu(model, resolve_layout(model, layout));
    truths.push_back(truth);
  }
  return truths;
}

// The PyTorch trainer's lines (memory_truth.jsonl), under the model's `trainer` accounting.
std::vector<Truth> load_truths(Trainer trainer = Trainer::kDefault) {
  return load_lines("memory_truth.jsonl", recompute_named, trainer);
}

double error(double model, double measured) {
  return (model - measured) / measured;
}

TEST(MemoryTruth, EveryH200MeasurementIsComparedAndNoneErred) {
  const std::vector<Truth> truths = load_truths();
  ASSERT_EQ(truths.size(), 14u) << "the fixture's 14 configurations";
  std::printf(
      "layers seq mbs recompute | activations GiB model/measured (err) | peak GiB model/measured (err)\n");
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (const Truth& truth : truths) {
    EXPECT_FALSE(truth.row.contains("error")) << truth.row.dump();
    const double activations = truth.row.at("activations_bytes").get<double>();
    const double peak = truth.row.at("peak_step_bytes").get<double>();
    std::printf("%d %d %d %s | %.2f / %.2f (%+.1f %%) | %.2f / %.2f (%+.1f %%)\n",
                truth.row.at("layers").get<int>(), truth.row.at("seq").get<int>(),
                truth.row.at("mbs").get<int>(), truth.row.at("recompute").get<std::string>().c_str(),
                truth.model.activations_bytes / kGiB, activations / kGiB,
                100 * error(truth.model.activations_bytes, activations), truth.model.total_bytes() / kGiB,
                peak / kGiB, 100 * error(truth.model.total_bytes(), peak));
  }
}

TEST(MemoryTruth, ParametersAndStateMatchTheMeasuredSlice) {
  for (const Truth& truth : load_truths()) {
    const double params = truth.row.at("params").get<double>();
    // The model counts the slice's parameters exactly (bf16 weights: 2 bytes each).
    EXPECT_NEAR(truth.model.weights_bytes, truth.row.at("weights_bytes").get<double>(), 1e-6 * params);
    // State: the model keeps 16 bytes per parameter (bf16 gradients); the trainer 18 (fp32 master gradient,
    // as Megatron-LM's main grads). Today's error -11.1 %.
    const double model_state =
        truth.model.weights_bytes + truth.model.gradients_bytes + truth.model.optimizer_bytes;
    const double measured_state = truth.row.at("state_bytes_before_step").get<double>();
    EXPECT_NEAR(error(model_state, measured_state), -0.111, 0.01) << truth.row.dump();
  }
}

TEST(MemoryTruth, ActivationsAndPeakWithinTodaysErrorOfEveryConfiguration) {
  for (const Truth& truth : load_truths()) {
    const std::string recompute = truth.row.at("recompute").get<std::string>();
    const double activations =
        error(truth.model.activations_bytes, truth.row.at("activations_bytes").get<double>());
    const double peak = error(truth.model.total_bytes(), truth.row.at("peak_step_bytes").get<double>());
    // Today: without full recompute the model keeps 10-19 % fewer activation bytes than autograd saved (per
    // layer 139 kB a token against 186.5 kB measured: eager SwiGLU keeps gate, up, silu(gate) and the
    // product, eager RoPE and the attention output's reshape keep copies, where the model counts fused
    // kernels' inputs); with full recompute it matches to 0.1 %. The peak is 16-34 % low: the state term
    // above, the bf16 gradients alive beside the fp32 ones, and the loss's backward transient (about 8 bytes
    // per vocabulary entry per token), which the model does not hold.
    if (recompute == "full") {
      EXPECT_LT(std::abs(activations), 0.001) << truth.row.dump();
    } else {
      EXPECT_GT(activations, -0.20) << truth.row.dump();
      EXPECT_LT(activations, -0.10) << truth.row.dump();
    }
    EXPECT_GT(peak, -0.35) << truth.row.dump();
    EXPECT_LT(peak, -0.15) << truth.row.dump();
  }
}

TEST(MemoryTruth, ThePytorchTrainersAccountingHoldsEveryPeakWithinHalfAPercent) {
  // --trainer pytorch: the fp32 master gradient (4 bytes per parameter; the bf16 gradients are freed before
  // the next forward), plain cross-entropy's backward transient (two fp32 tensors of the logits' size at the
  // loss), and the activations eager autograd saves beyond the fused kernels' (RoPE's inputs, the attention
  // output's reshaped copy, silu(gate): docs/METRICS.md "Activations by kind"). State is then the trainer's
  // to the byte, the activations within 0.1 % (a few hundred kB of RoPE tables and indices), and every peak
  // within 0.5 % (the target is 5 %; before the eager terms the activations were -15 % and the peaks
  // -1.0 % to -4.3 %).
  for (const Truth& truth : load_truths(Trainer::kPytorch)) {
    const double measured_state = truth.row.at("state_bytes_before_step").get<double>();
    const double model_state =
        truth.model.weights_bytes + truth.model.gradients_bytes + truth.model.optimizer_bytes;
    EXPECT_NEAR(error(model_state, measured_state), 0.0, 0.005) << truth.row.dump();
    const double tokens = truth.row.at("seq").get<double>() * truth.row.at("mbs").get<double>();
    EXPECT_DOUBLE_EQ(truth.model.temporaries_bytes, 8.0 * 128256 * tokens);
    const double measured_peak = truth.row.at("peak_step_bytes").get<double>();
    const double with_measured_activations =
        model_state + truth.row.at("activations_bytes").get<double>() + truth.model.temporaries_bytes;
    EXPECT_NEAR(error(with_measured_activations, measured_peak), 0.0, 0.005) << truth.row.dump();
    EXPECT_NEAR(error(truth.model.activations_bytes, truth.row.at("activations_bytes").get<double>()), 0.0,
                0.001)
        << truth.row.dump();
    const double peak = error(truth.model.total_bytes(), measured_peak);
    EXPECT_LE(std::abs(peak), 0.005) << truth.row.dump();
  }
}

/// The PyTorch trainer's lines on one H100 80GB (memory-truth-h100/`name`) under its own accounting.
std::vector<Truth> load_h100_truths(const std::string& name) {
  return load_lines(name, recompute_named, Trainer::kPytorch, "memory-truth-h100");
}

/// True when the line's step ran (no out-of-memory, no error).
bool ran(const Truth& truth) {
  return !truth.row.value("out_of_memory", false) && !truth.row.contains("error");
}

constexpr double kH100DeviceBytes = 81559.0 * 1024 * 1024;  // what NVML reports (the h100-hgx preset's)

TEST(MemoryTruth, OnAnH100ThePytorchAccountingHoldsEveryPeakWithinHalfAPercent) {
  // A second card, never fitted: the grid's 14 lines measured on one H100 80GB HBM3 (no, selective and full
  // recompute, in two calls). The same accounting as on the H200, the same bounds.
  const std::vector<Truth> truths = load_h100_truths("memory_truth.jsonl");
  ASSERT_EQ(truths.size(), 14u);
  for (const Truth& truth : truths) {
    ASSERT_TRUE(ran(truth)) << truth.row.dump();
    EXPECT_NE(truth.row.at("device").get<std::string>().find("H100"), std::string::npos);
    EXPECT_NEAR(error(truth.model.activations_bytes, truth.row.at("activations_bytes").get<double>()), 0.0,
                0.001)
        << truth.row.dump();
    EXPECT_LE(std::abs(error(truth.model.total_bytes(), truth.row.at("peak_step_bytes").get<double>())),
              0.005)
        << truth.row.dump();
  }
}

TEST(MemoryTruth, TheUsableMarginCoversPytorchsReserveAndRuntimeExceptFullRecomputesWithMemoryToSpare) {
  // The usable rule keeps 3 % of the card for fragmentation and 4 GiB for the runtime (6.39 GiB of an H100).
  // Measured beside every H100 step that ran: the runtime beyond the allocator (the CUDA context and cuBLAS /
  // cuDNN, 0.75 GiB: far less than 4) and the caching allocator's reserve above its allocated peak. Without
  // recompute and with selective recompute that reserve is 0.5-7.7 % of the peak (up to 5.1 GiB: more than 3
  // %), and the sum stays under the margin with at least 0.45 GiB to spare. Full recompute allocates and
  // frees differently: 11-14 % of the peak, and the sum goes past the margin (up to 8.8 GiB) where the card
  // had memory to spare. It is not needed: the 11-layer slice admitted near the card ran with 8.4 GiB of it,
  // and 12 layers (tight) ran with 5.0 after two allocator retries (the near-card test). One GPU, no NCCL:
  // communicators add to the runtime on several.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double margin = kH100DeviceBytes * kFragmentationFraction + kRuntimeReserveBytes;
  std::printf("layers seq mbs recompute | peak GiB | reserve above it | runtime | overhead / margin GiB\n");
  int measured = 0, full_recompute = 0, full_beyond_margin = 0;
  for (const char* name : {"memory_truth.jsonl", "tight.jsonl"}) {
    for (const Truth& truth : load_h100_truths(name)) {
      if (!ran(truth)) continue;
      const double peak = truth.row.at("peak_step_bytes").get<double>();
      const double reserve = truth.row.at("peak_reserved_bytes").get<double>() - peak;
      const double runtime = truth.row.at("runtime_bytes").get<double>();
      const std::string recompute = truth.row.at("recompute").get<std::string>();
      std::printf("%d %d %d %s | %.2f | %.2f (%.1f %%) | %.2f | %.2f / %.2f\n",
                  truth.row.at("layers").get<int>(), truth.row.at("seq").get<int>(),
                  truth.row.at("mbs").get<int>(), recompute.c_str(), peak / kGiB, reserve / kGiB,
                  100 * reserve / peak, runtime / kGiB, (reserve + runtime) / kGiB, margin / kGiB);
      EXPECT_GT(runtime, 0.5 * kGiB) << "the CUDA context alone is more: " << truth.row.dump();
      ++measured;
      if (recompute != "full") {
        EXPECT_LE(reserve + runtime, margin - 0.45 * kGiB) << truth.row.dump();
        continue;
      }
      ++full_recompute;
      // Where the allocator never had to give memory back (no retries); pressed, it kept less.
      if (truth.row.value("alloc_retries", 0) == 0) {
        EXPECT_GT(reserve, 0.10 * peak) << truth.row.dump();
      }
      full_beyond_margin += reserve + runtime > margin ? 1 : 0;
    }
  }
  EXPECT_EQ(measured, 19) << "the grid's 14 lines and the 5 near-card lines that ran";
  EXPECT_EQ(full_recompute, 5) << "3 grid lines, 11 and 12 layers near the card";
  EXPECT_EQ(full_beyond_margin, 3) << "the 16K and 8-layer grid lines and 11 layers near the card";
}

TEST(MemoryTruth, NearAnH100sCardWhatTheRuleAdmitsRanAndWhatIsBeyondTheCardDidNot) {
  // The near-card set: the model (pytorch accounting) admits 8 layers (70.11 GiB of 73.26 usable) and 11 with
  // full recompute (70.39): both ran, the second although its allocator had kept 7.65 GiB above its peak
  // (past the margin) with the device nearly full; 10 layers (80.27), 14 and 15 with full recompute
  // (81.54, 85.26) are beyond the 79.65 GiB card: each ran out of memory. Tight (beyond usable, within the
  // card): 9 layers (75.19 GiB) ran with nothing to spare (the device full: CUDA sees 79.18 GiB of the 79.65
  // NVML reports), 9 with selective recompute (74.62) ran, 12 with full recompute (74.11) ran after two
  // allocator retries, 13 with full recompute (77.83) ran out of memory 0.1 GiB short. So tight means what it
  // says: it may run, and may not.
  const double device_bytes = kH100DeviceBytes;
  int tight = 0;
  for (const Truth& truth : load_h100_truths("tight.jsonl")) {
    const double total = truth.model.total_bytes();
    if (total <= usable_memory_bytes(device_bytes)) {
      EXPECT_TRUE(ran(truth)) << "admitted, so it must run: " << truth.row.dump();
    } else if (!is_tight(total, device_bytes)) {
      EXPECT_FALSE(ran(truth)) << "beyond the card, so it cannot run: " << truth.row.dump();
    } else {
      ++tight;
      if (ran(truth)) {  // what it took fits what CUDA has, and the model's peak is the allocator's
        EXPECT_LE(truth.row.at("device_used_bytes").get<double>(),
                  truth.row.at("device_total_bytes").get<double>());
        EXPECT_LE(std::abs(error(total, truth.row.at("peak_step_bytes").get<double>())), 0.005);
      }
    }
  }
  EXPECT_EQ(tight, 4) << "9 layers with no and with selective recompute, 12 and 13 with full";
}

/// torchtitan's recompute name as calo's: its selective AC is not calo's (it recomputes every second matmul);
/// it is compared as no recompute (what calo would hold).
Recompute torchtitan_recompute(const std::string& name) {
  return name == "full" ? Recompute::kFull : Recompute::kNone;
}

/// torchtitan's lines on one H200 (memory-truth-h200/torchtitan.jsonl) under `trainer`'s accounting.
std::vector<Truth> load_torchtitan_truths(Trainer trainer = Trainer::kDefault) {
  return load_lines("torchtitan.jsonl", torchtitan_recompute, trainer);
}

/// torchtitan's lines on two H200 (memory-truth-h200x2/torchtitan.jsonl: FSDP2, CP, DDP) under `trainer`'s.
std::vector<Truth> load_torchtitan_pair_truths(Trainer trainer = Trainer::kTorchtitan) {
  return load_lines("torchtitan.jsonl", torchtitan_recompute, trainer, "memory-truth-h200x2");
}

/// The torchtitan line named `name`.
const Truth& torchtitan_truth(const std::vector<Truth>& truths, const std::string& name) {
  for (const Truth& truth : truths)
    if (truth.row.at("name").get<std::string>() == name) return truth;
  ADD_FAILURE() << "no torchtitan line " << name;
  return truths.front();
}

TEST(MemoryTruth, TorchtitansActivationGrowthIsTheModelsWithin5Percent) {
  // Compiled torchtitan without recompute: doubling the tokens of a micro-batch (mbs 2, or seq 16K) adds 8.60
  // GiB at the peak; the model's activation term adds 8.30 GiB (-3.5 %). The activation model is right for a
  // fused (compiled) trainer; eager PyTorch keeps more (the test above).
  const std::vector<Truth> truths = load_torchtitan_truths();
  ASSERT_EQ(truths.size(), 8u);
  const Truth& base = torchtitan_truth(truths, "mem-s8k-none");
  for (const char* doubled : {"mem-s8k-mbs2-none", "mem-s16k-none", "mem-s4k-mbs4-none"}) {
    const Truth& twice = torchtitan_truth(truths, doubled);
    const double measured = twice.row.at("peak_allocated_bytes").get<double>() -
                            base.row.at("peak_allocated_bytes").get<double>();
    const double model = twice.model.activations_bytes - base.model.activations_bytes;
    EXPECT_NEAR(error(model, measured), -0.035, 0.015) << doubled;
  }
}

TEST(MemoryTruth, TorchtitanPeaksWithinTodaysErrorOfEveryConfiguration) {
  // The model's peak is 9-17 % above compiled torchtitan's: the model keeps bf16 weights and gradients beside
  // the fp32 master and moments all step (Megatron-LM's persistent buffers), torchtitan sets its fp32
  // gradients to None at each step's start, so its activation peak (end of forward) sees parameters and
  // moments only (21.5 GiB) plus its bf16 compute copies. Eager torchtitan keeps more activations (-13 %);
  // its selective AC recomputes more than calo's selective, compared here as calo without recompute (+23 %).
  // Under full recompute the default accounting also counts the layer Megatron-LM's checkpointing rebuilds
  // for its backward, which compiled torchtitan frees as it goes (+23.6 % at 16K tokens; --trainer torchtitan
  // leaves it out).
  for (const Truth& truth : load_torchtitan_truths()) {
    const std::string name = truth.row.at("name").get<std::string>();
    const double peak = error(truth.model.total_bytes(), truth.row.at("peak_allocated_bytes").get<double>());
    if (name == "mem-s8k-none-eager") {
      EXPECT_NEAR(peak, -0.13, 0.02) << name;
    } else if (name == "mem-s8k-selective") {
      EXPECT_NEAR(peak, 0.234, 0.02) << name;
    } else if (name == "mem-s16k-full") {
      EXPECT_NEAR(peak, 0.236, 0.02) << name;
    } else {
      EXPECT_GT(peak, 0.08) << name;
      EXPECT_LT(peak, 0.18) << name;
    }
    // 16 bytes per parameter stay resident between steps, as the model's weights + gradients + optimizer.
    const double state =
        truth.model.weights_bytes + truth.model.gradients_bytes + truth.model.optimizer_bytes;
    EXPECT_NEAR(error(state, truth.row.at("resident_after_step_bytes").get<double>()), 0.0, 0.005) << name;
  }
}

TEST(MemoryTruth, TorchtitansAccountingHoldsEveryCompiledPeakOnOneAndTwoH200sWithin5Percent) {
  // --trainer torchtitan (docs/METRICS.md "Memory per GPU"): the larger of the end of forward (fp32
  // parameters and moments, gradients freed, bf16 compute copies, DDP's fp32 buckets, activations) and, under
  // FSDP2, the end of backward (fp32 gradient shards and the largest unit's bf16 gradient with its fp32
  // copy) or, without FSDP2, every fp32 gradient. The bf16 compute copies without FSDP2 are what compiled
  // blocks save for backward (every weight but the embedding; under full recompute the output projection's
  // alone), as a memory snapshot of the 16K full-recompute run showed (it was +6.0 % when the model kept a
  // bf16 copy of every weight). Every compiled torchtitan peak, every rank, within the 5 % (today
  // -4.2 % to -0.2 %). Eager torchtitan keeps more activations than the fused kernels calo models, and
  // torchtitan's selective AC is not calo's: those are held at today's errors.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::vector<Truth> truths = load_torchtitan_truths(Trainer::kTorchtitan);
  ASSERT_EQ(truths.size(), 8u);
  const std::vector<Truth> pair = load_torchtitan_pair_truths();
  ASSERT_EQ(pair.size(), 11u) << "the two-H200 fixture's 11 runs";
  truths.insert(truths.end(), pair.begin(), pair.end());
  int within = 0;
  for (const Truth& truth : truths) {
    std::string name = truth.row.at("name").get<std::string>();
    if (name.rfind("mem-", 0) == 0) name.erase(0, 4);  // the one-GPU fixture keeps the runs' names
    const int world = truth.row.value("world", 1);
    const std::vector<double> peaks =
        truth.row.value("peak_allocated_bytes_by_rank",
                        std::vector<double>{truth.row.at("peak_allocated_bytes").get<double>()});
    ASSERT_EQ(static_cast<int>(peaks.size()), world) << name;
    for (size_t rank = 0; rank < peaks.size(); ++rank) {
      const double peak = error(truth.model.total_bytes(), peaks[rank]);
      std::printf("%d GPU %-20s rank %zu: model %.2f GiB, measured %.2f GiB (%+.1f %%)\n", world,
                  name.c_str(), rank, truth.model.total_bytes() / kGiB, peaks[rank] / kGiB, 100 * peak);
      if (!truth.row.at("compile").get<bool>()) {
        EXPECT_LT(peak, -0.20) << name << ": eager keeps more than the fused kernels modelled";
        EXPECT_GT(peak, -0.32) << name;
      } else if (name == "s8k-selective") {
        EXPECT_NEAR(peak, 0.081, 0.01) << name << ": torchtitan's selective AC, compared as none";
      } else {
        EXPECT_LE(std::abs(peak), 0.05) << name << " rank " << rank;
        ++within;
      }
    }
  }
  EXPECT_EQ(within, 6 + 2 * 10) << "6 one-GPU and 10 two-GPU compiled runs (both ranks) within 5 %";
}

TEST(MemoryTruth, TorchtitansStateBetweenStepsIs16BytesPerParameterSharded) {
  // What stays between steps, the base of the torchtitan accounting: fp32 parameters, gradients and Adam
  // moments, 16 bytes per parameter, over dp * cp ranks under FSDP2; DDP adds its fp32 gradient buckets (4).
  for (const Truth& truth : load_torchtitan_pair_truths()) {
    const std::string data_parallel = truth.row.at("data_parallel").get<std::string>();
    const double params = 1923125248.0;  // the 4-layer Llama3-8B slice (memory-truth-h200/memory_truth.jsonl)
    const double state = data_parallel == "fsdp" ? 16.0 * params / 2 : 20.0 * params;
    EXPECT_NEAR(error(state, truth.row.at("resident_after_step_bytes").get<double>()), 0.0, 0.005)
        << truth.row.dump();
  }
}

TEST(MemoryTruth, TorchtitansReservedPeakOnTwoH200sIsTheStreamsPoolsWithinTodaysError) {
  // docs/METRICS.md "Reserved memory": under FSDP2 the caching allocator's reserved peak (torchtitan's
  // max_reserved) is the compute stream's peak plus what the reduce-scatter stream keeps (every fp32 gradient
  // shard and the largest unit's fp32 reduce-scatter input) and the all-gather stream keeps (the largest
  // gathered unit and its input shard). On two H200s that puts every compiled FSDP2 run's reserved peak
  // 1.5-10.3 % below the measured (the compute stream's own fragmentation is not modelled); the live peak
  // alone is 21-31 % below. DDP has no side-stream pool: its reserved is the live peak (-5.8 %). The eager
  // run keeps more activations than the accounting models (-29.5 %), and is held at that.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  int fsdp = 0;
  for (const Truth& truth : load_torchtitan_pair_truths()) {
    const std::string name = truth.row.at("name").get<std::string>();
    const double measured = truth.row.at("peak_reserved_gib_logged").get<double>() * kGiB;
    const double reserved = error(truth.model.reserved_bytes, measured);
    std::printf("2 GPU %-20s reserved: model %.2f GiB (live %.2f), measured %.2f GiB (%+.1f %%)\n",
                name.c_str(), truth.model.reserved_bytes / kGiB, truth.model.total_bytes() / kGiB,
                measured / kGiB, 100 * reserved);
    if (truth.row.at("data_parallel").get<std::string>() != "fsdp") {
      EXPECT_DOUBLE_EQ(truth.model.reserved_bytes, truth.model.total_bytes()) << name;
      continue;
    }
    if (!truth.row.at("compile").get<bool>()) {
      EXPECT_NEAR(reserved, -0.295, 0.01) << name << ": eager keeps more than the fused kernels modelled";
      continue;
    }
    ++fsdp;
    EXPECT_LT(error(truth.model.total_bytes(), measured), -0.20) << name << ": the live peak alone";
    EXPECT_LT(reserved, 0.0) << name;
    EXPECT_GT(reserved, -0.11) << name;
  }
  EXPECT_EQ(fsdp, 9) << "the compiled FSDP2 and CP runs";
}

TEST(MemoryTruth, AnUncompiledLossAddsItsFp32BackwardToTorchtitansEagerPeak) {
  // torchtitan compiles its loss only with --compile; eager, its cross-entropy upcasts the logits to fp32 and
  // its backward holds two fp32 tensors of the logits' size at the loss (--trainer torchtitan-eager-loss, as
  // the pytorch trainer's). The eager one-GPU run's peak moves from -23.7 % to -5.3 %; the rest is eager
  // autograd's extra activations, which the torchtitan accounting does not model.
  const std::vector<Truth> compiled = load_torchtitan_truths(Trainer::kTorchtitan);
  const std::vector<Truth> eager_loss = load_torchtitan_truths(Trainer::kTorchtitanEagerLoss);
  const Truth& before = torchtitan_truth(compiled, "mem-s8k-none-eager");
  const Truth& after = torchtitan_truth(eager_loss, "mem-s8k-none-eager");
  const double measured = after.row.at("peak_allocated_bytes").get<double>();
  const double logits = 8192.0 * 128256.0;
  EXPECT_DOUBLE_EQ(after.model.temporaries_bytes, 8.0 * logits);
  EXPECT_DOUBLE_EQ(after.model.total_bytes() - before.model.total_bytes(), 8.0 * logits);
  EXPECT_NEAR(error(before.model.total_bytes(), measured), -0.237, 0.01);
  EXPECT_NEAR(error(after.model.total_bytes(), measured), -0.053, 0.01);
}

}  // namespace
}  // namespace calo::parallel
