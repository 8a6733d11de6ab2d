// `calo plan` and `calo sim`'s memory refusal as real processes: exit codes, messages, JSON, stored warning.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "core/table.h"
#ifdef CALO_SIM_HAS_STORE
#include "store/run_store.h"
#endif

namespace calo::plan {
namespace {

using calo::testing::Outcome;
using calo::testing::run_calo;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CaloSimMemory, RefusesALayoutThatDoesNotFitWithTheBreakdownAndFittingLayouts) {
  // Issue 13 item 3: GPT3-175B on 8 H100 with TP8 needs ~335 GiB per GPU.
  Outcome outcome = run_calo("sim --model gpt3-175b --cluster h100-hgx --gpus 8 --tp 8 --gbs 8 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "optimizer")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "usable")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--allow-oom")) << outcome.output;
  EXPECT_FALSE(contains(outcome.output, "the card itself")) << outcome.output;  // 335 GiB: not even the card
  // Llama 3 405B's 8192-GPU row of the paper's Table 4: 78.09 GiB fits the card's 79.65 but not the margin
  // calo keeps; the refusal says how little the card would have left.
  outcome = run_calo(
      "sim --model llama3-405b --cluster h100-hgx --gpus 8192 --tp 8 --pp 16 --schedule interleaved --vpp 8 "
      "--zero 2 --overlap --mbs 1 --gbs 2048 --seq 8192 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "layers-0,1x126,0 needs 78.09 GiB")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "the card itself would leave 1.56 GiB for the CUDA context"))
      << outcome.output;
  // A model that fits only with a different layout: the refusal lists layouts of the same job that fit.
  outcome = run_calo("sim --model llama3-70b --cluster h100-hgx --gpus 16 --tp 1 --gbs 16 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "that fit")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--tp ")) << outcome.output;
}

TEST(CaloSimMemory, AllowOomSimulatesWithAWarningInOutputAndStoredRun) {
  const auto dir = calo::testing::scratch_path("plan-allow-oom");
  std::filesystem::remove_all(dir);
  Outcome outcome =
      run_calo("sim --model gpt3-175b --cluster h100-hgx --gpus 8 --tp 8 --gbs 8 --allow-oom --out " +
               (dir / "run").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "WARNING")) << outcome.output;
  outcome = run_calo(
      "sim --model gpt3-175b --cluster h100-hgx --gpus 8 --tp 8 --gbs 8 --allow-oom --json --no-store");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto start = outcome.output.find('{');
  ASSERT_NE(start, std::string::npos) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output.substr(start));
  ASSERT_TRUE(json.contains("warnings")) << outcome.output;
  EXPECT_TRUE(contains(json["warnings"][0].get<std::string>(), "does not fit memory"));
#ifdef CALO_SIM_HAS_STORE
  const auto config = nlohmann::json::parse(store::RunReader(dir / "run").run().config_json);
  ASSERT_TRUE(config.contains("warnings")) << config.dump();
  EXPECT_TRUE(contains(config["warnings"][0].get<std::string>(), "does not fit memory"));
#endif
  std::filesystem::remove_all(dir);
}

TEST(CaloSimMemory, RejectsZeroGpus) {
  const Outcome outcome = run_calo("sim --model tiny-dense --cluster h200-hgx --gpus 0 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--gpus 0")) << outcome.output;
}

TEST(CaloPlan, LayoutFlagsConstrainTheSearchAndALogGetsProgressLinesAndWhichPresetToTrust) {
  // Issue 40 item 1: `--tp`, `--mbs` and the other layout flags of calo sim hold settings; stderr that is not
  // a terminal (as here) gets a plain progress line; the header says whether the cluster is fitted.
  Outcome outcome = run_calo(
      "plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 16 --seq 2048 --tp 2 --mbs 1,2 "
      "--recompute none --top 3");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "only --tp 2 --mbs 1,2 --recompute none")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "outside the constraints")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "layout steps (100 % of the work)")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--cluster h200-hgx-calibrated is fitted")) << outcome.output;
  int commands = 0;
  for (auto at = outcome.output.find("calo sim --model"); at != std::string::npos;
       at = outcome.output.find("calo sim --model", at + 1)) {
    const std::string line = outcome.output.substr(at, outcome.output.find('\n', at) - at);
    EXPECT_TRUE(contains(line, "--tp 2 ") && contains(line, "--recompute none")) << line;
    EXPECT_TRUE(contains(line, "--mbs 1 ") || contains(line, "--mbs 2 ")) << line;
    ++commands;
  }
  EXPECT_EQ(commands, 3) << outcome.output;
  // --quiet: no progress; an unknown schedule names the flag.
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 16 --seq 2048 --tp 8 --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_FALSE(contains(outcome.output, "layout steps (")) << outcome.output;
  // --jobs (-j), as calo sweep and calo report name it; --threads stays the same flag. One worker or two, one
  // ranking.
  const Outcome one_job =
      run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 16 --seq 2048 --tp 8 --quiet -j 1");
  const Outcome two_threads = run_calo(
      "plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 16 --seq 2048 --tp 8 --quiet --threads 2");
  ASSERT_EQ(one_job.exit_code, 0) << one_job.output;
  ASSERT_EQ(two_threads.exit_code, 0) << two_threads.output;
  auto ranking = [](const std::string& output) {  // everything after the line with the elapsed time
    return output.substr(output.find("\n", output.find("simulated;")));
  };
  EXPECT_EQ(ranking(one_job.output), ranking(outcome.output));
  EXPECT_EQ(ranking(two_threads.output), ranking(outcome.output));
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 16 --schedule zigzag");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "zigzag")) << outcome.output;
}

TEST(CaloPlan, ZeroAtDataParallelOneIsKeptAndEachExclusionNamesItsFlag) {
  // Issue 66 item 4: `--zero 1` dropped every dp = 1 layout (calo sim accepts --zero 1 at dp 1, where it
  // shards nothing) and the header said only how many layouts the constraints excluded, not which flag did.
  const Outcome outcome = run_calo(
      "plan --model llama3-8b --cluster h100-hgx --gpus 16 --gbs 64 --seq 2048 --tp 4,8 --pp 2,4 --zero 1 "
      "--mbs 1 --recompute none --no-overlap --top 40 --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--tp 8 --pp 2 --dp 1") ||
              contains(outcome.output, "--tp 4 --pp 4 --dp 1"))
      << outcome.output;
  EXPECT_TRUE(contains(outcome.output, " by --tp")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, " by --zero")) << outcome.output;
  const Outcome json = run_calo(
      "plan --model llama3-8b --cluster h100-hgx --gpus 16 --gbs 64 --seq 2048 --tp 4,8 --pp 2,4 --zero 1 "
      "--mbs 1 --recompute none --no-overlap --top 3 --quiet --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json parsed = nlohmann::json::parse(json.output.substr(json.output.find('{')));
  int by_flags = 0;
  for (const auto& entry : parsed["excluded_by"]) by_flags += entry[1].get<int>();
  EXPECT_EQ(by_flags, parsed["excluded"].get<int>()) << parsed.dump();
}

TEST(CaloPlan, ALongFrontShowsItsCornersAndTheFrontObjectiveShowsAllOfIt) {
  // 8 GPUs of llama3-8b leave over a hundred layouts on the four-figure front: with --top 3 the text shows
  // the front's corners (at most four rows) and how to see the rest; --objective pareto prints the whole
  // front.
  Outcome outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto front_at = outcome.output.find("# Pareto front (");
  ASSERT_NE(front_at, std::string::npos) << outcome.output;
  const std::string front = outcome.output.substr(front_at);
  EXPECT_TRUE(contains(front, "its corners")) << front;
  EXPECT_TRUE(contains(front, "--all or --json")) << front;
  EXPECT_TRUE(contains(front, "\nfastest ")) << front;
  const auto rows = std::count(front.begin(), front.end(), '\n');
  EXPECT_LE(rows, 3 + 4) << front;  // title, header, units, at most four corners
  outcome =
      run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3 --objective pareto");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const std::string whole = outcome.output.substr(outcome.output.find("# Pareto front ("));
  EXPECT_FALSE(contains(whole, "its corners")) << whole;
  EXPECT_GT(std::count(whole.begin(), whole.end(), '\n'), 3 + 4) << whole;
}

TEST(CaloPlan, RanksLayoutsWithPasteableFlagsAndJson) {
  Outcome outcome =
      run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3 --json --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  ASSERT_EQ(json["ranking"].size(), 3u);
  const auto& best = json["ranking"][0];
  EXPECT_GT(best["tokens_per_s"].get<double>(), json["ranking"][2]["tokens_per_s"].get<double>() * 0.999);
  EXPECT_TRUE(contains(best["megatron_flags"].get<std::string>(), "--tensor-model-parallel-size"));
  EXPECT_FALSE(json["pareto"].empty());
  // The calo flags of the best row reproduce its step time in `calo sim`.
  outcome = run_calo("sim --model llama3-8b --cluster h200-hgx --gpus 8 " +
                     best["calo_flags"].get<std::string>() + " --json --no-store");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NEAR(nlohmann::json::parse(outcome.output)["iteration_s"].get<double>(),
              best["iteration_s"].get<double>(), 1e-9);
}

TEST(CaloPlan, Fp8AllGatherAppliesToEveryZero3TensorwiseLayoutAndItsFlagsReproduceTheRow) {
  // Llama3-8B on 8 H100 at FP8, ZeRO-3 only: every ranked layout gathers FP8 weights, and calo sim of its
  // flags gives the planner's step; without --fp8-all-gather no row carries it, and the best row is not
  // faster.
  const std::string job =
      "plan --model llama3-8b --cluster h100-hgx --gpus 8 --gbs 32 --precision fp8 --zero 3 "
      "--top 3 --json --quiet";
  const Outcome gathered = run_calo(job + " --fp8-all-gather");
  ASSERT_EQ(gathered.exit_code, 0) << gathered.output;
  const auto ranking = nlohmann::json::parse(gathered.output)["ranking"];
  ASSERT_FALSE(ranking.empty());
  for (const auto& row : ranking) {
    const std::string flags = row["calo_flags"].get<std::string>();
    if (contains(flags, "--dp 1 ") || !contains(flags, "--zero 3")) continue;  // nothing to gather
    EXPECT_TRUE(contains(flags, "--fp8-all-gather")) << flags;
  }
  const Outcome replay = run_calo("sim --model llama3-8b --cluster h100-hgx --gpus 8 " +
                                  ranking[0]["calo_flags"].get<std::string>() + " --json --no-store");
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  EXPECT_NEAR(nlohmann::json::parse(replay.output)["iteration_s"].get<double>(),
              ranking[0]["iteration_s"].get<double>(), 1e-9);
  const Outcome plain = run_calo(job);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto plain_best = nlohmann::json::parse(plain.output)["ranking"][0];
  EXPECT_FALSE(contains(plain_best["calo_flags"].get<std::string>(), "--fp8-all-gather"));
  EXPECT_LT(ranking[0]["iteration_s"].get<double>(), plain_best["iteration_s"].get<double>());
  // Asked without FP8 in the space, it is refused naming both flags.
  const Outcome refused =
      run_calo("plan --model llama3-8b --cluster h100-hgx --gpus 8 --gbs 32 --fp8-all-gather");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "--precision")) << refused.output;
}

TEST(CaloPlan, TextShowsEnergyPerStepAndClusterPowerWithTheirUnitsAndTokensPerJouleToFourDigits) {
  // Issue 66 item 1: energy per step was in --json only, cluster power a bare kW column, and tokens/J at two
  // decimals ranked power caps as 1.89 / 1.89 / 1.89 / 1.88.
  const std::string plan =
      "plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3 --quiet "
      "--objective energy";
  const auto [text, json] = calo::testing::run_calo_text_and_json(plan);
  ASSERT_FALSE(json.is_null()) << text.output;
  const nlohmann::json ranking = json["ranking"];
  ASSERT_EQ(ranking.size(), 3u);
  EXPECT_TRUE(contains(text.output, "energy per step")) << text.output;
  for (const nlohmann::json& row : ranking) {
    EXPECT_TRUE(contains(text.output, core::format_significant(row["tokens_per_j"].get<double>(), 4)))
        << text.output;
    EXPECT_TRUE(contains(text.output, core::format_si(row["energy_per_step_j"].get<double>(), "J", 4)))
        << text.output;
    EXPECT_TRUE(contains(text.output, core::format_si(row["cluster_power_w"].get<double>(), "W")))
        << text.output;
  }
  EXPECT_TRUE(contains(text.output, " kJ ")) << text.output;  // 8 GPUs: kilojoules and kilowatts
  EXPECT_TRUE(contains(text.output, " kW ")) << text.output;
}

TEST(CaloPlan, NamesTheBestLayoutsCollectivesThatExtrapolateTheirLines) {
  // A cluster calibrated on a 2-rank collective sweep: its lines hold at 2 ranks. The best 8-GPU layout of
  // Llama3-8B runs its data-parallel all-reduce (or TP collectives) over more GPUs of a node, and the plan
  // says so under the ranking and in --json.
  const std::string sweep = std::string(CALO_SOURCE_DIR) + "/tests/fixtures/kineto-h200x2-collectives/auto/";
  const auto file = calo::testing::scratch_path("plan-lines.yaml");
  const Outcome calibrated = run_calo("calibrate " + sweep + "rank0.json.gz " + sweep +
                                      "rank1.json.gz --cluster h200-hgx --no-loo --out " + file.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  const std::string plan = "plan --model llama3-8b --cluster " + file.string() + " --gpus 8 --gbs 32 --top 3";
  Outcome outcome = run_calo(plan);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "# WARNING (layout 1): ")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "GPUs of a node, outside the 2 ranks")) << outcome.output;
  outcome = run_calo(plan + " --json --quiet");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_FALSE(nlohmann::json::parse(outcome.output)["warnings"].empty());
  // The presets have no lines: no warning.
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --top 3");
  EXPECT_FALSE(contains(outcome.output, "WARNING")) << outcome.output;
}

TEST(CaloPlan, TightLayoutsAreCountedAndTheCardLimitRanksThemWithFlagsCaloSimAccepts) {
  // Llama 3 405B's Table 4 layout on 8192 H100 fits the card but not its usable share.
  const std::string plan =
      "plan --model llama3-405b --cluster h100-hgx --gpus 8192 --gbs 2048 --seq 8192 --tp 8 --pp 16 --mbs 1 "
      "--zero 2 --recompute none --overlap --quiet";
  Outcome outcome = run_calo(plan + " --vpp 8");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(
      contains(outcome.output, "1 fits the card but not its usable margin: --memory-limit card ranks it"))
      << outcome.output;
  outcome = run_calo(plan);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "do not fit memory (1 fits the card")) << outcome.output;
  outcome = run_calo(plan + " --memory-limit card");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "1 fit only into its usable margin (ranked, marked tight)"))
      << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "78.09 GiB tight")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output,
                       "# WARNING (layout 1): tight: needs 78.09 GiB per GPU, beyond the 73.26 GiB "
                       "usable of the 79.65 GiB card"))
      << outcome.output;
  outcome = run_calo(plan + " --memory-limit card --json");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  EXPECT_EQ(json["tight"].get<int>(), 1);
  EXPECT_EQ(json["memory_limit"].get<std::string>(), "card");
  const auto& best = json["ranking"][0];
  EXPECT_TRUE(best["tight"].get<bool>());
  // The pasteable flags carry --memory-limit card, so calo sim simulates the tight layout to the same step
  // time, with the tight warning; without the flag calo sim refuses it.
  EXPECT_TRUE(contains(best["calo_flags"].get<std::string>(), "--memory-limit card"));
  outcome = run_calo("sim --model llama3-405b --cluster h100-hgx --gpus 8192 " +
                     best["calo_flags"].get<std::string>() + " --json --no-store");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto start = outcome.output.find('{');  // after calo sim's memory warning on stderr
  ASSERT_NE(start, std::string::npos) << outcome.output;
  const auto simulated = nlohmann::json::parse(outcome.output.substr(start));
  EXPECT_NEAR(simulated["iteration_s"].get<double>(), best["iteration_s"].get<double>(), 1e-9);
  const std::string warning = simulated["warnings"][0].get<std::string>();
  EXPECT_TRUE(contains(warning, "tight (--memory-limit card): llama3-405b")) << warning;
  EXPECT_TRUE(contains(warning, "the card itself would leave 1.56 GiB")) << warning;
  std::string usable_flags = best["calo_flags"].get<std::string>();
  usable_flags.erase(usable_flags.find(" --memory-limit card"), std::string(" --memory-limit card").size());
  outcome =
      run_calo("sim --model llama3-405b --cluster h100-hgx --gpus 8192 " + usable_flags + " --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "more than the 73.26 GiB usable")) << outcome.output;
  outcome = run_calo("sim --model llama3-405b --cluster h100-hgx --gpus 8192 " + usable_flags +
                     " --memory-limit all --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--memory-limit all: give usable")) << outcome.output;
  outcome = run_calo(plan + " --memory-limit cards");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--memory-limit cards: give usable")) << outcome.output;
}

TEST(CaloPlan, ImpossibleRequestsExitTwoWithTheNearestFeasible) {
  Outcome outcome = run_calo("plan --model gpt3-175b --cluster h100-hgx --gpus 8 --gbs 8");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--gpus")) << outcome.output;
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --power-budget-w 500");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "idle")) << outcome.output;
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --objective fastest");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  // A GPU count no layout divides: the nearest counts that have one.
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 7 --gbs 32");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--gpus 8")) << outcome.output;
  // A peak limit below one GPU's idle power contradicts itself: the smallest value that could be met.
  outcome = run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 32 --max-peak-power-w 50");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "117 W")) << outcome.output;
}

TEST(CaloPlan, MaxCpMustBeAPowerOfTwo) {
  const Outcome outcome =
      run_calo("plan --model llama3-8b --cluster h200-hgx --gpus 8 --gbs 8 --seq 65536 --max-cp 3");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--max-cp 3")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "power of two")) << outcome.output;
}

TEST(CaloPlan, LongSequencesRankContextParallelLayoutsWithTheirFlags) {
  // Llama3-8B at 128K tokens on 8 H100. With --max-cp 1 the best layout is TP2-DP4 with full recompute; by
  // default (cp up to 16 at 32K tokens or more) the space is a superset, so its best is never slower, and
  // here it is a cp layout (TP1-CP4-DP2, ~2 % faster in simulation), with --cp / Megatron's
  // --context-parallel-size.
  const std::string job =
      "plan --model llama3-8b --cluster h100-hgx --gpus 8 --gbs 8 --seq 131072 --top 2 --json";
  auto best = [](const Outcome& outcome) {
    return nlohmann::json::parse(outcome.output.substr(outcome.output.find('{')))["ranking"][0];
  };
  const Outcome without_cp = run_calo(job + " --max-cp 1");
  ASSERT_EQ(without_cp.exit_code, 0) << without_cp.output;
  EXPECT_FALSE(contains(best(without_cp)["calo_flags"].get<std::string>(), "--cp ")) << without_cp.output;
  const Outcome with_cp = run_calo(job);
  ASSERT_EQ(with_cp.exit_code, 0) << with_cp.output;
  const auto row = best(with_cp);
  EXPECT_TRUE(contains(row["calo_flags"].get<std::string>(), "--cp ")) << row.dump();
  EXPECT_TRUE(contains(row["megatron_flags"].get<std::string>(), "--context-parallel-size")) << row.dump();
  EXPECT_LE(row["iteration_s"].get<double>(), best(without_cp)["iteration_s"].get<double>()) << row.dump();
}

TEST(CaloPlanPartitionAndPower, TakeTheGpusFlagThatCaloPlanPrints) {
  // Issue 40 item 10: calo plan prints `calo sim ... --gpus N --tp ...`; its own subcommands took no --gpus.
  const std::string job =
      "--model llama3-8b --cluster h200-hgx --gpus 8 --tp 2 --pp 4 --gbs 8 --seq 2048 --steps 2";
  for (const char* sub : {"power", "partition"}) {
    const Outcome outcome = run_calo(std::string("plan ") + sub + " " + job);
    EXPECT_EQ(outcome.exit_code, 0) << sub << "\n" << outcome.output;
    EXPECT_TRUE(contains(outcome.output, "on 8 x")) << sub << "\n" << outcome.output;
  }
  for (const char* sub : {"power", "partition"}) {  // a model is required wherever one is simulated
    const Outcome outcome = run_calo(std::string("plan ") + sub + " --cluster h200-hgx --gpus 8 --pp 4");
    EXPECT_EQ(outcome.exit_code, 2) << sub << "\n" << outcome.output;
    EXPECT_TRUE(contains(outcome.output, std::string("calo plan ") + sub + ": give --model"))
        << outcome.output;
  }
  const Outcome mismatch = run_calo("plan power " + job + " --dp 4");
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.output;
  EXPECT_TRUE(contains(mismatch.output, "drop --dp")) << mismatch.output;
}

TEST(CaloPlanPartitionAndPower, BadInputExitsTwoNamingTheFlag) {
  const std::string job = "--model llama3-8b --cluster h200-hgx --gbs 8 --seq 2048";
  Outcome outcome = run_calo("plan partition " + job + " --pp 1");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--pp 1")) << outcome.output;
  outcome = run_calo("plan partition " + job + " --pp 4 --hot-gpu 9=15");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "0..3")) << outcome.output;
  outcome = run_calo("plan power " + job + " --pp 1");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--pp >= 2")) << outcome.output;
  outcome = run_calo("plan power " + job + " --pp 4 --max-slowdown-pct -1");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
}

TEST(CaloPlanPartition, FromARunReadsEachGpusSpeedAndHeatAndNeverLosesToUniform) {
#ifdef CALO_SIM_HAS_STORE
  const auto dir = calo::testing::scratch_path("plan-partition-from");
  std::filesystem::remove_all(dir);
  const std::string layout = "--model llama3-8b --cluster h200-hgx --pp 4 --gbs 8 --seq 2048";
  Outcome outcome =
      run_calo("sim " + layout + " --gpus 4 --hot-gpu 2=15 --steps 20 --out " + (dir / "run").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("plan partition " + layout + " --steps 5 --json --from " + (dir / "run").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  const auto heat = json["inlet_offset_c"].get<std::vector<double>>();
  ASSERT_EQ(heat.size(), 4u);
  EXPECT_GT(heat[2], 10.0);  // the GPU the recorded run ran 15 C hotter reads as the hottest
  EXPECT_LE(json["best"]["iteration_s"].get<double>(), json["uniform"]["iteration_s"].get<double>());
  EXPECT_LE(json["best"]["max_die_c"].get<double>(), json["uniform"]["max_die_c"].get<double>() + 1e-6);
  outcome = run_calo("plan partition --model llama3-8b --cluster h200-hgx --pp 2 --gbs 8 --from " +
                     (dir / "run").string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;  // 4 GPUs recorded, layout of 2
  std::filesystem::remove_all(dir);
#else
  GTEST_SKIP() << "built without the run store";
#endif
}

TEST(CaloPlanPartition, FromOpSpansASlowGpuReadsSlowAndTheHeavyStageDoesNot) {
#ifdef CALO_SIM_HAS_STORE
  // The "measured" run is a simulation with GPU 2 at 0.85 x speed and GPU 0 8 C hotter; the output layer
  // makes stage 3 the heavy one. Under the 700 W cap the slow GPU draws less and clocks higher (1864 vs 1654
  // MHz), so its median clock read it as the fastest GPU and the heavy stage's as slow; its op spans, in
  // clock cycles against the simulator's prediction, give it back.
  const auto dir = calo::testing::scratch_path("plan-partition-from-spans");
  std::filesystem::remove_all(dir);
  const std::string job =
      "--model llama3-8b --layers 16 --cluster h100-hgx-calibrated --pp 4 --gbs 16 --seq 2048";
  Outcome outcome =
      run_calo("sim " + job + " --slow-gpu 2=0.85 --hot-gpu 0=8 --steps 12 --op-spans all --out " +
               (dir / "spans").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("plan partition " + job + " --steps 4 --json --from " + (dir / "spans").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  auto json = nlohmann::json::parse(outcome.output);
  const auto speed = json["speed_factors"].get<std::vector<double>>();
  const auto heat = json["inlet_offset_c"].get<std::vector<double>>();
  ASSERT_EQ(speed.size(), 4u);
  EXPECT_NEAR(speed[2], 0.85, 0.03) << json["speed_source"];
  for (int gpu : {0, 1, 3}) EXPECT_GT(speed[gpu], 0.98) << "GPU " << gpu << ": " << json["speed_source"];
  EXPECT_NEAR(heat[0], 8.0, 1.0) << json["heat_source"];
  for (int gpu : {1, 2, 3}) EXPECT_LT(heat[gpu], 1.5) << "GPU " << gpu << " (its load is not its air)";
  EXPECT_TRUE(contains(json["speed_source"].get<std::string>(), "op spans")) << json["speed_source"];
  // Without op spans: the clocks, said so, and wrong in the way spans fix.
  outcome = run_calo("sim " + job + " --slow-gpu 2=0.85 --steps 12 --op-spans none --out " +
                     (dir / "clocks").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("plan partition " + job + " --steps 4 --from " + (dir / "clocks").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "median SM clock")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "--trace-ops")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "speed per GPU 0.892, 0.891, 1.000, 0.915")) << outcome.output;
  std::filesystem::remove_all(dir);
#else
  GTEST_SKIP() << "built without the run store";
#endif
}

TEST(CaloPlanPartition, FromARealBenchRunReadsItsRanksOpSpans) {
#if defined(CALO_SIM_HAS_STORE) && CALO_HAVE_MPI_TESTS
  // calo bench on CPU ranks with --trace-ops under a stage -> GPU order: every rank's op spans are read (no
  // temperatures there: no extra heat, said so).
  const auto dir = calo::testing::scratch_path("plan-partition-from-bench");
  std::filesystem::remove_all(dir);
  const std::string job = "--model tiny-dense --pp 2 --gbs 4";
  Outcome outcome = run_calo("bench --backend cpu " + job +
                             " --steps 2 --warmup 1 --trace-ops --stage-gpus 1,0 "
                             "--no-progress --out " +
                             (dir / "bench").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("plan partition " + job + " --cluster cpu-host --steps 2 --json --from " +
                     (dir / "bench").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto json = nlohmann::json::parse(outcome.output);
  EXPECT_TRUE(contains(json["speed_source"].get<std::string>(), "op spans")) << json["speed_source"];
  EXPECT_TRUE(contains(json["heat_source"].get<std::string>(), "no temp_gpu_c")) << json["heat_source"];
  const auto speed = json["speed_factors"].get<std::vector<double>>();
  ASSERT_EQ(speed.size(), 2u);
  EXPECT_DOUBLE_EQ(std::max(speed[0], speed[1]), 1.0);
  EXPECT_GT(std::min(speed[0], speed[1]), 0.0);
  // Bad input: a run with neither op spans nor clocks, and an order given to the search that finds one.
  outcome = run_calo("bench --backend cpu " + job + " --steps 1 --warmup 0 --no-progress --out " +
                     (dir / "plain").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("plan partition " + job + " --cluster cpu-host --from " + (dir / "plain").string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(
      contains(outcome.output, "has neither op spans nor clock_sm_mhz samples; bench it with --trace-ops"))
      << outcome.output;
  outcome = run_calo("plan partition " + job + " --cluster cpu-host --stage-gpus 1,0");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "drop --stage-gpus")) << outcome.output;
  std::filesystem::remove_all(dir);
#else
  GTEST_SKIP() << "built without the run store or MPI (calo bench on several ranks)";
#endif
}

TEST(PartitionLoop, MeasurePlanRunAndVerifyOnCpuRanks) {
#if defined(CALO_SIM_HAS_STORE) && CALO_HAVE_MPI_TESTS
  // bench/partition_loop/run.sh as a user runs it, on CPU ranks: bench the uniform partition, plan from its
  // op spans, bench the plan and the even/odd split, and set measured gains beside predicted ones.
  const auto out = calo::testing::scratch_path("partition-loop");
  std::filesystem::remove_all(out);
  const std::string build = std::filesystem::path(CALO_BINARY).parent_path().string();
  const Outcome outcome = calo::testing::run_shell(
      "PL_BACKEND=cpu PL_MODEL=tiny-dense PL_PP=2 PL_GBS=4 PL_SEQ=128 PL_LAYERS=4 PL_STEPS=2 PL_WARMUP=1 "
      "OUT=" +
      out.string() + " bash " + CALO_SOURCE_DIR + "/bench/partition_loop/run.sh " + build + " 2>&1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "== quiet: read speed per GPU")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "measured step (p50): uniform")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "gain of the plan: measured")) << outcome.output;
  EXPECT_TRUE(contains(outcome.output, "even/odd: measured")) << outcome.output;
  EXPECT_TRUE(std::filesystem::exists(out / "partition_loop.tgz"));
  EXPECT_TRUE(std::filesystem::exists(out / "summary.txt"));
  // A plan it cannot make is a failed scenario and a failing exit, not a quiet summary.
  const Outcome bad = calo::testing::run_shell(
      "PL_BACKEND=cpu PL_MODEL=tiny-dense PL_PP=2 PL_GBS=3 OUT=" + out.string() + " bash " + CALO_SOURCE_DIR +
      "/bench/partition_loop/run.sh " + build + " 2>&1");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_TRUE(contains(bad.output, "FAIL quiet/uniform")) << bad.output;
  std::filesystem::remove_all(out);
#else
  GTEST_SKIP() << "built without the run store or MPI (calo bench on several ranks)";
#endif
}

TEST(CaloPlan, JobsBeyondTheBoundAreRefusedNamingTheFlag) {
  // Issue 67 item 2: --jobs 100000 ended in std::terminate (exit 134) when the threads could not start.
  const Outcome outcome =
      run_calo("plan --model tiny-dense --cluster h200-hgx --gpus 4 --gbs 8 --jobs 100000");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--jobs: Value 100000 not in range 0 to 1024"), std::string::npos)
      << outcome.output;
}

}  // namespace
}  // namespace calo::plan
