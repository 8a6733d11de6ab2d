// Entry point of `calo`: builds the subcommands from the registry, parses, runs, maps errors to exit codes.
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <iostream>

#include "cli/command.h"
#include "cli/suggest.h"
#include "core/error.h"

namespace calo::cli {

std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

CommandRegistration::CommandRegistration(std::string name, std::string description, int order,
                                         CommandSetup setup) {
  command_registry().push_back({std::move(name), std::move(description), order, std::move(setup)});
}

void print_json(const nlohmann::json& json) {
  std::cout << json.dump(2) << "\n";
}

/// Keeps freed blocks of up to 32 MiB in the heap for the next allocation. By default glibc maps each block
/// over 128 KiB-32 MiB afresh and unmaps it when freed, so every graph the planner builds (thousands, 1-30
/// MiB of ops each) faulted its pages in zeroed: 9 of the 84 CPU seconds of a Mixtral-8x7B plan on 64 GPUs
/// were the kernel's (docs/benchmarks/plan-search.md).
void keep_freed_blocks_for_reuse() {
  constexpr int kLargestHeapBlockBytes = 32 << 20;  // glibc's ceiling for M_MMAP_THRESHOLD on 64-bit
  constexpr int kKeptFreeBytes = 256 << 20;
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlockBytes);
  mallopt(M_TRIM_THRESHOLD, kKeptFreeBytes);
}

}  // namespace calo::cli

int main(int argc, char** argv) {
  using calo::ExitCode;
  calo::cli::keep_freed_blocks_for_reuse();
  CLI::App app{"calo — measure, explain, predict and improve the throughput, energy and heat of LLM training",
               "calo"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("calo ") + CALO_VERSION);
  auto& registry = calo::cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  std::function<int()> action;
  for (auto& entry : registry) {
    CLI::App* sub = app.add_subcommand(entry.name, entry.description);
    auto run = entry.setup(*sub);
    sub->callback([&action, run] { action = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    if (code != 0) {
      for (const std::string& line :
           calo::cli::parse_suggestions(app, std::vector<std::string>(argv + 1, argv + argc)))
        fmt::print(stderr, "calo: {}\n", line);
    }
    return code == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
  } catch (const calo::InputError& error) {
    fmt::print(stderr, "calo: error: {}\n", error.what());
    return static_cast<int>(ExitCode::kUsage);
  }
  try {
    return action ? action() : 0;
  } catch (const calo::InputError& error) {
    fmt::print(stderr, "calo: error: {}\n", error.what());
    return static_cast<int>(ExitCode::kUsage);
  } catch (const calo::RuntimeFailure& error) {
    fmt::print(stderr, "calo: failed: {}\n", error.what());
    return static_cast<int>(ExitCode::kFailure);
  } catch (const std::exception& error) {
    fmt::print(stderr, "calo: internal error: {}\n", error.what());
    return static_cast<int>(ExitCode::kFailure);
  }
}
