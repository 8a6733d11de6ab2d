// `calo export RUN --format perfetto|csv [--out PATH]`: Chrome JSON trace for ui.perfetto.dev, or CSV files.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "report/export.h"

namespace calo::cli {
namespace {

struct ExportFlags {
  std::string run;
  std::string format;
  std::string out;
  bool json = false;
};

int run_export(const ExportFlags& flags) {
  report::ExportStats stats;
  std::filesystem::path out;
  if (flags.format == "perfetto") {
    out = flags.out.empty() ? std::filesystem::path(flags.run) / "trace.json"
                            : std::filesystem::path(flags.out);
    stats = report::export_perfetto(flags.run, out);
  } else if (flags.format == "csv") {
    out = flags.out.empty() ? std::filesystem::path(flags.run) / "csv" : std::filesystem::path(flags.out);
    stats = report::export_csv(flags.run, out);
  } else {
    throw InputError(fmt::format("--format {}: unknown; choose perfetto or csv", flags.format));
  }
  if (flags.json) {
    print_json(
        {{"out", out.string()}, {"samples", stats.samples}, {"spans", stats.spans}, {"bytes", stats.bytes}});
  } else {
    fmt::print("export: {} ({} samples, {} spans, {:.1f} MiB)\n", out.string(), stats.samples, stats.spans,
               static_cast<double>(stats.bytes) / (1 << 20));
  }
  return 0;
}

const CommandRegistration kExport(
    "export", "export a run as a Perfetto/Chrome JSON trace or as CSV files", 90,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<ExportFlags>();
      app.add_option("RUN", flags->run, "run directory")->required()->check(CLI::ExistingDirectory);
      app.add_option("--format", flags->format, "perfetto (Chrome JSON trace) or csv")
          ->required()
          ->check(CLI::IsMember({"perfetto", "csv"}));
      app.add_option("--out", flags->out,
                     "output file (perfetto) or directory (csv); default inside the run");
      app.add_flag("--json", flags->json, "print the result as JSON");
      return [flags] { return run_export(*flags); };
    });

}  // namespace
}  // namespace calo::cli
