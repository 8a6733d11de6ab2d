// CUDA backend: the Backend over one GPU (device description, NCCL communicators, streams/events, launch,
// synchronize) and the memory and --check helpers its op units share. What each op kind does lives in its
// unit (cuda_internal.h lists them); the table below maps graph::OpKind to the unit.
#include "exec/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/table.h"
#include "exec/bootstrap.h"
#include "exec/cuda/cuda_holds.h"
#include "exec/cuda/cuda_internal.h"
#include "exec/cuda/fp8.cuh"
#include "exec/cuda/init.cuh"
#include "exec/cuda_module.h"
#include "exec/op_units.h"

namespace calo::exec {
namespace cuda {

// ---- CudaContext: memory and --check helpers of the op units ----

void* CudaContext::allocate(std::size_t bytes, const std::string& role) {
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, std::max<std::size_t>(bytes, 256));
  if (status != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw RuntimeFailure(
        fmt::format("rank {}: out of GPU memory allocating {} for {} ({} allocated by calo for its operand "
                    "buffers, {} free of {}); use more tp/pp or a smaller slice",
                    rank, core::format_bytes(static_cast<double>(bytes)), role,
                    core::format_bytes(static_cast<double>(allocated_bytes)),
                    core::format_bytes(static_cast<double>(free_bytes)),
                    core::format_bytes(static_cast<double>(total_bytes))));
  }
  allocations.push_back(pointer);
  allocated_bytes += static_cast<std::int64_t>(bytes);
  return pointer;
}

void* CudaContext::shared(const std::string& role, std::int64_t values, std::uint64_t seed, float scale) {
  values = std::max<std::int64_t>(values, 1);
  auto& slot = scratch[{role, values}];
  if (slot == nullptr) {
    slot = allocate(static_cast<std::size_t>(values) * sizeof(bf16), role);
    fill_random_bf16(static_cast<bf16*>(slot), values, seed, scale, init_stream);
    CALO_CUDA_LAUNCH();
  }
  return slot;
}

void* CudaContext::shared_f32(const std::string& role, std::int64_t values, std::uint64_t seed, float scale,
                              bool positive) {
  values = std::max<std::int64_t>(values, 1);
  auto& slot = scratch[{role, values}];
  if (slot == nullptr) {
    slot = allocate(static_cast<std::size_t>(values) * sizeof(float), role);
    fill_random_f32(static_cast<float*>(slot), values, seed, scale, positive, init_stream);
    CALO_CUDA_LAUNCH();
  }
  return slot;
}

void* CudaContext::shared_indices(const std::string& role, std::int64_t values, std::uint64_t seed,
                                  std::int32_t modulo) {
  values = std::max<std::int64_t>(values, 1);
  auto& slot = scratch[{role + fmt::format("/{}", modulo), values}];
  if (slot == nullptr) {
    slot = allocate(static_cast<std::size_t>(values) * sizeof(std::int32_t), role);
    fill_indices(static_cast<std::int32_t*>(slot), values, seed, modulo, init_stream);
    CALO_CUDA_LAUNCH();
  }
  return slot;
}

GemmRunner& CudaContext::gemm_runner(cudaStream_t stream) {
  auto& runner = gemm_runners[stream];
  if (!runner) runner = std::make_unique<GemmRunner>();
  return *runner;
}

void CudaContext::corrupt(void* device_value, cudaStream_t stream) {
  static const std::uint16_t kBad = 0x4640;  // 12288.0 in bf16
  CALO_CUDA(cudaMemcpyAsync(device_value, &kBad, sizeof(kBad), cudaMemcpyHostToDevice, stream));
}

void CudaContext::snapshot_range(CudaOp& op, const void* device_values,
                                 std::vector<std::pair<std::int64_t, std::int64_t>> ranges,
                                 cudaStream_t stream, std::size_t value_bytes) {
  std::int64_t total = 0;
  for (const auto& [offset, count] : ranges) total += count;
  op.snapshot.allocate(static_cast<std::size_t>(std::max<std::int64_t>(total, 1)) * value_bytes);
  std::int64_t at = 0;
  for (const auto& [offset, count] : ranges) {
    if (count <= 0) continue;
    CALO_CUDA(cudaMemcpyAsync(
        static_cast<char*>(op.snapshot.data) + at * static_cast<std::int64_t>(value_bytes),
        static_cast<const char*>(device_values) + offset * static_cast<std::int64_t>(value_bytes),
        static_cast<std::size_t>(count) * value_bytes, cudaMemcpyDeviceToHost, stream));
    at += count;
  }
  op.snapshot_ranges = std::move(ranges);
  if (!op.snapshot_pending) check_queue.push_back(&op);
  op.snapshot_pending = true;
}

Fp8Tensor CudaContext::shared_fp8(const std::string& role, std::int64_t values, std::uint64_t seed) {
  values = std::max<std::int64_t>(values, 1);
  auto& slot = scratch[{role, values}];
  auto& scales = scratch[{role + ".scales", values}];
  if (slot == nullptr) {
    const auto* source = static_cast<const bf16*>(shared(role + ".source", values, seed));
    slot = allocate(static_cast<std::size_t>(values), role);
    scales = allocate(kFp8ScaleFloats * sizeof(float), role + ".scales");
    fp8_amax(source, values, static_cast<float*>(scales), init_stream);
    fp8_cast(source, values, static_cast<float*>(scales), static_cast<std::uint8_t*>(slot), init_stream);
    CALO_CUDA_LAUNCH();
  }
  return {slot, scales};
}

std::vector<double> CudaContext::read_fp8(const void* device_values, std::int64_t offset, std::int64_t count,
                                          const void* device_scales) {
  std::vector<std::uint8_t> bytes(static_cast<size_t>(count));
  float scales[kFp8ScaleFloats] = {};
  CALO_CUDA(cudaMemcpy(bytes.data(), static_cast<const std::uint8_t*>(device_values) + offset, bytes.size(),
                       cudaMemcpyDeviceToHost));
  CALO_CUDA(cudaMemcpy(scales, device_scales, sizeof(scales), cudaMemcpyDeviceToHost));
  std::vector<double> values(bytes.size());
  for (size_t at = 0; at < bytes.size(); ++at)
    values[at] = e4m3_to_double(bytes[at]) * scales[kFp8ScaleIndex];
  return values;
}

std::vector<double> CudaContext::read_strided(const void* device_values, std::int64_t offset,
                                              std::int64_t count, std::int64_t stride) {
  std::vector<std::uint16_t> bits(static_cast<size_t>(count));
  CALO_CUDA(cudaMemcpy2D(bits.data(), sizeof(std::uint16_t),
                         static_cast<const std::uint16_t*>(device_values) + offset,
                         static_cast<std::size_t>(stride) * sizeof(std::uint16_t), sizeof(std::uint16_t),
                         static_cast<std::size_t>(count), cudaMemcpyDeviceToHost));
  std::vector<double> values(bits.size());
  for (size_t at = 0; at < bits.size(); ++at) values[at] = bf16_to_float(bits[at]);
  return values;
}

}  // namespace cuda

namespace {

using cuda::CudaContext;
using cuda::CudaEvent;
using cuda::CudaOp;
using cuda::CudaOpUnit;
using cuda::CudaStream;
using cuda::StreamHandle;
using graph::OpKind;

/// The op unit of every graph::OpKind (one file per unit, see cuda_internal.h).
constexpr OpUnits<CudaOpUnit> kOpUnits(cuda::kGemmUnit, cuda::kAttentionUnit, cuda::kElementwiseUnit,
                                       cuda::kCollectiveUnit, cuda::kPointToPointUnit, cuda::kOptimizerUnit);

std::string pci_bus_of(int device) {
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) return {};
  return bus;
}

std::string uuid_of(const cudaDeviceProp& properties) {
  std::string text = "GPU-";
  const auto* bytes = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
  for (int at = 0; at < 16; ++at) {
    text += fmt::format("{:02x}", bytes[at]);
    if (at == 3 || at == 5 || at == 7 || at == 9) text += '-';
  }
  return text;
}

DeviceDescription describe_device(int local_index) {
  int count = 0;
  CALO_CUDA(cudaGetDeviceCount(&count));
  if (count <= 0) throw RuntimeFailure("no CUDA device visible");
  const int device = local_index % count;
  cudaDeviceProp properties{};
  CALO_CUDA(cudaGetDeviceProperties(&properties, device));
  DeviceDescription description;
  description.backend = "cuda";
  description.name = properties.name;
  description.uuid = uuid_of(properties);
  description.pci_bus = pci_bus_of(device);
  description.local_index = device;
  description.memory_bytes = static_cast<double>(properties.totalGlobalMem);
  description.peak_flops = nominal_bf16_peak_flops(description.name, &description.peak_flops_source);
  if (description.peak_flops <= 0) {
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
    const double per_sm_per_clock =
        properties.major >= 9 ? 4096.0 : (properties.major == 8 ? 2048.0 : 1024.0);
    description.peak_flops = properties.multiProcessorCount * per_sm_per_clock * clock_khz * 1e3;
    description.peak_flops_source = fmt::format("estimated: {} SMs x {} bf16 FLOP/clock x {} MHz (cc {}.{})",
                                                properties.multiProcessorCount, per_sm_per_clock,
                                                clock_khz / 1000, properties.major, properties.minor);
  }
  description.gemm_dtype = "bf16";
  return description;
}

// CALO_ADAMW_CHUNK_VALUES: values per fp32 array of one AdamW launch (0: the whole shard in one launch, as
// before 2026-12-06, for A/B timing); unset: `fallback`.
std::int64_t adamw_chunk_values_from_env(std::int64_t fallback) {
  const char* text = std::getenv("CALO_ADAMW_CHUNK_VALUES");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long values = std::strtoll(text, &end, 10);
  if (*end != '\0' || values < 0) {
    throw InputError(
        fmt::format("CALO_ADAMW_CHUNK_VALUES={}: not a count of values; give one (0: the whole "
                    "shard in one launch) or unset it (1 GiB per array)",
                    text));
  }
  return values == 0 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(values);
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendConfig& config) {
    context_.config = config;
    cuda::set_cuda_error_rank(config.rank);
    context_.device = describe_device(config.local_rank);
    CALO_CUDA(cudaSetDevice(context_.device.local_index));
    CALO_CUDA(cudaStreamCreateWithFlags(&context_.init_stream, cudaStreamNonBlocking));
    const char* fault = std::getenv("CALO_CUDA_INJECT_FAULT");
    context_.inject_fault = fault != nullptr ? fault : "";
    context_.attention_mode = cuda::attention_mode_from_env();
    context_.adamw_chunk_values = adamw_chunk_values_from_env(context_.adamw_chunk_values);
    const char* timeout = std::getenv("CALO_CUDA_SYNC_TIMEOUT_S");
    if (timeout != nullptr) sync_timeout_s_ = std::max(1.0, std::atof(timeout));
    executed_.fill(0);
    launched_.fill(0);
  }

  ~CudaBackend() override {
    cudaDeviceSynchronize();
    for (auto& [key, comm] : context_.comms) ncclCommDestroy(comm);
    if (context_.world_comm != nullptr) ncclCommDestroy(context_.world_comm);
    context_.gemm_runners.clear();
    context_.cudnn_attention.reset();
    for (void* pointer : context_.allocations) cudaFree(pointer);
    if (context_.init_stream != nullptr) cudaStreamDestroy(context_.init_stream);
  }

  const DeviceDescription& device() const override { return context_.device; }

  void connect(const graph::Graph& graph, int rank, Bootstrap& bootstrap) override {
    context_.graph = &graph;
    context_.rank = rank;
    context_.ops = graph::materialize(graph, rank);
    // World communicator from rank 0's unique id, then one split per (group kind, stream) pair that any
    // program uses, in the same order on every rank (the graph is identical everywhere).
    std::vector<std::byte> mine;
    if (rank == 0) {
      ncclUniqueId id{};
      CALO_NCCL(ncclGetUniqueId(&id));
      mine.resize(sizeof(id));
      std::memcpy(mine.data(), &id, sizeof(id));
    }
    const auto blobs = bootstrap.all_gather(mine);
    if (blobs.empty() || blobs[0].size() != sizeof(ncclUniqueId)) {
      throw RuntimeFailure(fmt::format("rank {}: no NCCL unique id from rank 0 over the {} bootstrap", rank,
                                       bootstrap.kind()));
    }
    ncclUniqueId world_id{};
    std::memcpy(&world_id, blobs[0].data(), sizeof(world_id));
    CALO_NCCL(ncclCommInitRank(&context_.world_comm, graph.world_size(), world_id, rank));
    std::set<std::pair<int, int>> used;  // (group kind, stream)
    for (const graph::RankProgram& program : graph.programs) {
      for (const graph::Op& op : program.ops) {
        if (op.kind == OpKind::kCollective)
          used.emplace(static_cast<int>(op.group), static_cast<int>(op.stream));
        if (graph::is_point_to_point(op.kind))  // pipeline or context-parallel ring
          used.emplace(static_cast<int>(op.group), static_cast<int>(op.stream));
        if (op.kind == OpKind::kGemm && op.gemm.weight == graph::GemmWeight::kExpertFc1 &&
            op.gemm.pass == graph::GemmPass::kForward && op.gemm.expert >= 0)
          context_.expert_tokens.emplace(op.gemm.expert, op.gemm.m);
      }
    }
    for (const auto& [kind, stream] : used) {
      const int group_id = graph.group_id(rank, static_cast<graph::GroupKind>(kind));
      ncclComm_t comm = nullptr;
      CALO_NCCL(ncclCommSplit(context_.world_comm, group_id >= 0 ? group_id : NCCL_SPLIT_NOCOLOR, rank, &comm,
                              nullptr));
      if (group_id < 0) continue;
      int size = 0;
      CALO_NCCL(ncclCommCount(comm, &size));
      const auto& group = graph.groups[static_cast<size_t>(group_id)];
      if (size != static_cast<int>(group.ranks.size())) {
        throw RuntimeFailure(fmt::format("rank {}: NCCL communicator of group {} has {} ranks, the graph {}",
                                         rank, group_id, size, group.ranks.size()));
      }
      context_.comms[{group_id, stream}] = comm;
    }
  }

  std::unique_ptr<Stream> create_stream(graph::Stream kind) override {
    auto stream = std::make_unique<CudaStream>(kind);
    streams_.push_back(stream->watch());
    return stream;
  }

  std::unique_ptr<Event> create_event(bool timing) override { return std::make_unique<CudaEvent>(timing); }

  std::unique_ptr<PreparedOp> prepare(const graph::RankOp& rank_op, int op_index) override {
    if (context_.graph == nullptr) throw std::logic_error("CudaBackend::prepare before connect");
    auto prepared = kOpUnits.prepare<CudaOp>(context_, rank_op, op_index);
    CALO_CUDA(cudaStreamSynchronize(context_.init_stream));
    return prepared;
  }

  void launch(PreparedOp& op, Stream& stream) override {
    auto& cuda_op = static_cast<CudaOp&>(op);
    auto& cuda_stream = static_cast<CudaStream&>(stream);
    const graph::Op& graph_op = cuda_op.rank_op.op;
    ++launched_[static_cast<size_t>(graph_op.kind)];
    if (graph::is_point_to_point(graph_op.kind)) {
      auto& pending = pending_p2p_[static_cast<int>(cuda_stream.kind())];
      pending.push_back(&cuda_op);
      if (!cuda_op.last_of_batch) return;
      cuda::post_p2p_batch(context_, pending, cuda_stream.handle());
      pending.clear();
      for (CudaEvent* event : pending_records_[static_cast<int>(cuda_stream.kind())])
        CALO_CUDA(cudaEventRecord(event->handle(), cuda_stream.handle()));
      pending_records_[static_cast<int>(cuda_stream.kind())].clear();
      return;
    }
    cuda_op.unit->run(context_, cuda_op, cuda_stream.handle());
  }

  void record(Event& event, Stream& stream) override {
    auto& cuda_stream = static_cast<CudaStream&>(stream);
    const int kind = static_cast<int>(cuda_stream.kind());
    if (!pending_p2p_[kind].empty()) {
      // Inside a p2p batch: the event must follow the whole batch.
      pending_records_[kind].push_back(&static_cast<CudaEvent&>(event));
      return;
    }
    CALO_CUDA(cudaEventRecord(static_cast<CudaEvent&>(event).handle(), cuda_stream.handle()));
  }

  void wait(Stream& stream, Event& event) override {
    CALO_CUDA(cudaStreamWaitEvent(static_cast<CudaStream&>(stream).handle(),
                                  static_cast<CudaEvent&>(event).handle(), 0));
  }

  void synchronize() override {
    for (const auto& pending : pending_p2p_) {
      if (!pending.second.empty())
        throw RuntimeFailure(
            fmt::format("rank {}: synchronize() inside an unfinished p2p batch", context_.rank));
    }
    // Poll so that a hung NCCL peer becomes an error (with the communicator's async error) instead of a hang.
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      bool busy = false;
      for (const auto& watched : streams_) {
        const auto handle = watched.lock();
        if (!handle) continue;
        const cudaError_t status = cudaStreamQuery(handle->stream);
        if (status == cudaErrorNotReady) {
          busy = true;
          break;
        }
        CALO_CUDA(status);
      }
      if (!busy) {
        const cudaError_t device_status = cudaDeviceSynchronize();
        CALO_CUDA(device_status);
        break;
      }
      cuda::check_nccl_async_errors(context_);
      const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited_s > sync_timeout_s_) {
        for (auto& [key, comm] : context_.comms) ncclCommAbort(comm);
        context_.comms.clear();
        throw RuntimeFailure(
            fmt::format("rank {}: GPU work did not finish within {} s (CALO_CUDA_SYNC_TIMEOUT_S); "
                        "NCCL communicators aborted",
                        context_.rank, sync_timeout_s_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(waited_s < 0.01 ? 2 : 50));
    }
    cuda::check_nccl_async_errors(context_);
    for (size_t kind = 0; kind < executed_.size(); ++kind) {
      executed_[kind] += launched_[kind];
      launched_[kind] = 0;
    }
    for (CudaOp* op : context_.check_queue) verify(*op);
    context_.check_queue.clear();
  }

  std::int64_t elapsed_ns(Event& from, Event& to) override {
    float milliseconds = 0;
    CALO_CUDA(cudaEventElapsedTime(&milliseconds, static_cast<CudaEvent&>(from).handle(),
                                   static_cast<CudaEvent&>(to).handle()));
    return static_cast<std::int64_t>(std::llround(static_cast<double>(milliseconds) * 1e6));
  }

  OpCounts executed_op_counts() const override { return executed_; }

  CheckReport check_report() const override { return context_.checks.report(); }

  std::int64_t allocated_bytes() const override { return context_.allocated_bytes; }

  void hold(std::int32_t slot, std::int64_t bytes, const std::string& what, Stream& stream) override {
    if (!holds_) holds_ = std::make_unique<cuda::DeviceHolds>(context_.device.local_index);
    holds_->hold(slot, bytes, what, context_.rank, context_.allocated_bytes,
                 static_cast<CudaStream&>(stream).handle());
  }

  void release(std::int32_t slot, Stream& stream) override {
    if (holds_) holds_->release(slot, static_cast<CudaStream&>(stream).handle());
  }

  HeldMemory held_memory() override { return {holds_ ? holds_->peak_bytes() : 0, cuda::device_used_bytes()}; }

 private:
  /// Verifies one op's --check snapshot (at synchronize(), after the GPU finished).
  void verify(CudaOp& op) {
    op.snapshot_pending = false;
    if (op.unit->verify != nullptr) op.unit->verify(context_, op);
  }

  CudaContext context_;
  double sync_timeout_s_ = 600.0;
  std::map<int, std::vector<CudaOp*>> pending_p2p_;
  std::map<int, std::vector<CudaEvent*>> pending_records_;
  std::vector<std::weak_ptr<StreamHandle>> streams_;
  OpCounts executed_{};
  OpCounts launched_{};
  std::unique_ptr<cuda::DeviceHolds> holds_;  // --memory real, created by the first hold
};

}  // namespace

double nominal_bf16_peak_flops(const std::string& device_name, std::string* source) {
  struct Entry {
    const char* pattern;
    double flops;
    const char* text;
  };
  static const Entry kTable[] = {
      {"H200", 989.4e12, "nominal H200 SXM bf16 dense (989.4 TFLOP/s)"},
      {"H100 PCIe", 756.0e12, "nominal H100 PCIe bf16 dense (756 TFLOP/s)"},
      {"H100 NVL", 835.0e12, "nominal H100 NVL bf16 dense (835 TFLOP/s)"},
      {"H100", 989.4e12, "nominal H100 SXM bf16 dense (989.4 TFLOP/s)"},
      {"GH200", 989.4e12, "nominal GH200 bf16 dense (989.4 TFLOP/s)"},
      {"B200", 2250.0e12, "nominal B200 bf16 dense (2250 TFLOP/s)"},
      {"A100", 312.0e12, "nominal A100 bf16 dense (312 TFLOP/s)"},
  };
  for (const Entry& entry : kTable) {
    if (device_name.find(entry.pattern) != std::string::npos) {
      if (source != nullptr) *source = entry.text;
      return entry.flops;
    }
  }
  return 0.0;
}

BackendFactory cuda_backend_factory() {
  BackendFactory factory;
  factory.name = "cuda";
  factory.auto_priority = kCudaAutoPriority;
  factory.context_parallel = kCudaContextParallel;  // K/V ring over the cp group's NCCL communicator
  factory.fp8_linears = kCudaFp8Linears;  // cuBLASLt e4m3 GEMMs (gemm.cpp) and the cast kernels (fp8.cu)
  factory.unavailable_reason = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      return fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
    }
    return count > 0 ? std::string() : std::string("no CUDA device visible");
  };
  factory.create = [](const BackendConfig& config) -> std::unique_ptr<Backend> {
    return std::make_unique<CudaBackend>(config);
  };
  factory.describe = [](int local_index, int /*local_world_size*/) { return describe_device(local_index); };
  factory.device_count = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return count;
  };
  return factory;
}

}  // namespace calo::exec
