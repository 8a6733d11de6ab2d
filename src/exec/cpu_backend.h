// CPU backend: the graph's ops on the host with OpenBLAS (fp32 sgemm with the op's exact shapes, attention as
// GEMMs + softmax, AdamW over the rank's shard) and MPI for collectives and send/recv. Each graph stream runs
// on its own host thread, so communication overlaps compute where the graph lets it.
#pragma once

#include "exec/backend.h"

namespace calo::exec {

/// Adds the "cpu" backend to `registry` (available always; multi-rank needs MPI, see docs/EXECUTION.md).
void register_cpu_backend(BackendRegistry& registry);

/// Bytes of host memory the cpu backend's prepare() allocates for rank `rank` of `graph` (its operand
/// buffers, shared by role and size or an op's own), counted by the op units' own prepare without allocating.
OperandFootprint cpu_operand_footprint(const graph::Graph& graph, int rank);

/// Measured fp32 sgemm FLOP/s of one thread of this host (square GEMMs of `size`), used as the CPU peak.
double measure_sgemm_peak_flops(int size = 512, double min_seconds = 0.2);

}  // namespace calo::exec
