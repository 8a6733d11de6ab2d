// graph::OpKind::kCollective, kSend and kRecv on CUDA: NCCL all-reduce, all-gather, reduce-scatter and
// all-to-all (expert-parallel dispatch/combine sized from the graph's tokens per expert) on the group's
// communicator, and point-to-point ops posted a p2p batch at a time (post_p2p_batch); --check fills the
// inputs with the check_value pattern and compares the first values of every output block (exec/verify.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "exec/all_to_all.h"
#include "exec/cuda/cuda_internal.h"
#include "exec/cuda/init.cuh"

namespace calo::exec::cuda {
namespace {

using graph::CollectiveKind;
using graph::OpKind;

/// Values of a collective/p2p output block compared under --check (the first ones of every block).
constexpr std::int64_t kCheckBlockValues = 2048;

// ---- collectives ----

/// All-to-all counts (bf16 rows of hidden_size): expert-parallel dispatch/combine follow the graph's tokens
/// per expert (dispatch sends rows[d] to each owner d, combine returns them), else equal blocks.
void prepare_all_to_all(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  const auto members = static_cast<std::int64_t>(prepared.group_ranks.size());
  const std::int64_t me = prepared.group_index;
  const std::int64_t row_values = std::max(1, context.graph->model.hidden_size);
  const std::int64_t rows_total =
      std::max<std::int64_t>(members, std::llround(op.bytes / (2.0 * row_values)));
  const AllToAllSplit split = split_all_to_all(rows_total, members, op.group == graph::GroupKind::kEp,
                                               context.graph->model.num_experts, context.expert_tokens);
  const bool expert_parallel = split.expert_parallel;
  const std::vector<std::int64_t>& rows = split.rows;
  const bool combine = expert_parallel && (context.all_to_all_seen[op.stream]++ % 2 == 1);
  AllToAllCounts counts = all_to_all_counts(rows, me, row_values, combine);
  prepared.send_counts = std::move(counts.send_counts);
  prepared.recv_counts = std::move(counts.recv_counts);
  prepared.send_offsets = std::move(counts.send_offsets);
  prepared.recv_offsets = std::move(counts.recv_offsets);
  prepared.peer_send_offset_to_me = std::move(counts.peer_send_offset_to_me);
  const std::int64_t send_total = counts.send_elements;
  const std::int64_t recv_total = counts.recv_elements;
  prepared.elements = send_total;
  const std::string send_role = fmt::format("coll.send.{}", graph::to_string(op.stream));
  const std::string recv_role = fmt::format("coll.recv.{}", graph::to_string(op.stream));
  prepared.buffers = {context.shared(send_role, send_total, seed),
                      context.shared(recv_role, recv_total, seed + 1)};
}

void prepare_collective(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  const auto& group = context.graph->groups.at(static_cast<size_t>(prepared.rank_op.group_id));
  prepared.group_ranks = group.ranks;
  prepared.group_index =
      std::find(group.ranks.begin(), group.ranks.end(), context.rank) - group.ranks.begin();
  const auto found = context.comms.find({prepared.rank_op.group_id, static_cast<int>(op.stream)});
  if (found == context.comms.end()) {
    throw RuntimeFailure(fmt::format("rank {}: no NCCL communicator for group {} on stream {} (op {})",
                                     context.rank, prepared.rank_op.group_id, graph::to_string(op.stream),
                                     prepared.index));
  }
  prepared.comm = found->second;
  const auto members = static_cast<std::int64_t>(group.ranks.size());
  // Buffers are shared per stream only: collectives of different streams may run at the same time.
  const std::string send_role = fmt::format("coll.send.{}", graph::to_string(op.stream));
  const std::string recv_role = fmt::format("coll.recv.{}", graph::to_string(op.stream));
  const std::int64_t total = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 2.0)));
  const std::int64_t per_rank = std::max<std::int64_t>(1, (total + members - 1) / members);
  switch (op.collective) {
    case CollectiveKind::kAllReduce:
      prepared.elements = total;
      prepared.buffers = {context.shared(send_role, total, seed), context.shared(recv_role, total, seed + 1)};
      break;
    case CollectiveKind::kAllGather:
      prepared.elements = per_rank;
      prepared.buffers = {context.shared(send_role, per_rank, seed),
                          context.shared(recv_role, per_rank * members, seed + 1)};
      break;
    case CollectiveKind::kReduceScatter:
      prepared.elements = per_rank;
      prepared.buffers = {context.shared(send_role, per_rank * members, seed),
                          context.shared(recv_role, per_rank, seed + 1)};
      break;
    case CollectiveKind::kAllToAll:
      prepare_all_to_all(context, prepared, seed);
      break;
  }
}

void snapshot_collective(CudaContext& context, CudaOp& op, cudaStream_t stream) {
  const graph::Op& graph_op = op.rank_op.op;
  const auto members = static_cast<std::int64_t>(op.group_ranks.size());
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  switch (graph_op.collective) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
      ranges.emplace_back(0, std::min(op.elements, kCheckBlockValues));
      break;
    case CollectiveKind::kAllGather:
      for (std::int64_t block = 0; block < members; ++block)
        ranges.emplace_back(block * op.elements, std::min(op.elements, kCheckBlockValues));
      break;
    case CollectiveKind::kAllToAll:
      for (std::int64_t peer = 0; peer < members; ++peer)
        ranges.emplace_back(op.recv_offsets[static_cast<size_t>(peer)],
                            std::min(op.recv_counts[static_cast<size_t>(peer)], kCheckBlockValues));
      break;
  }
  context.snapshot_range(op, op.buffers[1], std::move(ranges), stream);
}

void run_collective(CudaContext& context, CudaOp& prepared, cudaStream_t stream) {
  const graph::Op& op = prepared.rank_op.op;
  auto* send = static_cast<bf16*>(prepared.buffers[0]);
  auto* recv = static_cast<bf16*>(prepared.buffers[1]);
  const auto members = static_cast<std::int64_t>(prepared.group_ranks.size());
  const int me_global = prepared.group_ranks[static_cast<size_t>(prepared.group_index)];
  const std::int64_t send_values = op.collective == CollectiveKind::kAllToAll ? prepared.elements
                                   : op.collective == CollectiveKind::kReduceScatter
                                       ? prepared.elements * members
                                       : prepared.elements;
  if (context.config.check) {
    fill_check_bf16(send, send_values, me_global, 0, stream);
    CALO_CUDA_LAUNCH();
  }
  const auto count = static_cast<std::size_t>(prepared.elements);
  switch (op.collective) {
    case CollectiveKind::kAllReduce:
      CALO_NCCL(ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, prepared.comm, stream));
      break;
    case CollectiveKind::kAllGather:
      CALO_NCCL(ncclAllGather(send, recv, count, ncclBfloat16, prepared.comm, stream));
      break;
    case CollectiveKind::kReduceScatter:
      CALO_NCCL(ncclReduceScatter(send, recv, count, ncclBfloat16, ncclSum, prepared.comm, stream));
      break;
    case CollectiveKind::kAllToAll:
      CALO_NCCL(ncclGroupStart());
      for (std::int64_t peer = 0; peer < members; ++peer) {
        const auto index = static_cast<size_t>(peer);
        CALO_NCCL(ncclSend(send + prepared.send_offsets[index],
                           static_cast<std::size_t>(prepared.send_counts[index]), ncclBfloat16,
                           static_cast<int>(peer), prepared.comm, stream));
        CALO_NCCL(ncclRecv(recv + prepared.recv_offsets[index],
                           static_cast<std::size_t>(prepared.recv_counts[index]), ncclBfloat16,
                           static_cast<int>(peer), prepared.comm, stream));
      }
      CALO_NCCL(ncclGroupEnd());
      break;
  }
  if (context.inject("collective")) context.corrupt(recv, stream);
  if (context.config.check) snapshot_collective(context, prepared, stream);
}

void verify_collective(CudaContext& context, CudaOp& op) {
  const graph::Op& graph_op = op.rank_op.op;
  OpCheck check;
  std::int64_t slot = 0;  // the snapshot holds the checked values in the order they are visited
  for_each_expected_collective_value(
      graph_op.collective, op.group_ranks, op.elements, op.group_index, op.recv_offsets, op.recv_counts,
      op.peer_send_offset_to_me, kCheckBlockValues, [&](std::int64_t at, double want) {
        const double got = bf16_to_float(op.snapshot.bf16_values()[slot++]);
        check.count(got == static_cast<double>(static_cast<float>(want)), [&] {
          return fmt::format("op {} ({}): out[{}] = {} but expected {}", op.index, graph::describe(graph_op),
                             at, got, want);
        });
      });
  context.checks.add(check);
}

// ---- send / recv ----

void prepare_point_to_point(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  // Pipeline messages go over the pp group's communicator, context-parallel ring steps over the cp group's.
  const int group_id = context.graph->group_id(context.rank, op.group);
  const auto found = context.comms.find({group_id, static_cast<int>(op.stream)});
  if (group_id < 0 || found == context.comms.end())
    throw RuntimeFailure(fmt::format("rank {}: send/recv op {} without a {} communicator", context.rank,
                                     prepared.index, graph::to_string(op.group)));
  prepared.comm = found->second;
  const auto& ranks = context.graph->groups[static_cast<size_t>(group_id)].ranks;
  const auto peer = std::find(ranks.begin(), ranks.end(), prepared.rank_op.peer_rank);
  if (peer == ranks.end()) {
    throw RuntimeFailure(fmt::format("rank {}: peer {} of op {} is not in the {} group", context.rank,
                                     prepared.rank_op.peer_rank, prepared.index, graph::to_string(op.group)));
  }
  prepared.peer_in_comm = static_cast<int>(peer - ranks.begin());
  prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 2.0)));
  // Ops of one batch run concurrently: each position in a batch gets its own buffer.
  int position = 0;
  for (auto before = static_cast<size_t>(prepared.index); before > 0; --before) {
    const graph::Op& earlier = context.ops[before - 1].op;
    if (op.p2p_batch < 0 || earlier.p2p_batch != op.p2p_batch ||
        (earlier.kind != OpKind::kSend && earlier.kind != OpKind::kRecv))
      break;
    ++position;
  }
  prepared.buffers = {
      context.shared(fmt::format("p2p.{}.{}", op.kind == OpKind::kSend ? "send" : "recv", position),
                     prepared.elements, seed)};
  // Ops of one batch are consecutive in issue order; the last one posts the batch.
  const auto next = static_cast<size_t>(prepared.index) + 1;
  prepared.last_of_batch = true;
  if (op.p2p_batch >= 0 && next < context.ops.size()) {
    const graph::Op& following = context.ops[next].op;
    prepared.last_of_batch = !(graph::is_point_to_point(following.kind) &&
                               following.p2p_batch == op.p2p_batch && following.stream == op.stream);
  }
}

void verify_recv(CudaContext& context, CudaOp& op) {
  const graph::Op& graph_op = op.rank_op.op;
  std::int64_t wrong = 0;
  std::string failure;
  const std::int64_t count = std::min(op.elements, kCheckBlockValues);
  for (std::int64_t at = 0; at < count; ++at) {
    const double got = bf16_to_float(op.snapshot.bf16_values()[at]);
    const double want = static_cast<double>(check_value(op.rank_op.peer_rank, graph_op.tag + at));
    if (got != want) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): received[{}] = {} but rank {} sent {}", op.index,
                              graph::describe(graph_op), at, got, op.rank_op.peer_rank, want);
    }
  }
  context.checks.add(count, wrong, failure);
}

}  // namespace

const CudaOpUnit kCollectiveUnit = {prepare_collective, run_collective, verify_collective};
// Send and receive share the unit: launch() batches both for post_p2p_batch(), only receives queue a
// snapshot.
const CudaOpUnit kPointToPointUnit = {prepare_point_to_point, nullptr, verify_recv};

void post_p2p_batch(CudaContext& context, const std::vector<CudaOp*>& batch, cudaStream_t stream) {
  if (context.config.check) {
    for (CudaOp* op : batch) {
      if (op->rank_op.op.kind != OpKind::kSend) continue;
      fill_check_bf16(static_cast<bf16*>(op->buffers[0]), op->elements, context.rank, op->rank_op.op.tag,
                      stream);
      CALO_CUDA_LAUNCH();
    }
  }
  CALO_NCCL(ncclGroupStart());
  for (CudaOp* op : batch) {
    if (op->rank_op.op.kind == OpKind::kSend) {
      CALO_NCCL(ncclSend(op->buffers[0], static_cast<std::size_t>(op->elements), ncclBfloat16,
                         op->peer_in_comm, op->comm, stream));
    } else {
      CALO_NCCL(ncclRecv(op->buffers[0], static_cast<std::size_t>(op->elements), ncclBfloat16,
                         op->peer_in_comm, op->comm, stream));
    }
  }
  CALO_NCCL(ncclGroupEnd());
  for (CudaOp* op : batch) {
    if (op->rank_op.op.kind != OpKind::kRecv) continue;
    if (context.inject("p2p")) context.corrupt(op->buffers[0], stream);
    if (context.config.check) {
      context.snapshot_range(*op, op->buffers[0], {{0, std::min(op->elements, kCheckBlockValues)}}, stream);
    }
  }
}

void check_nccl_async_errors(const CudaContext& context) {
  for (const auto& [key, comm] : context.comms) {
    ncclResult_t async_error = ncclSuccess;
    CALO_NCCL(ncclCommGetAsyncError(comm, &async_error));
    if (async_error != ncclSuccess && async_error != ncclInProgress) {
      throw RuntimeFailure(fmt::format("rank {}: NCCL asynchronous error on group {}: {}", context.rank,
                                       key.first, ncclGetErrorString(async_error)));
    }
  }
}

}  // namespace calo::exec::cuda
