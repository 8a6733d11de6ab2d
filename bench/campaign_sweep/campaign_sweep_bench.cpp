// Benchmark: the simulated parallelism sweep at the study's scale, end to end through campaign::run_campaign
// (one `calo sim` child per valid point, exactly what `calo sweep` does). Checks that every point that ran is
// done with a throughput figure. Target (issue 18): <= 60 s on the 2-core dev machine.
// Usage: bench_campaign_sweep [--spec data/campaigns/parallelism-all-llama3-70b-h200.yaml] [--jobs N
// (default:
//        one per core)] [--out /tmp/calo_bench_campaign]
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "campaign/campaign.h"

int main(int argc, char** argv) {
  std::filesystem::path spec_path =
      std::filesystem::path(CALO_SOURCE_DIR) / "data/campaigns/parallelism-all-llama3-70b-h200.yaml";
  std::filesystem::path out_dir = "/tmp/calo_bench_campaign";
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int arg = 1; arg < argc; ++arg) {
    const std::string flag = argv[arg];
    auto next = [&] { return std::string(arg + 1 < argc ? argv[++arg] : ""); };
    if (flag == "--spec") spec_path = next();
    if (flag == "--jobs") jobs = std::stoi(next());
    if (flag == "--out") out_dir = next();
  }
  const calo::campaign::Spec spec = calo::campaign::load_spec(spec_path);
  std::filesystem::remove_all(out_dir);
  calo::campaign::RunOptions options;
  options.backend = "sim";
  options.out_dir = out_dir;
  options.calo_bin = CALO_BINARY;
  options.jobs = jobs;
  fmt::print("# bench_campaign_sweep: {} ({} on {}, {} GPUs), backend sim, --jobs {}, {} cores\n", spec.name,
             spec.model, spec.cluster, spec.gpus, jobs, std::thread::hardware_concurrency());
  const auto started = std::chrono::steady_clock::now();
  const nlohmann::json index = calo::campaign::run_campaign(spec, options);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int done = 0, skipped = 0, wrong = 0;
  double point_wall_s = 0;
  fmt::print("{:<28} {:>8} {:>10} {:>12}\n", "point", "status", "wall s", "tokens/s");
  for (const auto& point : index["points"]) {
    const std::string status = point["status"];
    if (status == "skipped") {
      ++skipped;
      continue;
    }
    const bool ok = status == "done" && point["figures"]["tokens_per_s"].is_number();
    done += ok ? 1 : 0;
    wrong += ok ? 0 : 1;
    point_wall_s += point.value("wall_s", 0.0);
    fmt::print("{:<28} {:>8} {:>10.2f} {:>12.0f}\n", point["name"].get<std::string>(), status,
               point.value("wall_s", 0.0), ok ? point["figures"]["tokens_per_s"].get<double>() : 0.0);
  }
  fmt::print(
      "# {} points run, {} skipped (invalid or not fitting), {} wrong; sum of point wall times {:.1f} s\n",
      done, skipped, wrong, point_wall_s);
  fmt::print("sweep wall time: {:.1f} s for {} points (target 60 s: {})\n", wall_s, done,
             wall_s <= 60.0 && wrong == 0 ? "met" : "MISSED");
  return wrong == 0 ? 0 : 1;
}
