// Bounds on the work `calo bench` is asked for, checked on the parent before any rank starts or any file is
// written: steps (and the op spans --trace-ops keeps for them) and local ranks against the host's cores and
// memory (docs/EXECUTION.md, "Bounds").
#pragma once

#include <cstdint>

#include "exec/bench.h"

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

/// The host's available memory in bytes (MemAvailable; the physical memory where the kernel has no such
/// line).
double available_host_bytes();

/// Address space this process may still map under RLIMIT_AS, in bytes; infinity without a limit.
double address_space_headroom_bytes();

}  // namespace calo::exec
