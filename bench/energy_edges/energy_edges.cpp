// Energy over short windows when the energy counter is read only every few seconds (calo record's defaults):
// on a recording whose counter was read every 100 ms (`calo record --period energy_j=100ms`), the truth is
// that dense counter; the counter is then thinned to one read every N s, and the energy of every window of L
// s (one every 0.1 s) is computed from the thinned counter by linear interpolation (store::counter_value_at)
// and by store::energy_value_at (the nearest read plus the driver's 20 ms power samples). Prints |error| in %
// of the true window energy: mean, p95, max, per (N, L).
//   bench_energy_edges RUN_DIR [--every-s 2,5] [--window-s 0.5,1,2,5]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "store/run_store.h"
#include "store/summary.h"

namespace {

using calo::store::Sample;

// Every read at least `every_ns` after the last one kept, and the last read (the closing read).
std::vector<Sample> thin(const std::vector<Sample>& reads, int64_t every_ns) {
  std::vector<Sample> kept;
  for (const Sample& read : reads) {
    if (kept.empty() || read.t_ns - kept.back().t_ns >= every_ns) kept.push_back(read);
  }
  if (!reads.empty() && kept.back().t_ns != reads.back().t_ns) kept.push_back(reads.back());
  return kept;
}

struct ErrorStats {
  double mean_pct = 0;
  double p95_pct = 0;
  double max_pct = 0;
};

ErrorStats stats_of(std::vector<double> errors_pct) {
  ErrorStats stats;
  if (errors_pct.empty()) return stats;
  std::sort(errors_pct.begin(), errors_pct.end());
  double sum = 0;
  for (double error : errors_pct) sum += error;
  stats.mean_pct = sum / static_cast<double>(errors_pct.size());
  stats.p95_pct = errors_pct[static_cast<size_t>(0.95 * static_cast<double>(errors_pct.size() - 1))];
  stats.max_pct = errors_pct.back();
  return stats;
}

// Prints the error table for the run in `run_dir`; 2 when it lacks the series the comparison needs.
int run(const std::string& run_dir, const std::vector<double>& every_s, const std::vector<double>& window_s) {
  const calo::store::RunReader reader(run_dir);
  const auto energy_metric = reader.find_metric("energy_j");
  const auto power_metric = reader.find_metric("power_sampled_w");
  if (!energy_metric || !power_metric) {
    fmt::print(stderr,
               "{}: needs energy_j and power_sampled_w (record with calo record --period energy_j=100ms)\n",
               run_dir);
    return 2;
  }
  fmt::print(
      "# bench energy_edges: {}; windows every 0.1 s; |error| in % of the dense counter's window energy\n",
      run_dir);
  fmt::print("{:>4} {:>8} {:>8} {:>8} | {:>22} | {:>22}\n", "gpu", "every s", "window s", "windows",
             "linear mean/p95/max %", "+samples mean/p95/max %");
  double worst_linear_p95 = 0;
  double worst_samples_p95 = 0;
  for (const auto& device : reader.devices()) {
    if (device.kind != calo::store::DeviceKind::kGpu) continue;
    const auto dense = reader.samples(device.idx, energy_metric->id);
    const auto power = reader.samples(device.idx, power_metric->id);
    if (dense.size() < 10 || power.empty()) continue;
    const int64_t first_ns = std::max(dense.front().t_ns, power.front().t_ns);
    const int64_t last_ns = std::min(dense.back().t_ns, power.back().t_ns);
    for (double every : every_s) {
      const auto sparse = thin(dense, static_cast<int64_t>(every * 1e9));
      for (double window : window_s) {
        const auto window_ns = static_cast<int64_t>(window * 1e9);
        std::vector<double> linear_pct;
        std::vector<double> samples_pct;
        for (int64_t begin_ns = first_ns; begin_ns + window_ns <= last_ns; begin_ns += 100'000'000) {
          const int64_t end_ns = begin_ns + window_ns;
          const double truth =
              calo::store::counter_value_at(dense, end_ns) - calo::store::counter_value_at(dense, begin_ns);
          if (truth <= 0) continue;
          const double linear =
              calo::store::counter_value_at(sparse, end_ns) - calo::store::counter_value_at(sparse, begin_ns);
          const double refined = calo::store::energy_value_at(sparse, power, end_ns) -
                                 calo::store::energy_value_at(sparse, power, begin_ns);
          linear_pct.push_back(std::abs(linear - truth) / truth * 100);
          samples_pct.push_back(std::abs(refined - truth) / truth * 100);
        }
        const ErrorStats linear = stats_of(linear_pct);
        const ErrorStats refined = stats_of(samples_pct);
        worst_linear_p95 = std::max(worst_linear_p95, linear.p95_pct);
        worst_samples_p95 = std::max(worst_samples_p95, refined.p95_pct);
        fmt::print("{:>4} {:>8g} {:>8g} {:>8} | {:>6.2f} {:>7.2f} {:>7.2f} | {:>6.2f} {:>7.2f} {:>7.2f}\n",
                   device.idx, every, window, linear_pct.size(), linear.mean_pct, linear.p95_pct,
                   linear.max_pct, refined.mean_pct, refined.p95_pct, refined.max_pct);
      }
    }
  }
  fmt::print("energy_edges: worst p95 |error| linear {:.2f} %, counter + power samples {:.2f} %\n",
             worst_linear_p95, worst_samples_p95);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"energy over short windows: sparse counter interpolated vs counter + power samples"};
  std::string run_dir;
  std::vector<double> every_s{2, 5};
  std::vector<double> window_s{0.5, 1, 2, 5};
  app.add_option("run", run_dir, "Run directory recorded with --period energy_j=100ms")->required();
  app.add_option("--every-s", every_s, "Counter read intervals to emulate, s")->delimiter(',');
  app.add_option("--window-s", window_s, "Window lengths, s")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  try {
    return run(run_dir, every_s, window_s);
  } catch (const std::exception& error) {  // a path that is not a run, an unreadable store
    fmt::print(stderr, "bench_energy_edges: {}\n", error.what());
    return 2;
  }
}

