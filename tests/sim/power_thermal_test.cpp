// Power and heat: steady state = inlet + P R, time constants, thermal slowdown, and the H200 power cap
// derived from the 4 x H200 fixture (a bf16 8192^3 GEMM loop holds 700 W at ~1470 MHz).
#include "sim/power_thermal.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace calo::sim
