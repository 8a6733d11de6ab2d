// The whole run's interval summary computed from the samples as they are written, so that `calo record`
// writes its end-of-run rows without reading the store it has just written back (issue 68): the figures of
// store::summarize_interval over [0, end), by the same formulas (docs/METRICS.md "Run store").
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/run_store.h"
#include "store/summary.h"

namespace calo::store {

/// Per device, what summarize_interval(reader, device, 0, t_end_ns, "run") needs, taken from the samples a
/// RunWriter is given, in the order it is given them (NaN values left out, as the writer leaves them out):
/// each counter's samples around 0 and its last, the in-window peaks, first and last temperature, the power
/// integral, a histogram of SM clocks, the driver's power samples integrated over the run and kept near its
/// two edges, and a sample count. Memory: the distinct clocks and the power samples within 10 s of the start
/// and in the last ~10 s.
class RunIntervalStream {
 public:
  /// `metrics`: the run's metrics (ids as the samples carry them, names as summarize_interval reads them).
  explicit RunIntervalStream(const std::vector<MetricInfo>& metrics);

  /// Takes samples as they are appended to the store; thread-safe.
  void add(std::span<const Sample> samples);

  /// summarize_interval(reader, device_idx, 0, t_end_ns, "run") of a store holding exactly the samples added;
  /// nullopt where the stream cannot promise the same figures (then read the store): a series that came out
  /// of time order, a sample at or after t_end_ns, or counter ends placed with power samples it did not keep.
  std::optional<IntervalSummary> summary(int32_t device_idx, int64_t t_end_ns) const;

 private:
  /// What one series (device, metric) keeps.
  struct Series {
    bool clock = false;                   ///< the SM clock (its median is kept as a histogram)
    bool driver_power = false;            ///< the driver's power samples (integrated, edges kept)
    bool in_order = true;                 ///< every sample at or after the previous one's time
    int64_t added = 0;                    ///< samples taken
    Sample first;                         ///< the first sample
    std::optional<Sample> before_zero;    ///< the last sample at t < 0
    std::optional<Sample> from_zero;      ///< the first sample at t >= 0
    Sample last;                          ///< the last sample
    bool has_window = false;              ///< a sample at t >= 0
    double window_max = 0;                ///< largest value at t >= 0 (folded in arrival order)
    double window_first = 0;              ///< first value at t >= 0
    double window_last = 0;               ///< last value at t >= 0
    double window_integral = 0;           ///< trapezoid over the samples at t >= 0 (value x s)
    Sample previous_in_window;            ///< the last sample at t >= 0
    std::map<double, int64_t> histogram;  ///< value -> samples at t >= 0 (SM clocks)
    std::optional<WindowIntegral> whole;  ///< the samples from -kEnergyEdgeNs on, over [0, open end)
    std::vector<Sample> head;             ///< samples in [-kEnergyEdgeNs, kEnergyEdgeNs] (power samples)
    bool beyond_head = false;             ///< a sample after kEnergyEdgeNs came
    std::deque<Sample> tail;    ///< the last kEnergyEdgeNs of samples and one before (power samples)
    bool tail_trimmed = false;  ///< tail no longer holds every sample from -kEnergyEdgeNs on
  };
  /// What one device keeps besides its series.
  struct Device {
    int64_t latest_t_ns = INT64_MIN;  ///< latest sample time of any series
    int64_t window_samples = 0;       ///< samples at t >= 0, every metric
  };

  void add_one(const Sample& sample);
  static void add_power_sample(Series& series, const Sample& sample);
  static std::vector<Sample> skeleton(const Series& series);
  const Series* find(int32_t device_idx, const std::string& name) const;
  std::optional<double> energy_j(int32_t device_idx, int64_t t_end_ns) const;

  std::unordered_map<int32_t, std::string> metric_names_;
  std::map<std::pair<int32_t, int32_t>, Series> series_;  ///< (device, metric) -> series
  std::map<int32_t, Device> devices_;
  mutable std::mutex mutex_;
};

}  // namespace calo::store
