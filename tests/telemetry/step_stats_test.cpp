// calo record's step statistics leave unmarked warm-up out (core::leading_warmup_steps) and count it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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

TEST(StepWarmup, RecordJsonSaysHowManyWarmupStepsWereSetApart) {
  std::vector<std::pair<double, int64_t>> spans(30, {116.7, 1});
  spans[0] = {3300, 1};
  RecordResult result;
  result.steps.push_back(step_stats(0, spans));
  DeviceSummary device;
  device.device_idx = 2;
  device.peak_power_sampled_w = 612.5;
  result.devices.push_back(device);
  const nlohmann::json json = to_json(result);
  EXPECT_EQ(json.at("steps")[0].at("warmup_steps"), 1);
  EXPECT_EQ(json.at("steps")[0].at("steps"), 29);
  EXPECT_EQ(json.at("devices")[0].at("device_idx"), 2);
  EXPECT_EQ(json.at("devices")[0].at("peak_power_sampled_w"), 612.5);
  EXPECT_TRUE(json.at("sampler").is_array());
}

}  // namespace
}  // namespace calo::telemetry
