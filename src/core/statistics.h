// Order statistics of a list of figures: the home of calo's medians and percentiles.
// Conventions, each a function here (docs/METRICS.md names the figures that take each):
// - A median is the upper median (`upper_median`): the value at index n/2 of the sorted values, one that
//   occurred (a step that ran, a sample that was read), never an average of two. Exceptions kept because
//   stored figures depend on them: the store's `median_sm_mhz` and a Kineto collective's measured time take
//   the mean of the two middle values (`midpoint_median`).
// - A percentile labelled pN of a command's own step times (`calo bench` p50/p99, `calo record` median/p90)
//   interpolates linearly between the closest ranks (`percentile`); the analysis of a stored run
//   (`calo report`, `calo compare`) takes nearest ranks (`nearest_rank_percentile`).
// - Two order statistics stay beside their one use on purpose: a straggler's lag counts from the lower
//   median of integer step ends (analyze/metrics.cpp: with two ranks, the earlier end), and `calo probe`
//   takes its costs and refresh periods at rank floor(q (n - 1)) (telemetry/probe.cpp: a measured interval,
//   never one between two).
// Every function here answers NaN for an empty list.
#pragma once

#include <vector>

namespace calo::core {

/// The element at size / 2 of `values` in sorted order (the upper middle for an even count); NaN when empty.
double upper_median(std::vector<double> values);

/// The middle element of `values` in sorted order, or the mean of the two middle ones for an even count;
/// NaN when empty.
double midpoint_median(std::vector<double> values);

/// The q-quantile (q in [0, 1]) of `values` by linear interpolation between the closest ranks: sorted
/// values v, position p = q (n - 1), v[floor p] + (p - floor p) (v[floor p + 1] - v[floor p]); NaN when
/// empty.
double percentile(std::vector<double> values, double q);

/// The q-quantile (q in [0, 1]) of `values` by nearest rank: the value at rank ceil(q n) (at least 1) of the
/// sorted values; reorders `values` (a partial sort); NaN when empty.
double nearest_rank_percentile(std::vector<double>& values, double q);

}  // namespace calo::core
