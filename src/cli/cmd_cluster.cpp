// `calo cluster list` and `calo cluster show NAME [--json]`: the cluster presets and one preset's every
// figure, printed as a file `--cluster` accepts, so a user can copy a preset, change a figure and simulate
// with it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/config.h"
#include "core/table.h"
#include "sim/cluster.h"
#include "sim/cluster_trust.h"

namespace calo::cli {
namespace {

int list_clusters() {
  core::TextTable table({"preset", "GPUs per node", "GPU", "power limit", "fitted to runs", "description"});
  table.set_units({"", "", "", "W", "", ""});
  for (const std::string& name : core::preset_names("clusters")) {
    const sim::ClusterSpec cluster = sim::load_cluster(name);
    const sim::ClusterTrust trust = sim::cluster_trust(cluster);
    table.add_row({name, std::to_string(cluster.node.gpus), cluster.gpu.name,
                   fmt::format("{:.0f}", cluster.gpu.power_limit_w),
                   trust.calibrated ? (trust.refit_runs > 0 ? fmt::format("yes ({} runs + {} refit)",
                                                                          trust.runs, trust.refit_runs)
                                                            : fmt::format("yes ({} runs)", trust.runs))
                                    : std::string("no"),
                   cluster.description});
  }
  fmt::print("{}", table.render());
  fmt::print("# calo cluster show NAME prints one as a file --cluster accepts\n");
  return 0;
}

int show_cluster(const std::string& name, bool json) {
  const sim::ClusterSpec cluster = sim::load_cluster(name);
  const nlohmann::json document = sim::to_json(cluster);
  if (json) {
    print_json(document);
    return 0;
  }
  // JSON is YAML: the document below loads with --cluster FILE.yaml as it is.
  fmt::print("# {}\n", sim::cluster_trust(cluster).summary);
  fmt::print("# every figure the simulator uses (docs/SIMULATOR.md); to try a change:\n");
  fmt::print("#   calo cluster show {} > my.yaml, edit it (e.g. gpu.power_limit_w), then --cluster my.yaml\n",
             name);
  fmt::print("{}\n", document.dump(2));
  return 0;
}

const CommandRegistration kCluster(
    "cluster", "list the cluster presets, or print one as a file to copy and edit (calo cluster show NAME)",
    44, [](CLI::App& app) -> std::function<int()> {
      CLI::App* list = app.add_subcommand("list", "the presets: GPU, power limit, whether fitted to runs");
      CLI::App* show =
          app.add_subcommand("show", "one preset (or cluster file) with every figure, as a file");
      auto name = std::make_shared<std::string>();
      auto json = std::make_shared<bool>(false);
      show->add_option("name", *name, "Preset name (see calo cluster list) or a cluster YAML/JSON file")
          ->required();
      show->add_flag("--json", *json, "Print only the JSON (no comment lines)");
      app.require_subcommand(1);
      app.footer("Examples:\n  calo cluster list\n  calo cluster show h100-hgx-calibrated > mine.yaml");
      return [list, name, json] { return list->parsed() ? list_clusters() : show_cluster(*name, *json); };
    });

}  // namespace
}  // namespace calo::cli
