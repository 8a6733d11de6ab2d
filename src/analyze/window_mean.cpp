#include "analyze/window_mean.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace calo::analyze {

double WindowMeanPeak::window_integral(int64_t end_ns) const {
  const int64_t start_ns = end_ns - window_ns_;
  double integral = 0;
  for (const Segment& segment : segments_) {
    const int64_t begin = std::max(segment.begin_ns, start_ns), end = std::min(segment.end_ns, end_ns);
    if (end > begin) integral += segment.value * static_cast<double>(end - begin);
  }
  return integral;
}

void WindowMeanPeak::add_segment(int64_t begin_ns, int64_t end_ns, double value) {
  if (end_ns <= begin_ns) return;
  if (total_ns_ == 0) first_begin_ns_ = begin_ns;
  total_integral_ += value * static_cast<double>(end_ns - begin_ns);
  total_ns_ += static_cast<double>(end_ns - begin_ns);
  // Windows ending inside this segment see back to begin_ns - window; older segments no longer matter.
  while (!segments_.empty() && segments_.front().end_ns <= begin_ns - window_ns_) segments_.pop_front();
  segments_.push_back({begin_ns, end_ns, value});
  // The window mean is linear in its end between breakpoints: where its end meets this segment's end, or
  // its start meets a segment edge. Those ends inside (begin_ns, end_ns] are the candidates.
  auto consider = [&](int64_t window_end_ns) {
    if (window_end_ns <= begin_ns || window_end_ns > end_ns) return;
    if (window_end_ns - window_ns_ < first_begin_ns_) return;  // not a whole window of data yet
    peak_ = std::max(peak_, window_integral(window_end_ns) / static_cast<double>(window_ns_));
  };
  consider(end_ns);
  for (const Segment& segment : segments_) {
    consider(segment.begin_ns + window_ns_);
    consider(segment.end_ns + window_ns_);
  }
}

double WindowMeanPeak::peak() const {
  return std::isinf(peak_) ? std::numeric_limits<double>::quiet_NaN() : peak_;
}

double WindowMeanPeak::peak_or_mean() const {
  return std::isinf(peak_) ? mean() : peak_;
}

double WindowMeanPeak::mean() const {
  return total_ns_ > 0 ? total_integral_ / total_ns_ : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace calo::analyze
