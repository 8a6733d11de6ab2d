// Pipeline schedules and per-stage layer partitions.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "parallel/axes.h"
#include "parallel/layout.h"

namespace calo::parallel {

/// Forward or backward pass of one micro-batch through one model chunk on one stage. A schedule that splits
/// the backward (zero bubble) runs kBackward as its input-gradient half B and kWeightGrad as the
/// weight-gradient half W, which it may defer.
enum class PassKind { kForward, kBackward, kWeightGrad };

/// One entry of a stage's pipeline schedule, in execution order.
struct PipelineSlot {
  PassKind pass;   ///< forward or backward
  int microbatch;  ///< 0 .. num_microbatches-1
  int chunk;       ///< model chunk on this stage (0 unless interleaved)
};

/// What a slot-order function reads: the stages, the stage asked about, micro-batches per step and model
/// chunks per stage (1 unless the schedule is chunked).
struct PipelineShape {
  int pp;            ///< pipeline stages
  int stage;         ///< the stage whose slots are asked for, 0 .. pp-1
  int microbatches;  ///< micro-batches per step
  int chunks;        ///< model chunks per stage
};

/// How `calo plan` searches a schedule (its plan axis).
enum class PlanAxis {
  kEveryPp,      ///< at every pipeline size, pp 1 included (enumerated first)
  kPipelined,    ///< at pp > 1 only, one chunk per stage
  kChunked,      ///< at pp > 1 with every vpp >= 2 (or its fixed_chunks alone) whose chunks split the layers
  kNotSearched,  ///< not offered: the planner's step-time bound does not hold for it
};

/// One pipeline schedule: its name (--schedule's word, the campaign key's word, to_string, a stored run's
/// config), its help, its plan axis, its rules, and its slot-order and warm-up functions. Adding a schedule
/// is an enumerator of `Schedule`, an entry here and its slot-order function (docs/ARCHITECTURE.md "Adding a
/// schedule").
struct ScheduleEntry {
  Schedule schedule;  ///< the enumerator; entries run in declaration order
  const char* name;   ///< the schedule's one name
  const char* help;   ///< what --help says of it after its name
  PlanAxis plan;      ///< how the planner searches it
  bool chunked;       ///< runs --vpp model chunks per stage: needs pp > 1, vpp >= 2, m a multiple of pp
  /// The chunks per stage a chunked schedule runs when it runs only that many (a V: 2; --vpp must give it,
  /// `calo plan` searches it alone); 0: any vpp >= 2.
  int fixed_chunks;
  /// Whether a steady-state forward's exchange pairs with the next backward's (Megatron's interleaved
  /// send_forward_backward_recv batch).
  bool pairs_exchanges;
  /// Whether the backward is split into B (kBackward: input gradients) and W (kWeightGrad: weight
  /// gradients), the W passes placed by the slot order (zero-bubble schedules).
  bool splits_backward;
  /// Whether the chunks run the stages in a V (zero bubble's ZB-V): chunk 0 down stages 0..pp-1, chunk 1 back
  /// up pp-1..0, so stage 0 holds the first and the last virtual stage; else chunk c is stage s's virtual
  /// stage c * pp + s (Megatron's interleaved assignment).
  bool v_shape;
  std::vector<PipelineSlot> (*slots)(const PipelineShape& shape);  ///< one stage's slots in execution order
  /// The forward slots before the steady state's forward/backward pairs.
  int (*warmup)(const PipelineShape& shape);
};

/// GPipe: every forward, then every backward, both in micro-batch order (as torch.distributed.pipelining).
std::vector<PipelineSlot> gpipe_slots(const PipelineShape& shape);
/// 1F1B (PipeDream-flush): pp - stage - 1 warm-up forwards, then one forward and one backward alternately.
std::vector<PipelineSlot> one_f_one_b_slots(const PipelineShape& shape);
/// Megatron's interleaved 1F1B over `chunks` model chunks per stage, micro-batch groups of pp per chunk.
std::vector<PipelineSlot> interleaved_slots(const PipelineShape& shape);
/// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): 1F1B's F and B order with the backward split;
/// stage s defers the W of its first min(s, steady) steady-state backwards into the cool-down, where each W
/// fills the wait for the next B: the bubble shrinks to (p - 1)(T_F + T_B - T_W), activations held until W.
std::vector<PipelineSlot> zb_h1_slots(const PipelineShape& shape);
/// ZB-V (Qi et al. 2024, section 6): two chunks per stage in a V, the backward split; stage s runs 2(pp - s)
/// - 1 chunk-0 forwards, s pairs of chunk-1 and chunk-0 forwards, then F B W of chunk 1 and chunk 0
/// alternately, its weight gradients filling the cool-down (laid out for 2pp - 1 micro-batches, the later
/// ones dropped when fewer run, as torch.distributed.pipelining's ScheduleZBVZeroBubble does).
std::vector<PipelineSlot> zb_v_slots(const PipelineShape& shape);
/// The forwards before a schedule's first backward (its warm-up, read from its slot order).
int zb_v_warmup(const PipelineShape& shape);
/// GPipe's warm-up: all m forwards.
int gpipe_warmup(const PipelineShape& shape);
/// 1F1B's warm-up: min(pp - stage - 1, m).
int one_f_one_b_warmup(const PipelineShape& shape);
/// Interleaved warm-up: (pp - stage - 1) * 2 + (v - 1) * pp, or all m * v when m == pp.
int interleaved_warmup(const PipelineShape& shape);

/// The schedule table, one entry per `Schedule` in declaration order.
inline constexpr std::array<ScheduleEntry, 5> kSchedules{{
    {Schedule::kGpipe, "gpipe", "all forwards, then all backwards", PlanAxis::kPipelined, false, 0, false,
     false, false, gpipe_slots, gpipe_warmup},
    {Schedule::k1F1B, "1f1b", "one forward, one backward after pp - stage - 1 warm-up forwards",
     PlanAxis::kEveryPp, false, 0, false, false, false, one_f_one_b_slots, one_f_one_b_warmup},
    {Schedule::kInterleaved, "interleaved", "Megatron's interleaved 1F1B over --vpp model chunks per stage",
     PlanAxis::kChunked, true, 0, true, false, false, interleaved_slots, interleaved_warmup},
    {Schedule::kZbH1, "zb-h1",
     "zero bubble: 1F1B with the backward split into input and weight gradients, weight gradients deferred "
     "into the bubble",
     PlanAxis::kPipelined, false, 0, false, true, false, zb_h1_slots, one_f_one_b_warmup},
    {Schedule::kZbV, "zb-v",
     "zero bubble V: --vpp 2 chunks per stage, chunk 0 down the stages and chunk 1 back up (the first and "
     "last "
     "layers on stage 0), the backward split, weight gradients filling the bubble",
     PlanAxis::kChunked, true, 2, false, true, true, zb_v_slots, zb_v_warmup},
}};

/// The names of `entries` in their order (the schedule axis's names).
template <std::size_t N>
constexpr std::array<const char*, N> schedule_names(const std::array<ScheduleEntry, N>& entries) {
  std::array<const char*, N> names{};
  for (std::size_t index = 0; index < N; ++index) names[index] = entries[index].name;
  return names;
}

/// Whether every entry sits at its enumerator's index (the axis and `schedule_entry` index by it).
template <std::size_t N>
constexpr bool in_declaration_order(const std::array<ScheduleEntry, N>& entries) {
  for (std::size_t index = 0; index < N; ++index) {
    if (static_cast<std::size_t>(entries[index].schedule) != index) return false;
  }
  return true;
}
static_assert(in_declaration_order(kSchedules), "kSchedules lists the schedules in declaration order");

/// The pipeline schedule axis: --schedule, campaign key schedule, names from kSchedules.
inline constexpr Axis<Schedule, kSchedules.size()> kScheduleAxis{"--schedule", "schedule", "a schedule",
                                                                 schedule_names(kSchedules)};

/// The table entry of `schedule`.
const ScheduleEntry& schedule_entry(Schedule schedule);

/// "NAME (HELP), ..." for every schedule: --schedule's help.
std::string schedule_help();

/// Model chunks per stage the layout's schedule runs: max(1, vpp) for a chunked schedule, else 1.
int chunks_per_stage(const Layout& layout);

/// Virtual stage of model chunk `chunk` on pipeline stage `stage`: chunk * pp + stage (Megatron's
/// assignment), or in a V (`v_shape`) chunk * pp + (pp - 1 - stage) for an odd chunk.
int virtual_stage(const Layout& layout, int stage, int chunk);

/// The pipeline stage that runs virtual stage `virtual_index` (the inverse of `virtual_stage`).
int stage_of_virtual(const Layout& layout, int virtual_index);

/// The model chunk, on its stage, of virtual stage `virtual_index`.
int chunk_of_virtual(const Layout& layout, int virtual_index);

/// The ordered forward/backward passes that pipeline stage `stage` runs in one iteration under the layout's
/// schedule (its entry's slot-order function).
std::vector<PipelineSlot> stage_schedule(const Layout& layout, int stage);

/// Warm-up forward slots of `stage` (before the steady state's forward/backward pairs) under the layout's
/// schedule (its entry's warm-up function).
int warmup_slots(const Layout& layout, int stage);

/// A rule a layout's pipeline schedule sets on the rest of the layout (read from its `ScheduleEntry`), in the
/// order resolve_layout checks them.
enum class ScheduleRule {
  kNone,                ///< the layout keeps every rule of its schedule
  kMicrobatchMultiple,  ///< a chunked schedule: micro-batches per step a multiple of pp
  kUnshardedGradients,  ///< a split backward: ZeRO 0 or 1 (ZeRO-2/3 reduce-scatter before the deferred W)
  kReductionAfterW,     ///< a split backward: no gradient reduction overlapped with the backward
  kFixedChunks,         ///< a schedule of fixed_chunks (a V: 2): exactly that vpp
  kUntiedEmbeddings,    ///< a V: a model whose output layer is not tied to its embedding
};

/// The first rule of its schedule that `layout` breaks on `model` (kNone: none), the one home of these rules
/// (schedule.cpp, beside the slot orders): resolve_layout refuses a layout that breaks one, with
/// refuse_schedule_rule's message, and `calo plan`'s enumeration skips such a layout without resolving it.
/// Reads the sizes, vpp, micro-batch, global batch (as given: a global batch of 0 breaks nothing), ZeRO stage
/// and gradient-reduction overlap; resolve_layout fills none of them before it asks.
ScheduleRule broken_schedule_rule(const model::ModelSpec& model, const Layout& layout);

/// Throws the InputError of `rule`, a rule of `layout`'s schedule it breaks on `model`
/// (broken_schedule_rule); std::logic_error for kNone.
[[noreturn]] void refuse_schedule_rule(const model::ModelSpec& model, const Layout& layout,
                                       ScheduleRule rule);

/// The chunks per stage `calo plan` searches a kChunked schedule at, [first, last]: its fixed_chunks alone,
/// or 2 .. num_layers + 2 (the layout space keeps those whose chunks split the layers).
std::pair<int, int> searched_chunks(const ScheduleEntry& entry, int num_layers);

/// The pass of a slot order that ends a micro-batch's activations on its chunk: kBackward, or kWeightGrad
/// where the backward is split (B needs them, and W the layers' inputs). The lifetime rule the memory model
/// and peak_inflight_passes share; the ledger and the checker read the built graph's ops instead.
PassKind activations_freed_by(const Layout& layout);

/// What the planner's step-time bound (plan/step_bound.cpp) takes from a schedule.
struct BoundShape {
  /// Micro-batches at which the slot order repeats whole: pp, or 2 pp for a V (it fills from 2pp - 1 on,
  /// fewer run its pattern with parts left out); the bound's probes run once and twice that many.
  int pattern_microbatches = 1;
  /// Whether the weight-gradient GEMMs lie on the chain of passes from stage to stage: false where the
  /// backward is split (W waits for no neighbour and none waits for it), so the drain follows B alone.
  bool weight_grads_on_chain = true;
};
/// The bound's view of the layout's schedule (read from its entry).
BoundShape bound_shape(const Layout& layout);

/// Layer ranges per virtual stage: result[v] = {first_layer, layer_count} for virtual stage v, where virtual
/// stage v = chunk * pp + stage (Megatron's interleaved assignment). Uses layers_per_stage if given, else
/// uniform.
struct LayerRange {
  int first_layer;  ///< global index of the first layer
  int count;        ///< number of layers
};
/// See LayerRange; size pp * virtual_stages.
std::vector<LayerRange> layer_partition(const Layout& layout, int num_layers);

/// Megatron-LM's split that counts the embedding and the loss as one layer each
/// (--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split; Llama 3's pipeline, whose
/// first chunk holds the embedding alone at one layer per chunk): with k = (num_layers + 2) /
/// virtual_stage_count, the first and last virtual stages get k - 1 layers and the rest k. Empty unless
/// virtual_stage_count >= 2 divides num_layers + 2 with k >= 1.
std::vector<int> edge_accounted_partition(int num_layers, int virtual_stage_count);

/// True when `layers_per_stage` is edge_accounted_partition of its own total and size.
bool is_edge_accounted(const std::vector<int>& layers_per_stage);

/// Closed-form bubble fraction of a uniform pipeline: (p-1)/(m+p-1) for GPipe/1F1B, (p-1)/(v*m+p-1)
/// interleaved, (p-1)/(3*v*m+p-1) for a split backward (ZB-H1 v = 1, ZB-V v = 2 from m >= 2p).
double bubble_fraction(const Layout& layout);

/// Peak number of forward passes (micro-batch × chunk) on `stage` whose backward has not run yet: the
/// activation sets alive at once (1F1B stage 0: min(pp, m); GPipe: m; interleaved: counted in chunks).
int peak_inflight_passes(const Layout& layout, int stage);

/// Outcome of running every stage's schedule together, each pass waiting for its pipeline dependencies:
/// forward of virtual stage v needs forward of v-1 for the same micro-batch; backward of v needs backward of
/// v+1 (the last virtual stage: its own forward). Communication takes no time.
struct PipelineRun {
  bool completed = false;      ///< false: some stage waits forever (the schedules deadlock)
  double makespan = 0;         ///< time at which the last pass ends (unit: that of the given pass times)
  double bubble_fraction = 0;  ///< idle share of all stages: 1 - busy time / (pp * makespan)
  int passes_run = 0;          ///< passes executed over all stages
  std::string stuck;           ///< when not completed: the first stage that waits and the pass it waits on
  /// When each stage's slots start, per stage in slot order (negative: never ran).
  std::vector<std::vector<double>> slot_start;
  /// When the forward (B: the input-gradient backward) of each micro-batch ends, per virtual stage
  /// (negative: never ran).
  std::vector<std::vector<double>> forward_end, backward_end;
};

/// Executes all stages' schedules with a forward pass of one chunk taking `forward_time` and a backward pass
/// `backward_time` (any time unit); detects deadlock and measures the bubble.
PipelineRun run_pipeline(const Layout& layout, double forward_time, double backward_time);

}  // namespace calo::parallel
