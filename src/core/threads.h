// Running one piece of work on several threads at once, and keeping the first exception any of them threw.
#pragma once

#include <exception>
#include <mutex>
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

/// Runs `work()` on `threads` threads at once, the calling thread among them, and waits for all of them.
template <typename Work>
void run_on_threads(int threads, const Work& work) {
  std::vector<std::thread> pool;
  for (int thread = 1; thread < threads; ++thread) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
}

}  // namespace calo::core
