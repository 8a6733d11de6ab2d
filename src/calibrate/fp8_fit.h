// Stage "fp8" of `calo calibrate`: what FP8 training adds to a calibrated cluster, fitted to the op spans of
// FP8 runs (`calo bench --precision fp8 --trace-ops`) with every other parameter kept: the FP8 GEMMs' best
// fraction of the FP8 peak and the cast kernels' time against their memory bound (docs/SIMULATOR.md, "FP8
// GEMMs").
#pragma once

#include <string>
#include <vector>

#include "calibrate/fit_stage.h"
#include "calibrate/measurement.h"

namespace calo::calibrate {

/// One FP8 run with its graph and op spans.
struct Fp8OpRun {
  const MeasuredRun* run = nullptr;            ///< the measurement (never null)
  const graph::Graph* graph = nullptr;         ///< its graph (never null)
  const std::vector<OpTiming>* ops = nullptr;  ///< its measured ops (never null)
};

/// Stage "fp8", three parameters in turn, written into `cluster`: gpu.efficiency.gemm_fp8_max (least squares
/// of log(modeled / measured) over the FP8 GEMMs at the clock each ran, weighted by measured time);
/// gpu.efficiency.op_time_scale["elementwise.cast"] (the time-weighted geometric mean of measured / modeled
/// over the casts); gpu.active_power_w.gemm_fp8 (least squares of log step time and log SM clock of the
/// simulated runs under the power cap: what an FP8 GEMM draws sets how far the controller lowers the clock).
/// Residuals per run: FP8 GEMM and cast time at the measured clock, then the simulated run's figures. A stage
/// with a note and no parameters where no run has an FP8 GEMM or a cast.
StageFit fit_fp8_from_ops(const std::vector<Fp8OpRun>& runs, sim::ClusterSpec& cluster);

/// Name of the cast kernels' op_time_scale entry ("elementwise.cast").
inline constexpr const char* kCastKind = "elementwise.cast";

}  // namespace calo::calibrate
