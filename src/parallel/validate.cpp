#include "parallel/validate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/divisors.h"
#include "core/error.h"
#include "parallel/schedule.h"

namespace calo::parallel {
namespace {

/// A valid stage -> GPU order to show: the last two stages swapped ("0,1,3,2"), or "0" for one stage.
std::string example_order(int stages) {
  std::vector<int> order(std::max(1, stages));
  std::iota(order.begin(), order.end(), 0);
  if (stages >= 2) std::swap(order[stages - 2], order[stages - 1]);
  return fmt::format("{}", fmt::join(order, ","));
}

/// "try A or B" with the nearest valid values below and above `wanted` (one of them if only one exists).
std::string nearby(const std::vector<int>& valid_values, int wanted, const std::string& prefix = "") {
  // Flags, not 0 as "none": 0 is a valid value (zero stage 0).
  bool has_below = false, has_above = false;
  int below = 0;
  int above = 0;
  for (int value : valid_values) {
    if (value < wanted) below = value, has_below = true;
    if (value > wanted && !has_above) above = value, has_above = true;
  }
  if (has_below && has_above) return fmt::format("try {}{} or {}{}", prefix, below, prefix, above);
  if (has_below) return fmt::format("try {}{}", prefix, below);
  if (has_above) return fmt::format("try {}{}", prefix, above);
  return "no value fits";
}

void check_sizes(const Layout& layout) {
  struct SizeRule {
    const char* name;
    const char* meaning;
    int value;
  };
  for (const SizeRule& rule :
       {SizeRule{"tp", "tensor-parallel size", layout.tp}, SizeRule{"cp", "context-parallel size", layout.cp},
        SizeRule{"pp", "pipeline-parallel size", layout.pp}, SizeRule{"dp", "data-parallel size", layout.dp},
        SizeRule{"ep", "expert-parallel size", layout.ep},
        SizeRule{"micro-batch", "micro-batch size", layout.micro_batch},
        SizeRule{"vpp", "number of model chunks per stage", layout.virtual_stages}}) {
    require_input(rule.value >= 1, fmt::format("{}={} is not a valid {}: sizes must be >= 1; try {}=1",
                                               rule.name, rule.value, rule.meaning, rule.name));
  }
  const int64_t world = int64_t{layout.tp} * layout.cp * layout.pp * layout.dp;
  require_input(world <= kMaxWorldSize,
                fmt::format("tp × cp × pp × dp = {} GPUs is beyond the {} one layout may have (the largest "
                            "clusters have ~10^5); give fewer --gpus",
                            world, kMaxWorldSize));
  require_input(layout.global_batch >= 0,
                fmt::format("global batch {} is negative; give a positive number of sequences, or 0 for "
                            "micro-batch × dp = {}",
                            layout.global_batch, layout.micro_batch * layout.dp));
  require_input(layout.seq_length >= 0,
                fmt::format("sequence length {} is negative; give a positive number of "
                            "tokens, or 0 for the model's default",
                            layout.seq_length));
  require_input(layout.zero_stage >= 0 && layout.zero_stage <= 3,
                fmt::format("zero stage {} is not supported: use 0 (none), 1 (sharded optimizer state), 2 "
                            "(sharded optimizer state and gradients) or 3 (fully sharded, FSDP); {}",
                            layout.zero_stage, nearby({0, 1, 2, 3}, layout.zero_stage)));
}

void check_sharding(const Layout& layout) {
  require_input(layout.fsdp_shard_size >= 0,
                fmt::format("--fsdp-shard-group {} is negative; give a divisor of dp={}, or 0 for dp (full "
                            "sharding)",
                            layout.fsdp_shard_size, layout.dp));
  if (layout.fsdp_shard_size > 0) {
    require_input(
        layout.zero_stage == 3,
        fmt::format("hybrid sharding (--fsdp-shard-group {}) shards parameters, which needs --zero 3 "
                    "(zero stage is {}); add --zero 3 or drop --fsdp-shard-group",
                    layout.fsdp_shard_size, layout.zero_stage));
    require_input(
        layout.dp % layout.fsdp_shard_size == 0,
        fmt::format("--fsdp-shard-group {} does not divide dp={} (the shard groups tile the "
                    "data-parallel ranks); {}",
                    layout.fsdp_shard_size, layout.dp,
                    nearby(core::divisors(layout.dp), layout.fsdp_shard_size, "--fsdp-shard-group ")));
  }
  require_input(
      layout.reshard_after_forward || layout.zero_stage == 3,
      fmt::format("--fsdp-reshard-after-forward off keeps gathered parameters, which needs --zero 3 "
                  "(zero stage is {}); add --zero 3 or drop the flag",
                  layout.zero_stage));
}

// torchtitan's accounting covers what torchtitan runs in mixed precision: FSDP2 (--zero 3) over dp*cp > 1
// ranks, or DDP / one GPU (--zero 0) without tp, pp or cp. It has no ZeRO-1/2, and trains TP or PP without
// FSDP in fp32 ("Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled").
void check_trainer(const Layout& layout) {
  if (!is_torchtitan(layout.trainer)) return;
  require_input(layout.zero_stage == 0 || layout.zero_stage == 3,
                fmt::format("--trainer torchtitan shards with FSDP2 (--zero 3) or replicates (--zero 0); "
                            "torchtitan has no ZeRO stage {}: use --zero 3 or --zero 0",
                            layout.zero_stage));
  if (layout.zero_stage == 3) {
    require_input(layout.dp * layout.cp > 1,
                  "--trainer torchtitan --zero 3 shards over dp*cp ranks, which is 1 here; raise --dp or "
                  "--cp, or use --zero 0");
  } else {
    require_input(layout.tp == 1 && layout.pp == 1 && layout.cp == 1,
                  fmt::format("--trainer torchtitan without FSDP2 (--zero 0) trains {} in fp32 (torchtitan "
                              "keeps mixed precision for TP, PP and CP only beside FSDP2), which calo does "
                              "not model; add --zero 3 with dp*cp > 1",
                              describe(layout)));
  }
}

// --fp8-all-gather is torchao's float8 all-gather under FSDP2: the tensorwise recipe's weights, gathered over
// a shard group of more than one rank (torchao refuses it for rowwise scaling; Transformer Engine's delayed
// scaling has its own FP8 weights, not this option).
void check_fp8_all_gather(const Layout& layout) {
  if (!layout.fp8_all_gather) return;
  require_input(
      layout.precision == Precision::kFp8Tensorwise,
      fmt::format("--fp8-all-gather gathers the weights of torchao's tensorwise FP8 linears; precision "
                  "{} {}: add --precision fp8 or drop --fp8-all-gather",
                  to_string(layout.precision),
                  layout.fp8() ? "is not that recipe (torchao gathers tensorwise-scaled weights only)"
                               : "has no FP8 weights"));
  const int shard_ranks = layout.hybrid_sharding() ? layout.shard_size() : layout.grad_reduce_size();
  require_input(layout.zero_stage == 3 && shard_ranks > 1,
                fmt::format("--fp8-all-gather changes FSDP's parameter all-gather, which needs --zero 3 over "
                            "more than one rank (zero stage {}, shard group {}): add --zero 3 with dp*cp > 1 "
                            "or drop --fp8-all-gather",
                            layout.zero_stage, shard_ranks));
}

void check_tensor_parallel(const model::ModelSpec& model, const Layout& layout) {
  // A tp size is valid when it divides every dimension Megatron-LM splits over tp: attention heads, query
  // groups (kv heads; Megatron requires num_query_groups % tp == 0, no kv replication) and the FFN width.
  int common = std::gcd(std::gcd(model.num_attention_heads, model.num_kv_heads), model.ffn_hidden_size);
  std::vector<int> valid_tp = core::divisors(common);
  require_input(model.num_attention_heads % layout.tp == 0,
                fmt::format("tp={} does not divide {} attention heads; {}", layout.tp,
                            model.num_attention_heads, nearby(valid_tp, layout.tp)));
  require_input(model.num_kv_heads % layout.tp == 0,
                fmt::format("tp={} does not divide {} key/value heads (query groups are split over tp, as in "
                            "Megatron-LM); {}",
                            layout.tp, model.num_kv_heads, nearby(valid_tp, layout.tp)));
  require_input(
      model.ffn_hidden_size % layout.tp == 0,
      fmt::format("tp={} does not divide ffn hidden size {}{}; {}", layout.tp, model.ffn_hidden_size,
                  model.is_moe() ? " (per expert)" : "", nearby(valid_tp, layout.tp)));
}

void check_sequence(const Layout& layout) {
  require_input(
      layout.seq_length > 0,
      "sequence length must be positive: the model gives none; set it with --seq (e.g. --seq 2048)");
  if (layout.cp > 1) {
    // The causal load-balanced ring (Megatron-LM / TransformerEngine) cuts each sequence into 2*cp chunks and
    // gives rank i chunks i and 2cp-1-i, so cp must divide the sequence and so must 2*cp.
    const int chunks = 2 * layout.cp;
    std::vector<int> valid_cp;
    for (int candidate = 1; 2 * candidate <= layout.seq_length; ++candidate)
      if (layout.seq_length % (2 * candidate) == 0) valid_cp.push_back(candidate);
    require_input(layout.seq_length % chunks == 0,
                  fmt::format("cp={} needs the sequence length {} to be a multiple of 2*cp = {} (each rank "
                              "holds 2 of the 2*cp chunks of the causal load-balanced ring); {}, or {}",
                              layout.cp, layout.seq_length, chunks, nearby(valid_cp, layout.cp, "cp="),
                              core::nearby_multiples(layout.seq_length, chunks, "--seq ")));
  }
  if (layout.sequence_parallel) {
    const int local = layout.seq_length / layout.cp;
    require_input(
        local % layout.tp == 0,
        layout.cp > 1
            ? fmt::format("sequence parallel splits each rank's {} tokens (sequence {} / cp={}) over tp={}, "
                          "which does not divide them; {} (sequence length) or --no-sequence-parallel",
                          local, layout.seq_length, layout.cp, layout.tp,
                          core::nearby_multiples(layout.seq_length, layout.tp * 2 * layout.cp))
            : fmt::format("sequence parallel splits each sequence of {} tokens over tp={}, which does not "
                          "divide it; {} (sequence length) or --no-sequence-parallel",
                          layout.seq_length, layout.tp,
                          core::nearby_multiples(layout.seq_length, layout.tp)));
  }
}

void check_context_parallel(const Layout& layout) {
  if (layout.cp == 1) return;
  require_input(is_fused(layout.attention),
                fmt::format("cp={} needs the fused attention core (context parallelism runs flash-attention "
                            "chunks against each K/V block); use --attention fused or --cp 1",
                            layout.cp));
  require_input(
      !layout.hybrid_sharding(),
      fmt::format("cp={} with hybrid sharding (--fsdp-shard-group {}) is not modelled (parameters "
                  "would shard over part of the dp-cp group); drop --fsdp-shard-group or use --cp 1",
                  layout.cp, layout.fsdp_shard_size));
}

/// Refuses a layout whose pp × vpp splits the layers neither evenly nor as Megatron-LM's split with the
/// embedding and the loss counted, naming a nearby pp or vpp that does (one whose edge stages keep a layer).
[[noreturn]] void refuse_partition(const model::ModelSpec& model, const Layout& layout) {
  const int layers = model.num_layers;
  const int chunks = layout.virtual_stages;
  const int virtual_stage_count = layout.pp * chunks;
  const auto splits = [layers](int stages) {
    return layers % stages == 0 || ((layers + 2) % stages == 0 && (layers + 2) / stages >= 2);
  };
  std::string suggestion;
  if (chunks > 1) {
    std::vector<int> valid_chunks;
    for (int candidate = 2; candidate * layout.pp <= layers + 2; ++candidate) {
      if (splits(candidate * layout.pp)) valid_chunks.push_back(candidate);
    }
    if (!valid_chunks.empty()) suggestion = nearby(valid_chunks, chunks, "vpp=");
  }
  if (suggestion.empty()) {
    std::vector<int> valid_pp;
    for (int candidate = 1; candidate <= layers + 2; ++candidate) {
      if (splits(candidate)) valid_pp.push_back(candidate);
    }
    suggestion = nearby(valid_pp, layout.pp, "pp=");
  }
  require_input(virtual_stage_count <= layers,
                fmt::format("pp={} × vpp={} = {} stages exceed the {} layers of {}; {}", layout.pp, chunks,
                            virtual_stage_count, layers, model.name, suggestion));
  throw InputError(
      fmt::format("pp={} × vpp={} = {} stages divide neither the {} layers of {} nor {} (the layers with the "
                  "embedding and "
                  "the loss counted as one each); {}, or give an explicit --layers-per-stage",
                  layout.pp, chunks, virtual_stage_count, layers, model.name, layers + 2, suggestion));
}

/// The chunked schedules' names, "a or b": what vpp >= 2 needs.
std::string chunked_schedule_names() {
  std::string text;
  for (const ScheduleEntry& entry : kSchedules) {
    if (!entry.chunked) continue;
    if (!text.empty()) text += " or ";
    text += entry.name;
  }
  return text;
}

void check_pipeline(const model::ModelSpec& model, Layout& layout) {
  const int layers = model.num_layers;
  const int chunks = layout.virtual_stages;
  const int virtual_stage_count = layout.pp * chunks;
  const ScheduleEntry& schedule = schedule_entry(layout.schedule);
  if (schedule.chunked) {
    require_input(layout.pp > 1, fmt::format("{} schedule needs pipeline parallelism; try pp=2 or more, or "
                                             "--schedule 1f1b",
                                             schedule.name));
    require_input(chunks > 1, fmt::format("{} schedule needs vpp >= 2 model chunks per stage (vpp={}); "
                                          "try vpp=2, or --schedule 1f1b",
                                          schedule.name, chunks));
  } else {
    require_input(chunks == 1, fmt::format("vpp={} model chunks per stage need --schedule {}; or use "
                                           "vpp=1 with --schedule {}",
                                           chunks, chunked_schedule_names(), schedule.name));
  }
  if (!layout.layers_per_stage.empty()) {
    require_input(static_cast<int>(layout.layers_per_stage.size()) == virtual_stage_count,
                  fmt::format("layers per stage lists {} entries but pp={} × vpp={} needs {}",
                              layout.layers_per_stage.size(), layout.pp, chunks, virtual_stage_count));
    int total = 0;
    for (size_t position = 0; position < layout.layers_per_stage.size(); ++position) {
      int count = layout.layers_per_stage[position];
      const bool edge = position == 0 || position + 1 == layout.layers_per_stage.size();
      require_input(
          count >= 1 || (count == 0 && edge),
          fmt::format("layers per stage entry {} is {}: every (virtual) stage but the first and the last "
                      "needs at least one layer (the first may hold the embedding alone and the last "
                      "the output alone, as Llama 3's pipeline does)",
                      position, count));
      total += count;
    }
    require_input(total == layers, fmt::format("layers per stage sum to {} but {} has {} layers; change the "
                                               "entries by {}",
                                               total, model.name, layers, layers - total));
    return;
  }
  if (layers % virtual_stage_count != 0) {
    // Megatron-LM's (and Llama 3's) split, counting the embedding and the loss as a layer each.
    std::vector<int> edge_accounted = edge_accounted_partition(layers, virtual_stage_count);
    if (edge_accounted.empty()) refuse_partition(model, layout);
    layout.layers_per_stage = std::move(edge_accounted);
    return;
  }
  layout.layers_per_stage.assign(virtual_stage_count, layers / virtual_stage_count);
}

/// stage_gpus is a permutation of the pp stages; the identity is Megatron's own order, kept as empty.
void check_stage_gpus(Layout& layout) {
  if (layout.stage_gpus.empty()) return;
  const int stages = static_cast<int>(layout.stage_gpus.size());
  require_input(
      stages == layout.pp,
      fmt::format("the stage -> GPU order lists {} stages but pp={}; give one pipeline position per "
                  "stage, e.g. --stage-gpus {}",
                  stages, layout.pp, example_order(layout.pp)));
  std::vector<bool> seen(stages, false);
  for (int stage = 0; stage < stages; ++stage) {
    const int position = layout.stage_gpus[stage];
    require_input(
        position >= 0 && position < stages && !seen[position],
        fmt::format("the stage -> GPU order {} is not an order of the {} pipeline positions 0..{}: "
                    "each must appear once, e.g. --stage-gpus {}",
                    fmt::join(layout.stage_gpus, ","), stages, stages - 1, example_order(layout.pp)));
    seen[position] = true;
  }
  // A permutation in order is the identity: Megatron's own order.
  if (std::is_sorted(layout.stage_gpus.begin(), layout.stage_gpus.end())) layout.stage_gpus.clear();
}

void check_experts(const model::ModelSpec& model, const Layout& layout) {
  require_input(
      !model.is_moe() || layout.recompute != Recompute::kOp,
      fmt::format("--recompute op (torchtitan's op-level checkpointing) is modelled for dense models; "
                  "{} has experts, whose grouped matmuls its policy does not save: use --recompute "
                  "selective or full",
                  model.name));
  if (!model.is_moe()) {
    require_input(layout.ep == 1,
                  fmt::format("ep={} needs a mixture-of-experts model, but {} is dense; use ep=1", layout.ep,
                              model.name));
    return;
  }
  const int replicas = layout.dp * layout.cp;
  std::vector<int> valid_ep = core::divisors(std::gcd(replicas, model.num_experts));
  require_input(
      layout.ep_divides_replicas(),
      fmt::format("ep={} does not divide dp x cp = {} x {} (expert parallelism is carved out of the "
                  "data- and context-parallel ranks, as in Megatron-Core); {}",
                  layout.ep, layout.dp, layout.cp, nearby(valid_ep, layout.ep, "ep=")));
  require_input(model.num_experts % layout.ep == 0,
                fmt::format("ep={} does not divide the {} experts of {}; {}", layout.ep, model.num_experts,
                            model.name, nearby(valid_ep, layout.ep, "ep=")));
}

void check_batch(Layout& layout) {
  const int sequences_per_step = layout.micro_batch * layout.dp;
  if (layout.global_batch == 0) layout.global_batch = sequences_per_step;
  require_input(layout.global_batch % sequences_per_step == 0,
                fmt::format("global batch {} is not a multiple of micro-batch × dp = {} × {} = {}; {}",
                            layout.global_batch, layout.micro_batch, layout.dp, sequences_per_step,
                            core::nearby_multiples(layout.global_batch, sequences_per_step)));
  require_input(
      layout.num_microbatches() <= kMaxMicrobatches,
      fmt::format("global batch {} / (micro-batch × dp = {}) is {} micro-batches per step, beyond the {} "
                  "one step may have (each is a run of ops in the graph); raise --mbs or lower --gbs",
                  layout.global_batch, sequences_per_step, layout.num_microbatches(), kMaxMicrobatches));
}

void check_overlap(const Layout& layout) {
  require_input(!layout.overlap_param_gather || layout.zero_stage >= 1,
                "overlapping the parameter all-gather needs sharded state: use --zero 1, 2 or 3 (fsdp), or "
                "drop --overlap-param");
}

}  // namespace

Layout resolve_layout(const model::ModelSpec& model, Layout layout, bool sequence_parallel_explicit) {
  check_sizes(layout);
  check_sharding(layout);
  check_trainer(layout);
  check_fp8_all_gather(layout);
  check_tensor_parallel(model, layout);
  // Sequence parallel only splits activations over tp; with tp = 1 there is nothing to split, so it is turned
  // off (Megatron-LM does the same). Without an explicit choice it follows tp > 1.
  if (!sequence_parallel_explicit) layout.sequence_parallel = layout.tp > 1;
  if (layout.tp == 1) layout.sequence_parallel = false;
  if (layout.seq_length == 0) layout.seq_length = model.seq_length;
  check_sequence(layout);
  check_context_parallel(layout);
  check_pipeline(model, layout);
  check_stage_gpus(layout);
  check_experts(model, layout);
  check_batch(layout);
  // The schedule's rules (broken_schedule_rule) after the batch's; its micro-batch rule before the overlap's.
  const ScheduleRule broken = broken_schedule_rule(model, layout);
  if (broken == ScheduleRule::kMicrobatchMultiple) refuse_schedule_rule(model, layout, broken);
  check_overlap(layout);
  if (broken != ScheduleRule::kNone) refuse_schedule_rule(model, layout, broken);
  return layout;
}

}  // namespace calo::parallel
