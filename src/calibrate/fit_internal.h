// fit internal header: what fit.cpp and fit_thermal.cpp share. Not part of the calibrate interface.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "calibrate/fit.h"

namespace calo::calibrate::fit_detail {

/// `value` squared; 0 for a non-finite value (a figure a run lacks adds nothing to a loss).
inline double squared(double value) {
  return std::isfinite(value) ? value * value : 0.0;
}

/// Stage 4: the thermal RC constants, inlet temperature and cooling response fitted to the temperature
/// curves of `runs` and `thermal_runs` (fit_thermal.cpp); writes them into `cluster` and each card's
/// resistance scale into `card_r_scale`.
StageFit fit_thermal(const std::vector<MeasuredRun>& runs, const std::vector<MeasuredRun>& thermal_runs,
                     sim::ClusterSpec& cluster, std::map<std::string, double>& card_r_scale);

}  // namespace calo::calibrate::fit_detail
