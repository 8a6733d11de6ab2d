#include "store/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "store/run_store.h"

namespace calo::store {

namespace {
// Samples copied between flushes: keeps the writer's queue (and memory) bounded during a merge.
constexpr std::size_t kMergeFlushSamples = 1u << 20;
}  // namespace

MergeResult merge_runs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                       const std::string& command) {
  require_input(!inputs.empty(), "calo merge needs at least one RUN_DIR; pass the per-node run directories");
  std::vector<RunReader> readers;
  std::vector<RunInfo> infos;
  for (const std::filesystem::path& input : inputs) {
    readers.emplace_back(input);
    infos.push_back(readers.back().run());
    require_input(infos.back().wall_offset_ns != 0,
                  fmt::format("run {} has no wall-clock offset (wall_offset_ns = 0), so its clock cannot be "
                              "aligned with the others; re-record it with calo record",
                              input.string()));
  }
  const std::size_t reference =
      static_cast<std::size_t>(std::min_element(infos.begin(), infos.end(),
                                                [](const RunInfo& left, const RunInfo& right) {
                                                  return left.wall_offset_ns < right.wall_offset_ns;
                                                }) -
                               infos.begin());
  const int64_t wall_reference_ns = infos[reference].wall_offset_ns;

  MergeResult result;
  result.out_dir = out_dir;
  result.nodes = static_cast<int32_t>(inputs.size());
  RunInfo merged;
  merged.kind = infos.front().kind;
  merged.name = "merged";
  merged.command = command;
  merged.started_ns = infos[reference].started_ns;
  merged.wall_offset_ns = wall_reference_ns;
  nlohmann::json config;
  config["merged_from"] = nlohmann::json::array();
  std::vector<std::string> hosts;
  int64_t merged_end_t_ns = 0;
  for (std::size_t node = 0; node < inputs.size(); ++node) {
    int64_t shift_ns = infos[node].wall_offset_ns - wall_reference_ns;
    result.shift_ns.push_back(shift_ns);
    hosts.push_back(infos[node].host);
    config["merged_from"].push_back(
        {{"node", node},
         {"run_dir", inputs[node].string()},
         {"host", infos[node].host},
         {"shift_ns", shift_ns},
         {"config", nlohmann::json::parse(infos[node].config_json, nullptr, false)}});
    int64_t duration_ns = infos[node].ended_ns != 0 ? infos[node].ended_ns - infos[node].started_ns : 0;
    merged_end_t_ns = std::max(merged_end_t_ns, duration_ns + shift_ns);
  }
  merged.host = fmt::format("{}", fmt::join(hosts, ","));
  merged.config_json = config.dump();

  RunWriter writer(out_dir, merged);
  int32_t next_device = 0;
  std::vector<Sample> batch;
  std::size_t since_flush = 0;
  for (std::size_t node = 0; node < inputs.size(); ++node) {
    const RunReader& reader = readers[node];
    const int64_t shift_ns = result.shift_ns[node];
    std::map<int32_t, int32_t> device_map;
    result.first_device.push_back(next_device);
    for (DeviceInfo device : reader.devices()) {
      device_map[device.idx] = next_device;
      device.idx = next_device++;
      device.node = static_cast<int32_t>(node);
      writer.add_device(device);
    }
    auto map_device = [&device_map](int32_t idx) {
      if (idx == kNone) return kNone;
      auto found = device_map.find(idx);
      return found == device_map.end() ? kNone : found->second;
    };
    std::map<int32_t, int32_t> metric_map;
    std::vector<MetricInfo> metrics = reader.metrics();
    for (const MetricInfo& metric : metrics) {
      metric_map[metric.id] = writer.metric_id(metric.name, metric.unit, metric.kind);
    }
    for (const auto& [old_device, mapped_device] : device_map) {
      const int32_t new_device = mapped_device;  // a copy: clang 14 cannot capture a structured binding
      for (const MetricInfo& metric : metrics) {
        batch.clear();
        reader.for_each_sample(old_device, metric.id, [&](const Sample& sample) {
          Sample copy = sample;
          copy.device_idx = new_device;
          copy.metric_id = metric_map[metric.id];
          copy.t_ns += shift_ns;
          if (copy.sensor_t_ns != kNoSensorTime) copy.sensor_t_ns += shift_ns;
          batch.push_back(copy);
          if (batch.size() >= 65536) {
            writer.append(batch);
            since_flush += batch.size();
            batch.clear();
          }
        });
        writer.append(batch);
        since_flush += batch.size();
        if (since_flush >= kMergeFlushSamples) {
          writer.flush();
          since_flush = 0;
        }
      }
    }
    for (Span span : reader.spans()) {
      span.device_idx = map_device(span.device_idx);
      span.t_begin_ns += shift_ns;
      span.t_end_ns += shift_ns;
      writer.append_span(span);
      ++result.spans;
    }
    for (SummaryRow row : reader.summaries()) {
      row.scope = fmt::format("node{}/{}", node, row.scope);
      writer.add_summary(row);
    }
    for (Event event : reader.events()) {
      event.t_ns += shift_ns;
      event.device_idx = map_device(event.device_idx);
      event.message = fmt::format("node {} ({}): {}", node, infos[node].host, event.message);
      writer.log_event(event);
    }
  }
  writer.finish(merged.started_ns + merged_end_t_ns);
  WriterStats stats = writer.stats();
  result.samples = static_cast<int64_t>(stats.samples_committed);
  if (stats.samples_dropped != 0) {
    throw RuntimeFailure(fmt::format("merge into {} dropped {} samples (writer queue full)", out_dir.string(),
                                     stats.samples_dropped));
  }
  result.devices = next_device;
  return result;
}

}  // namespace calo::store
