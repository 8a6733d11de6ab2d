// `calo calibrate RUN|TRACE... --cluster BASE --out FILE.yaml [--json] [--no-loo] [--controller-probe RUN]
// [--thermal-run RUN]... [--stages LIST]`:
// fits the simulator's cluster file to measured runs and Kineto traces and reports each stage's residuals and
// the leave-one-out error against the targets.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "calibrate/calibrate.h"
#include "cli/command.h"
#include "core/device_names.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/table.h"
#include "graph/graph.h"

namespace calo::cli {
namespace {

struct CalibrateFlags {
  std::vector<std::string> runs;
  std::string cluster;
  std::string out;
  bool json = false;
  bool no_loo = false;
  std::string controller_probe;
  std::vector<std::string> thermal_runs;
  std::vector<std::string> stages;
};

std::string error_cell(const std::string& unit, double value) {
  if (!std::isfinite(value)) return "-";
  return unit == "C" ? fmt::format("{:+.1f} C", value) : fmt::format("{:+.1f}%", value * 100);
}

void print_parameters(const calibrate::Calibration& calibration) {
  const sim::GpuSpec& device = calibration.fit.cluster.gpu;
  if (core::is_cpu_host_device(device.name)) {
    fmt::print(
        "# device: {} — each MPI rank's CPU core stands where a GPU would: parameters read core.* here, "
        "gpu.* in the cluster YAML\n",
        device.name);
  }
  core::TextTable table({"stage", "parameter", "base", "fitted", "unit"});
  for (const auto& stage : calibration.fit.stages) {
    if (stage.parameters.empty()) table.add_row({stage.stage, "(none: " + stage.note + ")", "-", "-", "-"});
    for (const auto& parameter : stage.parameters) {
      table.add_row({stage.stage, calibrate::shown_parameter_key(parameter.key, device),
                     fmt::format("{:.4g}", parameter.base), fmt::format("{:.4g}", parameter.fitted),
                     parameter.unit});
    }
  }
  fmt::print("{}", table.render());
  std::vector<std::string> kept;
  for (const std::string& key : calibration.fit.kept)
    kept.push_back(calibrate::shown_parameter_key(key, device));
  fmt::print("kept from the base (no run determines them): {}\n\n", fmt::join(kept, ", "));
}

void print_residuals(const calibrate::Calibration& calibration) {
  for (const auto& stage : calibration.fit.stages) {
    if (stage.residuals.empty() || stage.stage == "idle") continue;
    std::vector<std::string> parts;
    for (const auto& [label, values] : stage.residuals) {
      std::vector<std::string> cells;
      for (const auto& [key, value] : values.items()) {
        const double number = value.get<double>();
        if (key == "temp_rms_c")
          cells.push_back(fmt::format("{} {:.2f} C", key, number));
        else if (key.ends_with("rms_w"))
          cells.push_back(fmt::format("{} {:.1f} W", key, number));
        else
          cells.push_back(fmt::format("{} {:+.1f}%", key, number * 100));
      }
      parts.push_back(fmt::format("{}: {}", label, fmt::join(cells, ", ")));
    }
    fmt::print("# {} residuals (fit on all runs)\n  {}\n", stage.stage, fmt::join(parts, "\n  "));
  }
  if (!calibration.fit.card_r_scale.empty()) {
    std::vector<std::string> cards;
    for (const auto& [card, scale] : calibration.fit.card_r_scale)
      cards.push_back(fmt::format("{} x{:.3f}", card, scale));
    fmt::print("# thermal resistance per card (typical card = 1; a held-out run keeps its card's)\n  {}\n",
               fmt::join(cards, "\n  "));
  }
  fmt::print("\n");
}

void print_leave_one_out(const calibrate::Calibration& calibration) {
  if (calibration.held_out.empty()) {
    fmt::print("leave-one-out: needs two or more runs with a workload (calo bench runs)\n");
    return;
  }
  std::vector<std::string> headers = {"held-out run"};
  const auto& names = calibrate::figure_names();
  for (const auto& [name, unit] : names) headers.push_back(name);
  core::TextTable table(headers);
  for (const auto& row : calibration.held_out) {
    std::vector<std::string> cells = {row.label};
    for (std::size_t index = 0; index < names.size(); ++index) {
      const double measured = calibrate::figure_value(row.measured, index);
      const double predicted = calibrate::figure_value(row.predicted, index);
      cells.push_back(error_cell(names[index].second, calibrate::figure_error(index, measured, predicted)));
    }
    table.add_row(cells);
  }
  fmt::print("# leave-one-out: error of each run predicted by a fit made without it\n{}", table.render());
  for (const auto& tolerance : calibration.tolerances) {
    if (!std::isfinite(tolerance.target) || !std::isfinite(tolerance.achieved)) continue;
    const bool degrees = tolerance.unit == "C";
    fmt::print(
        "  {:<18} max |error| {:>8}  target {:>6}  {}\n",
        tolerance.figure == calibrate::kThermalRunsFigure ? "peak_temp_c (thermal runs, replayed)"
                                                          : tolerance.figure,
        degrees ? fmt::format("{:.1f} C", tolerance.achieved)
                : fmt::format("{:.1f}%", tolerance.achieved * 100),
        degrees ? fmt::format("{:.0f} C", tolerance.target) : fmt::format("{:.0f}%", tolerance.target * 100),
        tolerance.met ? "met" : "MISSED");
  }
  if (calibration.direction_pairs > 0) {
    fmt::print("  peak power across micro-batch sweeps: {} of {} steps move the measured way\n",
               calibration.direction_right, calibration.direction_pairs);
    for (const auto& step : calibration.direction_steps) {
      if (step.right) continue;
      fmt::print("    the other way: {} -> {}: measured {:+.1f} W, held out {:+.1f} W\n", step.low, step.high,
                 step.measured_w, step.predicted_w);
    }
  }
}

/// Shift at and above which a parameter is listed as loosely pinned by the runs.
constexpr double kLooseShift = 0.10;

void print_parameter_spread(const calibrate::Calibration& calibration) {
  if (calibration.parameter_spread.empty()) return;
  std::vector<const calibrate::ParameterSpread*> loose;
  for (const auto& spread : calibration.parameter_spread) {
    if (!(std::fabs(spread.shift) < kLooseShift)) loose.push_back(&spread);
  }
  std::sort(loose.begin(), loose.end(),
            [](const auto* a, const auto* b) { return std::fabs(a->shift) > std::fabs(b->shift); });
  fmt::print(
      "\n# how firmly the runs pin each parameter: {} of {} move {:.0f} % or more in a fit without one run\n",
      loose.size(), calibration.parameter_spread.size(), kLooseShift * 100);
  if (loose.empty()) return;
  core::TextTable table(
      {"parameter", "fitted", "range held out", "moves most without", "value then", "shift"});
  for (const auto* spread : loose) {
    table.add_row({calibrate::shown_parameter_key(spread->key, calibration.fit.cluster.gpu),
                   fmt::format("{:.4g}", spread->fitted),
                   fmt::format("{:.4g} .. {:.4g} {}", spread->low, spread->high, spread->unit),
                   spread->pinned_by, fmt::format("{:.4g}", spread->without),
                   std::isfinite(spread->shift) ? fmt::format("{:+.0f}%", spread->shift * 100) : "from 0"});
  }
  fmt::print("{}", table.render());
}

/// The lines fitted to the kinds measured over a size sweep, with their fitted and held-out errors beside
/// the one line of the link (docs/METRICS.md "Collective line error").
void print_collective_lines(const std::vector<calibrate::CollectiveLineFit>& fits) {
  if (fits.empty()) return;
  core::TextTable table({"collective", "ranks", "sizes", "small line (bw x, lat x[, call x, half])",
                         "large line from", "large line", "max (rms) error", "held out", "one line"});
  for (const calibrate::CollectiveLineFit& fit : fits) {
    const bool group_terms = fit.group_sizes.size() >= 2;
    const auto line = [&](const sim::CollectiveLine& fitted) {
      if (!group_terms) return fmt::format("{:.2f}, {:.2f}", fitted.bandwidth_scale, fitted.latency_scale);
      return fmt::format("{:.2f}, {:.2f}, {:.2f}, {:.2f}", fitted.bandwidth_scale, fitted.latency_scale,
                         fitted.call_latency_scale, fitted.members_half);
    };
    table.add_row({fit.name, fmt::format("{}", fmt::join(fit.group_sizes, ",")),
                   fmt::format("{} ({}..{})", fit.sizes, core::format_bytes(fit.smallest_bytes),
                               core::format_bytes(fit.largest_bytes)),
                   line(fit.lines.front()), core::format_bytes(fit.split_bytes), line(fit.lines.back()),
                   fmt::format("{:.1f}% ({:.1f}%)", fit.max_error * 100, fit.rms_error * 100),
                   fmt::format("{:.1f}% ({:.1f}%) at {}", fit.max_held_out_error * 100,
                               fit.rms_held_out_error * 100, core::format_bytes(fit.held_out_worst_bytes)),
                   fmt::format("{:.1f}%", fit.single_line_max_error * 100)});
  }
  fmt::print(
      "# collective lines (sizes swept inside one node; scales of the fitted NVLink bandwidth and per-hop "
      "latency; over two group sizes also the latencies paid once per call and the members at half the "
      "line's bandwidth; error = modeled/measured - 1: largest |error| (root mean square); held out: each "
      "size predicted by lines fitted without it; one line: the link's model without lines)\n{}",
      table.render());
}

void print_kineto(const calibrate::Calibration& calibration) {
  if (calibration.traces.empty()) return;
  const calibrate::KinetoFit& kineto = calibration.kineto;
  core::TextTable table({"collective", "group", "nodes", "bytes", "n", "measured us", "modeled us", "error"});
  for (const auto& sample : kineto.collectives) {
    table.add_row({calibrate::collective_name(sample), std::to_string(sample.group_size),
                   std::to_string(sample.nodes), fmt::format("{:.0f}", sample.bytes),
                   std::to_string(sample.instances), fmt::format("{:.1f}", sample.measured_s * 1e6),
                   fmt::format("{:.1f}", sample.modeled_s * 1e6),
                   error_cell("", (sample.modeled_s - sample.measured_s) / sample.measured_s) +
                       (sample.fitted ? "" : " (not fitted)")});
  }
  fmt::print("# collectives of {} (time on the last-arriving rank, median over instances)\n{}",
             fmt::join(kineto.labels, ", "), table.render());
  print_collective_lines(kineto.lines);
  fmt::print("kernels taken at {:.0f} MHz ({})\n\n", kineto.clock_mhz, kineto.clock_source);
}

int run_calibrate(const CalibrateFlags& flags) {
  require_input(!flags.out.empty(), "--out FILE.yaml is required (where the calibrated cluster file goes)");
  core::require_file_target(flags.out, "--out");  // before the fit: the one output-file policy, up front
  std::vector<std::filesystem::path> runs(flags.runs.begin(), flags.runs.end());
  calibrate::CalibrateOptions options;
  options.leave_one_out = !flags.no_loo;
  options.controller_probe = flags.controller_probe;
  options.thermal_runs.assign(flags.thermal_runs.begin(), flags.thermal_runs.end());
  options.stages = flags.stages;
  if (!flags.json)
    options.progress = [](const std::string& line) { fmt::print(stderr, "calo calibrate: {}\n", line); };
  const calibrate::Calibration calibration = calibrate::calibrate(runs, flags.cluster, options);
  nlohmann::json cluster = calibrate::calibrated_cluster_json(calibration, flags.cluster);
  // Named after its file, as `--cluster FILE` runs will show it (`calo compare`, reports): a user's fit of
  // h200-hgx is not the shipped h200-hgx-calibrated.
  cluster["name"] = std::filesystem::path(flags.out).stem().string();
  calibrate::write_cluster_file(flags.out, cluster);
  if (flags.json) {
    print_json({{"out", flags.out}, {"cluster", cluster}});
    return 0;
  }
  print_parameters(calibration);
  print_kineto(calibration);
  print_residuals(calibration);
  print_leave_one_out(calibration);
  print_parameter_spread(calibration);
  fmt::print("\nwrote {} — use it with: calo sim --cluster {} ...\n", flags.out, flags.out);
  return 0;
}

const CommandRegistration kCalibrate(
    "calibrate",
    "fit a cluster file to measured runs and Kineto traces (compute, collectives, power, power-cap "
    "controller, heat) with leave-one-out error",
    72, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<CalibrateFlags>();
      app.add_option("RUN", flags->runs,
                     "measured run directories (calo bench, calo record, calo ingest) or Kineto traces "
                     "(.json/.json.gz, one per rank; one directory per job, e.g. a collective sweep at 4 "
                     "ranks and one at 2)")
          ->required()
          ->check(CLI::ExistingPath);
      app.add_option("--cluster", flags->cluster,
                     "base cluster (preset name or YAML file) whose GPU the runs used")
          ->required();
      app.add_option("--out", flags->out, "calibrated cluster file to write (YAML)")->required();
      app.add_flag("--json", flags->json, "print the calibrated cluster (with provenance) as JSON");
      app.add_flag("--no-loo", flags->no_loo, "skip the leave-one-out validation");
      app.add_option("--controller-probe", flags->controller_probe,
                     "a calo record run of bench/gpu/controller_probe.py: fit the power-cap controller's "
                     "response and averaging to its bursts and hold them in the power fit");
      app.add_option("--thermal-run", flags->thermal_runs,
                     "a run for the thermal stage alone (repeatable): power and temperature of any job on "
                     "the GPU, no steps needed; a long soak fits the cooling response")
          ->check(CLI::ExistingPath);
      app.add_option("--stages", flags->stages,
                     "fit only these stages (idle, compute, power, link, wait, thermal, collectives, fp8), "
                     "keeping the "
                     "rest of --cluster; a calibrated cluster keeps its provenance and gains a refit entry")
          ->delimiter(',');
      return [flags] { return run_calibrate(*flags); };
    });

}  // namespace
}  // namespace calo::cli
