#include "calibrate/power_trace_match.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "calibrate/measurement.h"
#include "calibrate/validate.h"
#include "core/error.h"
#include "sim/power_dynamics.h"
#include "sim/simulate.h"
#include "store/run_store.h"

namespace calo::calibrate {

namespace {

/// Energy and covered time per bin of a piecewise-constant power, bins of bin_s from origin_s.
class Bins {
 public:
  Bins(double origin_s, double bin_s, std::size_t count)
      : origin_s_(origin_s), bin_s_(bin_s), energy_j_(count, 0.0), covered_s_(count, 0.0) {}

  /// Adds power `power_w` held from `begin_s` to `end_s`.
  void add(double begin_s, double end_s, double power_w) {
    if (end_s <= begin_s) return;
    const auto first = static_cast<long long>(std::floor((begin_s - origin_s_) / bin_s_));
    const auto last = static_cast<long long>(std::floor((end_s - origin_s_) / bin_s_));
    for (long long bin = std::max(0LL, first); bin <= last && bin < static_cast<long long>(size()); ++bin) {
      const double bin_begin_s = origin_s_ + static_cast<double>(bin) * bin_s_;
      const double overlap_s = std::min(end_s, bin_begin_s + bin_s_) - std::max(begin_s, bin_begin_s);
      if (overlap_s <= 0) continue;
      energy_j_[bin] += power_w * overlap_s;
      covered_s_[bin] += overlap_s;
    }
  }

  /// Mean power of each bin over the time covered (NaN where nothing covered it).
  std::vector<double> means_w() const {
    std::vector<double> means(size());
    for (std::size_t bin = 0; bin < size(); ++bin)
      means[bin] = covered_s_[bin] > 0 ? energy_j_[bin] / covered_s_[bin] : NAN;
    return means;
  }

  std::size_t size() const { return energy_j_.size(); }

 private:
  double origin_s_, bin_s_;
  std::vector<double> energy_j_, covered_s_;
};

/// The measured steps' (begin, end), s since run start: the bench's own step spans (no rank), else rank 0's.
std::vector<std::pair<double, double>> measured_steps(const store::RunReader& reader) {
  std::vector<std::pair<double, double>> whole, rank0;
  for (const store::Span& span : reader.spans(store::SpanKind::kStep)) {
    if (span.name != "step") continue;
    auto& into = span.rank == store::kNone ? whole : rank0;
    if (span.rank == store::kNone || span.rank == 0)
      into.emplace_back(static_cast<double>(span.t_begin_ns) * 1e-9,
                        static_cast<double>(span.t_end_ns) * 1e-9);
  }
  return whole.empty() ? rank0 : whole;
}

/// Adds `trace`, one simulated step, stretched onto the measured step [begin_s, end_s): its wrap sample
/// stands for the step's head and its tail (sim::PowerTrace).
void add_trace(Bins& bins, const sim::PowerTrace& trace, double begin_s, double end_s) {
  if (trace.duration_s <= 0 || trace.sample_w.empty()) return;
  const double scale = (end_s - begin_s) / trace.duration_s;
  double window_begin_s = 0;
  for (std::size_t window = 0; window < trace.sample_w.size(); ++window) {
    const double window_end_s = std::min(sim::window_end_s(trace, window), trace.duration_s);
    bins.add(begin_s + window_begin_s * scale, begin_s + window_end_s * scale, trace.sample_w[window]);
    window_begin_s = window_end_s;
  }
  bins.add(begin_s + window_begin_s * scale, end_s, trace.sample_w.front());  // the tail, in the wrap
}

}  // namespace

std::vector<BinnedPower> power_trace_correlation(const std::filesystem::path& run_dir,
                                                 const sim::ClusterSpec& cluster, sim::SimOptions options,
                                                 double bin_s) {
  const MeasuredRun run = load_measured_run(run_dir, cluster.gpu);
  require_input(run.simulatable(),
                fmt::format("{} carries no workload: give a calo bench run", run_dir.string()));
  const sim::SimResult result = simulate_measured(run, run_graph(run), cluster, options);
  store::RunReader reader(run_dir);
  const auto steps = measured_steps(reader);
  require_input(!steps.empty(), fmt::format("{} has no measured step spans", run_dir.string()));
  const double origin_s = steps.front().first;
  const auto count = static_cast<std::size_t>(std::floor((steps.back().second - origin_s) / bin_s));
  auto metric = reader.find_metric("power_sampled_w");
  if (!metric) metric = reader.find_metric("power_instant_w");
  require_input(metric.has_value(), fmt::format("{} has no power samples", run_dir.string()));
  const int first_step = result.steps - static_cast<int>(steps.size());
  require_input(first_step >= 0, fmt::format("{}: more step spans than steps", run_dir.string()));
  std::vector<BinnedPower> out;
  for (const store::DeviceInfo& device : reader.devices()) {
    if (device.kind != store::DeviceKind::kGpu || device.idx >= result.world) continue;
    Bins measured(origin_s, bin_s, count), simulated(origin_s, bin_s, count);
    double previous_s = NAN;
    for (const store::Sample& sample : reader.samples(device.idx, metric->id)) {
      const double t_s = static_cast<double>(sample.t_ns) * 1e-9;
      if (std::isfinite(previous_s)) measured.add(previous_s, t_s, sample.value);
      previous_s = t_s;
    }
    for (std::size_t step = 0; step < steps.size(); ++step) {
      const std::size_t index = (first_step + step) * static_cast<std::size_t>(result.world) + device.idx;
      add_trace(simulated, *result.power_traces[result.trace_of[index]], steps[step].first,
                steps[step].second);
    }
    BinnedPower binned;
    binned.device = device.idx;
    const std::vector<double> measured_w = measured.means_w(), simulated_w = simulated.means_w();
    for (std::size_t bin = 0; bin < count; ++bin) {
      if (!std::isfinite(measured_w[bin]) || !std::isfinite(simulated_w[bin])) continue;
      binned.measured_w.push_back(measured_w[bin]);
      binned.simulated_w.push_back(simulated_w[bin]);
    }
    binned.correlation =
        binned.measured_w.size() >= 3 ? pearson_r(binned.measured_w, binned.simulated_w) : NAN;
    out.push_back(std::move(binned));
  }
  return out;
}

}  // namespace calo::calibrate
