#include "calibrate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/output_file.h"
#include "core/threads.h"

namespace calo::calibrate {

CALO_JSON_FIELDS(DirectionStep, low, high, measured_w, predicted_w, right)
CALO_JSON_FIELDS(ParameterSpread, key, unit, fitted, low, high, pinned_by, without, shift)

namespace {

/// The targets: step time 3 %, energy per step 5 %, mean power 5 %, peak power 10 %, peak temp 3 C.
double target_of(const std::string& figure) {
  static const std::map<std::string, double> kTargets = {{"step_time_s", 0.03},
                                                         {"energy_per_step_j", 0.05},
                                                         {"mean_power_w", 0.05},
                                                         {"peak_power_w", 0.10},
                                                         {"peak_temp_c", 3.0}};
  auto found = kTargets.find(figure);
  return found == kTargets.end() ? NAN : found->second;
}

std::string sweep_key(const MeasuredRun& run) {
  parallel::Layout layout = run.layout;
  layout.micro_batch = 0;
  layout.global_batch = 0;
  return run.model->name + " " + parallel::to_json(layout).dump();
}

/// Leave-one-out of the runs the simulator can replay: each one predicted by the fit made without it.
HeldOutRun held_out_run(const std::vector<MeasuredRun>& runs, std::size_t held, const sim::ClusterSpec& base,
                        const FitSettings& settings) {
  std::vector<MeasuredRun> others;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (index != held) others.push_back(runs[index]);
  }
  const FitResult fit = fit_cluster(others, base, settings);
  const MeasuredRun& run = runs[held];
  HeldOutRun row{run.label,
                 run.layout.micro_batch,
                 sweep_key(run),
                 run.figures,
                 simulate_run(run, run_graph(run), cluster_for_run(fit, run)),
                 {}};
  for (const StageFit& stage : fit.stages)
    row.parameters.insert(row.parameters.end(), stage.parameters.begin(), stage.parameters.end());
  return row;
}

/// Leave-one-out of a thermal-only run: its sustained peak temperature, replayed from its measured power by
/// the thermal stage fitted without it (the other stages do not see these runs).
HeldOutRun held_out_thermal_run(const std::vector<MeasuredRun>& runs, std::size_t held,
                                const sim::ClusterSpec& base, const FitSettings& settings) {
  const MeasuredRun& run = settings.thermal_runs[held];
  FitSettings without = settings;
  without.thermal_runs.erase(without.thermal_runs.begin() + static_cast<std::ptrdiff_t>(held));
  const FitResult fit = fit_cluster(runs, base, without);
  RunFigures measured, predicted;
  measured.peak_temp_c = run.figures.peak_temp_c;
  predicted.peak_temp_c = replayed_peak_temp_c(run, cluster_for_run(fit, run));
  HeldOutRun row{run.label, 0, "", measured, predicted, {}, true};
  for (const StageFit& stage : fit.stages) {
    if (stage.stage == "thermal")
      row.parameters.insert(row.parameters.end(), stage.parameters.begin(), stage.parameters.end());
  }
  return row;
}

/// Every leave-one-out fit (the replayable runs' when there are two or more, then each thermal run's), made
/// on one thread per core (the fits are independent); rows in that order whatever the threads' order.
std::vector<HeldOutRun> leave_one_out(const std::vector<MeasuredRun>& runs, const sim::ClusterSpec& base,
                                      const FitSettings& settings, const CalibrateOptions& options) {
  struct Job {
    std::size_t held;
    bool thermal;
  };
  std::vector<Job> jobs;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (runs[index].simulatable()) jobs.push_back({index, false});
  }
  if (jobs.size() < 2) jobs.clear();
  for (std::size_t held = 0; held < settings.thermal_runs.size(); ++held) jobs.push_back({held, true});
  std::vector<std::optional<HeldOutRun>> rows(jobs.size());
  std::mutex progress_mutex;
  const int threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1,
                                 static_cast<int>(std::max<std::size_t>(jobs.size(), 1)));
  core::parallel_for(jobs.size(), threads, [&](std::size_t item) {
    const Job& job = jobs[item];
    if (options.progress) {
      const std::lock_guard lock(progress_mutex);
      options.progress(job.thermal ? fmt::format("leave-one-out: fitting without {} (thermal)",
                                                 settings.thermal_runs[job.held].label)
                                   : fmt::format("leave-one-out: fitting without {}", runs[job.held].label));
    }
    rows[item] = job.thermal ? held_out_thermal_run(runs, job.held, base, settings)
                             : held_out_run(runs, job.held, base, settings);
  });
  std::vector<HeldOutRun> ordered;
  for (auto& row : rows) ordered.push_back(std::move(*row));
  return ordered;
}

/// Each parameter the fit on all runs fitted, against its value in every leave-one-out fit that fitted it
/// too.
std::vector<ParameterSpread> parameter_spreads(const FitResult& fit,
                                               const std::vector<HeldOutRun>& held_out) {
  std::vector<ParameterSpread> spreads;
  for (const StageFit& stage : fit.stages) {
    for (const ParameterFit& parameter : stage.parameters) {
      ParameterSpread spread{parameter.key, parameter.unit, parameter.fitted, NAN, NAN, "", NAN, 0};
      for (const HeldOutRun& row : held_out) {
        const auto found =
            std::find_if(row.parameters.begin(), row.parameters.end(),
                         [&](const ParameterFit& other) { return other.key == parameter.key; });
        if (found == row.parameters.end() || !std::isfinite(found->fitted)) continue;
        const double value = found->fitted;
        spread.low = std::isnan(spread.low) ? value : std::min(spread.low, value);
        spread.high = std::isnan(spread.high) ? value : std::max(spread.high, value);
        const double shift = parameter.fitted != 0 ? (value - parameter.fitted) / std::fabs(parameter.fitted)
                             : value != 0          ? std::copysign(INFINITY, value)
                                                   : 0.0;
        if (std::fabs(shift) > std::fabs(spread.shift)) {  // the first run that moves it most
          spread.pinned_by = row.label;
          spread.without = value;
          spread.shift = shift;
        }
      }
      if (std::isfinite(spread.low)) spreads.push_back(spread);
    }
  }
  return spreads;
}

/// Largest |error| of figure `index` over the held-out rows that are (`thermal_only`) or are not thermal
/// runs; NaN when none has it.
double max_abs_error(const std::vector<HeldOutRun>& held_out, std::size_t index, bool thermal_only) {
  double achieved = NAN;
  for (const HeldOutRun& row : held_out) {
    if (row.thermal_only != thermal_only) continue;
    const double error =
        figure_error(index, figure_value(row.measured, index), figure_value(row.predicted, index));
    if (std::isfinite(error))
      achieved = std::isnan(achieved) ? std::fabs(error) : std::max(achieved, std::fabs(error));
  }
  return achieved;
}

void summarize(Calibration& calibration) {
  std::size_t temp_index = 0;
  for (std::size_t index = 0; index < figure_names().size(); ++index) {
    const auto& [name, unit] = figure_names()[index];
    if (name == "peak_temp_c") temp_index = index;
    Tolerance tolerance{name, unit == "C" ? "C" : "relative", target_of(name),
                        max_abs_error(calibration.held_out, index, false), false};
    tolerance.met = std::isfinite(tolerance.target) && tolerance.achieved <= tolerance.target;
    calibration.tolerances.push_back(tolerance);
  }
  // Thermal-only runs: their peak temperature replayed from their measured power, against the same target.
  Tolerance thermal{kThermalRunsFigure, "C", target_of("peak_temp_c"),
                    max_abs_error(calibration.held_out, temp_index, true), false};
  if (std::isfinite(thermal.achieved)) {
    thermal.met = thermal.achieved <= thermal.target;
    calibration.tolerances.push_back(thermal);
  }
  // Direction of peak power across each micro-batch sweep (runs sharing model and layout but the batch
  // sizes): every pair of runs at adjacent micro-batch sizes (two runs of one size are not a step).
  std::map<std::string, std::map<int, std::vector<const HeldOutRun*>>> sweeps;  // key -> micro-batch -> runs
  for (const HeldOutRun& row : calibration.held_out) {
    if (!row.sweep_key.empty()) sweeps[row.sweep_key][row.micro_batch].push_back(&row);  // thermal runs: none
  }
  for (const auto& [key, by_size] : sweeps) {
    for (auto upper = std::next(by_size.begin()); upper != by_size.end(); ++upper) {
      for (const HeldOutRun* low : std::prev(upper)->second) {
        for (const HeldOutRun* high : upper->second) {
          const double measured = high->measured.peak_power_w - low->measured.peak_power_w;
          const double predicted = high->predicted.peak_power_w - low->predicted.peak_power_w;
          if (!std::isfinite(measured) || !std::isfinite(predicted)) continue;
          const bool right = (measured > 0) == (predicted > 0);
          calibration.direction_pairs += 1;
          calibration.direction_right += right;
          calibration.direction_steps.push_back({low->label, high->label, measured, predicted, right});
        }
      }
    }
  }
  calibration.parameter_spread = parameter_spreads(calibration.fit, calibration.held_out);
}

nlohmann::json figures_json(const RunFigures& figures) {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t index = 0; index < figure_names().size(); ++index) {
    const double value = figure_value(figures, index);
    if (std::isfinite(value)) out[figure_names()[index].first] = value;
  }
  return out;
}

/// The micro-batch direction check: the counts and every step counted.
nlohmann::json direction_json(const Calibration& calibration) {
  return {{"pairs", calibration.direction_pairs},
          {"right", calibration.direction_right},
          {"steps", calibration.direction_steps}};
}

nlohmann::json probe_provenance(const ProbeRun& probe, const ControllerFit& fit) {
  return {{"run", probe.label},
          {"path", core::provenance_path(probe.run_dir)},
          {"gpu", probe.gpu_name},
          {"bursts", probe.bursts.size()},
          {"samples_compared", fit.fitted.samples},
          {"idle_w", probe.idle_w},
          {"full_w", probe.full_w},
          {"lag_ms", fit.lag_ms},
          {"response_ms", fit.response_s * 1e3},
          {"average_ms", fit.average_s * 1e3},
          {"response_within_2pct_ms", {fit.response_low_s * 1e3, fit.response_high_s * 1e3}},
          {"sample_rms_w", fit.fitted.rms_w},
          {"isolated_rms_w", fit.fitted.isolated_rms_w},
          {"train_rms_w", core::json_number(fit.fitted.train_rms_w)},
          {"base_sample_rms_w", fit.base.rms_w}};
}

}  // namespace

namespace {

/// The SM clock the traces' kernels are taken at: the median measured clock of the runs given beside them,
/// else the base GPU's max clock (Kineto traces carry no clock samples).
std::pair<double, std::string> trace_clock(const std::vector<MeasuredRun>& runs, const sim::GpuSpec& gpu) {
  std::vector<double> clocks;
  std::vector<std::string> labels;
  for (const MeasuredRun& run : runs) {
    if (!std::isfinite(run.figures.sm_clock_mhz)) continue;
    clocks.push_back(run.figures.sm_clock_mhz);
    labels.push_back(run.label);
  }
  if (clocks.empty())
    return {gpu.max_sm_mhz, "assumed: the base GPU's max clock (traces carry no clock samples)"};
  std::sort(clocks.begin(), clocks.end());
  return {
      clocks[clocks.size() / 2],
      fmt::format("median mean SM clock of the run(s) given beside the traces: {}", fmt::join(labels, ", "))};
}

/// The controller stage: response and averaging fitted to the probe at `probe_dir`, set on `base`.
StageFit controller_stage(const std::filesystem::path& probe_dir, sim::ClusterSpec& base,
                          Calibration& calibration) {
  calibration.controller_probe = load_probe_run(probe_dir, base.gpu);
  const ProbeRun& probe = calibration.controller_probe;
  calibration.controller = fit_controller(probe, base.gpu);
  const ControllerFit& fit = calibration.controller;
  StageFit stage{"controller", {}, {}, ""};
  stage.parameters.push_back({"gpu.power_control.response_ms", base.gpu.power_control.response_s * 1e3,
                              fit.response_s * 1e3, "ms", "controller"});
  stage.parameters.push_back({"gpu.power_control.average_ms", base.gpu.power_control.average_s * 1e3,
                              fit.average_s * 1e3, "ms", "controller"});
  stage.parameters.push_back({"gpu.power_control.raise_response_ms",
                              sim::raise_response_ms(base.gpu.power_control), fit.response_s * 1e3, "ms",
                              "controller"});
  stage.residuals.emplace_back(probe.label,
                               nlohmann::json{{"sample_rms_w", fit.fitted.rms_w},
                                              {"isolated_rms_w", fit.fitted.isolated_rms_w},
                                              {"train_rms_w", core::json_number(fit.fitted.train_rms_w)},
                                              {"base_sample_rms_w", fit.base.rms_w}});
  base.gpu.power_control.response_s = fit.response_s;
  base.gpu.power_control.average_s = fit.average_s;
  base.gpu.power_control.raise_response_s = 0;  // the probe's fit raises the clock as it cuts it
  return stage;
}

/// `files` grouped by their directory, in the order each directory first appears.
std::vector<std::vector<std::filesystem::path>> traces_by_directory(
    const std::vector<std::filesystem::path>& files) {
  std::vector<std::vector<std::filesystem::path>> jobs;
  for (const auto& file : files) {
    auto job = std::find_if(jobs.begin(), jobs.end(), [&](const auto& existing) {
      return existing.front().parent_path() == file.parent_path();
    });
    if (job == jobs.end()) {
      jobs.push_back({file});
    } else {
      job->push_back(file);
    }
  }
  return jobs;
}

}  // namespace

Calibration calibrate(const std::vector<std::filesystem::path>& run_dirs, const std::string& base_cluster,
                      const CalibrateOptions& options) {
  require_input(!run_dirs.empty(), "give at least one measured run directory or Kineto trace");
  sim::ClusterSpec base = sim::load_cluster(base_cluster);
  Calibration calibration;
  FitSettings settings;
  if (!options.controller_probe.empty()) {
    if (options.progress)
      options.progress(fmt::format("fitting the controller to {}", options.controller_probe.string()));
    settings.controller = controller_stage(options.controller_probe, base, calibration);
  }
  std::vector<std::filesystem::path> trace_files;
  for (const auto& run_dir : run_dirs) {
    if (options.progress) options.progress(fmt::format("reading {}", run_dir.string()));
    if (is_trace_file(run_dir)) {
      trace_files.push_back(run_dir);
      continue;
    }
    const auto ingested = ingested_trace_files(run_dir);
    if (!ingested.empty()) {
      calibration.traces.push_back(load_kineto_input(ingested, run_dir.filename().string(), base.gpu));
      continue;
    }
    calibration.runs.push_back(load_measured_run(run_dir, base.gpu));
  }
  for (const auto& run_dir : options.thermal_runs) {
    if (options.progress) options.progress(fmt::format("reading {} (thermal only)", run_dir.string()));
    calibration.thermal_runs.push_back(load_thermal_run(run_dir, base.gpu));
  }
  settings.thermal_runs = calibration.thermal_runs;
  settings.stages = options.stages;
  calibration.stages = options.stages;
  calibration.base_calibration = base.calibration;
  require_input(
      trace_files.empty() || options.stages.empty() ||
          std::find(options.stages.begin(), options.stages.end(), "collectives") != options.stages.end(),
      "Kineto traces were given but --stages leaves out 'collectives' (their stage): add it or drop the "
      "traces");
  const auto jobs = traces_by_directory(trace_files);
  for (std::size_t index = 0; index < jobs.size(); ++index) {
    // One directory's files: one job's ranks; a second directory is a second job (a sweep at another group
    // size), labelled by its directory where there are several.
    const std::string label = jobs.size() == 1 ? jobs[index].front().filename().string()
                                               : jobs[index].front().parent_path().filename().string();
    calibration.traces.insert(calibration.traces.begin() + static_cast<std::ptrdiff_t>(index),
                              load_kineto_input(jobs[index], label, base.gpu));
  }
  if (options.progress) options.progress("fitting on all runs");
  calibration.fit = fit_cluster(calibration.runs, base, settings);
  if (!calibration.traces.empty()) {
    const auto [clock_mhz, clock_source] = trace_clock(calibration.runs, base.gpu);
    calibration.kineto = fit_kineto(calibration.traces, clock_mhz, clock_source, calibration.fit);
  }
  if (options.leave_one_out) {
    calibration.held_out = leave_one_out(calibration.runs, base, settings, options);
  }
  summarize(calibration);
  return calibration;
}

namespace {

/// "h100-hgx fitted by calo calibrate to 10 measured run(s) and 2 thermal run(s)": the runs counted as `calo
/// cluster list` counts them, thermal runs (the heat model's only) and Kineto trace sets apart.
std::string calibrated_description(const std::string& base_name, const Calibration& calibration) {
  std::string description =
      fmt::format("{} fitted by calo calibrate to {} measured run(s)", base_name, calibration.runs.size());
  if (!calibration.thermal_runs.empty())
    description += fmt::format(" and {} thermal run(s)", calibration.thermal_runs.size());
  if (!calibration.traces.empty())
    description += fmt::format(" and {} Kineto trace set(s)", calibration.traces.size());
  return description;
}

}  // namespace

nlohmann::json calibrated_cluster_json(const Calibration& calibration, const std::string& base_cluster) {
  sim::ClusterSpec cluster = calibration.fit.cluster;
  cluster.calibration = nullptr;
  nlohmann::json json = sim::to_json(cluster);
  json["name"] = cluster.name + "-calibrated";
  json["description"] = calibrated_description(cluster.name, calibration);
  nlohmann::json runs = nlohmann::json::array();
  for (const MeasuredRun& run : calibration.runs) {
    runs.push_back({{"path", core::provenance_path(run.run_dir)},
                    {"kind", run.kind},
                    {"host", run.host},
                    {"started_unix_ns", run.started_unix_ns},
                    {"gpu", run.gpu_name},
                    {"card", run.gpu_uuid},
                    {"model", run.model ? run.model->name : std::string("-")},
                    {"layout", run.model ? parallel::describe(run.layout) : std::string("-")},
                    {"measured", figures_json(run.figures)}});
  }
  for (const MeasuredRun& run : calibration.thermal_runs) {
    runs.push_back({{"path", core::provenance_path(run.run_dir)},
                    {"kind", run.kind},
                    {"role", "thermal"},
                    {"gpu", run.gpu_name},
                    {"card", run.gpu_uuid},
                    {"measured", figures_json(run.figures)}});
  }
  nlohmann::json stages = nlohmann::json::array();
  for (const StageFit& stage : calibration.fit.stages) {
    nlohmann::json parameters = nlohmann::json::array();
    for (const ParameterFit& parameter : stage.parameters) {
      parameters.push_back({{"key", parameter.key},
                            {"base", parameter.base},
                            {"fitted", parameter.fitted},
                            {"unit", parameter.unit}});
    }
    nlohmann::json residuals = nlohmann::json::object();
    for (const auto& [label, values] : stage.residuals) residuals[label] = values;
    nlohmann::json entry = {{"stage", stage.stage}, {"parameters", parameters}, {"residuals", residuals}};
    if (!stage.note.empty()) entry["note"] = stage.note;
    stages.push_back(entry);
  }
  nlohmann::json held_out = nlohmann::json::array();
  for (const HeldOutRun& row : calibration.held_out) {
    held_out.push_back({{"run", row.label},
                        {"measured", figures_json(row.measured)},
                        {"predicted", figures_json(row.predicted)}});
  }
  nlohmann::json tolerance = nlohmann::json::object();
  for (const Tolerance& entry : calibration.tolerances) {
    if (std::isnan(entry.achieved)) continue;
    tolerance[entry.figure] = {{"achieved", entry.achieved}, {"unit", entry.unit}};
    if (std::isfinite(entry.target)) {
      tolerance[entry.figure]["target"] = entry.target;
      tolerance[entry.figure]["met"] = entry.met;
    }
  }
  nlohmann::json cards = nlohmann::json::array();
  for (const auto& [card, scale] : calibration.fit.card_r_scale) {
    nlohmann::json labels = nlohmann::json::array();
    for (const auto* set : {&calibration.runs, &calibration.thermal_runs}) {
      for (const MeasuredRun& run : *set) {
        if (run.gpu_uuid == card) labels.push_back(run.label);
      }
    }
    cards.push_back({{"card", card}, {"runs", labels}, {"thermal_r_scale", scale}});
  }
  json["calibration"] = {{"tool", "calo calibrate"},
                         {"base", base_cluster},
                         {"runs", runs},
                         {"stages", stages},
                         {"kept_from_base", calibration.fit.kept},
                         {"cards", cards},
                         {"leave_one_out", held_out},
                         {"tolerance", tolerance},
                         {"peak_power_direction", direction_json(calibration)},
                         {"parameter_spread", nlohmann::json(calibration.parameter_spread)}};
  if (!calibration.traces.empty())
    json["calibration"]["kineto"] = kineto_provenance(calibration.traces, calibration.kineto);
  if (!calibration.controller_probe.label.empty())
    json["calibration"]["controller_probe"] =
        probe_provenance(calibration.controller_probe, calibration.controller);
  if (!calibration.stages.empty() && calibration.base_calibration.is_object()) {
    // A refit of some stages of a calibrated cluster: the earlier provenance stays, this fit is appended.
    nlohmann::json refit = std::move(json["calibration"]);
    refit["stages_fitted"] = calibration.stages;
    refit.erase("kept_from_base");
    json["calibration"] = calibration.base_calibration;
    if (!json["calibration"].contains("refits")) json["calibration"]["refits"] = nlohmann::json::array();
    json["calibration"]["refits"].push_back(std::move(refit));
    json["name"] = cluster.name;
    json["description"] = cluster.description;
  }
  return json;
}

void write_cluster_file(const std::filesystem::path& path, const nlohmann::json& json) {
  core::write_file_atomically(
      path,
      "# Calibrated by `calo calibrate` (docs/SIMULATOR.md \"Calibration\"); provenance under "
      "`calibration`.\n" +
          core::to_yaml(json),
      "--out");
}

}  // namespace calo::calibrate
