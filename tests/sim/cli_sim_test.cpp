// `calo sim` as a real process: JSON output, stored run, timeline file, and exit code 2 with a clear message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "sim_test_util.h"
#ifdef CALO_SIM_HAS_STORE
#include "store/run_store.h"
#endif

namespace calo::sim {
namespace {

using calo::testing::Outcome;
using calo::testing::run_calo;

TEST(CalosimCli, PrintsJsonWithEveryFigure) {
  const Outcome outcome = run_calo(
      "sim --model tiny-dense --cluster h200x4-nvswitch --gpus 4 --tp 2 --gbs 4 --steps 3 --json --no-store");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  EXPECT_EQ(json["gpus"], 4);
  EXPECT_EQ(json["per_step"].size(), 3u);
  for (const char* key : {"iteration_s", "tokens_per_s", "model_tflops_per_gpu", "mfu", "energy_per_step_j",
                          "mean_power_w", "peak_power_w", "max_die_c", "throttle_power_cap_s",
                          "throttle_thermal_s", "exposed_comm_s", "wait_s"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_GT(json["iteration_s"].get<double>(), 0);
  EXPECT_GT(json["exposed_comm_s"]["tp"].get<double>(), 0);  // dp = 2 derived, tp = 2 all-reduces
}

TEST(CalosimCli, StoresARunAndWritesATimeline) {
  const auto dir = testing::temp_dir("cli");
  const std::string timeline = (dir / "timeline.json").string();
  const Outcome outcome =
      run_calo("sim --model tiny-dense --cluster h200x4-nvswitch --gpus 4 --pp 2 --gbs 8 --out " +
               (dir / "run").string() + " --timeline " + timeline);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("iteration time"), std::string::npos) << outcome.output;
#ifdef CALO_SIM_HAS_STORE
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "run.db")) << outcome.output;
#endif
  std::ifstream file(timeline);
  const auto trace = nlohmann::json::parse(file);
  int spans = 0;
  for (const auto& event : trace["traceEvents"]) spans += event["ph"] == "X";
  EXPECT_GT(spans, 100);
}

TEST(CalosimCli, BadInputExitsWithTwoAndNamesTheFix) {
  Outcome outcome = run_calo("sim --cluster no-such-cluster --gpus 4 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("h200-hgx"), std::string::npos) << outcome.output;  // lists the presets
  outcome = run_calo("sim --cluster h200-hgx --gpus 6 --tp 4 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("multiple of tp*cp*pp"), std::string::npos) << outcome.output;
  outcome = run_calo("sim --cluster h200-hgx --gpus 4 --slow-gpu 9=0.5 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--slow-gpu"), std::string::npos) << outcome.output;
}

}  // namespace
}  // namespace calo::sim

#ifdef CALO_SIM_HAS_STORE
namespace calo::sim {
namespace {

TEST(CalosimCli, WarmupStepsAreStoredAsWarmup) {
  const auto dir = testing::temp_dir("warmup") / "run";
  const calo::testing::Outcome outcome = calo::testing::run_calo(
      "sim --model tiny-dense --cluster h200x4-nvswitch --gpus 1 --gbs 2 --steps 3 --warmup 1 --out " +
      dir.string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  store::RunReader reader(dir);
  int warmup = 0, measured = 0;
  for (const store::Span& span : reader.spans(store::SpanKind::kStep)) {
    warmup += span.name == "warmup";
    measured += span.name == "step";
  }
  // As for calo bench: the warm-up comes before the --steps measured steps.
  EXPECT_EQ(warmup, 1);
  EXPECT_EQ(measured, 3);
  for (const char* flags : {"--steps 0", "--warmup -1"}) {
    const calo::testing::Outcome bad = calo::testing::run_calo(
        std::string("sim --model tiny-dense --cluster h200x4-nvswitch --gpus 1 --no-store ") + flags);
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    EXPECT_NE(bad.output.find(std::string(flags).substr(0, 7)), std::string::npos) << bad.output;
  }
}

}  // namespace
}  // namespace calo::sim
#endif
