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
#include "plan/search_work.h"
#include "plan/step_bound.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

/// Objective score, lower is better (step time, or energy per step: tokens per step are fixed by the job).
double score(const Evaluation& evaluation, Objective objective) {
  return objective == Objective::kEnergy ? evaluation.energy_per_step_j : evaluation.iteration_s;
}

/// One of the Pareto front's four figures: its corner's name and its value signed so that higher is better.
struct FrontFigure {
  const char* corner;
  double (*goodness)(const Evaluation&);
};

/// The four figures of the front: tokens/s, tokens/J, peak power, die temperature.
constexpr FrontFigure kFrontFigures[] = {
    {"fastest", [](const Evaluation& e) { return e.tokens_per_s; }},
    {"most tokens/J", [](const Evaluation& e) { return e.tokens_per_j; }},
    {"lowest peak", [](const Evaluation& e) { return -e.peak_power_w; }},
    {"coolest", [](const Evaluation& e) { return -e.max_die_c; }}};

/// True when `a` is at least as good as `b` on all four Pareto figures and better on one.
bool dominates(const Evaluation& a, const Evaluation& b) {
  bool better = false;
  for (const FrontFigure& figure : kFrontFigures) {
    const double mine = figure.goodness(a), theirs = figure.goodness(b);
    if (!(mine >= theirs)) return false;
    better = better || mine > theirs;
  }
  return better;
}

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

/// Whether `a` ranks before `b`: ranked before anything else, then by the objective's score.
bool ranks_before(const Evaluation& a, const Evaluation& b, Objective objective) {
  if ((a.verdict == Verdict::kRanked) != (b.verdict == Verdict::kRanked))
    return a.verdict == Verdict::kRanked;
  return score(a, objective) < score(b, objective);
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

void check_constraints(const SearchRequest& request) {
  const double idle_w = request.cluster.gpu.idle_power_w * request.space.gpus;
  require_input(
      request.power_budget_w <= 0 || request.power_budget_w > idle_w,
      fmt::format("--power-budget-w {:.0f} is below the idle power of {} GPUs ({:.0f} W at {:.0f} W each): "
                  "no layout can meet it; give more than {:.0f} W or fewer --gpus (at most {})",
                  request.power_budget_w, request.space.gpus, idle_w, request.cluster.gpu.idle_power_w,
                  idle_w, static_cast<int>(request.power_budget_w / request.cluster.gpu.idle_power_w)));
  require_input(
      request.max_peak_power_w <= 0 || request.max_peak_power_w > request.cluster.gpu.idle_power_w,
      fmt::format("--max-peak-power-w {:.0f} is below a GPU's idle power ({:.0f} W): no layout can meet "
                  "it; give more than {:.0f} W (the power limit is {:.0f} W)",
                  request.max_peak_power_w, request.cluster.gpu.idle_power_w,
                  request.cluster.gpu.idle_power_w, request.cluster.gpu.power_limit_w));
  require_input(request.top >= 1, fmt::format("--top {}: give 1 or more rows", request.top));
  for (double cap_w : request.power_caps_w) {
    const std::string refusal = sim::power_cap_refusal(request.cluster.gpu, cap_w);
    require_input(refusal.empty(), fmt::format("--power-cap {:g}: {}", cap_w, refusal));
  }
  require_input(request.steps >= 1, fmt::format("--steps {}: give 1 or more steps", request.steps));
}

/// Constraints that left nothing to search: name them and, per constrained setting, the values that fitting
/// layouts of the unconstrained space have.
[[noreturn]] void refuse_constrained(const SearchRequest& request, const SpaceRequest& space_request,
                                     const LayoutSpace& space) {
  SpaceRequest free_request = space_request;
  free_request.constraints = {};
  const LayoutSpace free_space = enumerate_layouts(free_request);
  const LayoutConstraints& constraints = space_request.constraints;
  std::vector<std::string> hints;
  auto values_of = [&](const char* flag, bool constrained, auto setting) {
    if (!constrained) return;
    std::vector<std::string> values;
    for (const Candidate& candidate : free_space.candidates) {
      if (!candidate.fits) continue;
      const std::string value = fmt::format("{}", setting(candidate.layout));
      if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
    }
    hints.push_back(
        fmt::format("{} {}", flag, values.empty() ? "(none)" : fmt::format("{}", fmt::join(values, ","))));
  };
  values_of("--tp", !constraints.tp.empty(), [](const parallel::Layout& l) { return l.tp; });
  values_of("--cp", !constraints.cp.empty(), [](const parallel::Layout& l) { return l.cp; });
  values_of("--pp", !constraints.pp.empty(), [](const parallel::Layout& l) { return l.pp; });
  values_of("--dp", !constraints.dp.empty(), [](const parallel::Layout& l) { return l.dp; });
  values_of("--ep", !constraints.ep.empty(), [](const parallel::Layout& l) { return l.ep; });
  values_of("--vpp", !constraints.vpp.empty(), [](const parallel::Layout& l) { return l.virtual_stages; });
  values_of("--mbs", !constraints.micro_batch.empty(),
            [](const parallel::Layout& l) { return l.micro_batch; });
  values_of("--zero", !constraints.zero_stage.empty(),
            [](const parallel::Layout& l) { return l.zero_stage; });
  values_of("--schedule", !constraints.schedule.empty(),
            [](const parallel::Layout& l) { return parallel::to_string(l.schedule); });
  values_of("--recompute", !constraints.recompute.empty(),
            [](const parallel::Layout& l) { return parallel::to_string(l.recompute); });
  // Under the card limit tight layouts fit, so a refusal has none to name.
  const bool card = space_request.memory_limit == MemoryLimit::kCard;
  const std::string tight = space.tight() == 0 ? std::string() : " (" + tight_count_text(space.tight()) + ")";
  throw InputError(fmt::format(
      "no layout of {} on --gpus {} with --gbs {} and {} {}{}; {} of the unconstrained space's {} layouts "
      "fit, "
      "with these values: {}; change or drop a constraint",
      request.space.model.name, request.space.gpus, request.space.global_batch, constraints.describe(),
      space.candidates.empty() ? "is valid" : (card ? "fits the card" : "fits memory"), tight,
      free_space.fitting(), free_space.candidates.size(), fmt::join(hints, "; ")));
}

/// Explains an empty space (nothing valid, or nothing fits) with the nearest feasible alternative.
[[noreturn]] void refuse_empty(const SearchRequest& request, const SpaceRequest& space_request,
                               const LayoutSpace& space) {
  if (!space_request.constraints.empty()) refuse_constrained(request, space_request, space);
  const std::vector<int> gpus = nearest_feasible_gpus(space_request, 2);
  const std::string alternative =
      gpus.empty()
          ? std::string(
                "no GPU count within a factor 2 has one either; give a larger --gpus or a smaller model")
          : fmt::format("nearest GPU counts that have one: --gpus {}", fmt::join(gpus, " or --gpus "));
  if (space.candidates.empty()) {
    throw InputError(fmt::format(
        "no valid layout of {} on --gpus {} with --gbs {}: tp*pp*dp must equal the GPU count with tp "
        "dividing "
        "the {} heads (<= {} per node), pp dividing the {} layers and dp dividing the global batch; {}",
        request.space.model.name, request.space.gpus, request.space.global_batch,
        request.space.model.num_attention_heads, request.space.gpus_per_node, request.space.model.num_layers,
        alternative));
  }
  const Candidate* smallest = &space.candidates.front();
  for (const Candidate& candidate : space.candidates) {
    if (candidate.memory.total_bytes() < smallest->memory.total_bytes()) smallest = &candidate;
  }
  const bool card = space_request.memory_limit == MemoryLimit::kCard;
  const std::string tight = space.tight() == 0 ? std::string() : tight_count_text(space.tight()) + "; ";
  throw InputError(fmt::format(
      "no layout of {} fits {} on --gpus {}: the smallest ({}) needs {} per GPU of {} {}; {}{}",
      request.space.model.name, request.cluster.gpu.name, request.space.gpus,
      parallel::describe(smallest->layout), describe_memory(smallest->memory),
      core::format_bytes(memory_limit_bytes(request.cluster.gpu.memory_bytes, space_request.memory_limit)),
      card ? "on the card" : "usable", tight, alternative));
}

/// Every simulated layout broke a power constraint: name the one closest to meeting it.
[[noreturn]] void refuse_over_budget(const SearchRequest& request, const SearchResult& result) {
  const Evaluation* nearest = nullptr;
  double nearest_excess = INFINITY;
  for (const Evaluation& evaluation : result.evaluations) {
    if (evaluation.verdict != Verdict::kOverBudget) continue;
    double excess = 0;
    if (request.power_budget_w > 0)
      excess += std::max(0.0, evaluation.cluster_power_w / request.power_budget_w - 1);
    if (request.max_peak_power_w > 0)
      excess += std::max(0.0, evaluation.peak_power_w / request.max_peak_power_w - 1);
    if (excess < nearest_excess) {
      nearest_excess = excess;
      nearest = &evaluation;
    }
  }
  if (nearest == nullptr) {
    const auto failed =
        std::find_if(result.evaluations.begin(), result.evaluations.end(),
                     [](const auto& each) { return each.verdict == Verdict::kFailed && !each.note.empty(); });
    throw InputError(fmt::format("no layout of {} on --gpus {} could be simulated; the first failure: {}",
                                 request.space.model.name, request.space.gpus,
                                 failed == result.evaluations.end() ? "none" : failed->note));
  }
  throw InputError(fmt::format(
      "no layout meets the power constraints (--power-budget-w {:.0f}, --max-peak-power-w {:.0f}); the "
      "nearest is "
      "{} at {:.0f} W cluster power and {:.0f} W peak per GPU: raise the limits to these or use fewer --gpus",
      request.power_budget_w, request.max_peak_power_w, parallel::describe(nearest->candidate.layout),
      nearest->cluster_power_w, nearest->peak_power_w));
}

}  // namespace

Objective parse_objective(const std::string& text) {
  if (text == "throughput") return Objective::kThroughput;
  if (text == "energy") return Objective::kEnergy;
  if (text == "pareto") return Objective::kPareto;
  throw InputError(fmt::format("--objective '{}': give throughput, energy or pareto", text));
}

constexpr std::array kObjectiveNames{"throughput", "energy", "pareto"};

std::string to_string(Objective objective) {
  return core::enum_name(objective, kObjectiveNames);
}

constexpr std::array kVerdictNames{"ranked", "oom",       "pruned", "over-budget",
                                   "failed", "too-large", "stopped"};

const char* to_string(Verdict verdict) {
  return core::enum_name(verdict, kVerdictNames);
}

int equivalent_to_first(const SearchResult& result, Objective objective) {
  if (result.ranking.empty()) return 0;
  const double first = score(result.evaluations[result.ranking.front()], objective);
  int rows = 0;
  for (std::size_t index : result.ranking) {
    if (score(result.evaluations[index], objective) > first * (1 + kEquivalentFraction)) break;
    ++rows;
  }
  return rows;
}

std::vector<int> nearest_feasible_gpus(const SpaceRequest& request, int limit) {
  std::vector<int> found;
  const int step = request.gpus > request.gpus_per_node ? request.gpus_per_node : 1;
  constexpr int kMaxTries = 256;
  for (int offset = 1; offset <= kMaxTries && static_cast<int>(found.size()) < limit; ++offset) {
    for (int sign : {-1, 1}) {
      const int gpus = (request.gpus / step + sign * offset) * step;
      if (gpus < 1 || gpus < request.gpus / 2 || gpus > request.gpus * 2) continue;
      SpaceRequest other = request;
      other.gpus = gpus;
      if (enumerate_layouts(other).fitting() > 0 && static_cast<int>(found.size()) < limit)
        found.push_back(gpus);
    }
  }
  return found;
}

namespace {

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

/// Counts the pruned and simulated evaluations into `result`; returns the indices of the ranked ones.
std::vector<std::size_t> count_verdicts(SearchResult& result) {
  std::vector<std::size_t> ranked;
  for (std::size_t index = 0; index < result.evaluations.size(); ++index) {
    const Verdict verdict = result.evaluations[index].verdict;
    if (verdict == Verdict::kPruned) ++result.pruned;
    if (verdict == Verdict::kStopped) ++result.stopped;
    if (verdict == Verdict::kRanked || verdict == Verdict::kOverBudget || verdict == Verdict::kFailed)
      ++result.simulated;
    if (verdict == Verdict::kRanked) ranked.push_back(index);
  }
  return ranked;
}

/// Chapter 3: marks the Pareto front of the `ranked` evaluations (result.pareto, fastest first) and sorts
/// them into result.ranking (best first; under the Pareto objective the front first).
void rank_and_mark_front(const SearchRequest& request, std::vector<std::size_t> ranked,
                         SearchResult& result) {
  for (std::size_t index : ranked) {
    Evaluation& evaluation = result.evaluations[index];
    evaluation.pareto = std::none_of(ranked.begin(), ranked.end(), [&](std::size_t other) {
      return dominates(result.evaluations[other], evaluation);
    });
    if (evaluation.pareto) result.pareto.push_back(index);
  }
  auto by_throughput = [&](std::size_t a, std::size_t b) {
    return result.evaluations[a].iteration_s < result.evaluations[b].iteration_s;
  };
  std::stable_sort(result.pareto.begin(), result.pareto.end(), by_throughput);
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    const Evaluation& first = result.evaluations[a];
    const Evaluation& second = result.evaluations[b];
    if (request.objective == Objective::kPareto && first.pareto != second.pareto) return first.pareto;
    return score(first, request.objective) < score(second, request.objective);
  });
  result.ranking = std::move(ranked);
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

std::vector<FrontCorner> front_corners(const SearchResult& result) {
  std::vector<FrontCorner> corners;
  if (result.pareto.empty()) return corners;
  for (const FrontFigure& figure : kFrontFigures) {
    std::size_t best = result.pareto.front();
    for (std::size_t index : result.pareto) {
      if (figure.goodness(result.evaluations[index]) > figure.goodness(result.evaluations[best]))
        best = index;
    }
    const bool listed = std::any_of(corners.begin(), corners.end(),
                                    [best](const FrontCorner& corner) { return corner.index == best; });
    if (!listed) corners.push_back({figure.corner, best});
  }
  return corners;
}

}  // namespace calo::plan
