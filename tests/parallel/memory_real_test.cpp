// The memory model against `calo bench --memory real` on two H200 (tests/fixtures/memory-real-h200x2, issue
// 39 item 2): what each rank held at its peak, as the step ran on the GPU, against the model's total for its
// stage. Where the ledger's lifetimes are the model's (1F1B, full recompute) the two agree to the byte; FSDP
// and ZeRO-2 with overlap hold less at once than the model's two gathered units plus two gradient buckets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::parallel {
namespace {

std::vector<nlohmann::json> load_runs() {
  std::ifstream in(std::string(CALO_SOURCE_DIR) + "/tests/fixtures/memory-real-h200x2/memory_real.jsonl");
  EXPECT_TRUE(in.good()) << "tests/fixtures/memory-real-h200x2/memory_real.jsonl";
  std::vector<nlohmann::json> runs;
  std::string line;
  while (std::getline(in, line)) runs.push_back(nlohmann::json::parse(line));
  return runs;
}

// The model slice and layout of a run from its `calo bench` arguments (the flags the runs use).
std::pair<model::ModelSpec, Layout> run_layout(const nlohmann::json& run) {
  model::ModelSpec model = model::load_model(run.at("model").get<std::string>());
  Layout layout;
  layout.seq_length = run.at("seq").get<int>();
  std::istringstream words(run.at("args").get<std::string>());
  std::map<std::string, std::string> flags;
  std::string word, last;
  while (words >> word) {
    if (word.rfind("--", 0) == 0) {
      flags[word] = "";
      last = word;
    } else {
      flags[last] = word;
    }
  }
  model.num_layers = std::stoi(flags.at("--layers"));
  layout.micro_batch = std::stoi(flags.at("--mbs"));
  layout.global_batch = std::stoi(flags.at("--gbs"));
  if (flags.count("--pp")) layout.pp = std::stoi(flags["--pp"]);
  if (flags.count("--dp")) layout.dp = std::stoi(flags["--dp"]);
  if (flags.count("--zero")) layout.zero_stage = std::stoi(flags["--zero"]);
  if (flags.count("--recompute")) layout.recompute = parse_recompute(flags["--recompute"]);
  if (flags.count("--overlap")) layout.overlap_grad_reduce = layout.overlap_param_gather = true;
  if (flags.count("--fsdp-reshard-after-forward"))
    layout.reshard_after_forward = flags["--fsdp-reshard-after-forward"] != "off";
  return {model, resolve_layout(model, layout)};
}

TEST(MemoryReal, EveryRanksHeldPeakOnTwoH200MeetsTheModel) {
  int ranks_checked = 0;
  std::printf("%-14s %4s %12s %12s %8s %14s\n", "run", "rank", "held GiB", "model GiB", "error",
              "beyond GiB");
  for (const nlohmann::json& run : load_runs()) {
    if (!run.contains("ranks")) continue;
    const auto [model, layout] = run_layout(run);
    // Same lifetimes as the model: to the byte. FSDP / ZeRO-2 with overlap: the model counts two gathered
    // units and two buckets at once, which the GPU never held together (+2.6 %, +3.2 % on these runs).
    const double bound = layout.zero_stage >= 2 && layout.overlap_param_gather ? 0.05 : 1e-6;
    for (const nlohmann::json& rank : run.at("ranks")) {
      const double held = rank.at("held_peak_bytes").get<double>();
      const double modelled = memory_for_stage(model, layout, rank.at("stage").get<int>()).total_bytes();
      const double error = modelled / held - 1.0;
      std::printf("%-14s %4d %12.2f %12.2f %+7.2f%% %14.2f\n", run.at("name").get<std::string>().c_str(),
                  rank.at("rank").get<int>(), held / 1073741824.0, modelled / 1073741824.0, error * 100,
                  (rank.at("device_used_bytes").get<double>() - held) / 1073741824.0);
      EXPECT_LE(std::abs(error), bound) << run.at("name") << " rank " << rank.at("rank");
      EXPECT_GE(error, 0.0) << run.at("name") << ": the model says less than the GPU held";
      ++ranks_checked;
    }
  }
  EXPECT_EQ(ranks_checked, 14);
}

TEST(MemoryReal, FullRecomputesRebuiltLayerIsCountedWhereTheGpuHeldIt) {
  // The transient the runs found: without it the model was 0.9-3.8 % below what the GPU held.
  for (const nlohmann::json& run : load_runs()) {
    const auto [model, layout] = run_layout(run);
    if (layout.recompute != Recompute::kFull || !run.contains("ranks")) continue;
    const StageHoldings holdings = holdings_for_stage(model, layout, 0);
    ASSERT_GT(holdings.recompute_transient_bytes, 0.0);
    const double held = run.at("ranks")[0].at("held_peak_bytes").get<double>();
    const double without =
        memory_for_stage(model, layout, 0).total_bytes() - holdings.recompute_transient_bytes;
    EXPECT_LT(without, held - 0.5 * holdings.recompute_transient_bytes) << run.at("name");
  }
}

TEST(MemoryReal, TheEdgeLayoutTheModelAdmitsIsRefusedBesideTheBenchsOwnOperands) {
  // Known gap (docs/benchmarks/memory.md "Memory held as training holds it"): the bench's operands are not
  // carved out of the held activations, so 24 layers the model admits (within 90 % of 139.80 GiB) do not fit
  // under --memory real, while --memory model runs them. The run says so before any step (exit 2), naming the
  // fix.
  bool seen = false;
  for (const nlohmann::json& run : load_runs()) {
    if (run.at("name") != "l24-edge") continue;
    seen = true;
    const auto [model, layout] = run_layout(run);
    EXPECT_LE(memory_per_gpu(model, layout).total_bytes(), 0.90 * 139.80 * 1073741824.0);
    EXPECT_EQ(run.at("exit").get<int>(), 2);
    EXPECT_NE(run.at("error").get<std::string>().find("measured with --memory model"), std::string::npos);
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace calo::parallel
