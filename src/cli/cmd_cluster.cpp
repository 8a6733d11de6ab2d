// `calo cluster list` and `calo cluster show NAME [--json]`: the cluster presets and one preset's every
// figure, printed as JSON (which is YAML) that `--cluster` accepts, so a user can copy a preset, change a
// figure and simulate with it.
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
                   trust.calibrated ? fmt::format("yes ({})", trust.runs_text) : std::string("no"),
                   cluster.description});
  }
  fmt::print("{}", table.render());
  fmt::print(
      "# fitted to runs: measured training runs, + thermal: long records that fit the heat model only, + "
      "refit: "
      "runs of a refit (calo cluster show NAME names them)\n");
  fmt::print(
      "# calo cluster show NAME prints one as JSON (which is YAML): save it as a .yaml file --cluster "
      "accepts\n");
  return 0;
}

int show_cluster(const std::string& name, bool json) {
  const sim::ClusterSpec cluster = sim::load_cluster(name);
  const nlohmann::json document = sim::to_json(cluster);
  if (json) {
    print_json(document);
    return 0;
  }
  // JSON is YAML: the document below, with its '#' comment lines, loads with --cluster FILE.yaml as it is.
  fmt::print("# {}\n", sim::cluster_trust(cluster).summary);
  fmt::print(
      "# every figure the simulator uses (docs/SIMULATOR.md), as JSON (which is YAML); to try a change:\n");
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
          app.add_subcommand("show",
                             "one preset (or cluster file) with every figure, as JSON (which is YAML) after "
                             "'#' comment lines: a .yaml file --cluster accepts");
      auto name = std::make_shared<std::string>();
      auto json = std::make_shared<bool>(false);
      show->add_option("name", *name, "Preset name (see calo cluster list) or a cluster YAML/JSON file")
          ->required();
      show->add_flag("--json", *json,
                     "Print only the JSON (no comment lines): a .json file --cluster accepts");
      app.require_subcommand(1);
      app.footer(
          "Examples:\n  calo cluster list\n  calo cluster show h100-hgx-calibrated > mine.yaml   # JSON, "
          "which is YAML, with '#' comments\n  calo cluster show h100-hgx-calibrated --json > mine.json");
      return [list, name, json] { return list->parsed() ? list_clusters() : show_cluster(*name, *json); };
    });

}  // namespace
}  // namespace calo::cli
