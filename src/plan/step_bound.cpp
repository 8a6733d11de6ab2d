#include "plan/step_bound.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <tuple>

#include "parallel/schedule.h"
#include "sim/cost_model.h"
#include "sim/power_thermal.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

/// One program's additive terms: per stream its compute, and the pipeline's pieces of the compute stream.
struct ProgramTerms {
  int stage = 0;
  std::array<double, graph::kNumStreams> stream_s{};  ///< compute-op time per stream
  double head_s = 0;                                  ///< micro-batch 0's first-chunk forward
  double tail_s = 0;                                  ///< the last micro-batch's first-chunk backward
  double microbatch_s = 0;  ///< compute-stream ops of micro-batches (issued after micro-batch 0 arrives)
  double after_last_s = 0;  ///< compute-stream ops issued after the last micro-batch's first-chunk backward
};

/// `program`'s terms with its compute ops stretched by `stretch`, op i costing `cost_of(i)`; each op's
/// duration into `compute_s` when given (communication ops 0).
template <typename CostOf>
ProgramTerms program_terms(const graph::Graph& graph, const graph::RankProgram& program, CostOf cost_of,
                           double stretch, std::vector<double>* compute_s) {
  const int last_microbatch = graph.layout.num_microbatches() - 1;
  // Where the weight-gradient GEMMs are off the chain from stage to stage (the schedule's bound shape), they
  // stay out of the tail.
  const bool weight_grads_off_chain = !parallel::bound_shape(graph.layout).weight_grads_on_chain;
  ProgramTerms terms;
  terms.stage = program.stage;
  if (compute_s != nullptr) compute_s->assign(program.ops.size(), 0.0);
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const graph::Op& op = program.ops[index];
    if (graph::is_communication(op.kind)) continue;
    const double duration_s = cost_of(index).duration_s(stretch, 1.0);
    if (compute_s != nullptr) (*compute_s)[index] = duration_s;
    terms.stream_s[static_cast<int>(op.stream)] += duration_s;
    if (op.stream != graph::Stream::kCompute) continue;
    terms.after_last_s += duration_s;
    if (op.microbatch < 0) continue;
    terms.microbatch_s += duration_s;
    if (op.microbatch == 0 && op.chunk == 0 && op.phase == graph::Phase::kForward) terms.head_s += duration_s;
    const bool off_chain =
        weight_grads_off_chain && op.kind == graph::OpKind::kGemm && op.gemm.pass == graph::GemmPass::kWgrad;
    if (op.microbatch == last_microbatch && op.chunk == 0 && op.phase == graph::Phase::kBackward &&
        !off_chain) {
      terms.tail_s += duration_s;
      terms.after_last_s = 0;  // restart: only ops issued after this one count
    }
  }
  return terms;
}

/// Terms (a)-(c) over every program: the busiest stream, and per stage k micro-batch 0's forward on stages
/// 0..k-1 before stage k's micro-batch compute (and, instead of what follows the last micro-batch's
/// first-chunk backward on stage k, that micro-batch's backward on stages k-1..0).
double bound_of_terms(const std::vector<ProgramTerms>& programs, int stages) {
  std::vector<double> head_s(stages, INFINITY);
  std::vector<double> tail_s(stages, INFINITY);
  double bound_s = 0;
  for (const ProgramTerms& terms : programs) {
    bound_s = std::max(bound_s, *std::max_element(terms.stream_s.begin(), terms.stream_s.end()));
    head_s[terms.stage] = std::min(head_s[terms.stage], terms.head_s);
    tail_s[terms.stage] = std::min(tail_s[terms.stage], terms.tail_s);
  }
  for (const ProgramTerms& terms : programs) {
    double before_s = 0;
    double after_s = 0;
    for (int stage = 0; stage < terms.stage; ++stage) {
      before_s += head_s[stage];
      after_s += tail_s[stage];
    }
    bound_s = std::max(bound_s, before_s + terms.microbatch_s);
    bound_s = std::max(bound_s, before_s + std::max(0.0, terms.microbatch_s - terms.after_last_s) + after_s);
  }
  return bound_s;
}

/// Term (d): when `program`'s ops would end on global `rank` if it never waited for another rank: each stream
/// in issue order, an op starting once its stream and its dependencies are done, compute ops taking
/// `compute_s`, a collective its own transfer time (the engine completes it after the last member arrives
/// plus the slowest member's transfer, never sooner) and a message no time (its peer may have sent it long
/// before). Every one of these is at least as long in the engine, so the step is at least this long.
double isolated_program_s(const graph::Graph& graph, const sim::ClusterSpec& cluster,
                          const graph::RankProgram& program, int rank, const std::vector<double>& compute_s) {
  const auto placements = sim::rank_group_placements(graph, cluster, rank);
  std::vector<double> finish_s(program.ops.size(), 0.0);
  // Every layer repeats the same few collectives: cost each (kind, group, bytes) once (a handful per program:
  // a linear search beats a tree).
  std::vector<std::pair<std::tuple<int, int, double>, double>> collective_s;
  double stream_free_s[graph::kNumStreams] = {};
  double end_s = 0;
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const graph::Op& op = program.ops[index];
    double ready_s = stream_free_s[static_cast<int>(op.stream)];
    for (std::int32_t dep : program.deps_of(index)) ready_s = std::max(ready_s, finish_s[dep]);
    double duration_s = compute_s[index];
    if (op.kind == graph::OpKind::kCollective) {
      const auto key = std::make_tuple(static_cast<int>(op.collective), static_cast<int>(op.group), op.bytes);
      auto found = std::find_if(collective_s.begin(), collective_s.end(),
                                [&](const auto& entry) { return entry.first == key; });
      if (found == collective_s.end()) {
        const double cost_s =
            sim::collective_time_s(cluster, op.collective, op.bytes, placements[static_cast<int>(op.group)]);
        collective_s.emplace_back(key, cost_s);
        found = collective_s.end() - 1;
      }
      duration_s = found->second;
    }
    finish_s[index] = ready_s + duration_s;
    stream_free_s[static_cast<int>(op.stream)] = finish_s[index];
    end_s = std::max(end_s, finish_s[index]);
  }
  return end_s;
}

/// The cost model of every program of `graph` (each op's cost, its power at any clock).
std::vector<sim::ProgramPower> program_powers(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  std::vector<sim::ProgramPower> powers;
  powers.reserve(graph.programs.size());
  for (const graph::RankProgram& program : graph.programs) powers.emplace_back(cluster.gpu, program);
  return powers;
}

/// Busy time and active energy (above idle) of a program's compute ops at a clock.
struct BusyEnergy {
  double busy_s = 0;
  double active_j = 0;
};

/// Compute stretch of a program whose compute at clock f takes `at_clock(f)`, under power limit `limit_w`:
/// f_max / the highest clock whose busy-window mean power fits, raised by kCapClockHeadroom (at most f_max).
double stretch_under_cap(const sim::GpuSpec& gpu, double limit_w,
                         const std::function<BusyEnergy(double)>& at_clock) {
  const BusyEnergy at_max = at_clock(gpu.max_sm_mhz);
  if (at_max.busy_s <= 0) return 1.0;
  auto fits = [&](double clock_mhz) {
    const BusyEnergy at = at_clock(clock_mhz);
    return at.busy_s <= 0 || gpu.idle_power_w + at.active_j / at.busy_s <= limit_w;
  };
  const double guess_mhz = sim::power_law_cap_clock_mhz(gpu, at_max.active_j / at_max.busy_s, limit_w);
  const double cap_mhz = sim::highest_fitting_clock_mhz(gpu, fits, guess_mhz);
  return gpu.max_sm_mhz / std::min(gpu.max_sm_mhz, cap_mhz * (1 + kCapClockHeadroom));
}

/// The card's limit when `cap_w` <= 0.
double limit_w(const sim::GpuSpec& gpu, double cap_w) {
  return cap_w > 0 ? cap_w : gpu.power_limit_w;
}

/// Terms (a)-(d) of `graph` with program i's compute stretched by `stretch[i]`; its ops' costs from
/// `powers` when given (computed as each op is reached otherwise: no cost vector for a whole graph).
double bound_at_stretch_s(const graph::Graph& graph, const sim::ClusterSpec& cluster,
                          const std::vector<double>& stretch, const std::vector<sim::ProgramPower>* powers) {
  std::vector<int> rank_of_program(graph.programs.size(), -1);
  for (int rank = graph.world_size() - 1; rank >= 0; --rank)
    rank_of_program[graph.program_of_rank[rank]] = rank;
  std::vector<ProgramTerms> terms;
  terms.reserve(graph.programs.size());
  double isolated_s = 0;
  std::vector<double> compute_s;
  for (std::size_t index = 0; index < graph.programs.size(); ++index) {
    const graph::RankProgram& program = graph.programs[index];
    if (powers != nullptr) {
      const std::vector<sim::ComputeCost>& costs = (*powers)[index].costs();
      terms.push_back(program_terms(
          graph, program, [&](std::size_t op) -> const sim::ComputeCost& { return costs[op]; },
          stretch[index], &compute_s));
    } else {
      terms.push_back(program_terms(
          graph, program, [&](std::size_t op) { return sim::compute_cost(cluster.gpu, program.ops[op]); },
          stretch[index], &compute_s));
    }
    if (rank_of_program[index] >= 0)
      isolated_s = std::max(isolated_s,
                            isolated_program_s(graph, cluster, program, rank_of_program[index], compute_s));
  }
  return std::max(isolated_s, bound_of_terms(terms, graph.layout.pp));
}

/// capped_stretch from the programs' cost models.
std::vector<double> stretch_of_programs(std::vector<sim::ProgramPower>& powers, const sim::GpuSpec& gpu,
                                        double cap_w) {
  std::vector<double> stretch;
  stretch.reserve(powers.size());
  for (sim::ProgramPower& power : powers) {
    stretch.push_back(stretch_under_cap(gpu, limit_w(gpu, cap_w), [&](double clock_mhz) {
      const sim::ProgramAtClock& summary = power.at_clock(clock_mhz);
      return BusyEnergy{summary.busy_s, summary.active_energy_j};
    }));
  }
  return stretch;
}

}  // namespace

std::vector<double> capped_stretch(const graph::Graph& graph, const sim::ClusterSpec& cluster, double cap_w) {
  std::vector<sim::ProgramPower> powers = program_powers(graph, cluster);
  return stretch_of_programs(powers, cluster.gpu, cap_w);
}

double step_time_lower_bound_s(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  return bound_at_stretch_s(graph, cluster, std::vector<double>(graph.programs.size(), 1.0), nullptr);
}

double capped_step_bound_s(const graph::Graph& graph, const sim::ClusterSpec& cluster, double cap_w) {
  std::vector<sim::ProgramPower> powers = program_powers(graph, cluster);
  const std::vector<double> stretch = stretch_of_programs(powers, cluster.gpu, cap_w);
  return bound_at_stretch_s(graph, cluster, stretch, &powers);
}

double step_bound_at_stretch_s(const graph::Graph& graph, const sim::ClusterSpec& cluster,
                               const std::vector<double>& stretch) {
  if (stretch.size() != graph.programs.size())
    throw std::logic_error("step_bound_at_stretch_s: one stretch per program of the graph");
  return bound_at_stretch_s(graph, cluster, stretch, nullptr);
}

int probe_microbatches(const parallel::Layout& layout, int which) {
  if (layout.pp == 1) return which == 0 ? 2 : 3;
  return parallel::bound_shape(layout).pattern_microbatches * (which == 0 ? 1 : 2);
}

bool probed(const parallel::Layout& layout) {
  return layout.num_microbatches() > probe_microbatches(layout, 0) + probe_microbatches(layout, 1);
}

LayoutProbe::LayoutProbe(const model::ModelSpec& model, const parallel::Layout& layout,
                         const sim::ClusterSpec& cluster, bool whole)
    : cluster_(cluster), microbatches_(layout.num_microbatches()) {
  if (whole || !probed(layout)) {
    graphs_.push_back(graph::build_graph(model, layout));
    first_microbatches_ = second_microbatches_ = microbatches_;
  } else {
    for (int which : {0, 1}) {
      parallel::Layout probe = layout;
      probe.global_batch = layout.micro_batch * layout.dp * probe_microbatches(layout, which);
      graphs_.push_back(graph::build_graph(model, probe));
    }
    first_microbatches_ = probe_microbatches(layout, 0);
    second_microbatches_ = probe_microbatches(layout, 1);
    if (graphs_[0].programs.size() != graphs_[1].programs.size())
      throw std::logic_error("the probe graphs of " + parallel::describe(layout) + " differ in programs");
  }
  for (const graph::Graph& graph : graphs_) powers_.push_back(program_powers(graph, cluster_));
}

double LayoutProbe::at_layout(double first, double second) const {
  if (graphs_.size() == 1) return first;
  return first + (second - first) * (microbatches_ - first_microbatches_) /
                     (second_microbatches_ - first_microbatches_);
}

ProbeBound LayoutProbe::bound(double cap_w) {
  const sim::GpuSpec& gpu = cluster_.gpu;
  const std::size_t last = graphs_.size() - 1;
  std::vector<ProgramTerms> terms;
  ProbeBound result;
  for (std::size_t index = 0; index < graphs_[0].programs.size(); ++index) {
    sim::ProgramPower& first = powers_[0][index];
    sim::ProgramPower& second = powers_[last][index];
    const double stretch = stretch_under_cap(gpu, limit_w(gpu, cap_w), [&](double clock_mhz) {
      const sim::ProgramAtClock& a = first.at_clock(clock_mhz);
      const sim::ProgramAtClock& b = second.at_clock(clock_mhz);
      return BusyEnergy{at_layout(a.busy_s, b.busy_s), at_layout(a.active_energy_j, b.active_energy_j)};
    });
    result.stretch.push_back(stretch);
    auto costs_of = [](const sim::ProgramPower& power) {
      return [&power](std::size_t op) -> const sim::ComputeCost& { return power.cost(op); };
    };
    const ProgramTerms a =
        program_terms(graphs_[0], graphs_[0].programs[index], costs_of(first), stretch, nullptr);
    const ProgramTerms b =
        program_terms(graphs_[last], graphs_[last].programs[index], costs_of(second), stretch, nullptr);
    ProgramTerms at = a;
    for (int stream = 0; stream < graph::kNumStreams; ++stream)
      at.stream_s[stream] = at_layout(a.stream_s[stream], b.stream_s[stream]);
    at.head_s = at_layout(a.head_s, b.head_s);
    at.tail_s = at_layout(a.tail_s, b.tail_s);
    at.microbatch_s = at_layout(a.microbatch_s, b.microbatch_s);
    at.after_last_s = at_layout(a.after_last_s, b.after_last_s);
    terms.push_back(at);
  }
  result.bound_s = bound_of_terms(terms, graphs_[0].layout.pp);
  result.least_active_energy_j = least_active_energy_j();
  return result;
}

double LayoutProbe::least_active_energy_j() {
  const sim::GpuSpec& gpu = cluster_.gpu;
  // Compute-bound: energy ~ f^(exponent - 1); memory-bound ~ f^exponent: both fall with the clock.
  if (gpu.clock_power_exponent < 1) return 0.0;
  std::vector<int> ranks(graphs_[0].programs.size(), 0);
  for (int program : graphs_[0].program_of_rank) ++ranks[program];
  const std::size_t last = graphs_.size() - 1;
  double energy_j = 0;
  for (std::size_t index = 0; index < ranks.size(); ++index) {
    const double first_j = powers_[0][index].at_clock(gpu.min_sm_mhz).active_energy_j;
    const double second_j = powers_[last][index].at_clock(gpu.min_sm_mhz).active_energy_j;
    energy_j += ranks[index] * at_layout(first_j, second_j);
  }
  return energy_j;
}

StageCompute LayoutProbe::stage_compute() const {
  auto of_graph = [&](std::size_t which) {
    std::vector<const std::vector<sim::ComputeCost>*> costs;
    for (const sim::ProgramPower& power : powers_[which]) costs.push_back(&power.costs());
    return plan::stage_compute(graphs_[which], costs);
  };
  const StageCompute first = of_graph(0);
  const StageCompute second = of_graph(graphs_.size() - 1);
  StageCompute at = first;
  for (std::size_t stage = 0; stage < at.layers_s.size(); ++stage) {
    at.layers_s[stage] = at_layout(first.layers_s[stage], second.layers_s[stage]);
    at.extra_s[stage] = at_layout(first.extra_s[stage], second.extra_s[stage]);
  }
  return at;
}

std::int64_t LayoutProbe::probe_ops() const {
  std::int64_t ops = 0;
  for (const graph::Graph& graph : graphs_) {
    for (const graph::RankProgram& program : graph.programs)
      ops += static_cast<std::int64_t>(program.ops.size());
  }
  return ops;
}

}  // namespace calo::plan
