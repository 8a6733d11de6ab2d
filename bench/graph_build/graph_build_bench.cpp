// Graph build benchmark: time and peak RSS of build_graph for GPT3-175B from 8 to 8192 GPUs. Each
// configuration runs in a forked child so its peak RSS is its own; every built graph is checked (collectives,
// p2p, deadlock on representative ranks, FLOPs, closed-form volumes) outside the timed part.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../common/run_in_child.h"
#include "core/table.h"
#include "graph/check.h"
#include "graph/graph.h"
#include "parallel/validate.h"

namespace {

namespace graph = calo::graph;

struct Config {
  int tp, pp, dp;
};

/// What a child reports back through its pipe.
struct Result {
  double build_s = 0;           // median over repeats
  double build_min_s = 0;       // fastest repeat
  double check_s = 0;           // all checkers once
  double baseline_rss_mib = 0;  // before the first build
  double peak_rss_mib = 0;      // high-water mark of the child
  double graph_mib = 0;         // bytes held by the Graph object (ops, deps, groups)
  long programs = 0;
  long ops = 0;       // ops over all programs
  long problems = 0;  // checker problems (must be 0)
};

double rss_mib_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

double graph_bytes(const graph::Graph& built) {
  double bytes = 0;
  for (const auto& program : built.programs)
    bytes += static_cast<double>(program.ops.capacity() * sizeof(graph::Op) +
                                 program.deps.capacity() * sizeof(std::int32_t));
  for (const auto& group : built.groups)
    bytes += static_cast<double>(sizeof(graph::CommGroup) + group.ranks.capacity() * sizeof(std::int32_t));
  bytes += static_cast<double>(built.group_of_rank.capacity() * sizeof(built.group_of_rank[0]) +
                               built.program_of_rank.capacity() * sizeof(std::int32_t));
  return bytes;
}

Result measure(const calo::model::ModelSpec& spec, const Config& config, int global_batch, int repeats) {
  calo::parallel::Layout layout;
  layout.tp = config.tp;
  layout.pp = config.pp;
  layout.dp = config.dp;
  layout.micro_batch = 1;
  layout.global_batch = global_batch;
  layout = calo::parallel::resolve_layout(spec, layout);
  Result result;
  result.baseline_rss_mib = rss_mib_now();
  std::vector<double> times;
  graph::Graph built;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    built = graph::Graph();
    const auto start = std::chrono::steady_clock::now();
    built = graph::build_graph(spec, layout);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  result.build_s = times[times.size() / 2];
  result.build_min_s = times.front();
  result.peak_rss_mib = peak_rss_mib();
  result.graph_mib = graph_bytes(built) / (1024.0 * 1024.0);
  result.programs = static_cast<long>(built.programs.size());
  for (const auto& program : built.programs) result.ops += static_cast<long>(program.ops.size());
  const auto start = std::chrono::steady_clock::now();
  result.problems =
      static_cast<long>(graph::check_graph(built, graph::DeadlockScope::kRepresentative).size());
  result.check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

/// Runs `measure` in a child process so the peak RSS belongs to this configuration alone.
Result measure_in_child(const calo::model::ModelSpec& spec, const Config& config, int global_batch,
                        int repeats) {
  const std::string label = "tp" + std::to_string(config.tp) + " pp" + std::to_string(config.pp) + " dp" +
                            std::to_string(config.dp);
  if (auto result = calo::bench::run_in_child(label.c_str(),
                                              [&] { return measure(spec, config, global_batch, repeats); }))
    return *result;
  Result failed;
  failed.problems = -1;
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Execution-graph build time and peak RSS, 8 to 8192 GPUs"};
  std::string model_name = "gpt3-175b";
  int microbatches = 24;
  int repeats = 5;
  app.add_option("--model", model_name, "Model preset")->capture_default_str();
  app.add_option("--microbatches", microbatches, "Micro-batches per pipeline (global batch = this x dp)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "Builds per configuration (median reported)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto spec = calo::model::load_model(model_name);
  const std::vector<Config> configs = {{8, 1, 1},  {8, 2, 4},   {8, 4, 16},
                                       {8, 16, 8}, {8, 16, 32}, {8, 16, 64}};
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  fmt::print(
      "# bench graph_build: model {}, {} micro-batches of 1 sequence per pipeline (global batch {} x dp), "
      "1f1b, {} builds per row\n",
      model_name, microbatches, microbatches, repeats);
  fmt::print("# host {}, {} CPUs online; each row in a forked child (own peak RSS)\n", host,
             sysconf(_SC_NPROCESSORS_ONLN));
  calo::core::TextTable table({"GPUs", "tp", "pp", "dp", "programs", "ops", "build", "build min", "graph",
                               "peak RSS", "check", "#wrong"});
  table.set_units({"", "", "", "", "", "", "s", "s", "MiB", "MiB", "s", ""});
  Result largest;
  long wrong = 0;
  for (const Config& config : configs) {
    const Result result = measure_in_child(spec, config, microbatches * config.dp, repeats);
    wrong += result.problems != 0 ? 1 : 0;
    table.add_row({std::to_string(config.tp * config.pp * config.dp), std::to_string(config.tp),
                   std::to_string(config.pp), std::to_string(config.dp), std::to_string(result.programs),
                   std::to_string(result.ops), fmt::format("{:.4f}", result.build_s),
                   fmt::format("{:.4f}", result.build_min_s), fmt::format("{:.1f}", result.graph_mib),
                   fmt::format("{:.1f}", result.peak_rss_mib), fmt::format("{:.3f}", result.check_s),
                   std::to_string(result.problems)});
    largest = result;
  }
  fmt::print("{}", table.render());
  const Config& last = configs.back();
  const bool ok = largest.build_s <= 1.0 && largest.peak_rss_mib <= 1024.0 && wrong == 0;
  fmt::print(
      "{} tp{} pp{} dp{} ({} GPUs): build {:.4f} s, peak RSS {:.1f} MiB (limits 1 s, 1024 MiB), {} wrong: "
      "{}\n",
      model_name, last.tp, last.pp, last.dp, last.tp * last.pp * last.dp, largest.build_s,
      largest.peak_rss_mib, wrong, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
