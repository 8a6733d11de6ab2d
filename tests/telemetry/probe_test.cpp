// calo probe engine: recommended periods per metric kind, transients told apart from sensor updates, and
// groups split as the sampler splits them (a slow query does not slow the cheap gauges' back-to-back reads).
#include "telemetry/probe.h"

#include <gtest/gtest.h>

#include <atomic>

#include "core/time.h"
#include "telemetry/sampler.h"
#include "test_source.h"

namespace calo::telemetry {
namespace {

constexpr int64_t kMs = 1'000'000;

ProbeRow row_of(MetricKind kind, double refresh_ms, double cost_us, double default_ms) {
  ProbeRow row;
  row.kind = kind;
  row.refresh_ms = refresh_ms;
  row.cost_median_us = cost_us;
  row.cpu_per_read_us = cost_us;
  row.default_period_ms = default_ms;
  return row;
}

TEST(Probe, RecommendsHalfTheRefreshForGaugesAndTheSamplersDefaultForCounters) {
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kGauge, 100, 0.3, 10)), 50);
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kGauge, 0, 0.3, 10)), 10);   // never settled
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kGauge, 1.2, 0.3, 10)), 1);  // at least 1 ms
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kGauge, 100, 1000, 10)), 50);
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kGauge, 30, 1000, 10)), 20);  // 20x a 1 ms read
  // PCIe byte counters change every ~1 ms: recommending 1-2 ms for a 120 us read would cost 6-12 % of a core,
  // and a counter loses nothing between reads. An expensive one gets calo record's CPU-budgeted default.
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kCounter, 1.1, 0.4, 100)), 100);
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kCounter, 1.1, 120, 100)), 200);
  EXPECT_DOUBLE_EQ(recommend_period_ms(row_of(MetricKind::kCounter, 100, 4000, 100)), 4000);
  ProbeRow samples = row_of(MetricKind::kGauge, 0.3, 250, 1000);  // every read returns ~50 new samples
  samples.buffered = true;
  EXPECT_DOUBLE_EQ(recommend_period_ms(samples), 1000);
}

// A GPU whose gauge steps every 100 ms and, at each step, shows an intermediate value for 1 ms first (as
// NVML's temperature and clocks do at each driver update), and whose throttle counter is declared cheap but
// costs 300 us a read here.
class SteppingSource : public FakeSource {
 public:
  SteppingSource() : FakeSource("stepping") {
    DeviceInfo device;
    device.kind = "gpu";
    device.metrics.push_back({"temp_c", "C", MetricKind::kGauge, "stepping.fast", 10 * kMs, 1000});
    device.metrics.push_back({"throttle_s", "s", MetricKind::kCounter, "stepping.fast", 100 * kMs, 1000});
    devices_.push_back(device);
  }
  Reading read(size_t, size_t metric_index) override {
    const int64_t now_ns = core::monotonic_ns();
    if (metric_index == 1) {
      while (core::monotonic_ns() < now_ns + 300'000) {
      }
      return {ReadStatus::kOk, static_cast<double>(now_ns / (100 * kMs)), kNoSensorTime, "", {}};
    }
    ++gauge_reads_;
    const int64_t step = now_ns / (100 * kMs);
    const bool transient = now_ns % (100 * kMs) < kMs;
    return {ReadStatus::kOk,
            transient ? 1000.0 + static_cast<double>(step) : static_cast<double>(step),
            kNoSensorTime,
            "",
            {}};
  }
  std::atomic<int64_t> gauge_reads_{0};
};

TEST(Probe, RefreshIsTheSensorsUpdateNotItsTransientsAndSlowQueriesAreReadApart) {
  SteppingSource source;
  const std::vector<ProbeRow> rows = probe_sources({&source}, 1.0);
  ASSERT_EQ(rows.size(), 2u);
  const ProbeRow& gauge = rows[0].metric == "temp_c" ? rows[0] : rows[1];
  const ProbeRow& counter = rows[0].metric == "temp_c" ? rows[1] : rows[0];
  EXPECT_EQ(counter.group, "stepping.fast.slow");  // 300 us >= kSlowQueryNs: its own group, as in Sampler
  EXPECT_EQ(gauge.group, "stepping.fast");
  // Read apart from the 300 us counter, the gauge is read every few µs: ~10 updates in 1 s, each seen as a
  // transient (1 ms) and then the settled value; the refresh is the 100 ms between settled values. As ratios,
  // which a loaded machine moves far less than counts: each of the ~20 values is read many times over (read
  // after the 300 us counter, 1 s would hold at most ~3,300 reads, ~170 a value), and the refresh is the
  // source's 100 ms within 10 %.
  EXPECT_GT(gauge.reads, 300 * gauge.changes);
  EXPECT_GE(gauge.transients, 4);  // a thread preempted through a transient misses it
  EXPECT_LE(gauge.transients, 11);
  EXPECT_GE(gauge.changes, gauge.transients + 8);
  EXPECT_NEAR(gauge.refresh_ms, 100, 10);
  EXPECT_DOUBLE_EQ(gauge.recommended_period_ms, 50);
  // A read held to 0.1 % of a core: the period is at least 1000 x the CPU a read took (0.3 ms busy here, less
  // where the thread was preempted through it), and the rule's own value for the row.
  EXPECT_GE(counter.cost_median_us, 250);
  EXPECT_GE(counter.recommended_period_ms, counter.cpu_per_read_us);
  EXPECT_DOUBLE_EQ(counter.recommended_period_ms, recommend_period_ms(counter));
}

}  // namespace
}  // namespace calo::telemetry
