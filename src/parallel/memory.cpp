// Memory per GPU: weights, gradients, optimizer state and in-flight activations of one pipeline stage
// (formulas in docs/METRICS.md, "Model accounting").
#include "parallel/memory.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/accounting.h"

namespace calo::parallel {
namespace {

constexpr double kWeightBytesPerParam = 2.0;      // bf16 weights
constexpr double kGradientBytesPerParam = 2.0;    // bf16 gradients
constexpr double kOptimizerBytesPerParam = 12.0;  // fp32 master weights + Adam m + Adam v

// Layer counts per virtual stage (index chunk * pp + stage). Uses the explicit partition that resolve_layout
// fills in; an unresolved layout (empty partition) gets the uniform split, remainder on the first stages.
// (Computed here rather than through schedule.h's layer_partition so memory does not depend on the schedule
// code; both follow the same virtual-stage numbering.)
std::vector<int> virtual_stage_layers(const Layout& layout, int num_layers) {
  const int virtual_count = layout.pp * layout.virtual_stages;
  if (!layout.layers_per_stage.empty()) {
    require_input(static_cast<int>(layout.layers_per_stage.size()) == virtual_count,
                  "layers per stage has " + std::to_string(layout.layers_per_stage.size()) +
                      " entries but pp * virtual stages = " + std::to_string(virtual_count));
    return layout.layers_per_stage;
  }
  std::vector<int> counts(virtual_count, num_layers / virtual_count);
  for (int index = 0; index < num_layers % virtual_count; ++index) ++counts[index];
  return counts;
}

// Parameters one rank of `stage` holds before data-parallel sharding, split into the dense part (replicated
// over dp) and the expert part (replicated over dp / ep).
struct StageParameters {
  double dense = 0;
  double expert = 0;
  double largest_layer = 0;  // dense + expert parameters of one layer on this rank (ZeRO-3 gather unit)
};

StageParameters stage_parameters(const model::ModelSpec& model, const Layout& layout, int stage,
                                 const std::vector<int>& layers) {
  const model::ParameterCounts counts = model::count_parameters(model);
  const double tp = layout.tp;
  // Attention and FFN matrices (with their biases) are split over tp; norms and the router are replicated.
  const double dense_per_layer = counts.per_layer_attention / tp + counts.per_layer_router +
                                 counts.per_layer_norm + (model.is_moe() ? 0.0 : counts.per_layer_mlp / tp);
  const double expert_per_layer =
      model.is_moe() ? counts.per_expert * (static_cast<double>(model.num_experts) / layout.ep) / tp : 0.0;
  StageParameters params;
  const int virtual_count = layout.pp * layout.virtual_stages;
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk) {
    const int virtual_stage = chunk * layout.pp + stage;
    const int layer_count = layers[virtual_stage];
    params.dense += layer_count * dense_per_layer;
    params.expert += layer_count * expert_per_layer;
    if (virtual_stage == 0) {
      // Word embedding is vocabulary-parallel over tp; learned positions are replicated.
      params.dense += (counts.embedding - counts.positions) / tp + counts.positions;
    }
    if (virtual_stage == virtual_count - 1) {
      params.dense += counts.final_norm;
      const double vocab_matrix = static_cast<double>(model.vocab_size) * model.hidden_size / tp;
      if (!model.tied_embeddings) {
        params.dense += vocab_matrix;
      } else if (layout.pp > 1) {
        params.dense += vocab_matrix;  // Megatron keeps a copy of the tied embedding on the last stage
      }
    }
  }
  if (std::any_of(layers.begin(), layers.end(), [](int count) { return count > 0; })) {
    params.largest_layer = dense_per_layer + expert_per_layer;
  }
  return params;
}

// Per-micro-batch activation bytes of each model chunk on `stage`.
std::vector<double> chunk_activation_bytes(const model::ModelSpec& model, const Layout& layout, int stage,
                                           const std::vector<int>& layers) {
  const int seq_length = layout.seq_length > 0 ? layout.seq_length : model.seq_length;
  const double per_layer = model::activation_bytes_per_layer(model, seq_length, layout.micro_batch, layout.tp,
                                                             layout.sequence_parallel, layout.recompute);
  const int virtual_count = layout.pp * layout.virtual_stages;
  std::vector<double> bytes(layout.virtual_stages, 0.0);
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk) {
    const int virtual_stage = chunk * layout.pp + stage;
    bytes[chunk] = layers[virtual_stage] * per_layer;
    if (virtual_stage == 0) {
      bytes[chunk] += model::embedding_activation_bytes(model, seq_length, layout.micro_batch, layout.tp,
                                                        layout.sequence_parallel);
    }
    if (virtual_stage == virtual_count - 1) {
      bytes[chunk] += model::output_activation_bytes(model, seq_length, layout.micro_batch, layout.tp,
                                                     layout.sequence_parallel);
    }
  }
  return bytes;
}

struct ActivationPeak {
  double bytes = 0;
  int microbatches = 0;  // distinct micro-batches with activations alive at the peak
};

// Replays the order of forward and backward passes of `stage` (GPipe: all forwards first; 1F1B: pp - stage -
// 1 warm-up forwards; interleaved: Megatron-LM's warm-up of 2 (pp - stage - 1) + (v - 1) pp chunk passes) and
// returns the peak of activation bytes alive between a chunk's forward and its backward.
ActivationPeak peak_activations(const Layout& layout, int stage, const std::vector<double>& chunk_bytes) {
  const int pp = layout.pp;
  const int chunks = layout.virtual_stages;
  const long long microbatches = std::max(1, layout.global_batch > 0 ? layout.num_microbatches() : 1);
  const long long passes = microbatches * chunks;
  long long warmup = 0;
  if (layout.schedule == Schedule::kGpipe) {
    warmup = passes;
  } else if (chunks == 1) {
    warmup = std::min<long long>(pp - stage - 1, passes);
  } else if (microbatches == pp) {
    warmup = passes;  // Megatron: all passes are warm-up when m == pp
  } else {
    warmup = std::min<long long>(2LL * (pp - stage - 1) + static_cast<long long>(chunks - 1) * pp, passes);
  }
  // Megatron's interleaved numbering: pass k runs chunk (k mod (pp v)) / pp forward, v - 1 - that backward,
  // on micro-batch (k / (pp v)) pp + k mod pp. With one chunk this is micro-batch k, chunk 0.
  const long long group = static_cast<long long>(pp) * chunks;
  auto forward_chunk = [&](long long pass) { return static_cast<int>((pass % group) / pp); };
  auto backward_chunk = [&](long long pass) { return chunks - 1 - forward_chunk(pass); };
  auto microbatch_of = [&](long long pass) { return chunks == 1 ? pass : (pass / group) * pp + pass % pp; };
  double alive_bytes = 0;
  std::map<long long, int> alive_chunks;  // micro-batch -> chunks whose activations are alive
  ActivationPeak peak;
  auto run_forward = [&](long long pass) {
    alive_bytes += chunk_bytes[forward_chunk(pass)];
    ++alive_chunks[microbatch_of(pass)];
    if (alive_bytes > peak.bytes) {
      peak.bytes = alive_bytes;
      peak.microbatches = static_cast<int>(alive_chunks.size());
    }
  };
  auto run_backward = [&](long long pass) {
    alive_bytes -= chunk_bytes[backward_chunk(pass)];
    auto found = alive_chunks.find(microbatch_of(pass));
    if (found != alive_chunks.end() && --found->second == 0) alive_chunks.erase(found);
  };
  for (long long pass = 0; pass < warmup; ++pass) run_forward(pass);
  for (long long pass = 0; pass < passes - warmup; ++pass) {
    run_forward(pass + warmup);
    run_backward(pass);
  }
  for (long long pass = std::max(0LL, passes - warmup); pass < passes; ++pass) run_backward(pass);
  if (peak.microbatches == 0) peak.microbatches = static_cast<int>(std::min<long long>(microbatches, 1));
  return peak;
}

}  // namespace

MemoryBreakdown memory_for_stage(const model::ModelSpec& model, const Layout& layout, int stage) {
  require_input(stage >= 0 && stage < layout.pp,
                "stage " + std::to_string(stage) + " is outside 0.." + std::to_string(layout.pp - 1));
  require_input(layout.tp >= 1 && layout.pp >= 1 && layout.dp >= 1 && layout.ep >= 1 &&
                    layout.virtual_stages >= 1 && layout.dp % layout.ep == 0,
                "memory needs a resolved layout (sizes >= 1, ep divides dp); got " + describe(layout));
  const std::vector<int> layers = virtual_stage_layers(layout, model.num_layers);
  const StageParameters params = stage_parameters(model, layout, stage, layers);
  const double dense_shards = layout.dp;
  const double expert_shards = static_cast<double>(layout.dp) / layout.ep;
  const bool shard_weights = layout.zero_stage >= 3;
  const bool shard_optimizer = layout.zero_stage >= 1;
  const double sharded_params = params.dense / (shard_weights ? dense_shards : 1.0) +
                                params.expert / (shard_weights ? expert_shards : 1.0);
  const double optimizer_params = params.dense / (shard_optimizer ? dense_shards : 1.0) +
                                  params.expert / (shard_optimizer ? expert_shards : 1.0);

  MemoryBreakdown memory;
  memory.stage = stage;
  memory.weights_bytes = kWeightBytesPerParam * sharded_params;
  if (shard_weights) {
    // FSDP gathers one layer's parameters before use (two with prefetch when the gather overlaps).
    const double gathered_layers = layout.overlap_param_gather ? 2.0 : 1.0;
    memory.weights_bytes += kWeightBytesPerParam * gathered_layers * params.largest_layer;
  }
  memory.gradients_bytes = kGradientBytesPerParam * sharded_params;
  memory.optimizer_bytes = kOptimizerBytesPerParam * optimizer_params;
  const ActivationPeak peak =
      peak_activations(layout, stage, chunk_activation_bytes(model, layout, stage, layers));
  memory.activations_bytes = peak.bytes;
  memory.inflight_microbatches = peak.microbatches;
  return memory;
}

MemoryBreakdown memory_per_gpu(const model::ModelSpec& model, const Layout& layout) {
  MemoryBreakdown most_loaded = memory_for_stage(model, layout, 0);
  for (int stage = 1; stage < layout.pp; ++stage) {
    MemoryBreakdown candidate = memory_for_stage(model, layout, stage);
    if (candidate.total_bytes() > most_loaded.total_bytes()) most_loaded = candidate;
  }
  return most_loaded;
}

}  // namespace calo::parallel
