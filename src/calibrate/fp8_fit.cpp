#include "calibrate/fp8_fit.h"

#include <algorithm>
#include <cmath>

#include "graph/graph.h"

namespace calo::calibrate {
namespace {

/// Whether `op` is a GEMM on the FP8 tensor cores.
bool is_fp8_gemm(const graph::Op& op) {
  return op.kind == graph::OpKind::kGemm &&
         (op.gemm.dtype == graph::DType::kFp8 || op.gemm.dtype == graph::DType::kFp8Rowwise);
}

/// Whether `op` is an FP8 cast (amax and scaled cast of one tensor).
bool is_cast(const graph::Op& op) {
  return op.kind == graph::OpKind::kElementwise && op.elementwise == graph::ElementwiseKind::kCast;
}

/// Time-weighted loss of log(modeled / measured) over the ops `keep` selects.
template <typename Keep>
double weighted_log_loss(const sim::GpuSpec& gpu, const std::vector<Fp8OpRun>& runs, Keep keep) {
  double sum = 0;
  for (const Fp8OpRun& run : runs) {
    for (const OpTiming& timing : *run.ops) {
      if (!keep(timing.op) || timing.duration_s <= 0) continue;
      const double ratio = std::log(modeled_op_s(gpu, timing) / timing.duration_s);
      sum += timing.duration_s * ratio * ratio;
    }
  }
  return sum;
}

/// Relative error of the summed modeled time of the ops `keep` selects in `run` (NaN where there are none).
template <typename Keep>
double summed_error(const sim::GpuSpec& gpu, const Fp8OpRun& run, Keep keep) {
  double measured_s = 0, modeled_s = 0;
  for (const OpTiming& timing : *run.ops) {
    if (!keep(timing.op) || timing.duration_s <= 0) continue;
    measured_s += timing.duration_s;
    modeled_s += modeled_op_s(gpu, timing);
  }
  return measured_s > 0 ? modeled_s / measured_s - 1 : NAN;
}

/// The FP8 GEMMs' best efficiency, fitted to their spans.
ParameterFit fit_gemm_fp8_max(const std::vector<Fp8OpRun>& runs, sim::GpuSpec& gpu) {
  const double base = gpu.efficiency.gemm_fp8_max > 0 ? gpu.efficiency.gemm_fp8_max : gpu.efficiency.gemm_max;
  sim::GpuSpec trial = gpu;
  gpu.efficiency.gemm_fp8_max = minimize_1d(
      [&](double value) {
        trial.efficiency.gemm_fp8_max = value;
        return weighted_log_loss(trial, runs, is_fp8_gemm);
      },
      0.05, 0.99, false);
  return {"gpu.efficiency.gemm_fp8_max", base, gpu.efficiency.gemm_fp8_max, "", "fp8"};
}

/// The casts' time scale: the time-weighted geometric mean of measured / modeled (closed form).
ParameterFit fit_cast_scale(const std::vector<Fp8OpRun>& runs, sim::GpuSpec& gpu) {
  const auto found = gpu.efficiency.op_time_scale.find(kCastKind);
  const double base = found == gpu.efficiency.op_time_scale.end() ? 1.0 : found->second;
  gpu.efficiency.op_time_scale[kCastKind] = 1.0;
  double log_sum = 0, weight = 0;
  for (const Fp8OpRun& run : runs) {
    for (const OpTiming& timing : *run.ops) {
      if (!is_cast(timing.op) || timing.duration_s <= 0) continue;
      log_sum += timing.duration_s * std::log(timing.duration_s / modeled_op_s(gpu, timing));
      weight += timing.duration_s;
    }
  }
  gpu.efficiency.op_time_scale[kCastKind] = std::clamp(std::exp(log_sum / weight), 0.05, 50.0);
  return {std::string("gpu.efficiency.op_time_scale.") + kCastKind, base,
          gpu.efficiency.op_time_scale[kCastKind], "x", "fp8"};
}

/// What an FP8 GEMM draws, fitted to the simulated runs' step times and SM clocks under the power cap.
ParameterFit fit_gemm_fp8_power(const std::vector<Fp8OpRun>& runs, sim::ClusterSpec& cluster) {
  const int fp8 = static_cast<int>(sim::PowerClass::kGemmFp8);
  const double base_w = cluster.gpu.active_power_w[fp8];
  sim::ClusterSpec trial = cluster;
  auto loss = [&](double power_w) {
    trial.gpu.active_power_w[fp8] = power_w;
    double sum = 0;
    for (const Fp8OpRun& run : runs) {
      const RunFigures simulated = simulate_run(*run.run, *run.graph, trial);
      for (const std::size_t figure : {std::size_t{0}, std::size_t{6}}) {
        const double ratio =
            std::log(figure_value(simulated, figure) / figure_value(run.run->figures, figure));
        if (std::isfinite(ratio)) sum += ratio * ratio;
      }
    }
    return sum;
  };
  cluster.gpu.active_power_w[fp8] = minimize_1d(loss, 0.6 * base_w, 1.4 * base_w, false, 9, 10);
  return {"gpu.active_power_w.gemm_fp8", base_w, cluster.gpu.active_power_w[fp8], "W", "fp8"};
}

}  // namespace

StageFit fit_fp8_from_ops(const std::vector<Fp8OpRun>& runs, sim::ClusterSpec& cluster) {
  StageFit stage{"fp8", {}, {}, ""};
  bool any_gemm = false, any_cast = false;
  for (const Fp8OpRun& run : runs) {
    for (const OpTiming& timing : *run.ops) {
      any_gemm = any_gemm || is_fp8_gemm(timing.op);
      any_cast = any_cast || is_cast(timing.op);
    }
  }
  if (!any_gemm && !any_cast) {
    stage.note = "no run has FP8 op spans (calo bench --precision fp8 --trace-ops)";
    return stage;
  }
  if (any_gemm) stage.parameters.push_back(fit_gemm_fp8_max(runs, cluster.gpu));
  if (any_cast) stage.parameters.push_back(fit_cast_scale(runs, cluster.gpu));
  if (any_gemm && cluster.gpu.power_limit_w > 0)
    stage.parameters.push_back(fit_gemm_fp8_power(runs, cluster));
  for (const Fp8OpRun& run : runs) {
    nlohmann::json residual =
        errors_json(run.run->figures, simulate_run(*run.run, *run.graph, cluster), {0, 1, 2, 6});
    if (const double error = summed_error(cluster.gpu, run, is_fp8_gemm); std::isfinite(error))
      residual["fp8_gemm_time"] = error;
    if (const double error = summed_error(cluster.gpu, run, is_cast); std::isfinite(error))
      residual["cast_time"] = error;
    stage.residuals.emplace_back(run.run->label, residual);
  }
  return stage;
}

}  // namespace calo::calibrate
