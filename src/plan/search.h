// Layout search: simulates every layout of the space that fits memory (or proves by a lower bound that it
// cannot make the top K), ranks them by an objective and marks the Pareto front (docs/PLANNER.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/layout_space.h"
#include "sim/cluster.h"

namespace calo::plan {

/// What the ranking optimises.
enum class Objective { kThroughput, kEnergy, kPareto };

/// Parses "throughput|energy|pareto"; throws InputError naming --objective otherwise.
Objective parse_objective(const std::string& text);
/// Name of an objective.
std::string to_string(Objective objective);

/// How far a search is: its steps (a layout's bound, a (layout, cap) evaluation) and its work, in estimated
/// single-thread seconds (estimated_search_s's terms): a pruned evaluation's work leaves the total, so the
/// fraction done and the time left follow the work, not the count of steps.
struct SearchProgress {
  std::size_t steps_done = 0;   ///< bounds and evaluations done (pruned ones included)
  std::size_t steps_total = 0;  ///< bounds and evaluations of the search
  double work_done_s = 0;       ///< estimated seconds of the work done
  double work_total_s = 0;      ///< estimated seconds of the work done and still to do
  /// The share of the work done, in [0, 1]: exactly 1 once every step is done (the two sums are added up in
  /// different orders, so their quotient can end a few ulps short).
  double fraction() const {
    if (steps_done >= steps_total || work_total_s <= 0) return 1.0;
    return std::min(1.0, work_done_s / work_total_s);
  }
};

/// A search request.
struct SearchRequest {
  SpaceRequest space;        ///< the job; device_memory_bytes is taken from `cluster`
  sim::ClusterSpec cluster;  ///< the modeled cluster
  Objective objective = Objective::kThroughput;
  double power_budget_w = 0;    ///< > 0: the cluster's mean GPU power (all GPUs) must stay <= this
  double max_peak_power_w = 0;  ///< > 0: no GPU's peak power sample may exceed this
  int top = 10;                 ///< rows of the ranking the caller wants; pruning keeps these exact
  int steps = 1;                ///< simulated steps per layout (temperatures evolve across them)
  /// Power caps searched as an axis (W per GPU, every GPU alike); empty = the card's limit only.
  std::vector<double> power_caps_w;
  int threads = 0;  ///< worker threads; 0 = std::thread::hardware_concurrency()
  /// > 0: refuse (InputError, before any graph is built) a space whose estimated search time
  /// (estimated_search_s) on `threads` exceeds this many minutes, and stop a search that runs past it: an
  /// evaluation that would end beyond it is not started (Verdict::kStopped); 0 = no limit
  /// (`calo plan --max-minutes`).
  double max_minutes = 0;
  /// > 0: stop the search here (seconds) instead of at max_minutes, whatever the estimate (tests and
  /// harnesses that must see the stop without a space too large for the estimate).
  double stop_after_s = 0;
  bool prune = true;  ///< skip layouts whose lower bound proves they cannot make the top K
  /// Try each pipeline layout (vpp 1) also at the layers per stage that balance its stages' compute
  /// (balanced_partition.h) and rank it at whichever simulates better; false = uniform partitions only.
  bool balance_partitions = true;
  /// Called from worker threads (serialised) as work is done, for a progress bar and its time left.
  std::function<void(const SearchProgress&)> progress;
};

/// What happened to one candidate.
enum class Verdict { kRanked, kOutOfMemory, kPruned, kOverBudget, kFailed, kTooLarge, kStopped };
/// Name of a verdict ("ranked", "oom", "pruned", "over-budget", "failed", "too-large": a graph beyond
/// graph::kMaxGraphOps, never built; "stopped": not evaluated, the search reached --max-minutes).
const char* to_string(Verdict verdict);

/// One candidate and its figures (simulated ones only when verdict is kRanked or kOverBudget).
struct Evaluation {
  Candidate candidate;     ///< layout and memory
  double power_cap_w = 0;  ///< power cap of every GPU (SearchRequest::power_caps_w); 0 = the card's limit
  Verdict verdict = Verdict::kOutOfMemory;
  /// The bound the search pruned by (plan/step_bound.h): terms (a)-(c) from the layout's probe, (a)-(d) on
  /// its whole graph once built; compute at the power cap's clock (with kCapClockHeadroom)
  double lower_bound_s = 0;
  double iteration_s = 0;        ///< simulated mean step time
  double tokens_per_s = 0;       ///< tokens per step / iteration_s
  double energy_per_step_j = 0;  ///< all GPUs, mean over steps
  double tokens_per_j = 0;       ///< tokens per step / energy_per_step_j
  double cluster_power_w = 0;    ///< energy_per_step_j / iteration_s (all GPUs)
  double peak_power_w = 0;       ///< highest power sample of any GPU
  double max_die_c = 0;          ///< hottest die at a step end
  double mfu = 0;                ///< model FLOP utilisation
  bool pareto = false;  ///< on the Pareto front (tokens/s, tokens/J up; peak power, hottest die down)
  /// A pipeline layout's balanced partition (candidate.layout with other layers per stage, its memory),
  /// tried beside the uniform one; absent when it equals the uniform one or does not fit.
  std::optional<Candidate> balanced;
  double balanced_lower_bound_s = 0;  ///< lower_bound_s of the balanced partition
  /// When the balanced partition ranked better and `candidate` became it: the uniform partition's simulated
  /// step time (0 otherwise, or when the uniform partition was pruned).
  double uniform_iteration_s = 0;
  std::string note;  ///< why over budget / failed
};

/// The outcome of a search.
struct SearchResult {
  std::vector<Evaluation> evaluations;  ///< every candidate of the space, in enumeration order
  std::vector<std::size_t> ranking;     ///< indices of kRanked evaluations, best first by the objective
  std::vector<std::size_t> pareto;      ///< indices on the Pareto front, by tokens/s descending
  int invalid = 0;                      ///< combinations resolve_layout rejects
  int invalid_by_construction = 0;  ///< of them, skipped unresolved (LayoutSpace::invalid_by_construction)
  int excluded = 0;                 ///< combinations outside the request's layout constraints
  /// The excluded ones by the flag that excluded them (LayoutSpace::excluded_by).
  std::vector<std::pair<std::string, int>> excluded_by;
  int simulated = 0;      ///< layouts simulated
  int pruned = 0;         ///< layouts skipped by the lower bound
  int out_of_memory = 0;  ///< layouts that do not fit memory
  /// Layouts beyond the usable share that fit the card (Candidate::tight): out of memory under the usable
  /// limit, ranked (if not pruned) under MemoryLimit::kCard.
  int tight = 0;
  int too_large = 0;        ///< fitting layouts whose graph exceeds graph::kMaxGraphOps
  int stopped = 0;          ///< evaluations not started because the search reached --max-minutes
  double graph_ops = 0;     ///< estimated ops of the fitting layouts' graphs (the search's work)
  double probe_ops = 0;     ///< ops of the probe graphs the bounds were computed on
  double built_ops = 0;     ///< ops of the whole graphs built (refined bounds, simulations)
  double bound_wall_s = 0;  ///< host time of chapter 1 (every layout's probe bound)
  double estimated_s = 0;   ///< estimated_search_s of the search before it ran
  double wall_s = 0;        ///< host time of the search
};

/// Scores closer than this fraction are not told apart by measurement: on 2- and 4-GPU H200 hosts the
/// planner's first pick ran up to 3.0 % slower than the measured best layout
/// (docs/benchmarks/plan-vs-measured.md, regret column).
inline constexpr double kEquivalentFraction = 0.03;

/// How many rows at the head of the ranking score within kEquivalentFraction of the first (>= 1; 0 when the
/// ranking is empty): layouts the model cannot tell apart.
int equivalent_to_first(const SearchResult& result, Objective objective);

/// One extreme of the Pareto front: the layout best on one of the front's four figures.
struct FrontCorner {
  std::string figure;     ///< "fastest", "most tokens/J", "lowest peak", "coolest"
  std::size_t index = 0;  ///< into SearchResult::evaluations
};

/// The front's corners in that order: highest tokens/s, highest tokens/J, lowest peak power, coolest die; a
/// layout best on several figures is listed once, under the first. Empty when the front is.
std::vector<FrontCorner> front_corners(const SearchResult& result);

/// A search's work, known before any graph is built (graph::estimated_op_count).
struct SearchWork {
  double probe_ops = 0;    ///< ops of the fitting layouts' probe graphs (LayoutProbe; balanced ones included)
  double graph_ops = 0;    ///< ops of their whole graphs
  double evaluations = 0;  ///< (layout, power cap) pairs to simulate
  double evaluated_ops = 0;  ///< ops of the graphs of those pairs: each layout's graph once per power cap
  int steps = 1;             ///< simulated steps each
  Objective objective = Objective::kThroughput;  ///< what the bound prunes by (nothing under kPareto)
  bool prune = true;                             ///< false under --no-prune
};

/// A thread's wall seconds per probe op, per whole-graph op built (its bound and simulations), per simulated
/// step, and the fractions of whole-graph ops built and of evaluations simulated when the bound prunes by
/// step time and by energy (1.2 and 1 when it does not: balanced partitions add graphs): refitted
/// 2026-12-06 to seven searches on the 2-core VM once graphs were built in place, the estimate 0.6-1.8x of
/// their wall time (docs/benchmarks/plan-search.md).
inline constexpr double kSearchSecondsPerProbeOp = 70e-9;
inline constexpr double kSearchSecondsPerBuiltOp = 375e-9;
inline constexpr double kSearchSecondsPerSimulatedStep = 2e-3;
/// A thread's wall seconds per op of a simulated step (the engine's events and the power model's windows).
inline constexpr double kSearchSecondsPerSimulatedOp = 4e-7;
/// Graphs per layout when every partition is built: the uniform one, and the balanced one of pipeline
/// layouts.
inline constexpr double kBalancedGraphsFactor = 1.2;
inline constexpr double kPrunedBuiltFraction = 0.2;
inline constexpr double kPrunedSimulatedFraction = 0.05;
/// The share of the evaluated graph ops the throughput bound lets through to the engine: it admits the
/// fastest layouts, whose graphs are the small ones (the eight searches of bench/plan_search/searches.sh).
inline constexpr double kPrunedSimulatedOpFraction = 0.005;
inline constexpr double kEnergyPrunedBuiltFraction = 0.5;
inline constexpr double kEnergyPrunedSimulatedFraction = 0.5;

/// The expected shares of whole graphs built and of evaluations simulated under `work`'s pruning.
struct PrunedFractions {
  double built = kBalancedGraphsFactor;  ///< whole-graph ops built per fitting layout's graph ops
  double simulated = 1.0;                ///< evaluations simulated per evaluation
  double simulated_ops = 1.0;            ///< simulated graph ops per evaluated graph op
};

/// The fractions `work`'s objective and pruning lead to expect.
PrunedFractions pruned_fractions(const SearchWork& work);

/// Estimated wall seconds of a search of `work` on `threads` threads (docs/METRICS.md, "Estimated search
/// time").
double estimated_search_s(const SearchWork& work, int threads);

/// One thread's seconds to simulate one (layout, cap) evaluation of a graph of `ops` for `steps` steps, its
/// balanced partition's share included.
double simulated_evaluation_s(double ops, int steps);

/// One thread's expected seconds of one (layout, cap) evaluation of a layout of `ops` among `caps` caps: its
/// share of building the graph and, at the pruning's expected fraction, of simulating it (the terms of
/// estimated_search_s for one evaluation).
double expected_evaluation_s(const SearchWork& work, double ops, std::size_t caps);

/// Runs the search. Throws InputError for contradictory constraints (a power budget below the idle power of
/// all GPUs), for a space without any valid layout and for a space where no layout fits memory, each with
/// the nearest feasible alternative.
SearchResult search_layouts(const SearchRequest& request);

/// Nearest GPU counts (below and above `gpus`, within a factor 2) for which the space has a fitting layout.
std::vector<int> nearest_feasible_gpus(const SpaceRequest& request, int limit);

}  // namespace calo::plan
