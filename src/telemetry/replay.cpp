// Replay source: loads the NVML fixture CSV or a calo run and plays it back (pull Source or push into a
// store).
#include "telemetry/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/shell.h"
#include "core/time.h"
#include "telemetry/recorder.h"

namespace calo::telemetry {

namespace {

// One fixture column and the calo metric it becomes.
struct FixtureColumn {
  std::string_view column;            // CSV column with the value
  std::string_view timestamp_column;  // CSV column with NVML's timestamp in µs (wall clock), or ""
  std::string_view metric;            // calo metric name
  std::string_view unit;              // calo unit
  MetricKind kind;                    // gauge | counter | bitmask
  double scale;                       // calo value = CSV value × scale
};

// The fixture's columns (README.md) mapped to DESIGN.md metric names.
constexpr FixtureColumn kFixtureColumns[] = {
    {"power_instant_mw", "power_instant_mw_ts_us", "power_instant_w", "W", MetricKind::kGauge, 1e-3},
    {"power_avg_mw", "power_avg_mw_ts_us", "power_avg_w", "W", MetricKind::kGauge, 1e-3},
    {"energy_mj", "", "energy_j", "J", MetricKind::kCounter, 1e-3},
    {"gpu_temp_c", "", "temp_gpu_c", "C", MetricKind::kGauge, 1.0},
    {"mem_temp_c", "mem_temp_c_ts_us", "temp_mem_c", "C", MetricKind::kGauge, 1.0},
    {"sm_mhz", "", "clock_sm_mhz", "MHz", MetricKind::kGauge, 1.0},
    {"mem_mhz", "", "clock_mem_mhz", "MHz", MetricKind::kGauge, 1.0},
    {"util_gpu", "", "util_gpu_pct", "%", MetricKind::kGauge, 1.0},
    {"util_mem", "", "util_mem_pct", "%", MetricKind::kGauge, 1.0},
    {"reasons", "", "clock_event_reasons", "mask", MetricKind::kBitmask, 1.0},
    {"ev_sw_power_cap_ns", "ev_sw_power_cap_ns_ts_us", "throttle_power_cap_s", "s", MetricKind::kCounter,
     1e-9},
    {"ev_sw_thermal_ns", "ev_sw_thermal_ns_ts_us", "throttle_sw_thermal_s", "s", MetricKind::kCounter, 1e-9},
    {"ev_hw_thermal_ns", "ev_hw_thermal_ns_ts_us", "throttle_hw_thermal_s", "s", MetricKind::kCounter, 1e-9},
    {"ev_hw_power_brake_ns", "ev_hw_power_brake_ns_ts_us", "throttle_power_brake_s", "s",
     MetricKind::kCounter, 1e-9},
    {"ev_sync_boost_ns", "ev_sync_boost_ns_ts_us", "throttle_sync_boost_s", "s", MetricKind::kCounter, 1e-9},
    {"nvlink_tx_kib", "nvlink_tx_kib_ts_us", "nvlink_tx_bytes", "bytes", MetricKind::kCounter, 1024.0},
    {"nvlink_rx_kib", "nvlink_rx_kib_ts_us", "nvlink_rx_bytes", "bytes", MetricKind::kCounter, 1024.0},
};

std::string read_text_file(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    throw InputError(fmt::format(
        "recording {} does not exist; pass a fixture .csv/.csv.gz or a run directory", path.string()));
  }
  if (path.extension() == ".gz") {
    std::string command = "gzip -dc " + core::shell_quote(path.string());
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw RuntimeFailure(fmt::format("cannot run '{}' to read {}", command, path.string()));
    std::string text;
    std::array<char, 1 << 16> buffer{};
    std::size_t got = 0;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), got);
    int status = pclose(pipe);
    if (status != 0) {
      throw InputError(fmt::format("cannot decompress {} with gzip (status {}); is it a valid .gz file?",
                                   path.string(), status));
    }
    return text;
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t begin = 0;
  while (true) {
    std::size_t comma = line.find(',', begin);
    if (comma == std::string_view::npos) {
      fields.push_back(line.substr(begin));
      return fields;
    }
    fields.push_back(line.substr(begin, comma - begin));
    begin = comma + 1;
  }
}

bool parse_double(std::string_view text, double& value) {
  if (text.empty()) return false;
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

bool parse_int(std::string_view text, int64_t& value) {
  if (text.empty()) return false;
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec == std::errc() && result.ptr == text.data() + text.size()) return true;
  double as_double = 0;
  if (!parse_double(text, as_double)) return false;
  value = std::llround(as_double);
  return true;
}

void sort_records(std::vector<ReplayRecord>& records) {
  std::stable_sort(records.begin(), records.end(), [](const ReplayRecord& left, const ReplayRecord& right) {
    if (left.t_ns != right.t_ns) return left.t_ns < right.t_ns;
    if (left.device_position != right.device_position) return left.device_position < right.device_position;
    return left.metric_index < right.metric_index;
  });
}

// Gives each device the metrics it has records of and a default period from the record spacing.
void fill_device_metrics(Recording& recording) {
  std::vector<std::vector<int64_t>> counts(recording.devices.size(),
                                           std::vector<int64_t>(recording.metrics.size(), 0));
  for (const ReplayRecord& record : recording.records) {
    counts[static_cast<std::size_t>(record.device_position)][static_cast<std::size_t>(record.metric_index)] +=
        1;
  }
  int64_t duration_ns = std::max<int64_t>(recording.duration_ns(), 1);
  for (std::size_t device = 0; device < recording.devices.size(); ++device) {
    recording.devices[device].metrics.clear();
    for (std::size_t metric = 0; metric < recording.metrics.size(); ++metric) {
      if (counts[device][metric] == 0) continue;
      MetricInfo info = recording.metrics[metric];
      info.default_period_ns = duration_ns / counts[device][metric];
      recording.devices[device].metrics.push_back(info);
    }
  }
}

// The lines of a text, one at a time, without their "\n" or "\r\n".
class LineReader {
 public:
  explicit LineReader(std::string_view text) : rest_(text) {}
  // Sets `line` to the next line; false at the end of the text.
  bool next(std::string_view& line) {
    if (rest_.empty()) return false;
    std::size_t end = rest_.find('\n');
    line = rest_.substr(0, end);
    rest_ = end == std::string_view::npos ? std::string_view() : rest_.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
  }

 private:
  std::string_view rest_;
};

// The fixture's header: its column names and where the columns every row needs are.
struct FixtureHeader {
  std::vector<std::string_view> names;
  int time_column = -1;   // "t": seconds since the start
  int gpu_column = -1;    // "gpu": the GPU's index
  int phase_column = -1;  // "phase": the workload phase, or -1 if the fixture has none
  // Position of column `name`, or -1.
  int column_of(std::string_view name) const {
    auto found = std::find(names.begin(), names.end(), name);
    return found == names.end() ? -1 : static_cast<int>(found - names.begin());
  }
};

// Reads the header line; throws InputError if the file is empty or lacks the 't' and 'gpu' columns.
FixtureHeader read_fixture_header(LineReader& lines, const std::filesystem::path& csv_path) {
  std::string_view header_line;
  if (!lines.next(header_line))
    throw InputError(fmt::format("{} is empty; expected the fixture CSV", csv_path.string()));
  FixtureHeader header;
  header.names = split_fields(header_line);
  header.time_column = header.column_of("t");
  header.gpu_column = header.column_of("gpu");
  header.phase_column = header.column_of("phase");
  if (header.time_column < 0 || header.gpu_column < 0) {
    throw InputError(fmt::format("{} lacks the 't' and 'gpu' columns of the NVML fixture format (README.md)",
                                 csv_path.string()));
  }
  return header;
}

// Wall clock at t = 0 in ns from the meta.json beside the CSV; 0 when there is none or it does not say.
int64_t read_meta_wall0_ns(const std::filesystem::path& csv_path) {
  int64_t wall0_ns = 0;
  std::filesystem::path meta_path = csv_path.parent_path() / "meta.json";
  if (std::filesystem::exists(meta_path)) {
    try {
      std::ifstream meta_file(meta_path);
      nlohmann::json meta = nlohmann::json::parse(meta_file);
      if (meta.contains("wall0")) wall0_ns = std::llround(meta["wall0"].get<double>() * 1e9);
    } catch (const nlohmann::json::exception& error) {
      throw InputError(fmt::format("{} is not valid JSON: {}", meta_path.string(), error.what()));
    }
  }
  return wall0_ns;
}

// Where one fixture column's values go.
struct ColumnPlan {
  int value_column;      // CSV column with the value
  int timestamp_column;  // CSV column with NVML's timestamp in µs, or -1
  int metric_index;      // into Recording::metrics
  double scale;          // calo value = CSV value × scale
};

// Adds a metric to `recording` for each known fixture column the header has; returns where their values are.
std::vector<ColumnPlan> plan_fixture_columns(const FixtureHeader& header, Recording& recording) {
  std::vector<ColumnPlan> plan;
  for (const FixtureColumn& column : kFixtureColumns) {
    int value_column = header.column_of(column.column);
    if (value_column < 0) continue;
    int timestamp_column = column.timestamp_column.empty() ? -1 : header.column_of(column.timestamp_column);
    MetricInfo info;
    info.name = column.metric;
    info.unit = column.unit;
    info.kind = column.kind;
    info.group = "replay";
    plan.push_back(
        {value_column, timestamp_column, static_cast<int>(recording.metrics.size()), column.scale});
    recording.metrics.push_back(info);
  }
  return plan;
}

// Wall clock at t = 0: from meta.json, else estimated from the first NVML timestamp met.
struct FixtureWall0 {
  int64_t wall0_ns = 0;
  bool known = false;
};

// What reading the rows keeps track of besides the recording.
struct FixtureRowState {
  std::map<int64_t, int32_t> device_of_gpu;  // GPU index -> device position
  std::string current_phase;                 // phase of the previous row
  int64_t last_t_ns = 0;                     // latest row time
  FixtureWall0 wall0;
};

// The device position of GPU `gpu`, adding the device to `recording` the first time it appears.
int32_t device_position_of(int64_t gpu, FixtureRowState& state, Recording& recording) {
  auto [device_entry, inserted] =
      state.device_of_gpu.emplace(gpu, static_cast<int32_t>(state.device_of_gpu.size()));
  if (inserted) {
    DeviceInfo device;
    device.index = static_cast<int>(gpu);
    device.kind = "gpu";
    device.name = "NVIDIA H200 (replay)";
    recording.devices.push_back(device);
  }
  return device_entry->second;
}

// Starts a new phase span at `t_ns` when the row's phase differs from the previous row's (ending that one).
void follow_phase(std::string_view phase, int64_t t_ns, FixtureRowState& state, Recording& recording) {
  if (phase == state.current_phase) return;
  if (!recording.phases.empty()) recording.phases.back().t_end_ns = t_ns;
  recording.phases.push_back(ReplayPhase{std::string(phase), t_ns, t_ns});
  state.current_phase = phase;
}

// Appends one record per planned column with a value in this row (an empty or bad value is an NVML error).
void append_row_records(const std::vector<std::string_view>& fields, const std::vector<ColumnPlan>& plan,
                        int64_t t_ns, int32_t device_position, FixtureWall0& wall0, Recording& recording) {
  for (const ColumnPlan& column : plan) {
    double raw = 0;
    if (!parse_double(fields[static_cast<std::size_t>(column.value_column)], raw)) continue;  // NVML error
    ReplayRecord record;
    record.t_ns = t_ns;
    record.device_position = device_position;
    record.metric_index = column.metric_index;
    record.value = raw * column.scale;
    int64_t timestamp_us = 0;
    if (column.timestamp_column >= 0 &&
        parse_int(fields[static_cast<std::size_t>(column.timestamp_column)], timestamp_us)) {
      if (!wall0.known) {
        wall0.wall0_ns = timestamp_us * 1000 - t_ns;
        wall0.known = true;
      }
      record.sensor_t_ns = timestamp_us * 1000 - wall0.wall0_ns;
    }
    recording.records.push_back(record);
  }
}

// Reads every data row into `recording` (devices, phases, records); throws InputError on a malformed row.
void read_fixture_rows(LineReader& lines, const FixtureHeader& header, const std::vector<ColumnPlan>& plan,
                       const std::filesystem::path& csv_path, FixtureRowState& state, Recording& recording) {
  std::string_view line;
  int64_t line_number = 1;
  while (lines.next(line)) {
    ++line_number;
    if (line.empty()) continue;
    std::vector<std::string_view> fields = split_fields(line);
    if (fields.size() != header.names.size()) {
      throw InputError(fmt::format("{} line {}: {} fields, header has {}", csv_path.string(), line_number,
                                   fields.size(), header.names.size()));
    }
    double t_s = 0;
    int64_t gpu = 0;
    if (!parse_double(fields[static_cast<std::size_t>(header.time_column)], t_s) ||
        !parse_int(fields[static_cast<std::size_t>(header.gpu_column)], gpu)) {
      throw InputError(fmt::format("{} line {}: bad 't' or 'gpu' value", csv_path.string(), line_number));
    }
    int64_t t_ns = std::llround(t_s * 1e9);
    state.last_t_ns = std::max(state.last_t_ns, t_ns);
    const int32_t device_position = device_position_of(gpu, state, recording);
    if (header.phase_column >= 0)
      follow_phase(fields[static_cast<std::size_t>(header.phase_column)], t_ns, state, recording);
    append_row_records(fields, plan, t_ns, device_position, state.wall0, recording);
  }
}

}  // namespace

Recording load_fixture_csv(const std::filesystem::path& csv_path) {
  std::string text = read_text_file(csv_path);
  LineReader lines(text);
  const FixtureHeader header = read_fixture_header(lines, csv_path);
  Recording recording;
  recording.origin = csv_path.string();
  FixtureRowState state;
  state.wall0.wall0_ns = read_meta_wall0_ns(csv_path);
  state.wall0.known = state.wall0.wall0_ns != 0;
  const std::vector<ColumnPlan> plan = plan_fixture_columns(header, recording);
  read_fixture_rows(lines, header, plan, csv_path, state, recording);
  if (!recording.phases.empty()) recording.phases.back().t_end_ns = state.last_t_ns;
  recording.wall_offset_ns = state.wall0.wall0_ns;
  sort_records(recording.records);
  fill_device_metrics(recording);
  return recording;
}

Recording load_run_recording(const std::filesystem::path& run_dir) {
  store::RunReader reader(run_dir);
  Recording recording;
  recording.origin = run_dir.string();
  recording.wall_offset_ns = reader.run().wall_offset_ns;
  std::map<int32_t, int32_t> position_of_device;
  for (const store::DeviceInfo& stored : reader.devices()) {
    DeviceInfo device;
    device.index = stored.slot;
    device.kind = std::string(store::to_string(stored.kind));
    device.name = stored.name;
    device.uuid = stored.uuid;
    device.pci_bus = stored.pci_bus;
    device.driver = stored.driver;
    device.power_limit_w = stored.power_limit_w;
    device.max_sm_mhz = stored.max_sm_mhz;
    position_of_device[stored.idx] = static_cast<int32_t>(recording.devices.size());
    recording.devices.push_back(device);
  }
  std::map<int32_t, int32_t> index_of_metric;
  for (const store::MetricInfo& stored : reader.metrics()) {
    MetricInfo metric;
    metric.name = stored.name;
    metric.unit = stored.unit;
    metric.kind = from_store_kind(stored.kind);
    metric.group = "replay";
    index_of_metric[stored.id] = static_cast<int32_t>(recording.metrics.size());
    recording.metrics.push_back(metric);
  }
  recording.records.reserve(static_cast<std::size_t>(reader.sample_count()));
  reader.for_each_sample_in_time_order([&](const store::Sample& sample) {
    auto device = position_of_device.find(sample.device_idx);
    auto metric = index_of_metric.find(sample.metric_id);
    if (device == position_of_device.end() || metric == index_of_metric.end()) return;  // orphan row
    recording.records.push_back(
        ReplayRecord{sample.t_ns, device->second, metric->second, sample.value, sample.sensor_t_ns});
  });
  for (const store::Span& span : reader.spans()) {
    if (span.kind == store::SpanKind::kPhase && span.device_idx == store::kNone) {
      recording.phases.push_back(ReplayPhase{span.name, span.t_begin_ns, span.t_end_ns});
    } else {
      recording.other_spans.push_back(span);
    }
  }
  fill_device_metrics(recording);
  return recording;
}

Recording load_recording(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path) || path.extension() == ".db") return load_run_recording(path);
  std::string name = path.filename().string();
  if (name.ends_with(".csv") || name.ends_with(".csv.gz")) return load_fixture_csv(path);
  throw InputError(fmt::format(
      "cannot replay {}: expected a run directory, a run.db, or a fixture .csv/.csv.gz", path.string()));
}

ReplayResult play(const Recording& recording, const ReplayOptions& options,
                  const std::function<void(std::span<const ReplayRecord>)>& on_records,
                  const std::function<void(const ReplayPhase&)>& on_phase) {
  require_input(options.speed >= 0, fmt::format("replay speed {} is negative; use 0 (as fast as possible), 1 "
                                                "(recorded pace) or N for N× faster",
                                                options.speed));
  ReplayResult result;
  const int64_t start_wall_ns = core::monotonic_ns();
  const std::vector<ReplayRecord>& records = recording.records;
  const int64_t first_t_ns = records.empty() ? 0 : records.front().t_ns;
  const auto max_batch = static_cast<std::size_t>(std::max<int64_t>(options.max_batch, 1));
  std::size_t next_phase = 0;
  auto due_wall_ns = [&](int64_t t_ns) {
    return start_wall_ns + static_cast<int64_t>(static_cast<double>(t_ns - first_t_ns) / options.speed);
  };
  auto emit_phases_until = [&](int64_t t_ns) {
    while (next_phase < recording.phases.size() && recording.phases[next_phase].t_end_ns <= t_ns) {
      if (on_phase) on_phase(recording.phases[next_phase]);
      ++next_phase;
      ++result.spans;
    }
  };
  std::size_t position = 0;
  while (position < records.size()) {
    std::size_t end = position;
    if (options.speed == 0) {
      end = std::min(records.size(), position + max_batch);
    } else {
      int64_t now_ns = core::monotonic_ns();
      while (end < records.size() && end - position < max_batch && due_wall_ns(records[end].t_ns) <= now_ns)
        ++end;
      if (end == position) {
        int64_t wait_ns = due_wall_ns(records[position].t_ns) - now_ns;
        std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<int64_t>(wait_ns, 0)));
        continue;
      }
    }
    on_records(std::span<const ReplayRecord>(records.data() + position, end - position));
    result.samples += end - position;
    emit_phases_until(records[end - 1].t_ns);
    position = end;
  }
  emit_phases_until(std::numeric_limits<int64_t>::max());
  result.wall_s = static_cast<double>(core::monotonic_ns() - start_wall_ns) / 1e9;
  return result;
}

ReplayResult replay_into(const Recording& recording, store::RunWriter& writer, const ReplayOptions& options) {
  for (std::size_t position = 0; position < recording.devices.size(); ++position)
    writer.add_device(to_store_device(recording.devices[position], static_cast<int>(position)));
  std::vector<int32_t> metric_ids;
  metric_ids.reserve(recording.metrics.size());
  for (const MetricInfo& metric : recording.metrics) {
    metric_ids.push_back(writer.metric_id(metric.name, metric.unit, to_store_kind(metric.kind)));
  }
  std::vector<store::Sample> batch;
  ReplayResult result = play(
      recording, options,
      [&](std::span<const ReplayRecord> records) {
        batch.resize(records.size());
        for (std::size_t index = 0; index < records.size(); ++index) {
          const ReplayRecord& record = records[index];
          batch[index] =
              store::Sample{record.device_position, metric_ids[static_cast<std::size_t>(record.metric_index)],
                            record.t_ns, record.value, record.sensor_t_ns};
        }
        writer.append(batch);
      },
      [&](const ReplayPhase& phase) {
        store::Span span;
        span.kind = store::SpanKind::kPhase;
        span.name = phase.name;
        span.t_begin_ns = phase.t_begin_ns;
        span.t_end_ns = phase.t_end_ns;
        writer.append_span(span);
      });
  for (const store::Span& span : recording.other_spans) {
    writer.append_span(span);
    ++result.spans;
  }
  return result;
}

ReplaySource::ReplaySource(Recording recording, double speed)
    : recording_(std::move(recording)), speed_(speed), start_ns_(core::monotonic_ns()) {
  require_input(speed > 0, fmt::format("replay source speed {} must be > 0 (1 = recorded pace)", speed));
  series_.resize(recording_.devices.size());
  for (std::size_t device = 0; device < recording_.devices.size(); ++device) {
    const std::vector<MetricInfo>& device_metrics = recording_.devices[device].metrics;
    series_[device].resize(device_metrics.size());
    std::map<std::string, std::size_t> local_index;
    for (std::size_t metric = 0; metric < device_metrics.size(); ++metric) {
      local_index[device_metrics[metric].name] = metric;
    }
    std::vector<int> local_of_global(recording_.metrics.size(), -1);
    for (std::size_t metric = 0; metric < recording_.metrics.size(); ++metric) {
      auto found = local_index.find(recording_.metrics[metric].name);
      if (found != local_index.end()) local_of_global[metric] = static_cast<int>(found->second);
    }
    for (const ReplayRecord& record : recording_.records) {
      if (static_cast<std::size_t>(record.device_position) != device) continue;
      int local = local_of_global[static_cast<std::size_t>(record.metric_index)];
      if (local >= 0) series_[device][static_cast<std::size_t>(local)].push_back(record);
    }
  }
}

void ReplaySource::restart(int64_t start_ns) {
  start_ns_ = start_ns;
}

int64_t ReplaySource::replay_time_ns() const {
  int64_t first_t_ns = recording_.records.empty() ? 0 : recording_.records.front().t_ns;
  return first_t_ns + static_cast<int64_t>(static_cast<double>(core::monotonic_ns() - start_ns_) * speed_);
}

bool ReplaySource::finished() const {
  return replay_time_ns() > recording_.duration_ns();
}

std::string ReplaySource::unavailable_reason() const {
  return available() ? "" : fmt::format("recording {} holds no samples", recording_.origin);
}

Reading ReplaySource::read(size_t device_position, size_t metric_index) {
  Reading reading;
  if (device_position >= series_.size() || metric_index >= series_[device_position].size()) {
    reading.status = ReadStatus::kUnsupported;
    reading.error = fmt::format("replay: no metric {} on device {}", metric_index, device_position);
    return reading;
  }
  const std::vector<ReplayRecord>& records = series_[device_position][metric_index];
  int64_t now_t_ns = replay_time_ns();
  auto after =
      std::upper_bound(records.begin(), records.end(), now_t_ns,
                       [](int64_t time_ns, const ReplayRecord& record) { return time_ns < record.t_ns; });
  if (after == records.begin()) {
    reading.status = ReadStatus::kError;
    reading.error = "replay: no value recorded yet at this replay time";
    return reading;
  }
  const ReplayRecord& record = *(after - 1);
  reading.status = ReadStatus::kOk;
  reading.value = record.value;
  if (record.sensor_t_ns != store::kNoSensorTime) {
    int64_t first_t_ns = recording_.records.front().t_ns;
    reading.sensor_t_ns =
        start_ns_ + static_cast<int64_t>(static_cast<double>(record.sensor_t_ns - first_t_ns) / speed_);
  }
  return reading;
}

}  // namespace calo::telemetry
