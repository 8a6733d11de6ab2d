// PyTorch profiler (Kineto) Chrome-trace ingestion: a single-pass scanner over the file (memory-mapped, any
// size) keeps only GPU kernels, memcpy/memset, NCCL metadata and ProfilerStep spans, then writes a run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "analyze/breakdown.h"
#include "analyze/kernel_category.h"

namespace calo::store {
class RunWriter;
}

namespace calo::analyze {

/// One GPU activity (kernel, memcpy or memset) of one rank, on the merged time base.
struct TraceKernel {
  int32_t lane = 0;                                  ///< index into TraceData::lanes (one rank's device)
  int32_t stream = 0;                                ///< CUDA stream id
  int32_t name_id = 0;                               ///< index into TraceData::names
  KernelCategory category = KernelCategory::kOther;  ///< classified category
  int64_t t_begin_ns = 0;    ///< begin, ns since the earliest event of all ingested traces
  int64_t t_end_ns = 0;      ///< end, ns since the same origin
  double message_bytes = 0;  ///< NCCL message size in bytes (nccl-tests convention), 0 if unknown
  int32_t group_size = 0;    ///< NCCL group size, 0 if unknown
  int32_t group = -1;        ///< index into TraceData::groups ("Process Group Ranks"), -1 if not recorded
  bool p2p_send = false;     ///< a send/recv kernel whose collective name is "send" (the sender's side)
  int32_t op = -1;  ///< index into TraceData::ops of the aten op that launched it, -1 if none/not kept
};

/// The innermost aten CPU op that launched kernels, with its recorded inputs (profiler record_shapes=True).
struct TraceOp {
  std::string name;                              ///< e.g. "aten::mm"
  std::vector<std::vector<int64_t>> input_dims;  ///< "Input Dims" per input (empty: scalar or tensor list)
  std::vector<std::string> input_types;          ///< "Input type" per input ("c10::BFloat16", "Scalar", ...)
  std::vector<std::string> concrete_inputs;      ///< "Concrete Inputs" per input (scalars as text, else "")
};

/// One ProfilerStep#N annotation of one rank.
struct TraceStep {
  int32_t lane = 0;        ///< index into TraceData::lanes
  int64_t step = 0;        ///< N of ProfilerStep#N
  int64_t t_begin_ns = 0;  ///< begin, merged time base
  int64_t t_end_ns = 0;    ///< end, merged time base
};

/// One (rank, GPU) pair found in the traces.
struct TraceLane {
  int32_t rank = 0;         ///< distributedInfo.rank, else the file's position in the argument list
  int32_t device = 0;       ///< CUDA device index of the kernels (args.device or pid)
  std::string device_name;  ///< deviceProperties[].name for that device, empty if absent
  std::string source_file;  ///< trace file it came from
};

/// Everything ingestion keeps from one or more traces (one per rank, or one holding all ranks).
struct TraceData {
  std::vector<TraceLane> lanes;      ///< ordered by (rank, device)
  std::vector<std::string> names;    ///< distinct kernel names
  std::vector<TraceKernel> kernels;  ///< all kernels, ordered by (lane, t_begin_ns)
  std::vector<TraceStep> steps;      ///< ProfilerStep spans, ordered by (lane, t_begin_ns)
  std::vector<TraceOp> ops;          ///< aten ops that launched a kept kernel (with keep_op_shapes)
  int64_t origin_unix_ns = 0;  ///< absolute time (Unix ns when the trace has baseTimeNanoseconds) of t=0
  int64_t end_ns = 0;          ///< latest event end on the merged time base
  uint64_t bytes_read = 0;     ///< JSON bytes scanned
  uint64_t events_seen = 0;    ///< trace events scanned (all kinds)
  int32_t world_size = 0;      ///< distributedInfo.world_size, 0 if absent
  /// Distinct process groups of the collectives ("Process Group Ranks": global ranks, in the recorded order).
  std::vector<std::vector<int32_t>> groups;
};

/// Parses one Kineto JSON text held in memory, or its gzip compression (used by tests, the fuzzer and the
/// benchmark), and appends to `data`; `source_name` names it in errors; `default_rank` is used without
/// distributedInfo.
void parse_kineto_json(const char* text, std::size_t size, const std::string& source_name,
                       int32_t default_rank, TraceData& data);

/// Reads the traces at `paths` (memory-mapped), merges them on one time base, classifies kernels and orders
/// everything. InputError for a missing/unreadable/malformed file (gzip is named with its fix), and for
/// traces that cannot be ranks of one job: two files with the same distributedInfo.rank, different world
/// sizes, or a rank outside its world. `keep_op_shapes`: also keep the aten ops that launched kernels with
/// their inputs (TraceData::ops, TraceKernel::op; calibration needs them, the breakdown does not: 27 % more
/// CPU on a shape-recorded trace).
TraceData ingest_traces(const std::vector<std::filesystem::path>& paths, bool keep_op_shapes = false);

/// The per-lane kernel breakdown of `data`'s kernels (busy, exposed and overlapped time per category), one
/// entry per lane: what write_trace_run stores as summary rows and `calo ingest` prints.
std::vector<LaneBreakdown> trace_kernel_breakdown(const TraceData& data);

/// Writes `data` into a run: one device per lane, kernel spans (category as span category), step spans,
/// and the per-lane breakdown summary rows (scope "dev<n>", the lane's device; docs/METRICS.md "Kernel
/// breakdown").
void write_trace_run(const TraceData& data, store::RunWriter& writer);

}  // namespace calo::analyze
