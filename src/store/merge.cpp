#include "store/merge.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "store/run_store.h"

namespace calo::store {

namespace {
// Samples copied between flushes: keeps the writer's queue (and memory) bounded during a merge.
constexpr std::size_t kMergeFlushSamples = 1u << 20;
// Samples handed to the writer at once.
constexpr std::size_t kMergeBatchSamples = 65536;

/// The inputs opened, each checked: a clock to align, and no run given twice (the same directory spelled
/// "R", "./R/" or through a symlink would be merged with itself and its data doubled).
struct OpenInputs {
  std::vector<RunReader> readers;
  std::vector<RunInfo> infos;
};

OpenInputs open_inputs(const std::vector<std::filesystem::path>& inputs) {
  require_input(!inputs.empty(), "calo merge needs at least one RUN_DIR; pass the per-node run directories");
  OpenInputs opened;
  for (std::size_t index = 0; index < inputs.size(); ++index) {
    const std::filesystem::path& input = inputs[index];
    opened.readers.emplace_back(input);
    for (std::size_t earlier = 0; earlier < index; ++earlier) {
      std::error_code error;
      if (std::filesystem::equivalent(inputs[earlier] / kRunDbName, input / kRunDbName, error)) {
        throw InputError(fmt::format("{} and {} are the same run; give each node's run once",
                                     inputs[earlier].string(), input.string()));
      }
    }
    opened.infos.push_back(opened.readers.back().run());
    for (std::size_t earlier = 0; earlier < index; ++earlier) {
      if (opened.infos[earlier].uuid == opened.infos.back().uuid) {
        throw InputError(fmt::format("{} is a copy of {} (same run id {}); merge each run once",
                                     input.string(), inputs[earlier].string(), opened.infos.back().uuid));
      }
    }
    require_input(opened.infos.back().wall_offset_ns != 0,
                  fmt::format("run {} has no wall-clock offset (wall_offset_ns = 0), so its clock cannot be "
                              "aligned with the others; re-record it with calo record",
                              input.string()));
  }
  return opened;
}

/// `time_ns + shift_ns`, or InputError naming `input` and `what` when the sum leaves int64 (a damaged
/// time or wall_offset_ns): never a wrapped time in the merged run.
int64_t shifted_ns(int64_t time_ns, int64_t shift_ns, const std::filesystem::path& input, const char* what) {
  int64_t sum_ns = 0;
  if (__builtin_add_overflow(time_ns, shift_ns, &sum_ns)) {
    throw InputError(
        fmt::format("{}: {} {} shifted by {} ns overflows 64-bit nanoseconds; the run's times or "
                    "wall_offset_ns are damaged; leave it out of the merge or re-record it",
                    input.string(), what, time_ns, shift_ns));
  }
  return sum_ns;
}

/// The shift of run `info` onto the time base of `reference` (its wall_offset_ns minus the reference's),
/// InputError naming `input` when the difference overflows int64.
int64_t merge_shift_ns(const RunInfo& info, const RunInfo& reference, const std::filesystem::path& input) {
  int64_t shift_ns = 0;
  if (__builtin_sub_overflow(info.wall_offset_ns, reference.wall_offset_ns, &shift_ns)) {
    throw InputError(
        fmt::format("{}: wall_offset_ns {} is too far from the earliest run's ({}) to align (the "
                    "shift overflows 64-bit nanoseconds); its wall clock is damaged, leave it out "
                    "of the merge",
                    input.string(), info.wall_offset_ns, reference.wall_offset_ns));
  }
  return shift_ns;
}

/// The merged run's description; fills the result's per-input shifts (the earliest run is the time base).
RunInfo describe_merge(const std::vector<std::filesystem::path>& inputs, const std::vector<RunInfo>& infos,
                       const std::string& command, MergeResult& result, int64_t& merged_end_t_ns) {
  const RunInfo& reference = *std::min_element(
      infos.begin(), infos.end(),
      [](const RunInfo& left, const RunInfo& right) { return left.wall_offset_ns < right.wall_offset_ns; });
  RunInfo merged;
  merged.kind = infos.front().kind;
  merged.name = "merged";
  merged.command = command;
  merged.started_ns = reference.started_ns;
  merged.wall_offset_ns = reference.wall_offset_ns;
  nlohmann::json config;
  config["merged_from"] = nlohmann::json::array();
  std::vector<std::string> hosts;
  merged_end_t_ns = 0;
  for (std::size_t node = 0; node < inputs.size(); ++node) {
    const int64_t shift_ns = merge_shift_ns(infos[node], reference, inputs[node]);
    result.shift_ns.push_back(shift_ns);
    hosts.push_back(infos[node].host);
    config["merged_from"].push_back(
        {{"node", node},
         {"run_dir", inputs[node].string()},
         {"host", infos[node].host},
         {"shift_ns", shift_ns},
         {"config", nlohmann::json::parse(infos[node].config_json, nullptr, false)}});
    const int64_t duration_ns = infos[node].ended_ns != 0 ? infos[node].ended_ns - infos[node].started_ns : 0;
    const int64_t end_t_ns = shifted_ns(duration_ns, shift_ns, inputs[node], "its end");
    // The merged run's ended_ns (started_ns + end) must be a time RunReader accepts.
    if (end_t_ns > kMaxRunTimeNs - merged.started_ns) {
      throw InputError(
          fmt::format("{}: its end shifted by {} ns lies past the latest run time calo stores "
                      "(2^62 ns); its wall_offset_ns is damaged, leave it out of the merge",
                      inputs[node].string(), shift_ns));
    }
    merged_end_t_ns = std::max(merged_end_t_ns, end_t_ns);
  }
  merged.host = fmt::format("{}", fmt::join(hosts, ","));
  merged.config_json = config.dump();
  return merged;
}

/// Copies one input run into the merged one as node `node`: devices renumbered from `next_device`, metrics
/// unified by name, every time shifted by `shift_ns`, summary scopes and event messages prefixed by the node.
class NodeCopier {
 public:
  NodeCopier(RunWriter& writer, MergeResult& result) : writer_(writer), result_(result) {}

  void copy(const RunReader& reader, const RunInfo& info, std::size_t node,
            const std::filesystem::path& input) {
    shift_ns_ = result_.shift_ns[node];
    input_ = input;
    result_.first_device.push_back(next_device_);
    device_map_.clear();
    for (DeviceInfo device : reader.devices()) {
      device_map_[device.idx] = next_device_;
      device.idx = next_device_++;
      device.node = static_cast<int32_t>(node);
      writer_.add_device(device);
    }
    copy_samples(reader);
    for (Span span : reader.spans()) {
      span.device_idx = map_device(span.device_idx);
      span.t_begin_ns = shifted_ns(span.t_begin_ns, shift_ns_, input_, "span begin");
      span.t_end_ns = shifted_ns(span.t_end_ns, shift_ns_, input_, "span end");
      writer_.append_span(span);
      ++result_.spans;
    }
    for (SummaryRow row : reader.summaries()) {
      row.scope = fmt::format("node{}/{}", node, row.scope);
      writer_.add_summary(row);
    }
    for (Event event : reader.events()) {
      event.t_ns = shifted_ns(event.t_ns, shift_ns_, input_, "event time");
      event.device_idx = map_device(event.device_idx);
      event.message = fmt::format("node {} ({}): {}", node, info.host, event.message);
      writer_.log_event(event);
    }
  }

  int32_t devices() const { return next_device_; }

 private:
  int32_t map_device(int32_t idx) const {
    if (idx == kNone) return kNone;
    auto found = device_map_.find(idx);
    return found == device_map_.end() ? kNone : found->second;
  }

  void copy_samples(const RunReader& reader) {
    std::map<int32_t, int32_t> metric_map;
    const std::vector<MetricInfo> metrics = reader.metrics();
    for (const MetricInfo& metric : metrics) {
      metric_map[metric.id] = writer_.metric_id(metric.name, metric.unit, metric.kind);
    }
    for (const auto& [old_device, mapped_device] : device_map_) {
      const int32_t new_device = mapped_device;  // a copy: clang 14 cannot capture a structured binding
      for (const MetricInfo& metric : metrics) {
        const int32_t new_metric = metric_map[metric.id];
        reader.for_each_sample(old_device, metric.id, [&](const Sample& sample) {
          Sample copy = sample;
          copy.device_idx = new_device;
          copy.metric_id = new_metric;
          copy.t_ns = shifted_ns(copy.t_ns, shift_ns_, input_, "sample time");
          if (copy.sensor_t_ns != kNoSensorTime)
            copy.sensor_t_ns = shifted_ns(copy.sensor_t_ns, shift_ns_, input_, "sensor time");
          batch_.push_back(copy);
          if (batch_.size() >= kMergeBatchSamples) hand_over();
        });
        hand_over();
      }
    }
  }

  void hand_over() {
    writer_.append(batch_);
    since_flush_ += batch_.size();
    batch_.clear();
    if (since_flush_ >= kMergeFlushSamples) {
      writer_.flush();
      since_flush_ = 0;
    }
  }

  RunWriter& writer_;
  MergeResult& result_;
  int32_t next_device_ = 0;
  int64_t shift_ns_ = 0;
  std::filesystem::path input_;  // the input being copied, named in refusals
  std::map<int32_t, int32_t> device_map_;
  std::vector<Sample> batch_;
  std::size_t since_flush_ = 0;
};

/// A folder beside the merged run's where it is written; removed unless the run is moved out of it.
class StagingFolder {
 public:
  explicit StagingFolder(const std::filesystem::path& out_dir)
      : out_dir_(out_dir),
        path_(out_dir / fmt::format(".merge-partial-{}", getpid())),
        out_dir_existed_(std::filesystem::exists(out_dir)) {}
  ~StagingFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    if (!committed_ && !out_dir_existed_) std::filesystem::remove(out_dir_, ignored);  // only if empty
  }
  /// Moves the finished run database out of the staging folder into the merged run's folder.
  void commit() {
    std::filesystem::rename(path_ / kRunDbName, out_dir_ / kRunDbName);
    committed_ = true;
  }
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path out_dir_;
  std::filesystem::path path_;
  bool out_dir_existed_ = false;
  bool committed_ = false;
};

}  // namespace

MergeResult merge_runs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                       const std::string& command) {
  OpenInputs opened = open_inputs(inputs);
  require_no_run(out_dir);
  MergeResult result;
  result.out_dir = out_dir;
  result.nodes = static_cast<int32_t>(inputs.size());
  int64_t merged_end_t_ns = 0;
  const RunInfo merged = describe_merge(inputs, opened.infos, command, result, merged_end_t_ns);
  // Written in a staging folder and moved into place only when whole: a damaged input found half-way leaves
  // no partial run behind.
  StagingFolder staging(out_dir);
  {
    RunWriter writer(staging.path(), merged);
    NodeCopier copier(writer, result);
    for (std::size_t node = 0; node < inputs.size(); ++node)
      copier.copy(opened.readers[node], opened.infos[node], node, inputs[node]);
    writer.finish(merged.started_ns + merged_end_t_ns);
    const WriterStats stats = writer.stats();
    result.samples = static_cast<int64_t>(stats.samples_committed);
    if (stats.samples_dropped != 0) {
      throw RuntimeFailure(fmt::format("merge into {} dropped {} samples (writer queue full)",
                                       out_dir.string(), stats.samples_dropped));
    }
    result.devices = copier.devices();
  }
  staging.commit();
  return result;
}

}  // namespace calo::store
