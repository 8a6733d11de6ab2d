// Run store ingest benchmark: how many samples per second the public RunWriter takes and commits to run.db.
// Synthetic: P producer threads append batches (like sampler wake-ups). Fixture: the real 4×H200 NVML trace
// replayed as fast as possible, R times back to back. Every run is checked: the store must hold every sample.
#include <fmt/format.h>
#include <sqlite3.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <thread>

#include "core/table.h"
#include "core/time.h"
#include "store/run_store.h"
#include "telemetry/replay.h"

namespace {

using calo::core::monotonic_ns;
namespace store = calo::store;

struct Result {
  std::string mode;
  int producers = 0;
  int64_t batch = 0;
  uint64_t samples = 0;
  double append_s = 0;  // until the last append returned
  double commit_s = 0;  // until finish() had committed everything (before indexes)
  double total_s = 0;   // including the index build and checkpoint
  store::WriterStats stats;
  uint64_t db_bytes = 0;
  bool correct = false;
};

uint64_t directory_bytes(const std::filesystem::path& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) bytes += entry.file_size();
  return bytes;
}

Result run_synthetic(const std::filesystem::path& run_dir, int producers, uint64_t samples, int64_t batch,
                     int64_t commit_interval_ns, int devices, int metrics) {
  store::RunInfo info;
  info.kind = store::RunKind::kBench;
  info.name = "store_ingest";
  store::WriterOptions options;
  options.commit_interval_ns = commit_interval_ns;
  options.create_indexes_on_finish = false;
  auto writer = std::make_unique<store::RunWriter>(run_dir, info, options);
  std::vector<int32_t> ids;
  for (int metric = 0; metric < metrics; ++metric) {
    ids.push_back(writer->metric_id(fmt::format("metric{}_w", metric), "W", store::MetricKind::kGauge));
  }
  for (int device = 0; device < devices; ++device) {
    store::DeviceInfo info_row;
    info_row.idx = device;
    info_row.slot = device;
    writer->add_device(info_row);
  }
  int64_t start_ns = monotonic_ns();
  std::vector<std::thread> threads;
  uint64_t per_producer = samples / static_cast<uint64_t>(producers);
  for (int producer = 0; producer < producers; ++producer) {
    threads.emplace_back([&, producer] {
      std::vector<store::Sample> buffer(static_cast<std::size_t>(batch));
      uint64_t written = 0;
      int64_t t_ns = 0;
      while (written < per_producer) {
        std::size_t count = std::min<uint64_t>(buffer.size(), per_producer - written);
        for (std::size_t index = 0; index < count; ++index) {
          uint64_t sequence = written + index;
          buffer[index] = store::Sample{static_cast<int32_t>((sequence / static_cast<uint64_t>(metrics)) %
                                                             static_cast<uint64_t>(devices)),
                                        ids[sequence % static_cast<uint64_t>(metrics)], t_ns,
                                        100.0 + static_cast<double>(sequence % 1000) * 0.5,
                                        producer == 0 ? t_ns - 1000 : store::kNoSensorTime};
          t_ns += 1000;
        }
        writer->append(std::span<const store::Sample>(buffer.data(), count));
        written += count;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  Result result;
  result.mode = "synthetic";
  result.producers = producers;
  result.batch = batch;
  result.samples = per_producer * static_cast<uint64_t>(producers);
  result.append_s = static_cast<double>(monotonic_ns() - start_ns) / 1e9;
  writer->finish(monotonic_ns());
  result.commit_s = static_cast<double>(monotonic_ns() - start_ns) / 1e9;
  result.stats = writer->stats();
  writer.reset();
  result.total_s = result.commit_s;
  return result;
}

Result run_fixture(const std::filesystem::path& run_dir, const calo::telemetry::Recording& recording,
                   int repeats, int64_t batch, int64_t commit_interval_ns) {
  store::RunInfo info;
  info.kind = store::RunKind::kBench;
  info.name = "store_ingest_fixture";
  store::WriterOptions options;
  options.commit_interval_ns = commit_interval_ns;
  options.create_indexes_on_finish = false;
  store::RunWriter writer(run_dir, info, options);
  int64_t start_ns = monotonic_ns();
  calo::telemetry::Recording shifted = recording;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    calo::telemetry::replay_into(shifted, writer, calo::telemetry::ReplayOptions{0.0, batch});
    for (auto& record : shifted.records) record.t_ns += recording.duration_ns() + 1;
    for (auto& phase : shifted.phases) {
      phase.t_begin_ns += recording.duration_ns() + 1;
      phase.t_end_ns += recording.duration_ns() + 1;
    }
  }
  Result result;
  result.mode = "fixture";
  result.producers = 1;
  result.batch = batch;
  result.samples = recording.records.size() * static_cast<uint64_t>(repeats);
  result.append_s = static_cast<double>(monotonic_ns() - start_ns) / 1e9;
  writer.finish(monotonic_ns());
  result.commit_s = static_cast<double>(monotonic_ns() - start_ns) / 1e9;
  result.total_s = result.commit_s;
  result.stats = writer.stats();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run store ingest throughput (samples/s through RunWriter into run.db)"};
  std::string mode = "both";
  uint64_t samples = 20'000'000;
  int producers = 2;
  int64_t batch = 64;
  int repeats = 20;
  int64_t commit_interval_ms = 1000;
  std::string dir = (std::filesystem::temp_directory_path() / "calo-store-ingest").string();
  std::string fixture = std::string(CALO_FIXTURE_DIR) + "/nvml_trace.csv.gz";
  app.add_option("--mode", mode, "synthetic | fixture | both")
      ->check(CLI::IsMember({"synthetic", "fixture", "both"}));
  app.add_option("--samples", samples, "synthetic: total samples");
  app.add_option("--producers", producers, "synthetic: appending threads")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "samples per append() call")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "fixture: times the trace is replayed back to back")
      ->check(CLI::PositiveNumber);
  app.add_option("--commit-interval-ms", commit_interval_ms, "writer commit interval")
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "scratch directory for the runs (deleted afterwards)");
  app.add_option("--fixture", fixture, "NVML fixture CSV(.gz)");
  CLI11_PARSE(app, argc, argv);

  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  fmt::print("# bench store_ingest: RunWriter -> run.db (SQLite {}, WAL, synchronous=NORMAL)\n",
             sqlite3_libversion());
  fmt::print("# host {}  cpus {}  scratch {}\n", host.data(), std::thread::hardware_concurrency(), dir);
  fmt::print("# mode {}  samples {}  producers {}  batch {}  repeats {}  commit_interval {} ms\n", mode,
             samples, producers, batch, repeats, commit_interval_ms);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<Result> results;
  int run_number = 0;
  auto check = [&](Result result, const std::filesystem::path& run_dir) {
    store::RunReader reader(run_dir);
    result.correct = reader.sample_count() == static_cast<int64_t>(result.samples) &&
                     result.stats.samples_dropped == 0 && result.stats.samples_committed == result.samples;
    result.db_bytes = directory_bytes(run_dir);
    results.push_back(result);
  };
  if (mode != "fixture") {
    std::filesystem::path run_dir = std::filesystem::path(dir) / fmt::format("run{}", run_number++);
    check(run_synthetic(run_dir, producers, samples, batch, commit_interval_ms * 1'000'000, 4, 16), run_dir);
  }
  if (mode != "synthetic") {
    calo::telemetry::Recording recording = calo::telemetry::load_fixture_csv(fixture);
    fmt::print("# fixture {}: {} samples, {} devices, {:.1f} s\n", fixture, recording.records.size(),
               recording.devices.size(), static_cast<double>(recording.duration_ns()) / 1e9);
    std::filesystem::path run_dir = std::filesystem::path(dir) / fmt::format("run{}", run_number++);
    check(run_fixture(run_dir, recording, repeats, std::max<int64_t>(batch, 4096),
                      commit_interval_ms * 1'000'000),
          run_dir);
  }
  calo::core::TextTable table({"mode", "producers", "batch", "samples", "append", "committed", "rate",
                               "commits", "writer_cpu", "cpu_rate", "max_queue", "dropped", "db",
                               "bytes/sample", "wrong"});
  table.set_units(
      {"", "", "", "", "s", "s", "M samples/s", "", "s", "M samples/cpu-s", "samples", "", "MiB", "B", ""});
  double worst_rate = 1e300;
  double worst_cpu_rate = 1e300;
  int wrong = 0;
  for (const Result& result : results) {
    double rate = static_cast<double>(result.samples) / result.commit_s / 1e6;
    double writer_cpu_s = static_cast<double>(result.stats.writer_cpu_ns) / 1e9;
    double cpu_rate = static_cast<double>(result.samples) / writer_cpu_s / 1e6;
    worst_rate = std::min(worst_rate, rate);
    worst_cpu_rate = std::min(worst_cpu_rate, cpu_rate);
    wrong += result.correct ? 0 : 1;
    table.add_row(
        {result.mode, std::to_string(result.producers), std::to_string(result.batch),
         std::to_string(result.samples), fmt::format("{:.2f}", result.append_s),
         fmt::format("{:.2f}", result.commit_s), fmt::format("{:.2f}", rate),
         std::to_string(result.stats.commits), fmt::format("{:.2f}", writer_cpu_s),
         fmt::format("{:.2f}", cpu_rate), std::to_string(result.stats.max_queued_samples),
         std::to_string(result.stats.samples_dropped),
         fmt::format("{:.1f}", static_cast<double>(result.db_bytes) / 1048576.0),
         fmt::format("{:.1f}", static_cast<double>(result.db_bytes) / static_cast<double>(result.samples)),
         result.correct ? "0" : "1"});
  }
  fmt::print("{}", table.render());
  std::filesystem::remove_all(dir);
  double load_1min = 0;
  if (FILE* loadavg = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(loadavg, "%lf", &load_1min) != 1) load_1min = 0;
    std::fclose(loadavg);
  }
  fmt::print("# load average (1 min) at the end: {:.2f} on {} cpus\n", load_1min,
             std::thread::hardware_concurrency());
  fmt::print(
      "store ingest: {:.2f} M samples/s committed wall-clock, {:.2f} M samples per writer-CPU-second "
      "(slowest mode; target >= 1.00), {} wrong\n",
      worst_rate, worst_cpu_rate, wrong);
  return wrong == 0 ? 0 : 1;
}
