// `calo sweep SPEC.yaml [--backend sim|cpu|cuda] [--out DIR] [--resume] [--jobs N]
// [--print-commands|--adopt]`: runs a campaign (a grid of layouts from a YAML spec), one normal run per valid
// point under DIR/<point>/, indexed in DIR/campaign.json.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string_view>
#include <thread>

#include "campaign/campaign.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/shell.h"
#include "core/threads.h"

namespace calo::cli {
namespace {

struct SweepFlags {
  std::string spec;
  std::string backend = "sim";
  std::string out;
  bool resume = false;
  bool print_commands = false;
  bool adopt = false;
  int jobs = 0;  ///< 0: one per core for sim (each point is single-threaded), 1 for cpu and cuda
};

int run_sweep(const SweepFlags& flags) {
  const campaign::Spec spec = campaign::load_spec(flags.spec);
  campaign::RunOptions options;
  options.backend = flags.backend;
  options.out_dir =
      flags.out.empty() ? std::filesystem::path("campaigns") / spec.name : std::filesystem::path(flags.out);
  options.calo_bin = std::filesystem::read_symlink("/proc/self/exe");
  options.resume = flags.resume || flags.adopt;
  options.adopt = flags.adopt;
  if (flags.print_commands) {
    for (const std::string& command :
         campaign::point_commands(spec, flags.backend, options.out_dir, options.calo_bin.string()))
      fmt::print("mkdir -p {} && {}\n", core::shell_quote(options.out_dir.string()), command);
    return 0;
  }
  options.jobs = flags.jobs > 0 ? flags.jobs
                 : flags.backend == "sim"
                     ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                     : 1;
  options.notice = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
  const nlohmann::json index = campaign::run_campaign(spec, options);
  fmt::print("# calo sweep: {} ({} backend) -> {}\n", spec.name, flags.backend,
             (options.out_dir / "campaign.json").string());
  fmt::print("{}", campaign::summary_table(index));
  int failed = 0;
  for (const auto& entry : index["points"]) failed += entry.value("status", "") == "failed" ? 1 : 0;
  return failed > 0 ? 1 : 0;
}

const CommandRegistration kSweep(
    "sweep", "run a campaign: a grid of layouts from a YAML spec, one run per point, resumable", 73,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<SweepFlags>();
      app.add_option("SPEC", flags->spec, "campaign spec (YAML; see data/campaigns/)")->required();
      app.add_option("--backend", flags->backend,
                     "sim (simulated runs), cpu or cuda (calo bench --backend cpu|cuda)")
          ->capture_default_str();
      app.add_option("--out", flags->out, "campaign directory (default campaigns/<name>)");
      app.add_flag("--resume", flags->resume, "finish a stopped campaign: keep points already done");
      app.add_flag(
          "--print-commands", flags->print_commands,
          "print one shell command per runnable point (to run them elsewhere, e.g. on a cluster) and "
          "exit; nothing written");
      app.add_flag(
          "--adopt", flags->adopt,
          "index points already run by those commands (DIR/<point>.json and DIR/<point>/ present) as "
          "done; run the rest");
      app.add_option("--jobs,-j", flags->jobs,
                     "points run at once (default: one per core for sim, 1 for cpu/cuda)")
          ->check(CLI::Range(0, core::kMaxJobs));
      return [flags] { return run_sweep(*flags); };
    });

}  // namespace
}  // namespace calo::cli
