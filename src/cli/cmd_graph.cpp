// `calo graph [layout flags] [--rank R] [--ops] [--json] [--check] [--export FILE]`: the execution graph of
// one training iteration: a per-stream summary of one rank, its op list, the checkers, or the whole graph as
// JSON.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>

#include "cli/command.h"
#include "cli/layout_flags.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/output_file.h"
#include "core/table.h"
#include "graph/check.h"
#include "graph/graph.h"
#include "graph/json.h"

namespace calo::graph {

CALO_JSON_FIELDS(Problem, check, message)
CALO_JSON_FIELDS(CommVolumes, tp_bytes, dp_bytes, pp_bytes, ep_bytes, dp_replicate_bytes, cp_bytes)

}  // namespace calo::graph

namespace calo::cli {
namespace {

struct GraphFlags {
  LayoutFlags layout;
  int rank = 0;
  bool ops = false;
  bool json = false;
  bool check = false;
  double imbalance = 1.0;
  std::string export_path;
};

/// Counts, FLOPs and bytes of a set of ops.
struct Tally {
  int count = 0;
  double flops = 0;
  double bytes = 0;
  void add(const graph::Op& op) {
    ++count;
    flops += op.flops;
    bytes += op.bytes;
  }
};

/// Row label of an op in the by-kind table, e.g. "gemm fc1", "collective all_gather tp".
std::string kind_label(const graph::Op& op) {
  switch (op.kind) {
    case graph::OpKind::kGemm:
      return fmt::format("gemm {}", graph::to_string(op.gemm.weight));
    case graph::OpKind::kElementwise:
      return fmt::format("elementwise {}", graph::to_string(op.elementwise));
    case graph::OpKind::kCollective:
      return fmt::format("{} {}", graph::to_string(op.collective), graph::to_string(op.group));
    default:
      return graph::to_string(op.kind);
  }
}

nlohmann::json tally_json(const Tally& tally) {
  return {{"ops", tally.count}, {"flops", tally.flops}, {"bytes", tally.bytes}};
}

int print_summary(const graph::Graph& graph, const GraphFlags& flags, double build_s) {
  const graph::RankProgram& program = graph.program(flags.rank);
  std::map<std::string, Tally> by_stream, by_kind, by_phase;
  Tally total;
  for (const graph::Op& op : program.ops) {
    by_stream[graph::to_string(op.stream)].add(op);
    by_kind[kind_label(op)].add(op);
    by_phase[graph::to_string(op.phase)].add(op);
    total.add(op);
  }
  std::size_t all_ops = 0;
  for (const auto& shared : graph.programs) all_ops += shared.ops.size();
  if (flags.json) {
    nlohmann::json streams, kinds, phases;
    for (const auto& [name, tally] : by_stream) streams[name] = tally_json(tally);
    for (const auto& [name, tally] : by_kind) kinds[name] = tally_json(tally);
    for (const auto& [name, tally] : by_phase) phases[name] = tally_json(tally);
    print_json({{"rank", flags.rank},
                {"stage", program.stage},
                {"program", graph.program_of_rank[flags.rank]},
                {"world_size", graph.world_size()},
                {"programs", graph.programs.size()},
                {"program_ops", all_ops},
                {"build_s", build_s},
                {"total", tally_json(total)},
                {"by_stream", streams},
                {"by_kind", kinds},
                {"by_phase", phases}});
    return 0;
  }
  fmt::print("# model {}, layout {}: {} GPUs, {} micro-batches\n", graph.model.name,
             parallel::describe(graph.layout), graph.world_size(), graph.layout.num_microbatches());
  fmt::print(
      "# {} distinct programs ({} ops in all), built in {:.3f} s; rank {} runs program {} (stage {})\n\n",
      graph.programs.size(), all_ops, build_s, flags.rank, graph.program_of_rank[flags.rank], program.stage);
  auto render = [](const std::string& title, const std::map<std::string, Tally>& rows, const Tally& sum) {
    core::TextTable table({title, "ops", "FLOPs", "bytes"});
    for (const auto& [name, tally] : rows)
      table.add_row({name, std::to_string(tally.count), core::format_flops(tally.flops),
                     core::format_bytes(tally.bytes)});
    table.add_row(
        {"total", std::to_string(sum.count), core::format_flops(sum.flops), core::format_bytes(sum.bytes)});
    fmt::print("{}\n", table.render());
  };
  render("stream", by_stream, total);
  render("phase", by_phase, total);
  render("op", by_kind, total);
  fmt::print(
      "(bytes: memory traffic for compute ops, message size for communication; see docs/METRICS.md)\n");
  return 0;
}

int print_ops(const graph::Graph& graph, const GraphFlags& flags) {
  if (flags.json) {
    print_json(graph::to_json(graph, flags.rank));
    return 0;
  }
  fmt::print("# rank {} (stage {}), {} ops; deps are op indices of this rank\n", flags.rank,
             graph.program(flags.rank).stage, graph.program(flags.rank).ops.size());
  core::TextTable table({"#", "stream", "phase", "mb", "chunk", "layer", "op", "deps"});
  int index = 0;
  for (const graph::RankOp& rank_op : graph::materialize(graph, flags.rank)) {
    const graph::Op& op = rank_op.op;
    std::string text = graph::describe(op);
    if (rank_op.peer_rank >= 0) text += fmt::format(" (rank {})", rank_op.peer_rank);
    if (rank_op.group_id >= 0)
      text += fmt::format(" (group {} of {})", rank_op.group_id, graph.groups[rank_op.group_id].ranks.size());
    std::string deps;
    for (std::int32_t dep : rank_op.deps) deps += (deps.empty() ? "" : ",") + std::to_string(dep);
    table.add_row({std::to_string(index++), graph::to_string(op.stream), graph::to_string(op.phase),
                   op.microbatch < 0 ? "-" : std::to_string(op.microbatch), std::to_string(op.chunk),
                   op.layer < 0 ? "-" : std::to_string(op.layer), text, deps.empty() ? "-" : deps});
  }
  fmt::print("{}", table.render());
  return 0;
}

int run_checks(const graph::Graph& graph, bool json) {
  const auto start = std::chrono::steady_clock::now();
  const auto problems = graph::check_graph(graph);
  const double check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const graph::FlopTotals flops = graph::flop_totals(graph);
  const graph::CommVolumes volumes = graph::comm_volumes(graph);
  if (json) {
    nlohmann::json out = {{"ok", problems.empty()},
                          {"problems", problems},
                          {"check_s", check_s},
                          {"gemm_flops", flops.gemm},
                          {"attention_flops", flops.attention}};
    out.update(nlohmann::json(volumes));
    print_json(out);
  } else {
    fmt::print("# checks: collectives, p2p, deadlock, flops, comm-volume ({:.3f} s)\n", check_s);
    fmt::print("GEMM FLOPs {} (model {}), attention {} (model {})\n", core::format_flops(flops.gemm),
               core::format_flops(flops.expected_gemm), core::format_flops(flops.attention),
               core::format_flops(flops.expected_attention));
    fmt::print("communication per iteration: tp {}, dp {}, pp {}, ep {}{}\n",
               core::format_bytes(volumes.tp_bytes), core::format_bytes(volumes.dp_bytes),
               core::format_bytes(volumes.pp_bytes), core::format_bytes(volumes.ep_bytes),
               graph.layout.cp > 1 ? ", cp " + core::format_bytes(volumes.cp_bytes) : std::string());
    for (const auto& problem : problems) fmt::print("PROBLEM {}: {}\n", problem.check, problem.message);
    fmt::print("{}\n",
               problems.empty() ? "OK: all checks passed" : fmt::format("{} problems", problems.size()));
  }
  return problems.empty() ? 0 : 1;
}

int show_graph(const GraphFlags& flags) {
  const auto [spec, layout] = resolve(flags.layout);
  graph::GraphOptions options;
  options.expert_load_imbalance = flags.imbalance;
  const auto start = std::chrono::steady_clock::now();
  const graph::Graph graph = graph::build_graph(spec, layout, options);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  require_input(flags.rank >= 0 && flags.rank < graph.world_size(),
                fmt::format("--rank {} is outside 0..{} (tp*cp*pp*dp = {})", flags.rank,
                            graph.world_size() - 1, graph.world_size()));
  if (!flags.export_path.empty()) {
    core::write_file_atomically(flags.export_path, graph::to_json(graph).dump() + "\n", "--export");
  }
  if (flags.check) return run_checks(graph, flags.json);
  if (flags.ops) return print_ops(graph, flags);
  return print_summary(graph, flags, build_s);
}

const CommandRegistration kGraph(
    "graph", "execution graph of one iteration: per-rank ops on streams, checks, JSON export", 20,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<GraphFlags>();
      add_layout_flags(app, flags->layout, /*model_positional=*/false);
      app.add_option("--rank,-r", flags->rank, "Rank to show")->capture_default_str();
      app.add_flag("--ops", flags->ops, "Print the rank's op list instead of the summary");
      app.add_flag("--json", flags->json, "Print as JSON");
      app.add_flag("--check", flags->check,
                   "Run the checkers (collectives, p2p, deadlock, FLOPs, volumes); exit 1 on problems");
      app.add_option("--expert-imbalance", flags->imbalance,
                     "MoE: tokens of the most loaded expert / mean (1 = uniform top-k load)")
          ->capture_default_str();
      app.add_option("--export", flags->export_path,
                     "Write the whole graph (shared programs, groups) as JSON");
      return [flags, &app] {
        require_model_flag(app, "calo graph");
        return show_graph(*flags);
      };
    });

}  // namespace
}  // namespace calo::cli
