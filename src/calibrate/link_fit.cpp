#include "calibrate/link_fit.h"

#include <cmath>

namespace calo::calibrate {

StageFit fit_link_from_steps(const std::vector<LinkRun>& runs, sim::ClusterSpec& cluster) {
  StageFit stage{"link", {}, {}, ""};
  if (runs.empty()) {
    stage.note = "no run spans two or more GPUs of one node (calo bench --nproc N, N up to the node's GPUs)";
    return stage;
  }
  const double base_gb_s = cluster.node.nvlink_bandwidth_bytes_per_s / 1e9;
  sim::ClusterSpec trial = cluster;
  auto loss = [&](double bandwidth_gb_s) {
    trial.node.nvlink_bandwidth_bytes_per_s = bandwidth_gb_s * 1e9;
    double sum = 0;
    for (const LinkRun& item : runs) {
      const double ratio =
          std::log(simulate_run(*item.run, *item.graph, trial).step_time_s / item.run->figures.step_time_s);
      if (std::isfinite(ratio)) sum += ratio * ratio;
    }
    return sum;
  };
  const double fitted_gb_s = minimize_1d(loss, 0.2 * base_gb_s, 2.0 * base_gb_s, true, 11, 12);
  cluster.node.nvlink_bandwidth_bytes_per_s = fitted_gb_s * 1e9;
  stage.parameters.push_back({"node.nvlink_bandwidth_gb_s", base_gb_s, fitted_gb_s, "GB/s", "link"});
  for (const LinkRun& item : runs) {
    stage.residuals.emplace_back(
        item.run->label,
        errors_json(item.run->figures, simulate_run(*item.run, *item.graph, cluster), {0, 1, 2}));
  }
  return stage;
}

}  // namespace calo::calibrate
