// The leave-one-out targets of the calibration issue, asserted on a Calibration: shared by the suites that
// validate a fit (the H100 fixture runs, the H200 runs).
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "calibrate/calibrate.h"

namespace calo::testing {

/// The tolerance `calibration` reached for `figure` ("step_time_s", ...); throws if it rated none.
inline const calibrate::Tolerance& tolerance_of(const calibrate::Calibration& calibration,
                                                const std::string& figure) {
  for (const calibrate::Tolerance& tolerance : calibration.tolerances) {
    if (tolerance.figure == figure) return tolerance;
  }
  throw std::logic_error("no tolerance for " + figure);
}

/// The leave-one-out targets of the calibration issue: step time 3 %, mean power 5 %, peak power 10 %, energy
/// per step 5 %, and the sustained peak temperature (hottest 500 ms; each held-out run from its card's
/// resistance scale and the reading taken before its GPU loaded, docs/SIMULATOR.md "Heat") 3 C.
/// `temp_target_c` and `energy_target` widen those only where a test names a reported miss.
inline void expect_issue_targets(const calibrate::Calibration& calibration, double temp_target_c = 3.0,
                                 double energy_target = 0.05) {
  EXPECT_LE(tolerance_of(calibration, "step_time_s").achieved, 0.03);
  EXPECT_LE(tolerance_of(calibration, "mean_power_w").achieved, 0.05);
  EXPECT_LE(tolerance_of(calibration, "peak_power_w").achieved, 0.10);
  EXPECT_LE(tolerance_of(calibration, "energy_per_step_j").achieved, energy_target);
  EXPECT_LE(tolerance_of(calibration, "peak_temp_c").achieved, temp_target_c);
}

}  // namespace calo::testing
