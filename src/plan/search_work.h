// What a layout search tracks while it runs: its progress weighted by estimated work, and its stop at
// --max-minutes. The estimate's formula (estimated_search_s) lives beside them in search_work.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <mutex>

#include "plan/search.h"

namespace calo::plan {

/// Progress reporting shared by the workers (callback serialised), weighted by work: the total starts as
/// the estimate (each step's expected work) and each finished step replaces its expected work by the work
/// it took (an evaluation pruned by the bound took none), so the time left follows the estimate and adapts.
class Progress {
 public:
  /// A search of `steps` bounds and evaluations expected to take `expected_work_s` (one thread's seconds).
  Progress(const SearchRequest& request, std::size_t steps, double expected_work_s) : request_(request) {
    state_.steps_total = steps;
    state_.work_total_s = expected_work_s;
  }
  /// One step done: it was expected to take `expected_s` and took `done_s` (estimated seconds).
  void step(double expected_s, double done_s) {
    std::lock_guard lock(mutex_);
    ++state_.steps_done;
    state_.work_done_s += done_s;
    state_.work_total_s += done_s - expected_s;
    if (request_.progress) request_.progress(state_);
  }

 private:
  const SearchRequest& request_;
  SearchProgress state_;
  std::mutex mutex_;
};

/// The search's stop at --max-minutes: an evaluation is not started when it would end past the limit, its
/// length the estimate scaled by how the finished ones compared with theirs.
class Deadline {
 public:
  /// Counts from `started`; `limit_s` <= 0: no limit.
  Deadline(std::chrono::steady_clock::time_point started, double limit_s)
      : started_(started), limit_s_(limit_s) {}
  /// Whether work estimated at `expected_s` (one thread) would end past the limit if started now.
  bool passed(double expected_s) const {
    if (limit_s_ <= 0) return false;
    std::lock_guard lock(mutex_);
    const double scale = finished_ >= 3 && expected_sum_s_ > 0 ? taken_sum_s_ / expected_sum_s_ : 1.0;
    return elapsed_s() + expected_s * std::max(1.0, scale) > limit_s_;
  }
  /// Work estimated at `expected_s` took `taken_s` of a thread's wall time.
  void finished(double expected_s, double taken_s) {
    std::lock_guard lock(mutex_);
    ++finished_;
    expected_sum_s_ += expected_s;
    taken_sum_s_ += taken_s;
  }
  /// Seconds since the search started.
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }

 private:
  std::chrono::steady_clock::time_point started_;
  double limit_s_;
  mutable std::mutex mutex_;
  int finished_ = 0;
  double expected_sum_s_ = 0;
  double taken_sum_s_ = 0;
};

}  // namespace calo::plan
