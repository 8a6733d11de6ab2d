// Calibration on real measurements: the H100 fixture runs (one GPU, Llama3-8B 4 layers, micro-batch sweep and
// a seq-8192 run, plus a recorded PyTorch training) fitted by leave-one-out against the issue's targets; each
// stage right on its own; the calibrated file loads and carries its provenance; bad input exits 2 and writes
// nothing.
#include "calibrate/calibrate.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "calibrate/fit.h"
#include "core/error.h"
#include "fixture_runs.h"
#include "issue_targets.h"
#include "sim/cluster.h"
#include "store/run_store.h"

namespace calo::calibrate {
namespace {

using calo::testing::expect_issue_targets;
using calo::testing::fixture_runs;
using calo::testing::Outcome;
using calo::testing::run_calo;
using calo::testing::traceops_runs;
using calo::testing::unpack_fixture;

namespace fs = std::filesystem;

std::vector<fs::path> measured_runs() {
  std::vector<fs::path> runs;
  for (const char* name : {"bench8b", "mbs1", "mbs2", "mbs4", "mbs8", "train"})
    runs.push_back(fixture_runs() / name);
  return runs;
}

/// The runs the shipped preset h100-hgx-calibrated is fitted to: the six fixture runs and the four trace-ops
/// runs, whose op spans fit the compute curves (docs/SIMULATOR.md "Calibration").
std::vector<fs::path> preset_runs() {
  std::vector<fs::path> runs = measured_runs();
  for (const char* name : {"tmbs1", "tmbs8", "t8k", "t4k"}) runs.push_back(traceops_runs() / name);
  return runs;
}

/// The preset's thermal-only runs (--thermal-run): the 313 s soak and cool-down of an eighth H100
/// (tests/fixtures/h100-soak-e, runs/soakcool) and the 300-step soak of the third (h100-traceops-c,
/// runs/soak).
std::vector<fs::path> preset_thermal_runs() {
  return {unpack_fixture("h100-soak-e") / "soakcool", unpack_fixture("h100-traceops-c") / "soak"};
}

/// One calibration of the preset's runs, shared by the tests that only read it.
const Calibration& fixture_calibration() {
  static const Calibration calibration =
      calibrate(preset_runs(), "h100-hgx", {true, {}, {}, preset_thermal_runs(), {}});
  return calibration;
}

/// The calibrated model (fitted on all runs, each run on its card) simulates a higher peak at each larger
/// micro-batch of `sweep` (run labels, smallest first), as measured, but for the steps named in `flat`
/// (larger label), which it may put up to 10 W lower.
void expect_fitted_peak_rises_with_micro_batch(const Calibration& calibration,
                                               const std::vector<std::string>& sweep,
                                               const std::vector<std::string>& flat = {}) {
  double previous_w = 0;
  for (const std::string& label : sweep) {
    const auto run = std::find_if(calibration.runs.begin(), calibration.runs.end(),
                                  [&](const MeasuredRun& item) { return item.label == label; });
    ASSERT_NE(run, calibration.runs.end()) << label;
    const double peak_w =
        simulate_run(*run, run_graph(*run), cluster_for_run(calibration.fit, *run)).peak_power_w;
    const bool may_be_flat = std::find(flat.begin(), flat.end(), label) != flat.end();
    EXPECT_GT(peak_w, previous_w - (may_be_flat ? 10.0 : 0.0))
        << label << ": the fitted peak rises with the micro-batch";
    previous_w = peak_w;
  }
}

TEST(CalibrateH100Preset, LeaveOneOutOnTheH100Runs) {
  const Calibration& calibration = fixture_calibration();
  ASSERT_EQ(calibration.held_out.size(), 11u)
      << "the nine bench runs carry a workload, the recording does not; then the two thermal runs";
  // Every target, heat included: the soaks set the sink's time constant that the 2-25 s runs could not (mbs8
  // held out was 3.00001 C cold without them, docs/SIMULATOR.md "Eighth fit").
  expect_issue_targets(calibration);
  // The thermal runs held out, replayed from their measured power: the soak card's within the target; the
  // third card's (its only run, so held out it gets the typical card's resistance) is a reported miss.
  const Tolerance& thermal = calo::testing::tolerance_of(calibration, kThermalRunsFigure);
  EXPECT_FALSE(thermal.met);
  EXPECT_LT(thermal.achieved, 7.0);
  for (const HeldOutRun& row : calibration.held_out) {
    if (row.label == "soakcool") {
      EXPECT_TRUE(row.thermal_only);
      EXPECT_LE(std::fabs(row.predicted.peak_temp_c - row.measured.peak_temp_c), 3.0);
      EXPECT_TRUE(std::isnan(row.predicted.step_time_s)) << "a thermal run is rated on its heat alone";
    }
  }
  // Measured peaks rise over micro-batch 1 -> 2 -> 4 -> 8 (mbs1 and tmbs1 at 1, mbs8 and tmbs8 at 8) by 12-32
  // W a step, while a fit of nine runs moves a held-out peak by up to 5 %: held out, all 5 steps move the
  // measured way with the asymmetric controller (3 of 5 with one response, docs/SIMULATOR.md, "How firm the
  // direction is"). The model fitted on all ten rises but for mbs1 -> mbs2 (-5 W against +17 W measured).
  EXPECT_EQ(calibration.direction_pairs, 5);
  EXPECT_EQ(calibration.direction_right, 5);
  expect_fitted_peak_rises_with_micro_batch(calibration, {"mbs1", "mbs2", "mbs4", "mbs8"}, {"mbs2"});
  double low_w = 0, high_w = 0;
  for (const HeldOutRun& row : calibration.held_out) {
    if (row.label == "mbs1") low_w = row.predicted.peak_power_w;
    if (row.label == "mbs8") high_w = row.predicted.peak_power_w;
  }
  EXPECT_GT(high_w, low_w) << "peak power from micro-batch 1 to 8, held out";
}

TEST(CalibrateH100Preset, LeaveOneOutNamesTheWrongDirectionStepsAndHowFirmlyEachParameterIsPinned) {
  const Calibration& calibration = fixture_calibration();
  // Every step counted is listed with its measured and held-out change; with one response the wrong ones
  // were the two out of mbs4, whose held-out peak the fits without it put high; now none is wrong
  // (docs/SIMULATOR.md, "How firm the direction is").
  ASSERT_EQ(static_cast<int>(calibration.direction_steps.size()), calibration.direction_pairs);
  int right = 0;
  for (const DirectionStep& step : calibration.direction_steps) {
    EXPECT_EQ(step.right, (step.measured_w > 0) == (step.predicted_w > 0)) << step.low << " -> " << step.high;
    EXPECT_GT(step.measured_w, 0) << step.low << " -> " << step.high << ": the measured peak rises";
    right += step.right;
    if (!step.right) {
      EXPECT_EQ(step.low, "mbs4") << step.high;
    }
  }
  EXPECT_EQ(right, calibration.direction_right);

  // One spread per fitted parameter; each names the leave-out that moves it most, and no other moves it more.
  std::size_t fitted = 0;
  for (const StageFit& stage : calibration.fit.stages) fitted += stage.parameters.size();
  ASSERT_EQ(calibration.parameter_spread.size(), fitted);
  std::map<std::string, ParameterSpread> by_key;
  for (const ParameterSpread& spread : calibration.parameter_spread) {
    by_key[spread.key] = spread;
    EXPECT_LE(spread.low, spread.high) << spread.key;
    const double moved = spread.pinned_by.empty() ? 0.0 : std::fabs(spread.without - spread.fitted);
    for (const HeldOutRun& row : calibration.held_out) {
      for (const ParameterFit& parameter : row.parameters) {
        if (parameter.key != spread.key) continue;
        EXPECT_GE(parameter.fitted, spread.low) << spread.key << " without " << row.label;
        EXPECT_LE(parameter.fitted, spread.high) << spread.key << " without " << row.label;
        EXPECT_LE(std::fabs(parameter.fitted - spread.fitted), moved + 1e-12)
            << spread.key << ": leaving out " << row.label << " moves it more than '" << spread.pinned_by
            << "'";
      }
    }
  }
  // The real runs pin the compute curves' ceilings and the heat firmly, the controller loosely: its time
  // constants trade against each other and the active powers (the fits of nine runs span 14-46 ms).
  ASSERT_TRUE(by_key.count("gpu.power_control.response_ms"));
  EXPECT_GT(std::fabs(by_key["gpu.power_control.response_ms"].shift), 0.5);
  EXPECT_GT(by_key["gpu.power_control.response_ms"].high / by_key["gpu.power_control.response_ms"].low, 2.0);
  for (const char* firm : {"gpu.efficiency.memory_max", "gpu.efficiency.gemm_max"}) {
    ASSERT_TRUE(by_key.count(firm)) << firm;
    EXPECT_LT(std::fabs(by_key[firm].shift), 0.05) << firm;
  }
  // The sink's time constant and the cooling response rest on the one long record: without the soak card's
  // soak the third card's (46 s, still rising) alone sets them.
  ASSERT_TRUE(by_key.count("gpu.thermal.tau_sink_s"));
  EXPECT_EQ(by_key["gpu.thermal.tau_sink_s"].pinned_by, "soakcool");
  EXPECT_GT(std::fabs(by_key["gpu.thermal.tau_sink_s"].shift), 1.0);
  // Both go into the calibrated file.
  const nlohmann::json file = calibrated_cluster_json(calibration, "h100-hgx")["calibration"];
  EXPECT_EQ(file["parameter_spread"].size(), calibration.parameter_spread.size());
  EXPECT_EQ(file["peak_power_direction"]["steps"].size(), calibration.direction_steps.size());
}

TEST(CalibrateH100Preset, TheShippedH100PresetIsTheFitOfItsRuns) {
  // data/clusters/h100-hgx-calibrated.yaml reproduces from its ten runs (docs/SIMULATOR.md gives the
  // command).
  const sim::ClusterSpec preset = sim::load_cluster("h100-hgx-calibrated");
  const sim::GpuSpec& fitted = fixture_calibration().fit.cluster.gpu;
  for (int power_class = 0; power_class < sim::kNumPowerClasses; ++power_class)
    EXPECT_NEAR(preset.gpu.active_power_w[power_class], fitted.active_power_w[power_class], 1e-6)
        << power_class;
  EXPECT_NEAR(preset.gpu.power_control.response_s, fitted.power_control.response_s, 1e-9);
  EXPECT_NEAR(preset.gpu.power_control.average_s, fitted.power_control.average_s, 1e-9);
  EXPECT_NEAR(preset.gpu.power_control.raise_response_s, fitted.power_control.raise_response_s, 1e-9);
  EXPECT_GT(fitted.power_control.raise_response_s, fitted.power_control.response_s * 1.2)
      << "the runs fit a clock that climbs back more slowly than it is cut";
  EXPECT_NEAR(preset.gpu.efficiency.gemm_half_dim, fitted.efficiency.gemm_half_dim, 1e-6);
  EXPECT_NEAR(preset.gpu.thermal.r_die_k_per_w, fitted.thermal.r_die_k_per_w, 1e-9);
  EXPECT_NEAR(preset.gpu.thermal.tau_sink_s, fitted.thermal.tau_sink_s, 1e-6);  // 10 digits in the file
  EXPECT_NEAR(preset.gpu.thermal.cooling_cut_max, fitted.thermal.cooling_cut_max, 1e-9);
  EXPECT_GT(fitted.thermal.cooling_cut_max, 0.05) << "the soak shows the cooling answer";
}

TEST(Calibrate, TheSixRunsOfTheIssueMeetEveryNumericTargetHeldOutButMbs1sEnergy) {
  // tests/fixtures/h100-runs alone (no op spans: compute fitted to whole steps), the runs the targets
  // were set on: mbs1 -> mbs2 -> mbs4 -> mbs8 measured 848 / 864 / 879 / 911 W. Since the fit takes the one
  // energy figure (the window's, edges included; 2026-12-06) held-out mbs1's energy per step is 5.2 % low (a
  // reported miss of the 5 % target: its energy per step holds its one 162 ms step among 140 ms ones, which
  // the median step time the model is fitted to leaves out), and one of the three micro-batch steps moves the
  // measured way held out; fitted on all, the peak rises from mbs2 on and mbs1 -> mbs2 falls 26 W.
  const Calibration calibration = calibrate(measured_runs(), "h100-hgx");
  ASSERT_EQ(calibration.held_out.size(), 5u);
  expect_issue_targets(calibration, 3.0, 0.055);
  EXPECT_EQ(calibration.direction_pairs, 3);
  expect_fitted_peak_rises_with_micro_batch(calibration, {"mbs2", "mbs4", "mbs8"});
}

TEST(Calibrate, TwoRunsOfOneMicroBatchAreNotADirectionStep) {
  // Step-time compute (no op spans): mbs1 and tmbs1 share a sweep and a micro-batch, so they pair with mbs2
  // each but not with each other.
  std::vector<fs::path> runs = {fixture_runs() / "mbs1", fixture_runs() / "mbs2", traceops_runs() / "tmbs1"};
  const Calibration calibration = calibrate(runs, "h100-hgx");
  EXPECT_EQ(calibration.direction_pairs, 2);
}

TEST(Calibrate, ARunStartsFromTheTemperatureItReadBeforeItsGpuLoaded) {
  // tmbs1's first reading (36 C, at its first step) is stale: 100 ms later, still idle, it reads 33 C; the
  // GPU loads ~0.2 s into the step.
  const MeasuredRun run = load_measured_run(traceops_runs() / "tmbs1", sim::load_cluster("h100-hgx").gpu);
  EXPECT_DOUBLE_EQ(run.initial_temp_c, 33);
  EXPECT_GT(run.load_start_s, 0.15);
  EXPECT_LT(run.load_start_s, 0.3);
}

TEST(CalibrateH100Preset, EachCardHasItsOwnThermalResistance) {
  // The six fixture runs are one H100, the four trace-ops runs another: at the same power the first card's
  // die rose 13 C within 0.3 s, the second's 10 C. The two soaks are the third card and an eighth.
  const Calibration& calibration = fixture_calibration();
  const auto& cards = calibration.fit.card_r_scale;
  ASSERT_EQ(cards.size(), 4u);
  double product = 1;
  for (const auto& [card, scale] : cards) product *= scale;
  EXPECT_NEAR(product, 1.0, 1e-6) << "the typical card is the geometric mean";
  const double first = cards.at(calibration.runs[0].gpu_uuid),
               second = cards.at(calibration.runs[6].gpu_uuid);
  EXPECT_GT(first, second * 1.1);
  // A held-out run keeps its card's scale: with one scale for both, tmbs1 (second card) came out 3.3 C hot.
  for (const HeldOutRun& row : calibration.held_out) {
    if (row.thermal_only) continue;  // LeaveOneOutOnTheH100Runs
    EXPECT_LE(std::fabs(row.predicted.peak_temp_c - row.measured.peak_temp_c), 3.0) << row.label;
  }
}

TEST(CalibrateOps, GpuOpSpansFitEveryRunsStepAtItsMeasuredClock) {
  std::vector<fs::path> runs;
  for (const char* name : {"tmbs1", "tmbs8", "t8k", "t4k"}) runs.push_back(traceops_runs() / name);
  const Calibration calibration = calibrate(runs, "h100-hgx", {false, {}, {}, {}, {}});
  const StageFit* compute = nullptr;
  for (const StageFit& stage : calibration.fit.stages) {
    if (stage.stage == "compute") compute = &stage;
  }
  ASSERT_NE(compute, nullptr);
  ASSERT_EQ(compute->residuals.size(), 4u);
  for (const auto& [label, residual] : compute->residuals) {
    // Whole step (cap off, at the clock its ops ran) and each op class on its own. Measured at worst: step
    // 1.3 %, GEMMs 1.0 %, attention 6.0 % (tmbs1: one 2K sequence), elementwise 4.8 %; the fitted clock
    // 3.2 % from the NVML mean.
    EXPECT_LE(std::fabs(residual["step_time_s"].get<double>()), 0.03) << label << " " << residual.dump();
    EXPECT_LE(std::fabs(residual["gemm_time"].get<double>()), 0.03) << label << " " << residual.dump();
    EXPECT_LE(std::fabs(residual["attention_time"].get<double>()), 0.08) << label << " " << residual.dump();
    EXPECT_LE(std::fabs(residual["elementwise_time"].get<double>()), 0.06) << label << " " << residual.dump();
    EXPECT_LE(std::fabs(residual["op_clock_vs_nvml"].get<double>()), 0.05) << label << " " << residual.dump();
  }
  // The slow cross-entropy kernel is learned as its own time scale, not as a slower HBM for every kernel.
  const auto& scales = calibration.fit.cluster.gpu.efficiency.op_time_scale;
  ASSERT_TRUE(scales.count("elementwise.cross_entropy"));
  ASSERT_TRUE(scales.count("optimizer"));
  EXPECT_GT(scales.at("elementwise.cross_entropy"), 2 * scales.at("optimizer"));
  // memory_max is the ceiling, the fastest kind's (the optimizer streams at ~92 % of HBM speed): a kind no
  // run measured, such as the unfused softmax, is taken at it rather than at the slow kernels' typical 34 %.
  EXPECT_DOUBLE_EQ(scales.at("optimizer"), 1.0);
  for (const auto& [kind, scale] : scales) {
    if (!kind.starts_with("attention")) {
      EXPECT_GE(scale, 1.0) << kind;
    }
  }
  EXPECT_GT(calibration.fit.cluster.gpu.efficiency.memory_max, 0.8);
}

TEST(CalibrateOps, ARunsClockLevelComesFromItsOwnOpTimes) {
  // Read the trace-ops runs' op spans, then pretend NVML read tmbs1's clock 8 % high: the fit must put that
  // run's ops 8 % lower against the others' and keep the curves, as it trusts op-time ratios within a run.
  const sim::GpuSpec gpu = sim::load_cluster("h100-hgx").gpu;
  std::vector<std::vector<OpTiming>> runs;
  for (const char* name : {"tmbs1", "tmbs8", "t8k", "t4k"}) {
    const MeasuredRun run = load_measured_run(traceops_runs() / name, gpu);
    runs.push_back(op_timings(run, run_graph(run)));
    ASSERT_FALSE(runs.back().empty()) << name;
  }
  const std::vector<std::string> fixed;
  const OpCurveFit clean = fit_op_curves_with_clock_levels(runs, gpu, fixed);
  for (OpTiming& timing : runs[0]) timing.clock_mhz *= 1.08;
  const OpCurveFit misread = fit_op_curves_with_clock_levels(runs, gpu, fixed);
  const double relative =
      (misread.clock_levels[0] / misread.clock_levels[1]) / (clean.clock_levels[0] / clean.clock_levels[1]);
  EXPECT_NEAR(relative, 1 / 1.08, 0.01);
  EXPECT_NEAR(misread.efficiency.gemm_max / clean.efficiency.gemm_max, 1, 0.03);
}

/// The 16K-token run (tests/fixtures/h100-long-context), unpacked once per test binary.
const fs::path& long_context_run() {
  static const fs::path dir = unpack_fixture("h100-long-context") / "long-16384";
  return dir;
}

TEST(CalibrateOps, OpSpanComputeUnderThePowerFitPredictsHeldOutRuns) {
  // Compute from the op spans of five runs (2K-16K tokens, micro-batch 1-8), power and heat from all eleven.
  // The 16K run held out: -1.7 % (it was -4.2 % with each op fitted at its run's NVML clock mean and the
  // elementwise power bounded at 3x the base). With one power for elementwise and optimizer kernels the rest
  // missed too (step 6.1 %, energy 7.1 %): op spans show the optimizer at 92 % of HBM speed, cross-entropy 21
  // %.
  std::vector<fs::path> runs = measured_runs();
  for (const char* name : {"tmbs1", "tmbs8", "t8k", "t4k"}) runs.push_back(traceops_runs() / name);
  runs.push_back(long_context_run());
  const Calibration calibration = calibrate(runs, "h100-hgx");
  ASSERT_EQ(calibration.held_out.size(), 10u);
  for (const HeldOutRun& row : calibration.held_out) {
    auto error = [&](std::size_t figure) {
      return std::fabs(
          figure_error(figure, figure_value(row.measured, figure), figure_value(row.predicted, figure)));
    };
    // Every target, every run (seventh fit: step 2.6 %, the 16K run -1.2 %). With one controller response
    // two missed: tmbs8 +4.4 % (energy +5.8 %) and the 16K run -3.8 % (docs/SIMULATOR.md "Long sequences").
    EXPECT_LE(error(0), 0.03) << row.label << " step time";
    EXPECT_LE(error(1), 0.05) << row.label << " energy per step";
    EXPECT_LE(error(2), 0.05) << row.label << " mean power";
    EXPECT_LE(error(3), 0.10) << row.label << " peak power";
    EXPECT_LE(error(5), 3.0) << row.label << " peak temperature";
  }
  // Three cards: the 16K run's ran nothing else, so held out it takes the typical card's resistance.
  EXPECT_EQ(calibration.fit.card_r_scale.size(), 3u);
  const auto& power_w = calibration.fit.cluster.gpu.active_power_w;
  EXPECT_LT(power_w[static_cast<int>(sim::PowerClass::kOptimizer)],
            power_w[static_cast<int>(sim::PowerClass::kElementwise)])
      << "per unit of HBM utilization, the streaming optimizer draws less than the slow elementwise kernels";
  // Two micro-batches at one sequence length (tmbs1, tmbs8) determine attention's grid-row factor.
  EXPECT_GT(calibration.fit.cluster.gpu.efficiency.attention_half_rows, 0);
}

TEST(CalibrateOps, OneRunsOpSpansKeepWhatTheyCannotTell) {
  // One run: one sequence length, one micro-batch, one grid size: attention's half points stay the base's.
  const Calibration calibration = calibrate({long_context_run()}, "h100-hgx", {false, {}, {}, {}, {}});
  for (const char* key : {"gpu.efficiency.attention_half_seq", "gpu.efficiency.attention_half_rows"}) {
    EXPECT_NE(std::find(calibration.fit.kept.begin(), calibration.fit.kept.end(), key),
              calibration.fit.kept.end())
        << key;
  }
  EXPECT_EQ(calibration.fit.cluster.gpu.efficiency.attention_half_rows, 0);
}

TEST(Calibrate, TheShippedPresetPredictsTheLongContextStep) {
  // Fitted on 2K-8K runs only; the 16K run is outside its range (measured p50 211.4 ms): -1.2 %, beside the
  // fit's own step residuals of -2.1 ... +0.8 % (the sixth fit, one controller response: -3.8 %;
  // docs/SIMULATOR.md "The shipped preset").
  const sim::ClusterSpec cluster = sim::load_cluster("h100-hgx-calibrated");
  const MeasuredRun run = load_measured_run(long_context_run(), cluster.gpu);
  const RunFigures simulated = simulate_run(run, run_graph(run), cluster);
  EXPECT_LE(std::fabs(figure_error(0, run.figures.step_time_s, simulated.step_time_s)), 0.03)
      << "measured " << run.figures.step_time_s << " s, simulated " << simulated.step_time_s << " s";
}

TEST(CalibrateH100Preset, EachStageIsRightOnItsOwn) {
  const Calibration& calibration = fixture_calibration();
  for (const StageFit& stage : calibration.fit.stages) {
    if (stage.stage == "compute") {
      ASSERT_EQ(stage.residuals.size(), 4u) << "the op spans of the four trace-ops runs fit compute";
      for (const auto& [label, values] : stage.residuals) {
        for (const char* part : {"step_time_s", "gemm_time", "attention_time", "elementwise_time"}) {
          EXPECT_LE(std::fabs(values[part].get<double>()), 0.08) << label << " " << part;
        }
      }
    }
    if (stage.stage == "thermal") {
      ASSERT_EQ(stage.residuals.size(), 12u)
          << "the recording's temperature curve counts too, and the soaks'";
      for (const auto& [label, values] : stage.residuals) {
        // Single 100 ms readings scatter ~2 C around the die's temperature: 2.5 C RMS at worst.
        EXPECT_LE(values["temp_rms_c"].get<double>(), 2.6) << label;
      }
    }
    if (stage.stage == "idle") {
      ASSERT_EQ(stage.parameters.size(), 1u);
      EXPECT_NEAR(stage.parameters[0].fitted, 128, 15) << "idle with clocks up, as the runs show before work";
    }
  }
}

TEST(Calibrate, RunsWithoutOpSpansFitComputeToTheirSteps) {
  const Calibration calibration = calibrate(measured_runs(), "h100-hgx", {false, {}, {}, {}, {}});
  const auto compute = std::find_if(calibration.fit.stages.begin(), calibration.fit.stages.end(),
                                    [](const StageFit& stage) { return stage.stage == "compute"; });
  ASSERT_NE(compute, calibration.fit.stages.end());
  ASSERT_EQ(compute->residuals.size(), 5u);
  for (const auto& [label, values] : compute->residuals) {
    // 4 %: the measured clock is a time-weighted mean of 100 ms samples over the window while the step
    // time is the median step (mbs1: 3.9 %, its one 162 ms step pulls the clock mean, not the median).
    EXPECT_LE(std::fabs(values["step_time_s"].get<double>()), 0.04) << label << " at its measured clock";
  }
}

TEST(CalibrateH100Preset, TheCalibratedFileLoadsAndCarriesItsProvenance) {
  const Calibration& calibration = fixture_calibration();
  const fs::path out = calo::testing::scratch_path("calibrated.yaml");
  write_cluster_file(out, calibrated_cluster_json(calibration, "h100-hgx"));
  const sim::ClusterSpec cluster = sim::load_cluster(out.string());
  EXPECT_EQ(cluster.name, "h100-hgx-calibrated");
  // Written with 10 significant digits.
  EXPECT_NEAR(cluster.gpu.efficiency.gemm_max, calibration.fit.cluster.gpu.efficiency.gemm_max, 1e-9);
  EXPECT_NEAR(cluster.gpu.power_control.response_s, calibration.fit.cluster.gpu.power_control.response_s,
              1e-9);
  ASSERT_TRUE(cluster.calibration.is_object());
  EXPECT_EQ(cluster.calibration["runs"].size(), 12u) << "ten fitted runs and two thermal runs";
  EXPECT_EQ(cluster.calibration["leave_one_out"].size(), 11u);
  EXPECT_TRUE(cluster.calibration["tolerance"].contains(kThermalRunsFigure));
  EXPECT_NEAR(cluster.gpu.thermal.cooling_cut_max, calibration.fit.cluster.gpu.thermal.cooling_cut_max, 1e-9);
  EXPECT_FALSE(cluster.calibration["kept_from_base"].empty());
  EXPECT_TRUE(cluster.calibration["tolerance"].contains("peak_power_w"));
  fs::remove(out);
}

TEST(Calibrate, ASimulatedRunIsNotAMeasurement) {
  try {
    calibrate({fixture_runs() / "mbs1", fixture_runs() / "simmbs1"}, "h100-hgx");
    FAIL() << "a sim run must be refused";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("simulated run"), std::string::npos) << error.what();
  }
}

TEST(Calibrate, ARunOfAnotherGpuThanTheBaseIsRefused) {
  try {
    calibrate({fixture_runs() / "mbs1"}, "h200-hgx");
    FAIL() << "an H100 run cannot calibrate an H200 cluster";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("H100"), std::string::npos) << error.what();
  }
}

TEST(Calibrate, ARunWithoutStepsIsRefused) {
  const fs::path dir = calo::testing::scratch_path("calibrate-nosteps");
  fs::remove_all(dir);
  {
    store::RunInfo info;
    info.kind = store::RunKind::kRecord;
    info.name = "no-steps";
    store::RunWriter writer(dir, info);
    store::DeviceInfo device;
    device.name = "NVIDIA H100 80GB HBM3";
    writer.add_device(device);
    writer.finish(1000);
  }
  try {
    calibrate({dir}, "h100-hgx");
    FAIL() << "a run without steps must be refused";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("no step spans"), std::string::npos) << error.what();
  }
  fs::remove_all(dir);
}

/// Calibrates cpu-host to a real CPU-backend bench with op spans (`bench_flags`: model and layout), in a
/// scratch directory named `name` that is removed again.
Calibration calibrate_cpu_bench(const std::string& name, const std::string& bench_flags) {
  const fs::path dir = calo::testing::scratch_path(name);
  fs::remove_all(dir);
  const Outcome bench =
      run_calo("bench " + bench_flags +
               " --backend cpu --steps 3 --warmup 1 --trace-ops --no-progress --out " + dir.string());
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  Calibration calibration = calibrate({dir}, "cpu-host", {false, {}, {}, {}, {}});
  fs::remove_all(dir);
  return calibration;
}

/// The stage of `calibration` named `name`, or null.
const StageFit* stage_named(const Calibration& calibration, const std::string& name) {
  for (const StageFit& stage : calibration.fit.stages) {
    if (stage.stage == name) return &stage;
  }
  return nullptr;
}

TEST(CalibrateOps, PerOpSpansOfACpuBenchFitTheEfficiencyCurves) {
  // A real CPU-backend bench with one span per op: the compute stage then fits the curves themselves.
  const Calibration calibration =
      calibrate_cpu_bench("calibrate-cpu", "--model tiny-dense --gbs 4 --nproc 1");
  const StageFit* compute = stage_named(calibration, "compute");
  const StageFit* peak = stage_named(calibration, "peak");
  ASSERT_NE(compute, nullptr);
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(peak->parameters.size(), 2u) << "the peak the bench measured at start";
  std::vector<std::string> keys;
  for (const ParameterFit& parameter : compute->parameters) keys.push_back(parameter.key);
  EXPECT_NE(std::find(keys.begin(), keys.end(), "gpu.efficiency.gemm_half_dim"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "gpu.efficiency.memory_half_bytes"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "gpu.efficiency.kernel_overhead_us"), keys.end());
  ASSERT_EQ(compute->residuals.size(), 1u);
  const nlohmann::json& residual = compute->residuals[0].second;
  ASSERT_TRUE(residual.contains("gemm_time")) << residual.dump();
  // Accuracy is not asserted here: on a CPU shared with other work one op's time spreads 10x between steps,
  // so this run is no stable reference. The per-op fit's accuracy is tested on GPU op spans (H100 trace-ops
  // runs).
  for (const char* key : {"attention_time", "elementwise_time", "optimizer_time", "step_time_s"}) {
    EXPECT_TRUE(residual.contains(key)) << key << " in " << residual.dump();
  }
  // No power was recorded: the power stage says so instead of fitting knobs to nothing.
  for (const StageFit& stage : calibration.fit.stages) {
    if (stage.stage == "power") {
      EXPECT_TRUE(stage.parameters.empty());
      EXPECT_FALSE(stage.note.empty());
    }
  }
}

TEST(CalibrateOps, ATensorParallelCpuBenchsCollectivesAreNotCountedTwice) {
  // Two CPU ranks at TP2 (the main job on a 2-core host): the step less its compute op spans is mostly the
  // ranks' MPI collectives. Spread over the ops as kernel overhead and simulated again by the collective
  // model, it was counted twice (the calibrated twin's step +11-15 % against its own bench); the overhead is
  // now settled so the bench's simulated step is its measured one. Noise cannot move this: it is the fit's
  // own arithmetic on whatever this run measured.
  const Calibration calibration =
      calibrate_cpu_bench("calibrate-cpu-tp2", "--model tiny-dense --tp 2 --gbs 4 --seq 128 --nproc 2");
  const StageFit* compute = stage_named(calibration, "compute");
  ASSERT_NE(compute, nullptr);
  ASSERT_EQ(compute->residuals.size(), 1u);
  const nlohmann::json& residual = compute->residuals[0].second;
  ASSERT_TRUE(residual.contains("step_time_s")) << residual.dump();
  EXPECT_LT(std::abs(residual["step_time_s"].get<double>()), 0.01) << residual.dump();
}

TEST(CalibrateCli, WritesAFileThatCaloSimLoads) {
  const fs::path out = calo::testing::scratch_path("cli-calibrated.yaml");
  const Outcome calibrated =
      run_calo("calibrate " + (fixture_runs() / "mbs1").string() + " " + (fixture_runs() / "mbs8").string() +
               " --cluster h100-hgx --out " + out.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("leave-one-out"), std::string::npos) << calibrated.output;
  EXPECT_NE(calibrated.output.find("kept from the base"), std::string::npos) << calibrated.output;
  // Named after its file, not "h100-hgx-calibrated" (the shipped preset's name): runs simulated on it say
  // which cluster they ran on.
  EXPECT_EQ(sim::load_cluster(out.string()).name, "cli-calibrated");
  const Outcome simulated = run_calo("sim --model tiny-dense --cluster " + out.string() +
                                     " --gpus 1 --gbs 2 --steps 2 --no-store --json");
  EXPECT_EQ(simulated.exit_code, 0) << simulated.output;
  fs::remove(out);
}

TEST(CalibrateCli, CompareShowsTheCalibratedToleranceBesideTheError) {
  // Simulate the graph of fixture run mbs1 (its own model and layout) on the shipped calibrated H100 preset.
  store::RunReader reader(fixture_runs() / "mbs1");
  const auto config = nlohmann::json::parse(reader.run().config_json);
  const fs::path model = calo::testing::scratch_path("mbs1-model.json");
  std::ofstream(model) << config["model"].dump();
  const fs::path sim = calo::testing::scratch_path("mbs1-sim");
  fs::remove_all(sim);
  const Outcome simulated =
      run_calo("sim --model " + model.string() +
               " --cluster h100-hgx-calibrated --gpus 1 --seq 2048 --mbs 1 --gbs 4 --steps 6 "
               "--out " +
               sim.string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  const Outcome compared =
      run_calo("compare --json " + (fixture_runs() / "mbs1").string() + " " + sim.string());
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  const auto json = nlohmann::json::parse(compared.output);
  bool step_rated = false, heat_rated = false;
  for (const auto& row : json["rows"]) {
    if (row["key"] == "temp_gpu_peak_500ms_c") {
      ASSERT_TRUE(row["tolerance"][1].is_number()) << row.dump() << ": calibration rates the sustained peak";
      EXPECT_LE(row["tolerance"][1].get<double>(), 3.0001) << "degrees, the preset's leave-one-out (3.00001)";
      heat_rated = true;
    }
    if (row["key"] != "step_time_p50_s") continue;  // the median: the step calibration fits
    ASSERT_TRUE(row["sim_error"][1].is_number()) << row.dump() << ": the sim is of mbs1's graph";
    ASSERT_TRUE(row["tolerance"][1].is_number()) << row.dump();
    EXPECT_LE(row["tolerance"][1].get<double>(), 0.03) << "the preset's leave-one-out step-time tolerance";
    step_rated = true;
  }
  EXPECT_TRUE(step_rated);
  EXPECT_TRUE(heat_rated);
  fs::remove_all(sim);
  fs::remove(model);
}

TEST(CalibrateCli, BadInputExitsTwoAndWritesNothing) {
  const fs::path out = calo::testing::scratch_path("cli-bad.yaml");
  const Outcome outcome = run_calo("calibrate " + (fixture_runs() / "simmbs1").string() +
                                   " --cluster h100-hgx --out " + out.string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("calo bench"), std::string::npos)
      << "the message names the fix: " << outcome.output;
  EXPECT_FALSE(fs::exists(out));
}

// --out follows the one output-file policy (core::require_file_target), checked before the fit: a symlink to
// a regular file passed calibrate's own check (is_regular_file follows links) and was replaced by the YAML.
TEST(CalibrateCli, AnOutThatIsASymlinkIsRefusedBeforeTheFit) {
  const fs::path dir = calo::testing::scratch_path("cli-out-link");
  fs::create_directories(dir);
  std::ofstream(dir / "victim.yaml") << "keep\n";
  fs::create_symlink(dir / "victim.yaml", dir / "link.yaml");
  const Outcome outcome = run_calo("calibrate " + (fixture_runs() / "mbs1").string() +
                                   " --cluster h100-hgx --no-loo --out " + (dir / "link.yaml").string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--out " + (dir / "link.yaml").string() +
                                " is a symbolic link, not a regular file; name a new file"),
            std::string::npos)
      << outcome.output;
  EXPECT_TRUE(fs::is_symlink(dir / "link.yaml"));
  std::ifstream victim(dir / "victim.yaml");
  std::string line;
  std::getline(victim, line);
  EXPECT_EQ(line, "keep");
}

TEST(CalibrateCli, AThermalRunMustBeAMeasurementOfTheSameGpu) {
  // --thermal-run takes any measured run with power and temperature (steps not needed), of the base's GPU.
  const fs::path out = calo::testing::scratch_path("cli-thermal-bad.yaml");
  const std::string fitted = (fixture_runs() / "mbs1").string() + " --out " + out.string();
  Outcome outcome = run_calo("calibrate " + fitted + " --cluster h100-hgx --no-loo --thermal-run " +
                             (fixture_runs() / "simmbs1").string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("simulated run"), std::string::npos) << outcome.output;
  outcome = run_calo("calibrate " + fitted + " --cluster h100-hgx --no-loo --thermal-run " +
                     (calo::testing::h200_runs() / "soak").string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("give a --cluster whose GPU is a H200"), std::string::npos) << outcome.output;
  EXPECT_FALSE(fs::exists(out));
  // A record without steps is welcome: the soak card's and cool-down, listed with its role.
  outcome = run_calo("calibrate " + fitted + " --cluster h100-hgx --no-loo --json --thermal-run " +
                     (unpack_fixture("h100-soak-e") / "soakcool").string());
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const nlohmann::json runs = nlohmann::json::parse(outcome.output)["cluster"]["calibration"]["runs"];
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["role"], "thermal");
  EXPECT_EQ(runs[1]["kind"], "record");
}

}  // namespace
}  // namespace calo::calibrate
