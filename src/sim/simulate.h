// Multi-step simulation of one training job on a modeled cluster: per step, DVFS (power cap and thermal
// slowdown) sets every GPU's clock, the engine runs the graph, and each GPU's thermal state advances.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/power_dynamics.h"
#include "sim/sim_options.h"

namespace calo::sim {

/// Most steps one simulation takes (a limit on the work an input can ask for, checked before any step).
inline constexpr int kMaxSimSteps = 100'000;
/// Most GPU-steps (GPUs x steps) one simulation keeps per-step figures for (~28 bytes each).
inline constexpr int64_t kMaxSimGpuSteps = 10'000'000;
/// Most op spans a simulation records when it keeps every GPU's (--op-spans all, --timeline): 24 B each in
/// memory, ~90 B each in a stored run (Llama3-70B TP8-PP8-DP1 gbs 512 on 64 GPUs: 12 M spans, 1.1 GB stored).
inline constexpr int64_t kMaxTimelineSpans = 16'000'000;

/// The power-sample work of a simulation, known before any step runs: every GPU's power trace holds one
/// sample per driver sample window of its step, no step is shorter than its busiest program's compute at the
/// highest clock, and GPUs of one program, node slot, speed, inlet, power cap and clock lock share traces.
struct PowerSampleWork {
  double step_floor_s = 0;          ///< lower bound of a step: the busiest program's compute at max clock
  double samples_per_gpu_step = 0;  ///< step_floor_s / the GPU's sample window (at least 1)
  std::int64_t gpu_classes = 0;     ///< GPUs whose traces may differ (at most the GPUs)
  double power_samples = 0;         ///< samples_per_gpu_step x gpu_classes x steps
};

/// The power-sample work of simulating `graph` on `cluster` under `options` (O(ops); builds no trace).
PowerSampleWork estimated_power_samples(const graph::Graph& graph, const ClusterSpec& cluster,
                                        const SimOptions& options);

/// Per-GPU outcome over all steps.
struct GpuResult {
  int rank = 0;                     ///< global rank
  int node = 0;                     ///< node index
  int slot = 0;                     ///< slot within the node (airflow order)
  int stage = 0;                    ///< pipeline stage
  double power_limit_w = 0;         ///< power cap it ran under (SimOptions::power_limit_w, else the card's)
  double energy_j = 0;              ///< total energy over all steps
  double mean_power_w = 0;          ///< energy / simulated time
  double peak_power_w = 0;          ///< highest power sample (mean over the driver's sample window)
  double power_swing_100ms_w = 0;   ///< largest (max - min) of the power samples within 100 ms
  double max_die_c = 0;             ///< hottest die temperature at a step end
  double final_die_c = 0;           ///< die temperature after the last step
  double min_clock_mhz = 0;         ///< lowest SM clock used
  double throttle_power_cap_s = 0;  ///< busy time spent at a clock lowered by the power cap
  double throttle_thermal_s = 0;    ///< busy time spent at a clock lowered by thermal slowdown
  double busy_s = 0;                ///< own compute time (before waiting for slower group members)
};

/// Per-step aggregate over GPUs.
struct StepResult {
  double iteration_s = 0;     ///< step time
  double energy_j = 0;        ///< all GPUs
  double mean_power_w = 0;    ///< mean over GPUs of their step power
  double max_power_w = 0;     ///< highest GPU step-mean power
  double peak_power_w = 0;    ///< highest power sample of any GPU in the step
  double min_die_c = 0;       ///< coolest die at step end
  double mean_die_c = 0;      ///< mean die at step end
  double max_die_c = 0;       ///< hottest die at step end
  double min_clock_mhz = 0;   ///< slowest GPU clock in the step
  double mean_clock_mhz = 0;  ///< mean GPU clock
  int throttled_gpus = 0;     ///< GPUs below max clock
  int replica_classes = 0;    ///< distinct replica classes simulated
  int entities = 0;           ///< engine entities (tensor-parallel groups simulated)
  bool reused = false;        ///< the engine result was reused from an identical earlier step
};

/// Everything a simulation produced.
struct SimResult {
  std::string cluster;                 ///< cluster name
  std::string layout;                  ///< layout description
  std::string model;                   ///< model name
  int world = 0;                       ///< GPUs
  int steps = 0;                       ///< steps simulated
  int warmup_steps = 0;                ///< of which the first are warm-up
  double tokens_per_step = 0;          ///< global batch * sequence length
  double model_flops_per_step = 0;     ///< GEMM + attention FLOPs of all ranks, recomputation excluded
  double hardware_flops_per_step = 0;  ///< all compute-op FLOPs of all ranks, recomputation included
  double peak_flops_per_gpu = 0;       ///< GPU peak bf16 FLOP/s
  double power_limit_w = 0;            ///< highest power cap of any GPU (the card's limit when none is lower)
  double iteration_s = 0;              ///< mean step time
  double last_iteration_s = 0;         ///< step time of the last step
  double compute_busy_s = 0;           ///< mean over GPUs, last step
  double exposed_comm_s[kNumCommClasses] = {};   ///< mean over GPUs, last step
  double comm_transfer_s[kNumCommClasses] = {};  ///< mean over GPUs, last step
  double wait_s = 0;                     ///< last step: iteration - busy - exposed comm (bubbles, stragglers)
  std::vector<StepResult> step_results;  ///< one per step
  std::vector<GpuResult> gpus;           ///< one per GPU
  std::vector<float> die_c;              ///< [step * world + rank] die temperature at step end
  std::vector<float> clock_mhz;          ///< [step * world + rank] SM clock during the step
  std::vector<float> power_w;            ///< [step * world + rank] mean power during the step
  std::vector<std::int32_t> trace_of;    ///< [step * world + rank] index into power_traces
  std::vector<std::shared_ptr<const PowerTrace>> power_traces;  ///< distinct per-step power traces
  std::size_t power_traces_computed = 0;  ///< traces the controller model computed (the rest were reused)
  std::uint64_t op_events = 0;            ///< ops executed by the engine over all steps
  double wall_s = 0;                      ///< host time the simulation took
  /// Per-rank op timeline of the last step (only with record_timeline): rank -> spans; with
  /// timeline_distinct_ranks the ranks whose timeline another rank already stands for are left empty.
  std::vector<std::vector<OpSpan>> timeline;
};

/// Simulates `options.steps` iterations of `graph` on `cluster`. The options' per-GPU vectors are indexed by
/// GPU; under the layout's stage -> GPU order each rank takes its GPU's (sim/placement.h), and the results
/// are per rank. Throws InputError if the options do not fit the graph (sizes of per-GPU vectors), the
/// order moves a stage across nodes or the power samples exceed options.max_power_samples (naming the figure
/// and --max-power-samples), RuntimeFailure if the graph deadlocks.
SimResult simulate(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options);

/// Throughput per second of step time: tokens / iteration_s.
double tokens_per_s(const SimResult& result);
/// Model FLOP/s per GPU: model_flops_per_step / iteration_s / world.
double model_flops_per_gpu(const SimResult& result);
/// Model FLOP utilization: model_flops_per_gpu / peak_flops_per_gpu.
double mfu(const SimResult& result);

/// Names of the exposed-communication classes ("tp", "dp", "pp", "ep", "edp", "embedding", "cp", "dp-cp").
const char* comm_class_name(int comm_class);

/// Summary (and, when `per_gpu`, per-GPU figures and trajectories) as JSON.
nlohmann::json to_json(const SimResult& result, bool per_gpu);

}  // namespace calo::sim
