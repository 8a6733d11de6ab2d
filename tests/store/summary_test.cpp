// Interval summaries on a hand-built run: counter deltas interpolated at interval ends, medians,
// temperatures.
#include "store/summary.h"

#include <gtest/gtest.h>

#include <cmath>

#include "streamed_summary.h"
#include "temp_dir.h"

namespace calo::store {
namespace {

using testing::TempDir;

TEST(Summary, CounterValueIsInterpolatedBetweenSamples) {
  std::vector<Sample> samples{{0, 1, 0, 100.0, kNoSensorTime},
                              {0, 1, 1000, 200.0, kNoSensorTime},
                              {0, 1, 3000, 260.0, kNoSensorTime}};
  EXPECT_DOUBLE_EQ(counter_value_at(samples, 500), 150.0);
  EXPECT_DOUBLE_EQ(counter_value_at(samples, 2000), 230.0);
  EXPECT_DOUBLE_EQ(counter_value_at(samples, -5), 100.0);    // clamped before the first
  EXPECT_DOUBLE_EQ(counter_value_at(samples, 9000), 260.0);  // clamped after the last
  EXPECT_TRUE(std::isnan(counter_value_at({}, 0)));
}

// A GPU at 100 W that steps to 500 W at 12 s; its energy counter is read every 5 s (calo record stretches it
// to seconds to keep its CPU cost down) and the driver's power samples come every 20 ms.
struct SteppedPower {
  std::vector<Sample> energy;
  std::vector<Sample> power;
  explicit SteppedPower(int64_t first_energy_read_s = 0) {
    constexpr int64_t kSecond = 1'000'000'000;
    for (int64_t t_s = first_energy_read_s; t_s <= 25; t_s += 5) {
      const double joules = t_s <= 12 ? 100.0 * t_s : 1200.0 + 500.0 * (t_s - 12);
      energy.push_back(Sample{0, 0, t_s * kSecond, joules, kNoSensorTime});
    }
    for (int64_t t_ns = 0; t_ns <= 25 * kSecond; t_ns += 20'000'000)
      power.push_back(Sample{0, 1, t_ns, t_ns < 12 * kSecond ? 100.0 : 500.0, t_ns});
  }
};

TEST(Summary, EnergyAtAWindowEdgeComesFromThePowerSamplesNearIt) {
  constexpr int64_t kSecond = 1'000'000'000;
  const SteppedPower run;
  // True energy over [12 s, 22 s): 5000 J. Interpolating the 5 s counter reads puts 480 J of the step on the
  // wrong side of 12 s (-9.6 %); the samples place it to within the 20 ms around the step.
  const double linear =
      counter_value_at(run.energy, 22 * kSecond) - counter_value_at(run.energy, 12 * kSecond);
  EXPECT_NEAR(linear, 4520.0, 1e-6);
  const double refined = energy_value_at(run.energy, run.power, 22 * kSecond) -
                         energy_value_at(run.energy, run.power, 12 * kSecond);
  EXPECT_NEAR(refined, 5000.0, 10.0);
  EXPECT_DOUBLE_EQ(energy_value_at(run.energy, run.power, 20 * kSecond), 5200.0);  // on a read: the read
  // No samples, or a gap over 100 ms between the read and the edge: the counter alone.
  EXPECT_DOUBLE_EQ(energy_value_at(run.energy, {}, 12 * kSecond), counter_value_at(run.energy, 12 * kSecond));
  std::vector<Sample> gappy;
  for (const Sample& sample : run.power) {
    if (sample.t_ns < 10'500'000'000 || sample.t_ns > 10'700'000'000) gappy.push_back(sample);
  }
  EXPECT_DOUBLE_EQ(energy_value_at(run.energy, gappy, 12 * kSecond),
                   counter_value_at(run.energy, 12 * kSecond));
  // Before the first read (5 s): 500 J less the 300 J drawn from 2 s to 5 s, where clamping said 500 J.
  const SteppedPower late(5);
  EXPECT_NEAR(energy_value_at(late.energy, late.power, 2 * kSecond), 200.0, 1e-6);
  EXPECT_TRUE(std::isnan(energy_value_at({}, run.power, 0)));
}

TEST(Summary, WindowIntegralCountsTheEdgeSegmentsShareAndRefusesGaps) {
  // 100 W then 300 W from 1.0 s, sampled every 20 ms from 0 to 2 s.
  auto feed = [](WindowIntegral& integral, int64_t from_ns, int64_t to_ns) {
    for (int64_t t_ns = from_ns; t_ns <= to_ns; t_ns += 20'000'000)
      integral.add(t_ns, t_ns < 1'000'000'000 ? 100.0 : 300.0);
  };
  WindowIntegral inside(510'000'000, 1'490'000'000);  // edges between samples
  feed(inside, 0, 2'000'000'000);
  // 0.49 s at 100 W, the 20 ms ramp 980-1000 ms at 200 W on average, 0.49 s at 300 W.
  ASSERT_TRUE(inside.joules());
  EXPECT_NEAR(*inside.joules(), 0.47 * 100 + 0.02 * 200 + 0.49 * 300, 1e-9);
  // The last sample 30 ms before the window ends (a run's last read): its value held to the edge.
  WindowIntegral held(0, 2'030'000'000);
  feed(held, 0, 2'000'000'000);
  ASSERT_TRUE(held.joules());
  EXPECT_NEAR(*held.joules(), 0.98 * 100 + 0.02 * 200 + 1.03 * 300, 1e-9);
  // ... but not 150 ms: that is a gap, not a read's delay.
  WindowIntegral short_of_end(0, 2'150'000'000);
  feed(short_of_end, 0, 2'000'000'000);
  EXPECT_FALSE(short_of_end.joules());
  // A 200 ms hole inside the window.
  WindowIntegral holed(0, 2'000'000'000);
  feed(holed, 0, 500'000'000);
  feed(holed, 700'000'000, 2'000'000'000);
  EXPECT_FALSE(holed.joules());
  EXPECT_FALSE(WindowIntegral(0, 1).joules());  // no samples
}

TEST(Summary, ShortWindowEnergyComesFromThePowerSamplesNotAJumpyCounter) {
  // A steady 720 W GPU whose energy counter advances in 100 ms jumps (the H200 of BENCHMARKS: two identical
  // 0.27 s benches read 39.9 and 27.5 J per step from it). The counter is read every 25 ms.
  constexpr int64_t kMs = 1'000'000;
  std::vector<Sample> energy, power;
  for (int64_t t_ns = 0; t_ns <= 2000 * kMs; t_ns += 25 * kMs)
    energy.push_back(
        Sample{0, 0, t_ns, 720.0 * static_cast<double>(t_ns / (100 * kMs)) * 0.1, kNoSensorTime});
  for (int64_t t_ns = 0; t_ns <= 2000 * kMs; t_ns += 20 * kMs)
    power.push_back(Sample{0, 1, t_ns, 720.0, t_ns});
  const int64_t begin_ns = 1090 * kMs, end_ns = 1360 * kMs;  // 0.27 s
  WindowIntegral integral(begin_ns, end_ns);
  for (const Sample& sample : power) integral.add(sample.t_ns, sample.value);
  const double truth_j = 720.0 * 0.27;
  EXPECT_NEAR(window_energy_j(integral.joules(), energy, power, begin_ns, end_ns), truth_j, 1e-9);
  // The counter alone is off by a good part of a jump.
  const double counter_j = window_energy_j(std::nullopt, energy, {}, begin_ns, end_ns);
  EXPECT_GT(std::abs(counter_j - truth_j) / truth_j, 0.1);
  EXPECT_TRUE(std::isnan(window_energy_j(std::nullopt, {}, power, begin_ns, end_ns)));
}

TEST(Summary, IntervalEnergyUsesThePowerSamplesAtItsEdges) {
  TempDir temp;
  constexpr int64_t kSecond = 1'000'000'000;
  {
    RunWriter writer(temp.path() / "run", RunInfo{});
    writer.add_device(DeviceInfo{});
    const int32_t energy = writer.metric_id("energy_j", "J", MetricKind::kCounter);
    const int32_t sampled = writer.metric_id("power_sampled_w", "W", MetricKind::kGauge);
    const SteppedPower run;
    for (Sample sample : run.energy)
      writer.append(Sample{0, energy, sample.t_ns, sample.value, kNoSensorTime});
    for (Sample sample : run.power) writer.append(Sample{0, sampled, sample.t_ns, sample.value, sample.t_ns});
    writer.finish(25 * kSecond);
  }
  RunReader reader(temp.path() / "run");
  EXPECT_NEAR(summarize_interval(reader, 0, 12 * kSecond, 22 * kSecond, "load").energy_j, 5000.0, 10.0);
}

// A recorded GPU as calo record stores it: the counters read every 5 s from before the run's start, the
// driver's power samples every 20 ms from `first_power_s` to `last_power_s` (less a gap where `gap_at_s` >
// 0), a clock and a temperature every 100 ms. Written to `run_dir`.
void write_recorded_gpu(const std::filesystem::path& run_dir, double first_power_s, double last_power_s,
                        double gap_at_s = -1) {
  constexpr double kSecond = 1e9;
  RunWriter writer(run_dir, RunInfo{});
  writer.add_device(DeviceInfo{});
  const int32_t energy = writer.metric_id("energy_j", "J", MetricKind::kCounter);
  const int32_t sampled = writer.metric_id("power_sampled_w", "W", MetricKind::kGauge);
  const int32_t power_cap = writer.metric_id("throttle_power_cap_s", "s", MetricKind::kCounter);
  const int32_t clock = writer.metric_id("clock_sm_mhz", "MHz", MetricKind::kGauge);
  const int32_t temperature = writer.metric_id("temp_gpu_c", "C", MetricKind::kGauge);
  const int32_t instant = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
  auto at = [&](int32_t metric, double t_s, double value) {
    const auto t_ns = static_cast<int64_t>(t_s * kSecond);
    writer.append(Sample{0, metric, t_ns, value, kNoSensorTime});
  };
  for (int step = 0; step < 1500; ++step) {  // -3 s .. 27 s in 20 ms steps, series interleaved as sampled
    const double t_s = -3.0 + 0.02 * step;
    const double watts = t_s < 12 ? 100.0 + step % 7 : 500.0 - step % 5;
    const bool in_gap = gap_at_s > 0 && t_s > gap_at_s && t_s < gap_at_s + 0.2;
    if (t_s >= first_power_s && t_s <= last_power_s && !in_gap) at(sampled, t_s, watts);
    if (step % 5 == 0) {
      at(clock, t_s, t_s < 12 ? 1980.0 : 1470.0 + 15 * (step % 3));
      at(temperature, t_s, 34.0 + t_s / 2);
      at(instant, t_s, watts + 3);
    }
    if (step % 250 == 0) {
      at(energy, t_s, 100.0 * t_s + 37 * (step % 3));
      at(power_cap, t_s, t_s < 12 ? 0.0 : (t_s - 12) * 0.9);
    }
  }
  writer.finish(static_cast<int64_t>(28 * kSecond));
}

// calo record's end-of-run figures from the samples as written (RunIntervalStream) are summarize_interval's
// read back, to the last bit, whichever way the energy is taken: the driver's power samples over the whole
// run, the counter with its ends placed by the samples near them (the samples stop 2 s before the end, or a
// 200 ms gap breaks them), or the counter alone (no power samples).
TEST(Summary, TheStreamedRunSummaryIsTheStoredOne) {
  constexpr int64_t kSecond = 1'000'000'000;
  struct Case {
    const char* name;
    double first_power_s, last_power_s, gap_at_s;
    int64_t end_ns;
  };
  for (const Case& run : {Case{"samples cover the run", -3, 27, -1, 27 * kSecond},
                          Case{"samples stop 2 s early", -3, 25, -1, 27 * kSecond},
                          Case{"a gap in the samples", -3, 27, 5.0, 27 * kSecond},
                          Case{"samples start late", 0.5, 27, -1, 27 * kSecond},
                          Case{"no power samples", 99, 99, -1, 27 * kSecond}}) {
    SCOPED_TRACE(run.name);
    TempDir temp;
    write_recorded_gpu(temp.path() / "run", run.first_power_s, run.last_power_s, run.gap_at_s);
    RunReader reader(temp.path() / "run");
    testing::expect_stream_matches_store(reader, 0, run.end_ns);
  }
}

// Where the stream cannot promise summarize_interval's figures it says so (nullopt: calo record reads the
// store back): a sample at or after the end, or a series out of time order.
TEST(Summary, TheStreamRefusesWhatItCannotPromise) {
  const std::vector<MetricInfo> metrics{{1, "temp_gpu_c", "C", MetricKind::kGauge}};
  RunIntervalStream stream(metrics);
  const Sample samples[] = {{0, 1, 100, 40.0, kNoSensorTime}, {0, 1, 200, 41.0, kNoSensorTime}};
  stream.add(samples);
  ASSERT_TRUE(stream.summary(0, 201).has_value());
  EXPECT_DOUBLE_EQ(stream.summary(0, 201)->temp_gpu_max_c, 41.0);
  EXPECT_FALSE(stream.summary(0, 200).has_value()) << "a sample at the end";
  const Sample earlier{0, 1, 150, 42.0, kNoSensorTime};
  stream.add({&earlier, 1});
  EXPECT_FALSE(stream.summary(0, 201).has_value()) << "a series out of time order";
}

TEST(Summary, PhaseFiguresFromASyntheticRun) {
  TempDir temp;
  constexpr int64_t kSecond = 1'000'000'000;
  {
    RunWriter writer(temp.path() / "run", RunInfo{});
    writer.add_device(DeviceInfo{});
    writer.add_device(DeviceInfo{1, 0, 1, DeviceKind::kGpu, "b", "", "", 700, 1980, ""});
    int32_t energy = writer.metric_id("energy_j", "J", MetricKind::kCounter);
    int32_t power = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
    int32_t clock = writer.metric_id("clock_sm_mhz", "MHz", MetricKind::kGauge);
    int32_t temperature = writer.metric_id("temp_gpu_c", "C", MetricKind::kGauge);
    int32_t cap = writer.metric_id("throttle_power_cap_s", "s", MetricKind::kCounter);
    int32_t sampled = writer.metric_id("power_sampled_w", "W", MetricKind::kGauge);
    // 20 s at 10 Hz. Device 0: 100 W for 10 s, then 500 W; device 1 draws twice as much.
    for (int tick = 0; tick <= 200; ++tick) {
      int64_t t_ns = tick * kSecond / 10;
      double t_s = tick / 10.0;
      for (int32_t device : {0, 1}) {
        double scale = device == 0 ? 1.0 : 2.0;
        double energy_j = scale * (t_s <= 10 ? 100 * t_s : 1000 + 500 * (t_s - 10));
        double power_w = scale * (t_s < 10 ? 100 : 500);
        writer.append(Sample{device, energy, t_ns, energy_j, kNoSensorTime});
        writer.append(Sample{device, power, t_ns, power_w, kNoSensorTime});
        writer.append(Sample{device, clock, t_ns, t_s < 10 ? 1980.0 : 1400.0 + tick % 3, kNoSensorTime});
        writer.append(Sample{device, temperature, t_ns, 30 + t_s, kNoSensorTime});
        writer.append(Sample{device, cap, t_ns, t_s < 10 ? 0.0 : 0.9 * (t_s - 10), kNoSensorTime});
      }
      // The driver's own samples (device 0 only) see a 900 W spike at 15 s that power_instant_w missed.
      writer.append(Sample{0, sampled, t_ns, tick == 150 ? 900.0 : (t_s < 10 ? 100.0 : 500.0), t_ns});
    }
    writer.append_span(Span{kNone, kNone, SpanKind::kPhase, "idle", "", 0, 10 * kSecond});
    writer.append_span(Span{kNone, kNone, SpanKind::kPhase, "load", "", 10 * kSecond, 20 * kSecond});
    writer.append_span(Span{kNone, 1, SpanKind::kPhase, "only1", "", 12'050'000'000, 14'050'000'000});
    writer.finish(20 * kSecond);
  }
  RunReader reader(temp.path() / "run");
  std::vector<IntervalSummary> phases = summarize_phases(reader);
  ASSERT_EQ(phases.size(), 5u);  // idle×2, load×2, only1 on device 1
  EXPECT_EQ(phases[0].label, "idle");
  EXPECT_EQ(phases[0].device_idx, 0);
  EXPECT_NEAR(phases[0].mean_power_w, 102.0, 1e-9);  // the 10 Hz samples ramp to 500 W over 9.9-10 s
  EXPECT_NEAR(phases[1].mean_power_w, 200.0, 1e-9);
  // Device 0's energy is its power samples' integral, the 900 W spike (100 ms either side) included: the
  // counter, written here without it, would say 5000 J.
  EXPECT_NEAR(phases[2].mean_power_w, 504.0, 1e-9);
  EXPECT_NEAR(phases[2].energy_j, 5040.0, 1e-6);
  EXPECT_NEAR(phases[3].energy_j, 10000.0, 1e-6);  // device 1, no samples: the counter
  EXPECT_NEAR(phases[2].throttle_power_cap_s, 9.0, 1e-9);
  EXPECT_DOUBLE_EQ(phases[0].median_sm_mhz, 1980.0);
  EXPECT_DOUBLE_EQ(phases[2].median_sm_mhz, 1401.0);
  EXPECT_DOUBLE_EQ(phases[2].temp_gpu_start_c, 40.0);
  EXPECT_DOUBLE_EQ(phases[2].temp_gpu_end_c, 49.9);
  EXPECT_DOUBLE_EQ(phases[2].peak_power_instant_w, 500.0);
  EXPECT_DOUBLE_EQ(phases[2].peak_power_sampled_w, 900.0);
  EXPECT_DOUBLE_EQ(phases[0].peak_power_sampled_w, 100.0);
  EXPECT_TRUE(std::isnan(phases[1].peak_power_sampled_w));  // device 1 has no power samples
  EXPECT_DOUBLE_EQ(phases[2].peak_power_w(), 900.0);        // the 20 ms samples where recorded ...
  EXPECT_DOUBLE_EQ(phases[1].peak_power_w(), phases[1].peak_power_instant_w);  // ... else polled power
  EXPECT_GT(phases[1].peak_power_instant_w, 0.0);
  EXPECT_NEAR(phases[2].power_integral_j, 500.0 * 9.9, 1e-6);  // samples inside [10 s, 20 s)
  // A phase that starts between samples: the counter is interpolated, 2 s at 1000 W.
  EXPECT_EQ(phases[4].label, "only1");
  EXPECT_EQ(phases[4].device_idx, 1);
  EXPECT_NEAR(phases[4].energy_j, 2000.0, 1e-6);
  EXPECT_NEAR(phases[4].duration_s, 2.0, 1e-12);
  EXPECT_EQ(phases[4].sample_count, 20 * 5);
}

}  // namespace
}  // namespace calo::store
