// Subcommand registry of the `calo` binary: each cmd_<name>.cpp registers itself with one static object.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace calo::cli {

/// Configures a subcommand's flags on `app` and returns the action to run once flags are parsed (exit code).
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

/// One registered subcommand.
struct CommandEntry {
  std::string name;         ///< e.g. "model"
  std::string description;  ///< one line for `calo --help`
  int order;                ///< position in `calo --help` (lower first)
  CommandSetup setup;       ///< adds flags, returns the action
};

/// All registered subcommands (filled by static CommandRegistration objects before main).
std::vector<CommandEntry>& command_registry();

/// Registers a subcommand at static-initialization time.
struct CommandRegistration {
  /// Adds {name, description, order, setup} to the registry.
  CommandRegistration(std::string name, std::string description, int order, CommandSetup setup);
};

/// Prints `json` (indented) to stdout; used by every --json flag.
void print_json(const nlohmann::json& json);

}  // namespace calo::cli
