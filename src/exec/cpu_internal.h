// CPU backend internal header: what cpu_backend.cpp (the Backend: streams, events, launch) shares with its op
// units, one file per graph::OpKind with that kind's prepare / run / verify: cpu_gemm.cpp, cpu_attention.cpp,
// cpu_elementwise.cpp (softmax included), cpu_collective.cpp (all-to-all included), cpu_p2p.cpp (send and
// recv), cpu_optimizer.cpp. Not part of the exec interface.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "exec/backend.h"
#include "exec/verify.h"
#include "graph/graph.h"

#ifdef CALO_EXEC_HAVE_MPI
#include <mpi.h>
#include <sched.h>

#include "exec/mpi_env.h"
#endif

namespace calo::exec::cpu {

/// xorshift64* generator: fast, deterministic per (seed, rank, op).
struct Random {
  std::uint64_t state;  ///< current state (never 0)
  /// Seeds the generator (a zero state becomes 1).
  explicit Random(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {
    if (state == 0) state = 1;
  }
  /// The next 64 random bits.
  std::uint64_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ull;
  }
  /// Uniform in [0.5, 1.5) with a random sign: never zero.
  float nonzero() {
    const float magnitude = 0.5f + static_cast<float>(next() >> 40) / static_cast<float>(1ull << 24);
    return (next() & 1) != 0 ? magnitude : -magnitude;
  }
};

/// Fills `data` in order with Random(seed).nonzero() * scale.
inline void fill_random(std::vector<float>& data, std::uint64_t seed, float scale = 1.0f) {
  Random random(seed);
  for (float& value : data) value = random.nonzero() * scale;
}

struct CpuOpUnit;

/// A prepared op: the graph op plus its host buffers (which buffer is which: see the kind's unit).
struct CpuOp final : PreparedOp {
  graph::RankOp rank_op;                                     ///< the graph op and its group / peer
  int index = 0;                                             ///< index in the rank's program
  const CpuOpUnit* unit = nullptr;                           ///< the unit of the op's kind
  std::vector<std::shared_ptr<std::vector<float>>> buffers;  ///< role-specific, see the unit's prepare
  std::int64_t group_size = 1;                               ///< collective: members of the group
  std::int64_t group_index = 0;                              ///< collective: this rank's place in the group
  std::vector<std::int32_t> group_ranks;                     ///< collective: global ranks of the members
  std::vector<int> send_counts;                              ///< all-to-all: elements sent to each peer
  std::vector<int> recv_counts;                              ///< all-to-all: elements received from each peer
  std::vector<int> send_offsets;                             ///< all-to-all: where each peer's block starts
  std::vector<int> recv_offsets;                             ///< all-to-all: where each peer's block lands
  std::vector<std::int64_t> peer_send_offset_to_me;  ///< all-to-all check: where my block sits in each sender
  std::int64_t elements = 0;                         ///< main element count (see the unit's prepare)
  bool last_of_batch = true;  ///< send/recv: completes its p2p batch (context-parallel ring ops are batched)
  std::vector<CpuOp*> batch_completed;  ///< send/recv, last of a batch: the earlier ops its run completed
  std::vector<double> reference;        ///< optimizer --check: expected values computed before the update
#ifdef CALO_EXEC_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;  ///< collective: the group's communicator
#endif
};

/// Operand buffers counted instead of allocated (CpuContext::counting): the op units' own prepare run
/// without allocating, so the count is exactly what prepare() will allocate.
struct OperandTally {
  OperandFootprint footprint;                                     ///< bytes so far, per op kind
  graph::OpKind kind = graph::OpKind::kGemm;                      ///< the kind of the op being counted
  std::set<std::pair<std::string, std::int64_t>> shared_counted;  ///< shared buffers counted once
};

/// The backend state the op units share (one per backend, filled by its constructor and connect()).
struct CpuContext {
  BackendConfig config;                          ///< rank, world, --check, seed
  const graph::Graph* graph = nullptr;           ///< the graph connect() bound
  int rank = 0;                                  ///< this process's rank in the graph
  std::string inject_fault;                      ///< CALO_CPU_INJECT_FAULT: the result to corrupt (tests)
  CheckTally checks;                             ///< --check tally of every verified op
  std::atomic<std::int64_t> allocated_bytes{0};  ///< bytes of every buffer owned() allocated
  /// Scratch buffers by (role, elements), see shared().
  std::map<std::pair<std::string, std::int64_t>, std::shared_ptr<std::vector<float>>> scratch;
  std::map<int, std::int64_t> expert_tokens;  ///< tokens per expert (m of the expert fc1 forward GEMMs)
  std::int64_t all_to_all_seen = 0;  ///< all-to-alls prepared so far (expert parallel: dispatch, combine)
  int tag_upper_bound = 32767;       ///< MPI_TAG_UB of MPI_COMM_WORLD
  /// Non-null: owned() and shared() add to this tally and return empty buffers (cpu_operand_footprint).
  OperandTally* counting = nullptr;
#ifdef CALO_EXEC_HAVE_MPI
  std::map<int, MPI_Comm> comms;       ///< group id -> the communicator of its ranks
  MPI_Comm p2p_comm = MPI_COMM_NULL;   ///< pipeline send/recv
  MPI_Comm ring_comm = MPI_COMM_NULL;  ///< context-parallel ring send/recv: own tag space
  /// Posted, not yet completed ring ops of the open p2p batch, per stream (touched by that stream's thread).
  std::array<std::vector<std::pair<CpuOp*, MPI_Request>>, graph::kNumStreams> pending_p2p;
#endif

  /// True when CALO_CPU_INJECT_FAULT names `kind` (the unit then corrupts its result for --check to find).
  bool inject(const char* kind) const {
    return inject_fault == kind;
  }
  /// A new buffer of max(1, elements) values, fill_random(seed, scale), counted in allocated_bytes (while
  /// counting: an empty buffer, its bytes added to the tally).
  std::shared_ptr<std::vector<float>> owned(std::int64_t elements, std::uint64_t seed, float scale = 1.0f);
  /// A compute-stream scratch buffer shared by ops of the same role and size (they run one at a time; while
  /// counting: an empty buffer, its bytes added to the tally the first time its role and size are seen).
  std::shared_ptr<std::vector<float>> shared(const std::string& role, std::int64_t elements,
                                             std::uint64_t seed);
};

/// One op kind on the CPU. The backend calls prepare once per op, then per launch run and (with --check)
/// verify on the op's stream thread.
struct CpuOpUnit {
  /// Allocates the op's buffers (random inputs from `seed`) and fills its kind's fields of CpuOp.
  void (*prepare)(CpuContext& context, CpuOp& op, std::uint64_t seed);
  /// Executes the op (an injected fault corrupts its result here).
  void (*run)(CpuContext& context, CpuOp& op);
  /// --check: compares the op's result with a reference and adds the comparison to context.checks.
  void (*verify)(CpuContext& context, CpuOp& op);
};

/// graph::OpKind::kGemm: OpenBLAS sgemm (cpu_gemm.cpp).
extern const CpuOpUnit kGemmUnit;
/// graph::OpKind::kAttention: GEMMs + softmax per (batch, head) (cpu_attention.cpp).
extern const CpuOpUnit kAttentionUnit;
/// graph::OpKind::kElementwise: norm, activation, softmax, the rest (cpu_elementwise.cpp).
extern const CpuOpUnit kElementwiseUnit;
/// graph::OpKind::kCollective: MPI all-reduce, all-gather, reduce-scatter, all-to-all (cpu_collective.cpp).
extern const CpuOpUnit kCollectiveUnit;
/// graph::OpKind::kSend and kRecv: MPI point-to-point (cpu_p2p.cpp).
extern const CpuOpUnit kPointToPointUnit;
/// graph::OpKind::kOptimizer: AdamW over the rank's shard (cpu_optimizer.cpp).
extern const CpuOpUnit kOptimizerUnit;

#ifdef CALO_EXEC_HAVE_MPI
/// Polls a non-blocking MPI request to completion, holding the MPI lock only while testing.
inline void wait_request(MPI_Request& request) {
  while (true) {
    int done = 0;
    {
      std::lock_guard lock(mpi_mutex());
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
    if (done != 0) return;
    sched_yield();
  }
}
#endif

}  // namespace calo::exec::cpu
