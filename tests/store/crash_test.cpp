// Crash safety, for real: a child process writes samples continuously, is SIGKILLed, and the run store must
// open cleanly and hold every sample except at most the last commit interval (1 s by default, as in
// DESIGN.md).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "core/time.h"
#include "store/run_store.h"
#include "temp_dir.h"

namespace calo::store {
namespace {

using testing::TempDir;

struct KilledRun {
  int64_t kill_t_ns = 0;  // kill time on the run's time base
  int wait_status = 0;
};

// Starts store_crash_writer, waits until it has written for `run_ms`, SIGKILLs it, reaps it.
KilledRun run_and_kill(const std::filesystem::path& run_dir, int commit_interval_ms, int run_ms) {
  int ready_pipe[2];
  EXPECT_EQ(pipe(ready_pipe), 0);
  pid_t child = fork();
  if (child == 0) {
    dup2(ready_pipe[1], STDOUT_FILENO);
    close(ready_pipe[0]);
    std::string interval = std::to_string(commit_interval_ms);
    execl(CALO_STORE_CRASH_WRITER, CALO_STORE_CRASH_WRITER, run_dir.c_str(), interval.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready_pipe[1]);
  char ready[6] = {};
  EXPECT_EQ(read(ready_pipe[0], ready, 5), 5) << "crash writer did not start";
  EXPECT_STREQ(ready, "ready");
  close(ready_pipe[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(run_ms));
  int64_t kill_ns = core::monotonic_ns();
  EXPECT_EQ(kill(child, SIGKILL), 0);
  KilledRun killed;
  EXPECT_EQ(waitpid(child, &killed.wait_status, 0), child);
  killed.kill_t_ns = kill_ns;
  return killed;
}

void expect_intact_after_kill(int commit_interval_ms, int run_ms) {
  TempDir temp;
  std::filesystem::path run_dir = temp.path() / "run";
  KilledRun killed = run_and_kill(run_dir, commit_interval_ms, run_ms);
  ASSERT_TRUE(WIFSIGNALED(killed.wait_status));
  ASSERT_EQ(WTERMSIG(killed.wait_status), SIGKILL);

  RunReader reader(run_dir);  // opens cleanly (SQLite recovers the WAL of the dead writer)
  RunInfo info = reader.run();
  EXPECT_EQ(info.ended_ns, 0) << "the killed writer never finished";
  int64_t kill_t_ns = killed.kill_t_ns - info.started_ns;
  std::optional<MetricInfo> metric = reader.find_metric("sequence");
  ASSERT_TRUE(metric.has_value());
  for (int32_t device : {0, 1}) {
    std::vector<Sample> samples = reader.samples(device, metric->id);
    ASSERT_FALSE(samples.empty()) << "device " << device;
    // Every committed sample is there, in order, without holes: values are 0, 1, 2, ...
    for (std::size_t index = 0; index < samples.size(); ++index) {
      ASSERT_DOUBLE_EQ(samples[index].value, static_cast<double>(index)) << "device " << device << " hole";
    }
    // Only the tail after the last commit is lost: at most one commit interval (+ scheduling slack).
    int64_t lost_ns = kill_t_ns - samples.back().t_ns;
    EXPECT_GE(lost_ns, 0);
    EXPECT_LE(lost_ns, (commit_interval_ms + 250) * 1'000'000LL)
        << "device " << device << ": " << samples.size() << " samples, last at " << samples.back().t_ns
        << " ns, kill at " << kill_t_ns << " ns";
  }
  // The database itself is consistent.
  EXPECT_GT(reader.sample_count(), 0);
}

TEST(RunStoreCrash, SigkillLosesAtMostTheLastSecond) {
  expect_intact_after_kill(1000, 3300);
}

TEST(RunStoreCrash, SigkillWithShortCommitIntervalLosesLess) {
  expect_intact_after_kill(100, 1200);
}

}  // namespace
}  // namespace calo::store
