// `calo bench --memory real`: what training allocates, replayed on the device in the order the step runs.
//
// The backends compute on shared operand buffers and keep nothing between forward and backward
// (docs/EXECUTION.md), so on their own they hold far less than training does. The ledger lists, for one
// rank's materialized program, the allocations a trainer makes and frees around its ops (docs/METRICS.md,
// "Memory per GPU"): the state kept between steps, each layer's activations of a micro-batch from its first
// forward op until its backward has run (a chunk's embedding or output ones over the chunk's whole forward
// and backward), what recomputation rebuilds for one layer's backward, FSDP's gathered units until their pass
// is done with them, a unit's gradients from its backward until their reduce-scatter, and the pytorch
// trainer's loss backward. The executor performs them through Backend::hold / release on the op's stream, so
// their peak is the one the schedule really reaches on the device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "parallel/memory.h"

namespace calo::exec {

/// One allocation or free of the ledger, tied to an op of the program.
struct LedgerAction {
  std::int32_t op_index = 0;  ///< the op it goes with (index in the materialized program)
  bool before_op = true;      ///< enqueued before the op's launch (else after it), on the op's stream
  bool hold = true;           ///< allocate (else free)
  std::int32_t slot = 0;      ///< pairs a free with its allocation
  std::int64_t bytes = 0;     ///< bytes allocated (holds only)
  std::string what;           ///< what the bytes are, for messages (holds only)
};

/// The allocations of one rank's step, in launch order, plus the state it keeps across steps.
struct MemoryLedger {
  std::int64_t state_bytes = 0;       ///< held from prepare to the end (weights, gradients, optimizer)
  std::vector<LedgerAction> actions;  ///< sorted by (op_index, before_op first)
  std::int32_t slots = 0;             ///< distinct slots of one step (slot `slots` is the state's)
  /// Bytes the ledger holds at its peak, replayed in launch order on one timeline (streams serialized).
  std::int64_t serial_peak_bytes = 0;
};

/// The ledger of materialized program `ops` of a rank of `stage`, sizes from parallel::holdings_for_stage
/// (throws InputError where those refuse the layout).
MemoryLedger build_memory_ledger(const std::vector<graph::RankOp>& ops, const model::ModelSpec& model,
                                 const parallel::Layout& layout, int stage);

/// Free device memory `calo bench --memory real` leaves beside its holds for what is made later (NCCL's
/// lazily made buffers, the pool's 2 MiB granularity) when it has to carve (operands_to_carve).
inline constexpr std::int64_t kLedgerHeadroomBytes = std::int64_t{1} << 30;

/// Bytes of the backend's own operand buffers (`operand_bytes`, beyond the optimizer's state) that must stand
/// in for held bytes so that `to_hold` more fits beside `in_use_bytes` on a device of `device_bytes` with
/// kLedgerHeadroomBytes to spare: 0 when it fits as it is. Throws InputError (naming rank `rank`, `--memory
/// model` and the other fixes) when even every operand byte would not make room.
std::int64_t operands_to_carve(std::int64_t in_use_bytes, std::int64_t to_hold, std::int64_t operand_bytes,
                               double device_bytes, int rank);

/// `ledger` with `carved_bytes` that the backend already allocated standing in for held bytes: the state is
/// carved first (it is held throughout), then each hold in launch order takes what is left of the carve, and
/// a free gives its share back to the live holds (each re-held smaller), so that at every point the ledger
/// holds max(0, what `ledger` holds - carved_bytes). serial_peak_bytes is the carved ledger's replayed peak;
/// a hold carved whole has no actions.
MemoryLedger carve_ledger(const MemoryLedger& ledger, std::int64_t carved_bytes);

}  // namespace calo::exec
