#include "store/run_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <variant>

#include "core/error.h"
#include "core/time.h"
#include "store/run_store_internal.h"
#include "store/sqlite_db.h"

namespace calo::store {

namespace {

using detail::Database;
using detail::kSchemaVersion;
using detail::Statement;

// Rows bound into one multi-row INSERT (5 parameters each; SQLite allows 32766 parameters).
constexpr std::size_t kRowsPerInsert = 256;
// Largest transaction when the writer has a backlog (about a second of work at the measured insert rate).
constexpr std::size_t kMaxRowsPerTransaction = kRowsPerInsert * 4096;

constexpr std::string_view kSchemaSql = R"sql(
CREATE TABLE run(
  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, command TEXT NOT NULL,
  config_json TEXT NOT NULL, host TEXT NOT NULL, started_ns INTEGER NOT NULL, ended_ns INTEGER NOT NULL,
  wall_offset_ns INTEGER NOT NULL, version TEXT NOT NULL, uuid TEXT NOT NULL);
CREATE TABLE device(
  idx INTEGER PRIMARY KEY, node INTEGER NOT NULL, slot INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
  uuid TEXT NOT NULL, pci_bus TEXT NOT NULL, power_limit_w REAL NOT NULL, max_sm_mhz REAL NOT NULL,
  driver TEXT NOT NULL);
CREATE TABLE metric(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, unit TEXT NOT NULL, kind TEXT NOT NULL);
CREATE TABLE sample(
  device_idx INTEGER NOT NULL, metric_id INTEGER NOT NULL, t_ns INTEGER NOT NULL, value REAL NOT NULL,
  sensor_t_ns INTEGER);
CREATE TABLE span(
  rank INTEGER, device_idx INTEGER, kind TEXT NOT NULL, name TEXT NOT NULL, category TEXT NOT NULL,
  t_begin_ns INTEGER NOT NULL, t_end_ns INTEGER NOT NULL, step INTEGER, microbatch INTEGER, stage INTEGER);
CREATE TABLE summary(
  scope TEXT NOT NULL, key TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL);
CREATE TABLE event(
  t_ns INTEGER NOT NULL, level TEXT NOT NULL, device_idx INTEGER, source TEXT NOT NULL, message TEXT NOT NULL);
)sql";

constexpr std::string_view kIndexSql =
    "CREATE INDEX IF NOT EXISTS sample_by_series ON sample(device_idx, metric_id, t_ns);"
    "CREATE INDEX IF NOT EXISTS span_by_time ON span(t_begin_ns);";

template <typename Enum, std::size_t N>
Enum parse_enum(std::string_view name, const std::array<std::string_view, N>& names, std::string_view what) {
  for (std::size_t index = 0; index < N; ++index) {
    if (names[index] == name) return static_cast<Enum>(index);
  }
  std::string choices;
  for (auto choice : names) choices += (choices.empty() ? "" : ", ") + std::string(choice);
  throw InputError(fmt::format("unknown {} '{}': valid choices are {}", what, name, choices));
}

constexpr std::array<std::string_view, 4> kRunKindNames{"record", "bench", "sim", "ingest"};
constexpr std::array<std::string_view, 3> kMetricKindNames{"gauge", "counter", "bitmask"};
constexpr std::array<std::string_view, 4> kSpanKindNames{"step", "phase", "op", "kernel"};
constexpr std::array<std::string_view, 2> kDeviceKindNames{"gpu", "cpu"};
constexpr std::array<std::string_view, 3> kEventLevelNames{"info", "warning", "error"};

// A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", from the system's entropy source.
std::string new_run_uuid() {
  std::random_device entropy;
  std::array<uint8_t, 16> bytes{};
  for (std::size_t index = 0; index < bytes.size(); index += 4) {
    const uint32_t word = entropy();
    for (std::size_t shift = 0; shift < 4; ++shift)
      bytes[index + shift] = static_cast<uint8_t>(word >> (8 * shift));
  }
  bytes[6] = static_cast<uint8_t>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<uint8_t>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  std::string text;
  for (std::size_t index = 0; index < bytes.size(); ++index) {
    if (index == 4 || index == 6 || index == 8 || index == 10) text += '-';
    text += fmt::format("{:02x}", bytes[index]);
  }
  return text;
}

void bind_optional(Statement& statement, int index, int64_t value) {
  if (value == kNone) {
    statement.bind_null(index);
  } else {
    statement.bind(index, value);
  }
}

// An integer column bound as NULL when it is kNone.
struct Nullable {
  int64_t value = kNone;
};

void bind_value(Statement& statement, int index, Nullable nullable) {
  bind_optional(statement, index, nullable.value);
}

template <typename Value>
void bind_value(Statement& statement, int index, const Value& value) {
  statement.bind(index, value);
}

// Binds `values` to parameters 1, 2, ... in order and runs `statement`.
template <typename... Values>
void insert_row(Statement& statement, const Values&... values) {
  int index = 0;
  (bind_value(statement, ++index, values), ...);
  statement.run();
}

// ended_ns update queued behind the data.
struct RunEnd {
  int64_t ended_ns = 0;
};

using MiscItem = std::variant<DeviceInfo, MetricInfo, Span, SummaryRow, Event, RunEnd>;

// The prepared inserts of one batch's rows other than samples; visiting a MiscItem with it writes the item's
// row.
class MiscRowWriter {
 public:
  // Prepares every insert on `database` (inside the batch's transaction).
  explicit MiscRowWriter(Database& database)
      : insert_device_(database,
                       "INSERT OR REPLACE INTO device(idx, node, slot, kind, name, uuid, pci_bus, "
                       "power_limit_w, max_sm_mhz, driver) VALUES(?,?,?,?,?,?,?,?,?,?)"),
        insert_metric_(database, "INSERT OR IGNORE INTO metric(id, name, unit, kind) VALUES(?,?,?,?)"),
        insert_span_(database,
                     "INSERT INTO span(rank, device_idx, kind, name, category, t_begin_ns, t_end_ns, step, "
                     "microbatch, stage) VALUES(?,?,?,?,?,?,?,?,?,?)"),
        insert_summary_(database, "INSERT INTO summary(scope, key, value, unit) VALUES(?,?,?,?)"),
        insert_event_(database,
                      "INSERT INTO event(t_ns, level, device_idx, source, message) VALUES(?,?,?,?,?)"),
        update_end_(database, "UPDATE run SET ended_ns = ? WHERE id = 1") {}

  // Inserts (or replaces) the device row of `device`.
  void operator()(const DeviceInfo& device) {
    insert_row(insert_device_, int64_t{device.idx}, int64_t{device.node}, int64_t{device.slot},
               to_string(device.kind), device.name, device.uuid, device.pci_bus, device.power_limit_w,
               device.max_sm_mhz, device.driver);
  }

  // Inserts the metric row of `metric` unless its id is already stored.
  void operator()(const MetricInfo& metric) {
    insert_row(insert_metric_, int64_t{metric.id}, metric.name, metric.unit, to_string(metric.kind));
  }

  // Inserts one span row (kNone fields as NULL).
  void operator()(const Span& span) {
    insert_row(insert_span_, Nullable{span.rank}, Nullable{span.device_idx}, to_string(span.kind), span.name,
               span.category, span.t_begin_ns, span.t_end_ns, Nullable{span.step}, Nullable{span.microbatch},
               Nullable{span.stage});
  }

  // Inserts one summary row.
  void operator()(const SummaryRow& row) {
    insert_row(insert_summary_, row.scope, row.key, row.value, row.unit);
  }

  // Inserts one event row (device_idx kNone as NULL).
  void operator()(const Event& event) {
    insert_row(insert_event_, event.t_ns, to_string(event.level), Nullable{event.device_idx}, event.source,
               event.message);
  }

  // Stores the run's ended_ns.
  void operator()(const RunEnd& end) {
    update_end_.bind(1, end.ended_ns);
    update_end_.run();
  }

 private:
  Statement insert_device_;
  Statement insert_metric_;
  Statement insert_span_;
  Statement insert_summary_;
  Statement insert_event_;
  Statement update_end_;
};

// Binds `rows` samples from `first` on to `statement` (5 parameters a row, NULL for kNoSensorTime), runs it
// once and resets it; throws through `database` when the insert fails.
void insert_sample_rows(const Database& database, sqlite3_stmt* statement, const Sample* first,
                        std::size_t rows) {
  int parameter = 1;
  for (std::size_t row = 0; row < rows; ++row) {
    const Sample& sample = first[row];
    sqlite3_bind_int(statement, parameter, sample.device_idx);
    sqlite3_bind_int(statement, parameter + 1, sample.metric_id);
    sqlite3_bind_int64(statement, parameter + 2, sample.t_ns);
    sqlite3_bind_double(statement, parameter + 3, sample.value);
    if (sample.sensor_t_ns == kNoSensorTime) {
      sqlite3_bind_null(statement, parameter + 4);
    } else {
      sqlite3_bind_int64(statement, parameter + 4, sample.sensor_t_ns);
    }
    parameter += 5;
  }
  int code = sqlite3_step(statement);
  sqlite3_reset(statement);
  if (code != SQLITE_DONE) database.check(code, "inserting samples");
}

}  // namespace

std::string_view to_string(RunKind kind) {
  return kRunKindNames.at(static_cast<std::size_t>(kind));
}
std::string_view to_string(MetricKind kind) {
  return kMetricKindNames.at(static_cast<std::size_t>(kind));
}
std::string_view to_string(SpanKind kind) {
  return kSpanKindNames.at(static_cast<std::size_t>(kind));
}
std::string_view to_string(DeviceKind kind) {
  return kDeviceKindNames.at(static_cast<std::size_t>(kind));
}
std::string_view to_string(EventLevel level) {
  return kEventLevelNames.at(static_cast<std::size_t>(level));
}
RunKind parse_run_kind(std::string_view name) {
  return parse_enum<RunKind>(name, kRunKindNames, "run kind");
}
MetricKind parse_metric_kind(std::string_view name) {
  return parse_enum<MetricKind>(name, kMetricKindNames, "metric kind");
}
SpanKind parse_span_kind(std::string_view name) {
  return parse_enum<SpanKind>(name, kSpanKindNames, "span kind");
}
DeviceKind parse_device_kind(std::string_view name) {
  return parse_enum<DeviceKind>(name, kDeviceKindNames, "device kind");
}
EventLevel parse_event_level(std::string_view name) {
  return parse_enum<EventLevel>(name, kEventLevelNames, "event level");
}

std::filesystem::path make_run_dir(const std::filesystem::path& parent, std::string_view name) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 16> date{};
  std::strftime(date.data(), date.size(), "%Y-%m-%d", &local);
  std::string clean_name;
  for (char character : name) {
    bool keep = std::isalnum(static_cast<unsigned char>(character)) || character == '-' || character == '_' ||
                character == '.';
    clean_name += keep ? character : '-';
  }
  if (clean_name.empty()) clean_name = "run";
  std::string base = fmt::format("{}-{}", date.data(), clean_name);
  std::error_code error;
  std::filesystem::create_directories(parent, error);
  if (error) {
    throw InputError(
        fmt::format("cannot create run parent directory {}: {}; pass --out with a writable directory",
                    parent.string(), error.message()));
  }
  for (int attempt = 1; attempt < 10000; ++attempt) {
    std::filesystem::path candidate = parent / (attempt == 1 ? base : fmt::format("{}-{}", base, attempt));
    if (std::filesystem::create_directory(candidate, error)) return candidate;
    if (error) {
      throw InputError(fmt::format("cannot create run directory {}: {}; pass --out with a writable directory",
                                   candidate.string(), error.message()));
    }
  }
  throw InputError(
      fmt::format("too many runs named {} under {}; choose another --out", base, parent.string()));
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

struct RunWriter::Impl {
  std::filesystem::path run_dir;
  RunInfo info;
  WriterOptions options;
  std::unique_ptr<Database> db;
  std::unique_ptr<Statement> insert_sample;   // one row
  std::unique_ptr<Statement> insert_samples;  // kRowsPerInsert rows

  mutable std::mutex mutex;
  std::condition_variable wake_writer;
  std::condition_variable batch_done;
  std::vector<Sample> pending_samples;
  std::vector<MiscItem> pending_misc;
  std::map<std::string, int32_t, std::less<>> metric_ids;
  uint64_t ticket_requested = 0;  // bumped by flush(); writer commits at once when ahead of ticket_done
  uint64_t ticket_done = 0;
  bool stopping = false;
  bool finished = false;
  std::string writer_error;
  WriterStats stats;
  uint64_t dropped_reported = 0;
  std::thread writer_thread;

  void writer_loop();
  void commit_batch(std::vector<Sample>& samples, std::vector<MiscItem>& misc, uint64_t dropped_total);
  // Writes the batch's non-sample rows, then a warning event when more samples were dropped since the last
  // one.
  void write_misc(const std::vector<MiscItem>& misc, uint64_t dropped_total);
  // Inserts `samples` in multi-row steps, committing a backlog in slices of kMaxRowsPerTransaction rows.
  void write_samples(const std::vector<Sample>& samples);
};

void require_no_run(const std::filesystem::path& run_dir) {
  const std::filesystem::path db_path = run_dir / kRunDbName;
  std::error_code error;
  // symlink_status: a link (dangling or not) is something there too; SQLite would create through it.
  if (std::filesystem::exists(std::filesystem::symlink_status(db_path, error))) {
    throw InputError(fmt::format("{} already holds a run ({} exists); choose a new --out directory",
                                 run_dir.string(), db_path.string()));
  }
}

RunWriter::RunWriter(const std::filesystem::path& run_dir, RunInfo info, WriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->run_dir = run_dir;
  impl_->options = options;
  if (info.version.empty()) info.version = CALO_VERSION;
  impl_->info = info;
  std::error_code error;
  std::filesystem::create_directories(run_dir, error);
  if (error) {
    throw InputError(fmt::format("cannot create run directory {}: {}; pass --out with a writable directory",
                                 run_dir.string(), error.message()));
  }
  if (access(run_dir.c_str(), W_OK) != 0) {
    throw InputError(fmt::format("run directory {} is not writable; pass --out with a writable directory",
                                 run_dir.string()));
  }
  require_no_run(run_dir);
  const std::filesystem::path db_path = run_dir / kRunDbName;
  // NOMUTEX: the connection is used by one thread at a time (constructor, writer thread, then finish()).
  impl_->db =
      std::make_unique<Database>(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
  Database& db = *impl_->db;
  db.exec(
      "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;"
      "PRAGMA wal_autocheckpoint=4096;");
  db.exec("BEGIN");
  db.exec(kSchemaSql);
  db.exec(fmt::format("PRAGMA user_version={}", kSchemaVersion));
  info.uuid = new_run_uuid();  // made here, never taken from the caller: no two stores share one
  impl_->info.uuid = info.uuid;
  Statement insert_run(db,
                       "INSERT INTO run(id, kind, name, command, config_json, host, started_ns, ended_ns, "
                       "wall_offset_ns, version, uuid) VALUES(1,?,?,?,?,?,?,?,?,?,?)");
  insert_row(insert_run, to_string(info.kind), info.name, info.command, info.config_json, info.host,
             info.started_ns, info.ended_ns, info.wall_offset_ns, info.version, info.uuid);
  db.exec("COMMIT");
  std::string multi_row_sql =
      "INSERT INTO sample(device_idx, metric_id, t_ns, value, sensor_t_ns) VALUES(?,?,?,?,?)";
  for (std::size_t row = 1; row < kRowsPerInsert; ++row) multi_row_sql += ",(?,?,?,?,?)";
  impl_->insert_samples = std::make_unique<Statement>(db, multi_row_sql);
  impl_->insert_sample = std::make_unique<Statement>(
      db, "INSERT INTO sample(device_idx, metric_id, t_ns, value, sensor_t_ns) VALUES(?,?,?,?,?)");
  impl_->writer_thread = std::thread([impl = impl_.get()] { impl->writer_loop(); });
}

RunWriter::~RunWriter() {
  try {
    finish(impl_->info.ended_ns != 0 ? impl_->info.ended_ns : core::monotonic_ns());
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructors must not throw; finish() reports errors.
  }
}

void RunWriter::Impl::writer_loop() {
  std::vector<Sample> samples;
  std::vector<MiscItem> misc;
  std::unique_lock lock(mutex);
  auto next_commit = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options.commit_interval_ns);
  while (true) {
    wake_writer.wait_until(lock, next_commit, [&] {
      return stopping || ticket_requested > ticket_done || pending_misc.size() >= options.max_queued_misc;
    });
    bool stop_after = stopping;
    uint64_t ticket = ticket_requested;
    samples.swap(pending_samples);
    misc.swap(pending_misc);
    batch_done.notify_all();  // append_span waiting on a full queue may go on
    uint64_t dropped_total = stats.samples_dropped;
    next_commit = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options.commit_interval_ns);
    if (writer_error.empty() && (!samples.empty() || !misc.empty() || dropped_total != dropped_reported)) {
      lock.unlock();
      std::string error;
      int64_t busy_start_ns = core::monotonic_ns();
      try {
        commit_batch(samples, misc, dropped_total);
      } catch (const std::exception& failure) {
        error = failure.what();
      }
      int64_t busy_ns = core::monotonic_ns() - busy_start_ns;
      const int64_t cpu_ns = core::thread_cpu_ns();
      lock.lock();
      stats.writer_busy_ns += busy_ns;
      stats.writer_cpu_ns = cpu_ns;
      if (error.empty()) {
        stats.samples_committed += samples.size();
        stats.commits += 1;
        dropped_reported = dropped_total;
      } else {
        writer_error = error;
      }
    }
    samples.clear();
    misc.clear();
    ticket_done = ticket;
    batch_done.notify_all();
    if (stop_after) break;
  }
}

void RunWriter::Impl::commit_batch(std::vector<Sample>& samples, std::vector<MiscItem>& misc,
                                   uint64_t dropped_total) {
  Database& database = *db;
  database.exec("BEGIN");
  try {
    if (!misc.empty() || dropped_total != dropped_reported) write_misc(misc, dropped_total);
    if (!samples.empty()) write_samples(samples);
    database.exec("COMMIT");
  } catch (...) {
    sqlite3_exec(database.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

void RunWriter::Impl::write_misc(const std::vector<MiscItem>& misc, uint64_t dropped_total) {
  MiscRowWriter writer(*db);
  for (const MiscItem& item : misc) std::visit(writer, item);
  if (dropped_total != dropped_reported) {
    int64_t now_ns = core::monotonic_ns() - info.started_ns;
    writer(Event{now_ns, EventLevel::kWarning, kNone, "store",
                 fmt::format("dropped {} samples so far: the writer queue was full ({} samples); "
                             "raise WriterOptions::max_queued_samples or lower sampling rates",
                             dropped_total, options.max_queued_samples)});
  }
}

void RunWriter::Impl::write_samples(const std::vector<Sample>& samples) {
  // The hot loop talks to the C API directly: persistent prepared statements inserting kRowsPerInsert
  // rows per step (fewer VDBE runs per row), then one row at a time for the remainder.
  Database& database = *db;
  std::size_t position = 0;
  while (samples.size() - position >= kRowsPerInsert) {
    insert_sample_rows(database, insert_samples->raw(), samples.data() + position, kRowsPerInsert);
    position += kRowsPerInsert;
    // A backlog (writer behind the producers) is committed in bounded slices, so the durable part keeps
    // advancing about once a second instead of waiting for one huge transaction.
    if (position % kMaxRowsPerTransaction == 0) {
      database.exec("COMMIT");
      database.exec("BEGIN");
    }
  }
  for (; position < samples.size(); ++position) {
    insert_sample_rows(database, insert_sample->raw(), samples.data() + position, 1);
  }
}

void RunWriter::add_device(const DeviceInfo& device) {
  std::lock_guard lock(impl_->mutex);
  impl_->pending_misc.emplace_back(device);
}

int32_t RunWriter::metric_id(std::string_view name, std::string_view unit, MetricKind kind) {
  std::lock_guard lock(impl_->mutex);
  auto found = impl_->metric_ids.find(name);
  if (found != impl_->metric_ids.end()) return found->second;
  auto id = static_cast<int32_t>(impl_->metric_ids.size() + 1);
  impl_->metric_ids.emplace(std::string(name), id);
  impl_->pending_misc.emplace_back(MetricInfo{id, std::string(name), std::string(unit), kind});
  return id;
}

void RunWriter::append(const Sample& sample) {
  append(std::span<const Sample>(&sample, 1));
}

void RunWriter::append(std::span<const Sample> samples) {
  std::lock_guard lock(impl_->mutex);
  WriterStats& stats = impl_->stats;
  std::size_t queued = impl_->pending_samples.size();
  if (queued + samples.size() > impl_->options.max_queued_samples || impl_->finished) {
    stats.samples_dropped += samples.size();
    return;
  }
  // A NaN is no value: SQLite would store it as NULL, which the NOT NULL column refuses, failing the whole
  // commit (every sample of that second). It is left out and counted; ±Inf is stored as it is.
  const auto is_nan = [](const Sample& sample) { return std::isnan(sample.value); };
  if (std::any_of(samples.begin(), samples.end(), is_nan)) {
    std::copy_if(samples.begin(), samples.end(), std::back_inserter(impl_->pending_samples),
                 [&](const Sample& sample) { return !is_nan(sample); });
    stats.samples_not_a_number +=
        static_cast<uint64_t>(std::count_if(samples.begin(), samples.end(), is_nan));
  } else {
    impl_->pending_samples.insert(impl_->pending_samples.end(), samples.begin(), samples.end());
  }
  stats.samples_appended += samples.size();
  stats.max_queued_samples = std::max<uint64_t>(stats.max_queued_samples, impl_->pending_samples.size());
}

void RunWriter::append_span(const Span& span) {
  std::unique_lock lock(impl_->mutex);
  impl_->pending_misc.emplace_back(span);
  WriterStats& stats = impl_->stats;
  stats.max_queued_misc = std::max<uint64_t>(stats.max_queued_misc, impl_->pending_misc.size());
  if (impl_->pending_misc.size() < impl_->options.max_queued_misc || !impl_->writer_thread.joinable()) return;
  // A full queue: the writer takes it at once (it commits while the caller queues the next ones).
  impl_->wake_writer.notify_one();
  impl_->batch_done.wait(lock, [&] {
    return impl_->pending_misc.size() < impl_->options.max_queued_misc || !impl_->writer_error.empty() ||
           impl_->stopping;
  });
}

void RunWriter::add_summary(const SummaryRow& row) {
  if (std::isnan(row.value)) return;  // no figure (and a NULL the NOT NULL column would refuse)
  std::lock_guard lock(impl_->mutex);
  impl_->pending_misc.emplace_back(row);
}

void RunWriter::log_event(const Event& event) {
  std::lock_guard lock(impl_->mutex);
  impl_->pending_misc.emplace_back(event);
}

void RunWriter::flush() {
  std::unique_lock lock(impl_->mutex);
  if (!impl_->writer_thread.joinable()) return;
  uint64_t ticket = ++impl_->ticket_requested;
  impl_->wake_writer.notify_one();
  impl_->batch_done.wait(lock, [&] { return impl_->ticket_done >= ticket; });
  if (!impl_->writer_error.empty()) throw RuntimeFailure(impl_->writer_error);
}

void RunWriter::finish(int64_t ended_ns) {
  {
    std::unique_lock lock(impl_->mutex);
    if (impl_->finished) return;
    impl_->finished = true;
    impl_->info.ended_ns = ended_ns;
    if (impl_->stats.samples_not_a_number != 0) {
      impl_->pending_misc.emplace_back(Event{ended_ns - impl_->info.started_ns, EventLevel::kWarning, kNone,
                                             "store",
                                             fmt::format("{} samples had no value (NaN) and were not stored",
                                                         impl_->stats.samples_not_a_number)});
    }
    impl_->pending_misc.emplace_back(RunEnd{ended_ns});
    impl_->stopping = true;
    impl_->wake_writer.notify_one();
  }
  impl_->writer_thread.join();
  if (!impl_->writer_error.empty()) throw RuntimeFailure(impl_->writer_error);
  if (impl_->options.create_indexes_on_finish) impl_->db->exec(kIndexSql);
  impl_->db->exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

WriterStats RunWriter::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

const std::filesystem::path& RunWriter::run_dir() const {
  return impl_->run_dir;
}

}  // namespace calo::store
