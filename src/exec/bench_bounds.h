// Bounds on the work `calo bench` is asked for, checked on the parent before any rank starts or any file is
// written: steps (and the op spans --trace-ops keeps for them) and local ranks against the host's cores and
// memory (docs/EXECUTION.md, "Bounds").
#pragma once

#include <cstdint>
#include <vector>

#include "exec/backend.h"
#include "exec/bench_options.h"
#include "graph/graph.h"

namespace calo::exec {

/// Most warm-up plus measured steps one bench runs (each keeps per-rank timings; a tiny model's step takes
/// ~1 ms, so ~2 minutes at the limit).
inline constexpr int kMaxBenchSteps = 100'000;

/// Most op spans --trace-ops keeps (graph ops x steps; ~90 bytes each in the run store, ~1.4 GB at the
/// limit).
inline constexpr std::int64_t kMaxBenchTracedSpans = 16'000'000;

/// Most local CPU ranks per host core (each rank is a process running its own BLAS thread).
inline constexpr int kMaxCpuRanksPerCore = 4;

/// Memory one CPU rank takes beside its model (the calo process, OpenBLAS buffers, the bootstrap), in bytes:
/// a tiny-dense rank peaked at 79 MB resident alone and 104 MB among 4 (2-core VM, 2026-12-07), rounded up.
inline constexpr double kCpuRankBaseBytes = 128.0 * (1 << 20);

/// Throws InputError naming --steps / --warmup (and --trace-ops) when they are below their minimum or the run
/// would exceed kMaxBenchSteps or kMaxBenchTracedSpans.
void check_bench_steps(const BenchOptions& options);

/// Throws InputError naming --nproc/--dp and --oversubscribe when `nproc` CPU ranks exceed
/// kMaxCpuRanksPerCore per core this process may run on, or their estimated memory (kCpuRankBaseBytes plus
/// the model's accounted bytes per rank) exceeds the host's available memory; nothing when `oversubscribe`.
void check_cpu_ranks(const BenchOptions& options, int nproc, bool oversubscribe);

/// Throws InputError when the operand buffers `factory`'s backend would allocate for the most demanding of
/// `ranks` of `graph` (BackendFactory::operand_footprint, counted without allocating) exceed
/// kUsableMemoryFraction of `device`'s memory (for the CPU backend the host's memory per local rank or the
/// address-space limit's headroom): the figure, its largest parts and the flags that shrink them. Nothing
/// for a backend that cannot count its operands.
void check_operands_fit(const BackendFactory& factory, const graph::Graph& graph,
                        const std::vector<int>& ranks, const DeviceDescription& device);

/// check_operands_fit on the parent before `nproc` local ranks start: the graph of `options` and every
/// rank against the device factory.describe gives; nothing for one rank (it checks itself before
/// preparing, set_up_rank) or a backend without describe / operand_footprint.
void check_launch_operands(const BackendFactory& factory, const BenchOptions& options, int nproc);

/// The host's available memory in bytes (MemAvailable; the physical memory where the kernel has no such
/// line).
double available_host_bytes();

/// Address space this process may still map under RLIMIT_AS, in bytes; infinity without a limit.
double address_space_headroom_bytes();

}  // namespace calo::exec
