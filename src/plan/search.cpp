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
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

bool is_comm(graph::OpKind kind) {
  return kind == graph::OpKind::kCollective || kind == graph::OpKind::kSend || kind == graph::OpKind::kRecv;
}

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

/// The smaller of a layout's lower bounds (uniform partition, balanced partition).
double least_bound_s(const Evaluation& evaluation) {
  return evaluation.balanced ? std::min(evaluation.lower_bound_s, evaluation.balanced_lower_bound_s)
                             : evaluation.lower_bound_s;
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
  evaluation = std::move(*other);
}

/// Sets `evaluation.balanced` (and its lower bound) to the pipeline layout at the layers per stage that
/// balance its stages' compute, when those differ from the uniform ones and fit memory.
void add_balanced_partition(Evaluation& evaluation, const graph::Graph& graph, const SearchRequest& request) {
  const std::vector<int> layers = balanced_layers(graph, request.cluster);
  if (layers.empty()) return;
  Candidate balanced = evaluation.candidate;
  balanced.layout.layers_per_stage = layers;
  balanced.layout = parallel::resolve_layout(request.space.model, balanced.layout, true);
  balanced.memory = parallel::memory_per_gpu(request.space.model, balanced.layout);
  balanced.fits = fits_memory(balanced.memory, request.cluster.gpu.memory_bytes);
  if (!balanced.fits) return;
  evaluation.balanced_lower_bound_s =
      step_time_lower_bound_s(graph::build_graph(request.space.model, balanced.layout), request.cluster);
  evaluation.balanced = std::move(balanced);
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

/// Progress reporting shared by the workers (callback serialised).
class Progress {
 public:
  Progress(const SearchRequest& request, std::size_t total) : request_(request), total_(total) {}
  void step() {
    const std::size_t done = ++done_;
    if (!request_.progress) return;
    std::lock_guard lock(mutex_);
    request_.progress(done, total_);
  }

 private:
  const SearchRequest& request_;
  std::size_t total_;
  std::atomic<std::size_t> done_{0};
  std::mutex mutex_;
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
  throw InputError(fmt::format(
      "no layout of {} on --gpus {} with --gbs {} and {} {}; {} of the unconstrained space's {} layouts fit, "
      "with these values: {}; change or drop a constraint",
      request.space.model.name, request.space.gpus, request.space.global_batch, constraints.describe(),
      space.candidates.empty() ? "is valid" : "fits memory", free_space.fitting(),
      free_space.candidates.size(), fmt::join(hints, "; ")));
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
  throw InputError(
      fmt::format("no layout of {} fits {} on --gpus {}: the smallest ({}) needs {} per GPU of {} usable; {}",
                  request.space.model.name, request.cluster.gpu.name, request.space.gpus,
                  parallel::describe(smallest->layout), describe_memory(smallest->memory),
                  core::format_bytes(usable_memory_bytes(request.cluster.gpu.memory_bytes)), alternative));
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
    throw InputError(fmt::format("no layout of {} on --gpus {} could be simulated; the first failure: {}",
                                 request.space.model.name, request.space.gpus,
                                 result.evaluations.empty() ? "none" : result.evaluations.front().note));
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

constexpr std::array kVerdictNames{"ranked", "oom", "pruned", "over-budget", "failed", "too-large"};

const char* to_string(Verdict verdict) {
  return core::enum_name(verdict, kVerdictNames);
}

namespace {

/// When `program`'s ops would end on global `rank` if it never waited for another rank: each stream in issue
/// order, an op starting once its stream and its dependencies are done, compute ops taking `compute_s` (the
/// maximum clock), a collective its own transfer time (the engine completes it after the last member arrives
/// plus the slowest member's transfer, never sooner) and a message no time (its peer may have sent it long
/// before). Every one of these is at least as long in the engine, so the step is at least this long.
double isolated_program_s(const graph::Graph& graph, const sim::ClusterSpec& cluster,
                          const graph::RankProgram& program, int rank, const std::vector<double>& compute_s) {
  const auto placements = sim::rank_group_placements(graph, cluster, rank);
  std::vector<double> finish_s(program.ops.size(), 0.0);
  // Every layer repeats the same few collectives: cost each (kind, group, bytes) once.
  std::map<std::tuple<int, int, double>, double> collective_s;
  double stream_free_s[graph::kNumStreams] = {};
  double end_s = 0;
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    const graph::Op& op = program.ops[index];
    double ready_s = stream_free_s[static_cast<int>(op.stream)];
    for (std::int32_t dep : program.deps_of(index)) ready_s = std::max(ready_s, finish_s[dep]);
    double duration_s = compute_s[index];
    if (op.kind == graph::OpKind::kCollective) {
      const auto key = std::make_tuple(static_cast<int>(op.collective), static_cast<int>(op.group), op.bytes);
      auto found = collective_s.find(key);
      if (found == collective_s.end()) {
        const double cost_s =
            sim::collective_time_s(cluster, op.collective, op.bytes, placements[static_cast<int>(op.group)]);
        found = collective_s.emplace(key, cost_s).first;
      }
      duration_s = found->second;
    }
    finish_s[index] = ready_s + duration_s;
    stream_free_s[static_cast<int>(op.stream)] = finish_s[index];
    end_s = std::max(end_s, finish_s[index]);
  }
  return end_s;
}

}  // namespace

double step_time_lower_bound_s(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  // Per program: the busiest stream's compute (a stream runs its ops one after another), and the pipeline
  // terms: micro-batch 0's first-chunk forward (`head`, before any micro-batch op of the next stage can
  // start) and the last micro-batch's first-chunk backward (`tail`, after the next stage's).
  const int stages = graph.layout.pp;
  const int last_microbatch = graph.layout.num_microbatches() - 1;
  std::vector<double> head_s(stages, INFINITY);
  std::vector<double> tail_s(stages, INFINITY);
  struct ProgramTerms {
    int stage = 0;
    double microbatch_s = 0;  // compute-stream ops of micro-batches (issued after micro-batch 0 arrives)
    double after_last_s = 0;  // compute-stream ops issued after the last micro-batch's first-chunk backward
  };
  std::vector<ProgramTerms> terms;
  double bound_s = 0;
  std::vector<int> rank_of_program(graph.programs.size(), -1);
  for (int rank = graph.world_size() - 1; rank >= 0; --rank)
    rank_of_program[graph.program_of_rank[rank]] = rank;
  std::vector<double> compute_s;
  for (std::size_t program_index = 0; program_index < graph.programs.size(); ++program_index) {
    const graph::RankProgram& program = graph.programs[program_index];
    double stream_s[graph::kNumStreams] = {};
    double head = 0;
    double tail = 0;
    ProgramTerms item;
    item.stage = program.stage;
    compute_s.assign(program.ops.size(), 0.0);
    for (std::size_t index = 0; index < program.ops.size(); ++index) {
      const graph::Op& op = program.ops[index];
      if (is_comm(op.kind)) continue;
      const double duration_s = sim::compute_cost(cluster.gpu, op).duration_s(1.0, 1.0);
      compute_s[index] = duration_s;
      stream_s[static_cast<int>(op.stream)] += duration_s;
      if (op.stream != graph::Stream::kCompute) continue;
      item.after_last_s += duration_s;
      if (op.microbatch < 0) continue;
      item.microbatch_s += duration_s;
      if (op.microbatch == 0 && op.chunk == 0 && op.phase == graph::Phase::kForward) head += duration_s;
      if (op.microbatch == last_microbatch && op.chunk == 0 && op.phase == graph::Phase::kBackward) {
        tail += duration_s;
        item.after_last_s = 0;  // restart: only ops issued after this one count
      }
    }
    bound_s = std::max(bound_s, *std::max_element(std::begin(stream_s), std::end(stream_s)));
    if (rank_of_program[program_index] >= 0) {
      bound_s = std::max(
          bound_s, isolated_program_s(graph, cluster, program, rank_of_program[program_index], compute_s));
    }
    head_s[program.stage] = std::min(head_s[program.stage], head);
    tail_s[program.stage] = std::min(tail_s[program.stage], tail);
    terms.push_back(item);
  }
  // Stage k starts its micro-batch ops after stages 0..k-1 forwarded micro-batch 0 (issue order puts it
  // first everywhere), and once it has sent the last micro-batch's gradient, stages k-1..0 still run that
  // micro-batch's backward one after another.
  for (const ProgramTerms& item : terms) {
    double before_s = 0;
    double after_s = 0;
    for (int stage = 0; stage < item.stage; ++stage) {
      before_s += head_s[stage];
      after_s += tail_s[stage];
    }
    bound_s = std::max(bound_s, before_s + item.microbatch_s);
    bound_s = std::max(bound_s, before_s + std::max(0.0, item.microbatch_s - item.after_last_s) + after_s);
  }
  return bound_s;
}

double estimated_search_s(double graph_ops, int caps, int steps, int threads) {
  return graph_ops * kSearchSecondsPerGraphOp * (1.0 + caps * steps) / 2.0 / std::max(1, threads);
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

/// Chapter 0: the size of every fitting layout's graph (graph::estimated_op_count, before any is built); a
/// layout beyond graph::kMaxGraphOps leaves `fitting` as too large. Refuses a space whose estimated search
/// time exceeds request.max_minutes, naming the flags that narrow it.
void size_layouts(const SearchRequest& request, const std::vector<double>& caps_w,
                  std::vector<std::size_t>& fitting, int threads, SearchResult& result) {
  std::vector<std::int64_t> ops(fitting.size());
  core::parallel_for(fitting.size(), threads, [&](std::size_t item) {
    const Evaluation& evaluation = result.evaluations[fitting[item]];
    ops[item] = graph::estimated_op_count(request.space.model, evaluation.candidate.layout);
  });
  std::vector<std::size_t> kept;
  for (std::size_t item = 0; item < fitting.size(); ++item) {
    if (ops[item] <= graph::kMaxGraphOps) {
      kept.push_back(fitting[item]);
      result.graph_ops += static_cast<double>(ops[item]);
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
  result.estimated_s =
      estimated_search_s(result.graph_ops, static_cast<int>(caps_w.size()), request.steps, threads);
  require_input(
      request.max_minutes <= 0 || result.estimated_s <= request.max_minutes * 60,
      fmt::format(
          "this space is {} fitting layouts whose graphs hold about {:.2f} G ops: about {:.1f} min on {} "
          "threads, beyond --max-minutes {:g}; narrow it ({}), run where there are more cores, or give "
          "--max-minutes {:.0f}",
          fitting.size(), result.graph_ops / 1e9, result.estimated_s / 60, threads, request.max_minutes,
          narrowing_flags(request, fitting, result), std::ceil(result.estimated_s / 60 * 1.5)));
}

/// Chapter 1: the lower bound of every fitting layout (graph build + cost model, no engine); a cap only
/// lengthens a step, so one bound holds for all of a layout's caps.
void bound_layouts(const SearchRequest& request, const std::vector<double>& caps_w,
                   const std::vector<std::size_t>& fitting, int threads, Progress& progress,
                   SearchResult& result) {
  core::parallel_for(fitting.size(), threads, [&](std::size_t item) {
    Evaluation& evaluation = result.evaluations[fitting[item]];
    const graph::Graph graph = graph::build_graph(request.space.model, evaluation.candidate.layout);
    evaluation.lower_bound_s = step_time_lower_bound_s(graph, request.cluster);
    if (request.balance_partitions) add_balanced_partition(evaluation, graph, request);
    for (std::size_t cap = 1; cap < caps_w.size(); ++cap) {
      Evaluation& capped = result.evaluations[fitting[item] + cap];
      capped.lower_bound_s = evaluation.lower_bound_s;
      capped.balanced = evaluation.balanced;
      capped.balanced_lower_bound_s = evaluation.balanced_lower_bound_s;
    }
    progress.step();
  });
}

/// Chapter 2: simulate in increasing lower-bound order (sorting `fitting`); skip a layout once its bound (on
/// step time, or on energy: every GPU draws at least idle power for at least the bound) exceeds the k-th best
/// feasible score.
void simulate_in_bound_order(const SearchRequest& request, const std::vector<double>& caps_w,
                             std::vector<std::size_t>& fitting, int threads, Progress& progress,
                             SearchResult& result) {
  std::stable_sort(fitting.begin(), fitting.end(), [&](std::size_t a, std::size_t b) {
    return least_bound_s(result.evaluations[a]) < least_bound_s(result.evaluations[b]);
  });
  TopScores top(request.top);
  const bool prune = request.prune && request.objective != Objective::kPareto;
  const double idle_cluster_w = request.cluster.gpu.idle_power_w * request.space.gpus;
  core::parallel_for(fitting.size(), threads, [&](std::size_t item) {
    // Graphs built once for all of the layout's caps, when one is simulated: uniform, then balanced.
    std::optional<graph::Graph> graphs[2];
    auto admitted = [&](double bound_s) {
      const double bound = request.objective == Objective::kEnergy ? bound_s * idle_cluster_w : bound_s;
      return !prune || bound <= top.threshold();
    };
    for (std::size_t cap = 0; cap < caps_w.size(); ++cap) {
      Evaluation& evaluation = result.evaluations[fitting[item] + cap];
      const bool uniform = admitted(evaluation.lower_bound_s);
      const bool balanced = evaluation.balanced && admitted(evaluation.balanced_lower_bound_s);
      if (!uniform && !balanced) {
        evaluation.verdict = Verdict::kPruned;
      } else {
        try {
          evaluate_partitions(evaluation, uniform, balanced, graphs, request);
          if (evaluation.verdict == Verdict::kRanked) top.add(score(evaluation, request.objective));
        } catch (const std::exception& error) {
          evaluation.verdict = Verdict::kFailed;
          evaluation.note = error.what();
        }
      }
      progress.step();
    }
  });
}

/// Counts the pruned and simulated evaluations into `result`; returns the indices of the ranked ones.
std::vector<std::size_t> count_verdicts(SearchResult& result) {
  std::vector<std::size_t> ranked;
  for (std::size_t index = 0; index < result.evaluations.size(); ++index) {
    const Verdict verdict = result.evaluations[index].verdict;
    if (verdict == Verdict::kPruned) ++result.pruned;
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
  result.excluded = space.excluded;
  const std::vector<double> caps_w =
      request.power_caps_w.empty() ? std::vector<double>{0.0} : request.power_caps_w;
  std::vector<std::size_t> fitting = add_evaluations(space, caps_w, result);
  const int threads = request.threads > 0
                          ? request.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  size_layouts(request, caps_w, fitting, threads, result);
  Progress progress(request, fitting.size() * (1 + caps_w.size()));

  bound_layouts(request, caps_w, fitting, threads, progress, result);
  simulate_in_bound_order(request, caps_w, fitting, threads, progress, result);
  rank_and_mark_front(request, count_verdicts(result), result);
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
