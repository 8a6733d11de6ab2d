#include "core/time.h"

#include <ctime>

namespace calo::core {

namespace {
int64_t read_clock_ns(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec;
}
}  // namespace

int64_t monotonic_ns() {
  return read_clock_ns(CLOCK_MONOTONIC);
}

int64_t wall_ns() {
  return read_clock_ns(CLOCK_REALTIME);
}

TimeOrigin time_origin_now() {
  const int64_t before_ns = monotonic_ns();
  const int64_t wall = wall_ns();
  const int64_t after_ns = monotonic_ns();
  return {before_ns + (after_ns - before_ns) / 2, wall};
}

int64_t thread_cpu_ns() {
  return read_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

}  // namespace calo::core
