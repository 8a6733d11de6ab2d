#include "analyze/metrics.h"

#include <gtest/gtest.h>

#include "analyze/compare.h"
#include "synthetic_run.h"

namespace calo::analyze {
namespace {

TEST(Distribution, NearestRank) {
  std::vector<double> values = {5, 1, 4, 2, 3};
  auto stats = distribution_of(values);
  EXPECT_EQ(stats.count, 5);
  EXPECT_DOUBLE_EQ(stats.mean, 3.0);
  EXPECT_DOUBLE_EQ(stats.p50, 3.0);
  EXPECT_DOUBLE_EQ(stats.p99, 5.0);
  EXPECT_DOUBLE_EQ(stats.min, 1.0);
  std::vector<double> empty;
  EXPECT_TRUE(std::isnan(distribution_of(empty).mean));
}

// Every expected value below follows by hand from the synthetic run's definition (synthetic_run.h) and the
// formulas in docs/METRICS.md "Analysis".
TEST(RunMetrics, HandComputedFigures) {
  testing::TempDir dir("metrics");
  testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord);
  auto run = analyze_run(dir.path / "run", {.chart_buckets = 100, .threads = 2});
  ASSERT_EQ(run.devices.size(), 2u);
  EXPECT_EQ(run.sample_count, 10000);
  EXPECT_EQ(run.steps, 4);
  EXPECT_NEAR(run.step_time_s.mean, 2.01, 1e-12);  // latest end (GPU 1, +10 ms) - earliest begin
  EXPECT_EQ(run.t_begin_ns, 1'000'000'000);
  EXPECT_EQ(run.t_end_ns, 9'010'000'000);
  EXPECT_NEAR(run.tokens_per_s, 1000 / 2.01, 1e-9);
  EXPECT_NEAR(run.tflops_per_gpu, 2e15 / 2.01 / 2 / 1e12, 1e-9);
  EXPECT_NEAR(run.mfu, 2e15 / 2.01 / 2 / 1e15, 1e-12);
  EXPECT_NEAR(run.hfu, 2.4e15 / 2.01 / 2 / 1e15, 1e-12);
  // Energy over [1 s, 9.01 s): 300 W and 400 W counters, 8.01 s.
  const auto& gpu0 = run.device_metrics[0];
  const auto& gpu1 = run.device_metrics[1];
  EXPECT_NEAR(gpu0.energy_j, 300 * 8.01, 1e-6);
  EXPECT_NEAR(gpu1.energy_j, 400 * 8.01, 1e-6);
  EXPECT_NEAR(run.energy_j, 700 * 8.01, 1e-6);
  EXPECT_NEAR(run.energy_per_step_j, 700 * 8.01 / 4, 1e-6);
  EXPECT_NEAR(run.energy_per_token_j, 700 * 8.01 / 4 / 1000, 1e-9);
  EXPECT_NEAR(run.tokens_per_j, 1 / (700 * 8.01 / 4 / 1000), 1e-9);
  EXPECT_NEAR(run.samples_per_s_mj, (16 / 8.01) / (700 * 8.01 / 1e6), 1e-6);
  // Mean power is the energy over the window (here the counter's: no power_sampled_w) over its 8.01 s, one
  // figure wherever it is shown; the 801 power samples' 500 W one (10 ms of 8 s) shows in the peak.
  EXPECT_NEAR(gpu0.power_mean_w, 300.0, 1e-9);
  EXPECT_DOUBLE_EQ(gpu0.power_p50_w, 300);
  EXPECT_DOUBLE_EQ(gpu0.power_p99_w, 300);
  EXPECT_DOUBLE_EQ(gpu0.power_peak_w, 500);
  EXPECT_DOUBLE_EQ(gpu0.power_swing_100ms_w, 200);
  EXPECT_NEAR(gpu0.power_peak_to_mean, 500 / 300.0, 1e-9);
  EXPECT_NEAR(gpu0.power_integral_j, 300 * 8.0 + 200 * 0.01, 1e-6);  // trapezoid over 1.00 .. 9.00 s
  EXPECT_DOUBLE_EQ(gpu1.power_swing_100ms_w, 0);
  EXPECT_DOUBLE_EQ(gpu0.temp_mean_c, 60);
  EXPECT_DOUBLE_EQ(gpu1.temp_peak_c, 70);
  EXPECT_DOUBLE_EQ(gpu0.sm_clock_mean_mhz, 1980);
  EXPECT_NEAR(gpu1.throttle_fraction[0], 0.5, 1e-9);
  EXPECT_NEAR(gpu0.throttle_fraction[0], 0.0, 1e-12);
  EXPECT_TRUE(std::isnan(gpu0.throttle_fraction[1]));  // the run has no thermal counter
  // Thermal imbalance on node 0: 60 vs 70 °C.
  ASSERT_EQ(run.nodes.size(), 1u);
  EXPECT_DOUBLE_EQ(run.nodes[0].temp_spread_c, 10);
  EXPECT_NEAR(run.nodes[0].imbalance_pct, 10.0 / 60.0 * 100.0, 1e-9);
  EXPECT_EQ(run.slots.size(), 2u);
  // GPU 1 ends every step 10 ms after GPU 0: a straggler.
  EXPECT_DOUBLE_EQ(gpu1.straggler_fraction, 1.0);
  EXPECT_NEAR(gpu1.straggler_lag_ms, 10.0, 1e-9);
  ASSERT_EQ(run.stragglers.size(), 1u);
  EXPECT_EQ(run.stragglers[0], 1);
  // Chart buckets cover the whole run: 1000 samples in 100 buckets of 10.
  const auto& buckets = run.series.at("power_instant_w")[0].buckets;
  ASSERT_EQ(buckets.size(), 100u);
  EXPECT_EQ(buckets[0].count, 10);
  EXPECT_DOUBLE_EQ(buckets[50].max, 500);
  EXPECT_DOUBLE_EQ(buckets[50].min, 300);
  EXPECT_DOUBLE_EQ(buckets[50].mean, 320);
}

TEST(RunMetrics, WarmupStepsAreMarkedButNotCounted) {
  testing::TempDir dir("metrics-warmup");
  testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord, 1.0, false, true);
  auto run = analyze_run(dir.path / "run", {.chart_buckets = 100, .threads = 1});
  EXPECT_EQ(run.steps, 4);                         // not 5
  EXPECT_NEAR(run.step_time_s.mean, 2.01, 1e-12);  // the 0.8 s warm-up step would pull it to 1.768
  EXPECT_EQ(run.t_begin_ns, 1'000'000'000);        // the window starts at the first measured step
  ASSERT_EQ(run.step_marks_ns.size(), 5u);         // but the chart still marks the warm-up step
  EXPECT_EQ(run.step_marks_ns.front().first, 100'000'000);
  ASSERT_EQ(run.measured_steps_ns.size(), 4u);  // the per-step chart plots these
  EXPECT_EQ(run.measured_steps_ns.front().first, 1'000'000'000);
  EXPECT_NEAR(run.energy_per_step_j, 700 * 8.01 / 4, 1e-6);
}

TEST(RunMetrics, KernelSpansGiveBreakdown) {
  testing::TempDir dir("kernels");
  testing::write_synthetic_run(dir.path / "run", store::RunKind::kBench, 1.0, true);
  auto run = analyze_run(dir.path / "run");
  ASSERT_EQ(run.kernels.size(), 2u);
  const auto& lane = run.kernels[0];
  EXPECT_NEAR(lane.busy_s[static_cast<std::size_t>(KernelCategory::kGemm)], 1e-3, 1e-12);
  // all_reduce [5.8, 6.8] ms after 1 s overlaps "other" [4.8, 5.8) not at all... kernels start every 0.8 ms
  // and last 1 ms: all_reduce (6th) overlaps the 5th (other, compute) by 0.2 ms; all_gather overlaps only
  // all_reduce (comm), so it is fully exposed.
  EXPECT_NEAR(lane.overlapped_s[static_cast<std::size_t>(KernelCategory::kAllReduce)], 0.2e-3, 1e-12);
  EXPECT_NEAR(lane.exposed_s[static_cast<std::size_t>(KernelCategory::kAllReduce)], 0.8e-3, 1e-12);
  EXPECT_NEAR(lane.exposed_s[static_cast<std::size_t>(KernelCategory::kAllGather)], 1e-3, 1e-12);
}

TEST(Compare, RatiosAndSimError) {
  testing::TempDir dir("compare");
  testing::write_synthetic_run(dir.path / "measured", store::RunKind::kRecord);
  testing::write_synthetic_run(dir.path / "sim", store::RunKind::kSim, 1.1);
  std::vector<RunAnalysis> runs = {analyze_run(dir.path / "measured"), analyze_run(dir.path / "sim")};
  auto comparison = compare_runs(runs);
  EXPECT_EQ(comparison.measured_reference, 0);
  bool found = false;
  for (const auto& row : comparison.rows) {
    if (row.key == "energy_j") {
      found = true;
      EXPECT_NEAR(row.ratio[1], 1.1, 1e-9);
      EXPECT_NEAR(row.sim_error[1], 0.1, 1e-9);
      EXPECT_TRUE(std::isnan(row.sim_error[0]));
    }
    if (row.key == "step_time_mean_s") {
      EXPECT_NEAR(row.sim_error[1], 0.0, 1e-12);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GT(mean_abs_sim_error(comparison, 1), 0.0);
}

// A sim run of another graph (other model or layout) is a projection: no error against the measured run.
TEST(Compare, SimErrorOnlyForTheSameGraph) {
  testing::TempDir dir("compare-graph");
  testing::write_synthetic_run(dir.path / "measured", store::RunKind::kRecord);
  testing::write_synthetic_run(dir.path / "sim", store::RunKind::kSim, 1.1);
  std::vector<RunAnalysis> runs = {analyze_run(dir.path / "measured"), analyze_run(dir.path / "sim"),
                                   analyze_run(dir.path / "sim")};
  EXPECT_TRUE(same_graph(runs[0], runs[1]));
  runs[2].run.config_json = R"({"model": {"name": "synthetic"}, "layout": {"tp": 8}})";
  EXPECT_FALSE(same_graph(runs[0], runs[2]));
  auto comparison = compare_runs(runs);
  EXPECT_EQ(comparison.sim_reference, (std::vector<int32_t>{-1, 0, -1}));
  EXPECT_EQ(comparison.measured_reference, 0);
  for (const auto& row : comparison.rows) EXPECT_TRUE(std::isnan(row.sim_error[2])) << row.key;
  EXPECT_TRUE(std::isnan(mean_abs_sim_error(comparison, 2)));
  // Without a model/layout a run matches nothing (unknown graph), and nothing is compared.
  runs[1].run.config_json = "{}";
  comparison = compare_runs(runs);
  EXPECT_EQ(comparison.measured_reference, -1);
}

}  // namespace
}  // namespace calo::analyze

namespace calo::analyze {
namespace {

TEST(RunMetrics, StorageOrderScanMatchesPerSeriesQueries) {
  testing::TempDir dir("scan");
  testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord);
  auto fast = analyze_run(dir.path / "run", {.chart_buckets = 50, .threads = 0, .storage_order_scan = true});
  auto slow = analyze_run(dir.path / "run", {.chart_buckets = 50, .threads = 2, .storage_order_scan = false});
  EXPECT_TRUE(fast.storage_order_scan);
  EXPECT_FALSE(slow.storage_order_scan);
  EXPECT_EQ(fast.sample_count, slow.sample_count);
  auto fast_figures = run_figures(fast);
  auto slow_figures = run_figures(slow);
  ASSERT_EQ(fast_figures.size(), slow_figures.size());
  for (std::size_t index = 0; index < fast_figures.size(); ++index) {
    if (std::isnan(fast_figures[index].value)) {
      EXPECT_TRUE(std::isnan(slow_figures[index].value)) << fast_figures[index].key;
    } else {
      EXPECT_DOUBLE_EQ(fast_figures[index].value, slow_figures[index].value) << fast_figures[index].key;
    }
  }
  EXPECT_DOUBLE_EQ(fast.series.at("power_instant_w")[0].buckets[25].max,
                   slow.series.at("power_instant_w")[0].buckets[25].max);
}

TEST(RunMetrics, OutOfOrderStorageFallsBackToSeriesQueries) {
  testing::TempDir dir("unordered");
  {
    store::RunInfo info;
    info.name = "unordered";
    store::RunWriter writer(dir.path / "run", info);
    store::DeviceInfo device;
    writer.add_device(device);
    int32_t power = writer.metric_id("power_instant_w", "W", store::MetricKind::kGauge);
    for (int64_t tick : {2, 0, 1, 3}) writer.append({0, power, tick * 1'000'000'000LL, 100.0 * (tick + 1)});
    writer.finish(4'000'000'000);
  }
  auto run = analyze_run(dir.path / "run");
  EXPECT_FALSE(run.storage_order_scan);
  // Samples 100, 200, 300, 400 W at 0..3 s: time-weighted mean over 3 s of holds = (100 + 200 + 300) / 3.
  EXPECT_DOUBLE_EQ(run.device_metrics[0].power_mean_w, 200.0);
  EXPECT_DOUBLE_EQ(run.device_metrics[0].power_peak_w, 400.0);
}

TEST(RunMetrics, PowerFiguresUseTheDriversOwnSamplesWhenRecorded) {
  testing::TempDir dir("sampled");
  {
    store::RunInfo info;
    info.name = "sampled";
    store::RunWriter writer(dir.path / "run", info);
    store::DeviceInfo device;
    writer.add_device(device);
    int32_t instant = writer.metric_id("power_instant_w", "W", store::MetricKind::kGauge);
    int32_t sampled = writer.metric_id("power_sampled_w", "W", store::MetricKind::kGauge);
    // Polling saw 300 W every 100 ms; the driver's 20 ms samples also hold a 40 ms spike to 900 W at 1.0 s.
    for (int64_t tick = 0; tick <= 20; ++tick) writer.append({0, instant, tick * 100'000'000LL, 300.0});
    for (int64_t tick = 0; tick <= 100; ++tick) {
      const double watts = tick == 50 || tick == 51 ? 900.0 : 300.0;
      writer.append({0, sampled, tick * 20'000'000LL, watts, tick * 20'000'000LL});
    }
    writer.finish(2'000'000'000);
  }
  auto run = analyze_run(dir.path / "run");
  const auto& gpu = run.device_metrics[0];
  EXPECT_DOUBLE_EQ(gpu.power_peak_w, 900.0);
  // The energy over [0, 2 s] is the samples' trapezoid (no energy counter here): 300 W, plus the spike's 20
  // ms at 900 W and its two 20 ms ramps; mean power is that energy over the 2 s.
  EXPECT_NEAR(gpu.energy_j, 2 * 300.0 + 0.04 * 600.0, 1e-9);
  EXPECT_NEAR(gpu.power_mean_w, (2 * 300.0 + 0.04 * 600.0) / 2, 1e-9);
  EXPECT_DOUBLE_EQ(gpu.power_swing_100ms_w, 600.0);
}

TEST(RunMetrics, WindowEnergyPlacesItsEdgesWithThePowerSamples) {
  // A step from 100 W to 500 W at 12 s; energy read every 5 s, power samples every 20 ms; the analysis window
  // is the one step, [12 s, 22 s): 5000 J (the 5 s counter reads interpolated linearly give 4520 J).
  testing::TempDir dir("edges");
  constexpr int64_t kSecond = 1'000'000'000;
  {
    store::RunWriter writer(dir.path / "run", store::RunInfo{});
    writer.add_device(store::DeviceInfo{});
    const int32_t energy = writer.metric_id("energy_j", "J", store::MetricKind::kCounter);
    const int32_t sampled = writer.metric_id("power_sampled_w", "W", store::MetricKind::kGauge);
    for (int64_t t_ns = 0; t_ns <= 25 * kSecond; t_ns += 20'000'000) {
      writer.append({0, sampled, t_ns, t_ns < 12 * kSecond ? 100.0 : 500.0, t_ns});
      if (t_ns % (5 * kSecond) == 0) {
        const double t_s = static_cast<double>(t_ns) / 1e9;
        writer.append({0, energy, t_ns, t_s <= 12 ? 100.0 * t_s : 1200.0 + 500.0 * (t_s - 12)});
      }
    }
    store::Span step;
    step.kind = store::SpanKind::kStep;
    step.name = "step";
    step.t_begin_ns = 12 * kSecond;
    step.t_end_ns = 22 * kSecond;
    writer.append_span(step);
    writer.finish(25 * kSecond);
  }
  const auto run = analyze_run(dir.path / "run");
  EXPECT_NEAR(run.device_metrics[0].energy_j, 5000.0, 10.0);
  EXPECT_NEAR(run.energy_per_step_j, 5000.0, 10.0);
}

}  // namespace
}  // namespace calo::analyze
