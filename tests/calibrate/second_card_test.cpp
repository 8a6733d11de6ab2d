// Calibration beyond the first H100s: an H200 (tests/fixtures/h200-traceops) fitted and validated on its own
// runs, and the shipped H100 preset on a third and a fourth H100 it never saw
// (tests/fixtures/h100-traceops-c, h100-sweep-d), their twins simulated with `calo sim --from` and rated by
// `calo compare`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "calibrate/calibrate.h"
#include "fixture_runs.h"
#include "issue_targets.h"
#include "sim/cluster.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::compare_figures;
using calo::testing::Compared;
using calo::testing::expect_issue_targets;
using calo::testing::h200_runs;
using calo::testing::Outcome;
using calo::testing::run_calo;
using calo::testing::unpack_fixture;

std::vector<fs::path> runs_of(const fs::path& dir) {
  std::vector<fs::path> runs;
  for (const char* name : {"tmbs1", "tmbs2", "tmbs4", "tmbs8", "t8k", "t4k", "soak"})
    runs.push_back(dir / name);
  return runs;
}

TEST(SecondCard, TheH200RunsMeetEveryTargetHeldOutAndShipAsAPreset) {
  // Seven H200 runs (micro-batch 1-8 at 2K tokens, 4K, 8K, and 300 steps of 8K for the heat), with the
  // controller fitted to the H200's controller probe and held: every target of the calibration issue met held
  // out (step 1.4 %, energy 2.5 %, mean 2.1 %, peak 3.4 %, 2.5 C), and the micro-batch steps (798 -> 819 ->
  // 872
  // -> 900 W) all move the measured way.
  CalibrateOptions options;
  options.controller_probe = calo::testing::h200_probe_runs() / "probe";
  const Calibration calibration = calibrate(runs_of(h200_runs()), "h200-hgx", options);
  EXPECT_NEAR(calibration.fit.cluster.gpu.power_control.response_s, 0.105, 0.02);
  ASSERT_EQ(calibration.held_out.size(), 7u);
  expect_issue_targets(calibration);
  EXPECT_EQ(calibration.direction_pairs, 3);
  EXPECT_EQ(calibration.direction_right, 3);
  // data/clusters/h200-hgx-calibrated.yaml is this fit (docs/SIMULATOR.md gives the command).
  const sim::ClusterSpec preset = sim::load_cluster("h200-hgx-calibrated");
  const sim::GpuSpec& fitted = calibration.fit.cluster.gpu;
  for (int power_class = 0; power_class < sim::kNumPowerClasses; ++power_class)
    EXPECT_NEAR(preset.gpu.active_power_w[power_class], fitted.active_power_w[power_class], 1e-6);
  EXPECT_NEAR(preset.gpu.power_control.response_s, fitted.power_control.response_s, 1e-9);
  EXPECT_NEAR(preset.gpu.efficiency.attention_max, fitted.efficiency.attention_max, 1e-9);
  EXPECT_NEAR(preset.gpu.thermal.r_die_k_per_w, fitted.thermal.r_die_k_per_w, 1e-9);
}

/// `run`'s twin on h100-hgx-calibrated, rated against it (fixture_runs.h, twin_on).
std::map<std::string, Compared> twin_on_preset(const fs::path& run, const fs::path& twin,
                                               std::string* sim_output = nullptr) {
  return calo::testing::twin_on("h100-hgx-calibrated", run, twin, sim_output);
}

TEST(SecondCard, TheH100PresetOnAThirdCardItNeverSaw) {
  // Card GPU-6e4e72a2 ran the trace-ops commands 2-3 % slower and hotter (72 C after 300 steps) than the
  // cards the preset's compute was fitted on. Its twins on the preset refitted to the one energy figure
  // (2026-12-06; the earlier fit in brackets): mean step -3.5 ... +0.2 % (-4.2 ... -0.8 %), energy per step
  // -3.1 ... +0.3 % (-4.7 ... -2.5 %), mean power within 1.7 %, peak within 4.2 %
  // (docs/measurements/calibration-log.md, "A third H100"). Its soak is one of the preset's thermal runs, so
  // for heat alone the twins take the card's scale.
  const fs::path runs = unpack_fixture("h100-traceops-c");
  const fs::path out = calo::testing::scratch_path("card-c-twins");
  for (const fs::path& run : runs_of(runs)) {
    std::string sim_output;
    auto figures = twin_on_preset(run, out / run.filename(), &sim_output);
    EXPECT_NE(sim_output.find("GPU-6e4e72a2-dbfd-b80e-18bb-525420abb8a5: thermal R x 1.074 (fitted by the "
                              "cluster's calibration)"),
              std::string::npos)
        << "the card of a thermal run takes its fitted heat: " << sim_output;
    const double step = figures["step_time_mean_s"].error;
    EXPECT_LT(step, 0.01) << run.filename() << ": this card is no faster than the fitted ones";
    EXPECT_GT(step, -0.045) << run.filename();
    EXPECT_LE(std::fabs(figures["energy_per_step_j"].error), 0.035) << run.filename();
    EXPECT_LE(std::fabs(figures["power_gpu_mean_w"].error), 0.02) << run.filename();
    EXPECT_LE(std::fabs(figures["power_gpu_peak_w"].error), 0.05) << run.filename();
  }
  fs::remove_all(out);
}

TEST(SecondCard, TheH100PresetFollowsAFourthCardsMicroBatchSweepOfTwentySteps) {
  // Card GPU-6e7e205b (idle at 53 C, 81 C by the end), micro-batch 1-8 at 2K tokens with 20 measured steps
  // each: the measured peak rises 827 -> 909.5 -> 909.5 -> 946 W, the preset's twins 850 -> 841 -> 859 -> 942
  // W (eighth fit). The peak rises over the sweep in both, but the twins' first step falls (a reported miss:
  // the fitted model's micro-batch 1 -> 2 step, docs/SIMULATOR.md "Seventh fit"); every twin is within 8 % of
  // it, mean power within 1 %. On the preset refitted to the one energy figure (2026-12-06) the median step
  // is -1.6 ... 0.0 % (eighth fit: -2.4 ... -1.4 %, fast) and energy per step -2.6 ... +0.2 % (-4.3 ... -2.6
  // %).
  const fs::path runs = unpack_fixture("h100-sweep-d");
  const fs::path out = calo::testing::scratch_path("card-d-twins");
  std::vector<Compared> peaks;
  for (const char* name : {"lmbs1", "lmbs2", "lmbs4", "lmbs8"}) {
    auto figures = twin_on_preset(runs / name, out / name);
    ASSERT_TRUE(figures.count("power_gpu_peak_w") && figures.count("power_gpu_mean_w") &&
                figures.count("step_time_p50_s"))
        << name;
    EXPECT_LE(std::fabs(figures["power_gpu_peak_w"].error), 0.08) << name;
    EXPECT_LE(std::fabs(figures["power_gpu_mean_w"].error), 0.015) << name;
    EXPECT_LE(std::fabs(figures["energy_per_step_j"].error), 0.03) << name;
    EXPECT_LT(figures["step_time_p50_s"].error, 0.01)
        << name << ": this card is no faster than the fitted ones";
    EXPECT_GT(figures["step_time_p50_s"].error, -0.025) << name;
    peaks.push_back(figures["power_gpu_peak_w"]);
  }
  ASSERT_EQ(peaks.size(), 4u);
  EXPECT_GT(peaks.back().measured, peaks.front().measured * 1.10)
      << "measured: micro-batch 8 peaks 14 % above 1";
  EXPECT_GT(peaks.back().simulated, peaks.front().simulated * 1.05)
      << "simulated: the peak rises over the sweep";
  EXPECT_LT(std::fabs(peaks[1].simulated - peaks[0].simulated), 10.0) << "the first step: flat, not rising";
  for (std::size_t step = 2; step < peaks.size(); ++step)
    EXPECT_GT(peaks[step].simulated, peaks[step - 1].simulated) << "simulated peak at step " << step;
  fs::remove_all(out);
}

TEST(SecondCard, TheH100PresetOnTwoCardsMadeAfterItsRefit) {
  // Cards GPU-6936de69 (fixture f) and GPU-b842806c (g), measured the day the preset was refitted to the one
  // energy figure (2026-12-06), in no fit. Twins on the preset: median step -2.2 ... +1.5 %, energy per step
  // -3.3 ... +1.4 % (the eighth fit: -3.0 ... 0.0 % and -4.9 ... -1.3 %), mean power within 2.4 %, peak 5.1
  // %.
  for (const char* fixture : {"h100-traceops-f", "h100-traceops-g"}) {
    const fs::path runs = unpack_fixture(fixture);
    const fs::path out = calo::testing::scratch_path(std::string(fixture) + "-twins");
    for (const char* name : {"tmbs1", "tmbs2", "tmbs4", "tmbs8", "t8k", "t4k"}) {
      auto figures = twin_on_preset(runs / name, out / name);
      ASSERT_TRUE(figures.count("step_time_p50_s") && figures.count("energy_per_step_j")) << fixture << name;
      EXPECT_LE(std::fabs(figures["step_time_p50_s"].error), 0.025) << fixture << " " << name;
      EXPECT_LE(std::fabs(figures["energy_per_step_j"].error), 0.035) << fixture << " " << name;
      EXPECT_LE(std::fabs(figures["power_gpu_mean_w"].error), 0.03) << fixture << " " << name;
      EXPECT_LE(std::fabs(figures["power_gpu_peak_w"].error), 0.06) << fixture << " " << name;
    }
    fs::remove_all(out);
  }
}

}  // namespace
}  // namespace calo::calibrate
