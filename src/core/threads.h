// Running one piece of work on several threads at once, and keeping the first exception any of them threw.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace calo::core {

/// The first exception captured from any thread (capture() in a catch block), rethrown once all are done.
class FirstException {
 public:
  /// Keeps the exception being handled unless one is already kept.
  void capture() {
    std::lock_guard lock(mutex_);
    if (!first_) first_ = std::current_exception();
  }
  /// Rethrows the kept exception, if any.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

/// Runs `work()` on up to `threads` threads at once, the calling thread among them, and waits for all of
/// them. Where the system cannot start another thread (out of memory for its stack, a process limit), the
/// work runs on those already started: `work` takes items from a shared queue, so fewer threads finish it too
/// (an unjoined std::thread on the throw path would end the process in std::terminate).
template <typename Work>
void run_on_threads(int threads, const Work& work) {
  std::vector<std::thread> pool;
  try {
    for (int thread = 1; thread < threads; ++thread) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads: run with those started
  }
  work();
  for (auto& thread : pool) thread.join();
}

/// Most threads a --jobs flag accepts (plan, report, sweep): beyond it a run only adds stacks.
inline constexpr int kMaxJobs = 1024;

/// Runs `work(index)` for index 0..count-1 on `threads` threads (items taken in index order); rethrows the
/// first exception once every thread is done.
template <typename Work>
void parallel_for(std::size_t count, int threads, Work&& work) {
  std::atomic<std::size_t> next{0};
  FirstException failure;
  run_on_threads(threads, [&] {
    for (std::size_t index = next++; index < count; index = next++) {
      try {
        work(index);
      } catch (...) {
        failure.capture();
      }
    }
  });
  failure.rethrow();
}

}  // namespace calo::core
