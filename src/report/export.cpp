// Streaming exporters: samples are written as they are read, never held in memory.
#include "report/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/csv.h"
#include "core/error.h"
#include "core/output_file.h"
#include "store/run_store.h"

namespace calo::report {
namespace {

// `text` as a JSON string; bytes that are not UTF-8 become U+FFFD (a name read from a damaged store or a
// foreign trace must not end the export, nor make the file unreadable).
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// `value` as a JSON number, or null for NaN and ±Inf (JSON has no literal for them).
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{}", value) : "null";
}

// end - begin, 0 when negative, int64's largest value when the difference overflows (a damaged span).
int64_t span_duration_ns(int64_t begin_ns, int64_t end_ns) {
  int64_t duration_ns = 0;
  if (__builtin_sub_overflow(end_ns, begin_ns, &duration_ns)) return end_ns > begin_ns ? INT64_MAX : 0;
  return std::max<int64_t>(0, duration_ns);
}

int32_t span_thread(store::SpanKind kind) {
  switch (kind) {
    case store::SpanKind::kStep:
      return 1;
    case store::SpanKind::kPhase:
      return 2;
    case store::SpanKind::kOp:
      return 3;
    case store::SpanKind::kKernel:
      return 4;
  }
  return 5;
}

}  // namespace

std::string microseconds_text(int64_t time_ns) {
  // The magnitude in unsigned arithmetic: INT64_MIN has no positive int64, and / and % of a negative value
  // would put a minus sign on both parts ("-9223372036854775.-808").
  const bool negative = time_ns < 0;
  const uint64_t magnitude_ns =
      negative ? 0 - static_cast<uint64_t>(time_ns) : static_cast<uint64_t>(time_ns);
  return fmt::format("{}{}.{:03}", negative ? "-" : "", magnitude_ns / 1000, magnitude_ns % 1000);
}

ExportStats export_perfetto(const std::filesystem::path& run_dir, const std::filesystem::path& out_file) {
  store::RunReader reader(run_dir);
  auto devices = reader.devices();
  auto metrics = reader.metrics();
  auto run = reader.run();
  ExportStats stats;
  core::StagedFile file(out_file);
  std::FILE* out = file.stream();
  fmt::print(out,
             "{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"run\":{},\"kind\":\"{}\",\"command\":{}}},\n",
             json_string(run.name), store::to_string(run.kind), json_string(run.command));
  fmt::print(out, "\"traceEvents\":[\n");
  bool first = true;
  auto separator = [&] {
    if (!first) std::fputs(",\n", out);
    first = false;
  };
  constexpr int32_t kRunPid = 1'000'000;  // spans that cover all devices
  for (const auto& device : devices) {
    separator();
    fmt::print(out, R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})", device.idx,
               json_string(fmt::format("GPU {} (node {}, slot {}) {}", device.idx, device.node, device.slot,
                                       device.name)));
    separator();
    fmt::print(out, R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
               device.idx, device.idx);
    for (auto kind :
         {store::SpanKind::kStep, store::SpanKind::kPhase, store::SpanKind::kOp, store::SpanKind::kKernel}) {
      separator();
      fmt::print(out, R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}s"}}}})",
                 device.idx, span_thread(kind), store::to_string(kind));
    }
  }
  separator();
  fmt::print(out, R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"run"}}}})", kRunPid);
  // Counter tracks: Chrome counter events are keyed by (pid, name); ts in µs with ns precision.
  for (const auto& device : devices) {
    for (const auto& metric : metrics) {
      std::string name = json_string(fmt::format("{} [{}]", metric.name, metric.unit));
      reader.for_each_sample(device.idx, metric.id, [&](const store::Sample& sample) {
        separator();
        fmt::print(out, R"({{"ph":"C","pid":{},"tid":0,"name":{},"ts":{},"args":{{"value":{}}}}})",
                   device.idx, name, microseconds_text(sample.t_ns), json_number(sample.value));
        ++stats.samples;
      });
    }
  }
  for (const auto& span : reader.spans()) {
    separator();
    int32_t pid = span.device_idx >= 0 ? span.device_idx : kRunPid;
    const int64_t duration_ns = span_duration_ns(span.t_begin_ns, span.t_end_ns);
    nlohmann::json args = {{"category", span.category}};
    if (span.rank >= 0) args["rank"] = span.rank;
    if (span.step >= 0) args["step"] = span.step;
    if (span.microbatch >= 0) args["microbatch"] = span.microbatch;
    if (span.stage >= 0) args["stage"] = span.stage;
    fmt::print(out, R"({{"ph":"X","pid":{},"tid":{},"name":{},"cat":{},"ts":{},"dur":{},"args":{}}})", pid,
               span_thread(span.kind), json_string(span.name),
               json_string(std::string(store::to_string(span.kind))), microseconds_text(span.t_begin_ns),
               microseconds_text(duration_ns),
               args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    ++stats.spans;
  }
  std::fputs("\n]}\n", out);
  stats.bytes = file.close();
  file.commit();
  return stats;
}

namespace {

ExportStats write_csv_files(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir);

}  // namespace

ExportStats export_csv(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir) {
  core::require_directory_target(out_dir, "--out");
  const bool out_dir_existed = std::filesystem::exists(out_dir);
  try {
    return write_csv_files(run_dir, out_dir);
  } catch (...) {
    std::error_code ignored;
    if (!out_dir_existed)
      std::filesystem::remove(out_dir, ignored);  // the folder made for it, if still empty
    throw;
  }
}

namespace {

// The three CSV files, staged and renamed together once all are complete.
ExportStats write_csv_files(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir) {
  store::RunReader reader(run_dir);
  auto metrics = reader.metrics();
  std::vector<std::string> metric_names;
  std::vector<std::string> metric_units;
  for (const auto& metric : metrics) {
    auto id = static_cast<std::size_t>(std::max(metric.id, 0));
    if (metric_names.size() <= id) {
      metric_names.resize(id + 1);
      metric_units.resize(id + 1);
    }
    metric_names[id] = metric.name;
    metric_units[id] = metric.unit;
  }
  ExportStats stats;
  // All three are staged and renamed only once every one is complete.
  core::StagedFile samples(out_dir / "samples.csv"), spans(out_dir / "spans.csv"),
      summaries(out_dir / "summaries.csv");
  {
    core::CsvWriter csv(samples.stream());
    csv.header({"t_ns", "device_idx", "metric", "unit", "value", "sensor_t_ns"});
    reader.for_each_sample_in_time_order([&](const store::Sample& sample) {
      auto id = static_cast<std::size_t>(sample.metric_id);
      const std::string& name = id < metric_names.size() ? metric_names[id] : std::string();
      const std::string& unit = id < metric_units.size() ? metric_units[id] : std::string();
      csv.integer(sample.t_ns).integer(sample.device_idx).text(name).text(unit).number(sample.value);
      if (sample.sensor_t_ns == store::kNoSensorTime) {
        csv.blank();
      } else {
        csv.integer(sample.sensor_t_ns);
      }
      csv.end_row();
      ++stats.samples;
    });
  }
  {
    core::CsvWriter csv(spans.stream());
    csv.header({"kind", "rank", "device_idx", "name", "category", "t_begin_ns", "t_end_ns", "step",
                "microbatch", "stage"});
    for (const auto& span : reader.spans()) {
      csv.text(store::to_string(span.kind)).integer(span.rank).integer(span.device_idx).text(span.name);
      csv.text(span.category).integer(span.t_begin_ns).integer(span.t_end_ns).integer(span.step);
      csv.integer(span.microbatch).integer(span.stage).end_row();
      ++stats.spans;
    }
  }
  {
    core::CsvWriter csv(summaries.stream());
    csv.header({"scope", "key", "value", "unit"});
    for (const auto& row : reader.summaries()) {
      csv.text(row.scope).text(row.key).number(row.value).text(row.unit).end_row();
    }
  }
  for (core::StagedFile* staged : {&samples, &spans, &summaries}) stats.bytes += staged->close();
  for (core::StagedFile* staged : {&samples, &spans, &summaries}) staged->commit();
  return stats;
}

}  // namespace

}  // namespace calo::report
