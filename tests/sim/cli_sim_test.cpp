// `calo sim` as a real process: JSON output, stored run, timeline file, and exit code 2 with a clear message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../common/run_calo.h"
#include "core/config.h"
#include "sim/cluster.h"
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

TEST(CalosimCli, JsonAndTextCarryTheMemoryBreakdownOfTheLayout) {
  // The Llama3-8B 4-layer slice at 8K tokens on one H200 (bench/torchtitan's shapes), each term from
  // data/models/llama3-8b.yaml's dimensions by docs/METRICS.md's formulas: 1,923,125,248 parameters (4 layers
  // of 41.9 M attention + 176.2 M SwiGLU + 2 norms, the untied 128,256 x 4096 embedding and output, the final
  // norm) at 2 bytes for weights and for gradients (3.58 GiB each) and 12 for the fp32 master and Adam
  // moments (21.49 GiB); activations of one micro-batch (flash attention, no recompute): 139,392 bytes per
  // token per layer (4 x 2h inputs, 2 x 2q Q and output, 2 x 2c K and V, 4a log-sum-exp, 6f SwiGLU) x 4
  // layers, then the final norm and output projection inputs (2 x 2h) and the fp32 cross-entropy over the
  // vocabulary (4V) per token: 8.29 GiB; 36.95 GiB in all.
  const double h = 4096, q = 4096, c = 1024, a = 32, f = 14336, vocab = 128256, seq = 8192, layers = 4;
  const double parameters = layers * (2 * h * q + 2 * h * c + 3 * h * f + 2 * h) + 2 * vocab * h + h;
  EXPECT_DOUBLE_EQ(parameters, 1923125248.0);
  const double per_token_layer = 4 * 2 * h + 2 * 2 * q + 2 * 2 * c + 4 * a + 6 * f;
  EXPECT_DOUBLE_EQ(per_token_layer, 139392.0);
  const double activations = seq * (layers * per_token_layer + 2 * 2 * h + 4 * vocab);
  const std::string job = "sim --model llama3-8b --layers 4 --seq 8192 --gbs 1 --cluster h200-hgx --no-store";
  const Outcome outcome = run_calo(job + " --json");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const nlohmann::json memory = nlohmann::json::parse(outcome.output)["memory"];
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_DOUBLE_EQ(memory["weights_bytes"].get<double>(), 2 * parameters);
  EXPECT_DOUBLE_EQ(memory["gradients_bytes"].get<double>(), 2 * parameters);
  EXPECT_DOUBLE_EQ(memory["optimizer_bytes"].get<double>(), 12 * parameters);
  EXPECT_DOUBLE_EQ(memory["activations_bytes"].get<double>(), activations);
  EXPECT_DOUBLE_EQ(memory["total_bytes"].get<double>(), 16 * parameters + activations);
  EXPECT_NEAR(memory["total_bytes"].get<double>() / gib, 36.95, 0.005);
  EXPECT_TRUE(memory["fits"].get<bool>());
  EXPECT_LT(memory["usable_bytes"].get<double>(), memory["device_bytes"].get<double>());
  EXPECT_EQ(memory["inflight_microbatches"].get<int>(), 1);
  // Issue 39 item 5: the activations by kind (4 layers of one micro-batch, then the output's) sum to the
  // term, and the usable rule's two deductions are there: 3 % of the device, 4 GiB.
  EXPECT_EQ(memory["layer_microbatches"].get<int>(), 4);
  double by_kind = 0;
  for (const auto& term : memory["activations_by_kind"]) by_kind += term["bytes"].get<double>();
  EXPECT_NEAR(by_kind / memory["activations_bytes"].get<double>(), 1.0, 1e-12);
  EXPECT_EQ(memory["activations_by_kind"].back()["kind"],
            "output (final norm and projection inputs, fp32 cross-entropy)");
  EXPECT_DOUBLE_EQ(memory["fragmentation_bytes"].get<double>(), 0.03 * memory["device_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(memory["runtime_reserve_bytes"].get<double>(), 4 * gib);
  EXPECT_DOUBLE_EQ(memory["usable_bytes"].get<double>(), memory["device_bytes"].get<double>() -
                                                             memory["fragmentation_bytes"].get<double>() -
                                                             memory["runtime_reserve_bytes"].get<double>());
  const Outcome text = run_calo(job);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("# memory per GPU (model, stage 0): 36.95 GiB of "), std::string::npos)
      << text.output;
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

#ifdef CALO_SIM_HAS_STORE
TEST(CalosimCli, ACpuHostsPlaceholderPowerIsNoFindingOfItsReport) {
  // The main job's report put "peak power 0.31x the 20 W limit: GPU 0 drew 6.300 W" second in the verdict of
  // its CPU simulation: cpu-host's power is a placeholder, not a finding.
  const auto dir = testing::temp_dir("cli-cpu-report");
  Outcome outcome =
      run_calo("sim --model tiny-dense --cluster cpu-host --gpus 2 --tp 2 --gbs 8 --seq 128 --out " +
               (dir / "run").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = run_calo("report " + (dir / "run").string() + " --out " + (dir / "report.html").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  std::ifstream file(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto verdict = html.substr(0, html.find("Runs side by side"));
  EXPECT_NE(verdict.find("tokens/s"), std::string::npos) << verdict.substr(0, 3000);
  EXPECT_EQ(verdict.find("W limit"), std::string::npos) << verdict.substr(0, 3000);
}

// --op-spans (issue 40 item 5): distinct keeps one GPU per distinct timeline (PP2-DP2: the two stages' first
// ranks), all every GPU, none no span; all above 64 GPUs exits 2 naming the fix.
TEST(CalosimCli, OpSpansAreStoredOnRequestDistinctKeepsOneGpuPerDistinctTimeline) {
  const auto dir = testing::temp_dir("cli-op-spans");
  auto span_ranks = [&dir](const std::string& mode) {
    const std::string flag = mode.empty() ? "" : " --op-spans " + mode;
    const Outcome outcome =
        run_calo("sim --model tiny-dense --cluster h200x4-nvswitch --gpus 4 --pp 2 --gbs 8" + flag +
                 " --out " + (dir / ("run" + mode)).string());
    EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
    std::set<int32_t> ranks;
    for (const store::Span& span : store::RunReader(dir / ("run" + mode)).spans(store::SpanKind::kOp))
      ranks.insert(span.rank);
    return ranks;
  };
  EXPECT_TRUE(span_ranks("").empty());  // the default: a report needs no op spans (issue 66 item 5)
  EXPECT_EQ(span_ranks("distinct"),
            (std::set<int32_t>{0, 2}));  // pp outermost: stage 0 = ranks 0-1, stage 1 = 2-3
  EXPECT_EQ(span_ranks("all"), (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(span_ranks("none").empty());
  const Outcome refused = run_calo(
      "sim --model tiny-dense --cluster h200x4-nvswitch --gpus 128 --tp 2 --gbs 64 --op-spans all "
      "--no-store");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--op-spans all keeps every GPU's spans, for at most 64 GPUs"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("use --op-spans distinct"), std::string::npos) << refused.output;
}
#endif

TEST(CaloCluster, ShowPrintsAFileThatLoadsBackAndListNamesEveryPreset) {
  // Issue 40 item 3: a user copies a preset, edits one figure and simulates with it.
  for (const char* name : {"h100-hgx", "h200-hgx-calibrated"}) {
    const Outcome shown = run_calo(std::string("cluster show ") + name);
    ASSERT_EQ(shown.exit_code, 0) << shown.output;
    EXPECT_EQ(shown.output.rfind("# ", 0), 0u) << shown.output;  // leads with the trust line
    const auto file = testing::temp_dir("cluster-show") / (std::string(name) + ".yaml");
    std::ofstream(file) << shown.output;
    EXPECT_EQ(to_json(load_cluster(file.string())), to_json(load_cluster(name))) << name;
  }
  const Outcome listed = run_calo("cluster list");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  for (const std::string& name : core::preset_names("clusters"))
    EXPECT_NE(listed.output.find(name), std::string::npos) << name;
  EXPECT_NE(listed.output.find("yes ("), std::string::npos) << listed.output;  // the fitted ones say so
  const Outcome unknown = run_calo("cluster show no-such-cluster");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("h200-hgx"), std::string::npos) << unknown.output;
}

TEST(CalosimCli, ACpuHostNamesItsDevicesRanksAndItsPowerAPlaceholder) {
  // The main job on a machine without a GPU simulates the CPU backend's ranks: "GPU" and "the card's power
  // limit 20 W" misled (issue 40); its throughput is GFLOP/s, not "0.0 TFLOP/s".
  const Outcome outcome =
      run_calo("sim --model tiny-dense --cluster cpu-host --gpus 2 --tp 2 --gbs 8 --seq 128 --no-store");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("compute busy per rank"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("power limit (placeholder)"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("GFLOP/s"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("no CPU power is measured"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("per GPU"), std::string::npos) << outcome.output;
  const Outcome gpus =
      run_calo("sim --model tiny-dense --cluster h100-hgx --gpus 2 --tp 2 --gbs 8 --seq 128 --no-store");
  ASSERT_EQ(gpus.exit_code, 0) << gpus.output;
  EXPECT_NE(gpus.output.find("compute busy per GPU"), std::string::npos) << gpus.output;
  EXPECT_NE(gpus.output.find("power limit (the card's"), std::string::npos) << gpus.output;
}

/// The value and unit at the end of the text table's row that starts with `figure`, the value in the unit
/// without its SI prefix (45.7 kJ -> 45700, "J"); {NaN, ""} without such a row.
std::pair<double, std::string> text_figure(const std::string& output, const std::string& figure) {
  const std::size_t at = output.find("\n" + figure);
  if (at == std::string::npos) return {NAN, ""};
  std::istringstream line(output.substr(at + 1, output.find('\n', at + 1) - at - 1));
  std::vector<std::string> words;
  for (std::string word; line >> word;) words.push_back(word);
  std::string unit = words.back();
  double scale = 1;
  const std::pair<char, double> prefixes[] = {{'k', 1e3}, {'M', 1e6}, {'G', 1e9}};
  for (const auto& [prefix, factor] : prefixes) {
    if (unit.size() < 2 || unit[0] != prefix) continue;
    scale = factor;
    unit = unit.substr(1);
  }
  return {std::stod(words[words.size() - 2]) * scale, unit};
}

TEST(CalosimCli, TextShowsEnergyPerStepPerTokenAndTheWholeJobsPower) {
  // Issue 66 item 1: the whole job's power was left to the user (379.8 W x 8,192 GPUs), energy per token to
  // --json. Each text figure matches the JSON's to its 3 (power, energy) or 4 (per token) digits.
  const std::string job =
      "sim --model llama3-8b --cluster h100-hgx-calibrated --gpus 8 --tp 2 --gbs 32 --seq 4096 --zero 1 "
      "--no-store";
  const auto [text, json] = calo::testing::run_calo_text_and_json(job);
  ASSERT_FALSE(json.is_null()) << text.output;
  const double energy_per_step_j = json["energy_per_step_j"].get<double>();
  const auto [energy_j, energy_unit] = text_figure(text.output, "energy per step");
  EXPECT_EQ(energy_unit, "J") << text.output;
  EXPECT_NEAR(energy_j / energy_per_step_j, 1, 0.005) << text.output;
  const auto [power_w, power_unit] = text_figure(text.output, "power of all 8 GPUs");
  EXPECT_EQ(power_unit, "W") << text.output;
  EXPECT_NE(text.output.find(" kW\n"), std::string::npos) << text.output;  // 8 GPUs draw kilowatts
  EXPECT_NEAR(power_w / (8 * json["mean_power_w"].get<double>()), 1, 0.005) << text.output;
  const auto [per_token_j, per_token_unit] = text_figure(text.output, "energy per token");
  EXPECT_EQ(per_token_unit, "J") << text.output;
  EXPECT_NEAR(per_token_j / (energy_per_step_j / (32 * 4096)), 1, 0.0005) << text.output;
}

TEST(CaloCluster, ListCountsTheRunsItsDescriptionCountsAndItsHintSaysJson) {
  // Issue 66 item 8: "yes (12 runs)" stood beside "fitted by calo calibrate to 10 measured run(s)" (the 12
  // counted the two thermal runs), and the hint said a file while show prints JSON.
  const Outcome listed = run_calo("cluster list");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  const std::regex row(R"(\n(\S+) .*yes \((\d+) runs[^)]*\).* to (\d+) measured run\(s\))");
  int checked = 0;
  for (std::sregex_iterator match(listed.output.begin(), listed.output.end(), row), end; match != end;
       ++match, ++checked)
    EXPECT_EQ((*match)[2].str(), (*match)[3].str()) << (*match)[1].str() << "\n" << listed.output;
  EXPECT_GE(checked, 2) << listed.output;
  EXPECT_NE(listed.output.find("yes (10 runs + 2 thermal)"), std::string::npos) << listed.output;
  EXPECT_NE(listed.output.find("show NAME prints one as JSON (which is YAML)"), std::string::npos)
      << listed.output;
  const Outcome help = run_calo("cluster --help");
  EXPECT_NE(help.output.find("as JSON (which is YAML)"), std::string::npos) << help.output;
  // What show prints is JSON after '#' comment lines, as the hint says.
  const Outcome shown = run_calo("cluster show h100-hgx-calibrated");
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find("as JSON (which is YAML)"), std::string::npos) << shown.output;
  EXPECT_NE(shown.output.find("fitted to 10 measured runs and 2 thermal runs"), std::string::npos)
      << shown.output.substr(0, 600);
  const std::string document = shown.output.substr(shown.output.find("\n{") + 1);
  EXPECT_TRUE(nlohmann::json::parse(document, nullptr, false).is_object()) << document.substr(0, 300);
}

TEST(CalosimCli, BadInputExitsWithTwoAndNamesTheFix) {
  Outcome outcome = run_calo("sim --model tiny-dense --cluster no-such-cluster --gpus 4 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("h200-hgx"), std::string::npos) << outcome.output;  // lists the presets
  outcome = run_calo("sim --model tiny-dense --cluster h200-hgx --gpus 6 --tp 4 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("multiple of tp*cp*pp"), std::string::npos) << outcome.output;
  outcome = run_calo("sim --cluster h200-hgx --gpus 4 --no-store");  // no --model: no silent tiny-dense
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("give --model"), std::string::npos) << outcome.output;
  outcome = run_calo("graph --tp 2");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("calo graph: give --model"), std::string::npos) << outcome.output;
  outcome = run_calo("sim --model tiny-dense --cluster h200-hgx --gpus 4 --slow-gpu 9=0.5 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--slow-gpu"), std::string::npos) << outcome.output;
}

TEST(CalosimCli, AGpuCountItSuggestsPassesTheModelsChecks) {
  // --tp 6 on 64 GPUs used to suggest --gpus 48, which then failed on Llama3-70B's 64 heads: the model's
  // refusal comes first, with the tp sizes that divide them.
  Outcome outcome = run_calo("sim --model llama3-70b --cluster h100-hgx --gpus 64 --tp 6 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("tp=6 does not divide 64 attention heads"), std::string::npos)
      << outcome.output;
  EXPECT_EQ(outcome.output.find("--gpus 48"), std::string::npos) << outcome.output;
  // A tp the model takes still gets the --gpus arithmetic, and its suggestion runs.
  outcome = run_calo("sim --model llama3-70b --cluster h100-hgx --gpus 60 --tp 8 --no-store");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("use a multiple such as 56"), std::string::npos) << outcome.output;
  EXPECT_EQ(
      run_calo("sim --model llama3-70b --cluster h100-hgx --gpus 56 --tp 8 --zero 1 --no-store").exit_code,
      0);
}

}  // namespace
}  // namespace calo::sim

#ifdef CALO_SIM_HAS_STORE
namespace calo::sim {
namespace {

TEST(CalosimCli, PowerCapLowersPowerAndThroughputPerGpuOrPerRankAndIsStored) {
  // Issue 40 item 3: "what if I cap power at 500 W?" in one flag, per GPU or per rank, kept in the run.
  const std::string job =
      "sim --model llama3-8b --cluster h100-hgx --gpus 4 --tp 2 --gbs 8 --seq 4096 --zero 1 ";
  auto figures = [&](const std::string& extra) {
    const calo::testing::Outcome outcome =
        calo::testing::run_calo(job + "--no-store --json --per-gpu " + extra);
    EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
    return nlohmann::json::parse(outcome.output.substr(outcome.output.find('{')));
  };
  const nlohmann::json free = figures("");
  const nlohmann::json capped = figures("--power-cap 450");
  EXPECT_EQ(free["power_limit_w"].get<double>(), 700);
  EXPECT_EQ(capped["power_limit_w"].get<double>(), 450);
  EXPECT_LT(capped["tokens_per_s"].get<double>(), 0.95 * free["tokens_per_s"].get<double>());
  EXPECT_LT(capped["mean_power_w"].get<double>(), 460);
  EXPECT_GT(free["mean_power_w"].get<double>(), 500);
  const nlohmann::json one = figures("--power-cap 1=400");
  EXPECT_EQ(one["per_gpu"][1]["power_limit_w"].get<double>(), 400);
  EXPECT_EQ(one["per_gpu"][0]["power_limit_w"].get<double>(), 700);
  EXPECT_LT(one["per_gpu"][1]["mean_power_w"].get<double>(), one["per_gpu"][0]["mean_power_w"].get<double>());
  // Stored: the run's devices carry the cap each ran under.
  const auto dir = testing::temp_dir("power-cap") / "run";
  const calo::testing::Outcome stored =
      calo::testing::run_calo(job + "--power-cap 500 --power-cap 3=300 --out " + dir.string());
  ASSERT_EQ(stored.exit_code, 0) << stored.output;
  const std::vector<store::DeviceInfo> devices = store::RunReader(dir).devices();
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[0].power_limit_w, 500);
  EXPECT_EQ(devices[3].power_limit_w, 300);
  // Above the card's limit, at or below its idle power, or not a number: exit 2 naming the flag.
  for (const char* bad : {"--power-cap 900", "--power-cap 50", "--power-cap 5=400", "--power-cap watts"}) {
    const calo::testing::Outcome outcome = calo::testing::run_calo(job + "--no-store " + bad);
    EXPECT_EQ(outcome.exit_code, 2) << bad << "\n" << outcome.output;
    EXPECT_NE(outcome.output.find("--power-cap"), std::string::npos) << outcome.output;
  }
}

TEST(CalosimCli, ComparingTwoLayoutsNamesEachByItsLayoutAndLeadsWithThroughputMfuAndEnergyPerToken) {
  // Issue 40 item 4: both columns used to read "sim-llama3-8b-8gpu (sim)", without tokens/s, MFU or J/token.
  const auto dir = testing::temp_dir("compare-layouts");
  const std::string job = "sim --model llama3-8b --cluster h100-hgx --gpus 8 --gbs 32 --seq 4096 --zero 1 ";
  ASSERT_EQ(calo::testing::run_calo(job + "--tp 2 --out " + (dir / "tp2").string()).exit_code, 0);
  ASSERT_EQ(calo::testing::run_calo(job + "--tp 4 --out " + (dir / "tp4").string()).exit_code, 0);
  const calo::testing::Outcome outcome =
      calo::testing::run_calo("compare --json " + (dir / "tp2").string() + " " + (dir / "tp4").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const nlohmann::json json = nlohmann::json::parse(outcome.output);
  // Issue 65: the model and the sequence length too (a projection's heading omitted its model).
  EXPECT_EQ(json["runs"][0], "llama3-8b TP2-PP1-DP4 mbs1 gbs32 1f1b zero1 seq4096 (sim on h100-hgx)");
  EXPECT_EQ(json["runs"][1], "llama3-8b TP4-PP1-DP2 mbs1 gbs32 1f1b zero1 seq4096 (sim on h100-hgx)");
  const char* lead[] = {"tokens_per_s", "mfu", "energy_per_token_j"};
  for (int row = 0; row < 3; ++row) {
    EXPECT_EQ(json["rows"][row]["key"], lead[row]);
    for (int run = 0; run < 2; ++run) EXPECT_TRUE(json["rows"][row]["values"][run].is_number()) << lead[row];
  }
  EXPECT_GT(json["rows"][0]["values"][0].get<double>(), json["rows"][0]["values"][1].get<double>());
}

/// The compare row of `key` in `compare --json`'s output.
nlohmann::json compare_row(const nlohmann::json& comparison, const std::string& key) {
  for (const nlohmann::json& row : comparison["rows"])
    if (row["key"] == key) return row;
  return nullptr;
}

TEST(CalosimCli, ComparingTwoLayoutsSaysWhichWinsByHowMuchAgainstTheSimulatorsError) {
  // Issue 66 item 2: compare and report showed two layouts' figures and left "which is better?" to the user.
  const auto dir = testing::temp_dir("compare-winner");
  const std::string job =
      "sim --model llama3-8b --gpus 8 --gbs 32 --seq 4096 --zero 1 --tokens 1e12 --price-per-kwh 0.1 "
      "--currency EUR --cluster ";
  for (const char* cluster : {"h100-hgx-calibrated", "h100-hgx"}) {
    for (const char* tp : {"2", "1"}) {
      const std::string out = (dir / (std::string(cluster) + "-tp" + tp)).string();
      ASSERT_EQ(calo::testing::run_calo(job + cluster + " --tp " + tp + " --out " + out).exit_code, 0);
    }
  }
  const std::string runs =
      (dir / "h100-hgx-calibrated-tp2").string() + " " + (dir / "h100-hgx-calibrated-tp1").string();
  const calo::testing::Outcome json_text = calo::testing::run_calo("compare --json " + runs);
  ASSERT_EQ(json_text.exit_code, 0) << json_text.output;
  const nlohmann::json comparison = nlohmann::json::parse(json_text.output);
  const nlohmann::json& winners = comparison["winners"];
  ASSERT_EQ(winners.size(), 3u) << winners.dump(2);
  // The tolerance is the calibration's leave-one-out error: step time's t as t / (1 - t) for tokens/s,
  // energy per step's for energy per token, the larger of the two for cost.
  const nlohmann::json tolerance = load_cluster("h100-hgx-calibrated").calibration["tolerance"];
  const double step = tolerance["step_time_s"]["achieved"].get<double>();
  const double energy = tolerance["energy_per_step_j"]["achieved"].get<double>();
  const double expected[] = {step / (1 - step), energy, std::max(step, energy)};
  const char* keys[] = {"tokens_per_s", "energy_per_token_j", "cost"};
  for (int at = 0; at < 3; ++at) {
    const nlohmann::json& winner = winners[at];
    EXPECT_EQ(winner["key"], keys[at]);
    EXPECT_NEAR(winner["tolerance"].get<double>(), expected[at], 1e-12) << keys[at];
    const int best = winner["best_run"].get<int>() - 1, other = winner["runner_up_run"].get<int>() - 1;
    EXPECT_EQ(best + other, 1) << keys[at];
    const double ratio = winner["best_value"].get<double>() / winner["runner_up_value"].get<double>();
    EXPECT_NEAR(winner["margin"].get<double>(), at == 0 ? ratio - 1 : 1 - ratio, 1e-12) << keys[at];
    EXPECT_GE(winner["margin"].get<double>(), 0) << keys[at];
    EXPECT_EQ(winner["within_error"].get<bool>(), winner["margin"].get<double>() <= expected[at]) << keys[at];
    const std::string text = winner["text"].get<std::string>();
    EXPECT_NE(text.find(winner["within_error"].get<bool>() ? "within the simulator's error"
                                                           : "beyond the simulator's error"),
              std::string::npos)
        << text;
    if (at == 2) continue;  // the cost is no compare row; the other two are the rows' values
    const nlohmann::json row = compare_row(comparison, keys[at]);
    EXPECT_EQ(winner["best_value"], row["values"][best]) << keys[at];
    EXPECT_EQ(winner["runner_up_value"], row["values"][other]) << keys[at];
  }
  EXPECT_EQ(winners[0]["text"].get<std::string>().rfind("throughput: ", 0), 0u) << winners[0]["text"];
  EXPECT_EQ(winners[2]["unit"], "EUR");
  EXPECT_EQ(winners[2]["figure"], "cost of 1e+12 tokens");
  // The text says it under the table; on a cluster no calibration rated, it says the error is not rated.
  const calo::testing::Outcome text = calo::testing::run_calo("compare " + runs);
  EXPECT_NE(text.output.find("which is better? throughput: "), std::string::npos) << text.output;
  const calo::testing::Outcome unrated = calo::testing::run_calo(
      "compare " + (dir / "h100-hgx-tp2").string() + " " + (dir / "h100-hgx-tp1").string());
  EXPECT_NE(unrated.output.find("the simulator's error is not rated"), std::string::npos) << unrated.output;
  // The report's verdict names the winner the same way, and its bar chart shows MFU in %, as its tables do.
  const std::string html_path = (dir / "report.html").string();
  ASSERT_EQ(calo::testing::run_calo("report " + runs + " --out " + html_path).exit_code, 0);
  std::ifstream file(html_path);
  const std::string html((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string verdict = html.substr(0, html.find("Runs side by side"));
  EXPECT_NE(verdict.find("Which is better?"), std::string::npos) << verdict.substr(0, 3000);
  std::string line = winners[0]["text"].get<std::string>();  // as HTML escapes it
  for (std::size_t at = line.find('\''); at != std::string::npos; at = line.find('\'', at))
    line.replace(at, 1, "&#39;");
  EXPECT_NE(verdict.find(line), std::string::npos) << verdict.substr(0, 3000);
  const std::size_t mfu = html.find(">mfu</text>");
  ASSERT_NE(mfu, std::string::npos);
  const std::string unit = html.substr(mfu, html.find("</text>", mfu + 11) - mfu);
  EXPECT_NE(unit.find(">(%)"), std::string::npos) << unit;
  // calo report prints the verdict beside the page: the winner line, then each run's findings.
  const calo::testing::Outcome printed =
      calo::testing::run_calo("report " + runs + " --out " + (dir / "printed.html").string());
  EXPECT_NE(printed.output.find("which is better: " + winners[0]["text"].get<std::string>()),
            std::string::npos)
      << printed.output;
  EXPECT_NE(printed.output.find("run 1: "), std::string::npos) << printed.output;
  EXPECT_NE(printed.output.find("  1. step time"), std::string::npos) << printed.output;
  // Runs of two models are not contenders: a token of one is no token of the other.
  const std::string other_model = (dir / "other-model").string();
  ASSERT_EQ(
      calo::testing::run_calo("sim --model llama3-8b-4layers --cluster h100-hgx-calibrated --gpus 8 --gbs 32 "
                              "--seq 4096 --out " +
                              other_model)
          .exit_code,
      0);
  const calo::testing::Outcome models =
      calo::testing::run_calo("report " + (dir / "h100-hgx-calibrated-tp2").string() + " " + other_model +
                              " --out " + (dir / "models.html").string());
  EXPECT_EQ(models.exit_code, 0) << models.output;
  EXPECT_EQ(models.output.find("which is better"), std::string::npos) << models.output;
  EXPECT_NE(models.output.find("run 2: "), std::string::npos) << models.output;
}

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
