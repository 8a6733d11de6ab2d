// Child process for the SIGKILL crash test: writes a numbered sample every ~20 µs into RUN_DIR until killed.
// Usage: store_crash_writer RUN_DIR COMMIT_INTERVAL_MS. Prints "ready" once the run exists.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/time.h"
#include "store/run_store.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s RUN_DIR COMMIT_INTERVAL_MS\n", argv[0]);
    return 2;
  }
  calo::store::RunInfo info;
  info.kind = calo::store::RunKind::kRecord;
  info.name = "crash";
  info.started_ns = calo::core::monotonic_ns();
  info.wall_offset_ns = calo::core::wall_ns();
  calo::store::WriterOptions options;
  options.commit_interval_ns = std::stoll(argv[2]) * 1'000'000;
  calo::store::RunWriter writer(argv[1], info, options);
  writer.add_device(calo::store::DeviceInfo{});
  int32_t metric = writer.metric_id("sequence", "count", calo::store::MetricKind::kCounter);
  // A second writer thread proves concurrent appends survive too: it writes device 1.
  std::thread other([&] {
    for (int64_t sequence = 0;; ++sequence) {
      writer.append(calo::store::Sample{1, metric, calo::core::monotonic_ns() - info.started_ns,
                                        static_cast<double>(sequence), calo::store::kNoSensorTime});
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  writer.flush();
  std::printf("ready\n");
  std::fflush(stdout);
  for (int64_t sequence = 0;; ++sequence) {
    writer.append(calo::store::Sample{0, metric, calo::core::monotonic_ns() - info.started_ns,
                                      static_cast<double>(sequence), calo::store::kNoSensorTime});
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}
