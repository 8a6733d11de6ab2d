// Backend-independent executor: issue order, streams, cross-stream events, per-op timing.
#include "exec/executor.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "core/time.h"

namespace calo::exec {

OpCounts count_ops(const std::vector<graph::RankOp>& ops) {
  OpCounts counts{};
  for (const graph::RankOp& op : ops) ++counts[static_cast<size_t>(op.op.kind)];
  return counts;
}

Executor::Executor(Backend& backend, const graph::Graph& graph, int rank, ExecutorOptions options)
    : backend_(backend),
      graph_(graph),
      rank_(rank),
      options_(options),
      ops_(graph::materialize(graph, rank)) {
  streams_.resize(graph::kNumStreams);
  stream_start_events_.resize(graph::kNumStreams);
  for (const graph::RankOp& op : ops_) {
    auto& stream = streams_[static_cast<size_t>(op.op.stream)];
    if (!stream) stream = backend_.create_stream(op.op.stream);
  }
  done_events_.resize(ops_.size());
  for (size_t index = 0; index < ops_.size(); ++index) {
    for (std::int32_t dep : ops_[index].deps) {
      if (ops_[static_cast<size_t>(dep)].op.stream == ops_[index].op.stream) continue;
      ++cross_stream_waits_;
      auto& event = done_events_[static_cast<size_t>(dep)];
      if (!event) event = backend_.create_event(false);
    }
  }
  if (options_.trace_ops) {
    begin_events_.resize(ops_.size());
    end_events_.resize(ops_.size());
    for (size_t index = 0; index < ops_.size(); ++index) {
      begin_events_[index] = backend_.create_event(true);
      end_events_[index] = backend_.create_event(true);
    }
    for (size_t stream = 0; stream < streams_.size(); ++stream) {
      if (streams_[stream]) stream_start_events_[stream] = backend_.create_event(true);
    }
  }
}

Executor::~Executor() = default;

void Executor::prepare() {
  prepared_.clear();
  prepared_.reserve(ops_.size());
  std::int64_t optimizer_operand_bytes = 0;
  for (size_t index = 0; index < ops_.size(); ++index) {
    const std::int64_t allocated_before = backend_.allocated_bytes();
    prepared_.push_back(backend_.prepare(ops_[index], static_cast<int>(index)));
    if (ops_[index].op.kind == graph::OpKind::kOptimizer)
      optimizer_operand_bytes += backend_.allocated_bytes() - allocated_before;
  }
  // The optimizer op's operands are the shard's fp32 state already: hold only the rest of the state. Where
  // the rest would not fit beside the other operands, those stand in for held bytes too (carve_ledger).
  state_in_operands_bytes_ = std::min(ledger_.state_bytes, optimizer_operand_bytes);
  operands_carved_bytes_ = 0;
  if (!ledger_.actions.empty() || ledger_.state_bytes > 0) {
    operands_carved_bytes_ = operands_to_carve(
        backend_.held_memory().device_used_bytes, ledger_.serial_peak_bytes - state_in_operands_bytes_,
        backend_.allocated_bytes() - state_in_operands_bytes_, backend_.device().memory_bytes, rank_);
  }
  held_ledger_ = carve_ledger(ledger_, state_in_operands_bytes_ + operands_carved_bytes_);
  if (held_ledger_.state_bytes > 0) {
    Stream& compute = *streams_[static_cast<size_t>(ops_.front().op.stream)];
    backend_.hold(held_ledger_.slots, held_ledger_.state_bytes,
                  "weights, gradients and optimizer state beyond the optimizer's operands", compute);
    backend_.synchronize();
  }
}

void Executor::use_memory_ledger(MemoryLedger ledger) {
  ledger_ = std::move(ledger);
}

void Executor::apply_ledger(size_t op_index, bool before_op, Stream& stream, size_t& cursor) {
  for (; cursor < held_ledger_.actions.size(); ++cursor) {
    const LedgerAction& action = held_ledger_.actions[cursor];
    if (static_cast<size_t>(action.op_index) != op_index || action.before_op != before_op) return;
    if (action.hold) {
      backend_.hold(action.slot, action.bytes, action.what, stream);
    } else {
      backend_.release(action.slot, stream);
    }
  }
}

OpCounts Executor::ops_per_step() const {
  return count_ops(ops_);
}

StepTiming Executor::run_step(Bootstrap& bootstrap) {
  if (prepared_.size() != ops_.size()) throw std::logic_error("Executor::run_step before prepare()");
  backend_.synchronize();
  bootstrap.barrier();
  StepTiming timing;
  timing.begin_ns = core::monotonic_ns();
  if (options_.trace_ops) {
    for (size_t stream = 0; stream < streams_.size(); ++stream) {
      if (streams_[stream]) backend_.record(*stream_start_events_[stream], *streams_[stream]);
    }
  }
  size_t ledger_cursor = 0;
  for (size_t index = 0; index < ops_.size(); ++index) {
    const graph::RankOp& op = ops_[index];
    Stream& stream = *streams_[static_cast<size_t>(op.op.stream)];
    for (std::int32_t dep : op.deps) {
      if (ops_[static_cast<size_t>(dep)].op.stream != op.op.stream)
        backend_.wait(stream, *done_events_[static_cast<size_t>(dep)]);
    }
    apply_ledger(index, true, stream, ledger_cursor);
    if (options_.trace_ops) backend_.record(*begin_events_[index], stream);
    backend_.launch(*prepared_[index], stream);
    if (options_.trace_ops) backend_.record(*end_events_[index], stream);
    apply_ledger(index, false, stream, ledger_cursor);
    if (done_events_[index]) backend_.record(*done_events_[index], stream);
  }
  backend_.synchronize();
  timing.end_ns = core::monotonic_ns();
  if (options_.trace_ops) {
    timing.ops.reserve(ops_.size());
    for (size_t index = 0; index < ops_.size(); ++index) {
      Event& start = *stream_start_events_[static_cast<size_t>(ops_[index].op.stream)];
      OpTiming op_timing;
      op_timing.op_index = static_cast<std::int32_t>(index);
      op_timing.begin_ns = timing.begin_ns + backend_.elapsed_ns(start, *begin_events_[index]);
      op_timing.end_ns = timing.begin_ns + backend_.elapsed_ns(start, *end_events_[index]);
      timing.ops.push_back(op_timing);
    }
  }
  return timing;
}

}  // namespace calo::exec
