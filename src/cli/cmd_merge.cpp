// `calo merge RUN_DIR... --out DIR`: joins per-node runs into one (devices renumbered by node, clocks
// aligned).
#include <fmt/format.h>

#include "cli/command.h"
#include "core/json_fields.h"
#include "store/merge.h"

namespace calo::store {

CALO_JSON_FIELDS(MergeResult, out_dir, nodes, devices, samples, spans, shift_ns, first_device)

}  // namespace calo::store

namespace calo::cli {
namespace {

struct MergeFlags {
  std::vector<std::string> inputs;
  std::string out_dir;
  bool json = false;
};

const CommandRegistration kMerge(
    "merge", "join per-node runs into one run (devices renumbered by node, clocks aligned)", 60,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<MergeFlags>();
      app.add_option("RUN_DIR", flags->inputs, "per-node run directories (node index = position)")
          ->required()
          ->check(CLI::ExistingDirectory);
      app.add_option("--out", flags->out_dir, "directory of the merged run (must not hold a run yet)")
          ->required();
      app.add_flag("--json", flags->json, "print the result as JSON");
      return [flags] {
        std::vector<std::filesystem::path> inputs(flags->inputs.begin(), flags->inputs.end());
        std::string command = "calo merge";
        for (const auto& input : flags->inputs) command += " " + input;
        command += " --out " + flags->out_dir;
        store::MergeResult result = store::merge_runs(inputs, flags->out_dir, command);
        if (flags->json) {
          print_json(result);
          return 0;
        }
        for (std::size_t node = 0; node < inputs.size(); ++node) {
          fmt::print("node {}: {}  devices from {}  clock shift {:+.6f} s\n", node, inputs[node].string(),
                     result.first_device[node], static_cast<double>(result.shift_ns[node]) / 1e9);
        }
        fmt::print("merged {} runs: {} devices, {} samples, {} spans -> {}\n", result.nodes, result.devices,
                   result.samples, result.spans, result.out_dir.string());
        return 0;
      };
    });

}  // namespace
}  // namespace calo::cli
