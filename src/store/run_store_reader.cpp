// Run store reader: opens a run database (read-write when possible, so SQLite can recover a crashed
// writer's WAL) and reads its run, devices, metrics, samples, spans, summaries and events.
#include <fmt/format.h>

#include "core/error.h"
#include "store/run_store.h"
#include "store/run_store_internal.h"
#include "store/sqlite_db.h"

namespace calo::store {

namespace {

using detail::Database;
using detail::kSchemaVersion;
using detail::Statement;

int64_t column_optional(const Statement& statement, int index) {
  return statement.column_is_null(index) ? kNone : statement.column_int(index);
}

// The metric of the current row of a "SELECT id, name, unit, kind FROM metric" query.
MetricInfo metric_of_row(const Statement& query) {
  return MetricInfo{static_cast<int32_t>(query.column_int(0)), query.column_text(1), query.column_text(2),
                    parse_metric_kind(query.column_text(3))};
}

// The sample of the current row of a "SELECT device_idx, metric_id, t_ns, value, sensor_t_ns ..." query.
Sample sample_of_row(const Statement& query) {
  Sample sample;
  sample.device_idx = static_cast<int32_t>(query.column_int(0));
  sample.metric_id = static_cast<int32_t>(query.column_int(1));
  sample.t_ns = query.column_int(2);
  sample.value = query.column_double(3);
  sample.sensor_t_ns = query.column_is_null(4) ? kNoSensorTime : query.column_int(4);
  return sample;
}

}  // namespace

struct RunReader::Impl {
  std::filesystem::path run_dir;
  std::unique_ptr<Database> db;
  int64_t schema_version = kSchemaVersion;  // PRAGMA user_version of the file
  bool has_uuid = true;                     // whether table run has the uuid column (stores before it do not)
};

namespace {

// FNV-1a over `text`, continuing from `hash`.
uint64_t fnv1a(std::string_view text, uint64_t hash) {
  for (const char character : text) {
    hash ^= static_cast<uint8_t>(character);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The identity of a store written before run.uuid existed: a hash of its run row, so a copy of it (same
// row) reads back the same id and two different runs (other host, start or command) different ones.
std::string derived_run_uuid(const RunInfo& info) {
  const std::string row = fmt::format(
      "{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", to_string(info.kind), info.name, info.command,
      info.config_json, info.host, info.started_ns, info.ended_ns, info.wall_offset_ns, info.version);
  return fmt::format("derived-{:016x}", fnv1a(row, 0xcbf29ce484222325ULL));
}

}  // namespace

RunReader::RunReader(const std::filesystem::path& run_dir_or_db) : impl_(std::make_unique<Impl>()) {
  std::filesystem::path db_path = run_dir_or_db;
  if (std::filesystem::is_directory(run_dir_or_db)) {
    db_path = run_dir_or_db / kRunDbName;
    impl_->run_dir = run_dir_or_db;
  } else {
    impl_->run_dir = run_dir_or_db.parent_path();
  }
  if (!std::filesystem::exists(db_path)) {
    throw InputError(fmt::format("{} is not a run: {} does not exist; pass a directory written by calo",
                                 run_dir_or_db.string(), db_path.string()));
  }
  if (!std::filesystem::is_regular_file(db_path)) {  // a FIFO or device would block the open forever
    throw InputError(
        fmt::format("{} is not a run: {} is not a regular file; pass a directory written by calo",
                    run_dir_or_db.string(), db_path.string()));
  }
  // Read-write when possible so SQLite can recover the WAL of a crashed writer; read-only otherwise.
  try {
    impl_->db = std::make_unique<Database>(db_path, SQLITE_OPEN_READWRITE);
  } catch (const InputError&) {
    impl_->db = std::make_unique<Database>(db_path, SQLITE_OPEN_READONLY);
  }
  bool is_run = false;
  try {
    is_run = impl_->db->has_object("run") && impl_->db->has_object("sample") &&
             impl_->db->query_int("SELECT count(*) FROM run") == 1;
  } catch (const RuntimeFailure&) {
    is_run = false;
  }
  if (!is_run) {
    throw InputError(fmt::format("{} is not a calo run database (no run/sample tables); pass a run directory",
                                 db_path.string()));
  }
  impl_->schema_version = impl_->db->query_int("PRAGMA user_version", kSchemaVersion);
  impl_->has_uuid =
      impl_->db->query_int("SELECT count(*) FROM pragma_table_info('run') WHERE name = 'uuid'") == 1;
  run();  // the one check of the run times, on open: no command reads samples of a store it would refuse
}

RunInfo migrate_run_info(RunInfo info, int64_t schema_version) {
  const bool host_clock_offset = info.kind == RunKind::kRecord || info.kind == RunKind::kBench;
  if (schema_version == 1 && host_clock_offset && info.wall_offset_ns != 0) {
    info.wall_offset_ns += info.started_ns;  // wall at CLOCK_MONOTONIC zero + started_ns = wall at t_ns = 0
  }
  return info;
}

RunReader::~RunReader() = default;
RunReader::RunReader(RunReader&&) noexcept = default;
RunReader& RunReader::operator=(RunReader&&) noexcept = default;

RunInfo RunReader::run() const {
  Statement query(
      *impl_->db,
      fmt::format("SELECT kind, name, command, config_json, host, started_ns, ended_ns, wall_offset_ns, "
                  "version, {} FROM run WHERE id = 1",
                  impl_->has_uuid ? "uuid" : "NULL"));
  RunInfo info;
  if (!query.step()) return info;
  info.kind = parse_run_kind(query.column_text(0));
  info.name = query.column_text(1);
  info.command = query.column_text(2);
  info.config_json = query.column_text(3);
  info.host = query.column_text(4);
  info.started_ns = query.column_int(5);
  info.ended_ns = query.column_int(6);
  info.wall_offset_ns = query.column_int(7);
  info.version = query.column_text(8);
  info.uuid = query.column_is_null(9) ? "" : query.column_text(9);
  if (info.uuid.empty()) info.uuid = derived_run_uuid(info);
  // Every duration is ended_ns - started_ns or t_ns + started_ns: times beyond kMaxRunTimeNs would
  // overflow.
  const bool times_valid = info.started_ns >= 0 && info.started_ns <= kMaxRunTimeNs && info.ended_ns >= 0 &&
                           info.ended_ns <= kMaxRunTimeNs;
  int64_t migrated_wall_ns = 0;  // schema 1 adds started_ns to wall_offset_ns (migrate_run_info)
  if (!times_valid || __builtin_add_overflow(info.wall_offset_ns, info.started_ns, &migrated_wall_ns)) {
    throw InputError(fmt::format(
        "{}: damaged run times (started_ns {}, ended_ns {}, wall_offset_ns {}); calo writes started_ns and "
        "ended_ns in [0, 2^62] (ended_ns 0 when interrupted); re-record the run",
        (impl_->run_dir / kRunDbName).string(), info.started_ns, info.ended_ns, info.wall_offset_ns));
  }
  return migrate_run_info(info, impl_->schema_version);
}

std::vector<DeviceInfo> RunReader::devices() const {
  Statement query(
      *impl_->db,
      "SELECT idx, node, slot, kind, name, uuid, pci_bus, power_limit_w, max_sm_mhz, driver FROM device "
      "ORDER BY idx");
  std::vector<DeviceInfo> devices;
  while (query.step()) {
    DeviceInfo device;
    device.idx = static_cast<int32_t>(query.column_int(0));
    device.node = static_cast<int32_t>(query.column_int(1));
    device.slot = static_cast<int32_t>(query.column_int(2));
    device.kind = parse_device_kind(query.column_text(3));
    device.name = query.column_text(4);
    device.uuid = query.column_text(5);
    device.pci_bus = query.column_text(6);
    device.power_limit_w = query.column_double(7);
    device.max_sm_mhz = query.column_double(8);
    device.driver = query.column_text(9);
    devices.push_back(std::move(device));
  }
  return devices;
}

std::vector<MetricInfo> RunReader::metrics() const {
  Statement query(*impl_->db, "SELECT id, name, unit, kind FROM metric ORDER BY id");
  std::vector<MetricInfo> metrics;
  while (query.step()) {
    metrics.push_back(metric_of_row(query));
  }
  return metrics;
}

std::optional<MetricInfo> RunReader::find_metric(std::string_view name) const {
  Statement query(*impl_->db, "SELECT id, name, unit, kind FROM metric WHERE name = ?");
  query.bind(1, name);
  if (!query.step()) return std::nullopt;
  return metric_of_row(query);
}

void RunReader::for_each_sample(int32_t device_idx, int32_t metric_id,
                                const std::function<void(const Sample&)>& visit, int64_t t_begin_ns,
                                int64_t t_end_ns) const {
  Statement query(*impl_->db,
                  "SELECT t_ns, value, sensor_t_ns FROM sample WHERE device_idx = ? AND metric_id = ? "
                  "AND t_ns >= ? AND t_ns <= ? ORDER BY t_ns, rowid");
  query.bind(1, int64_t{device_idx});
  query.bind(2, int64_t{metric_id});
  query.bind(3, t_begin_ns);
  // The last time included: t_end_ns - 1, or every time when t_end_ns is int64's largest (the default: a
  // sample stored at that time is still read, exported and merged).
  query.bind(4, t_end_ns == std::numeric_limits<int64_t>::max() ? t_end_ns : t_end_ns - 1);
  Sample sample;
  sample.device_idx = device_idx;
  sample.metric_id = metric_id;
  while (query.step()) {
    sample.t_ns = query.column_int(0);
    sample.value = query.column_double(1);
    sample.sensor_t_ns = query.column_is_null(2) ? kNoSensorTime : query.column_int(2);
    visit(sample);
  }
}

std::vector<Sample> RunReader::samples(int32_t device_idx, int32_t metric_id, int64_t t_begin_ns,
                                       int64_t t_end_ns) const {
  std::vector<Sample> result;
  for_each_sample(
      device_idx, metric_id, [&](const Sample& sample) { result.push_back(sample); }, t_begin_ns, t_end_ns);
  return result;
}

void RunReader::for_each_sample_in_time_order(const std::function<void(const Sample&)>& visit) const {
  Statement query(*impl_->db,
                  "SELECT device_idx, metric_id, t_ns, value, sensor_t_ns FROM sample "
                  "ORDER BY t_ns, device_idx, metric_id, rowid");
  while (query.step()) visit(sample_of_row(query));
}

int64_t RunReader::for_each_sample_since(int64_t after_rowid,
                                         const std::function<void(const Sample&)>& visit) const {
  Statement query(*impl_->db,
                  "SELECT device_idx, metric_id, t_ns, value, sensor_t_ns, rowid FROM sample WHERE rowid > ? "
                  "ORDER BY rowid");
  query.bind(1, after_rowid);
  int64_t last_rowid = after_rowid;
  while (query.step()) {
    last_rowid = query.column_int(5);
    visit(sample_of_row(query));
  }
  return last_rowid;
}

int64_t RunReader::sample_count() const {
  return impl_->db->query_int("SELECT count(*) FROM sample");
}

namespace {
// One span row: columns rank, device_idx, kind, name, category, t_begin_ns, t_end_ns, step, microbatch,
// stage.
Span read_span_row(const Statement& query) {
  Span span;
  span.rank = static_cast<int32_t>(column_optional(query, 0));
  span.device_idx = static_cast<int32_t>(column_optional(query, 1));
  span.kind = parse_span_kind(query.column_text(2));
  span.name = query.column_text(3);
  span.category = query.column_text(4);
  span.t_begin_ns = query.column_int(5);
  span.t_end_ns = query.column_int(6);
  span.step = column_optional(query, 7);
  span.microbatch = static_cast<int32_t>(column_optional(query, 8));
  span.stage = static_cast<int32_t>(column_optional(query, 9));
  return span;
}
}  // namespace

std::vector<Span> RunReader::spans(std::optional<SpanKind> kind) const {
  std::string sql =
      "SELECT rank, device_idx, kind, name, category, t_begin_ns, t_end_ns, step, microbatch, stage FROM "
      "span";
  if (kind) sql += " WHERE kind = ?";
  sql += " ORDER BY t_begin_ns, rank, device_idx, rowid";
  Statement query(*impl_->db, sql);
  if (kind) query.bind(1, to_string(*kind));
  std::vector<Span> spans;
  while (query.step()) spans.push_back(read_span_row(query));
  return spans;
}

int64_t RunReader::for_each_span_since(int64_t after_rowid, SpanKind kind,
                                       const std::function<void(const Span&)>& visit) const {
  Statement query(
      *impl_->db,
      "SELECT rank, device_idx, kind, name, category, t_begin_ns, t_end_ns, step, microbatch, stage, "
      "rowid FROM span WHERE rowid > ? AND kind = ? ORDER BY rowid");
  query.bind(1, after_rowid);
  query.bind(2, to_string(kind));
  int64_t last_rowid = after_rowid;
  while (query.step()) {
    visit(read_span_row(query));
    last_rowid = query.column_int(10);
  }
  return last_rowid;
}

std::vector<SummaryRow> RunReader::summaries(std::optional<std::string_view> scope) const {
  std::string sql = "SELECT scope, key, value, unit FROM summary";
  if (scope) sql += " WHERE scope = ?";
  sql += " ORDER BY rowid";
  Statement query(*impl_->db, sql);
  if (scope) query.bind(1, *scope);
  std::vector<SummaryRow> rows;
  while (query.step()) {
    rows.push_back(
        SummaryRow{query.column_text(0), query.column_text(1), query.column_double(2), query.column_text(3)});
  }
  return rows;
}

std::vector<Event> RunReader::events() const {
  Statement query(*impl_->db,
                  "SELECT t_ns, level, device_idx, source, message FROM event ORDER BY t_ns, rowid");
  std::vector<Event> events;
  while (query.step()) {
    events.push_back(Event{query.column_int(0), parse_event_level(query.column_text(1)),
                           static_cast<int32_t>(column_optional(query, 2)), query.column_text(3),
                           query.column_text(4)});
  }
  return events;
}

const std::filesystem::path& RunReader::run_dir() const {
  return impl_->run_dir;
}

}  // namespace calo::store
