// CPU point-to-point unit (graph::OpKind::kSend and kRecv): non-blocking MPI send/recv, pipeline messages on
// one communicator, the context-parallel ring's batched ops on another. --check: a send carries
// check_value(rank, tag + index) and a receive must hold exactly its peer's values.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

using graph::OpKind;

// Buffer: the message (bytes / 4 fp32 elements). Ring ops of one batch are consecutive in issue order; the
// last one waits for the batch.
void prepare_point_to_point(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 4.0)));
  prepared.buffers = {context.owned(prepared.elements, seed)};
  const auto& program_ops = context.graph->program(context.rank).ops;
  const auto next = static_cast<size_t>(prepared.index) + 1;
  if (op.group == graph::GroupKind::kCp && op.p2p_batch >= 0 && next < program_ops.size()) {
    const graph::Op& following = program_ops[next];
    prepared.last_of_batch = !(graph::is_point_to_point(following.kind) &&
                               following.p2p_batch == op.p2p_batch && following.stream == op.stream);
  }
}

/// Sends or receives one p2p op. Pipeline messages complete one at a time (the graph orders each stage's
/// exchanges so that this cannot deadlock). The context-parallel ring's ops are batched like an NCCL group:
/// every op of one p2p_batch is posted, and the last one waits for all of them (every rank sends before it
/// receives on the ring, so completing them one by one would deadlock once messages pass the eager limit);
/// it keeps the earlier ones in batch_completed for its verify.
void run_point_to_point(CpuContext& context, CpuOp& prepared) {
  const graph::Op& op = prepared.rank_op.op;
  float* buffer = prepared.buffers[0]->data();
  const auto count = static_cast<int>(prepared.elements);
  const int peer = prepared.rank_op.peer_rank;
  const bool sending = op.kind == OpKind::kSend;
  if (context.config.check && sending) {
    for (int at = 0; at < count; ++at) buffer[at] = check_value(context.rank, op.tag + at);
  }
#ifdef CALO_EXEC_HAVE_MPI
  if (op.tag > context.tag_upper_bound) {
    throw RuntimeFailure(
        fmt::format("send/recv tag {} exceeds MPI_TAG_UB {}", op.tag, context.tag_upper_bound));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    MPI_Comm comm = op.group == graph::GroupKind::kCp ? context.ring_comm : context.p2p_comm;
    if (sending) {
      MPI_Isend(buffer, count, MPI_FLOAT, peer, op.tag, comm, &request);
    } else {
      MPI_Irecv(buffer, count, MPI_FLOAT, peer, op.tag, comm, &request);
    }
  }
  if (!prepared.last_of_batch) {
    context.pending_p2p[static_cast<size_t>(op.stream)].emplace_back(&prepared, request);
    return;
  }
  auto& pending = context.pending_p2p[static_cast<size_t>(op.stream)];
  for (auto& [earlier, earlier_request] : pending) wait_request(earlier_request);
  wait_request(request);
  prepared.batch_completed.clear();
  for (auto& [earlier, earlier_request] : pending) prepared.batch_completed.push_back(earlier);
  pending.clear();
#else
  (void)peer;
  throw RuntimeFailure("send/recv needs MPI (calo built without MPI)");
#endif
}

/// A completed receive holds exactly what its peer's send wrote (check_value(peer, tag + index)).
void verify_received(CpuContext& context, CpuOp& prepared) {
  const graph::Op& op = prepared.rank_op.op;
  if (op.kind != OpKind::kRecv) return;
  float* buffer = prepared.buffers[0]->data();
  const auto count = static_cast<int>(prepared.elements);
  const int peer = prepared.rank_op.peer_rank;
  if (context.inject("p2p")) buffer[0] += 1.0f;
  std::int64_t wrong = 0;
  std::string failure;
  for (int at = 0; at < count; ++at) {
    const float want = check_value(peer, op.tag + at);
    if (buffer[at] != want) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): received[{}] = {} but rank {} sent {}", prepared.index,
                              graph::describe(op), at, buffer[at], peer, want);
    }
  }
  context.checks.add(count, wrong, failure);
}

/// --check once a batch completes: its earlier receives, then this op's (an op that is not the last of its
/// batch is verified by the last one).
void verify_point_to_point(CpuContext& context, CpuOp& prepared) {
  if (!prepared.last_of_batch) return;
  for (CpuOp* earlier : prepared.batch_completed) verify_received(context, *earlier);
  verify_received(context, prepared);
}

}  // namespace

const CpuOpUnit kPointToPointUnit = {prepare_point_to_point, run_point_to_point, verify_point_to_point};

}  // namespace calo::exec::cpu
