// No process calo starts outlives it: `calo bench` killed with SIGKILL takes its local ranks (and the
// launcher between, mpirun where MPI is built) with it. A guard: this held before the keeper too (mpirun ends
// its ranks on the SIGTERM it got). calo record's and calo sweep's trees, which did not, are tested in their
// suites (tests/telemetry/integration/record_test.cpp, tests/campaign/campaign_test.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../common/processes.h"
#include "../common/scratch.h"

namespace {

TEST(ProcessTree, SigkillOfCaloBenchEndsItsLocalRanks) {
  const std::string out = calo::testing::scratch_path("bench-tree").string();
  const pid_t bench = fork();
  ASSERT_GE(bench, 0);
  if (bench == 0) {
    execl(CALO_EXECUTABLE, "calo", "bench", "--backend", "cpu", "--model", "tiny-dense", "--tp", "2", "--gbs",
          "2", "--steps", "200", "--no-progress", "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<pid_t> tree;  // the ranks (named calo, as calo bench itself) with keepers and any launcher
  const auto ranks = [&tree] {
    return std::count_if(tree.begin(), tree.end(),
                         [](pid_t pid) { return calo::testing::process_name(pid) == "calo"; });
  };
  for (int attempt = 0; attempt < 1500 && ranks() < 2; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    tree = calo::testing::descendants(bench);
  }
  tree = calo::testing::descendants(bench);
  kill(bench, SIGKILL);
  waitpid(bench, nullptr, 0);
  ASSERT_GE(ranks(), 2) << "the ranks did not start";
  const std::vector<pid_t> left = calo::testing::wait_gone(tree, 5.0);
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) outlived the killed calo bench, e.g. "
                            << (left.empty() ? "" : calo::testing::process_name(left[0]));
  calo::testing::kill_all(left);
}

}  // namespace
