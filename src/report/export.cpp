// Streaming exporters: samples are written as they are read, never held in memory.
#include "report/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output_file.h"
#include "store/run_store.h"

namespace calo::report {
namespace {

std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump();
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
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
        fmt::print(out, R"({{"ph":"C","pid":{},"tid":0,"name":{},"ts":{}.{:03},"args":{{"value":{}}}}})",
                   device.idx, name, sample.t_ns / 1000, sample.t_ns % 1000,
                   std::isfinite(sample.value) ? sample.value : 0.0);
        ++stats.samples;
      });
    }
  }
  for (const auto& span : reader.spans()) {
    separator();
    int32_t pid = span.device_idx >= 0 ? span.device_idx : kRunPid;
    int64_t duration_ns = std::max<int64_t>(0, span.t_end_ns - span.t_begin_ns);
    nlohmann::json args = {{"category", span.category}};
    if (span.rank >= 0) args["rank"] = span.rank;
    if (span.step >= 0) args["step"] = span.step;
    if (span.microbatch >= 0) args["microbatch"] = span.microbatch;
    if (span.stage >= 0) args["stage"] = span.stage;
    fmt::print(out,
               R"({{"ph":"X","pid":{},"tid":{},"name":{},"cat":{},"ts":{}.{:03},"dur":{}.{:03},"args":{}}})",
               pid, span_thread(span.kind), json_string(span.name),
               json_string(std::string(store::to_string(span.kind))), span.t_begin_ns / 1000,
               span.t_begin_ns % 1000, duration_ns / 1000, duration_ns % 1000, args.dump());
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
    std::FILE* file = samples.stream();
    std::fputs("t_ns,device_idx,metric,unit,value,sensor_t_ns\n", file);
    reader.for_each_sample_in_time_order([&](const store::Sample& sample) {
      auto id = static_cast<std::size_t>(sample.metric_id);
      const std::string& name = id < metric_names.size() ? metric_names[id] : std::string();
      const std::string& unit = id < metric_units.size() ? metric_units[id] : std::string();
      if (sample.sensor_t_ns == store::kNoSensorTime) {
        fmt::print(file, "{},{},{},{},{},\n", sample.t_ns, sample.device_idx, name, unit, sample.value);
      } else {
        fmt::print(file, "{},{},{},{},{},{}\n", sample.t_ns, sample.device_idx, name, unit, sample.value,
                   sample.sensor_t_ns);
      }
      ++stats.samples;
    });
  }
  {
    std::FILE* file = spans.stream();
    std::fputs("kind,rank,device_idx,name,category,t_begin_ns,t_end_ns,step,microbatch,stage\n", file);
    for (const auto& span : reader.spans()) {
      fmt::print(file, "{},{},{},{},{},{},{},{},{},{}\n", store::to_string(span.kind), span.rank,
                 span.device_idx, csv_field(span.name), csv_field(span.category), span.t_begin_ns,
                 span.t_end_ns, span.step, span.microbatch, span.stage);
      ++stats.spans;
    }
  }
  {
    std::FILE* file = summaries.stream();
    std::fputs("scope,key,value,unit\n", file);
    for (const auto& row : reader.summaries()) {
      fmt::print(file, "{},{},{},{}\n", csv_field(row.scope), csv_field(row.key), row.value,
                 csv_field(row.unit));
    }
  }
  for (core::StagedFile* staged : {&samples, &spans, &summaries}) stats.bytes += staged->close();
  for (core::StagedFile* staged : {&samples, &spans, &summaries}) staged->commit();
  return stats;
}

}  // namespace

}  // namespace calo::report
