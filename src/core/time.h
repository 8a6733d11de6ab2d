// Time base: nanoseconds on the host's monotonic clock, and wall-clock offsets for merging hosts.
#pragma once

#include <cstdint>

namespace calo::core {

/// Nanoseconds on CLOCK_MONOTONIC (never jumps; comparable within one host boot).
int64_t monotonic_ns();

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME.
int64_t wall_ns();

/// One instant on both clocks: the origin of a run (t_ns = 0) and its wall-clock time.
struct TimeOrigin {
  int64_t monotonic_ns = 0;  ///< CLOCK_MONOTONIC at the instant (run.started_ns)
  int64_t wall_ns = 0;       ///< CLOCK_REALTIME at the same instant (run.wall_offset_ns)
};

/// Reads both clocks at (nearly) one instant: the wall clock between two monotonic reads, matched to their
/// midpoint.
TimeOrigin time_origin_now();

/// CPU time (user + system) the calling thread has used, in ns (CLOCK_THREAD_CPUTIME_ID).
int64_t thread_cpu_ns();

}  // namespace calo::core
