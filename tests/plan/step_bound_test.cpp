// The planner's step bound (src/plan/step_bound.h): a layout's probe (graphs of a few micro-batches) gives
// the terms of its whole graph exactly, and the capped bound sees the power cap a maximum-clock bound cannot.
#include "plan/step_bound.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"
#include "plan/layout_space.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

/// Every fitting layout of `model` on 8 GPUs of `cluster` at global batch 64 (up to 64 micro-batches).
std::vector<Candidate> fitting_layouts(const char* model, const sim::ClusterSpec& cluster) {
  SpaceRequest request;
  request.model = model::load_model(model);
  request.gpus = 8;
  request.global_batch = 64;
  request.seq_length = 1024;
  request.device_memory_bytes = cluster.gpu.memory_bytes;
  std::vector<Candidate> fitting;
  for (const Candidate& candidate : enumerate_layouts(request).candidates)
    if (candidate.fits) fitting.push_back(candidate);
  return fitting;
}

TEST(StepBound, AProbeGivesTheWholeGraphsTermsAtAnyMicroBatchCount) {
  // Every schedule (1F1B, GPipe, interleaved), ZeRO 0-3, recompute, overlap, and expert parallelism: the
  // probe's extrapolated bound, clocks and stage compute equal those of the layout's own graph.
  const sim::ClusterSpec cluster = sim::load_cluster("h100-hgx");
  int compared = 0;
  for (const char* name : {"llama3-8b", "tiny-moe"}) {
    const model::ModelSpec model = model::load_model(name);
    for (const Candidate& candidate : fitting_layouts(name, cluster)) {
      const parallel::Layout& layout = candidate.layout;
      if (!probed(layout)) continue;
      LayoutProbe probe(model, layout, cluster);
      LayoutProbe whole(model, layout, cluster, true);
      EXPECT_LT(probe.probe_ops(), whole.probe_ops()) << parallel::describe(layout);
      for (double cap_w : {0.0, 450.0}) {
        const ProbeBound extrapolated = probe.bound(cap_w);
        const ProbeBound exact = whole.bound(cap_w);
        EXPECT_NEAR(extrapolated.bound_s, exact.bound_s, exact.bound_s * 1e-9)
            << name << " " << parallel::describe(layout) << " cap " << cap_w;
        EXPECT_EQ(extrapolated.stretch, exact.stretch) << name << " " << parallel::describe(layout);
      }
      const StageCompute a = probe.stage_compute();
      const StageCompute b = whole.stage_compute();
      for (std::size_t stage = 0; stage < b.layers_s.size(); ++stage) {
        EXPECT_NEAR(a.layers_s[stage], b.layers_s[stage], b.layers_s[stage] * 1e-9);
        EXPECT_NEAR(a.extra_s[stage], b.extra_s[stage], b.extra_s[stage] * 1e-9);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(StepBound, UnderABindingCapTheBoundRisesWithTheCapClockAndStaysBelowTheSimulatedStep) {
  // Llama3-8B TP1-PP1-DP8 on H100 at 450 W: the GEMMs cannot hold the maximum clock, so a bound at the
  // maximum clock is ~20 % below the step; at the cap's clock (plus kCapClockHeadroom) it is within a few %.
  const model::ModelSpec model = model::load_model("llama3-8b");
  const sim::ClusterSpec cluster = sim::load_cluster("h100-hgx");
  parallel::Layout layout;
  layout.dp = 8;
  layout.global_batch = 32;
  layout.seq_length = 2048;
  layout.zero_stage = 1;
  layout = parallel::resolve_layout(model, layout);
  const graph::Graph graph = graph::build_graph(model, layout);
  sim::SimOptions options;
  options.power_limit_w.assign(graph.world_size(), 450.0);
  const double simulated_s = sim::simulate(graph, cluster, options).iteration_s;
  const double max_clock_s = step_time_lower_bound_s(graph, cluster);
  const double capped_s = capped_step_bound_s(graph, cluster, 450.0);
  for (double stretch : capped_stretch(graph, cluster, 450.0)) EXPECT_GT(stretch, 1.1);
  EXPECT_GT(capped_s, max_clock_s * 1.1);
  EXPECT_LE(capped_s, simulated_s);
  EXPECT_GT(capped_s, simulated_s * 0.95);
  // A program that never reaches the cap (tiny-dense's small kernels) runs at the maximum clock: the two
  // bounds are one.
  const model::ModelSpec tiny = model::load_model("tiny-dense");
  parallel::Layout tiny_layout;
  tiny_layout.dp = 8;
  tiny_layout.global_batch = 32;
  const graph::Graph light = graph::build_graph(tiny, parallel::resolve_layout(tiny, tiny_layout));
  for (double stretch : capped_stretch(light, cluster, 0.0)) EXPECT_EQ(stretch, 1.0);
  EXPECT_DOUBLE_EQ(capped_step_bound_s(light, cluster, 0.0), step_time_lower_bound_s(light, cluster));
}

TEST(StepBound, TheLeastEnergyOfAStepNeverExceedsTheSimulatedOneAndBeatsIdlePowerAlone) {
  // The energy objective prunes by N * P_idle * L + the compute's energy at the lowest clock: below every
  // simulated step's energy, under the card's limit and a cap, and well above the idle term alone.
  const sim::ClusterSpec cluster = sim::load_cluster("h100-hgx");
  const model::ModelSpec model = model::load_model("llama3-8b");
  int checked = 0;
  double idle_share = 0;
  for (const Candidate& candidate : fitting_layouts("llama3-8b", cluster)) {
    if (checked >= 40) break;
    const graph::Graph graph = graph::build_graph(model, candidate.layout);
    LayoutProbe probe(model, candidate.layout, cluster);
    for (double cap_w : {0.0, 450.0}) {
      sim::SimOptions options;
      if (cap_w > 0) options.power_limit_w.assign(graph.world_size(), cap_w);
      const sim::SimResult result = sim::simulate(graph, cluster, options);
      double energy_j = 0;
      for (const sim::StepResult& step : result.step_results) energy_j += step.energy_j;
      energy_j /= result.steps;
      const ProbeBound bound = probe.bound(cap_w);
      const double idle_j = bound.bound_s * cluster.gpu.idle_power_w * graph.world_size();
      EXPECT_LE(idle_j + bound.least_active_energy_j, energy_j) << parallel::describe(candidate.layout);
      idle_share += idle_j / (idle_j + bound.least_active_energy_j);
    }
    ++checked;
  }
  ASSERT_EQ(checked, 40);
  EXPECT_LT(idle_share / (2 * checked), 0.5);  // the compute's energy is most of the bound
}

TEST(StepBound, ZeroBubbleSchedulesStepsStayAboveTheirBound) {
  // The tail term follows B alone under a split backward (W waits for no neighbour): the bound stays at or
  // below the simulated step of ZB-H1 and ZB-V, and the probe's terms equal the whole graph's. Llama3-8B PP4
  // (8 layers a stage, 4 a chunk) at 8 to 32 micro-batches, TP 1 and 2, with and without a cap.
  const sim::ClusterSpec cluster = sim::load_cluster("h100-hgx");
  const model::ModelSpec model = model::load_model("llama3-8b");
  for (const auto schedule : {parallel::Schedule::kZbH1, parallel::Schedule::kZbV}) {
    for (int tp : {1, 2}) {
      for (int microbatches : {8, 16, 32}) {
        parallel::Layout layout;
        layout.tp = tp;
        layout.pp = 4;
        layout.schedule = schedule;
        layout.virtual_stages = parallel::schedule_entry(schedule).chunked ? 2 : 1;
        layout.global_batch = microbatches;
        layout.seq_length = 2048;
        layout = parallel::resolve_layout(model, layout);
        const graph::Graph graph = graph::build_graph(model, layout);
        for (double cap_w : {0.0, 450.0}) {
          SCOPED_TRACE(parallel::describe(layout) + " cap " + std::to_string(cap_w));
          sim::SimOptions options;
          if (cap_w > 0) options.power_limit_w.assign(graph.world_size(), cap_w);
          const double simulated_s = sim::simulate(graph, cluster, options).iteration_s;
          const double bound_s = capped_step_bound_s(graph, cluster, cap_w);
          EXPECT_LE(bound_s, simulated_s);
          EXPECT_GT(bound_s, 0.8 * simulated_s);  // still a bound that prunes
          LayoutProbe probe(model, layout, cluster);
          LayoutProbe whole(model, layout, cluster, true);
          EXPECT_NEAR(probe.bound(cap_w).bound_s, whole.bound(cap_w).bound_s, bound_s * 1e-9);
        }
      }
    }
  }
}

}  // namespace
}  // namespace calo::plan
