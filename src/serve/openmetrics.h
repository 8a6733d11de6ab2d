// Live metrics of a run store in the OpenMetrics text format: the latest value of every (device, metric)
// series, dcgm-exporter's names beside calo's own where dcgm-exporter has one, and step counters per rank.
// The store is followed by rowid, so a scrape costs the rows committed since the previous one
// (docs/TELEMETRY.md, "Live metrics").
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serve/http_server.h"
#include "store/run_store.h"

namespace calo::serve {

/// OpenMetrics text format's media type.
inline constexpr const char* kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Step figures of one rank, from the step spans seen so far.
struct RankSteps {
  int64_t steps_total = 0;      ///< steps covered by the step spans (a log line every 10 steps covers 10)
  int64_t last_step = -1;       ///< number of the latest step
  double last_step_time_s = 0;  ///< duration of the latest step span / steps it covers
  std::string last_category;    ///< "socket", "megatron", ... of the latest span
  std::deque<std::pair<int64_t, int64_t>> recent_ends;  ///< (step, t_end_ns) of the latest spans, at most 11
  /// Steps per second over the latest spans (docs/METRICS.md "Live step rate"); 0 before the first span.
  double step_rate_hz() const;
};

/// Follows a run store that may still be written and renders its latest values.
class LiveMetrics {
 public:
  /// `run_dir` must hold a run.db (InputError otherwise); it is read, never written.
  explicit LiveMetrics(const std::filesystem::path& run_dir);
  /// Reads the rows committed since the last call, then renders every family (ends with "# EOF").
  std::string render();
  /// Step figures per rank (rank store::kNone: steps from output lines), as of the last render().
  std::map<int32_t, RankSteps> steps() const;

 private:
  void refresh();
  void add_step_span(const store::Span& span);

  mutable std::mutex mutex_;
  store::RunReader reader_;
  std::string host_;
  std::vector<store::DeviceInfo> devices_;
  std::map<int32_t, store::MetricInfo> metrics_;
  std::map<std::pair<int32_t, int32_t>, double> latest_;  // (device_idx, metric_id) -> value
  std::map<int32_t, RankSteps> ranks_;
  int64_t last_sample_rowid_ = 0;
  int64_t last_span_rowid_ = 0;
};

/// LiveMetrics of a run served over HTTP at /metrics.
class MetricsEndpoint {
 public:
  /// Binds `address` and starts serving (InputError if it cannot bind); until follow() the page is empty.
  explicit MetricsEndpoint(const ListenAddress& address);
  /// Serves the run in `run_dir` from now on (its run.db must exist).
  void follow(const std::filesystem::path& run_dir);
  /// "http://HOST:PORT/metrics".
  std::string url() const { return server_->url(); }
  /// Stops serving and closes the run store (idempotent).
  void stop();

 private:
  std::mutex mutex_;
  std::unique_ptr<LiveMetrics> metrics_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace calo::serve
