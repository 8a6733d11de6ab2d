// torchtitan as calo's client (issue 43, tests/fixtures/h200-torchtitan and h200x2-torchtitan): a torchtitan
// 0.2.2 training of a Llama3-8B slice recorded on one H200 and with FSDP2 on two with `calo record --markers
// torchtitan`, its Kineto traces ingested and given to `calo calibrate`, and the fitted cluster predicting a
// second, held-out torchtitan run — the loop a user runs on their own job — plus `calo bench` beside
// torchtitan on the same shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "fixture_runs.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::compare_figures;
using calo::testing::Compared;
using calo::testing::Outcome;
using calo::testing::run_calo;
using calo::testing::scratch_path;
using calo::testing::unpacked_fixture;

/// The fixture's runs/ (runs, torchtitan's own JSON summaries) and its trace/ beside it.
const fs::path& titan_runs() {
  return unpacked_fixture("h200-torchtitan");
}

/// torchtitan's own summary of one run (titan_train.py --json): step times, tokens/s, peak memory.
nlohmann::json titan_summary(const std::string& name) {
  std::ifstream in(titan_runs() / (name + ".json"));
  return nlohmann::json::parse(in);
}

/// `twin` (a simulated run) against the measured `run`: step time within `step_tolerance`, mean power and
/// energy per step within 5 % (the targets).
void expect_twin_within(const fs::path& run, const fs::path& twin, double step_tolerance) {
  const auto figures = compare_figures(run, twin);
  ASSERT_TRUE(figures.count("step_time_mean_s") && figures.count("power_gpu_mean_w") &&
              figures.count("energy_per_step_j"));
  const auto error = [](const Compared& figure) { return figure.simulated / figure.measured - 1.0; };
  EXPECT_LE(std::abs(error(figures.at("step_time_mean_s"))), step_tolerance);
  EXPECT_LE(std::abs(error(figures.at("power_gpu_mean_w"))), 0.05);
  EXPECT_LE(std::abs(error(figures.at("energy_per_step_j"))), 0.05);
}

TEST(TorchtitanPeer, RecordedStepsAreTorchtitansOwnSteps) {
  // `calo record --markers torchtitan` made one step per torchtitan log line; the recorded step time agrees
  // with the step torchtitan timed itself (device-synchronised around Trainer.train_step) within 2 %.
  const fs::path run = titan_runs() / "titan-compile";
  const auto figures = compare_figures(titan_runs() / "calo-bench", run);
  ASSERT_TRUE(figures.count("step_time_mean_s")) << "no step time in the recorded torchtitan run";
  const double recorded_s = figures.at("step_time_mean_s").simulated;
  const double own_s = titan_summary("titan-compile")["step_s_mean"].get<double>();
  EXPECT_NEAR(recorded_s / own_s, 1.0, 0.02)
      << recorded_s << " s recorded vs " << own_s << " s by torchtitan";
  // calo bench at or below torchtitan's step (issue 43 target), at the same mean power within 5 %.
  const Compared& step = figures.at("step_time_mean_s");
  EXPECT_LE(step.measured, step.simulated) << "calo bench slower than torchtitan (compiled)";
  const Compared& power = figures.at("power_gpu_mean_w");
  EXPECT_NEAR(power.measured / power.simulated, 1.0, 0.05) << power.measured << " W vs " << power.simulated;
}

TEST(TorchtitanPeer, ItsTraceCalibratesASimulatorThatPredictsAHeldOutTorchtitanRun) {
  // Fit on torchtitan's own Kineto trace (kernels) and the recorded profile run (idle, heat); predict the
  // other run (titan-compile: 30 steps, never given to calibrate). Today: step +1.3 %, mean power -2.8 %,
  // energy per step -1.6 % (docs/benchmarks/torchtitan.md).
  const fs::path trace = titan_runs().parent_path() / "trace" / "rank0_trace.json.gz";
  const fs::path out = scratch_path("torchtitan-peer");
  fs::create_directories(out);
  const fs::path fitted = out / "titan-h200.yaml";
  const Outcome calibrated =
      run_calo("calibrate " + trace.string() + " " + (titan_runs() / "titan-profile").string() +
               " --cluster h200-hgx --out " + fitted.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("gemm_time"), std::string::npos) << calibrated.output;
  const fs::path twin = out / "twin";
  const Outcome simulated =
      run_calo("sim --model llama3-8b --layers 4 --seq 8192 --gbs 1 --steps 5 --warmup 2 --cluster " +
               fitted.string() + " --out " + twin.string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  expect_twin_within(titan_runs() / "titan-compile", twin, 0.04);
}

TEST(TorchtitanPeer, SimFromTheRecordedRunPredictsItWithTheJobTheUserNames) {
  // A `calo record` run stores no model: `calo sim --from` asks for it by name, then simulates the twin (the
  // run's steps, start temperature) on the shipped H200 preset, fitted to calo bench runs only. Today: step
  // -4.2 %, mean power +0.9 %, energy per step -3.3 % against torchtitan compiled
  // (docs/benchmarks/torchtitan.md).
  const fs::path run = titan_runs() / "titan-compile";
  const Outcome refused = run_calo("sim --from " + run.string() + " --cluster h200-hgx-calibrated");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("add --model (a preset or YAML file)"), std::string::npos) << refused.output;
  const fs::path twin = scratch_path("torchtitan-twin");
  const Outcome simulated =
      run_calo("sim --from " + run.string() + " --model llama3-8b --layers 4 --seq 8192 --gbs 1 " +
               "--cluster h200-hgx-calibrated --out " + twin.string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  EXPECT_NE(simulated.output.find("twin of"), std::string::npos) << simulated.output;
  expect_twin_within(run, twin, 0.05);
}

TEST(TorchtitanPeer, ItsTraceIngestsAsAKernelBreakdownOfOneStep) {
  // torchtitan's profiler trace of step 6 (compiled): 676 kernels, GEMMs the largest share, the window one
  // step.
  const fs::path trace = titan_runs().parent_path() / "trace" / "rank0_trace.json.gz";
  const fs::path out = scratch_path("torchtitan-ingest");
  const Outcome ingested = run_calo("ingest " + trace.string() + " --out " + out.string() + " --json");
  ASSERT_EQ(ingested.exit_code, 0) << ingested.output;
  const std::size_t start = ingested.output.find('{');
  ASSERT_NE(start, std::string::npos) << ingested.output;
  const nlohmann::json breakdown = nlohmann::json::parse(ingested.output.substr(start));
  EXPECT_EQ(breakdown["kernels"].get<int>(), 676);
  ASSERT_EQ(breakdown["lanes"].size(), 1u);
  const nlohmann::json& lane = breakdown["lanes"][0];
  // The profiled window is one training step: within 3 % of the step torchtitan timed itself.
  const double own_step_s = titan_summary("titan-profile")["step_s_mean"].get<double>();
  EXPECT_NEAR(lane["window_s"].get<double>() / own_step_s, 1.0, 0.03);
  // GEMMs are the largest share (91 of 147 busy ms); no communication on one GPU.
  double busy_s = 0;
  for (const auto& [name, category] : lane["categories"].items()) busy_s += category["busy_s"].get<double>();
  EXPECT_GT(lane["categories"]["gemm"]["busy_s"].get<double>() / busy_s, 0.55);
  EXPECT_EQ(lane["comm_union_s"].get<double>(), 0.0);
}

// ---- two GPUs (tests/fixtures/h200x2-torchtitan): torchtitan's FSDP2 over two H200, the same loop.

/// The two-GPU fixture's runs/ (titan-profile with its traces of both ranks beside it in trace/, titan-fsdp).
const fs::path& titan_pair_runs() {
  return unpacked_fixture("h200x2-torchtitan");
}

TEST(TorchtitanPair, BothRanksTracesIngestAsOneFsdpStepEach) {
  // torchtitan's profiler traces of step 6 on both ranks: 1448 kernels, each rank's window one step (within
  // 1 % of the 164.2 ms torchtitan timed over the held-out run), FSDP2's all-gathers and reduce-scatters
  // mostly hidden behind compute (31 ms of communication, under 8 ms of it exposed).
  const fs::path trace = titan_pair_runs().parent_path() / "trace";
  const Outcome ingested = run_calo("ingest " + (trace / "rank0_trace.json.gz").string() + " " +
                                    (trace / "rank1_trace.json.gz").string() + " --out " +
                                    scratch_path("pair-ingest").string() + " --json");
  ASSERT_EQ(ingested.exit_code, 0) << ingested.output;
  const nlohmann::json breakdown = nlohmann::json::parse(ingested.output.substr(ingested.output.find('{')));
  EXPECT_EQ(breakdown["kernels"].get<int>(), 1448);
  ASSERT_EQ(breakdown["lanes"].size(), 2u);
  std::ifstream summary(titan_pair_runs() / "titan-fsdp.json");
  const double own_step_s = nlohmann::json::parse(summary)["step_s_mean"].get<double>();
  for (const nlohmann::json& lane : breakdown["lanes"]) {
    EXPECT_NEAR(lane["window_s"].get<double>() / own_step_s, 1.0, 0.01);
    EXPECT_GT(lane["comm_union_s"].get<double>(), 0.025);
    EXPECT_LT(lane["categories"]["reduce_scatter"]["exposed_s"].get<double>() +
                  lane["categories"]["all_gather"]["exposed_s"].get<double>(),
              0.009);
  }
}

TEST(TorchtitanPair, ItsTracesCalibrateASimulatorThatPredictsTheHeldOutFsdpRun) {
  // Fit compute and the NVLink collectives on both ranks' traces and idle and heat on the profiled run; then
  // `calo sim --from` the held-out 20-step run with the job named (FSDP2 over 2, torchtitan's fp32 gradient
  // reduce). Today: step -2.9 %, mean power -1.9 %, energy per step -4.8 % (docs/benchmarks/torchtitan.md).
  const fs::path trace = titan_pair_runs().parent_path() / "trace";
  const fs::path out = scratch_path("torchtitan-pair");
  fs::create_directories(out);
  const fs::path fitted = out / "titan-h200x2.yaml";
  const Outcome calibrated = run_calo("calibrate " + (trace / "rank0_trace.json.gz").string() + " " +
                                      (trace / "rank1_trace.json.gz").string() + " " +
                                      (titan_pair_runs() / "titan-profile").string() +
                                      " --cluster h200-hgx --out " + fitted.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("reduce_scatter"), std::string::npos) << calibrated.output;
  const fs::path run = titan_pair_runs() / "titan-fsdp";
  const fs::path twin = out / "twin";
  const Outcome simulated = run_calo(
      "sim --from " + run.string() + " --model llama3-8b --layers 4 --seq 8192 --gbs 2 --dp 2 " +
      "--zero 3 --overlap --trainer torchtitan --cluster " + fitted.string() + " --out " + twin.string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  expect_twin_within(run, twin, 0.04);
}

}  // namespace
}  // namespace calo::calibrate
