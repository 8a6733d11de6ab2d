// Execution backend interface (ggml-backend style: registry -> backend bound to one device -> streams).
//
// A backend executes the ops of one rank's materialized program (graph::materialize) on one device. The
// backend-independent executor (exec/executor.h) owns the order: it prepares every op once, then per step
// launches each op on the stream the graph names, making a stream wait for an event of another stream where
// the op depends on an op of that stream, so overlap is exactly what the graph says. Backends own memory,
// kernels and communicators. The CPU backend (OpenBLAS + MPI) lives in exec/cpu_backend.*, the CUDA backend
// (cuBLASLt, attention, own kernels, NCCL) in exec/cuda/, built as libcalo_exec_cuda.so and loaded by calo on
// first use (exec/cuda_module.h); binaries that link it instead register it with register_cuda_backend()
// below.
//
// Threading: the executor calls a backend from one host thread. A backend may run streams on its own threads
// (CPU) or device queues (CUDA); launch/record/wait only enqueue and return.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/progress.h"
#include "graph/graph.h"

namespace calo::exec {

class Bootstrap;

/// What one backend instance runs on (one rank's device).
struct DeviceDescription {
  std::string backend;      ///< backend name: "cpu" | "cuda"
  std::string name;         ///< product name, e.g. "NVIDIA H200" or the CPU model
  std::string uuid;         ///< vendor UUID, empty if unknown
  std::string pci_bus;      ///< PCI bus id, empty if unknown
  int local_index = 0;      ///< device index on this host (CUDA ordinal; local rank for CPU)
  double memory_bytes = 0;  ///< memory this rank may use (GPU: device total; CPU: host total / local ranks)
  double peak_flops = 0;    ///< peak FLOP/s of the GEMM dtype below on this device (for MFU)
  std::string peak_flops_source;  ///< how peak_flops was obtained, e.g. "nominal H200 SXM bf16 dense"
  std::string gemm_dtype;         ///< dtype GEMMs actually run in: "bf16" (CUDA) | "fp32" (CPU)
  /// Attention implementation the ops actually use, set by prepare() (empty before, and for the CPU backend):
  /// CUDA "cudnn-sdpa" | "cublaslt-fallback" (joined by '+' when shapes differ).
  std::string attention_impl;
};

/// Settings fixed when a backend is created (same on every rank except the rank fields).
struct BackendConfig {
  int rank = 0;               ///< global rank of this process
  int world_size = 1;         ///< ranks in the job
  int local_rank = 0;         ///< rank among the processes of this host (selects the device)
  int local_world_size = 1;   ///< processes on this host
  bool check = false;         ///< --check: fill inputs with verifiable data and verify every checked op
  std::uint64_t seed = 1234;  ///< base seed of random operand data (the rank is mixed in)
  /// Lines "calo: ..." for the user, rank 0 only (e.g. why attention uses the fallback); unset = silent.
  core::NoticeFn notice;
};

/// Op counts per graph::OpKind (index = static_cast<int>(kind)).
using OpCounts = std::array<std::int64_t, graph::kNumOpKinds>;

/// Result of --check verification accumulated since the backend was created.
struct CheckReport {
  std::int64_t ops_checked = 0;             ///< ops whose result was verified
  std::int64_t values_checked = 0;          ///< output values compared with their expected value
  std::int64_t wrong = 0;                   ///< values outside tolerance (#wrong, nccl-tests style)
  std::vector<std::string> first_failures;  ///< up to 10 descriptions of wrong results (op, index, got, want)
};

/// Memory held through Backend::hold (`calo bench --memory real`) and the device memory in use.
struct HeldMemory {
  std::int64_t held_peak_bytes = 0;  ///< most bytes held at once through hold(), since creation
  /// Device memory the rank uses: CUDA total - free (held memory stays reserved, as a caching allocator
  /// keeps it); CPU the backend's buffers + held_peak_bytes.
  std::int64_t device_used_bytes = 0;
};

/// Bytes a backend's prepare() will allocate for one rank's operand buffers, counted before any is
/// allocated, per graph::OpKind of the op that first asks for them (a buffer shared by role and size counts
/// once).
struct OperandFootprint {
  std::array<double, graph::kNumOpKinds> bytes_by_kind{};  ///< bytes per graph::OpKind (index = kind)
  /// Every operand byte of the rank.
  double total_bytes() const {
    double total = 0;
    for (const double bytes : bytes_by_kind) total += bytes;
    return total;
  }
};

/// An execution stream of one kind (graph::Stream); ops on it run in launch order. Owned by the executor.
class Stream {
 public:
  virtual ~Stream() = default;
  /// The graph stream this stream executes.
  virtual graph::Stream kind() const = 0;
};

/// A point on a stream: recorded after some launch, waited for by another stream, used for timing.
class Event {
 public:
  virtual ~Event() = default;
};

/// An op with its buffers allocated and filled (random, never zero); created by Backend::prepare.
class PreparedOp {
 public:
  virtual ~PreparedOp() = default;
};

/// One backend instance bound to one device of one rank.
class Backend {
 public:
  virtual ~Backend() = default;

  /// The device this backend runs on (valid right after creation, before connect()).
  virtual const DeviceDescription& device() const = 0;

  /// Creates the communicators of every group of `graph` that `rank` belongs to (Graph::group_of_rank) and
  /// the point-to-point paths to its pipeline peers. Collective over all ranks: every rank calls it with the
  /// same graph. `bootstrap` carries out-of-band data (e.g. ncclUniqueId via share_group_blobs()).
  virtual void connect(const graph::Graph& graph, int rank, Bootstrap& bootstrap) = 0;

  /// Creates a stream that executes ops of graph stream `kind`.
  virtual std::unique_ptr<Stream> create_stream(graph::Stream kind) = 0;

  /// Creates an event; `timing` true when elapsed_ns() will be asked of it.
  virtual std::unique_ptr<Event> create_event(bool timing) = 0;

  /// Allocates and initializes everything `op` needs (operands with the op's exact shapes, random data;
  /// with BackendConfig::check, verifiable data). `op_index` is its index in the materialized program.
  /// Called for every op before the first step; throws RuntimeFailure if memory runs out.
  virtual std::unique_ptr<PreparedOp> prepare(const graph::RankOp& op, int op_index) = 0;

  /// Enqueues `op` on `stream` (returns at once). Collectives and send/recv use the communicator of the op's
  /// group / peer set up by connect().
  virtual void launch(PreparedOp& op, Stream& stream) = 0;

  /// Enqueues `event` on `stream`: it completes when everything launched on `stream` before it has.
  virtual void record(Event& event, Stream& stream) = 0;

  /// Makes `stream` wait (without blocking the host) until `event` completes.
  virtual void wait(Stream& stream, Event& event) = 0;

  /// Blocks until everything launched on every stream has finished; throws RuntimeFailure with the first
  /// error any op raised (rank, op description).
  virtual void synchronize() = 0;

  /// Time from `from` to `to` in ns; both must have completed (after synchronize()) and be timing events.
  virtual std::int64_t elapsed_ns(Event& from, Event& to) = 0;

  /// Ops actually executed per kind since creation (counted where the op runs, not where it is launched).
  virtual OpCounts executed_op_counts() const = 0;

  /// Verification results so far (all zero when BackendConfig::check is false).
  virtual CheckReport check_report() const = 0;

  /// Bytes of device memory this backend has allocated.
  virtual std::int64_t allocated_bytes() const = 0;

  /// Enqueues on `stream` an allocation of `bytes` of device memory under `slot` (really backed: the pages
  /// exist once it has run); throws RuntimeFailure naming `what` when the device has no room.
  virtual void hold(std::int32_t slot, std::int64_t bytes, const std::string& what, Stream& stream) = 0;
  /// Enqueues on `stream` the free of what hold() allocated under `slot`.
  virtual void release(std::int32_t slot, Stream& stream) = 0;
  /// What hold() has held at its peak and the device memory in use; call after synchronize().
  virtual HeldMemory held_memory() = 0;
};

/// How to create one kind of backend.
struct BackendFactory {
  std::string name;       ///< "cpu", "cuda"
  int auto_priority = 0;  ///< `--backend auto` picks the available backend with the highest priority
  /// Empty string when the backend can run here (e.g. a CUDA device is visible), else why not.
  std::function<std::string()> unavailable_reason;
  /// Creates a backend for one rank (throws RuntimeFailure on device errors).
  std::function<std::unique_ptr<Backend>(const BackendConfig&)> create;
  /// (optional) Describes local device `local_index` without creating a backend; the parent process uses it
  /// to plan memory before spawning ranks. Empty: the parent skips the plan and each rank plans after create.
  std::function<DeviceDescription(int local_index, int local_world_size)> describe;
  /// (optional) Counts the operand bytes rank `rank` of `graph` will allocate in prepare(), allocating
  /// nothing: the parent and each rank refuse a layout whose operands would not fit before any is allocated
  /// (check_operands_fit). Empty: operands are only found too large when an allocation fails.
  std::function<OperandFootprint(const graph::Graph& graph, int rank)> operand_footprint;
  /// (optional) Number of devices visible on this host (0 = no limit, e.g. CPU); --nproc above it is refused.
  std::function<int()> device_count;
  /// Whether the backend runs context-parallel ring ops (layouts with cp > 1); others refuse such layouts.
  bool context_parallel = false;
  /// Runs FP8 linears (--precision fp8 and fp8-delayed: e4m3 GEMMs with a scale per tensor and their casts).
  bool fp8_linears = false;
};

/// The backends compiled into this binary.
class BackendRegistry {
 public:
  /// The process-wide registry with every built-in backend registered (cpu always, cuda when built: loaded
  /// from its module on first use).
  static BackendRegistry& instance();
  /// Adds (or replaces, by name) a backend factory.
  void add(BackendFactory factory);
  /// The factory called `name`, or nullptr.
  const BackendFactory* find(const std::string& name) const;
  /// Names of all registered backends, in registration order.
  std::vector<std::string> names() const;
  /// Resolves "auto" (highest-priority available) or a name; throws InputError naming --backend and the
  /// choices when unknown, or unavailable with the reason.
  const BackendFactory& select(const std::string& name_or_auto) const;

 private:
  std::vector<BackendFactory> factories_;
};

/// Registers the CUDA backend linked into this binary, replacing the entry that loads libcalo_exec_cuda.so
/// (exec/cuda_module.h); defined in exec/cuda/ (library calo_exec_cuda), called by the binaries that link it.
void register_cuda_backend(BackendRegistry& registry);

/// Name of an op kind's counter slot, for messages (same as graph::to_string(OpKind)).
const char* op_count_name(int kind_index);

}  // namespace calo::exec
