// Sampler: one thread per (source, query group); each metric has its own period on absolute deadlines
// (one timed wait on CLOCK_MONOTONIC per deadline, no drift); records scheduling jitter, late and missed
// deadlines.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// One value produced by the sampler.
struct SampleRecord {
  uint32_t source_position = 0;  ///< index into the sampler's sources
  uint32_t device_position = 0;  ///< index into that source's devices()
  uint32_t metric_index = 0;     ///< index into that device's metrics
  int64_t t_ns = 0;              ///< host CLOCK_MONOTONIC mid-read (buffered metrics: the sample's own time)
  double value = 0;              ///< in the metric's unit
  int64_t sensor_t_ns = kNoSensorTime;  ///< sensor timestamp on CLOCK_MONOTONIC, or kNoSensorTime
};

/// Something the sampler tells once: a metric unsupported, a device lost, a persistent read error.
struct SamplerEvent {
  int64_t t_ns = 0;              ///< host CLOCK_MONOTONIC
  bool is_error = false;         ///< true for a lost device, false for an unsupported metric / first error
  uint32_t source_position = 0;  ///< which source
  uint32_t device_position = 0;  ///< which device of it
  std::string message;           ///< human-readable ("GPU 2 fell off the bus: ...")
};

/// Receives the sampler's output; called from sampler threads (must be thread-safe, should not block).
struct SamplerSink {
  std::function<void(std::span<const SampleRecord>)> on_samples;  ///< a batch of values from one wake-up
  std::function<void(const SamplerEvent&)> on_event;              ///< an event (may be empty)
};

/// Queries costing at least this much are "slow" (energy, NVLink, PCIe, memory info); cheaper ones are "fast"
/// (sensor gauges, 0.3-2 us on H200). Memory info costs 4-50 us (fixture h200x4-nvml-phases), 45 us read 10
/// ms apart (nvml_query_lab): at 10 ms it alone would use 0.45 % of a core per GPU.
inline constexpr int64_t kSlowQueryNs = 20'000;

/// Share of one CPU core one expensive query may use at its default period: the default period of the slow
/// metrics one call returns (NVLink TX+RX, PCIe TX+RX, the HW-throttle pair, energy) is at least (measured
/// CPU per call) / kSlowMetricCpuShare (0.1 % of a core per query).
inline constexpr double kSlowMetricCpuShare = 0.001;

/// Measured cost of one query on this host: the cheapest of a few reads.
struct QueryCost {
  int64_t wall_ns = 0;  ///< wall time of one read
  int64_t cpu_ns = 0;   ///< CPU time of the reading thread during that read (user + system)
};

/// Measured query costs keyed by (source name, metric name).
using CostTable = std::map<std::pair<std::string, std::string>, QueryCost>;

/// Reads every metric of every available source `reads` times on the first device that has it and keeps the
/// cheapest read: the cost the sampler classifies by (fast if wall < kSlowQueryNs, else slow).
CostTable measure_query_costs(const std::vector<Source*>& sources, int reads = 3);

/// `metric` as the sampler reads it where its cheapest read took `measured_wall_ns` (0: not measured): a
/// metric declared cheap that measured slow (>= kSlowQueryNs) moves to its own "<group>.slow" group at that
/// cost, so it cannot delay the cheap metrics it was grouped with.
MetricInfo as_measured(MetricInfo metric, int64_t measured_wall_ns);

/// Sampling periods: per metric name, else per query group, else the metric's default.
struct PeriodPlan {
  std::map<std::string, int64_t> by_metric_ns;  ///< "power_instant_w" -> period
  std::map<std::string, int64_t> by_group_ns;   ///< "nvml.fast" -> period
  int64_t fast_override_ns = 0;  ///< if > 0: period of every cheap metric (cost < kSlowQueryNs)
  int64_t slow_override_ns = 0;  ///< if > 0: period of every expensive metric (cost >= kSlowQueryNs)
  /// Costs measured on this host; when unset the Sampler measures them itself (measure_query_costs).
  std::optional<CostTable> measured_costs;
  /// The period for `metric` whose reads cost `cpu_ns` of CPU (explicit metric > group > fast/slow
  /// override > default; a slow metric's default is stretched so it uses <= kSlowMetricCpuShare of a core; a
  /// buffered metric is never read less often than its default).
  int64_t period_for(const MetricInfo& metric, int64_t cpu_ns = 0) const;
  /// The period given for `metric` (by metric name, group, or fast/slow override), if any.
  std::optional<int64_t> given_ns(const MetricInfo& metric) const;
  /// True when `metric`'s period is its default stretched to the CPU its reads cost: an expensive, unbuffered
  /// metric whose period was not given.
  bool follows_cpu(const MetricInfo& metric) const;
};

/// The default period of an expensive metric whose reads cost `cpu_ns` of CPU each: max(default_ns,
/// cpu_ns / kSlowMetricCpuShare), rounded up to whole 100 ms.
int64_t cpu_budget_period_ns(int64_t default_ns, int64_t cpu_ns);

/// Scheduling statistics of one sampler thread.
struct LoopStats {
  std::string source;         ///< source name
  std::string group;          ///< query group
  uint64_t wakeups = 0;       ///< times the thread woke for a deadline
  uint64_t sleeps = 0;        ///< times it went to sleep (one per deadline: a loop never naps between them)
  uint64_t samples = 0;       ///< values delivered
  uint64_t read_errors = 0;   ///< transient read errors
  uint64_t late = 0;          ///< reads that started more than half a period after their deadline
  uint64_t missed = 0;        ///< deadlines skipped because an earlier read overran them
  int64_t jitter_p50_ns = 0;  ///< median of (wake-up - deadline)
  int64_t jitter_p99_ns = 0;  ///< 99th percentile of (wake-up - deadline)
  int64_t jitter_max_ns = 0;  ///< largest (wake-up - deadline)
  int64_t read_ns_total = 0;  ///< wall time spent inside source reads
  int64_t cpu_ns = 0;         ///< CPU time of this thread (CLOCK_THREAD_CPUTIME_ID) when it stopped
  bool realtime = false;      ///< whether the thread got SCHED_FIFO priority (needs CAP_SYS_NICE)
};

/// Jitter histogram: 1 µs buckets up to 20 ms, then one overflow bucket (max kept exactly).
class JitterHistogram {
 public:
  /// Adds one jitter value in ns (negative values count as 0).
  void add(int64_t jitter_ns);
  /// The q-quantile (0..1) in ns, bucket resolution 1 µs; 0 when empty.
  int64_t quantile_ns(double q) const;
  /// The largest value added.
  int64_t max_ns() const { return max_ns_; }
  /// Number of values added.
  uint64_t count() const { return count_; }
  /// Adds every value of `other` (pooling several loops' wake-ups into one distribution).
  void merge(const JitterHistogram& other);

 private:
  static constexpr int kBuckets = 20'000;
  std::vector<uint32_t> buckets_ = std::vector<uint32_t>(kBuckets + 1, 0);
  int64_t max_ns_ = 0;
  uint64_t count_ = 0;
};

/// Scheduling jitter pooled over every wake-up of every loop: the figure the p99 target is about (a loop that
/// wakes 14 times has its maximum as its p99, so the worst loop's p99 is reported beside it, not instead).
struct JitterSummary {
  uint64_t wakeups = 0;             ///< wake-ups pooled
  int64_t p50_ns = 0;               ///< median of (wake-up - deadline) over all wake-ups
  int64_t p99_ns = 0;               ///< 99th percentile over all wake-ups
  int64_t max_ns = 0;               ///< largest over all wake-ups
  int64_t worst_loop_p99_ns = 0;    ///< the largest per-loop p99
  std::string worst_loop;           ///< "source/group" of that loop
  uint64_t worst_loop_wakeups = 0;  ///< how many wake-ups that loop's p99 rests on
};

/// Runs the sampling threads. Sources must outlive the sampler.
class Sampler {
 public:
  /// Plans one loop per (source, query group) over every device and metric of the available sources; a
  /// metric declared cheap whose measured cost is >= kSlowQueryNs moves to its own "<group>.slow" loop.
  /// The driver serializes queries (NVML: across all GPUs), so the slow loops of a source take turns and
  /// start a read only when it ends before the next read of the fast loops (a gap), never in their way.
  Sampler(std::vector<Source*> sources, PeriodPlan plan, SamplerSink sink);
  /// Stops the threads if running.
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  /// Starts all threads; the first deadline of every metric is `start_ns` (CLOCK_MONOTONIC, 0 = now).
  void start(int64_t start_ns = 0);
  /// Signals the threads to stop (waking any that sleep) and joins them after their closing counter reads.
  void stop();
  /// Statistics per loop (complete after stop()).
  std::vector<LoopStats> stats() const;
  /// Jitter over all loops' wake-ups, and the worst loop's p99 (complete after stop()).
  JitterSummary jitter_summary() const;
  /// (source, group, metric name, period) of every scheduled metric, for the run's config record.
  struct Scheduled {
    std::string source;  ///< source name
    std::string group;   ///< query group
    std::string metric;  ///< metric name
    int64_t period_ns;   ///< sampling period
    size_t devices;      ///< devices reading it
    QueryCost cost;      ///< measured cost of one read (first device)
    bool reclassified;   ///< declared cheap but measured slow on this host: moved out of its fast group
    bool shortened;  ///< a buffered metric whose given period was longer than its history lasts: its default
  };
  /// What will be sampled (before start()) or was (after stop(): periods that followed read costs as
  /// stretched).
  std::vector<Scheduled> schedule() const;

 private:
  struct Task;
  struct Loop;
  struct Gate;
  void run_loop(Loop& loop);
  void wait_for_gap(Loop& loop, int64_t expected_cost_ns);
  void sleep_until_or_stop(Loop& loop, int64_t deadline_ns);
  void report(const SamplerEvent& event);

  std::vector<Source*> sources_;
  SamplerSink sink_;
  CostTable costs_;
  PeriodPlan plan_;  // the periods asked for (schedule() tells where one was shortened)
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::unique_ptr<Gate>> gates_;  // one per source: slow reads take turns and yield to fast ones
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  int64_t started_ns_ = 0;  // start(): buffered samples taken before it are not delivered
  std::unique_ptr<std::atomic<bool>[]> device_lost_;  // flat over (source, device)
  std::vector<size_t> device_offset_;                 // first device_lost_ slot of each source
};

}  // namespace calo::telemetry
