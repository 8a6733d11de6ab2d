// CPU collective unit: all-reduce, all-gather, reduce-scatter and all-to-all (expert-parallel dispatch and
// combine split by the graph's tokens per expert) as non-blocking MPI collectives on the group's
// communicator; a group of one copies. --check fills the send buffer with check_value and compares every
// received value with for_each_expected_collective_value (exec/verify.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "exec/all_to_all.h"
#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

using graph::CollectiveKind;

/// All-to-all counts. Expert-parallel dispatch/combine use the graph's tokens per expert: every source
/// sends its routed rows to the owners of the experts in proportion to their tokens (dispatch), and gets
/// them back (combine); otherwise equal blocks.
void prepare_all_to_all(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  const std::int64_t members = prepared.group_size;
  const std::int64_t me = prepared.group_index;
  // One token's row: hidden_size bf16 values, in fp32 elements.
  const std::int64_t row_elements = std::max<std::int64_t>(1, context.graph->model.hidden_size / 2);
  const std::int64_t rows_total =
      std::max<std::int64_t>(members, std::llround(op.bytes / (2.0 * context.graph->model.hidden_size)));
  const AllToAllSplit split = split_all_to_all(rows_total, members, op.group == graph::GroupKind::kEp,
                                               context.graph->model.num_experts, context.expert_tokens);
  const bool expert_parallel = split.expert_parallel;
  const std::vector<std::int64_t>& rows = split.rows;
  // Dispatch (even occurrence in the program) sends rows[d] to each d; combine sends rows[me] back to each.
  const bool combine = expert_parallel && (context.all_to_all_seen++ % 2 == 1);
  const AllToAllCounts counts = all_to_all_counts(rows, me, row_elements, combine);
  // MPI takes int counts and displacements.
  const auto to_int = [](const std::vector<std::int64_t>& values) {
    std::vector<int> ints(values.size());
    for (size_t i = 0; i < values.size(); ++i) ints[i] = static_cast<int>(values[i]);
    return ints;
  };
  prepared.send_counts = to_int(counts.send_counts);
  prepared.recv_counts = to_int(counts.recv_counts);
  prepared.send_offsets = to_int(counts.send_offsets);
  prepared.recv_offsets = to_int(counts.recv_offsets);
  prepared.peer_send_offset_to_me = counts.peer_send_offset_to_me;
  const std::int64_t send_total = counts.send_elements;
  const std::int64_t recv_total = counts.recv_elements;
  prepared.elements = send_total;
  prepared.buffers = {context.owned(send_total, seed), context.owned(recv_total, seed + 1)};
}

// Buffers: send, recv (sized by the kind; all-to-all: see prepare_all_to_all); the group's members and
// communicator.
void prepare_collective(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  const auto& group = context.graph->groups.at(static_cast<size_t>(prepared.rank_op.group_id));
  prepared.group_ranks = group.ranks;
  prepared.group_size = static_cast<std::int64_t>(group.ranks.size());
  prepared.group_index =
      std::find(group.ranks.begin(), group.ranks.end(), context.rank) - group.ranks.begin();
#ifdef CALO_EXEC_HAVE_MPI
  if (auto found = context.comms.find(prepared.rank_op.group_id); found != context.comms.end())
    prepared.comm = found->second;
#endif
  const std::int64_t members = prepared.group_size;
  const std::int64_t total = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 4.0)));
  const std::int64_t per_rank = std::max<std::int64_t>(1, (total + members - 1) / members);
  switch (op.collective) {
    case CollectiveKind::kAllReduce:
      prepared.elements = total;
      prepared.buffers = {context.owned(total, seed), context.owned(total, seed + 1)};
      break;
    case CollectiveKind::kAllGather:
      prepared.elements = per_rank;
      prepared.buffers = {context.owned(per_rank, seed), context.owned(per_rank * members, seed + 1)};
      break;
    case CollectiveKind::kReduceScatter:
      prepared.elements = per_rank;
      prepared.buffers = {context.owned(per_rank * members, seed), context.owned(per_rank, seed + 1)};
      break;
    case CollectiveKind::kAllToAll:
      prepare_all_to_all(context, prepared, seed);
      break;
  }
}

// --check fills the send buffer with check_value(my global rank, index) first.
void run_collective(CpuContext& context, CpuOp& prepared) {
  float* send = prepared.buffers[0]->data();
  float* recv = prepared.buffers[1]->data();
  const std::int64_t members = prepared.group_size;
  const auto me_global = static_cast<int>(prepared.group_ranks[static_cast<size_t>(prepared.group_index)]);
  const auto send_size = static_cast<std::int64_t>(prepared.buffers[0]->size());
  if (context.config.check) {
    for (std::int64_t at = 0; at < send_size; ++at) send[at] = check_value(me_global, at);
  }
  if (members == 1) {
    std::copy(
        send,
        send + std::min<std::int64_t>(send_size, static_cast<std::int64_t>(prepared.buffers[1]->size())),
        recv);
  } else {
#ifdef CALO_EXEC_HAVE_MPI
    MPI_Request request = MPI_REQUEST_NULL;
    {
      std::lock_guard lock(mpi_mutex());
      const auto count = static_cast<int>(prepared.elements);
      switch (prepared.rank_op.op.collective) {
        case CollectiveKind::kAllReduce:
          MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, prepared.comm, &request);
          break;
        case CollectiveKind::kAllGather:
          MPI_Iallgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, prepared.comm, &request);
          break;
        case CollectiveKind::kReduceScatter:
          MPI_Ireduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, prepared.comm, &request);
          break;
        case CollectiveKind::kAllToAll:
          MPI_Ialltoallv(send, prepared.send_counts.data(), prepared.send_offsets.data(), MPI_FLOAT, recv,
                         prepared.recv_counts.data(), prepared.recv_offsets.data(), MPI_FLOAT, prepared.comm,
                         &request);
          break;
      }
    }
    wait_request(request);
#else
    throw RuntimeFailure("collective over several ranks needs MPI (calo built without MPI)");
#endif
  }
  if (context.inject("collective")) recv[0] += 1.0f;
}

// --check: every received value against the one the members' check_value inputs produce.
void check_collective(CpuContext& context, CpuOp& prepared) {
  const graph::Op& op = prepared.rank_op.op;
  const float* recv = prepared.buffers[1]->data();
  const auto& members = prepared.group_ranks;
  OpCheck check;
  for_each_expected_collective_value(
      op.collective, members, prepared.elements, prepared.group_index, prepared.recv_offsets,
      prepared.recv_counts, prepared.peer_send_offset_to_me, std::numeric_limits<std::int64_t>::max(),
      [&](std::int64_t at, double want) {
        check.count(recv[at] == static_cast<float>(want), [&] {
          return fmt::format("op {} ({}): out[{}] = {} but expected {}", prepared.index, graph::describe(op),
                             at, recv[at], want);
        });
      });
  context.checks.add(check);
}

}  // namespace

const CpuOpUnit kCollectiveUnit = {prepare_collective, run_collective, check_collective};

}  // namespace calo::exec::cpu
