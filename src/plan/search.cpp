#include "plan/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/table.h"
#include "core/threads.h"
#include "graph/graph.h"
#include "graph/op_budget.h"
#include "parallel/memory.h"
#include "parallel/validate.h"
#include "plan/balanced_partition.h"
#include "plan/search_internal.h"
#include "plan/search_work.h"
#include "plan/step_bound.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::plan {

using detail::check_constraints;
using detail::count_verdicts;
using detail::rank_and_mark_front;
using detail::ranks_before;
using detail::refuse_empty;
using detail::refuse_over_budget;
using detail::score;

namespace {

/// Simulates one candidate and fills its figures and verdict (budget checks included).
void evaluate(Evaluation& evaluation, const graph::Graph& graph, const SearchRequest& request) {
  sim::SimOptions options;
  options.steps = request.steps;
  if (evaluation.power_cap_w > 0) options.power_limit_w.assign(graph.world_size(), evaluation.power_cap_w);
  const sim::SimResult result = sim::simulate(graph, request.cluster, options);
  double energy_j = 0;
  double peak_w = 0;
  double max_die_c = 0;
  for (const sim::StepResult& step : result.step_results) {
    energy_j += step.energy_j;
    peak_w = std::max(peak_w, step.peak_power_w);
    max_die_c = std::max(max_die_c, step.max_die_c);
  }
  evaluation.iteration_s = result.iteration_s;
  evaluation.tokens_per_s = sim::tokens_per_s(result);
  evaluation.energy_per_step_j = energy_j / result.steps;
  evaluation.tokens_per_j = result.tokens_per_step / evaluation.energy_per_step_j;
  evaluation.cluster_power_w = evaluation.energy_per_step_j / result.iteration_s;
  evaluation.peak_power_w = peak_w;
  evaluation.max_die_c = max_die_c;
  evaluation.mfu = sim::mfu(result);
  evaluation.verdict = Verdict::kRanked;
  if (request.power_budget_w > 0 && evaluation.cluster_power_w > request.power_budget_w) {
    evaluation.verdict = Verdict::kOverBudget;
    evaluation.note = fmt::format("cluster power {:.0f} W > --power-budget-w {:.0f}",
                                  evaluation.cluster_power_w, request.power_budget_w);
  } else if (request.max_peak_power_w > 0 && peak_w > request.max_peak_power_w) {
    evaluation.verdict = Verdict::kOverBudget;
    evaluation.note =
        fmt::format("peak GPU power {:.0f} W > --max-peak-power-w {:.0f}", peak_w, request.max_peak_power_w);
  }
}

/// Simulates the uniform partition and/or the balanced one (those the bound admits), keeping the better in
/// `evaluation`; `graphs` caches their graphs across a layout's power caps.
void evaluate_partitions(Evaluation& evaluation, bool uniform, bool balanced,
                         std::optional<graph::Graph> (&graphs)[2], const SearchRequest& request) {
  std::optional<Evaluation> other;
  if (balanced) other.emplace(evaluation);  // before the uniform partition's figures land in `evaluation`
  if (uniform) {
    if (!graphs[0]) graphs[0].emplace(graph::build_graph(request.space.model, evaluation.candidate.layout));
    evaluate(evaluation, *graphs[0], request);
  }
  if (!other) return;
  other->candidate = *other->balanced;
  if (!graphs[1]) graphs[1].emplace(graph::build_graph(request.space.model, other->candidate.layout));
  evaluate(*other, *graphs[1], request);
  if (uniform && !ranks_before(*other, evaluation, request.objective)) return;
  other->uniform_iteration_s = uniform ? evaluation.iteration_s : 0.0;
  other->lower_bound_s = other->balanced_lower_bound_s;  // the bound of the partition it now describes
  evaluation = std::move(*other);
}

/// Sets `evaluation.balanced` to the pipeline layout at the layers per stage that balance its stages' compute
/// (from `probe`, the uniform partition's), when those differ from the uniform ones and fit memory; returns
/// its probe.
std::optional<LayoutProbe> add_balanced_partition(Evaluation& evaluation, const LayoutProbe& probe,
                                                  const SearchRequest& request) {
  const parallel::Layout& layout = evaluation.candidate.layout;
  if (!balanceable(layout)) return std::nullopt;  // before the probe's stage compute
  const std::vector<int> layers = balanced_layers(layout, probe.stage_compute());
  if (layers.empty()) return std::nullopt;
  Candidate balanced = evaluation.candidate;
  balanced.layout.layers_per_stage = layers;
  balanced.layout = parallel::resolve_layout(request.space.model, balanced.layout, true);
  balanced.memory = parallel::memory_per_gpu(request.space.model, balanced.layout);
  balanced.fits = fits_memory(balanced.memory, request.cluster.gpu.memory_bytes, request.space.memory_limit);
  balanced.tight = parallel::is_tight(balanced.memory.total_bytes(), request.cluster.gpu.memory_bytes);
  if (!balanced.fits) return std::nullopt;
  std::optional<LayoutProbe> balanced_probe;
  balanced_probe.emplace(request.space.model, balanced.layout, request.cluster);
  evaluation.balanced = std::move(balanced);
  return balanced_probe;
}

/// The k best feasible scores seen so far; a candidate whose lower bound exceeds the k-th cannot enter.
class TopScores {
 public:
  explicit TopScores(int keep) : keep_(std::max(1, keep)) {}
  void add(double value) {
    std::lock_guard lock(mutex_);
    scores_.insert(std::upper_bound(scores_.begin(), scores_.end(), value), value);
    if (static_cast<int>(scores_.size()) > keep_) scores_.pop_back();
  }
  /// The k-th best score, or +inf while fewer than k are known.
  double threshold() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(scores_.size()) < keep_ ? INFINITY : scores_.back();
  }

 private:
  int keep_;
  mutable std::mutex mutex_;
  std::vector<double> scores_;
};

/// The layout space of the request on its cluster; refuses (InputError) when no layout fits.
LayoutSpace searched_space(const SearchRequest& request) {
  SpaceRequest space_request = request.space;
  space_request.device_memory_bytes = request.cluster.gpu.memory_bytes;
  space_request.gpus_per_node = request.cluster.node.gpus;
  space_request.attention = request.cluster.attention;
  LayoutSpace space = enumerate_layouts(space_request);
  if (space.fitting() == 0) refuse_empty(request, space_request, space);
  return space;
}

/// Adds one evaluation per layout and power cap to `result`, the caps of a layout next to each other, and
/// counts the layouts out of memory; returns the index of the first of each fitting layout's group.
std::vector<std::size_t> add_evaluations(const LayoutSpace& space, const std::vector<double>& caps_w,
                                         SearchResult& result) {
  std::vector<std::size_t> fitting;
  for (const Candidate& candidate : space.candidates) {
    if (candidate.fits) fitting.push_back(result.evaluations.size());
    for (double cap_w : caps_w) {
      Evaluation evaluation;
      evaluation.candidate = candidate;
      evaluation.power_cap_w = cap_w;
      if (!candidate.fits) ++result.out_of_memory;
      if (candidate.tight) ++result.tight;
      result.evaluations.push_back(std::move(evaluation));
    }
  }
  return fitting;
}

/// The flags that narrow a space, for a refusal: for each setting the request does not hold yet, values the
/// fitting layouts (`fitting`, into result.evaluations) have: the two largest tp and the two smallest
/// micro-batches, 1F1B, no or selective recompute, ZeRO-1.
std::string narrowing_flags(const SearchRequest& request, const std::vector<std::size_t>& fitting,
                            const SearchResult& result) {
  std::set<int> tp, micro_batch;
  for (std::size_t index : fitting) {
    tp.insert(result.evaluations[index].candidate.layout.tp);
    micro_batch.insert(result.evaluations[index].candidate.layout.micro_batch);
  }
  auto two = [](auto first, auto last) {
    std::vector<int> values(first, last);
    if (values.size() > 2) values.resize(2);
    std::sort(values.begin(), values.end());
    return fmt::format("{}", fmt::join(values, ","));
  };
  std::vector<std::string> flags;
  const LayoutConstraints& held = request.space.constraints;
  if (held.tp.empty() && tp.size() > 2) flags.push_back("--tp " + two(tp.rbegin(), tp.rend()));
  if (held.micro_batch.empty() && micro_batch.size() > 2)
    flags.push_back("--mbs " + two(micro_batch.begin(), micro_batch.end()));
  if (held.schedule.empty()) flags.push_back("--schedule 1f1b");
  if (held.recompute.empty()) flags.push_back("--recompute none,selective");
  if (held.zero_stage.empty()) flags.push_back("--zero 1");
  return flags.empty() ? std::string("fewer values in the layout flags")
                       : fmt::format("e.g. {}", fmt::join(flags, " "));
}

/// Ops of the probe graphs of a layout whose whole graph holds `ops`: ops scale with micro-batches, and a
/// pipeline layout may add a balanced partition's probe.
double estimated_probe_ops(const parallel::Layout& layout, std::int64_t ops, bool balance_partitions) {
  if (!probed(layout)) return static_cast<double>(ops);
  const double share = static_cast<double>(probe_microbatches(layout, 0) + probe_microbatches(layout, 1)) /
                       layout.num_microbatches();
  return static_cast<double>(ops) * share * (balance_partitions && layout.pp > 1 ? 2 : 1);
}

/// The search's work known before any graph is built: its totals and each fitting layout's graph and probe
/// ops, by the index of the layout's first evaluation.
struct SizedWork {
  SearchWork work;
  std::vector<double> graph_ops;  ///< whole-graph ops (0 where no fitting layout starts)
  std::vector<double> probe_ops;  ///< probe-graph ops
  std::size_t caps = 1;           ///< evaluations per layout
  /// One thread's seconds of the evaluation at `index` if it is simulated: its share of the graphs' building
  /// (`group`: the index of its layout's first evaluation) and their simulation.
  double full_evaluation_s(std::size_t group) const {
    return graph_ops[group] * kBalancedGraphsFactor * kSearchSecondsPerBuiltOp / static_cast<double>(caps) +
           simulated_evaluation_s(graph_ops[group], work.steps);
  }
  /// One thread's expected seconds of that evaluation, pruning's expected share applied.
  double expected_evaluation_s(std::size_t group) const {
    return plan::expected_evaluation_s(work, graph_ops[group], caps);
  }
  /// One thread's seconds of the layout's probe bounds.
  double bound_s(std::size_t group) const { return probe_ops[group] * kSearchSecondsPerProbeOp; }
};

/// Chapter 0: the size of every fitting layout's graph (graph::estimated_op_count, before any is built); a
/// layout beyond graph::kMaxGraphOps leaves `fitting` as too large. Refuses a space whose estimated search
/// time exceeds request.max_minutes, naming the flags that narrow it.
SizedWork size_layouts(const SearchRequest& request, const std::vector<double>& caps_w,
                       std::vector<std::size_t>& fitting, int threads, SearchResult& result) {
  std::vector<std::int64_t> ops(fitting.size());
  core::parallel_for(fitting.size(), threads, [&](std::size_t item) {
    const Evaluation& evaluation = result.evaluations[fitting[item]];
    ops[item] = graph::estimated_op_count(request.space.model, evaluation.candidate.layout);
  });
  std::vector<std::size_t> kept;
  SizedWork sized;
  SearchWork& work = sized.work;
  work.steps = request.steps;
  work.objective = request.objective;
  work.prune = request.prune;
  sized.caps = caps_w.size();
  sized.graph_ops.assign(result.evaluations.size(), 0.0);
  sized.probe_ops.assign(result.evaluations.size(), 0.0);
  for (std::size_t item = 0; item < fitting.size(); ++item) {
    if (ops[item] <= graph::kMaxGraphOps) {
      kept.push_back(fitting[item]);
      result.graph_ops += static_cast<double>(ops[item]);
      sized.graph_ops[fitting[item]] = static_cast<double>(ops[item]);
      sized.probe_ops[fitting[item]] = estimated_probe_ops(result.evaluations[fitting[item]].candidate.layout,
                                                           ops[item], request.balance_partitions);
      work.probe_ops += sized.probe_ops[fitting[item]];
      continue;
    }
    ++result.too_large;
    for (std::size_t cap = 0; cap < caps_w.size(); ++cap) {
      Evaluation& evaluation = result.evaluations[fitting[item] + cap];
      evaluation.verdict = Verdict::kTooLarge;
      evaluation.note = fmt::format("a graph of about {:.0f} M ops (at most {:.0f} M)", ops[item] / 1e6,
                                    graph::kMaxGraphOps / 1e6);
    }
  }
  fitting = std::move(kept);
  work.graph_ops = result.graph_ops;
  work.evaluations = static_cast<double>(fitting.size() * caps_w.size());
  work.evaluated_ops = result.graph_ops * static_cast<double>(caps_w.size());
  result.estimated_s = estimated_search_s(work, threads);
  require_input(
      request.max_minutes <= 0 || result.estimated_s <= request.max_minutes * 60,
      fmt::format(
          "this space is {} fitting layouts whose graphs hold about {:.2f} G ops: about {:.1f} min on {} "
          "threads, beyond --max-minutes {:g}; narrow it ({}), run where there are more cores, or give "
          "--max-minutes {:.0f}",
          fitting.size(), result.graph_ops / 1e9, result.estimated_s / 60, threads, request.max_minutes,
          narrowing_flags(request, fitting, result), std::ceil(result.estimated_s / 60 * 1.5)));
  return sized;
}

/// One thread's expected seconds of the whole search (bounds and evaluations), the progress' first total.
double expected_work_s(const SizedWork& sized, const std::vector<std::size_t>& fitting) {
  double total_s = 0;
  for (std::size_t group : fitting)
    total_s += sized.bound_s(group) + static_cast<double>(sized.caps) * sized.expected_evaluation_s(group);
  return total_s;
}

/// Marks the evaluation `index` as not started: the search reached --max-minutes.
void mark_stopped(Evaluation& evaluation, double max_minutes) {
  evaluation.verdict = Verdict::kStopped;
  evaluation.note = fmt::format("not simulated: the search reached --max-minutes {:g}", max_minutes);
}

/// Per evaluation, what chapter 1 learnt beyond the bound, of the uniform partition and of the balanced one:
/// the compute stretch of each program its probe's bound ran at (chapter 2 bounds the whole graph at the same
/// clocks), and the least active energy of a step (ProbeBound::least_active_energy_j).
struct ProbeStretches {
  std::vector<std::vector<double>> uniform;
  std::vector<std::vector<double>> balanced;
  std::vector<double> uniform_active_j;
  std::vector<double> balanced_active_j;
};

/// What chapters 1 and 2 share: the request, its caps, the threads, the work known up front, the progress
/// and the --max-minutes stop.
struct SearchContext {
  const SearchRequest& request;
  const std::vector<double>& caps_w;
  int threads;
  const SizedWork& sized;
  Progress& progress;
  Deadline& deadline;
};

/// Chapter 1: the bound of every fitting layout and power cap from its probe (terms (a)-(c), graphs of a few
/// micro-batches, cost model, no engine), and the balanced partition's. A layout whose bound would end past
/// --max-minutes is stopped, with its caps.
void bound_layouts(const SearchContext& context, const std::vector<std::size_t>& fitting,
                   SearchResult& result, ProbeStretches& stretches) {
  const SearchRequest& request = context.request;
  const std::vector<double>& caps_w = context.caps_w;
  stretches.uniform.resize(result.evaluations.size());
  stretches.balanced.resize(result.evaluations.size());
  stretches.uniform_active_j.assign(result.evaluations.size(), 0.0);
  stretches.balanced_active_j.assign(result.evaluations.size(), 0.0);
  std::atomic<std::int64_t> probe_ops{0};
  core::parallel_for(fitting.size(), context.threads, [&](std::size_t item) {
    Evaluation& evaluation = result.evaluations[fitting[item]];
    const double bound_s = context.sized.bound_s(fitting[item]);
    if (context.deadline.passed(bound_s)) {
      for (std::size_t cap = 0; cap < caps_w.size(); ++cap)
        mark_stopped(result.evaluations[fitting[item] + cap], request.max_minutes);
      context.progress.step(bound_s, 0);
      return;
    }
    LayoutProbe probe(request.space.model, evaluation.candidate.layout, request.cluster);
    std::optional<LayoutProbe> balanced =
        request.balance_partitions ? add_balanced_partition(evaluation, probe, request) : std::nullopt;
    for (std::size_t cap = 0; cap < caps_w.size(); ++cap) {
      const std::size_t index = fitting[item] + cap;
      Evaluation& capped = result.evaluations[index];
      ProbeBound bound = probe.bound(caps_w[cap]);
      capped.lower_bound_s = bound.bound_s;
      stretches.uniform[index] = std::move(bound.stretch);
      stretches.uniform_active_j[index] = bound.least_active_energy_j;
      capped.balanced = evaluation.balanced;
      if (!balanced) continue;
      ProbeBound balanced_bound = balanced->bound(caps_w[cap]);
      capped.balanced_lower_bound_s = balanced_bound.bound_s;
      stretches.balanced[index] = std::move(balanced_bound.stretch);
      stretches.balanced_active_j[index] = balanced_bound.least_active_energy_j;
    }
    probe_ops += probe.probe_ops() + (balanced ? balanced->probe_ops() : 0);
    context.progress.step(bound_s, bound_s);
  });
  result.probe_ops = static_cast<double>(probe_ops.load());
}

/// The least score of a layout whose step takes at least `bound_s` and whose compute draws at least
/// `active_j` above idle: the step time, or the energy per step (every GPU draws at least its idle power for
/// at least the bound, and the compute its energy at the lowest clock).
class ScoreBound {
 public:
  explicit ScoreBound(const SearchRequest& request)
      : energy_(request.objective == Objective::kEnergy),
        idle_cluster_w_(request.cluster.gpu.idle_power_w * request.space.gpus) {}
  double operator()(double bound_s, double active_j) const {
    return energy_ ? bound_s * idle_cluster_w_ + active_j : bound_s;
  }

 private:
  bool energy_;
  double idle_cluster_w_;
};

/// Whether a layout whose score is at least ScoreBound's can still enter the top K, against the k-th best
/// score frozen at the start of the layout's wave (docs/PLANNER.md: the same layouts are simulated whatever
/// the threads and their timing).
class Admission {
 public:
  explicit Admission(const SearchRequest& request)
      : prune_(request.prune && request.objective != Objective::kPareto), score_(request) {}
  void freeze(double threshold) { threshold_ = threshold; }
  bool operator()(double bound_s, double active_j) const {
    return !prune_ || score_(bound_s, active_j) <= threshold_;
  }

 private:
  bool prune_;
  ScoreBound score_;
  double threshold_ = INFINITY;
};

/// Layouts of the first wave of chapter 2 (the top K's size), of later waves twice the last's, at most this.
inline constexpr std::size_t kMaxWave = 32;

/// Refines a partition's probe bound (`bound_s`) to terms (a)-(d) on its whole graph (built into `graph`
/// when absent) at the probe's clocks (`stretch`); returns whether `admitted` still holds (with its least
/// active energy `active_j`).
bool refine_bound(double& bound_s, double active_j, std::optional<graph::Graph>& graph,
                  const parallel::Layout& layout, const std::vector<double>& stretch,
                  const SearchRequest& request, const Admission& admitted,
                  std::atomic<std::int64_t>& built_ops) {
  if (!admitted(bound_s, active_j)) return false;
  if (!graph) {
    graph.emplace(graph::build_graph(request.space.model, layout));
    for (const graph::RankProgram& program : graph->programs)
      built_ops += static_cast<std::int64_t>(program.ops.size());
  }
  bound_s = std::max(bound_s, step_bound_at_stretch_s(*graph, request.cluster, stretch));
  return admitted(bound_s, active_j);
}

/// Chapter 2: simulate in increasing order of the least score (sorting `fitting`); skip a layout once its
/// least score (ScoreBound) exceeds the k-th best feasible score, first by its probe's bound, then by its
/// whole graph's.
void simulate_in_bound_order(const SearchContext& context, std::vector<std::size_t>& fitting,
                             SearchResult& result, const ProbeStretches& stretches) {
  const SearchRequest& request = context.request;
  const ScoreBound score_bound(request);
  auto least_score = [&](std::size_t index) {
    const Evaluation& evaluation = result.evaluations[index];
    const double uniform = score_bound(evaluation.lower_bound_s, stretches.uniform_active_j[index]);
    if (!evaluation.balanced) return uniform;
    return std::min(uniform,
                    score_bound(evaluation.balanced_lower_bound_s, stretches.balanced_active_j[index]));
  };
  std::stable_sort(fitting.begin(), fitting.end(),
                   [&](std::size_t a, std::size_t b) { return least_score(a) < least_score(b); });
  TopScores top(request.top);
  Admission admitted(request);
  std::atomic<std::int64_t> built_ops{0};
  auto evaluate_layout = [&](std::size_t item) {
    // Graphs built once for all of the layout's caps, when one is simulated: uniform, then balanced.
    std::optional<graph::Graph> graphs[2];
    const double full_s = context.sized.full_evaluation_s(fitting[item]);
    const double expected_s = context.sized.expected_evaluation_s(fitting[item]);
    for (std::size_t cap = 0; cap < context.caps_w.size(); ++cap) {
      const std::size_t index = fitting[item] + cap;
      Evaluation& evaluation = result.evaluations[index];
      if (evaluation.verdict == Verdict::kStopped || context.deadline.passed(full_s)) {
        mark_stopped(evaluation, request.max_minutes);
        context.progress.step(expected_s, 0);
        continue;
      }
      const auto started = std::chrono::steady_clock::now();
      try {
        const bool uniform =
            refine_bound(evaluation.lower_bound_s, stretches.uniform_active_j[index], graphs[0],
                         evaluation.candidate.layout, stretches.uniform[index], request, admitted, built_ops);
        const bool balanced =
            evaluation.balanced &&
            refine_bound(evaluation.balanced_lower_bound_s, stretches.balanced_active_j[index], graphs[1],
                         evaluation.balanced->layout, stretches.balanced[index], request, admitted,
                         built_ops);
        if (!uniform && !balanced) {
          evaluation.verdict = Verdict::kPruned;
        } else {
          evaluate_partitions(evaluation, uniform, balanced, graphs, request);
          if (evaluation.verdict == Verdict::kRanked) top.add(score(evaluation, request.objective));
        }
      } catch (const std::exception& error) {
        evaluation.verdict = Verdict::kFailed;
        evaluation.note = error.what();
      }
      const bool simulated = evaluation.verdict != Verdict::kPruned;
      if (simulated)
        context.deadline.finished(
            full_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      context.progress.step(expected_s, simulated ? full_s : 0);
    }
  };
  // Waves in bound order, each judged against the threshold its start saw: which layouts are simulated does
  // not depend on the threads or their timing.
  std::size_t wave = static_cast<std::size_t>(std::max(1, request.top));
  for (std::size_t begin = 0; begin < fitting.size(); begin += wave, wave = std::min(2 * wave, kMaxWave)) {
    admitted.freeze(top.threshold());
    const std::size_t count = std::min(wave, fitting.size() - begin);
    core::parallel_for(count, context.threads, [&](std::size_t offset) { evaluate_layout(begin + offset); });
  }
  result.built_ops = static_cast<double>(built_ops.load());
}

}  // namespace

SearchResult search_layouts(const SearchRequest& request) {
  const auto started = std::chrono::steady_clock::now();
  check_constraints(request);
  const LayoutSpace space = searched_space(request);

  SearchResult result;
  result.invalid = space.invalid;
  result.invalid_by_construction = space.invalid_by_construction;
  result.excluded = space.excluded;
  result.excluded_by = space.excluded_by;
  const std::vector<double> caps_w =
      request.power_caps_w.empty() ? std::vector<double>{0.0} : request.power_caps_w;
  std::vector<std::size_t> fitting = add_evaluations(space, caps_w, result);
  const int threads = request.threads > 0
                          ? request.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const SizedWork sized = size_layouts(request, caps_w, fitting, threads, result);
  Progress progress(request, fitting.size() * (1 + caps_w.size()), expected_work_s(sized, fitting));
  Deadline deadline(started, request.stop_after_s > 0 ? request.stop_after_s : request.max_minutes * 60);
  const SearchContext context{request, caps_w, threads, sized, progress, deadline};

  ProbeStretches stretches;
  bound_layouts(context, fitting, result, stretches);
  result.bound_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  simulate_in_bound_order(context, fitting, result, stretches);
  rank_and_mark_front(request, count_verdicts(result), result);
  if (result.ranking.empty() && result.stopped > 0) {
    throw RuntimeFailure(fmt::format(
        "the search reached --max-minutes {:g} before any layout was ranked ({} of the {} evaluations that "
        "fit "
        "memory not started; estimated {:.1f} min on {} threads); give --max-minutes {:.0f} or narrow the "
        "space",
        request.max_minutes, result.stopped, result.stopped + result.simulated + result.pruned,
        result.estimated_s / 60, threads,
        std::ceil(std::max(result.estimated_s, deadline.elapsed_s()) / 60 * 2)));
  }
  if (result.ranking.empty()) refuse_over_budget(request, result);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace calo::plan
