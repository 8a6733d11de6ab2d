// The allocations of `calo bench --memory real` (exec/memory_ledger.h): found from the ops' phase, chunk,
// layer and micro-batch, sized by parallel::holdings_for_stage.
#include "exec/memory_ledger.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/table.h"

namespace calo::exec {
namespace {

using graph::OpKind;
using graph::Phase;

bool is_compute(const graph::Op& op) {
  return op.kind == OpKind::kGemm || op.kind == OpKind::kAttention || op.kind == OpKind::kElementwise;
}

bool in_backward_pass(const graph::Op& op) {
  return op.phase == Phase::kBackward || op.phase == Phase::kRecompute;
}

// First and last op index of a group of ops (unset: first > last).
struct Span {
  std::int32_t first = std::numeric_limits<std::int32_t>::max();
  std::int32_t last = -1;
  void add(std::int32_t index) {
    first = std::min(first, index);
    last = std::max(last, index);
  }
};

using MicrobatchKey = std::pair<int, int>;   // (chunk or layer, micro-batch)
using PassKey = std::tuple<int, int, bool>;  // (layer, micro-batch, backward pass)

// Where the compute ops of each chunk, layer and pass lie in the program.
struct ProgramIndex {
  std::map<MicrobatchKey, Span> chunk_forward, chunk_backward;    // phase forward / backward
  std::map<MicrobatchKey, Span> layer_forward;                    // layer >= 0
  std::map<MicrobatchKey, Span> layer_recompute, layer_backward;  // layer >= 0
  std::map<MicrobatchKey, Span> layer_backward_pass;              // recompute or backward, layer >= 0
  std::map<PassKey, Span> pass;                                   // any layer, either pass
};

ProgramIndex index_program(const std::vector<graph::RankOp>& ops) {
  ProgramIndex index;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(ops.size()); ++i) {
    const graph::Op& op = ops[static_cast<size_t>(i)].op;
    if (!is_compute(op) || op.microbatch < 0) continue;
    const MicrobatchKey chunk{op.chunk, op.microbatch}, layer{op.layer, op.microbatch};
    if (op.phase == Phase::kForward) index.chunk_forward[chunk].add(i);
    if (op.phase == Phase::kBackward) index.chunk_backward[chunk].add(i);
    index.pass[{op.layer, op.microbatch, in_backward_pass(op)}].add(i);
    if (op.layer < 0) continue;
    if (op.phase == Phase::kForward) index.layer_forward[layer].add(i);
    if (op.phase == Phase::kRecompute) index.layer_recompute[layer].add(i);
    if (op.phase == Phase::kBackward) index.layer_backward[layer].add(i);
    if (in_backward_pass(op)) index.layer_backward_pass[layer].add(i);
  }
  return index;
}

class LedgerWriter {
 public:
  explicit LedgerWriter(MemoryLedger& ledger) : ledger_(ledger) {}
  // Allocates `bytes` before op `hold_op` and frees them before or after op `free_op`.
  void add(std::int32_t hold_op, std::int32_t free_op, bool free_before_op, double bytes, std::string what) {
    if (bytes < 1.0) return;
    if (free_op < hold_op || (free_op == hold_op && free_before_op))
      throw std::logic_error("memory ledger: " + what + " is freed before it is allocated");
    const std::int32_t slot = ledger_.slots++;
    ledger_.actions.push_back({hold_op, true, true, slot, static_cast<std::int64_t>(bytes), std::move(what)});
    ledger_.actions.push_back({free_op, free_before_op, false, slot, 0, {}});
  }

 private:
  MemoryLedger& ledger_;
};

// The activations of a micro-batch as autograd keeps them: each layer's from its first forward op until its
// backward has run (backward frees them layer by layer, last layer first), the chunk's embedding or output
// activations from its first forward op to its last backward op; and what recomputation rebuilds for one
// layer's backward.
void add_activations(const ProgramIndex& index, const parallel::StageHoldings& holdings, LedgerWriter& out) {
  for (const auto& [key, forward] : index.chunk_forward) {
    auto backward = index.chunk_backward.find(key);
    if (backward == index.chunk_backward.end()) continue;
    out.add(
        forward.first, backward->second.last, false,
        holdings.chunk_edge_activation_bytes.at(static_cast<size_t>(key.first)),
        fmt::format("activations of chunk {}'s embedding or output, micro-batch {}", key.first, key.second));
  }
  for (const auto& [key, forward] : index.layer_forward) {
    auto backward = index.layer_backward.find(key);
    if (backward == index.layer_backward.end()) continue;
    out.add(forward.first, backward->second.last, false, holdings.layer_activation_bytes,
            fmt::format("activations of layer {}, micro-batch {}", key.first, key.second));
  }
  for (const auto& [key, recompute] : index.layer_recompute) {
    auto backward = index.layer_backward.find(key);
    if (backward == index.layer_backward.end()) continue;
    out.add(recompute.first, backward->second.last, false, holdings.recompute_transient_bytes,
            fmt::format("recomputed activations of layer {}, micro-batch {}", key.first, key.second));
  }
}

// The micro-batch of the first backward pass over `layer` after op `after` (`fallback` when there is none).
int next_backward_microbatch(const ProgramIndex& index, int layer, std::int32_t after, int fallback) {
  int microbatch = fallback;
  std::int32_t first = std::numeric_limits<std::int32_t>::max();
  for (auto it = index.layer_backward_pass.lower_bound({layer, std::numeric_limits<int>::min()});
       it != index.layer_backward_pass.end() && it->first.first == layer; ++it) {
    if (it->second.first > after && it->second.first < first) {
      first = it->second.first;
      microbatch = it->first.second;
    }
  }
  return microbatch;
}

// FSDP's gathered units (until their pass, or without resharding their backward, is done) and each unit's
// gradients from its backward until their reduce-scatter has run.
void add_parameter_collectives(const std::vector<graph::RankOp>& ops, const ProgramIndex& index,
                               const parallel::Layout& layout, const parallel::StageHoldings& holdings,
                               LedgerWriter& out) {
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(ops.size()); ++i) {
    const graph::Op& op = ops[static_cast<size_t>(i)].op;
    if (op.kind != OpKind::kCollective || op.parameters <= 0 || op.microbatch < 0) continue;
    if (op.collective == graph::CollectiveKind::kAllGather && layout.zero_stage >= 3) {
      const bool backward = in_backward_pass(op);
      // Kept after forward (no resharding), a unit stays gathered until the next backward pass over it.
      const int freed_by = !backward && !layout.reshard_after_forward
                               ? next_backward_microbatch(index, op.layer, i, op.microbatch)
                               : op.microbatch;
      const bool freed_in_backward = backward || !layout.reshard_after_forward;
      std::int32_t free_op = i;
      if (auto pass = index.pass.find({op.layer, freed_by, freed_in_backward}); pass != index.pass.end())
        free_op = std::max(free_op, pass->second.last);
      // The gathered buffer is what the all-gather wrote: bf16, its FP8 linears' weights in FP8 under
      // --fp8-all-gather (parallel::Layout::gather_bytes).
      out.add(i, free_op, false, op.bytes,
              fmt::format("gathered parameters of unit {}, micro-batch {}", op.layer, op.microbatch));
    } else if (op.collective == graph::CollectiveKind::kReduceScatter && layout.zero_stage >= 2) {
      std::int32_t hold_op = i;
      auto backward = index.layer_backward_pass.find({op.layer, op.microbatch});
      if (op.layer >= 0 && backward != index.layer_backward_pass.end())
        hold_op = std::min(hold_op, backward->second.first);
      out.add(hold_op, i, false, op.parameters * holdings.gradient_bytes_per_param,
              fmt::format("gradients of unit {}, micro-batch {}, until their reduce-scatter", op.layer,
                          op.microbatch));
    }
  }
}

// The pytorch trainer's loss backward: from the chunk's first backward op until its first layer's backward.
void add_loss_backward(const ProgramIndex& index, const parallel::Layout& layout,
                       const parallel::StageHoldings& holdings, LedgerWriter& out) {
  if (holdings.loss_transient_bytes <= 0) return;
  const int last_chunk = (layout.pp * layout.virtual_stages - 1) / layout.pp;
  for (const auto& [key, backward] : index.chunk_backward) {
    if (key.first != last_chunk) continue;
    // The loss and output ops (layer -1) come first in backward; the transient ends with them.
    std::int32_t free_op = backward.last;
    bool before = false;
    for (const auto& [layer_key, span] : index.layer_backward_pass) {
      if (layer_key.second == key.second && span.first > backward.first && span.first < free_op) {
        free_op = span.first;
        before = true;
      }
    }
    out.add(backward.first, free_op, before, holdings.loss_transient_bytes,
            fmt::format("loss backward of micro-batch {}", key.second));
  }
}

std::int64_t replay_peak(const MemoryLedger& ledger) {
  std::vector<std::int64_t> held(static_cast<size_t>(ledger.slots), 0);
  std::int64_t alive = 0, peak = 0;
  for (const LedgerAction& action : ledger.actions) {
    if (action.hold) {
      held[static_cast<size_t>(action.slot)] = action.bytes;
      alive += action.bytes;
      peak = std::max(peak, alive);
    } else {
      alive -= held[static_cast<size_t>(action.slot)];
    }
  }
  return ledger.state_bytes + peak;
}

// carve_ledger's bookkeeping: each slot's hold and the share of it the carve covers, and the carve not in
// use.
class LedgerCarver {
 public:
  LedgerCarver(const MemoryLedger& ledger, std::int64_t carved_bytes)
      : ledger_(ledger), free_bytes_(carved_bytes), slots_(static_cast<size_t>(ledger.slots)) {
    const std::int64_t state_carved = std::min(free_bytes_, ledger.state_bytes);
    free_bytes_ -= state_carved;
    out_.state_bytes = ledger.state_bytes - state_carved;
    out_.slots = ledger.slots;
  }

  MemoryLedger carve() {
    for (const LedgerAction& action : ledger_.actions) {
      if (action.hold) {
        hold(action);
      } else {
        release(action);
      }
    }
    out_.serial_peak_bytes = replay_peak(out_);
    return std::move(out_);
  }

 private:
  struct Slot {
    const LedgerAction* held = nullptr;  // the original hold while live
    std::int64_t carved = 0;             // bytes of it the carve covers
  };

  void hold(const LedgerAction& action) {
    Slot& slot = slots_[static_cast<size_t>(action.slot)];
    slot.held = &action;
    slot.carved = std::min(free_bytes_, action.bytes);
    free_bytes_ -= slot.carved;
    if (slot.carved < action.bytes) {
      emit(action, action.bytes - slot.carved);
      uncovered_.insert(action.slot);
    }
  }

  void release(const LedgerAction& action) {
    Slot& slot = slots_[static_cast<size_t>(action.slot)];
    if (slot.held == nullptr) return;
    if (uncovered_.erase(action.slot) > 0) out_.actions.push_back(action);
    free_bytes_ += slot.carved;
    slot = {};
    // The freed share goes to the live holds: each is freed and held again, smaller (or not at all).
    for (auto it = uncovered_.begin(); it != uncovered_.end() && free_bytes_ > 0;) {
      Slot& live = slots_[static_cast<size_t>(*it)];
      LedgerAction free_it = action;
      free_it.slot = *it;
      out_.actions.push_back(free_it);
      const std::int64_t take = std::min(free_bytes_, live.held->bytes - live.carved);
      live.carved += take;
      free_bytes_ -= take;
      if (live.carved < live.held->bytes) {
        LedgerAction again = *live.held;
        again.op_index = action.op_index;
        again.before_op = action.before_op;
        emit(again, live.held->bytes - live.carved);
        ++it;
      } else {
        it = uncovered_.erase(it);
      }
    }
  }

  void emit(LedgerAction action, std::int64_t bytes) {
    action.bytes = bytes;
    out_.actions.push_back(std::move(action));
  }

  const MemoryLedger& ledger_;
  std::int64_t free_bytes_ = 0;
  std::vector<Slot> slots_;
  std::set<std::int32_t> uncovered_;  // live slots the carve does not cover whole
  MemoryLedger out_;
};

}  // namespace

std::int64_t operands_to_carve(std::int64_t in_use_bytes, std::int64_t to_hold, std::int64_t operand_bytes,
                               double device_bytes, int rank) {
  const double needed = static_cast<double>(in_use_bytes + to_hold + kLedgerHeadroomBytes) - device_bytes;
  if (needed <= 0) return 0;
  if (needed <= static_cast<double>(operand_bytes)) return static_cast<std::int64_t>(std::ceil(needed));
  throw InputError(fmt::format(
      "--memory real: rank {} would hold {} at its peak beside the {} already in use (calo's operand "
      "buffers, runtime): more than the device's {} even with all {} of calo's operand buffers counted as "
      "held and {} kept free for NCCL's buffers. What training holds and the runtime do not fit this device; "
      "measure the layout with --memory model, or run a smaller slice (--layers), more --tp/--pp, or "
      "--recompute full",
      rank, core::format_bytes(static_cast<double>(to_hold)),
      core::format_bytes(static_cast<double>(in_use_bytes)), core::format_bytes(device_bytes),
      core::format_bytes(static_cast<double>(operand_bytes)),
      core::format_bytes(static_cast<double>(kLedgerHeadroomBytes))));
}

MemoryLedger carve_ledger(const MemoryLedger& ledger, std::int64_t carved_bytes) {
  return LedgerCarver(ledger, std::max<std::int64_t>(carved_bytes, 0)).carve();
}

MemoryLedger build_memory_ledger(const std::vector<graph::RankOp>& ops, const model::ModelSpec& model,
                                 const parallel::Layout& layout, int stage) {
  const parallel::StageHoldings holdings = parallel::holdings_for_stage(model, layout, stage);
  MemoryLedger ledger;
  ledger.state_bytes = static_cast<std::int64_t>(holdings.state_bytes);
  const ProgramIndex index = index_program(ops);
  LedgerWriter writer(ledger);
  add_activations(index, holdings, writer);
  add_parameter_collectives(ops, index, layout, holdings, writer);
  add_loss_backward(index, layout, holdings, writer);
  // Per op: what goes before it, then what goes after; frees before allocations at the same point.
  std::stable_sort(ledger.actions.begin(), ledger.actions.end(),
                   [](const LedgerAction& a, const LedgerAction& b) {
                     return std::make_tuple(a.op_index, !a.before_op, a.hold) <
                            std::make_tuple(b.op_index, !b.before_op, b.hold);
                   });
  ledger.serial_peak_bytes = replay_peak(ledger);
  return ledger;
}

}  // namespace calo::exec
