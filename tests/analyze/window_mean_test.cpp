// The sustained peak (hottest mean over any window of a piecewise-constant series), by hand, and on a real
// recording whose single readings scatter around the die's temperature.
#include "analyze/window_mean.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "../common/scratch.h"
#include "analyze/metrics.h"

namespace calo::analyze {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(WindowMeanPeak, IsTheHottestWindowNotTheHottestSample) {
  WindowMeanPeak peak(500 * kMs);
  // 50 C for 1 s, one 100 ms reading of 60 C, 52 C for 1 s.
  peak.add_segment(0, 1000 * kMs, 50);
  peak.add_segment(1000 * kMs, 1100 * kMs, 60);
  peak.add_segment(1100 * kMs, 2100 * kMs, 52);
  // The best window holds the 60 C reading and 400 ms of 52 C: (60 * 100 + 52 * 400) / 500.
  EXPECT_NEAR(peak.peak(), (60.0 * 100 + 52 * 400) / 500, 1e-9);
  EXPECT_NEAR(peak.mean(), (50.0 * 1000 + 60 * 100 + 52 * 1000) / 2100, 1e-9);
}

TEST(WindowMeanPeak, ASeriesShorterThanTheWindowHasNoPeak) {
  WindowMeanPeak peak(500 * kMs);
  peak.add_segment(0, 300 * kMs, 40);
  peak.add_segment(300 * kMs, 400 * kMs, 80);
  EXPECT_TRUE(std::isnan(peak.peak()));
  EXPECT_NEAR(peak.mean(), (40.0 * 300 + 80 * 100) / 400, 1e-9);
}

TEST(WindowMeanPeak, ARecordedRunsSustainedPeakIsBelowItsHottestReading) {
  // Fixture run mbs8 (one H100, 8 s): its 100 ms readings jump 53 -> 57 C at a steady 750 W; the hottest one
  // reads 59 C, the hottest 500 ms 57.6 C.
  const std::filesystem::path dir = calo::testing::scratch_path("window-mean");
  std::filesystem::create_directories(dir);
  const std::string command = "tar -xzf " + std::string(CALO_SOURCE_DIR) +
                              "/tests/fixtures/h100-runs/runs.tgz -C " + dir.string() + " runs/mbs8";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const RunAnalysis run = analyze_run(dir / "runs" / "mbs8");
  const DeviceMetrics* found = nullptr;
  for (const DeviceMetrics& device : run.device_metrics) {
    if (device.device.kind == store::DeviceKind::kGpu) found = &device;
  }
  ASSERT_NE(found, nullptr);
  const DeviceMetrics& gpu = *found;
  EXPECT_DOUBLE_EQ(gpu.temp_peak_c, 59);
  EXPECT_GT(gpu.temp_peak_500ms_c, gpu.temp_mean_c + 1);
  EXPECT_LT(gpu.temp_peak_500ms_c, gpu.temp_peak_c - 1);
  EXPECT_NEAR(gpu.temp_peak_500ms_c, 57.6, 0.5);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calo::analyze
