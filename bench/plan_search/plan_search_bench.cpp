// Planner search benchmark: wall time of plan::search_layouts for GPT3-175B on 8192 H200 (h200-hgx), global
// batch 1536 (GPT-3's 3.2 M tokens at sequence 2048), the full layout space, on all cores, with a progress
// bar; then the same with pruning off to show what pruning saves and that the top K is unchanged. With
// --space-rounds R it times the layout space's enumeration alone (plan::enumerate_layouts, R rounds: its
// memory verdicts and the combinations refused as invalid) and searches nothing. Usage:
// bench_plan_search [--gpus N] [--gbs B] [--model M] [--cluster C] [--top K] [--no-compare] [--space-rounds
// R]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "model/model_spec.h"
#include "plan/search.h"

namespace {

/// Enumerates `request`'s layout space `rounds` times and prints its counts and the fastest round's wall
/// time (the enumeration is single-threaded and deterministic: the fastest round is the least disturbed).
int time_space(const calo::plan::SearchRequest& request, int rounds) {
  calo::plan::SpaceRequest space_request = request.space;  // the cluster's memory, node and attention
  space_request.device_memory_bytes = request.cluster.gpu.memory_bytes;
  space_request.gpus_per_node = request.cluster.node.gpus;
  space_request.attention = request.cluster.attention;
  double fastest_s = 0;
  calo::plan::LayoutSpace space;
  for (int round = 0; round < rounds; ++round) {
    const auto started = std::chrono::steady_clock::now();
    space = calo::plan::enumerate_layouts(space_request);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    fastest_s = round == 0 ? wall_s : std::min(fastest_s, wall_s);
  }
  fmt::print("# space: {} layouts, {} fit, {} invalid combinations ({} by construction)\n",
             space.candidates.size(), space.fitting(), space.invalid, space.invalid_by_construction);
  fmt::print("plan_search space: {:.1f} ms per enumeration (fastest of {}) for {} x {}\n", 1e3 * fastest_s,
             rounds, request.space.gpus, request.space.model.name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "gpt3-175b";
  std::string cluster = "h200-hgx";
  int gpus = 8192;
  int global_batch = 1536;
  int top = 10;
  bool compare = true;
  int space_rounds = 0;
  for (int arg = 1; arg < argc; ++arg) {
    auto next = [&] { return arg + 1 < argc ? std::string(argv[++arg]) : std::string(); };
    if (!std::strcmp(argv[arg], "--gpus"))
      gpus = std::stoi(next());
    else if (!std::strcmp(argv[arg], "--gbs"))
      global_batch = std::stoi(next());
    else if (!std::strcmp(argv[arg], "--model"))
      model = next();
    else if (!std::strcmp(argv[arg], "--cluster"))
      cluster = next();
    else if (!std::strcmp(argv[arg], "--top"))
      top = std::stoi(next());
    else if (!std::strcmp(argv[arg], "--no-compare"))
      compare = false;
    else if (!std::strcmp(argv[arg], "--space-rounds"))
      space_rounds = std::stoi(next());
  }
  calo::plan::SearchRequest request;
  request.space.model = calo::model::load_model(model);
  request.space.gpus = gpus;
  request.space.global_batch = global_batch;
  request.cluster = calo::sim::load_cluster(cluster);
  request.top = top;
  request.progress = [](const calo::plan::SearchProgress& progress) {
    const int filled = static_cast<int>(40 * progress.fraction());
    fmt::print(stderr, "\r[{:=<{}}{: <{}}] {}/{}", "", filled, "", 40 - filled, progress.steps_done,
               progress.steps_total);
    if (progress.steps_done == progress.steps_total) fmt::print(stderr, "\n");
  };
  if (space_rounds > 0) return time_space(request, space_rounds);
  fmt::print("# bench_plan_search: {} on {} x {}, gbs {}, top {}, {} threads\n", model, gpus, cluster,
             global_batch, top, std::thread::hardware_concurrency());
  const calo::plan::SearchResult pruned = calo::plan::search_layouts(request);
  fmt::print("# pruned search: {} candidates, {} invalid, {} oom, {} pruned, {} simulated, {:.2f} s wall\n",
             pruned.evaluations.size(), pruned.invalid, pruned.out_of_memory, pruned.pruned, pruned.simulated,
             pruned.wall_s);
  const auto& best = pruned.evaluations[pruned.ranking.front()];
  fmt::print("# best: {} step {:.3f} s, {:.0f} tokens/s, MFU {:.1f} %\n",
             calo::parallel::describe(best.candidate.layout), best.iteration_s, best.tokens_per_s,
             100 * best.mfu);
  int exit_code = 0;
  if (compare) {
    request.prune = false;
    const calo::plan::SearchResult full = calo::plan::search_layouts(request);
    fmt::print("# full search (no pruning): {} simulated, {:.2f} s wall\n", full.simulated, full.wall_s);
    for (int row = 0; row < top && row < static_cast<int>(full.ranking.size()); ++row) {
      const double a = pruned.evaluations[pruned.ranking[row]].iteration_s;
      const double b = full.evaluations[full.ranking[row]].iteration_s;
      if (a != b) {
        fmt::print("MISMATCH at rank {}: pruned {:.6f} s vs full {:.6f} s\n", row + 1, a, b);
        exit_code = 1;
      }
    }
    fmt::print("# top {} identical with and without pruning: {}\n", top, exit_code == 0 ? "yes" : "NO");
  }
  fmt::print("plan_search: {:.2f} s wall for {} x {} (target <= 30 s)\n", pruned.wall_s, gpus, model);
  return exit_code;
}
