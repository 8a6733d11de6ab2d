// Kineto (PyTorch profiler) traces as calibration input: NCCL kernels with their collective metadata fit the
// collective model's NVLink bandwidth and latency with the simulator's own collective time; GEMM, attention
// and norm/activation/residual kernels with their aten op's input shapes fit the compute efficiency curves
// (fit.h's fit_op_curves) at an assumed clock, since traces carry no clock samples. docs/SIMULATOR.md
// "Calibration from Kineto traces".
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "analyze/trace_ingest.h"
#include "calibrate/collective_fit.h"
#include "calibrate/fit.h"
#include "calibrate/measurement.h"
#include "graph/graph.h"
#include "sim/cluster.h"

namespace calo::calibrate {

/// The traces of one job (one file per rank) given to calibrate.
struct KinetoInput {
  std::vector<std::filesystem::path> files;  ///< the trace files
  std::string label;                         ///< for tables: the first file's name or the ingest run's
  std::string gpu_name;                      ///< deviceProperties name of the traced GPUs
  analyze::TraceData data;                   ///< as ingested
};

/// True when `path` is a Kineto trace file (a regular file named .json or .json.gz), not a run directory.
bool is_trace_file(const std::filesystem::path& path);

/// The trace files a run made by `calo ingest` was read from (its config's "traces"); empty for any other
/// run. InputError naming the run and the fix when the files are no longer there.
std::vector<std::filesystem::path> ingested_trace_files(const std::filesystem::path& run_dir);

/// Reads `files` (the ranks of one job) and checks them against `base_gpu`. InputError (exit 2) naming the
/// file and the fix for a trace without GPU kernels or one of another GPU model than `base_gpu`.
KinetoInput load_kineto_input(const std::vector<std::filesystem::path>& files, const std::string& label,
                              const sim::GpuSpec& base_gpu);

/// The collective samples of `data` (NCCL kernels with collective metadata: the collectives, and send/recv of
/// a 2-rank group as p2p samples; unknown kinds and p2p of larger groups are left out), with `cluster`
/// placing each group.
std::vector<CollectiveSample> collective_samples(const analyze::TraceData& data,
                                                 const sim::ClusterSpec& cluster);

/// One compute op instance of a trace: the kernels its aten op launched, summed, with the op rebuilt from
/// its input shapes.
struct KernelOp {
  std::string aten;   ///< launching op, e.g. "aten::mm"
  std::string shape;  ///< for tables, e.g. "m=1024 n=4096 k=1024 bf16"
  OpTiming timing;    ///< op (shapes, FLOPs, bytes), summed kernel time, assumed clock
};

/// GEMM (mm, addmm, bmm), attention (cuDNN and flash SDPA) and norm / activation / residual-add ops of
/// `data` whose shapes were recorded, at `clock_mhz`.
std::vector<KernelOp> kernel_ops(const analyze::TraceData& data, double clock_mhz);

/// What the traces contributed to a calibration.
struct KinetoFit {
  std::vector<std::string> labels;            ///< the trace inputs
  std::vector<CollectiveSample> collectives;  ///< all inputs' collective samples, modeled after the fit
  std::vector<CollectiveLineFit> lines;       ///< the kinds measured over a size sweep: their lines
  std::vector<KernelOp> ops;                  ///< all inputs' compute ops
  double clock_mhz = NAN;                     ///< clock assumed for the kernels
  std::string clock_source;                   ///< where it came from
  std::vector<nlohmann::json> op_residuals;   ///< per op shape: measured, modeled, achieved efficiency
};

/// Fits the collective model (stage "collective") and, when no run fitted the compute stage, the compute
/// curves (stage "compute") from `inputs` into `fit` (cluster, stages, kept list); kernels are taken at
/// `clock_mhz` (`clock_source` says why). Returns what it used, for the provenance.
KinetoFit fit_kineto(const std::vector<KinetoInput>& inputs, double clock_mhz,
                     const std::string& clock_source, FitResult& fit);

/// The traces' part of the calibrated file's provenance.
nlohmann::json kineto_provenance(const std::vector<KinetoInput>& inputs, const KinetoFit& kineto);

}  // namespace calo::calibrate
