#include "parallel/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <numeric>
#include <stdexcept>

#include "core/divisors.h"
#include "core/error.h"

namespace calo::parallel {
namespace {

/// Micro-batches of a resolved layout; throws std::logic_error for an unresolved one (a programming error).
int microbatches_of(const Layout& layout) {
  if (layout.global_batch <= 0 || layout.micro_batch <= 0 || layout.dp <= 0) {
    throw std::logic_error("pipeline schedule needs a resolved layout (call resolve_layout first)");
  }
  return layout.num_microbatches();
}

void check_stage(const Layout& layout, int stage) {
  if (stage < 0 || stage >= layout.pp) {
    throw std::out_of_range(fmt::format("pipeline stage {} outside 0..{}", stage, layout.pp - 1));
  }
}

}  // namespace

std::vector<PipelineSlot> gpipe_slots(const PipelineShape& shape) {
  std::vector<PipelineSlot> slots;
  slots.reserve(2 * shape.microbatches);
  for (int mb = 0; mb < shape.microbatches; ++mb) slots.push_back({PassKind::kForward, mb, 0});
  for (int mb = 0; mb < shape.microbatches; ++mb) slots.push_back({PassKind::kBackward, mb, 0});
  return slots;
}

int gpipe_warmup(const PipelineShape& shape) {
  return shape.microbatches;
}

// Megatron's forward_backward_pipelining_without_interleaving: the warm-up forwards, then alternate one
// forward and one backward, then the remaining backwards.
std::vector<PipelineSlot> one_f_one_b_slots(const PipelineShape& shape) {
  const int microbatches = shape.microbatches;
  const int warmup = one_f_one_b_warmup(shape);
  const int steady = microbatches - warmup;
  std::vector<PipelineSlot> slots;
  slots.reserve(2 * microbatches);
  for (int mb = 0; mb < warmup; ++mb) slots.push_back({PassKind::kForward, mb, 0});
  for (int step = 0; step < steady; ++step) {
    slots.push_back({PassKind::kForward, warmup + step, 0});
    slots.push_back({PassKind::kBackward, step, 0});
  }
  for (int mb = steady; mb < microbatches; ++mb) slots.push_back({PassKind::kBackward, mb, 0});
  return slots;
}

int one_f_one_b_warmup(const PipelineShape& shape) {
  return std::min(shape.pp - shape.stage - 1, shape.microbatches);
}

std::vector<PipelineSlot> zb_h1_slots(const PipelineShape& shape) {
  const int steady = shape.microbatches - one_f_one_b_warmup(shape);
  const int deferred = std::min(shape.stage, steady);  // W passes of the first steady backwards, run later
  std::vector<PipelineSlot> slots;
  slots.reserve(3 * shape.microbatches);
  std::deque<int> owed;  // W passes held back, oldest first
  for (const PipelineSlot& slot : one_f_one_b_slots(shape)) {
    slots.push_back(slot);
    if (slot.pass != PassKind::kBackward) continue;
    if (slot.microbatch < deferred) {  // a steady backward whose W waits for the cool-down
      owed.push_back(slot.microbatch);
      continue;
    }
    if (slot.microbatch < steady) {  // the other steady backwards: W at once
      slots.push_back({PassKind::kWeightGrad, slot.microbatch, 0});
      continue;
    }
    owed.push_back(slot.microbatch);  // the cool-down: each B followed by the oldest W still owed
    slots.push_back({PassKind::kWeightGrad, owed.front(), 0});
    owed.pop_front();
  }
  for (int microbatch : owed) slots.push_back({PassKind::kWeightGrad, microbatch, 0});
  return slots;
}

namespace {

/// One stage's ZB-V passes as they are appended, each chunk's forwards, input gradients (B) and weight
/// gradients (W) counted in micro-batch order.
struct VShapeSlots {
  std::vector<PipelineSlot> slots;
  std::array<int, 2> forwards{};
  std::array<int, 2> backwards{};
  std::array<int, 2> weight_grads{};
  void forward(int chunk) { slots.push_back({PassKind::kForward, forwards[chunk]++, chunk}); }
  void backward(int chunk) { slots.push_back({PassKind::kBackward, backwards[chunk]++, chunk}); }
  void weight_grad(int chunk) { slots.push_back({PassKind::kWeightGrad, weight_grads[chunk]++, chunk}); }
  /// A chunk's forward, B and W back to back (the steady state's unit).
  void forward_backward(int chunk) {
    forward(chunk);
    backward(chunk);
    weight_grad(chunk);
  }
};

}  // namespace

std::vector<PipelineSlot> zb_v_slots(const PipelineShape& shape) {
  const int pp = shape.pp;
  const int stage = shape.stage;
  // The pattern fills the V only from 2pp - 1 micro-batches on; fewer run it with the later ones left out.
  const int laid_out = std::max(2 * pp - 1, shape.microbatches);
  VShapeSlots v;
  for (int pass = 0; pass < 2 * (pp - stage) - 1; ++pass) v.forward(0);  // down the V
  for (int pass = 0; pass < stage; ++pass) {  // the first chunk-1 forwards come back up
    v.forward(1);
    v.forward(0);
  }
  for (int pass = 0; pass < pp - stage; ++pass) v.forward_backward(1);
  while (v.forwards[1] < v.forwards[0] || v.forwards[0] < laid_out) {  // the steady state
    if (v.forwards[0] < laid_out) v.forward(0);
    v.backward(0);
    v.weight_grad(0);
    v.forward_backward(1);
  }
  // The cool-down: the input gradients first (they feed the neighbours), the weight gradients after them.
  for (int pass = 0; pass < stage; ++pass) {
    v.backward(0);
    v.backward(1);
  }
  for (int pass = 0; pass < pp - stage; ++pass) {
    v.backward(0);
    v.weight_grad(0);
  }
  while (v.weight_grads[1] < v.backwards[1]) v.weight_grad(1);
  while (v.weight_grads[0] < v.backwards[0]) v.weight_grad(0);
  std::erase_if(v.slots, [&](const PipelineSlot& slot) { return slot.microbatch >= shape.microbatches; });
  return v.slots;
}

int zb_v_warmup(const PipelineShape& shape) {
  const std::vector<PipelineSlot> slots = zb_v_slots(shape);
  const auto first_backward = std::find_if(
      slots.begin(), slots.end(), [](const PipelineSlot& slot) { return slot.pass != PassKind::kForward; });
  return static_cast<int>(first_backward - slots.begin());
}

// Megatron: all of them when m == pp.
int interleaved_warmup(const PipelineShape& shape) {
  const int total = shape.microbatches * shape.chunks;
  if (shape.microbatches == shape.pp) return total;
  return std::min((shape.pp - shape.stage - 1) * 2 + (shape.chunks - 1) * shape.pp, total);
}

// Megatron's forward_backward_pipelining_with_interleaving: virtual pass k runs chunk (k mod (pp*v)) / pp
// (reversed for backward) on micro-batch (k / (pp*v))*pp + k mod pp.
std::vector<PipelineSlot> interleaved_slots(const PipelineShape& shape) {
  const int pp = shape.pp;
  const int chunks = shape.chunks;
  const int microbatches = shape.microbatches;
  if (microbatches % pp != 0) {
    throw InputError(
        fmt::format("interleaved schedule needs the number of micro-batches ({}) to be a multiple of "
                    "pp={}",
                    microbatches, pp));
  }
  const int total = microbatches * chunks;
  const int group = pp * chunks;
  auto slot_of = [&](int virtual_index, PassKind pass) {
    int chunk = (virtual_index % group) / pp;
    if (pass == PassKind::kBackward) chunk = chunks - 1 - chunk;
    int microbatch = (virtual_index / group) * pp + virtual_index % pp;
    return PipelineSlot{pass, microbatch, chunk};
  };
  const int warmup = interleaved_warmup(shape);
  const int steady = total - warmup;
  std::vector<PipelineSlot> slots;
  slots.reserve(2 * total);
  for (int index = 0; index < warmup; ++index) slots.push_back(slot_of(index, PassKind::kForward));
  for (int step = 0; step < steady; ++step) {
    slots.push_back(slot_of(warmup + step, PassKind::kForward));
    slots.push_back(slot_of(step, PassKind::kBackward));
  }
  for (int index = steady; index < total; ++index) slots.push_back(slot_of(index, PassKind::kBackward));
  return slots;
}

const ScheduleEntry& schedule_entry(Schedule schedule) {
  const auto index = static_cast<std::size_t>(schedule);
  if (index >= kSchedules.size()) throw std::logic_error("unknown schedule");
  return kSchedules[index];
}

std::string schedule_help() {
  std::string text;
  for (const ScheduleEntry& entry : kSchedules) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} ({})", entry.name, entry.help);
  }
  return text;
}

int chunks_per_stage(const Layout& layout) {
  return schedule_entry(layout.schedule).chunked ? std::max(1, layout.virtual_stages) : 1;
}

namespace {

/// The shape `stage` of a resolved layout runs.
PipelineShape shape_of(const Layout& layout, int stage) {
  check_stage(layout, stage);
  return {layout.pp, stage, microbatches_of(layout), chunks_per_stage(layout)};
}

}  // namespace

int virtual_stage(const Layout& layout, int stage, int chunk) {
  const bool reversed = schedule_entry(layout.schedule).v_shape && chunk % 2 == 1;
  return chunk * layout.pp + (reversed ? layout.pp - 1 - stage : stage);
}

int stage_of_virtual(const Layout& layout, int virtual_index) {
  const int position = virtual_index % layout.pp;
  const bool reversed =
      schedule_entry(layout.schedule).v_shape && chunk_of_virtual(layout, virtual_index) % 2 == 1;
  return reversed ? layout.pp - 1 - position : position;
}

int chunk_of_virtual(const Layout& layout, int virtual_index) {
  return virtual_index / layout.pp;
}

int warmup_slots(const Layout& layout, int stage) {
  return schedule_entry(layout.schedule).warmup(shape_of(layout, stage));
}

std::vector<PipelineSlot> stage_schedule(const Layout& layout, int stage) {
  return schedule_entry(layout.schedule).slots(shape_of(layout, stage));
}

ScheduleRule broken_schedule_rule(const model::ModelSpec& model, const Layout& layout) {
  const ScheduleEntry& schedule = schedule_entry(layout.schedule);
  const int sequences_per_step = layout.micro_batch * layout.dp;
  // A chunked schedule's micro-batch groups of pp (a V's included), a split backward's gradient reductions
  // after the last W, a fixed chunk count (a V's two), a V's output layer on stage 0 beside an embedding it
  // cannot share.
  if (schedule.chunked && sequences_per_step > 0 && layout.pp > 0 &&
      (layout.global_batch / sequences_per_step) % layout.pp != 0)
    return ScheduleRule::kMicrobatchMultiple;
  if (schedule.splits_backward && layout.zero_stage > 1) return ScheduleRule::kUnshardedGradients;
  if (schedule.splits_backward && layout.overlap_grad_reduce) return ScheduleRule::kReductionAfterW;
  if (schedule.fixed_chunks > 0 && layout.virtual_stages != schedule.fixed_chunks)
    return ScheduleRule::kFixedChunks;
  if (schedule.v_shape && model.tied_embeddings) return ScheduleRule::kUntiedEmbeddings;
  return ScheduleRule::kNone;
}

void refuse_schedule_rule(const model::ModelSpec& model, const Layout& layout, ScheduleRule rule) {
  const char* name = schedule_entry(layout.schedule).name;
  const int sequences_per_step = layout.micro_batch * layout.dp;
  switch (rule) {
    case ScheduleRule::kMicrobatchMultiple:
      throw InputError(
          fmt::format("{} schedule needs the number of micro-batches ({} = global batch {} / "
                      "(micro-batch × dp = {})) to be a multiple of pp={}; {} (global batch)",
                      name, layout.num_microbatches(), layout.global_batch, sequences_per_step, layout.pp,
                      core::nearby_multiples(layout.global_batch, sequences_per_step * layout.pp)));
    case ScheduleRule::kUnshardedGradients:
      throw InputError(
          fmt::format("--schedule {} defers weight gradients past each micro-batch's backward, which "
                      "ZeRO-2 and FSDP reduce-scatter there; use --zero 0 or 1, or --schedule 1f1b",
                      name));
    case ScheduleRule::kReductionAfterW:
      throw InputError(
          fmt::format("--schedule {} defers weight gradients into the pipeline's bubble; the gradient "
                      "reduction waits for the last of them: drop --overlap-grad (and --overlap), or "
                      "use --schedule 1f1b",
                      name));
    case ScheduleRule::kFixedChunks: {
      const ScheduleEntry& entry = schedule_entry(layout.schedule);
      throw InputError(fmt::format("--schedule {} runs {} model chunks per stage{}; give --vpp {} (vpp={})",
                                   name, entry.fixed_chunks == 2 ? "two" : std::to_string(entry.fixed_chunks),
                                   entry.v_shape ? " in a V" : "", entry.fixed_chunks,
                                   layout.virtual_stages));
    }
    case ScheduleRule::kUntiedEmbeddings:
      throw InputError(
          fmt::format("--schedule {} puts the output layer on stage 0 beside the embedding, and {} ties "
                      "them: untied models only; use --schedule zb-h1 or interleaved",
                      name, model.name));
    case ScheduleRule::kNone:
      break;
  }
  throw std::logic_error("refuse_schedule_rule: the layout breaks no rule of its schedule");
}

std::pair<int, int> searched_chunks(const ScheduleEntry& entry, int num_layers) {
  if (entry.fixed_chunks > 0) return {entry.fixed_chunks, entry.fixed_chunks};
  return {2, num_layers + 2};
}

PassKind activations_freed_by(const Layout& layout) {
  return schedule_entry(layout.schedule).splits_backward ? PassKind::kWeightGrad : PassKind::kBackward;
}

BoundShape bound_shape(const Layout& layout) {
  const ScheduleEntry& entry = schedule_entry(layout.schedule);
  return {layout.pp * (entry.v_shape ? 2 : 1), !entry.splits_backward};
}

std::vector<LayerRange> layer_partition(const Layout& layout, int num_layers) {
  const int count = layout.pp * std::max(1, layout.virtual_stages);
  std::vector<int> sizes = layout.layers_per_stage;
  if (sizes.empty()) {
    require_input(
        num_layers % count == 0,
        fmt::format("pp={} × vpp={} = {} stages do not divide {} layers evenly; give --layers-per-stage",
                    layout.pp, layout.virtual_stages, count, num_layers));
    sizes.assign(count, num_layers / count);
  }
  require_input(static_cast<int>(sizes.size()) == count,
                fmt::format("layers per stage lists {} entries but pp × vpp = {}", sizes.size(), count));
  std::vector<LayerRange> ranges;
  ranges.reserve(count);
  int first = 0;
  for (int size : sizes) {
    ranges.push_back({first, size});
    first += size;
  }
  require_input(first == num_layers,
                fmt::format("layers per stage sum to {} but the model has {} layers", first, num_layers));
  return ranges;
}

std::vector<int> edge_accounted_partition(int num_layers, int virtual_stage_count) {
  if (virtual_stage_count < 2 || (num_layers + 2) % virtual_stage_count != 0) return {};
  const int per_stage = (num_layers + 2) / virtual_stage_count;
  if (per_stage < 1) return {};
  std::vector<int> sizes(virtual_stage_count, per_stage);
  --sizes.front();
  --sizes.back();
  return sizes;
}

bool is_edge_accounted(const std::vector<int>& layers_per_stage) {
  const int total = std::accumulate(layers_per_stage.begin(), layers_per_stage.end(), 0);
  return !layers_per_stage.empty() &&
         layers_per_stage == edge_accounted_partition(total, static_cast<int>(layers_per_stage.size()));
}

double bubble_fraction(const Layout& layout) {
  const double stages = layout.pp;
  const double microbatches = microbatches_of(layout);
  const double chunks = chunks_per_stage(layout);
  // A split backward (T_F = T_B = T_W per chunk): the bubble is (p - 1) T_F against v m (T_F + T_B + T_W) of
  // work (ZB-V's from m >= 2p on; fewer micro-batches leave its V part empty).
  if (schedule_entry(layout.schedule).splits_backward)
    return (stages - 1) / (3 * chunks * microbatches + stages - 1);
  return (stages - 1) / (chunks * microbatches + stages - 1);
}

int peak_inflight_passes(const Layout& layout, int stage) {
  int alive = 0;
  int peak = 0;
  const PassKind frees = activations_freed_by(layout);
  for (const PipelineSlot& slot : stage_schedule(layout, stage)) {
    alive += slot.pass == PassKind::kForward ? 1 : slot.pass == frees ? -1 : 0;
    peak = std::max(peak, alive);
  }
  return peak;
}

PipelineRun run_pipeline(const Layout& layout, double forward_time, double backward_time) {
  const int stages = layout.pp;
  const int chunks = chunks_per_stage(layout);
  const int virtual_stages = stages * chunks;
  const int microbatches = microbatches_of(layout);
  const bool split = schedule_entry(layout.schedule).splits_backward;
  std::vector<std::vector<PipelineSlot>> schedules;
  schedules.reserve(stages);
  for (int stage = 0; stage < stages; ++stage) schedules.push_back(stage_schedule(layout, stage));

  PipelineRun run;
  // Finish time of each pass per virtual stage and micro-batch; negative = not run yet.
  auto& forward_end = run.forward_end;
  auto& backward_end = run.backward_end;
  forward_end.assign(virtual_stages, std::vector<double>(microbatches, -1.0));
  backward_end.assign(virtual_stages, std::vector<double>(microbatches, -1.0));
  for (const auto& slots : schedules) run.slot_start.emplace_back(slots.size(), -1.0);
  std::vector<size_t> next_slot(stages, 0);
  std::vector<double> stage_clock(stages, 0.0);
  double busy = 0;

  // A pass may start once the pass it depends on has a finish time; returns that time or -1 (not yet).
  auto ready_at = [&](int stage, const PipelineSlot& slot) -> double {
    const int virt = virtual_stage(layout, stage, slot.chunk);
    if (slot.pass == PassKind::kWeightGrad) return backward_end[virt][slot.microbatch];  // after its own B
    if (slot.pass == PassKind::kForward) return virt == 0 ? 0.0 : forward_end[virt - 1][slot.microbatch];
    const double own_forward = forward_end[virt][slot.microbatch];
    if (own_forward < 0) return -1.0;
    if (virt == virtual_stages - 1) return own_forward;
    return backward_end[virt + 1][slot.microbatch];
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int stage = 0; stage < stages; ++stage) {
      auto& slots = schedules[stage];
      while (next_slot[stage] < slots.size()) {
        const PipelineSlot& slot = slots[next_slot[stage]];
        const double ready = ready_at(stage, slot);
        if (ready < 0) break;
        const double duration = slot.pass == PassKind::kForward ? forward_time
                                : split                         ? backward_time / 2  // B and W alike
                                                                : backward_time;
        run.slot_start[stage][next_slot[stage]] = std::max(stage_clock[stage], ready);
        const double end = run.slot_start[stage][next_slot[stage]] + duration;
        const int virt = virtual_stage(layout, stage, slot.chunk);
        if (slot.pass != PassKind::kWeightGrad)
          (slot.pass == PassKind::kForward ? forward_end : backward_end)[virt][slot.microbatch] = end;
        stage_clock[stage] = end;
        busy += duration;
        ++run.passes_run;
        ++next_slot[stage];
        progress = true;
      }
    }
  }
  run.completed = true;
  for (int stage = 0; stage < stages; ++stage) {
    if (next_slot[stage] < schedules[stage].size()) {
      run.completed = false;
      const PipelineSlot& slot = schedules[stage][next_slot[stage]];
      run.stuck = fmt::format("stage {} waits at {} of micro-batch {} chunk {}", stage,
                              slot.pass == PassKind::kForward      ? "forward"
                              : slot.pass == PassKind::kWeightGrad ? "weight gradient"
                                                                   : "backward",
                              slot.microbatch, slot.chunk);
      break;
    }
  }
  run.makespan = *std::max_element(stage_clock.begin(), stage_clock.end());
  run.bubble_fraction = run.makespan > 0 ? 1.0 - busy / (stages * run.makespan) : 0.0;
  return run;
}

}  // namespace calo::parallel
