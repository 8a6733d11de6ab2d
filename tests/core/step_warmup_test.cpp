// Unmarked warm-up: the leading steps over 2x the median, at most a quarter, only from 5 steps on.
#include "core/step_warmup.h"

#include <gtest/gtest.h>

#include <vector>

namespace calo::core {
namespace {

TEST(StepWarmup, LeadingStepsOverTwiceTheMedianAtMostAQuarter) {
  // The DDP job: a 3.3 s first step, then ~117 ms steps.
  std::vector<double> steps_ms(30, 116.7);
  steps_ms[0] = 3300;
  EXPECT_EQ(leading_warmup_steps(steps_ms), 1u);
  steps_ms[1] = 900;
  steps_ms[2] = 200;  // below 2x the median: the warm-up ends before it
  steps_ms[3] = 3000;
  EXPECT_EQ(leading_warmup_steps(steps_ms), 2u);
  // Never more than a quarter, never with fewer than 5 steps, never a slow step in the middle.
  EXPECT_EQ(leading_warmup_steps(std::vector<double>{900, 900, 900, 100, 100, 100, 100, 100}), 2u);
  EXPECT_EQ(leading_warmup_steps(std::vector<double>{3300, 100, 100, 100}), 0u);
  EXPECT_EQ(leading_warmup_steps(std::vector<double>{100, 3300, 100, 100, 100, 100}), 0u);
  EXPECT_EQ(leading_warmup_steps(std::vector<double>{}), 0u);
}

}  // namespace
}  // namespace calo::core
