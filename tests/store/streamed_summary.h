// Test helper: the whole-run summary a RunIntervalStream computes from a stored run's samples, fed in the
// order the writer took them (rowid), against summarize_interval reading the same store back.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "store/run_interval_stream.h"
#include "store/summary.h"

namespace calo::store::testing {

/// Equal, or both NaN: the two paths must agree to the last bit, missing figures included.
inline bool same_figure(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

/// Expects stream.summary(device_idx, t_end_ns) to equal summarize_interval(reader, device_idx, 0, t_end_ns,
/// "run") field by field, the stream fed every sample of `reader` in rowid order.
inline void expect_stream_matches_store(const RunReader& reader, int32_t device_idx, int64_t t_end_ns) {
  RunIntervalStream stream(reader.metrics());
  reader.for_each_sample_since(0, [&](const Sample& sample) { stream.add({&sample, 1}); });
  const IntervalSummary stored = summarize_interval(reader, device_idx, 0, t_end_ns, "run");
  const std::optional<IntervalSummary> streamed = stream.summary(device_idx, t_end_ns);
  ASSERT_TRUE(streamed.has_value()) << "device " << device_idx;
  EXPECT_EQ(streamed->label, stored.label);
  EXPECT_EQ(streamed->t_begin_ns, stored.t_begin_ns);
  EXPECT_EQ(streamed->t_end_ns, stored.t_end_ns);
  EXPECT_EQ(streamed->sample_count, stored.sample_count);
  const std::pair<const char*, double IntervalSummary::*> figures[] = {
      {"duration_s", &IntervalSummary::duration_s},
      {"energy_j", &IntervalSummary::energy_j},
      {"mean_power_w", &IntervalSummary::mean_power_w},
      {"power_integral_j", &IntervalSummary::power_integral_j},
      {"peak_power_instant_w", &IntervalSummary::peak_power_instant_w},
      {"peak_power_sampled_w", &IntervalSummary::peak_power_sampled_w},
      {"throttle_power_cap_s", &IntervalSummary::throttle_power_cap_s},
      {"throttle_sw_thermal_s", &IntervalSummary::throttle_sw_thermal_s},
      {"throttle_hw_thermal_s", &IntervalSummary::throttle_hw_thermal_s},
      {"throttle_power_brake_s", &IntervalSummary::throttle_power_brake_s},
      {"median_sm_mhz", &IntervalSummary::median_sm_mhz},
      {"temp_gpu_start_c", &IntervalSummary::temp_gpu_start_c},
      {"temp_gpu_end_c", &IntervalSummary::temp_gpu_end_c},
      {"temp_gpu_max_c", &IntervalSummary::temp_gpu_max_c}};
  for (const auto& [name, field] : figures) {
    EXPECT_PRED2(same_figure, (*streamed).*field, stored.*field) << name << " of device " << device_idx;
  }
}

}  // namespace calo::store::testing
