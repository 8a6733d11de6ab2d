#include "calibrate/twin.h"

#include <fmt/format.h>

#include "calibrate/measurement.h"
#include "core/error.h"
#include "parallel/validate.h"
#include "store/run_store.h"

namespace calo::calibrate {

namespace {

/// The thermal R scale `cluster`'s calibration fitted for card `uuid`; NaN if it lists none.
double listed_card_r_scale(const sim::ClusterSpec& cluster, const std::string& uuid) {
  if (uuid.empty() || !cluster.calibration.is_object()) return NAN;
  const auto cards = cluster.calibration.find("cards");
  if (cards == cluster.calibration.end() || !cards->is_array()) return NAN;
  for (const nlohmann::json& card : *cards) {
    if (card.value("card", std::string()) == uuid && card.contains("thermal_r_scale"))
      return card["thermal_r_scale"].get<double>();
  }
  return NAN;
}

}  // namespace

RunTwin twin_of_run(const std::filesystem::path& run_dir, const sim::ClusterSpec& cluster) {
  require_input(
      std::filesystem::exists(run_dir / "run.db"),
      fmt::format("--from {}: no run.db there; give a run directory made by calo bench, calo record "
                  "or calo ingest",
                  run_dir.string()));
  require_input(store::RunReader(run_dir).run().kind != store::RunKind::kSim,
                fmt::format("--from {}: this is a simulated run; --from takes a measured run (calo bench, or "
                            "calo record / ingest with a model) and simulates its twin",
                            run_dir.string()));
  const MeasuredRun run = load_measured_run(run_dir, cluster.gpu);
  RunTwin twin;
  twin.has_job = run.simulatable();
  if (twin.has_job) {
    twin.model = *run.model;
    twin.layout = parallel::resolve_layout(*run.model, run.layout);
  }
  twin.warmup_steps = run.warmup_steps;
  twin.measured_steps = run.measured_steps;
  twin.initial_die_c = run.initial_temp_c;
  twin.gpu_name = run.gpu_name;
  twin.card_uuid = run.gpu_uuid;
  twin.card_r_scale = listed_card_r_scale(cluster, run.gpu_uuid);
  return twin;
}

sim::ClusterSpec with_card_r_scale(sim::ClusterSpec cluster, double r_scale) {
  if (cluster.node.slot_r_scale.empty()) cluster.node.slot_r_scale.assign(cluster.node.gpus, 1.0);
  for (double& scale : cluster.node.slot_r_scale) scale *= r_scale;
  return cluster;
}

}  // namespace calo::calibrate
