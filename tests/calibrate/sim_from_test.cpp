// `calo sim --from RUN`: the simulated twin of a measured run (its model, layout, warm-up and measured steps,
// start temperature and, in a calibrated cluster, its card's heat), which `calo compare` rates figure by
// figure; and the bad input it refuses with exit 2.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "calibrate/measurement.h"
#include "calibrate/twin.h"
#include "core/error.h"
#include "fixture_runs.h"
#include "sim/cluster.h"
#include "store/run_store.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::fixture_runs;
using calo::testing::h200_runs;
using calo::testing::Outcome;
using calo::testing::run_calo;

fs::path temp_path(const std::string& name) {
  return calo::testing::scratch_path("sim-from-" + name);
}

/// Distinct steps of `run` whose step spans are called `name` ("warmup" or "step").
std::size_t count_steps(const fs::path& run, const std::string& name) {
  std::set<int64_t> steps;
  for (const store::Span& span : store::RunReader(run).spans(store::SpanKind::kStep)) {
    if (span.name == name) steps.insert(span.step);
  }
  return steps.size();
}

TEST(SimFrom, TheTwinIsTheMeasuredJobAndCompareRatesEveryFigure) {
  const fs::path run = fixture_runs() / "mbs8";
  const sim::ClusterSpec preset = sim::load_cluster("h100-hgx-calibrated");
  const RunTwin twin = twin_of_run(run, preset);
  const MeasuredRun measured = load_measured_run(run, preset.gpu);
  EXPECT_EQ(twin.warmup_steps, 2);
  EXPECT_EQ(twin.measured_steps, 6);
  EXPECT_DOUBLE_EQ(twin.initial_die_c, measured.initial_temp_c);
  ASSERT_TRUE(std::isfinite(twin.card_r_scale)) << "the preset was fitted on this card";
  EXPECT_NE(twin.card_r_scale, 1.0);

  const fs::path sim = temp_path("mbs8");
  fs::remove_all(sim);
  const Outcome simulated = run_calo("sim --from " + run.string() + " --cluster h100-hgx-calibrated --out " +
                                     sim.string() + " --json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  const auto json = nlohmann::json::parse(simulated.output);
  EXPECT_NEAR(json["from"]["card_r_scale"].get<double>(), twin.card_r_scale, 1e-12);
  EXPECT_EQ(count_steps(sim, "warmup"), count_steps(run, "warmup"));
  EXPECT_EQ(count_steps(sim, "step"), count_steps(run, "step"));

  const Outcome compared = run_calo("compare --json " + run.string() + " " + sim.string());
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  const auto comparison = nlohmann::json::parse(compared.output);
  EXPECT_EQ(comparison["measured_reference"], 0) << "the twin is the measured run's graph";
  for (const auto& row : comparison["rows"]) {
    if (row["key"] != "step_time_p50_s" && row["key"] != "power_gpu_peak_w") continue;
    ASSERT_TRUE(row["sim_error"][1].is_number()) << row.dump();
    ASSERT_TRUE(row["tolerance"][1].is_number()) << row.dump();
    EXPECT_LE(std::fabs(row["sim_error"][1].get<double>()), row["tolerance"][1].get<double>()) << row.dump();
  }
  // The same twin by hand-given flags would need the run's model file; a sim of another layout has no error
  // column, and compare says why.
  const fs::path other = temp_path("other");
  fs::remove_all(other);
  ASSERT_EQ(run_calo("sim --model tiny-dense --cluster h100-hgx-calibrated --gpus 1 --out " + other.string())
                .exit_code,
            0);
  const Outcome unrated = run_calo("compare " + run.string() + " " + other.string());
  EXPECT_NE(unrated.output.find("calo sim --from"), std::string::npos) << unrated.output;
  fs::remove_all(sim);
  fs::remove_all(other);
}

TEST(SimFrom, TheReportsVerdictRatesTheTwinByTheMedianStep) {
  // mbs1 has one 162 ms step among 140 ms ones: its mean is 1-2 % above its median. The verdict sets the twin
  // beside the median, the step calibration fits, and says so.
  const fs::path run = fixture_runs() / "mbs1";
  const fs::path twin = temp_path("verdict-twin");
  fs::remove_all(twin);
  ASSERT_EQ(run_calo("sim --from " + run.string() + " --cluster h100-hgx-calibrated --no-op-spans --out " +
                     twin.string())
                .exit_code,
            0);
  const Outcome compared = run_calo("compare --json " + run.string() + " " + twin.string());
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  double median_error = NAN, mean_error = NAN;
  const nlohmann::json comparison = nlohmann::json::parse(compared.output);
  for (const auto& row : comparison["rows"]) {
    if (row["key"] == "step_time_p50_s") median_error = row["sim_error"][1].get<double>();
    if (row["key"] == "step_time_mean_s") mean_error = row["sim_error"][1].get<double>();
  }
  ASSERT_TRUE(std::isfinite(median_error) && std::isfinite(mean_error)) << compared.output;
  ASSERT_GT(std::fabs(median_error - mean_error), 0.005) << "the hiccup moves the mean";
  const fs::path html = temp_path("verdict.html");
  ASSERT_EQ(run_calo("report " + run.string() + " " + twin.string() + " --out " + html.string()).exit_code,
            0);
  std::ifstream file(html);
  const std::string page((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string said =
      std::fabs(median_error) < 0.0005
          ? std::string("simulated step time (median) within 0.1 % of measured")
          : fmt::format("simulated step time (median) {:.1f} % {} measured", std::fabs(median_error) * 100,
                        median_error > 0 ? "above" : "below");
  EXPECT_NE(page.find(said), std::string::npos) << said;
  fs::remove_all(twin);
  fs::remove(html);
}

TEST(SimFrom, BadInputExitsTwoWithTheFix) {
  const fs::path h200 = h200_runs() / "tmbs1";
  const fs::path sim = temp_path("bad");
  fs::remove_all(sim);
  ASSERT_EQ(run_calo("sim --from " + (fixture_runs() / "mbs1").string() +
                     " --cluster h100-hgx --no-op-spans --out " + sim.string())
                .exit_code,
            0);
  const struct {
    std::string flags;
    std::string says;
  } cases[] = {
      {"--from " + (fixture_runs() / "train").string(),
       "add --model (a preset or YAML file) and the layout flags"},
      {"--from " + sim.string(), "simulated run"},
      {"--from " + h200.string(), "H200"},
      {"--from " + (fixture_runs() / "mbs1").string() + " --tp 2", "drop --tp"},
      {"--from " + (fixture_runs() / "mbs1").string() + " --gpus 2", "drop --gpus"},
      {"--from " + fixture_runs().string(), "no run.db"},
  };
  for (const auto& bad : cases) {
    const Outcome outcome = run_calo("sim " + bad.flags + " --cluster h100-hgx --no-store");
    EXPECT_EQ(outcome.exit_code, 2) << bad.flags << ": " << outcome.output;
    EXPECT_NE(outcome.output.find(bad.says), std::string::npos) << bad.flags << ": " << outcome.output;
  }
  fs::remove_all(sim);
}

}  // namespace
}  // namespace calo::calibrate
