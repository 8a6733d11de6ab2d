// Time base: nanoseconds on the host's monotonic clock, and wall-clock offsets for merging hosts.
#pragma once

#include <cstdint>

namespace calo::core {

/// Nanoseconds on CLOCK_MONOTONIC (never jumps; comparable within one host boot).
int64_t monotonic_ns();

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME.
int64_t wall_ns();

/// CPU time (user + system) the calling thread has used, in ns (CLOCK_THREAD_CPUTIME_ID).
int64_t thread_cpu_ns();

}  // namespace calo::core
