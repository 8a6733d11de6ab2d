// `calo calibrate` on a CPU-backend bench (issue 65): its tables name the fitted parameters as what they are
// on a CPU host (core.*), while the cluster YAML keeps the keys the simulator reads (gpu.*); and every fitted
// run is recorded with its identity (host and start), so a report can tell in-sample from out-of-sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "calibrate/measurement.h"
#include "core/config.h"
#include "sim/cluster.h"
#include "store/run_store.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::Outcome;
using calo::testing::run_calo;

TEST(CpuHostNames, AGpuKeyReadsAsACoreOnTheCpuHostOnly) {
  const sim::ClusterSpec cpu = sim::load_cluster("cpu-host");
  const sim::ClusterSpec h100 = sim::load_cluster("h100-hgx");
  EXPECT_EQ(shown_parameter_key("gpu.efficiency.gemm_max", cpu.gpu), "core.efficiency.gemm_max");
  EXPECT_EQ(shown_parameter_key("gpu.peak_fp32_tflops", cpu.gpu), "core.peak_fp32_tflops");
  EXPECT_EQ(shown_parameter_key("gpu.efficiency.gemm_max", h100.gpu), "gpu.efficiency.gemm_max");
  EXPECT_EQ(shown_parameter_key("network", cpu.gpu), "network");
}

TEST(CpuHostNames, TheTableSaysCoreTheYamlKeepsGpuAndEachRunItsIdentity) {
  const fs::path bench = calo::testing::scratch_path("cpu-names-bench");
  const fs::path out = calo::testing::scratch_path("cpu-names.yaml");
  const Outcome benched = run_calo(
      "bench --model tiny-dense --backend cpu --gbs 2 --seq 64 --steps 3 "
      "--warmup 1 --trace-ops --no-progress --out " +
      bench.string());
  ASSERT_EQ(benched.exit_code, 0) << benched.output;
  const Outcome calibrated =
      run_calo("calibrate " + bench.string() + " --cluster cpu-host --no-loo --out " + out.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  const std::string& text = calibrated.output;
  EXPECT_NE(text.find("# device: CPU host"), std::string::npos) << text;
  EXPECT_NE(text.find("core.peak_fp32_tflops"), std::string::npos) << text;
  EXPECT_NE(text.find("core.efficiency.gemm_max"), std::string::npos) << text;
  EXPECT_NE(text.find("kept from the base (no run determines them): core.idle_power_w"), std::string::npos)
      << text;
  EXPECT_EQ(text.find(" gpu.efficiency"), std::string::npos) << "a CPU core named a GPU: " << text;
  // The file the simulator reads keeps its keys; its provenance names the run by host and start.
  std::ifstream file(out);
  std::stringstream yaml;
  yaml << file.rdbuf();
  const nlohmann::json cluster = core::parse_yaml(yaml.str(), out.string());
  EXPECT_TRUE(cluster["gpu"]["efficiency"].contains("gemm_max")) << cluster["gpu"].dump();
  EXPECT_FALSE(cluster.contains("core"));
  const nlohmann::json& run = cluster["calibration"]["runs"][0];
  const store::RunInfo info = store::RunReader(bench).run();
  ASSERT_TRUE(run["started_unix_ns"].is_number_integer()) << run.dump();
  EXPECT_EQ(run["started_unix_ns"].get<int64_t>(), info.wall_offset_ns);
  EXPECT_NE(info.wall_offset_ns, 0);
  EXPECT_EQ(run["host"], info.host);
  fs::remove_all(bench);
  fs::remove(out);
}

}  // namespace
}  // namespace calo::calibrate
