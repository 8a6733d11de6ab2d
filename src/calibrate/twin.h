// The simulated twin of a measured run: what `calo sim --from RUN` takes from the run so that its simulation
// is the job that was measured (workload, warm-up and measured steps, start temperature, the card's thermal
// scale), and `calo compare` can put an error beside every figure.
#pragma once

#include <filesystem>
#include <string>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "sim/cluster.h"

namespace calo::calibrate {

/// A measured run's workload and conditions, as a simulation of it needs them.
struct RunTwin {
  /// The run stores the job it measured (calo bench; calo ingest with a model); a `calo record` run of any
  /// job does not, and its twin takes the job from the user (`calo sim --from RUN --model ...`).
  bool has_job = false;
  model::ModelSpec model;      ///< the model the run measured (from its stored config), when has_job
  parallel::Layout layout;     ///< its layout, resolved, when has_job
  int warmup_steps = 0;        ///< step spans named "warmup"
  int measured_steps = 0;      ///< step spans named "step"
  double initial_die_c = NAN;  ///< GPU temperature the run read last before its GPU loaded; NaN if none
  std::string gpu_name;        ///< the device the run measured
  std::string card_uuid;       ///< its UUID; empty if the run did not record one
  /// The card's thermal resistance scale in `cluster`'s calibration (`calibration.cards`); NaN when the
  /// calibration did not fit this card (the simulation then uses the typical card).
  double card_r_scale = NAN;
};

/// Reads `run_dir` as the twin to simulate on `cluster`. Throws InputError (naming the run and the fix) for a
/// simulated run, a run without steps, and a run of another GPU model than `cluster`'s; a run without a
/// stored model and layout (a `calo record` run) has has_job false.
RunTwin twin_of_run(const std::filesystem::path& run_dir, const sim::ClusterSpec& cluster);

/// `cluster` with every slot's thermal resistances scaled by `r_scale` (one card's fitted scale).
sim::ClusterSpec with_card_r_scale(sim::ClusterSpec cluster, double r_scale);

}  // namespace calo::calibrate
