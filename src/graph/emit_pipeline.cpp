// PipelineEmitter: the pipeline schedule's exchange steps and p2p messages (builder_internal.h).
#include <algorithm>
#include <stdexcept>

#include "graph/builder_internal.h"

namespace calo::graph::detail {
namespace {

/// Sets `peer_stage` to the stage that runs virtual stage `peer_virtual`; false when that is `stage` itself
/// (a V's turn at the last stage hands the activation and the gradient from one chunk to the other without a
/// message). In a V the direction that orders an exchange is the stage's: `toward_next` = toward stage + 1.
bool on_other_stage(const parallel::Layout& layout, int stage, int peer_virtual, int& peer_stage,
                    bool& toward_next) {
  peer_stage = parallel::stage_of_virtual(layout, peer_virtual);
  if (peer_stage == stage) return false;
  if (parallel::schedule_entry(layout.schedule).v_shape) toward_next = peer_stage > stage;
  return true;
}

}  // namespace

ChunkSlots PipelineEmitter::chunk_slots_of(const std::vector<parallel::PipelineSlot>& schedule) const {
  ChunkSlots chunk_slots;
  chunk_slots.last_backward.assign(layout_.virtual_stages, -1);
  chunk_slots.first_forward.assign(layout_.virtual_stages, -1);
  for (int slot_index = 0; slot_index < static_cast<int>(schedule.size()); ++slot_index) {
    const auto& slot = schedule[slot_index];
    if (slot.pass == parallel::PassKind::kBackward) chunk_slots.last_backward[slot.chunk] = slot_index;
    if (slot.pass == parallel::PassKind::kForward && chunk_slots.first_forward[slot.chunk] < 0)
      chunk_slots.first_forward[slot.chunk] = slot_index;
  }
  return chunk_slots;
}

std::vector<std::pair<int, int>> PipelineEmitter::exchange_steps(
    const std::vector<parallel::PipelineSlot>& schedule) {
  if (parallel::schedule_entry(layout_.schedule).v_shape) {
    time_exchanges(schedule);
    std::vector<std::pair<int, int>> steps;
    for (int slot_index = 0; slot_index < static_cast<int>(schedule.size()); ++slot_index)
      steps.emplace_back(slot_index, slot_index + 1);
    return steps;
  }
  // Only steady-state forwards pair with a backward: when m == pp every forward is a warm-up one, and
  // pairing the last with the first backward made its input wait on a gradient that needs its own output
  // (deadlock).
  std::vector<std::pair<int, int>> steps;  // [first slot, end slot)
  const int slots = static_cast<int>(schedule.size());
  const int warmup = parallel::warmup_slots(layout_, core_.stage);
  for (int slot_index = 0; slot_index < slots;) {
    // A W slot (split backward) joins the step of the pass after it: the exchange before it is then the one
    // 1F1B has between its neighbours (a stage's p2p order unchanged, so blocking sends cannot deadlock), and
    // B's gradient leaves before W runs.
    const int first = slot_index;
    while (slot_index < slots && schedule[slot_index].pass == parallel::PassKind::kWeightGrad) ++slot_index;
    if (slot_index == slots) {
      steps.emplace_back(first, slots);
      break;
    }
    const bool pair = parallel::schedule_entry(layout_.schedule).pairs_exchanges && slot_index >= warmup &&
                      slot_index + 1 < slots && schedule[slot_index].pass == parallel::PassKind::kForward &&
                      schedule[slot_index + 1].pass == parallel::PassKind::kBackward;
    const int end = slot_index + (pair ? 2 : 1);
    steps.emplace_back(first, end);
    slot_index = end;
  }
  return steps;
}

/// A V sends a stage's outputs long before its neighbour takes them (stage 0 runs 2pp - 1 forwards before its
/// first chunk-1 forward receives anything), so the exchange after each slot cannot simply send that slot's
/// output: a blocking send (the CPU backend completes pipeline messages one at a time) would wait for a
/// receive that its peer posts only after one this stage has not sent yet. Instead every message is keyed by
/// when its pass ends in run_pipeline (F, B and W one unit each) and the tag, and each stage posts its
/// messages in key order, a receive in the gap before the first slot that starts at or after the key. Both
/// ends share the order, so the first message not yet done always has both ends at the head of their streams:
/// its send follows the pass that made it, which waited only for messages that ended earlier.
void PipelineEmitter::time_exchanges(const std::vector<parallel::PipelineSlot>& schedule) {
  const parallel::PipelineRun run = parallel::run_pipeline(layout_, 1.0, 2.0);
  if (!run.completed) throw std::logic_error("a V-shaped schedule that deadlocks: " + run.stuck);
  const std::vector<double>& starts = run.slot_start[core_.stage];
  struct Timed {
    double time;
    P2p p2p;
  };
  std::vector<Timed> messages;
  for (int slot_index = 0; slot_index < static_cast<int>(schedule.size()); ++slot_index) {
    const parallel::PipelineSlot& slot = schedule[slot_index];
    const int virt = parallel::virtual_stage(layout_, core_.stage, slot.chunk);
    const bool forward = slot.pass == parallel::PassKind::kForward;
    P2p p2p;
    if (slot_send(slot, virt, p2p))
      messages.push_back({(forward ? run.forward_end : run.backward_end)[virt][slot.microbatch], p2p});
    if (slot_receive(slot, virt, p2p)) {
      p2p.consumer_slot = slot_index;
      messages.push_back(
          {forward ? run.forward_end[virt - 1][slot.microbatch] : run.backward_end[virt + 1][slot.microbatch],
           p2p});
    }
  }
  std::sort(messages.begin(), messages.end(), [](const Timed& a, const Timed& b) {
    return a.time != b.time ? a.time < b.time : a.p2p.tag < b.p2p.tag;
  });
  timed_exchanges_.assign(schedule.size() + 1, {});
  next_timed_exchange_ = 0;
  deferred_waits_.clear();
  for (const Timed& message : messages) {
    const auto gap = std::lower_bound(starts.begin(), starts.end(), message.time) - starts.begin();
    timed_exchanges_[static_cast<std::size_t>(gap)].push_back(message.p2p);
  }
}

/// Bytes of one stage-boundary activation (or its gradient) on one rank.
double PipelineEmitter::p2p_bytes() const {
  return kBf16Bytes * static_cast<double>(dims_.tokens_local * dims_.hidden);
}

/// Bytes each rank sends across a stage boundary: 1/tp of the activation under pipeline scatter/gather.
double PipelineEmitter::p2p_sent_bytes() const {
  return layout_.scatter_gather_in_effect() ? p2p_bytes() / static_cast<double>(dims_.tp) : p2p_bytes();
}

/// Tag of the message crossing boundary (v, v+1) for `microbatch`; direction 0 forward, 1 backward.
int PipelineEmitter::tag(int microbatch, int boundary, int direction) const {
  return (microbatch * core_.num_virtual + boundary) * 2 + direction;
}

/// The receive a slot needs before it can run (none on the first/last virtual stage).
bool PipelineEmitter::slot_receive(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const {
  if (slot.pass == parallel::PassKind::kWeightGrad) return false;  // W needs nothing from a neighbour
  p2p.send = false;
  p2p.microbatch = slot.microbatch;
  p2p.chunk = slot.chunk;
  if (slot.pass == parallel::PassKind::kForward) {
    if (virtual_stage == 0) return false;
    p2p.toward_next = false;
    p2p.tag = tag(slot.microbatch, virtual_stage - 1, 0);
    return on_other_stage(layout_, core_.stage, virtual_stage - 1, p2p.peer_stage, p2p.toward_next);
  }
  if (virtual_stage == core_.num_virtual - 1) return false;
  p2p.toward_next = true;
  p2p.tag = tag(slot.microbatch, virtual_stage, 1);
  return on_other_stage(layout_, core_.stage, virtual_stage + 1, p2p.peer_stage, p2p.toward_next);
}

/// The send a slot makes after it ran (none on the last/first virtual stage).
bool PipelineEmitter::slot_send(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const {
  if (slot.pass == parallel::PassKind::kWeightGrad) return false;  // W sends nothing
  p2p.send = true;
  p2p.microbatch = slot.microbatch;
  p2p.chunk = slot.chunk;
  if (slot.pass == parallel::PassKind::kForward) {
    if (virtual_stage == core_.num_virtual - 1) return false;
    p2p.toward_next = true;
    p2p.tag = tag(slot.microbatch, virtual_stage, 0);
    return on_other_stage(layout_, core_.stage, virtual_stage + 1, p2p.peer_stage, p2p.toward_next);
  }
  if (virtual_stage == 0) return false;
  p2p.toward_next = false;
  p2p.tag = tag(slot.microbatch, virtual_stage - 1, 1);
  return on_other_stage(layout_, core_.stage, virtual_stage - 1, p2p.peer_stage, p2p.toward_next);
}

void PipelineEmitter::emit_p2p(const P2p& p2p) {
  Op op;
  op.kind = p2p.send ? OpKind::kSend : OpKind::kRecv;
  op.stream = Stream::kPpComm;
  op.group = GroupKind::kPp;
  op.bytes = p2p_sent_bytes();
  op.peer_stage = p2p.peer_stage;
  op.tag = p2p.tag;
  op.p2p_batch = core_.p2p_batch;
  const int saved_microbatch = core_.current_microbatch, saved_chunk = core_.current_chunk;
  core_.current_microbatch = p2p.microbatch;
  core_.current_chunk = p2p.chunk;
  const Phase saved_phase = core_.phase;
  // Tag parity is the direction: 0 forward activations, 1 backward gradients.
  op.phase = (p2p.tag % 2 == 0) ? Phase::kForward : Phase::kBackward;
  if (p2p.send) {
    core_.add(op, {core_.last_compute});
  } else if (layout_.scatter_gather_in_effect()) {
    // Megatron-LM's gather_split_1d_tensor: the received 1/tp slices are all-gathered over the TP group
    // before the stage uses them.
    const int receive = core_.add(op, {});
    core_.waits.push_back(core_.add(BuilderCore::collective_op(CollectiveKind::kAllGather, GroupKind::kTp,
                                                               p2p_bytes(), Stream::kTpComm, op.phase),
                                    {receive}));
  } else {
    core_.waits.push_back(core_.add(op, {}));
  }
  core_.current_microbatch = saved_microbatch;
  core_.current_chunk = saved_chunk;
  core_.phase = saved_phase;
}

/// Listed in Megatron-LM's batched isend/irecv (_p2p_ops) order: even stages send-next, recv-prev,
/// send-prev, recv-next; odd stages recv-prev, send-next, recv-next, send-prev.
void PipelineEmitter::emit_exchange(const std::vector<parallel::PipelineSlot>& done,
                                    const std::vector<parallel::PipelineSlot>& next) {
  if (!timed_exchanges_.empty()) {  // a V: the gap's messages, timed by time_exchanges
    const int gap = static_cast<int>(next_timed_exchange_++);
    for (const auto& op : timed_exchanges_.at(gap)) {
      const std::size_t waits_before = core_.waits.size();
      emit_p2p(op);
      if (op.consumer_slot <= gap) continue;  // a receive the next slot needs, or a send
      std::vector<std::int32_t>& later = deferred_waits_[op.consumer_slot];
      later.insert(later.end(), core_.waits.begin() + static_cast<std::ptrdiff_t>(waits_before),
                   core_.waits.end());
      core_.waits.resize(waits_before);
    }
    ++core_.p2p_batch;
    if (const auto due = deferred_waits_.find(gap); due != deferred_waits_.end()) {
      core_.waits.insert(core_.waits.end(), due->second.begin(), due->second.end());
      deferred_waits_.erase(due);
    }
    return;
  }
  const int stage = core_.stage;
  std::vector<P2p> ops;
  P2p p2p;
  for (const auto& slot : done)
    if (slot_send(slot, parallel::virtual_stage(layout_, stage, slot.chunk), p2p)) ops.push_back(p2p);
  for (const auto& slot : next)
    if (slot_receive(slot, parallel::virtual_stage(layout_, stage, slot.chunk), p2p)) ops.push_back(p2p);
  auto rank_of = [&](const P2p& op) {
    const bool even = stage % 2 == 0;
    if (even) {
      if (op.send && op.toward_next) return 0;
      if (!op.send && !op.toward_next) return 1;
      if (op.send && !op.toward_next) return 2;
      return 3;
    }
    if (!op.send && !op.toward_next) return 0;
    if (op.send && op.toward_next) return 1;
    if (!op.send && op.toward_next) return 2;
    return 3;
  };
  std::stable_sort(ops.begin(), ops.end(),
                   [&](const P2p& a, const P2p& b) { return rank_of(a) < rank_of(b); });
  for (const auto& op : ops) emit_p2p(op);
  ++core_.p2p_batch;
}

}  // namespace calo::graph::detail
