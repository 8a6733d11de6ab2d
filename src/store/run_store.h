// Run store: one run = one directory holding run.db (SQLite, WAL). Writer (thread-safe, batched) and reader.
// Schema reference: docs/RUN_STORE.md. Time base: t_ns = host CLOCK_MONOTONIC - RunInfo::started_ns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace calo::store {

/// File name of the database inside a run directory.
inline constexpr std::string_view kRunDbName = "run.db";
/// Marker for "no value" in optional integer fields (device_idx, step, microbatch, stage, rank).
inline constexpr int32_t kNone = -1;
/// Latest host CLOCK_MONOTONIC a run may state in started_ns / ended_ns (2^62 ns, ~146 years of uptime): far
/// from int64's end, so sums of run times cannot overflow; RunReader refuses a store outside [0, this].
inline constexpr int64_t kMaxRunTimeNs = int64_t{1} << 62;
/// Marker for "the sensor gave no timestamp" in Sample::sensor_t_ns (stored as SQL NULL).
inline constexpr int64_t kNoSensorTime = std::numeric_limits<int64_t>::min();

/// What produced a run.
enum class RunKind { kRecord, kBench, kSim, kIngest };
/// How a metric's values behave: gauge (instantaneous), counter (cumulative, monotone), bitmask (flags).
enum class MetricKind { kGauge, kCounter, kBitmask };
/// Kind of a time interval: training step, phase (label over a time range), op, GPU kernel.
enum class SpanKind { kStep, kPhase, kOp, kKernel };
/// Kind of a measured device.
enum class DeviceKind { kGpu, kCpu };
/// Severity of a log/event row.
enum class EventLevel { kInfo, kWarning, kError };

/// "record" | "bench" | "sim" | "ingest".
std::string_view to_string(RunKind kind);
/// "gauge" | "counter" | "bitmask".
std::string_view to_string(MetricKind kind);
/// "step" | "phase" | "op" | "kernel".
std::string_view to_string(SpanKind kind);
/// "gpu" | "cpu".
std::string_view to_string(DeviceKind kind);
/// "info" | "warning" | "error".
std::string_view to_string(EventLevel level);
/// Parses a RunKind name; throws InputError naming the valid choices.
RunKind parse_run_kind(std::string_view name);
/// Parses a MetricKind name; throws InputError naming the valid choices.
MetricKind parse_metric_kind(std::string_view name);
/// Parses a SpanKind name; throws InputError naming the valid choices.
SpanKind parse_span_kind(std::string_view name);
/// Parses a DeviceKind name; throws InputError naming the valid choices.
DeviceKind parse_device_kind(std::string_view name);
/// Parses an EventLevel name; throws InputError naming the valid choices.
EventLevel parse_event_level(std::string_view name);

/// The one row of table `run`. All clock values in ns.
struct RunInfo {
  RunKind kind = RunKind::kRecord;  ///< what produced the run
  std::string name;                 ///< short label, e.g. "llama3-8b-tp2"
  std::string command;              ///< command line that produced it
  std::string config_json = "{}";   ///< free-form JSON of the settings used
  std::string host;                 ///< host name (node) the run was taken on
  int64_t started_ns = 0;           ///< host CLOCK_MONOTONIC at t_ns = 0
  int64_t ended_ns = 0;             ///< host CLOCK_MONOTONIC at the end; 0 while open (or after a crash)
  int64_t wall_offset_ns = 0;       ///< Unix-epoch wall-clock ns at t_ns = 0 (wall = t_ns + wall_offset_ns)
  std::string version;              ///< calo version that wrote it (filled by the writer when empty)
  /// The run's identity: a random UUID the writer makes when it creates the store (a value given to
  /// RunWriter is ignored, so no two stores calo made share one); a store written before run.uuid existed
  /// reads back "derived-<16 hex>", a hash of its run row. A copied run directory keeps it: merge refuses it.
  std::string uuid;
};

/// One row of table `device`: a measured GPU or CPU package.
struct DeviceInfo {
  int32_t idx = 0;                     ///< device index within the run (unique; merged runs renumber)
  int32_t node = 0;                    ///< node index (0 for single-node runs)
  int32_t slot = 0;                    ///< local index on its node (e.g. NVML index)
  DeviceKind kind = DeviceKind::kGpu;  ///< gpu | cpu
  std::string name;                    ///< product name, e.g. "NVIDIA H200"
  std::string uuid;                    ///< vendor UUID, empty if unknown
  std::string pci_bus;                 ///< PCI bus id, empty if unknown
  double power_limit_w = 0.0;          ///< enforced power limit, 0 if unknown
  double max_sm_mhz = 0.0;             ///< maximum SM clock, 0 if unknown
  std::string driver;                  ///< driver version, empty if unknown
};

/// One row of table `metric`; ids are small integers assigned by the writer.
struct MetricInfo {
  int32_t id = 0;                        ///< integer id used by samples
  std::string name;                      ///< unit-suffixed name, e.g. "power_instant_w"
  std::string unit;                      ///< unit, e.g. "W", "J", "C", "MHz", "pct", "bytes", "s", "mask"
  MetricKind kind = MetricKind::kGauge;  ///< gauge | counter | bitmask
};

/// One row of table `sample`: one value of one metric of one device.
struct Sample {
  int32_t device_idx = 0;               ///< DeviceInfo::idx
  int32_t metric_id = 0;                ///< MetricInfo::id (from RunWriter::metric_id)
  int64_t t_ns = 0;                     ///< host time the value was read, ns since run start
  double value = 0.0;                   ///< value in the metric's unit
  int64_t sensor_t_ns = kNoSensorTime;  ///< the sensor's own timestamp on the run time base, or kNoSensorTime
};

/// One row of table `span`: a named time interval (step, phase, op, kernel).
struct Span {
  int32_t rank = kNone;              ///< training rank, kNone if not rank-specific
  int32_t device_idx = kNone;        ///< device, kNone if the span covers all devices
  SpanKind kind = SpanKind::kPhase;  ///< step | phase | op | kernel
  std::string name;                  ///< e.g. "gemm", "step", "fwd.attn"
  std::string category;              ///< free grouping, e.g. "compute", "comm"; may be empty
  int64_t t_begin_ns = 0;            ///< begin, ns since run start
  int64_t t_end_ns = 0;              ///< end, ns since run start (>= t_begin_ns)
  int64_t step = kNone;              ///< training step number, kNone if n/a
  int32_t microbatch = kNone;        ///< microbatch index, kNone if n/a
  int32_t stage = kNone;             ///< pipeline stage, kNone if n/a
};

/// One row of table `summary`: a named figure over a scope ("run", "gpu0", "phase:gemm/gpu1", ...).
struct SummaryRow {
  std::string scope;   ///< what the figure is about
  std::string key;     ///< figure name, unit-suffixed, e.g. "energy_j"
  double value = 0.0;  ///< the figure
  std::string unit;    ///< its unit
};

/// One row of table `event`: something worth telling the user ("metric X unsupported on GPU 2").
struct Event {
  int64_t t_ns = 0;                      ///< when, ns since run start
  EventLevel level = EventLevel::kInfo;  ///< info | warning | error
  int32_t device_idx = kNone;            ///< device concerned, kNone if none
  std::string source;                    ///< who reported it, e.g. "nvml", "sampler", "store"
  std::string message;                   ///< human-readable text
};

/// Writer settings.
struct WriterOptions {
  int64_t commit_interval_ns = 1'000'000'000;  ///< at most this long between commits (crash loses <= this)
  std::size_t max_queued_samples = 64u << 20;  ///< queue grows up to this many samples; beyond, samples drop
  bool create_indexes_on_finish = true;        ///< build the (device, metric, t) index in finish()
  /// Spans, summaries and events queued before append_span waits for the writer thread to take them (a
  /// simulated run's millions of op spans queued whole held ~0.13 KB each until the writer caught up).
  std::size_t max_queued_misc = 1u << 17;
};

/// Counters of a writer, for reports and the ingest benchmark.
struct WriterStats {
  uint64_t samples_appended = 0;      ///< samples accepted by append()
  uint64_t samples_committed = 0;     ///< samples durably committed
  uint64_t samples_dropped = 0;       ///< samples refused because the queue was full (target: 0)
  uint64_t samples_not_a_number = 0;  ///< samples left out because their value was NaN (no value to store)
  uint64_t commits = 0;               ///< transactions committed
  uint64_t max_queued_samples = 0;    ///< largest queue depth seen
  uint64_t max_queued_misc = 0;       ///< largest span/summary/event queue depth seen
  int64_t writer_cpu_ns = 0;          ///< CPU time of the writer thread so far (CLOCK_THREAD_CPUTIME_ID)
  int64_t writer_busy_ns = 0;         ///< wall time the writer thread spent inside commits
};

/// Creates `parent/<YYYY-MM-DD>-<name>/` (with -2, -3, ... if taken) and returns it; InputError if not
/// writable.
std::filesystem::path make_run_dir(const std::filesystem::path& parent, std::string_view name);

/// Throws InputError (naming the fix) when `run_dir` already holds a run; RunWriter checks the same on open,
/// and multi-rank commands call this before any rank starts (a rank that fails alone would leave its peers
/// waiting).
void require_no_run(const std::filesystem::path& run_dir);

/// `info` as stored by a file of schema `schema_version` (PRAGMA user_version), in today's meaning: schema-1
/// `record` and `bench` runs held the wall-clock time at the host's CLOCK_MONOTONIC zero in wall_offset_ns,
/// which becomes the wall-clock time at t_ns = 0 (+ started_ns). RunReader::run() applies it.
RunInfo migrate_run_info(RunInfo info, int64_t schema_version);

/// Appends one run to run_dir/run.db from any number of threads; a background thread commits in batches.
class RunWriter {
 public:
  /// Creates run_dir (if needed) and a fresh run.db; InputError if the directory is not writable or a
  /// run.db already exists there.
  RunWriter(const std::filesystem::path& run_dir, RunInfo info, WriterOptions options = {});
  /// Calls finish() if not done yet (errors are swallowed here; call finish() to see them).
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  /// Registers (or replaces) a device row; thread-safe.
  void add_device(const DeviceInfo& device);
  /// Returns the id of metric `name`, registering it on first use; thread-safe. Kind/unit of the first call
  /// win.
  int32_t metric_id(std::string_view name, std::string_view unit, MetricKind kind);
  /// Queues one sample; thread-safe, never blocks on disk. Drops (and counts) only past max_queued_samples.
  void append(const Sample& sample);
  /// Queues many samples under one lock; thread-safe.
  void append(std::span<const Sample> samples);
  /// Queues one span; thread-safe. Waits for the writer thread to take the queue once it holds
  /// WriterOptions::max_queued_misc spans, summaries and events.
  void append_span(const Span& span);
  /// Queues one summary row; thread-safe.
  void add_summary(const SummaryRow& row);
  /// Queues one event row; thread-safe.
  void log_event(const Event& event);
  /// Blocks until everything appended so far is committed.
  void flush();
  /// Records ended_ns (host CLOCK_MONOTONIC), commits everything, builds indexes, stops the writer thread.
  /// Idempotent. Dropped samples, if any, are logged as an event first. Throws RuntimeFailure on a disk
  /// error.
  void finish(int64_t ended_ns);
  /// Current counters.
  WriterStats stats() const;
  /// The run directory.
  const std::filesystem::path& run_dir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Reads one run (finished, still open, or crashed). Not thread-safe; open one reader per thread.
class RunReader {
 public:
  /// Opens run_dir/run.db (or a path to a .db file) read-only; InputError if it is missing, not a run, or
  /// its run times are damaged (run() checks them; every command reading a store passes through here).
  explicit RunReader(const std::filesystem::path& run_dir_or_db);
  ~RunReader();
  RunReader(RunReader&&) noexcept;
  RunReader& operator=(RunReader&&) noexcept;

  /// The run row; InputError naming the file if started_ns / ended_ns lie outside [0, kMaxRunTimeNs] or a
  /// schema-1 wall_offset_ns cannot be migrated without overflow.
  RunInfo run() const;
  /// Devices ordered by idx.
  std::vector<DeviceInfo> devices() const;
  /// Metrics ordered by id.
  std::vector<MetricInfo> metrics() const;
  /// The metric called `name`, if the run has it.
  std::optional<MetricInfo> find_metric(std::string_view name) const;
  /// Calls `visit` for every sample of (device_idx, metric_id) with t_ns in [t_begin_ns, t_end_ns), time
  /// order; t_end_ns = int64 max (the default) means no upper bound.
  void for_each_sample(int32_t device_idx, int32_t metric_id, const std::function<void(const Sample&)>& visit,
                       int64_t t_begin_ns = std::numeric_limits<int64_t>::min(),
                       int64_t t_end_ns = std::numeric_limits<int64_t>::max()) const;
  /// Samples of (device_idx, metric_id) with t_ns in [t_begin_ns, t_end_ns), time order.
  std::vector<Sample> samples(int32_t device_idx, int32_t metric_id,
                              int64_t t_begin_ns = std::numeric_limits<int64_t>::min(),
                              int64_t t_end_ns = std::numeric_limits<int64_t>::max()) const;
  /// Calls `visit` for every sample of the run ordered by (t_ns, device_idx, metric_id).
  void for_each_sample_in_time_order(const std::function<void(const Sample&)>& visit) const;
  /// Number of samples in the run.
  int64_t sample_count() const;
  /// Calls `visit` for every sample stored after row `after_rowid`, in arrival (rowid) order, and returns the
  /// last rowid visited (`after_rowid` if none): a live reader follows a growing run at the cost of the new
  /// rows.
  int64_t for_each_sample_since(int64_t after_rowid, const std::function<void(const Sample&)>& visit) const;
  /// Calls `visit` for every span of `kind` stored after row `after_rowid` (rowid order); returns the last
  /// rowid.
  int64_t for_each_span_since(int64_t after_rowid, SpanKind kind,
                              const std::function<void(const Span&)>& visit) const;
  /// Spans (all kinds, or only `kind`) ordered by (t_begin_ns, rank, device_idx).
  std::vector<Span> spans(std::optional<SpanKind> kind = std::nullopt) const;
  /// Summary rows (all, or those of `scope`) in insertion order.
  std::vector<SummaryRow> summaries(std::optional<std::string_view> scope = std::nullopt) const;
  /// Event rows in time order.
  std::vector<Event> events() const;
  /// Path of the run directory.
  const std::filesystem::path& run_dir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace calo::store
