// Stage 4 of the fit: the thermal RC model (constants, inlet, cooling response, per-card resistance scales)
// fitted to the runs' temperature curves replayed from their measured power; and the replayed sustained peak.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "analyze/window_mean.h"
#include "calibrate/fit.h"
#include "calibrate/fit_internal.h"
#include "sim/power_thermal.h"

namespace calo::calibrate {
namespace {

using fit_detail::squared;

/// The RC model's die temperature at each of `run`'s temperature samples after its load start, driven by its
/// power samples from the temperature it read then, its card's resistances scaled by `r_scale`: pairs of
/// (measured, replayed); empty without both series.
std::vector<std::pair<double, double>> replay_temperatures(const MeasuredRun& run,
                                                           const sim::ThermalSpec& thermal, double inlet_c,
                                                           double r_scale) {
  std::vector<std::pair<double, double>> pairs;
  if (run.power_w.size() < 2 || run.temp_c.size() < 3 || !std::isfinite(run.initial_temp_c)) return pairs;
  double t_s = run.load_start_s;
  std::size_t power_index = 0;  // the power sample in force at t_s (each held until the next)
  auto catch_up = [&] {
    while (power_index + 1 < run.power_w.size() && run.power_w[power_index + 1].first <= t_s)
      power_index += 1;
  };
  catch_up();
  sim::ThermalState state =
      sim::thermal_state_at(thermal, r_scale, run.power_w[power_index].second, run.initial_temp_c);
  for (const auto& [sample_t_s, measured_c] : run.temp_c) {
    if (sample_t_s <= t_s) continue;
    while (t_s < sample_t_s) {
      catch_up();
      const double next_change_s =
          power_index + 1 < run.power_w.size() ? run.power_w[power_index + 1].first : INFINITY;
      const double until_s = std::min(sample_t_s, std::max(next_change_s, t_s + 1e-6));
      sim::thermal_advance(thermal, inlet_c, r_scale, run.power_w[power_index].second, until_s - t_s, state);
      t_s = until_s;
    }
    pairs.emplace_back(measured_c, state.die_c);
  }
  return pairs;
}

/// RMS difference (degrees) between `run`'s temperature samples after its load start and the RC model's
/// replay of them (replay_temperatures); NaN without both series.
double thermal_rms_c(const MeasuredRun& run, const sim::ThermalSpec& thermal, double inlet_c,
                     double r_scale) {
  const auto pairs = replay_temperatures(run, thermal, inlet_c, r_scale);
  if (pairs.empty()) return NAN;
  double sum = 0;
  for (const auto& [measured_c, replayed_c] : pairs) sum += squared(replayed_c - measured_c);
  return std::sqrt(sum / static_cast<double>(pairs.size()));
}

/// One sweep of the per-card thermal resistance scales (each card's runs alone, 0.6-1.6), then renormalized
/// to a geometric mean of 1 over cards, the common factor moved into `thermal`'s resistances.
void fit_card_scales(const std::vector<const MeasuredRun*>& usable, double inlet_c, sim::ThermalSpec& thermal,
                     std::map<std::string, double>& scales) {
  if (scales.empty()) return;
  double log_sum = 0;
  for (auto& [card, scale] : scales) {
    scale = minimize_1d(
        [&](double x) {
          double sum = 0;
          for (const MeasuredRun* run : usable) {
            if (run->gpu_uuid == card) sum += squared(thermal_rms_c(*run, thermal, inlet_c, x));
          }
          return sum;
        },
        0.6, 1.6, true);
    log_sum += std::log(scale);
  }
  const double mean_scale = std::exp(log_sum / static_cast<double>(scales.size()));
  for (auto& [card, scale] : scales) scale /= mean_scale;
  thermal.r_die_k_per_w *= mean_scale;
  thermal.r_sink_k_per_w *= mean_scale;
}

/// A temperature record at least this long after its load start shows the cooling answer (fans ramp over
/// tens of seconds; the H100 soak peaked at 60 s and settled 10 C lower): only then is the response fitted.
constexpr double kCoolingRecordS = 60.0;

/// True when some run's temperature samples reach kCoolingRecordS past its load start.
bool shows_cooling_response(const std::vector<const MeasuredRun*>& usable) {
  return std::any_of(usable.begin(), usable.end(), [](const MeasuredRun* run) {
    return run->temp_c.back().first - run->load_start_s >= kCoolingRecordS;
  });
}

/// A thermal fit in progress: the RC constants, the inlet and each card's resistance scale.
struct ThermalTrial {
  sim::ThermalSpec thermal;
  double inlet_c = NAN;
  std::map<std::string, double> scales;  ///< per card UUID; a card not listed is the typical card (1)

  /// `run`'s card's scale.
  double scale_of(const MeasuredRun& run) const {
    const auto card = scales.find(run.gpu_uuid);
    return card == scales.end() ? 1.0 : card->second;
  }
};

/// Summed squared thermal residuals of `usable` with `thermal` and `inlet_c` (the cards' scales of `trial`).
double thermal_loss(const std::vector<const MeasuredRun*>& usable, const ThermalTrial& trial,
                    const sim::ThermalSpec& thermal, double inlet_c) {
  double sum = 0;
  for (const MeasuredRun* run : usable)
    sum += squared(thermal_rms_c(*run, thermal, inlet_c, trial.scale_of(*run)));
  return sum;
}

/// Coordinate descent of `trial` over the RC constants (and the cooling response when `cooling`), the inlet
/// and the cards' scales: three sweeps, five with the cooling response. Returns the final loss.
double descend_thermal(const std::vector<const MeasuredRun*>& usable, bool cooling, ThermalTrial& trial) {
  sim::ThermalSpec& thermal = trial.thermal;
  for (int sweep = 0; sweep < (cooling ? 5 : 3); ++sweep) {
    auto fit_field = [&](double sim::ThermalSpec::*field, double low, double high, bool log_scale = true) {
      thermal.*field = minimize_1d(
          [&](double x) {
            sim::ThermalSpec t = thermal;
            t.*field = x;
            return thermal_loss(usable, trial, t, trial.inlet_c);
          },
          low, high, log_scale);
    };
    fit_field(&sim::ThermalSpec::r_die_k_per_w, 0.002, 0.1);
    fit_field(&sim::ThermalSpec::r_sink_k_per_w, 0.002, 0.1);
    fit_field(&sim::ThermalSpec::tau_die_s, 0.02, 5.0);
    fit_field(&sim::ThermalSpec::tau_sink_s, 0.5, 120.0);
    if (cooling) {
      fit_field(&sim::ThermalSpec::cooling_cut_max, 0.0, 0.9, false);
      fit_field(&sim::ThermalSpec::cooling_start_c, 30.0, 90.0, false);
      fit_field(&sim::ThermalSpec::cooling_span_c, 1.0, 30.0);
      fit_field(&sim::ThermalSpec::cooling_tau_s, 2.0, 120.0);
    }
    trial.inlet_c =
        minimize_1d([&](double x) { return thermal_loss(usable, trial, thermal, x); }, 10.0, 50.0, false);
    fit_card_scales(usable, trial.inlet_c, thermal, trial.scales);
  }
  return thermal_loss(usable, trial, thermal, trial.inlet_c);
}

}  // namespace

namespace fit_detail {

/// Stage 4: thermal RC constants and inlet temperature from the runs' temperature curves (the fitted runs'
/// and the thermal-only ones), driven by their measured power (least squares over every temperature sample),
/// with one resistance scale per card: cards differ (the same command peaked 54 C on one H100 and 48 C on
/// another), so each card's runs set its scale and the scales' geometric mean over cards is held at 1 (the
/// constants are the typical card's). The cooling response is fitted when a record is long enough to show it,
/// from two starts (weak and strong; the lower loss is kept): one descent settles in the valley it starts in.
StageFit fit_thermal(const std::vector<MeasuredRun>& runs, const std::vector<MeasuredRun>& thermal_runs,
                     sim::ClusterSpec& cluster, std::map<std::string, double>& card_r_scale) {
  StageFit stage{"thermal", {}, {}, ""};
  std::vector<const MeasuredRun*> usable;
  for (const std::vector<MeasuredRun>* set : {&runs, &thermal_runs}) {
    for (const MeasuredRun& run : *set) {
      if (std::isfinite(thermal_rms_c(run, cluster.gpu.thermal, cluster.node.inlet_c, 1.0)))
        usable.push_back(&run);
    }
  }
  if (usable.empty()) {
    stage.note = "no run has power and temperature series";
    return stage;
  }
  const sim::ThermalSpec base = cluster.gpu.thermal;
  const double base_inlet_c = cluster.node.inlet_c;
  // Cards known by UUID get a scale when there are two or more of them; others stay at the typical card's.
  ThermalTrial best{base, base_inlet_c, {}};
  for (const MeasuredRun* run : usable) {
    if (!run->gpu_uuid.empty()) best.scales[run->gpu_uuid] = 1.0;
  }
  if (best.scales.size() < 2) best.scales.clear();
  const bool cooling = shows_cooling_response(usable);
  ThermalTrial strong = best;
  if (cooling && best.thermal.cooling_cut_max <= 0)
    best.thermal.cooling_cut_max = 0.5;  // a start it can move
  const double best_loss = descend_thermal(usable, cooling, best);
  if (cooling) {
    // The response a soak shows alone (the H100 soak card's record: R_sink cut 0.9 above 54 C, 41 s lag).
    strong.thermal.cooling_cut_max = 0.8;
    strong.thermal.cooling_start_c = 55;
    strong.thermal.cooling_span_c = 10;
    strong.thermal.cooling_tau_s = 40;
    strong.thermal.tau_sink_s = 25;
    if (descend_thermal(usable, cooling, strong) < best_loss) best = strong;
  }
  const sim::ThermalSpec& thermal = best.thermal;
  const double inlet_c = best.inlet_c;
  const std::map<std::string, double>& scales = best.scales;
  auto scale_of = [&](const MeasuredRun& run) { return best.scale_of(run); };
  cluster.gpu.thermal = thermal;
  cluster.node.inlet_c = inlet_c;
  card_r_scale = scales;
  stage.parameters = {
      {"gpu.thermal.r_die_k_per_w", base.r_die_k_per_w, thermal.r_die_k_per_w, "K/W", "thermal"},
      {"gpu.thermal.r_sink_k_per_w", base.r_sink_k_per_w, thermal.r_sink_k_per_w, "K/W", "thermal"},
      {"gpu.thermal.tau_die_s", base.tau_die_s, thermal.tau_die_s, "s", "thermal"},
      {"gpu.thermal.tau_sink_s", base.tau_sink_s, thermal.tau_sink_s, "s", "thermal"},
      {"node.inlet_c", base_inlet_c, inlet_c, "C", "thermal"}};
  if (cooling) {
    stage.parameters.insert(
        stage.parameters.end(),
        {{"gpu.thermal.cooling_cut_max", base.cooling_cut_max, thermal.cooling_cut_max, "x", "thermal"},
         {"gpu.thermal.cooling_start_c", base.cooling_start_c, thermal.cooling_start_c, "C", "thermal"},
         {"gpu.thermal.cooling_span_c", base.cooling_span_c, thermal.cooling_span_c, "C", "thermal"},
         {"gpu.thermal.cooling_tau_s", base.cooling_tau_s, thermal.cooling_tau_s, "s", "thermal"}});
  } else {
    stage.note = fmt::format(
        "no temperature record reaches {:.0f} s past its load start: the cooling response "
        "keeps the base's (give a long soak with --thermal-run)",
        kCoolingRecordS);
  }
  for (const MeasuredRun* run : usable) {
    stage.residuals.emplace_back(
        run->label, nlohmann::json{{"temp_rms_c", thermal_rms_c(*run, thermal, inlet_c, scale_of(*run))}});
  }
  return stage;
}

}  // namespace fit_detail

double replayed_peak_temp_c(const MeasuredRun& run, const sim::ClusterSpec& cluster) {
  const auto pairs =
      replay_temperatures(run, cluster.gpu.thermal, cluster.node.inlet_c, cluster.slot_r_scale(0));
  if (pairs.empty()) return NAN;
  // The replay at each temperature sample, held until the next one: the 500 ms window the measured figure
  // uses.
  std::vector<double> times_s;
  for (const auto& [sample_t_s, measured_c] : run.temp_c) {
    if (sample_t_s > run.load_start_s) times_s.push_back(sample_t_s);
  }
  analyze::WindowMeanPeak peak(analyze::kSustainedTempWindowNs);
  for (std::size_t index = 0; index + 1 < times_s.size() && index < pairs.size(); ++index) {
    peak.add_segment(static_cast<int64_t>(times_s[index] * 1e9),
                     static_cast<int64_t>(times_s[index + 1] * 1e9), pairs[index].second);
  }
  return peak.peak_or_mean();
}

}  // namespace calo::calibrate
