// calo record's step statistics leave unmarked warm-up out (core::leading_warmup_steps) and count it.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "telemetry/recorder.h"

namespace calo::telemetry {
namespace {

TEST(StepWarmup, RecordsStepStatisticsLeaveTheWarmupOut) {
  std::vector<std::pair<double, int64_t>> spans(30, {116.7, 1});
  spans[0] = {3300, 1};
  const StepStats stats = step_stats(0, spans);
  EXPECT_EQ(stats.warmup_steps, 1);
  EXPECT_EQ(stats.steps, 29);
  EXPECT_NEAR(stats.mean_ms, 116.7, 1e-9);
  EXPECT_NEAR(stats.max_ms, 116.7, 1e-9);
}

}  // namespace
}  // namespace calo::telemetry
