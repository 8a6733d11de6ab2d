// Stages of `calo bench` with logic of their own (exec/bench_stages.h): the job's steps on rank 0's clock
// when ranks run on hosts with different clock relations, and the verification of every rank's op counts and
// --check results (from a real single-rank execution on the CPU backend).
#include "exec/bench_stages.h"

#include <gtest/gtest.h>

#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "exec/executor.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

// One rank as the ranks all-gather it: its host's wall - monotonic relation and its steps' raw monotonic
// times.
nlohmann::json rank_steps(int rank, const std::string& host, std::int64_t wall_at_monotonic_zero_ns,
                          const std::vector<std::pair<std::int64_t, std::int64_t>>& steps) {
  nlohmann::json data;
  data["rank"] = rank;
  data["host"] = host;
  data["wall_at_monotonic_zero_ns"] = wall_at_monotonic_zero_ns;
  data["steps"] = nlohmann::json::array();
  for (const auto& [begin_ns, end_ns] : steps) data["steps"].push_back({begin_ns, end_ns});
  return data;
}

TEST(BenchStages, JobStepsSpanAllRanksOnRankZerosClock) {
  // Host a booted at wall 1000 s, host b at wall 1250 s: b's monotonic clock reads 250 s less at any instant.
  const std::int64_t boot_a = 1000 * kSecond;
  const std::int64_t boot_b = 1250 * kSecond;
  // Every step begins at wall 2000 s + step and lasts 0.5 s on rank 0, 0.7 s on rank 1 (a), 0.9 s on rank 2
  // (b).
  auto steps_of = [&](std::int64_t boot_ns, std::int64_t length_ns) {
    std::vector<std::pair<std::int64_t, std::int64_t>> steps;
    for (int step = 0; step < 3; ++step) {
      const std::int64_t begin = 2000 * kSecond + step * kSecond - boot_ns;
      steps.emplace_back(begin, begin + length_ns);
    }
    return steps;
  };
  const std::vector<nlohmann::json> ranks = {rank_steps(0, "a", boot_a, steps_of(boot_a, kSecond / 2)),
                                             rank_steps(1, "a", boot_a, steps_of(boot_a, 7 * kSecond / 10)),
                                             rank_steps(2, "b", boot_b, steps_of(boot_b, 9 * kSecond / 10))};
  const LeaderClock clock(ranks);
  EXPECT_EQ(clock.leader_host(), "a");
  EXPECT_EQ(clock(ranks[2], 10 * kSecond), 10 * kSecond + 250 * kSecond);
  EXPECT_EQ(clock(ranks[1], 10 * kSecond), 10 * kSecond);
  const JobSteps job = job_steps(ranks, clock, 1, 3);
  ASSERT_EQ(job.begin_ns.size(), 3u);
  EXPECT_EQ(job.begin_ns[1], 2001 * kSecond - boot_a);
  EXPECT_EQ(job.end_ns[1], 2001 * kSecond - boot_a + 9 * kSecond / 10);  // rank 2 ends last
  ASSERT_EQ(job.warmup_s.size(), 1u);
  ASSERT_EQ(job.measured_s.size(), 2u);
  EXPECT_DOUBLE_EQ(job.measured_s[0], 0.9);
}

TEST(BenchStages, VerifyRanksFindsAnOpCountThatIsOff) {
  const model::ModelSpec spec = model::load_model("tiny-dense");
  const parallel::Layout layout = parallel::resolve_layout(spec, parallel::Layout{});
  const graph::Graph graph = graph::build_graph(spec, layout);
  BackendConfig config;
  config.check = true;
  auto backend = BackendRegistry::instance().select("cpu").create(config);
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(graph, 0, *bootstrap);
  nlohmann::json data;
  data["rank"] = 0;
  {
    Executor executor(*backend, graph, 0, {});
    executor.prepare();
    for (int step = 0; step < 2; ++step) executor.run_step(*bootstrap);
    const OpCounts expected = executor.ops_per_step();
    data["expected_per_step"] = std::vector<std::int64_t>(expected.begin(), expected.end());
  }
  const OpCounts executed = backend->executed_op_counts();
  const CheckReport check = backend->check_report();
  data["executed"] = std::vector<std::int64_t>(executed.begin(), executed.end());
  data["check"] = {{"ops_checked", check.ops_checked},
                   {"values_checked", check.values_checked},
                   {"wrong", check.wrong},
                   {"first_failures", check.first_failures}};
  const Verification good = verify_ranks({data}, graph, 2);
  EXPECT_TRUE(good.count_problems.empty());
  EXPECT_EQ(good.wrong, 0);
  EXPECT_GT(good.values_checked, 0);
  EXPECT_EQ(good.ops_checked, check.ops_checked);
  // Three steps claimed, two run: every op kind with ops is off.
  const Verification off = verify_ranks({data}, graph, 3);
  ASSERT_FALSE(off.count_problems.empty());
  EXPECT_NE(off.count_problems[0].find("rank 0: "), std::string::npos) << off.count_problems[0];
}

}  // namespace
}  // namespace calo::exec
