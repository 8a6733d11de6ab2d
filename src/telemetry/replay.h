// Replay source: plays back a recording (the NVML fixture CSV[.gz] or a calo run directory) at its recorded
// pace, N× faster, or as fast as possible; as a pull Source for the sampler, or pushed into a run store.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "store/run_store.h"
#include "telemetry/source.h"

namespace calo::telemetry {

/// One recorded value; metric_index indexes Recording::metrics, device_position Recording::devices.
struct ReplayRecord {
  int64_t t_ns = 0;                            ///< recording time, ns since the recording's start
  int32_t device_position = 0;                 ///< index into Recording::devices
  int32_t metric_index = 0;                    ///< index into Recording::metrics
  double value = 0;                            ///< in the metric's unit
  int64_t sensor_t_ns = store::kNoSensorTime;  ///< sensor timestamp, ns since the recording's start, or none
};

/// A labelled time range of the recording (becomes a span of kind phase).
struct ReplayPhase {
  std::string name;        ///< e.g. "gemm"
  int64_t t_begin_ns = 0;  ///< first sample of the phase, ns since the recording's start
  int64_t t_end_ns = 0;    ///< first sample of the next phase (or the last sample), ns
};

/// A whole recording held in memory, records sorted by time.
struct Recording {
  std::string origin;                    ///< file or directory it came from
  std::vector<DeviceInfo> devices;       ///< devices; each lists the metrics it has records of
  std::vector<MetricInfo> metrics;       ///< every metric of the recording (global index space)
  std::vector<ReplayRecord> records;     ///< all values, ordered by (t_ns, device, metric)
  std::vector<ReplayPhase> phases;       ///< phase labels in time order
  std::vector<store::Span> other_spans;  ///< non-phase spans of a run (steps, ops), replayed as they are
  int64_t wall_offset_ns = 0;            ///< Unix-epoch ns at t_ns = 0 (0 if unknown)
  /// Recording length: last record time, ns.
  int64_t duration_ns() const { return records.empty() ? 0 : records.back().t_ns; }
};

/// Loads the NVML fixture format (one row per sample and GPU; see
/// shared/fixtures/h200x4-nvml-phases/README.md), plain or gzip-compressed (read through `gzip -dc`). Units
/// are converted to calo metric names (mW→W, mJ→J, ns→s, KiB→bytes); empty cells (NVML errors) produce no
/// record. Reads meta.json beside it for the wall clock.
Recording load_fixture_csv(const std::filesystem::path& csv_path);

/// Loads a calo run directory (run.db): devices, metrics, samples, phase and other spans.
Recording load_run_recording(const std::filesystem::path& run_dir);

/// Loads a run directory, a run.db, or a fixture .csv/.csv.gz; InputError naming the path otherwise.
Recording load_recording(const std::filesystem::path& path);

/// Playback settings.
struct ReplayOptions {
  double speed = 1.0;          ///< 1 = recorded pace, N = N× faster, 0 = as fast as possible
  int64_t max_batch = 65'536;  ///< most records handed to the sink in one call
};

/// What a playback did.
struct ReplayResult {
  uint64_t samples = 0;  ///< records delivered
  uint64_t spans = 0;    ///< spans delivered (phases and others)
  double wall_s = 0;     ///< wall time the playback took
};

/// Plays `recording` in time order: calls `on_records` with batches of records that are due (sleeping between
/// them at the chosen speed) and `on_phase` when playback passes a phase's end.
ReplayResult play(const Recording& recording, const ReplayOptions& options,
                  const std::function<void(std::span<const ReplayRecord>)>& on_records,
                  const std::function<void(const ReplayPhase&)>& on_phase);

/// Plays `recording` into a run store: registers devices and metrics, appends samples (t_ns unchanged, i.e.
/// on the recording's time base) and writes phases as spans of kind phase (device kNone) plus other spans.
ReplayResult replay_into(const Recording& recording, store::RunWriter& writer, const ReplayOptions& options);

/// A Source that answers read() with the recording's latest value at replay time
/// (now - start) × speed, so the sampler records it exactly like a live device.
class ReplaySource : public Source {
 public:
  /// Takes the recording; `speed` > 0 (1 = recorded pace). Replay time starts at construction.
  ReplaySource(Recording recording, double speed);
  /// Restarts the replay clock at host CLOCK_MONOTONIC `start_ns` (e.g. the sampler's start).
  void restart(int64_t start_ns);
  /// True once replay time has passed the last record.
  bool finished() const;
  /// The recording being played.
  const Recording& recording() const { return recording_; }

  std::string name() const override { return "replay"; }
  bool available() const override { return !recording_.records.empty(); }
  std::string unavailable_reason() const override;
  const std::vector<DeviceInfo>& devices() const override { return recording_.devices; }
  /// Latest value at or before replay time (kError before the first one); sensor time mapped to
  /// CLOCK_MONOTONIC.
  Reading read(size_t device_position, size_t metric_index) override;

 private:
  int64_t replay_time_ns() const;

  Recording recording_;
  double speed_;
  int64_t start_ns_ = 0;
  // series_[device][metric index within the device] = records in time order
  std::vector<std::vector<std::vector<ReplayRecord>>> series_;
};

}  // namespace calo::telemetry
