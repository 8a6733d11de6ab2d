// metrics internal header: what metrics.cpp and metrics_series.cpp share. Not part of the analyze interface.
#pragma once

#include <filesystem>
#include <limits>
#include <vector>

#include "analyze/metrics.h"
#include "store/run_store.h"

namespace calo::analyze::metrics_detail {

/// The value of a figure a run lacks.
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

/// The per-device figures of a run's series, and the analysis window they cover.
struct SeriesFigures {
  std::vector<DeviceMetrics> device_metrics;  ///< per device, in analysis.devices order
  double window_s = 0;                        ///< analysis window (t_end_ns - t_begin_ns), s
};

/// Reduces every series of every device of the run at `run_dir` to its digest and the per-device figures
/// (power, temperature, clocks, energy, throttling) over `analysis`' window and chart range
/// (metrics_series.cpp). Sets analysis.storage_order_scan, moves the digests into analysis.series and adds
/// the samples read to analysis.sample_count.
SeriesFigures reduce_series(const std::filesystem::path& run_dir,
                            const std::vector<store::MetricInfo>& metrics, const AnalyzeOptions& options,
                            RunAnalysis& analysis);

}  // namespace calo::analyze::metrics_detail
