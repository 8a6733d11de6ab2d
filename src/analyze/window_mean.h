// The hottest stretch of a series: the largest time-weighted mean over any window of a given length, streamed
// segment by segment (the sustained peak temperature of docs/METRICS.md, for measured and simulated runs).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>

namespace calo::analyze {

/// Window of the sustained peak temperature: NVML's readings scatter ~2 C around the die's temperature from
/// one 100 ms reading to the next (docs/METRICS.md); a 500 ms mean of five readings does not.
inline constexpr int64_t kSustainedTempWindowNs = 500'000'000;

/// Largest time-weighted mean of a piecewise-constant series over any window of `window_ns` lying inside the
/// series (exact: evaluated at every breakpoint of the window mean); memory is the segments of one window.
class WindowMeanPeak {
 public:
  /// A tracker of windows `window_ns` long (> 0).
  explicit WindowMeanPeak(int64_t window_ns) : window_ns_(window_ns) {}

  /// The series held `value` over [begin_ns, end_ns); segments come in time order.
  void add_segment(int64_t begin_ns, int64_t end_ns, double value);

  /// The largest window mean; NaN when the segments never covered a whole window.
  double peak() const;

  /// Time-weighted mean of every segment added (NaN if none): the fallback for series shorter than a window.
  double mean() const;

  /// peak(), or mean() for a series shorter than one window: the sustained peak as METRICS.md defines it.
  double peak_or_mean() const;

 private:
  struct Segment {
    int64_t begin_ns;
    int64_t end_ns;
    double value;
  };
  /// Σ value · overlap over segments_ of the window ending at `end_ns`.
  double window_integral(int64_t end_ns) const;

  int64_t window_ns_;
  std::deque<Segment> segments_;  // those a window ending in the newest segment can overlap
  int64_t first_begin_ns_ = 0;
  double total_integral_ = 0;  // over every segment added
  double total_ns_ = 0;
  double peak_ = -std::numeric_limits<double>::infinity();
};

}  // namespace calo::analyze
