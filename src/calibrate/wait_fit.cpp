// Power while waiting: a GPU's power above idle at the start of a wait and the time constant it decays with,
// fitted to the energy that multi-GPU runs' waits hold.
#include "calibrate/wait_fit.h"

#include <algorithm>
#include <cmath>

namespace calo::calibrate {
namespace {

/// Where the fit probes the energy's slope in the wait power (W): energy is linear in it (the waits run
/// below the cap), so one probe per decay time gives each run's line.
constexpr double kProbeW = 100;
/// No decay, or decay times from 1 ms to 10 s (log-spaced search).
constexpr double kShortestDecayS = 1e-3;
constexpr double kLongestDecayS = 10.0;

/// The wait power (W) of least squared relative energy error at one decay time, and that error.
struct WaitPowerAt {
  double wait_w = 0;  ///< fitted power at a wait's start, in [0, most_w]
  double loss = 0;    ///< sum over runs of (simulated / measured energy - 1)^2
};

class WaitPowerFit {
 public:
  WaitPowerFit(const std::vector<WaitRun>& runs, const sim::ClusterSpec& cluster)
      : runs_(runs), trial_(cluster) {
    trial_.gpu.wait_power_w = 0;
    for (const WaitRun& item : runs_) energy_at_zero_j_.push_back(energy_j(item));
    most_w_ = cluster.gpu.power_limit_w - cluster.gpu.idle_power_w;
  }

  /// Closed-form least squares of the wait power at decay time `decay_s` (0: no decay).
  WaitPowerAt at(double decay_s) {
    trial_.gpu.wait_power_decay_s = decay_s;
    trial_.gpu.wait_power_w = kProbeW;
    double numerator = 0, denominator = 0;
    std::vector<std::pair<double, double>> lines;  // per run: (E0 / M, slope / M)
    for (std::size_t index = 0; index < runs_.size(); ++index) {
      const double measured_j = runs_[index].run->figures.energy_per_step_j;
      const double base = energy_at_zero_j_[index] / measured_j;
      const double slope = (energy_j(runs_[index]) - energy_at_zero_j_[index]) / kProbeW / measured_j;
      lines.emplace_back(base, slope);
      numerator += slope * (1 - base);
      denominator += slope * slope;
    }
    WaitPowerAt fit;
    fit.wait_w = denominator > 0 ? std::clamp(numerator / denominator, 0.0, most_w_) : 0.0;
    for (const auto& [base, slope] : lines)
      fit.loss += (base + fit.wait_w * slope - 1) * (base + fit.wait_w * slope - 1);
    return fit;
  }

 private:
  double energy_j(const WaitRun& item) {
    return simulate_run(*item.run, *item.graph, trial_).energy_per_step_j;
  }

  const std::vector<WaitRun>& runs_;
  sim::ClusterSpec trial_;
  std::vector<double> energy_at_zero_j_;
  double most_w_ = 0;
};

}  // namespace

StageFit fit_wait_power(const std::vector<WaitRun>& runs, sim::ClusterSpec& cluster) {
  StageFit stage{"wait", {}, {}, ""};
  std::vector<WaitRun> usable;
  for (const WaitRun& item : runs) {
    if (item.run->layout.world_size() > 1 && std::isfinite(item.run->figures.energy_per_step_j))
      usable.push_back(item);
  }
  if (usable.empty()) {
    stage.note = "no multi-GPU run with measured energy (one GPU never waits on a peer)";
    return stage;
  }
  const sim::GpuSpec base = cluster.gpu;
  WaitPowerFit fit(usable, cluster);
  const WaitPowerAt constant = fit.at(0);
  const double decay_s = minimize_1d([&](double value) { return fit.at(value).loss; }, kShortestDecayS,
                                     kLongestDecayS, /*log_scale=*/true);
  const WaitPowerAt decaying = fit.at(decay_s);
  const bool decays = decaying.loss < constant.loss;
  cluster.gpu.wait_power_w = decays ? decaying.wait_w : constant.wait_w;
  cluster.gpu.wait_power_decay_s = decays ? decay_s : 0.0;
  stage.parameters.push_back({"gpu.wait_power_w", base.wait_power_w, cluster.gpu.wait_power_w, "W", "wait"});
  stage.parameters.push_back({"gpu.wait_power_decay_ms", base.wait_power_decay_s * 1e3,
                              cluster.gpu.wait_power_decay_s * 1e3, "ms", "wait"});
  for (const WaitRun& item : usable) {
    stage.residuals.emplace_back(
        item.run->label,
        errors_json(item.run->figures, simulate_run(*item.run, *item.graph, cluster), {0, 1, 2}));
  }
  return stage;
}

}  // namespace calo::calibrate
