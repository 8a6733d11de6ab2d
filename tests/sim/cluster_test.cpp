// Cluster descriptions: every preset loads, the H200 host matches its fixture, bad files get clear errors.
#include "sim/cluster.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"
#include "sim/cluster_trust.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

TEST(Cluster, EveryPresetLoadsAndRoundTrips) {
  const auto names = core::preset_names("clusters");
  for (const char* expected : {"a100-dgx", "h100-hgx", "h200-hgx", "h200x4-nvswitch", "mi250"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  for (const auto& name : names) {
    const ClusterSpec cluster = load_cluster(name);
    EXPECT_EQ(cluster.name, name);
    const bool cpu_host =
        cluster.gpu.name.rfind("CPU", 0) == 0;  // the CPU backend's host: GFLOP/s, not TFLOP/s
    EXPECT_GT(cluster.gpu.peak_bf16_flops, cpu_host ? 1e9 : 1e14) << name;
    EXPECT_GT(cluster.nic_bandwidth_per_gpu(), 0) << name;
    // to_json gives back an equivalent description.
    const ClusterSpec again = parse_cluster(to_json(cluster), "round trip");
    EXPECT_EQ(to_json(again), to_json(cluster)) << name;
  }
}

TEST(Cluster, ASlowCpuHostsCalibratedPeakLoads) {
  // The main job on a 2-core VM calibrated cpu-host to 0.009781 TFLOP/s, under the old 0.01 floor, so its
  // own simulation refused the file it had just written; 1 GFLOP/s is the floor now, 1e-12 is still refused.
  nlohmann::json described = to_json(load_cluster("cpu-host"));
  described["gpu"]["peak_bf16_tflops"] = 0.009781305848;
  EXPECT_NEAR(parse_cluster(described, "2-core VM").gpu.peak_bf16_flops, 9.781305848e9, 1.0);
  // Without peak_fp32_tflops it defaults to bf16 / 16, which is within its own floor.
  described["gpu"].erase("peak_fp32_tflops");
  described["gpu"]["peak_bf16_tflops"] = 1e-3;
  EXPECT_NEAR(parse_cluster(described, "no fp32 figure").gpu.peak_fp32_flops, 1e9 / 16, 1.0);
  described["gpu"]["peak_bf16_tflops"] = 1e-12;
  EXPECT_THROW(parse_cluster(described, "stuck"), InputError);
}

TEST(Cluster, TheRaiseResponseIsOptionalAndRoundTrips) {
  // Absent, the controller climbs back with its one response; given, with its own; written, the value in use.
  nlohmann::json described = to_json(load_cluster("h100-hgx"));
  described["gpu"]["power_control"].erase("raise_response_ms");
  const ClusterSpec one_way = parse_cluster(described, "one way");
  EXPECT_DOUBLE_EQ(raise_response_ms(one_way.gpu.power_control), one_way.gpu.power_control.response_s * 1e3);
  described["gpu"]["power_control"]["raise_response_ms"] = 42.5;
  const ClusterSpec slow = parse_cluster(described, "slow climb");
  EXPECT_DOUBLE_EQ(slow.gpu.power_control.raise_response_s, 0.0425);
  EXPECT_DOUBLE_EQ(to_json(slow)["gpu"]["power_control"]["raise_response_ms"].get<double>(), 42.5);
  described["gpu"]["power_control"]["raise_response_ms"] = -1;
  EXPECT_THROW(parse_cluster(described, "bad"), InputError);
}

TEST(Cluster, H200HostMatchesTheFixture) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  EXPECT_EQ(cluster.node.gpus, 4);
  EXPECT_DOUBLE_EQ(cluster.gpu.idle_power_w, 117);
  EXPECT_DOUBLE_EQ(cluster.gpu.power_limit_w, 700);
  EXPECT_DOUBLE_EQ(cluster.gpu.max_sm_mhz, 1980);
  // The fitted thermal resistances by slot reproduce the ~6 C spread under 690 W (GPU 1 hottest).
  const double r_total = cluster.gpu.thermal.r_die_k_per_w + cluster.gpu.thermal.r_sink_k_per_w;
  const double hottest = cluster.slot_inlet_c(1) + 690 * r_total * cluster.slot_r_scale(1);
  const double coolest = cluster.slot_inlet_c(0) + 690 * r_total * cluster.slot_r_scale(0);
  EXPECT_NEAR(hottest - coolest, 6.0, 1.0);
  EXPECT_NEAR(coolest, 56, 2.0);  // GPU 0 reached 56 C at the end of the 45 s GEMM phase
  EXPECT_NEAR(cluster.slot_inlet_c(0) + 117 * r_total, 35, 1.5);  // idle ~34-35 C
}

/// The InputError message of loading the cluster file `path` (a test failure, and "", if it loads).
std::string load_error(const std::string& path) {
  try {
    load_cluster(path);
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << path << " loaded; expected InputError";
  return "";
}

TEST(Cluster, RejectsTyposAndBadValuesWithTheKeyNamed) {
  const auto dir = testing::temp_dir("cluster");
  std::string text = testing::ideal_cluster_yaml(8);
  const std::string typo = text + "colective: {algorithm: ring}\n";
  const std::string typo_error = load_error(testing::write_file(dir / "typo.yaml", typo));
  EXPECT_NE(typo_error.find("colective"), std::string::npos) << typo_error;
  std::string bad_slots = text;
  bad_slots.replace(bad_slots.find("  nvlink_latency_us: 0\n"), 22,
                    "  nvlink_latency_us: 0\n  slot_r_scale: [1, 2]\n");
  const std::string slots_error = load_error(testing::write_file(dir / "slots.yaml", bad_slots));
  EXPECT_NE(slots_error.find("slot_r_scale"), std::string::npos) << slots_error;
  EXPECT_NE(slots_error.find("one per GPU slot"), std::string::npos) << slots_error;
  std::string idle_above_cap = text;
  idle_above_cap.replace(idle_above_cap.find("idle_power_w: 100"), 17, "idle_power_w: 900");
  EXPECT_THROW(load_cluster(testing::write_file(dir / "idle.yaml", idle_above_cap)), InputError);
  std::string bad_algorithm = text + "collective: {algorithm: butterfly}\n";
  EXPECT_THROW(load_cluster(testing::write_file(dir / "algo.yaml", bad_algorithm)), InputError);
  EXPECT_THROW(load_cluster("no-such-cluster"), InputError);
  // The attention backward's efficiency fraction: a value outside its range names the key and the range.
  std::string bad_fraction = text;
  bad_fraction.replace(bad_fraction.find("efficiency: {kernel_overhead_us: 0}"), 35,
                       "efficiency: {kernel_overhead_us: 0, attention_backward_fraction: 0}");
  const std::string fraction_error = load_error(testing::write_file(dir / "fraction.yaml", bad_fraction));
  EXPECT_NE(fraction_error.find("'attention_backward_fraction' = 0 is out of range; use a value in"),
            std::string::npos)
      << fraction_error;
  // Attention's grid-rows half point: negative is bad input, named with its range.
  std::string bad_rows = text;
  bad_rows.replace(bad_rows.find("efficiency: {kernel_overhead_us: 0}"), 35,
                   "efficiency: {kernel_overhead_us: 0, attention_half_rows: -1}");
  const std::string rows_error = load_error(testing::write_file(dir / "rows.yaml", bad_rows));
  EXPECT_NE(rows_error.find("'attention_half_rows' = -1 is out of range; use a value in"), std::string::npos)
      << rows_error;
}

// Counts were narrowed to int before the range check (4294967304 GPUs per node passed as 8), and "inf" was
// read as a number (an infinite bandwidth passed `> 0`); both are bad input now, naming the key.
TEST(Cluster, CountsBeyondIntAndNonFiniteNumbersAreRejected) {
  const std::string text = testing::ideal_cluster_yaml(8);
  auto rejects = [&](const std::string& from, const std::string& to, const std::string& key) {
    std::string changed = text;
    ASSERT_NE(changed.find(from), std::string::npos) << from;
    changed.replace(changed.find(from), from.size(), to);
    try {
      parse_cluster(core::parse_yaml(changed, "c.yaml"), "c.yaml");
      FAIL() << "accepted " << to;
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    }
  };
  rejects("gpus: 8", "gpus: 4294967304", "'gpus'");
  rejects("nics_per_node: ", "nics_per_node: 4294967297 #", "'nics_per_node'");
  rejects("nvlink_bandwidth_gb_s: ", "nvlink_bandwidth_gb_s: inf #", "'nvlink_bandwidth_gb_s'");
}

}  // namespace
}  // namespace calo::sim

namespace calo::sim {
namespace {

TEST(Cluster, WaitPowerIsOptionalBoundedAndRoundTrips) {
  nlohmann::json described = to_json(load_cluster("h100-hgx"));
  described["gpu"].erase("wait_power_w");
  described["gpu"].erase("wait_power_decay_ms");
  const ClusterSpec idle_waits = parse_cluster(described, "no wait power");
  EXPECT_EQ(idle_waits.gpu.wait_power_w, 0.0) << "absent: a waiting GPU draws idle power, the older model";
  EXPECT_EQ(idle_waits.gpu.wait_power_decay_s, 0.0);
  described["gpu"]["wait_power_w"] = 250;
  described["gpu"]["wait_power_decay_ms"] = 8.287994101;
  const ClusterSpec waits = parse_cluster(described, "wait power");
  EXPECT_DOUBLE_EQ(waits.gpu.wait_power_decay_s, 8.287994101e-3);
  EXPECT_EQ(to_json(waits)["gpu"]["wait_power_decay_ms"].get<double>(), 8.287994101) << "ms -> s -> ms exact";
  described["gpu"]["wait_power_w"] = -1;
  EXPECT_THROW(parse_cluster(described, "negative"), InputError);
  described["gpu"]["wait_power_w"] = 650;  // + idle 119 W > the 700 W cap
  try {
    parse_cluster(described, "above the cap");
    ADD_FAILURE() << "a waiting GPU above its cap loaded";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("idle_power_w + wait_power_w"), std::string::npos)
        << error.what();
  }
}

TEST(ClusterTrust, CalibratedPresetsCarryTheirHeldOutErrorAndDatasheetOnesPointToTheirSibling) {
  const ClusterTrust fitted = cluster_trust(load_cluster("h200-hgx-calibrated"));
  EXPECT_TRUE(fitted.calibrated);
  EXPECT_GT(fitted.runs, 0);
  EXPECT_GT(fitted.held_out, 0);
  EXPECT_GT(fitted.worst_step_error, 0);
  EXPECT_LT(fitted.worst_step_error, 0.10);
  EXPECT_NE(fitted.summary.find("held out"), std::string::npos) << fitted.summary;
  const ClusterTrust datasheet = cluster_trust(load_cluster("h100-hgx"));
  EXPECT_FALSE(datasheet.calibrated);
  EXPECT_EQ(datasheet.calibrated_sibling, "h100-hgx-calibrated");
  EXPECT_NE(datasheet.summary.find("--cluster h100-hgx-calibrated"), std::string::npos) << datasheet.summary;
  const ClusterTrust alone = cluster_trust(load_cluster("mi250"));
  EXPECT_TRUE(alone.calibrated_sibling.empty());
  EXPECT_NE(alone.summary.find("not fitted"), std::string::npos) << alone.summary;
}

TEST(ClusterTrust, ACapBelowTheCardsLimitNamesTheUnfittedClockPowerExponentAndThePeakSample) {
  // h100-hgx-calibrated kept the exponent from its base preset (its calibration's kept_from_base says so).
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  const std::string capped = power_cap_trust(cluster, 500);
  EXPECT_NE(capped.find("500 W cap"), std::string::npos) << capped;
  EXPECT_NE(capped.find("no run has fitted"), std::string::npos) << capped;
  EXPECT_NE(capped.find("peak sample is not bounded"), std::string::npos) << capped;
  EXPECT_EQ(power_cap_trust(cluster, cluster.gpu.power_limit_w), "");
  EXPECT_EQ(power_cap_trust(cluster, 0), "");
  // A calibration that does not list the exponent among what it kept fitted it.
  ClusterSpec refitted = cluster;
  refitted.calibration["kept_from_base"] = nlohmann::json::array({"gpu.peak_bf16_tflops"});
  EXPECT_NE(power_cap_trust(refitted, 500).find("fitted by calo calibrate"), std::string::npos);
}

}  // namespace
}  // namespace calo::sim
