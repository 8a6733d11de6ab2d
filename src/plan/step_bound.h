// The planner's bound on a layout's step time (docs/PLANNER.md, "Pruning"): what a step cannot be shorter
// than, from the simulator's own cost model without its engine, so the search simulates only the layouts
// whose bound could still enter the top K. Four terms per program (busiest stream, pipeline fill, pipeline
// drain, the program run alone with its collectives), at the clock the power cap allows each program. Terms
// (a)-(c) add up over micro-batches, so a layout's probe (two graphs of a few micro-batches each) gives them
// for any number of micro-batches without building the layout's whole graph.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "plan/balanced_partition.h"
#include "sim/cluster.h"
#include "sim/power_thermal.h"

namespace calo::plan {

/// How far above its static power-cap clock the bound lets a program run. The simulator's controller raises
/// the clock after light phases and while a GPU waits (its power average falls below the cap), so a step can
/// run slightly faster than every op at the static cap clock: by at most 0.44 % in step time over 8 662
/// simulations of four searches (docs/measurements/plan-search-log.md, 2026-11-30). 3 % of clock is
/// the margin over that; a measured figure, not a proof, so `--no-prune` keeps an exhaustive search.
inline constexpr double kCapClockHeadroom = 0.03;

/// Per program of `graph`: the compute stretch f_max / f the bound uses under power cap `cap_w` (<= 0: the
/// card's limit), f the highest clock bin whose busy-window mean power fits the cap, raised by
/// kCapClockHeadroom and at most f_max (1 when the program never reaches the cap).
std::vector<double> capped_stretch(const graph::Graph& graph, const sim::ClusterSpec& cluster, double cap_w);

/// Lower bound on the step time of `graph` on `cluster` with every compute op at the maximum clock: terms
/// (a)-(d) of docs/PLANNER.md. Power caps, heat, slow GPUs, communication and waiting only lengthen a step.
double step_time_lower_bound_s(const graph::Graph& graph, const sim::ClusterSpec& cluster);

/// The bound the search prunes by: terms (a)-(d) with each program's compute at capped_stretch under
/// `cap_w` (<= 0: the card's limit).
double capped_step_bound_s(const graph::Graph& graph, const sim::ClusterSpec& cluster, double cap_w);

/// Terms (a)-(d) of `graph` with program i's compute stretched by `stretch[i]` (a probe's, which hold for the
/// layout's whole graph: the probe and the graph have the same programs).
double step_bound_at_stretch_s(const graph::Graph& graph, const sim::ClusterSpec& cluster,
                               const std::vector<double>& stretch);

/// A probe's bound under one power cap.
struct ProbeBound {
  double bound_s = 0;           ///< terms (a)-(c)
  std::vector<double> stretch;  ///< per program: capped_stretch of the layout's whole graph
  /// Energy above idle of every compute op of every GPU at the lowest clock (min_sm_mhz): an op's active
  /// energy only falls with its clock when clock_power_exponent >= 1 (0 below that: no bound)
  double least_active_energy_j = 0;
};

/// A layout's terms (a)-(c) and stage compute for any number of micro-batches, from graphs of pp and 2·pp
/// micro-batches (2 and 3 without pipeline; the layout's own graph when it has no more): every micro-batch
/// after the first issues the same ops, so each term is affine in the micro-batch count and two graphs give
/// it exactly.
class LayoutProbe {
 public:
  /// Builds the probe graphs of `layout` (resolved) of `model` on `cluster`; `whole`: the layout's own graph
  /// whatever its micro-batches (the reference the extrapolation is tested against).
  LayoutProbe(const model::ModelSpec& model, const parallel::Layout& layout, const sim::ClusterSpec& cluster,
              bool whole = false);
  /// Terms (a)-(c) of the layout's bound under power cap `cap_w` (<= 0: the card's limit), and the stretch
  /// each program ran at.
  ProbeBound bound(double cap_w);
  /// ProbeBound::least_active_energy_j of the layout (every GPU: each program times its ranks).
  double least_active_energy_j();
  /// The layout's compute per pipeline stage at the maximum clock (balanced_layers' input).
  StageCompute stage_compute() const;
  /// Ops of the probe graphs together (the work the probe cost).
  std::int64_t probe_ops() const;

 private:
  /// Value at the layout's micro-batch count of a figure that is `first` at the first probe graph's and
  /// `second` at the second's.
  double at_layout(double first, double second) const;

  const sim::ClusterSpec& cluster_;
  std::vector<graph::Graph> graphs_;  ///< one (the layout's own) or two (probe_microbatches)
  std::vector<std::vector<sim::ProgramPower>> powers_;  ///< per graph, per program: costs, power by clock
  double microbatches_ = 0;                             ///< the layout's
  double first_microbatches_ = 0;                       ///< the first probe graph's
  double second_microbatches_ = 0;                      ///< the second's
};

/// Micro-batch count of probe graph `which` (0, 1) of a layout: once and twice the micro-batches at which its
/// schedule's order repeats whole (parallel::bound_shape: pp, where every stage reaches its steady state and
/// chunked schedules need multiples of pp, or 2·pp), 2 and 3 without pipeline (a micro-batch between the
/// first and the last).
int probe_microbatches(const parallel::Layout& layout, int which);

/// Whether a LayoutProbe of `layout` builds probe graphs: when it has more micro-batches than the two probe
/// graphs together (otherwise its own graph is the cheaper one).
bool probed(const parallel::Layout& layout);

}  // namespace calo::plan
