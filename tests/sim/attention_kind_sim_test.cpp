// `calo sim` with the attention implementation (flag and cluster file key) and Megatron-LM's pipeline
// scatter/gather, run as a real process (issue 16, items 3 and 4).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "core/error.h"
#include "sim/cluster.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

using calo::testing::Outcome;
using calo::testing::run_calo;

nlohmann::json sim_json(const std::string& args) {
  const Outcome outcome = run_calo("sim " + args + " --json --no-store");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  return outcome.exit_code == 0 ? nlohmann::json::parse(outcome.output) : nlohmann::json::object();
}

/// Writes the h100-hgx preset with `attention: <value>` added and returns its path.
std::string cluster_with_attention(const std::string& value) {
  nlohmann::json cluster = to_json(load_cluster("h100-hgx"));
  cluster["name"] = "h100-" + value;
  cluster["attention"] = value;
  const auto path = testing::temp_dir("attention-" + value) / "cluster.yaml";
  std::ofstream(path) << cluster.dump(2);  // JSON is YAML
  return path.string();
}

TEST(SimAttentionKind, TheClusterFilesAttentionIsTheDefaultAndTheFlagOverridesIt) {
  const std::string job = "--model llama3-8b --gpus 8 --tp 8 --seq 8192 --gbs 8";
  const auto fused = sim_json(job + " --cluster h100-hgx");
  const auto unfused = sim_json(job + " --cluster " + cluster_with_attention("unfused"));
  const auto overridden =
      sim_json(job + " --cluster " + cluster_with_attention("unfused") + " --attention fused");
  ASSERT_TRUE(fused.contains("iteration_s") && unfused.contains("iteration_s") &&
              overridden.contains("layout"));
  EXPECT_NE(unfused["layout"].get<std::string>().find("unfused-attn"), std::string::npos)
      << unfused["layout"];
  EXPECT_EQ(overridden["layout"].get<std::string>().find("unfused-attn"), std::string::npos);
  // At 8K tokens the unfused core does twice the attention FLOPs through s^2 scores in HBM: slower, and the
  // model FLOPs (MFU's numerator) stay the model's, so MFU falls with it.
  EXPECT_GT(unfused["iteration_s"].get<double>(), 1.2 * fused["iteration_s"].get<double>());
  EXPECT_NEAR(unfused["mfu"].get<double>() * unfused["iteration_s"].get<double>(),
              fused["mfu"].get<double>() * fused["iteration_s"].get<double>(),
              1e-9 * fused["iteration_s"].get<double>());
  EXPECT_NEAR(overridden["iteration_s"].get<double>(), fused["iteration_s"].get<double>(), 1e-12);
}

TEST(SimAttentionKind, UnfusedAttentionMemoryIsWhatTheRefusalCounts) {
  // 32K tokens per sequence on one H100 with unfused attention keep 2 a s^2 bytes per layer: refused (exit 2)
  // with the breakdown, while the fused core fits.
  const std::string job =
      "--model llama3-8b --cluster h100-hgx --gpus 8 --tp 8 --seq 32768 --gbs 8 --recompute none";
  EXPECT_TRUE(sim_json(job).contains("iteration_s"));
  const Outcome refused = run_calo("sim " + job + " --attention unfused --no-store");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("activations"), std::string::npos) << refused.output;
}

TEST(SimAttentionKind, BadValuesExitWithTwoNamingTheKey) {
  const Outcome flag =
      run_calo("sim --model tiny-dense --cluster h100-hgx --gpus 1 --attention flash --no-store");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_NE(flag.output.find("--attention: 'flash'"), std::string::npos) << flag.output;
  EXPECT_NE(flag.output.find("unfused"), std::string::npos) << flag.output;
  nlohmann::json cluster = to_json(load_cluster("h100-hgx"));
  cluster["attention"] = "sdpa";
  try {
    parse_cluster(cluster, "test cluster");
    ADD_FAILURE() << "attention: sdpa was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("test cluster: attention: 'sdpa'"), std::string::npos)
        << error.what();
  }
}

TEST(SimPipelineScatterGather, MovesStageTrafficFromTheNetworkToNvlink) {
  // GPT-3 175B TP8 x PP8 on DGX A100 without sequence parallel: every stage boundary crosses nodes. With
  // scatter/gather each of the 8 TP ranks sends 1/8 over its own NIC and the slices are all-gathered over
  // NVLink, so exposed pipeline time drops and the step gets shorter.
  const std::string job =
      "--model gpt3-175b --cluster a100-dgx --gpus 64 --tp 8 --pp 8 --gbs 64 --no-sequence-parallel "
      "--recompute full";
  const auto on = sim_json(job);
  const auto off = sim_json(job + " --no-pp-scatter-gather");
  ASSERT_TRUE(on.contains("exposed_comm_s") && off.contains("exposed_comm_s"));
  EXPECT_NE(on["layout"].get<std::string>().find("pp-scatter-gather"), std::string::npos);
  EXPECT_LT(on["exposed_comm_s"]["pp"].get<double>(), 0.5 * off["exposed_comm_s"]["pp"].get<double>());
  EXPECT_GT(on["exposed_comm_s"]["tp"].get<double>(), off["exposed_comm_s"]["tp"].get<double>());
  EXPECT_LT(on["iteration_s"].get<double>(), off["iteration_s"].get<double>());
}

}  // namespace
}  // namespace calo::sim
