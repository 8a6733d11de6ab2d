// Power and heat: steady state = inlet + P R, time constants, thermal slowdown, and the H200 power cap
// derived from the 4 x H200 fixture (a bf16 8192^3 GEMM loop holds 700 W at ~1470 MHz).
#include "sim/power_thermal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

TEST(Thermal, SteadyStateIsInletPlusPowerTimesResistance) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  const ThermalSpec& thermal = cluster.gpu.thermal;
  ThermalState state = thermal_steady_state(thermal, 31, 1.0, 117);
  for (int step = 0; step < 400; ++step) thermal_advance(thermal, 31, 1.25, 690, 0.5, state);
  const double r_total = (thermal.r_die_k_per_w + thermal.r_sink_k_per_w) * 1.25;
  EXPECT_NEAR(state.die_c, 31 + 690 * r_total, 1e-6);
  EXPECT_NEAR(state.sink_c, 31 + 690 * thermal.r_sink_k_per_w * 1.25, 1e-6);
}

TEST(Thermal, DieJumpsFastThenTheSinkFollowsWithItsTimeConstant) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  const ThermalSpec& thermal = cluster.gpu.thermal;
  ThermalState state = thermal_steady_state(thermal, 31, 1.0, 117);
  const double start_die = state.die_c;
  const double start_sink = state.sink_c;
  // 0.3 s into a 690 W load the die has risen by most of P R_die (the fixture: ~+12 C within 0.3 s).
  ThermalState early = state;
  for (int step = 0; step < 30; ++step) thermal_advance(thermal, 31, 1.0, 690, 0.01, early);
  EXPECT_NEAR(early.die_c - start_die, 12.0, 3.0);
  // After one sink time constant the sink has covered 1 - 1/e of its way.
  ThermalState later = state;
  thermal_advance(thermal, 31, 1.0, 690, thermal.tau_sink_s, later);
  const double sink_target = 31 + 690 * thermal.r_sink_k_per_w;
  EXPECT_NEAR((later.sink_c - start_sink) / (sink_target - start_sink), 1 - std::exp(-1.0), 1e-9);
}

TEST(Thermal, ACoolingResponseOvershootsThenSettlesWhereItsOwnTemperatureHoldsIt) {
  // The H100 soak (tests/fixtures/h100-soak-e): 40 C idle, 74 C after 60 s of 690 W, then 63 C as the fans
  // answer. A passive RC rises monotonically; a cooling response that lags the die overshoots and settles.
  ThermalSpec passive;
  passive.r_die_k_per_w = 0.03;
  passive.r_sink_k_per_w = 0.05;
  passive.tau_die_s = 0.5;
  passive.tau_sink_s = 25;
  ThermalSpec cooled = passive;
  cooled.cooling_cut_max = 0.8;
  cooled.cooling_start_c = 55;
  cooled.cooling_span_c = 12;
  cooled.cooling_tau_s = 40;
  const double inlet_c = 30, idle_w = 75, load_w = 690;
  ThermalState hot = thermal_steady_state(passive, inlet_c, 1.0, idle_w);
  ThermalState fanned = thermal_steady_state(cooled, inlet_c, 1.0, idle_w);
  EXPECT_EQ(fanned.cooling, 0.0);  // idle at 36 C: below the start, no response
  EXPECT_NEAR(fanned.die_c, hot.die_c, 1e-12);
  double peak_c = 0, previous_c = 0;
  bool fell = false;
  for (int second = 0; second < 600; ++second) {
    thermal_advance(passive, inlet_c, 1.0, load_w, 1.0, hot);
    thermal_advance(cooled, inlet_c, 1.0, load_w, 1.0, fanned);
    EXPECT_GE(hot.die_c, previous_c - 1e-9) << "the passive model never falls under a constant load";
    previous_c = hot.die_c;
    fell = fell || fanned.die_c < peak_c - 2.0;
    peak_c = std::max(peak_c, fanned.die_c);
  }
  EXPECT_TRUE(fell) << "the cooled die overshoots: its peak is above where it settles";
  const ThermalState rest = thermal_steady_state(cooled, inlet_c, 1.0, load_w);
  EXPECT_NEAR(fanned.die_c, rest.die_c, 0.05);
  EXPECT_NEAR(fanned.cooling, cooling_target(cooled, rest.die_c), 1e-6) << "at rest it holds its own target";
  EXPECT_LT(rest.die_c, hot.die_c - 5.0);
  EXPECT_GT(peak_c, rest.die_c + 2.0);
  // One long step and many short ones agree (the advance sub-steps while the cooling responds).
  ThermalState coarse = thermal_steady_state(cooled, inlet_c, 1.0, idle_w), fine = coarse;
  thermal_advance(cooled, inlet_c, 1.0, load_w, 30.0, coarse);
  for (int step = 0; step < 300; ++step) thermal_advance(cooled, inlet_c, 1.0, load_w, 0.1, fine);
  EXPECT_NEAR(coarse.die_c, fine.die_c, 0.3);
}

TEST(Thermal, NoCoolingResponseIsThePassiveModelExactly) {
  ThermalSpec thermal;
  ThermalSpec off = thermal;
  off.cooling_start_c = 20;  // start, span and tau do nothing while the cut is 0
  off.cooling_tau_s = 1;
  ThermalState a = thermal_steady_state(thermal, 27, 1.1, 80), b = thermal_steady_state(off, 27, 1.1, 80);
  for (double power_w : {700.0, 120.0, 650.0}) {
    thermal_advance(thermal, 27, 1.1, power_w, 7.5, a);
    thermal_advance(off, 27, 1.1, power_w, 7.5, b);
    EXPECT_EQ(a.die_c, b.die_c);
    EXPECT_EQ(a.sink_c, b.sink_c);
    EXPECT_EQ(b.cooling, 0.0);
  }
}

TEST(Thermal, SlowdownLowersTheClockAboveItsThresholds) {
  const GpuSpec gpu = load_cluster("h200-hgx").gpu;
  EXPECT_DOUBLE_EQ(thermal_clock_limit_mhz(gpu, gpu.thermal.slowdown_c - 1), gpu.max_sm_mhz);
  EXPECT_DOUBLE_EQ(thermal_clock_limit_mhz(gpu, gpu.thermal.slowdown_c + 2),
                   gpu.max_sm_mhz - 2 * gpu.thermal.slowdown_mhz_per_c);
  EXPECT_DOUBLE_EQ(thermal_clock_limit_mhz(gpu, gpu.thermal.hw_slowdown_c), gpu.min_sm_mhz);
  EXPECT_DOUBLE_EQ(clock_bin_mhz(gpu, 1477), 1470);  // 600 + 58 bins of 15 MHz
  // A GPU the power cap already holds at 1470 MHz loses the slowdown from there, not from the max clock (else
  // a capped GPU would not slow until ~8 C past the threshold).
  EXPECT_DOUBLE_EQ(thermal_clock_limit_mhz(gpu, gpu.thermal.slowdown_c + 2, 1470),
                   1470 - 2 * gpu.thermal.slowdown_mhz_per_c);
  EXPECT_DOUBLE_EQ(thermal_clock_limit_mhz(gpu, gpu.thermal.slowdown_c - 1, 1470), gpu.max_sm_mhz);
}

TEST(Leakage, StaticPowerRisesAboveTheReferenceTemperatureOnly) {
  GpuSpec gpu = load_cluster("h200-hgx").gpu;
  EXPECT_DOUBLE_EQ(leakage_power_w(gpu, gpu.thermal.leakage_ref_c - 10), 0.0);
  EXPECT_NEAR(leakage_power_w(gpu, gpu.thermal.leakage_ref_c + 15), 15 * gpu.thermal.leakage_w_per_c, 1e-9);
  EXPECT_GT(gpu.thermal.leakage_w_per_c, 0.0);
  gpu.thermal.leakage_w_per_c = 0;
  EXPECT_DOUBLE_EQ(leakage_power_w(gpu, 90), 0.0);
}

graph::RankProgram gemm_loop(int count) {
  graph::RankProgram program;
  for (int index = 0; index < count; ++index) {
    graph::Op op;
    op.kind = graph::OpKind::kGemm;
    op.gemm.m = op.gemm.n = op.gemm.k = 8192;
    op.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
    op.bytes = 3.0 * 2 * 8192.0 * 8192.0;
    program.ops.push_back(op);
  }
  return program;
}

TEST(Power, GemmLoopHoldsTheCapAtTheFixtureClock) {
  const GpuSpec gpu = load_cluster("h200x4-nvswitch").gpu;
  const graph::RankProgram program = gemm_loop(100);
  ProgramPower power(gpu, program);
  const double clock = power.power_cap_clock_mhz();
  EXPECT_NEAR(clock, 1470, 45);  // fixture: median SM clock 1470-1485 MHz under the 700 W cap
  EXPECT_LE(power.at_clock(clock).mean_busy_power_w, gpu.power_limit_w);
  EXPECT_GT(power.at_clock(clock + gpu.clock_step_mhz).mean_busy_power_w, gpu.power_limit_w);  // tight
  // Uncapped, the same loop would draw ~950 W (the fixture's instantaneous peaks: 935-962 W).
  EXPECT_NEAR(power.at_clock(gpu.max_sm_mhz).mean_busy_power_w, 950, 60);
  // Idle + per-class active power scaled with the clock: lower clock, lower power.
  EXPECT_LT(active_power_w(gpu, PowerClass::kGemm, 0.5, 1.0),
            active_power_w(gpu, PowerClass::kGemm, 1.0, 1.0));
}

TEST(Power, TheCapClockSearchFromAGuessFindsTheBisectionsBinInFewerCalls) {
  // Every threshold between below the minimum clock and above the maximum, every guess: the same bin as the
  // search without a guess; from a guess within a bin or two, at most 4 calls where bisection takes ~8.
  const GpuSpec gpu = load_cluster("h100-hgx").gpu;
  int near_calls = 0;
  int near_searches = 0;
  for (double threshold = gpu.min_sm_mhz - 40; threshold <= gpu.max_sm_mhz + 40; threshold += 37) {
    int calls = 0;
    auto fits = [&](double clock_mhz) { return ++calls, clock_mhz <= threshold; };
    const double bisected = highest_fitting_clock_mhz(gpu, fits);
    for (double guess = gpu.min_sm_mhz - 100; guess <= gpu.max_sm_mhz + 100; guess += 53) {
      calls = 0;
      EXPECT_EQ(highest_fitting_clock_mhz(gpu, fits, guess), bisected) << threshold << " " << guess;
      if (std::fabs(guess - threshold) < gpu.clock_step_mhz && threshold < gpu.max_sm_mhz)
        near_calls += calls, ++near_searches;
    }
  }
  ASSERT_GT(near_searches, 0);
  EXPECT_LE(static_cast<double>(near_calls) / near_searches, 4.0);
}

}  // namespace
}  // namespace calo::sim

namespace calo::sim {
namespace {

TEST(WaitPower, AShortWaitStaysHotALongBubbleCools) {
  GpuSpec gpu;
  gpu.wait_power_w = 300;
  EXPECT_DOUBLE_EQ(mean_wait_power_w(gpu, 4, 0.4), 300) << "no decay: every wait at W";
  gpu.wait_power_decay_s = 0.01;
  // Waits of 1 ms: W (tau / L)(1 - e^(-L/tau)) = 300 * 10 * (1 - e^-0.1) = 285.5 W; of 100 ms: 30 W.
  EXPECT_NEAR(mean_wait_power_w(gpu, 100, 0.1), 300 * 10 * -std::expm1(-0.1), 1e-9);
  EXPECT_NEAR(mean_wait_power_w(gpu, 1, 0.1), 300 * 0.1 * -std::expm1(-10.0), 1e-9);
  EXPECT_GT(mean_wait_power_w(gpu, 100, 0.1), 280);
  EXPECT_LT(mean_wait_power_w(gpu, 1, 0.1), 31);
  EXPECT_DOUBLE_EQ(mean_wait_power_w(gpu, 0, 0.0), 300) << "no wait: the figure is never applied";
}

TEST(WaitPower, APipelinesWaitsCostEnergyAndTheDataParallelStepBarelyChanges) {
  // Llama3-8B 4 layers on h100-hgx: PP4 1F1B waits in its bubbles, DP4 hardly waits. A wait power raises the
  // pipeline's energy per step by about W over its waits, the data-parallel step's by little, and neither
  // step time moves.
  const ClusterSpec base = load_cluster("h100-hgx");
  ClusterSpec waiting = base;
  waiting.gpu.wait_power_w = 200;
  double pipeline_w = 0, data_parallel_w = 0;
  for (const auto& [pp, dp] : std::vector<std::pair<int, int>>{{4, 1}, {1, 4}}) {
    parallel::Layout layout;
    layout.pp = pp;
    layout.dp = dp;
    layout.micro_batch = 1;
    layout.global_batch = 8;
    layout.seq_length = 2048;
    const graph::Graph graph = testing::make_graph("llama3-8b-4layers", layout);
    SimOptions options;
    options.steps = 2;
    const SimResult idle = simulate(graph, base, options);
    const SimResult hot = simulate(graph, waiting, options);
    EXPECT_NEAR(hot.iteration_s, idle.iteration_s, 0.01 * idle.iteration_s);
    const auto energy_j = [](const SimResult& result) {
      double sum = 0;
      for (const GpuResult& gpu : result.gpus) sum += gpu.energy_j;
      return sum;
    };
    const double extra_w = (energy_j(hot) - energy_j(idle)) / (idle.iteration_s * idle.steps * idle.world);
    // Mean extra power per GPU = W x the step's share without compute (bubbles, exposed transfers).
    EXPECT_NEAR(extra_w, 200 * (1 - idle.compute_busy_s / idle.iteration_s), 10) << "pp " << pp;
    (pp == 4 ? pipeline_w : data_parallel_w) = extra_w;
  }
  EXPECT_GT(pipeline_w, data_parallel_w + 20);
}

}  // namespace
}  // namespace calo::sim
