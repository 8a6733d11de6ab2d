// Power dynamics: the controller's excursions above the limit, energy as the exact integral of the reported
// power samples, and the swing metric, on real graphs (a Llama3-8B slice and the tiny models).
#include "sim/power_dynamics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <regex>

#include "core/error.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

parallel::Layout one_gpu(int micro_batch, int seq) {
  parallel::Layout layout;
  layout.micro_batch = micro_batch;
  layout.global_batch = 4 * micro_batch;
  layout.seq_length = seq;
  return layout;
}

/// A 4-layer Llama3-8B slice (the shapes of the H100 fixture runs).
std::string llama_slice_path() {
  const auto dir = testing::temp_dir("power-dynamics");
  std::ifstream preset(std::string(CALO_SOURCE_DIR) + "/data/models/llama3-8b.yaml");
  std::string text((std::istreambuf_iterator<char>(preset)), std::istreambuf_iterator<char>());
  text = std::regex_replace(text, std::regex("num_layers: *[0-9]+"), "num_layers: 4");
  text = std::regex_replace(text, std::regex("name: *llama3-8b\\b"), "name: llama3-8b-4layers");
  return testing::write_file(dir / "llama3-8b-4layers.yaml", text);
}

double sum_of_samples_j(const PowerTrace& trace) {
  double energy_j = 0;
  for (std::size_t index = 0; index < trace.sample_w.size(); ++index) {
    energy_j += trace.sample_w[index] * window_length_s(trace, index);
  }
  return energy_j;
}

TEST(LargestSwing, IsTheLargestSpreadInsideAnyWindow) {
  const std::vector<float> samples = {100, 500, 120, 110, 115, 900, 100};
  // 20 ms samples, 100 ms spans = 5 samples: {500 .. 900} spread 800 lies inside one span, 800 overall too.
  EXPECT_DOUBLE_EQ(largest_swing_w(samples, 0.02, 0.1), 800.0);
  // 40 ms spans = 2 samples: the largest adjacent spread is 900 - 115 = 785 ... and 900 - 100 = 800.
  EXPECT_DOUBLE_EQ(largest_swing_w(samples, 0.02, 0.04), 800.0);
  EXPECT_DOUBLE_EQ(largest_swing_w({300, 300, 300}, 0.02, 0.1), 0.0);
}

TEST(SlidingWindowPeak, FindsABurstThatStraddlesTwoTiledWindows) {
  // 1 ms ticks, 4-tick windows: idle 200 W, then a 4 ms burst at 900 W from 2 ms to 6 ms. Windows tiled from
  // 0 read (200+200+900+900)/4 = 550 W twice; the window that starts with the burst reads the burst.
  SlidingWindowPeak peak(4);
  const std::vector<double> power_w = {200, 200, 900, 900, 900, 900, 200, 200};
  for (std::size_t tick = 0; tick < power_w.size(); ++tick) {
    peak.add(power_w[tick] * 1e-3, 1e-3);
    if (tick < 3) {
      EXPECT_EQ(peak.peak_w(), 0) << "no whole window yet";
    }
  }
  EXPECT_NEAR(peak.peak_w(), 900, 1e-9);
  EXPECT_EQ(peak.peak_start_tick(), 2u);
  // A burst shorter than the window is averaged with what surrounds it, at best.
  SlidingWindowPeak short_burst(4);
  for (double watts : {200.0, 900.0, 900.0, 200.0, 200.0, 200.0}) short_burst.add(watts * 1e-3, 1e-3);
  EXPECT_NEAR(short_burst.peak_w(), 550, 1e-9);
}

class PowerDynamicsTest : public ::testing::Test {
 protected:
  ClusterSpec h100_ = load_cluster("h100-hgx");
};

TEST_F(PowerDynamicsTest, EnergyIsExactlyTheIntegralOfTheReportedPowerForEverySimulatedRun) {
  const std::string slice = llama_slice_path();
  struct Case {
    std::string model;
    parallel::Layout layout;
    std::string cluster;
  };
  parallel::Layout pipeline;
  pipeline.tp = 2;
  pipeline.pp = 2;
  pipeline.dp = 1;
  pipeline.micro_batch = 1;
  pipeline.global_batch = 8;
  pipeline.seq_length = 512;
  const std::vector<Case> cases = {{slice, one_gpu(1, 2048), "h100-hgx"},
                                   {slice, one_gpu(8, 2048), "h100-hgx"},
                                   {"tiny-dense", pipeline, "h200x4-nvswitch"},
                                   {"tiny-moe", pipeline, "h200x4-nvswitch"}};
  for (const Case& test_case : cases) {
    for (bool cap : {true, false}) {
      SimOptions options;
      options.steps = 4;
      options.power_cap = cap;
      const ClusterSpec cluster = load_cluster(test_case.cluster);
      const SimResult result =
          simulate(testing::make_graph(test_case.model, test_case.layout), cluster, options);
      double total_s = 0;
      for (const StepResult& step : result.step_results) total_s += step.iteration_s;
      for (const GpuResult& gpu : result.gpus) {
        double traced_j = 0;
        for (int step = 0; step < result.steps; ++step) {
          const std::size_t index = static_cast<std::size_t>(step) * result.world + gpu.rank;
          const PowerTrace& trace = *result.power_traces[result.trace_of[index]];
          EXPECT_NEAR(trace.duration_s, result.step_results[step].iteration_s, 1e-12);
          EXPECT_NEAR(sum_of_samples_j(trace), trace.energy_j, 1e-6 * trace.energy_j);
          EXPECT_NEAR(result.power_w[index] * trace.duration_s, trace.energy_j, 1e-3);
          // The samples fall at the phase of the step's heaviest window: the largest of them is the peak.
          float largest_w = 0;
          for (float sample : trace.sample_w) largest_w = std::max(largest_w, sample);
          EXPECT_FLOAT_EQ(largest_w, static_cast<float>(trace.peak_w)) << test_case.model;
          // Every sample is one a driver could report: a whole window, or the wrap over the step boundary of
          // at least half a window (a step of fewer than three samples may have a shorter one). The wrap
          // covers exactly what the whole windows leave of the step, so consecutive steps tile time.
          const std::size_t samples = trace.sample_w.size();
          for (std::size_t sample = 0; sample < samples && samples >= 3; ++sample)
            EXPECT_GE(window_length_s(trace, sample), 0.5 * trace.window_s)
                << test_case.model << " " << sample;
          if (trace.wrap_s > 0 && samples > 1) {
            EXPECT_NEAR(trace.wrap_s - trace.head_s, trace.duration_s - window_end_s(trace, samples - 1),
                        1e-12);
            EXPECT_NEAR(window_end_s(trace, samples - 1) - window_end_s(trace, 0),
                        static_cast<double>(samples - 1) * trace.window_s, 1e-12);
          }
          traced_j += sum_of_samples_j(trace);
        }
        EXPECT_NEAR(gpu.energy_j, traced_j, 1e-6 * traced_j) << test_case.model << " rank " << gpu.rank;
        EXPECT_NEAR(gpu.mean_power_w * total_s, gpu.energy_j, 1e-6 * gpu.energy_j);
      }
    }
  }
}

TEST_F(PowerDynamicsTest, ShortBurstsExceedTheLimitWhileTheStepMeanHoldsIt) {
  SimOptions options;
  options.steps = 3;
  const SimResult result =
      simulate(testing::make_graph(llama_slice_path(), one_gpu(8, 2048)), h100_, options);
  const GpuResult& gpu = result.gpus[0];
  EXPECT_GT(gpu.peak_power_w, 1.1 * h100_.gpu.power_limit_w) << "a heavy op after a light phase overshoots";
  EXPECT_LE(gpu.mean_power_w, h100_.gpu.power_limit_w * 1.01) << "the controller holds the mean at the limit";
  EXPECT_GT(gpu.mean_power_w, h100_.gpu.power_limit_w * 0.9);
  EXPECT_GT(gpu.power_swing_100ms_w, 100.0);
}

TEST_F(PowerDynamicsTest, AControllerThatReactsWithinAMillisecondHoldsSamplesNearTheLimit) {
  const graph::Graph graph = testing::make_graph(llama_slice_path(), one_gpu(8, 2048));
  SimOptions options;
  options.steps = 2;
  auto peak_with_response_w = [&](double response_s) {
    ClusterSpec cluster = h100_;
    cluster.gpu.power_control.response_s = response_s;
    return simulate(graph, cluster, options).gpus[0].peak_power_w;
  };
  const double fast_w = peak_with_response_w(0.001);
  EXPECT_LE(fast_w, 1.03 * h100_.gpu.power_limit_w);
  // A controller of tens of ms lets the clock climb in light phases: the next heavy op overshoots the limit.
  EXPECT_GT(peak_with_response_w(0.05), fast_w + 50);
}

/// Mean (clock MHz, power W) of `control` on the H100 over the last second of 2 s of a load that alternates
/// 30 ms heavy (1100 W at max clock) and 30 ms light (300 W), power following the clock linearly.
std::pair<double, double> mean_under_varying_load(const PowerControlSpec& control, const GpuSpec& gpu) {
  PowerController controller(control, gpu, gpu.power_limit_w, gpu.max_sm_mhz, gpu.max_sm_mhz);
  constexpr double kTickS = 0.001;
  double clock_sum_mhz = 0, power_sum_w = 0;
  int counted = 0;
  for (int tick = 0; tick < 2000; ++tick) {
    const double load_w = (tick / 30) % 2 == 0 ? 1100 : 300;
    const double power_w = load_w * controller.clock_mhz() / gpu.max_sm_mhz;
    if (tick >= 1000) clock_sum_mhz += controller.clock_mhz(), power_sum_w += power_w, counted += 1;
    controller.observe(power_w, kTickS);
  }
  return {clock_sum_mhz / counted, power_sum_w / counted};
}

TEST_F(PowerDynamicsTest, AClockThatClimbsBackSlowlyRunsLowerAndUnderTheCapUnderAVaryingLoad) {
  // The calibrated H100 controller cuts with ~14 ms and climbs back with ~27 ms (docs/SIMULATOR.md): under a
  // load that alternates heavy and light it spends longer low, so the clock and the mean power sit lower.
  PowerControlSpec one_way = h100_.gpu.power_control;
  one_way.response_s = 0.015;
  one_way.average_s = 0;
  PowerControlSpec slow_climb = one_way;
  slow_climb.raise_response_s = 0.045;
  const auto [one_way_mhz, one_way_w] = mean_under_varying_load(one_way, h100_.gpu);
  const auto [slow_mhz, slow_w] = mean_under_varying_load(slow_climb, h100_.gpu);
  EXPECT_LT(slow_mhz, one_way_mhz - 20);
  EXPECT_LT(slow_w, one_way_w - 10);
  EXPECT_LT(slow_w, h100_.gpu.power_limit_w);
  // Zero means "the same response both ways": exactly the one-response controller.
  PowerControlSpec explicit_same = one_way;
  explicit_same.raise_response_s = one_way.response_s;
  EXPECT_EQ(mean_under_varying_load(explicit_same, h100_.gpu), mean_under_varying_load(one_way, h100_.gpu));
  EXPECT_DOUBLE_EQ(raise_response_ms(one_way), 15.0);
  EXPECT_DOUBLE_EQ(raise_response_ms(slow_climb), 45.0);
}

TEST_F(PowerDynamicsTest, AControllerOnAveragedPowerLetsLongHeavyKernelsPeakHigher) {
  // A controller acting on power averaged over tens of ms barely reacts inside one long GEMM burst, so the 20
  // ms samples of a large micro-batch (long kernels) rise further above the cap; the step mean still holds
  // it.
  const graph::Graph graph = testing::make_graph(llama_slice_path(), one_gpu(8, 2048));
  SimOptions options;
  options.steps = 2;
  auto gpu_with_average = [&](double average_s) {
    ClusterSpec cluster = h100_;
    cluster.gpu.power_control.response_s = 0.01;
    cluster.gpu.power_control.average_s = average_s;
    return simulate(graph, cluster, options).gpus[0];
  };
  const GpuResult instant = gpu_with_average(0);
  const GpuResult averaged = gpu_with_average(0.05);
  EXPECT_GT(averaged.peak_power_w, instant.peak_power_w + 20);
  EXPECT_NEAR(averaged.mean_power_w, instant.mean_power_w, 0.05 * instant.mean_power_w);
}

TEST_F(PowerDynamicsTest, PeakPowerRisesWithMicroBatchAsMeasured) {
  // Measured on one H100 (shared/fixtures/h100-runs): 848, 864, 879, 911 W for micro-batch 1, 2, 4, 8.
  const std::string slice = llama_slice_path();
  SimOptions options;
  options.steps = 3;
  const double mbs1_w =
      simulate(testing::make_graph(slice, one_gpu(1, 2048)), h100_, options).gpus[0].peak_power_w;
  const double mbs8_w =
      simulate(testing::make_graph(slice, one_gpu(8, 2048)), h100_, options).gpus[0].peak_power_w;
  EXPECT_GT(mbs8_w, mbs1_w);
}

TEST_F(PowerDynamicsTest, WithoutTheCapTheClockStaysAtItsLimit) {
  SimOptions options;
  options.steps = 2;
  options.power_cap = false;
  const SimResult result =
      simulate(testing::make_graph(llama_slice_path(), one_gpu(2, 2048)), h100_, options);
  for (float clock : result.clock_mhz) EXPECT_DOUBLE_EQ(clock, h100_.gpu.max_sm_mhz);
  EXPECT_DOUBLE_EQ(result.gpus[0].throttle_power_cap_s, 0.0);
}

TEST_F(PowerDynamicsTest, AFixedClockReplaysAMeasuredClock) {
  SimOptions options;
  options.steps = 2;
  options.power_cap = false;
  options.fixed_clock_mhz = 1500;
  const graph::Graph graph = testing::make_graph(llama_slice_path(), one_gpu(2, 2048));
  const SimResult slow = simulate(graph, h100_, options);
  for (float clock : slow.clock_mhz) EXPECT_DOUBLE_EQ(clock, 1500.0);
  options.fixed_clock_mhz = -1;
  const SimResult fast = simulate(graph, h100_, options);
  EXPECT_GT(slow.iteration_s, fast.iteration_s * 1.15);
}

}  // namespace
}  // namespace calo::sim

namespace calo::sim {
namespace {

TEST(PerGpuSettings, AClockLockAndALowerPowerCapSlowOnlyTheirGpu) {
  const ClusterSpec cluster = load_cluster("h100-hgx");
  const graph::Graph graph = testing::make_graph(llama_slice_path(), one_gpu(4, 2048));
  SimOptions options;
  options.steps = 2;
  const SimResult free_run = simulate(graph, cluster, options);
  options.max_clock_mhz = {1200};
  const SimResult locked = simulate(graph, cluster, options);
  EXPECT_LE(locked.clock_mhz.back(), 1200.0);
  EXPECT_GT(locked.iteration_s, free_run.iteration_s * 1.05);
  options.max_clock_mhz.clear();
  options.power_limit_w = {450};
  const SimResult capped = simulate(graph, cluster, options);
  EXPECT_LT(capped.gpus[0].mean_power_w, 460.0) << "the controller holds the lower cap";
  EXPECT_GT(capped.iteration_s, free_run.iteration_s);
  options.power_limit_w = {50};  // below idle: refused
  EXPECT_THROW(simulate(graph, cluster, options), InputError);
}

}  // namespace
}  // namespace calo::sim
