// `calo ingest TRACE.json... [--out DIR] [--name NAME] [--json]`: PyTorch profiler (Kineto) traces -> a run
// (kind ingest) with kernel spans, step spans and the per-rank kernel breakdown.
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/breakdown.h"
#include "analyze/trace_ingest.h"
#include "cli/command.h"
#include "core/table.h"
#include "store/run_store.h"

namespace calo::cli {
namespace {

struct IngestFlags {
  std::vector<std::string> traces;
  std::string out_dir;
  std::string parent = "runs";
  std::string name;
  bool json = false;
};

int run_ingest(const IngestFlags& flags) {
  auto started = std::chrono::steady_clock::now();
  std::vector<std::filesystem::path> paths(flags.traces.begin(), flags.traces.end());
  analyze::TraceData data = analyze::ingest_traces(paths);
  double parse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::string name = flags.name.empty() ? "ingest-" + paths.front().stem().string() : flags.name;
  std::filesystem::path run_dir =
      flags.out_dir.empty() ? store::make_run_dir(flags.parent, name) : std::filesystem::path(flags.out_dir);
  store::RunInfo info;
  info.kind = store::RunKind::kIngest;
  info.name = name;
  info.command = "calo ingest";
  for (const auto& trace : flags.traces) info.command += " " + trace;
  info.config_json = nlohmann::json{{"traces", flags.traces}, {"world_size", data.world_size}}.dump();
  info.started_ns = 0;
  info.wall_offset_ns = data.origin_unix_ns;
  {
    store::RunWriter writer(run_dir, info);
    analyze::write_trace_run(data, writer);
    writer.finish(data.end_ns);
  }
  auto breakdown = analyze::trace_kernel_breakdown(data);
  if (flags.json) {
    nlohmann::json lanes = nlohmann::json::array();
    for (const auto& lane : breakdown) {
      nlohmann::json categories = nlohmann::json::object();
      for (auto category : analyze::kAllKernelCategories) {
        auto slot = static_cast<std::size_t>(category);
        if (lane.count[slot] == 0) continue;
        nlohmann::json entry = {{"busy_s", lane.busy_s[slot]}, {"count", lane.count[slot]}};
        if (analyze::is_comm(category)) {
          entry["exposed_s"] = lane.exposed_s[slot];
          entry["overlapped_s"] = lane.overlapped_s[slot];
          entry["busbw_gbps"] = lane.busbw_gbps[slot];
        }
        categories[std::string(analyze::to_string(category))] = entry;
      }
      const auto& source = data.lanes[static_cast<std::size_t>(lane.lane)];
      lanes.push_back({{"rank", source.rank},
                       {"device", source.device},
                       {"categories", categories},
                       {"compute_union_s", lane.compute_union_s},
                       {"comm_union_s", lane.comm_union_s},
                       {"comm_exposed_union_s", lane.comm_exposed_union_s},
                       {"window_s", lane.window_s}});
    }
    print_json({{"run_dir", run_dir.string()},
                {"bytes", data.bytes_read},
                {"events", data.events_seen},
                {"kernels", data.kernels.size()},
                {"parse_s", parse_s},
                {"lanes", lanes}});
    return 0;
  }
  core::TextTable table(
      {"rank", "gpu", "gemm", "attn", "norm", "elemwise", "other", "comm", "exposed", "overlap", "window"});
  table.set_units({"", "", "ms", "ms", "ms", "ms", "ms", "ms", "ms", "ms", "ms"});
  for (const auto& lane : breakdown) {
    double comm_s = 0;
    double exposed_s = 0;
    double overlapped_s = 0;
    for (auto category : analyze::kAllKernelCategories) {
      if (!analyze::is_comm(category)) continue;
      auto slot = static_cast<std::size_t>(category);
      comm_s += lane.busy_s[slot];
      exposed_s += lane.exposed_s[slot];
      overlapped_s += lane.overlapped_s[slot];
    }
    auto ms = [](double seconds) { return fmt::format("{:.3f}", seconds * 1e3); };
    auto busy = [&](analyze::KernelCategory category) {
      return ms(lane.busy_s[static_cast<std::size_t>(category)]);
    };
    const auto& source = data.lanes[static_cast<std::size_t>(lane.lane)];
    table.add_row({std::to_string(source.rank), std::to_string(source.device),
                   busy(analyze::KernelCategory::kGemm), busy(analyze::KernelCategory::kAttention),
                   busy(analyze::KernelCategory::kNorm), busy(analyze::KernelCategory::kElementwise),
                   busy(analyze::KernelCategory::kOther), ms(comm_s), ms(exposed_s), ms(overlapped_s),
                   ms(lane.window_s)});
  }
  fmt::print("# {} trace(s), {:.1f} MB, {} events, {} GPU kernels parsed in {:.2f} s ({:.0f} MB/s)\n",
             paths.size(), static_cast<double>(data.bytes_read) / 1e6, data.events_seen, data.kernels.size(),
             parse_s, static_cast<double>(data.bytes_read) / 1e6 / std::max(parse_s, 1e-9));
  fmt::print("{}", table.render());
  fmt::print("run: {}\n", run_dir.string());
  return 0;
}

const CommandRegistration kIngest(
    "ingest",
    "turn PyTorch profiler (Kineto) traces into a run: kernel categories, exposed vs overlapped comm", 70,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<IngestFlags>();
      app.add_option("TRACE", flags->traces, "Kineto JSON traces, one per rank (rank from distributedInfo)")
          ->required()
          ->check(CLI::ExistingFile);
      app.add_option("--out", flags->out_dir, "run directory to create (default: runs/<date>-<name>/)");
      app.add_option("--runs", flags->parent, "parent directory for the default run directory")
          ->capture_default_str();
      app.add_option("--name", flags->name, "run name (default: ingest-<first trace's stem>)");
      app.add_flag("--json", flags->json, "print the breakdown as JSON");
      return [flags] { return run_ingest(*flags); };
    });

}  // namespace
}  // namespace calo::cli
