// CUDA backend: device memory, kernels, cuBLASLt, NCCL communicators, streams/events and --check.
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
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "core/error.h"
#include "exec/all_to_all.h"
#include "exec/bootstrap.h"
#include "exec/cuda/activation.cuh"
#include "exec/cuda/adamw.cuh"
#include "exec/cuda/attention.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/init.cuh"
#include "exec/cuda/loss.cuh"
#include "exec/cuda/norm.cuh"
#include "exec/cuda/pointwise.cuh"
#include "exec/cuda/routing.cuh"
#include "exec/cuda/softmax.cuh"
#include "exec/verify.h"

namespace calo::exec {
namespace {

using cuda::bf16;
using graph::CollectiveKind;
using graph::ElementwiseKind;
using graph::OpKind;

float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value = 0;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

/// Values of a collective/p2p output block compared under --check (the first ones of every block).
constexpr std::int64_t kCheckBlockValues = 2048;

/// Owns a cudaStream_t; the backend watches it through a weak_ptr (the executor owns the Stream).
struct StreamHandle {
  cudaStream_t stream = nullptr;
  StreamHandle() { CALO_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  ~StreamHandle() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class CudaStream final : public Stream {
 public:
  explicit CudaStream(graph::Stream kind) : kind_(kind), handle_(std::make_shared<StreamHandle>()) {}
  graph::Stream kind() const override { return kind_; }
  cudaStream_t handle() const { return handle_->stream; }
  std::weak_ptr<StreamHandle> watch() const { return handle_; }

 private:
  graph::Stream kind_;
  std::shared_ptr<StreamHandle> handle_;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(bool timing) {
    CALO_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Pinned host memory for --check snapshots.
struct PinnedBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data != nullptr) cudaFreeHost(data);
  }
  void allocate(std::size_t size) {
    if (bytes >= size) return;
    if (data != nullptr) cudaFreeHost(data);
    data = nullptr;
    CALO_CUDA(cudaMallocHost(&data, size));
    bytes = size;
  }
  std::uint16_t* bf16_values() const { return static_cast<std::uint16_t*>(data); }
  float* float_values() const { return static_cast<float*>(data); }
};

/// A prepared op: the graph op, its device buffers and what its launch needs.
struct CudaOp final : PreparedOp {
  graph::RankOp rank_op;
  int index = 0;
  std::vector<void*> buffers;  // role-specific, see prepare()
  cuda::GemmCall gemm;
  std::int64_t rows = 0;
  std::int64_t width = 0;
  std::int64_t elements = 0;
  bool cudnn_attention = false;  // attention: cuDNN SDPA (else the cuBLASLt fallback)
  // Collectives and p2p.
  ncclComm_t comm = nullptr;
  std::vector<std::int32_t> group_ranks;
  std::int64_t group_index = 0;
  std::vector<std::int64_t> send_counts;  // all-to-all, elements per peer
  std::vector<std::int64_t> recv_counts;
  std::vector<std::int64_t> send_offsets;
  std::vector<std::int64_t> recv_offsets;
  std::vector<std::int64_t> peer_send_offset_to_me;
  int peer_in_comm = -1;      // send/recv: peer's rank in `comm`
  bool last_of_batch = true;  // send/recv: posts the pending batch
  // --check snapshots (pinned) and what to verify at synchronize().
  PinnedBuffer snapshot;
  std::vector<std::pair<std::int64_t, std::int64_t>> snapshot_ranges;  // (offset, count) of output values
  std::array<std::int64_t, 16> spots{};                                // GEMM (row, col) pairs / optimizer
  bool snapshot_pending = false;
};

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

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendConfig& config) : config_(config) {
    cuda::set_cuda_error_rank(config.rank);
    device_ = describe_device(config.local_rank);
    CALO_CUDA(cudaSetDevice(device_.local_index));
    CALO_CUDA(cudaStreamCreateWithFlags(&init_stream_, cudaStreamNonBlocking));
    const char* fault = std::getenv("CALO_CUDA_INJECT_FAULT");
    inject_fault_ = fault != nullptr ? fault : "";
    attention_mode_ = cuda::attention_mode_from_env();
    const char* timeout = std::getenv("CALO_CUDA_SYNC_TIMEOUT_S");
    if (timeout != nullptr) sync_timeout_s_ = std::max(1.0, std::atof(timeout));
    executed_.fill(0);
    launched_.fill(0);
  }

  ~CudaBackend() override {
    cudaDeviceSynchronize();
    for (auto& [key, comm] : comms_) ncclCommDestroy(comm);
    if (world_comm_ != nullptr) ncclCommDestroy(world_comm_);
    gemm_runners_.clear();
    cudnn_attention_.reset();
    for (void* pointer : allocations_) cudaFree(pointer);
    if (init_stream_ != nullptr) cudaStreamDestroy(init_stream_);
  }

  const DeviceDescription& device() const override { return device_; }

  void connect(const graph::Graph& graph, int rank, Bootstrap& bootstrap) override {
    graph_ = &graph;
    rank_ = rank;
    ops_ = graph::materialize(graph, rank);
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
    CALO_NCCL(ncclCommInitRank(&world_comm_, graph.world_size(), world_id, rank));
    std::set<std::pair<int, int>> used;  // (group kind, stream)
    for (const graph::RankProgram& program : graph.programs) {
      for (const graph::Op& op : program.ops) {
        if (op.kind == OpKind::kCollective)
          used.emplace(static_cast<int>(op.group), static_cast<int>(op.stream));
        if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv)  // pipeline or context-parallel ring
          used.emplace(static_cast<int>(op.group), static_cast<int>(op.stream));
        if (op.kind == OpKind::kGemm && op.gemm.weight == graph::GemmWeight::kExpertFc1 &&
            op.gemm.pass == graph::GemmPass::kForward && op.gemm.expert >= 0)
          expert_tokens_.emplace(op.gemm.expert, op.gemm.m);
      }
    }
    for (const auto& [kind, stream] : used) {
      const int group_id = graph.group_id(rank, static_cast<graph::GroupKind>(kind));
      ncclComm_t comm = nullptr;
      CALO_NCCL(
          ncclCommSplit(world_comm_, group_id >= 0 ? group_id : NCCL_SPLIT_NOCOLOR, rank, &comm, nullptr));
      if (group_id < 0) continue;
      int size = 0;
      CALO_NCCL(ncclCommCount(comm, &size));
      const auto& group = graph.groups[static_cast<size_t>(group_id)];
      if (size != static_cast<int>(group.ranks.size())) {
        throw RuntimeFailure(fmt::format("rank {}: NCCL communicator of group {} has {} ranks, the graph {}",
                                         rank, group_id, size, group.ranks.size()));
      }
      comms_[{group_id, stream}] = comm;
    }
  }

  std::unique_ptr<Stream> create_stream(graph::Stream kind) override {
    auto stream = std::make_unique<CudaStream>(kind);
    streams_.push_back(stream->watch());
    return stream;
  }

  std::unique_ptr<Event> create_event(bool timing) override { return std::make_unique<CudaEvent>(timing); }

  std::unique_ptr<PreparedOp> prepare(const graph::RankOp& rank_op, int op_index) override {
    if (graph_ == nullptr) throw std::logic_error("CudaBackend::prepare before connect");
    auto prepared = std::make_unique<CudaOp>();
    prepared->rank_op = rank_op;
    prepared->index = op_index;
    const graph::Op& op = rank_op.op;
    const std::uint64_t seed =
        config_.seed ^ (static_cast<std::uint64_t>(rank_) << 40) ^ static_cast<std::uint64_t>(op_index);
    const std::int64_t hidden = std::max(1, graph_->model.hidden_size);
    switch (op.kind) {
      case OpKind::kGemm: {
        const auto& shape = op.gemm;
        prepared->gemm = cuda::gemm_call_for(shape);
        prepared->buffers = {shared("gemm.a", shape.batch * shape.m * shape.k, seed),
                             shared("gemm.b", shape.batch * shape.k * shape.n, seed + 1),
                             shared("gemm.c", shape.batch * shape.m * shape.n, seed + 2)};
        break;
      }
      case OpKind::kAttention:
        prepare_attention(*prepared, seed);
        break;
      case OpKind::kElementwise:
        prepare_elementwise(*prepared, seed, hidden);
        break;
      case OpKind::kCollective:
        prepare_collective(*prepared, seed);
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        prepare_point_to_point(*prepared, seed);
        break;
      case OpKind::kOptimizer: {
        const auto count = std::max<std::int64_t>(1, static_cast<std::int64_t>(op.parameters));
        prepared->elements = count;
        prepared->buffers = {shared_f32("adam.param", count, seed, 1.0f, false),
                             shared_f32("adam.grad", count, seed + 1, 1e-3f, false),
                             shared_f32("adam.m", count, seed + 2, 1e-3f, false),
                             shared_f32("adam.v", count, seed + 3, 1e-6f, true)};
        break;
      }
    }
    CALO_CUDA(cudaStreamSynchronize(init_stream_));
    return prepared;
  }

  void launch(PreparedOp& op, Stream& stream) override {
    auto& cuda_op = static_cast<CudaOp&>(op);
    auto& cuda_stream = static_cast<CudaStream&>(stream);
    const graph::Op& graph_op = cuda_op.rank_op.op;
    ++launched_[static_cast<size_t>(graph_op.kind)];
    if (graph_op.kind == OpKind::kSend || graph_op.kind == OpKind::kRecv) {
      auto& pending = pending_p2p_[static_cast<int>(cuda_stream.kind())];
      pending.push_back(&cuda_op);
      if (!cuda_op.last_of_batch) return;
      post_p2p_batch(pending, cuda_stream);
      pending.clear();
      for (CudaEvent* event : pending_records_[static_cast<int>(cuda_stream.kind())])
        CALO_CUDA(cudaEventRecord(event->handle(), cuda_stream.handle()));
      pending_records_[static_cast<int>(cuda_stream.kind())].clear();
      return;
    }
    run(cuda_op, cuda_stream.handle());
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
        throw RuntimeFailure(fmt::format("rank {}: synchronize() inside an unfinished p2p batch", rank_));
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
      check_nccl_async_errors();
      const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited_s > sync_timeout_s_) {
        for (auto& [key, comm] : comms_) ncclCommAbort(comm);
        comms_.clear();
        throw RuntimeFailure(
            fmt::format("rank {}: GPU work did not finish within {} s (CALO_CUDA_SYNC_TIMEOUT_S); "
                        "NCCL communicators aborted",
                        rank_, sync_timeout_s_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(waited_s < 0.01 ? 2 : 50));
    }
    check_nccl_async_errors();
    for (size_t kind = 0; kind < executed_.size(); ++kind) {
      executed_[kind] += launched_[kind];
      launched_[kind] = 0;
    }
    for (CudaOp* op : check_queue_) verify(*op);
    check_queue_.clear();
  }

  std::int64_t elapsed_ns(Event& from, Event& to) override {
    float milliseconds = 0;
    CALO_CUDA(cudaEventElapsedTime(&milliseconds, static_cast<CudaEvent&>(from).handle(),
                                   static_cast<CudaEvent&>(to).handle()));
    return static_cast<std::int64_t>(std::llround(static_cast<double>(milliseconds) * 1e6));
  }

  OpCounts executed_op_counts() const override { return executed_; }

  CheckReport check_report() const override { return checks_.report(); }

  std::int64_t allocated_bytes() const override { return allocated_bytes_; }

 private:
  // ---- memory ----
  void* allocate(std::size_t bytes, const std::string& role) {
    void* pointer = nullptr;
    const cudaError_t status = cudaMalloc(&pointer, std::max<std::size_t>(bytes, 256));
    if (status != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_bytes = 0;
      std::size_t total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      throw RuntimeFailure(fmt::format(
          "rank {}: out of GPU memory allocating {:.3f} GiB for {} ({} GiB allocated by "
          "calo, {:.3f} GiB free of {:.3f}); use more tp/pp or a smaller slice",
          rank_, static_cast<double>(bytes) / 1073741824.0, role,
          static_cast<double>(allocated_bytes_) / 1073741824.0,
          static_cast<double>(free_bytes) / 1073741824.0, static_cast<double>(total_bytes) / 1073741824.0));
    }
    allocations_.push_back(pointer);
    allocated_bytes_ += static_cast<std::int64_t>(bytes);
    return pointer;
  }

  /// A bf16 buffer of `values` shared by every op with the same role and size (random, never zero).
  void* shared(const std::string& role, std::int64_t values, std::uint64_t seed, float scale = 1.0f) {
    values = std::max<std::int64_t>(values, 1);
    auto& slot = scratch_[{role, values}];
    if (slot == nullptr) {
      slot = allocate(static_cast<std::size_t>(values) * sizeof(bf16), role);
      cuda::fill_random_bf16(static_cast<bf16*>(slot), values, seed, scale, init_stream_);
      CALO_CUDA_LAUNCH();
    }
    return slot;
  }

  /// An fp32 buffer shared like shared().
  void* shared_f32(const std::string& role, std::int64_t values, std::uint64_t seed, float scale,
                   bool positive) {
    values = std::max<std::int64_t>(values, 1);
    auto& slot = scratch_[{role, values}];
    if (slot == nullptr) {
      slot = allocate(static_cast<std::size_t>(values) * sizeof(float), role);
      cuda::fill_random_f32(static_cast<float*>(slot), values, seed, scale, positive, init_stream_);
      CALO_CUDA_LAUNCH();
    }
    return slot;
  }

  /// An int32 index buffer in [0, modulo), shared like shared().
  void* shared_indices(const std::string& role, std::int64_t values, std::uint64_t seed,
                       std::int32_t modulo) {
    values = std::max<std::int64_t>(values, 1);
    auto& slot = scratch_[{role + fmt::format("/{}", modulo), values}];
    if (slot == nullptr) {
      slot = allocate(static_cast<std::size_t>(values) * sizeof(std::int32_t), role);
      cuda::fill_indices(static_cast<std::int32_t*>(slot), values, seed, modulo, init_stream_);
      CALO_CUDA_LAUNCH();
    }
    return slot;
  }

  cuda::GemmRunner& gemm_runner(cudaStream_t stream) {
    auto& runner = gemm_runners_[stream];
    if (!runner) runner = std::make_unique<cuda::GemmRunner>();
    return *runner;
  }

  bool inject(const char* kind) const { return inject_fault_ == kind; }

  /// Overwrites one bf16 output value (fault injection for --check tests).
  void corrupt(void* device_value, cudaStream_t stream) {
    static const std::uint16_t kBad = 0x4640;  // 12288.0 in bf16
    CALO_CUDA(cudaMemcpyAsync(device_value, &kBad, sizeof(kBad), cudaMemcpyHostToDevice, stream));
  }

  // ---- prepare helpers ----
  /// Attention buffers [q, k, v, o, scores, dscores, d_out, d_q, d_k, d_v, stats]: the cuDNN path needs the
  /// fp32 stats (log-sum-exp) and a workspace per stream, the fallback the score blocks
  /// (docs/EXECUTION_CUDA.md).
  void prepare_attention(CudaOp& prepared, std::uint64_t seed) {
    const auto& shape = prepared.rank_op.op.attention;
    const std::int64_t q_values = cuda::attention_query_values(shape);
    const std::int64_t kv_values = cuda::attention_key_values(shape);
    prepared.cudnn_attention = choose_cudnn_attention(shape);
    prepared.buffers.assign(11, nullptr);
    prepared.buffers[0] = shared("attn.q", q_values, seed);
    prepared.buffers[1] = shared("attn.k", kv_values, seed + 1);
    prepared.buffers[2] = shared("attn.v", kv_values, seed + 2);
    prepared.buffers[3] = shared("attn.o", q_values, seed + 3);
    if (shape.backward) {
      prepared.buffers[6] = shared("attn.do", q_values, seed + 6);
      prepared.buffers[7] = shared("attn.dq", q_values, seed + 7);
      prepared.buffers[8] = shared("attn.dk", kv_values, seed + 8);
      prepared.buffers[9] = shared("attn.dv", kv_values, seed + 9);
    }
    if (prepared.cudnn_attention) {
      // Shared by (role, size) like o: the forward of a shape writes it, the backward of that shape reads it.
      prepared.buffers[10] =
          shared_f32("attn.stats", cuda::attention_stats_values(shape), seed + 10, 1.0f, false);
      reserve_attention_workspace(prepared.rank_op.op.stream, cudnn_attention_->workspace_bytes(shape));
    } else {
      const std::int64_t score_values = cuda::attention_score_block_values(shape);
      prepared.buffers[4] = shared("attn.scores", score_values, seed + 4);
      if (shape.backward) prepared.buffers[5] = shared("attn.dscores", score_values, seed + 5);
    }
    ++(prepared.cudnn_attention ? attention_ops_cudnn_ : attention_ops_fallback_);
    device_.attention_impl =
        attention_ops_cudnn_ > 0 && attention_ops_fallback_ > 0
            ? fmt::format("{}+{}", cuda::kAttentionImplCudnn, cuda::kAttentionImplFallback)
        : attention_ops_cudnn_ > 0 ? cuda::kAttentionImplCudnn
                                   : cuda::kAttentionImplFallback;
  }

  /// Whether `shape` runs on cuDNN SDPA under CALO_ATTENTION; logs (rank 0, once) why not when it falls back.
  bool choose_cudnn_attention(const graph::AttentionShape& shape) {
    std::string why;
    if (attention_mode_ == cuda::AttentionMode::kFallback) {
      why = "CALO_ATTENTION=fallback";
    } else {
      if (!cudnn_attention_) cudnn_attention_ = std::make_unique<cuda::CudnnAttention>();
      why = cudnn_attention_->prepare(shape);
      if (why.empty()) return true;
      if (attention_mode_ == cuda::AttentionMode::kCudnn)
        throw RuntimeFailure(fmt::format("rank {}: CALO_ATTENTION=cudnn but cuDNN SDPA cannot run {}: {}",
                                         rank_, cuda::describe_attention_shape(shape), why));
      why =
          fmt::format("cuDNN SDPA unsupported for shape {}: {}", cuda::describe_attention_shape(shape), why);
    }
    if (!attention_fallback_logged_ && rank_ == 0)
      fmt::print(stderr, "calo: attention: {}; using the cuBLASLt fallback\n", why);
    attention_fallback_logged_ = true;
    return false;
  }

  /// Grows the cuDNN attention workspace of graph stream `kind` to at least `bytes` (prepare only: nothing
  /// runs).
  void reserve_attention_workspace(graph::Stream kind, std::int64_t bytes) {
    auto& [pointer, size] = attention_workspace_[static_cast<int>(kind)];
    if (bytes <= size) return;
    if (pointer != nullptr) {
      CALO_CUDA(cudaFree(pointer));
      allocations_.erase(std::find(allocations_.begin(), allocations_.end(), pointer));
      allocated_bytes_ -= size;
    }
    pointer = allocate(static_cast<std::size_t>(bytes), "attn.workspace");
    size = bytes;
  }

  void prepare_elementwise(CudaOp& prepared, std::uint64_t seed, std::int64_t hidden) {
    const graph::Op& op = prepared.rank_op.op;
    const auto kind = op.elementwise;
    const int tp = std::max(1, graph_->layout.tp);
    auto rows_of = [](std::int64_t values, std::int64_t width) {
      return std::max<std::int64_t>(1, values / width);
    };
    switch (kind) {
      case ElementwiseKind::kNorm: {  // reads x, writes y: bytes = 4 per value
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
        prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
        prepared.rows = rows_of(values, prepared.width);
        const std::int64_t count = prepared.rows * prepared.width;
        prepared.buffers = {shared("norm.in", count, seed), shared("norm.out", count, seed + 1),
                            shared("norm.weight", prepared.width, seed + 2)};
        break;
      }
      case ElementwiseKind::kActivation: {  // reads gate+up, writes out: bytes = 6 per output value
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 6.0);
        prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
        prepared.rows = rows_of(values, prepared.width);
        prepared.buffers = {shared("act.in", 2 * prepared.rows * prepared.width, seed),
                            shared("act.out", prepared.rows * prepared.width, seed + 1)};
        break;
      }
      case ElementwiseKind::kRope: {  // reads and writes q/k rows of head_dim
        const std::int64_t head_dim = std::max(2, graph_->model.head_dim > 0 ? graph_->model.head_dim : 128);
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
        prepared.width = head_dim;
        prepared.rows = rows_of(values, head_dim);
        const std::int64_t count = prepared.rows * head_dim;
        prepared.buffers = {shared("rope.in", count, seed), shared("rope.out", count, seed + 1)};
        break;
      }
      case ElementwiseKind::kResidualAdd: {  // reads a and b, writes out: 6 bytes per value
        prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(op.bytes / 6.0));
        prepared.buffers = {shared("residual.a", prepared.elements, seed),
                            shared("residual.b", prepared.elements, seed + 1),
                            shared("residual.out", prepared.elements, seed + 2)};
        break;
      }
      case ElementwiseKind::kEmbedding: {  // gathers rows of the table: 4 bytes per value
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
        prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
        prepared.rows = rows_of(values, prepared.width);
        const std::int64_t table_rows =
            std::max<std::int64_t>(1, std::min<std::int64_t>(32768, graph_->model.vocab_size / tp));
        prepared.elements = table_rows;
        prepared.buffers = {shared("embedding.table", table_rows * prepared.width, seed),
                            shared_indices("embedding.tokens", prepared.rows, seed + 1,
                                           static_cast<std::int32_t>(table_rows)),
                            shared("embedding.out", prepared.rows * prepared.width, seed + 2)};
        break;
      }
      case ElementwiseKind::kCrossEntropy: {  // reads logits, writes their gradient
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
        const std::int64_t vocab_part = std::max<std::int64_t>(1, graph_->model.vocab_size / tp);
        prepared.width = std::min(vocab_part, std::max<std::int64_t>(1, values));
        prepared.rows = rows_of(values, prepared.width);
        const std::int64_t count = prepared.rows * prepared.width;
        prepared.buffers = {
            shared("ce.logits", count, seed),
            shared_indices("ce.targets", prepared.rows, seed + 1,
                           static_cast<std::int32_t>(std::min<std::int64_t>(prepared.width, 1 << 30))),
            shared("ce.grad", count, seed + 2), shared_f32("ce.loss", prepared.rows, seed + 3, 1.0f, true)};
        break;
      }
      case ElementwiseKind::kSoftmax: {  // unfused attention: rows of s scores per (sequence, head)
        const auto& shape = op.attention;
        const std::int64_t matrices = std::int64_t{shape.batch} * shape.heads;
        const std::int64_t scores = matrices * shape.seq * shape.seq;
        prepared.rows = matrices;
        prepared.width = shape.seq;
        prepared.buffers = {shared("softmax.scores", scores, seed)};
        device_.attention_impl = cuda::kAttentionImplUnfused;
        if (shape.backward) {
          const std::int64_t rows = matrices * shape.seq * shape.head_dim;
          prepared.buffers.push_back(shared("softmax.dprob", scores, seed + 1));
          prepared.buffers.push_back(shared("softmax.dout", rows, seed + 2));
          prepared.buffers.push_back(shared("softmax.out", rows, seed + 3));
        }
        break;
      }
      case ElementwiseKind::kRouting: {  // top-k and permuted copy of token rows
        const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
        prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
        prepared.rows = rows_of(values, prepared.width);
        const std::int64_t experts = std::max(1, graph_->model.num_experts);
        prepared.elements = experts;
        prepared.buffers = {shared("routing.in", prepared.rows * prepared.width, seed),
                            shared("routing.logits", prepared.rows * experts, seed + 1),
                            shared("routing.out", prepared.rows * prepared.width, seed + 2)};
        break;
      }
    }
  }

  void prepare_collective(CudaOp& prepared, std::uint64_t seed) {
    const graph::Op& op = prepared.rank_op.op;
    const auto& group = graph_->groups.at(static_cast<size_t>(prepared.rank_op.group_id));
    prepared.group_ranks = group.ranks;
    prepared.group_index = std::find(group.ranks.begin(), group.ranks.end(), rank_) - group.ranks.begin();
    const auto found = comms_.find({prepared.rank_op.group_id, static_cast<int>(op.stream)});
    if (found == comms_.end()) {
      throw RuntimeFailure(fmt::format("rank {}: no NCCL communicator for group {} on stream {} (op {})",
                                       rank_, prepared.rank_op.group_id, graph::to_string(op.stream),
                                       prepared.index));
    }
    prepared.comm = found->second;
    const auto members = static_cast<std::int64_t>(group.ranks.size());
    // Buffers are shared per stream only: collectives of different streams may run at the same time.
    const std::string send_role = fmt::format("coll.send.{}", graph::to_string(op.stream));
    const std::string recv_role = fmt::format("coll.recv.{}", graph::to_string(op.stream));
    const std::int64_t total =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 2.0)));
    const std::int64_t per_rank = std::max<std::int64_t>(1, (total + members - 1) / members);
    switch (op.collective) {
      case CollectiveKind::kAllReduce:
        prepared.elements = total;
        prepared.buffers = {shared(send_role, total, seed), shared(recv_role, total, seed + 1)};
        break;
      case CollectiveKind::kAllGather:
        prepared.elements = per_rank;
        prepared.buffers = {shared(send_role, per_rank, seed),
                            shared(recv_role, per_rank * members, seed + 1)};
        break;
      case CollectiveKind::kReduceScatter:
        prepared.elements = per_rank;
        prepared.buffers = {shared(send_role, per_rank * members, seed),
                            shared(recv_role, per_rank, seed + 1)};
        break;
      case CollectiveKind::kAllToAll:
        prepare_all_to_all(prepared, seed);
        break;
    }
  }

  /// All-to-all counts (bf16 rows of hidden_size): expert-parallel dispatch/combine follow the graph's tokens
  /// per expert (dispatch sends rows[d] to each owner d, combine returns them), else equal blocks.
  void prepare_all_to_all(CudaOp& prepared, std::uint64_t seed) {
    const graph::Op& op = prepared.rank_op.op;
    const auto members = static_cast<std::int64_t>(prepared.group_ranks.size());
    const std::int64_t me = prepared.group_index;
    const std::int64_t row_values = std::max(1, graph_->model.hidden_size);
    const std::int64_t rows_total =
        std::max<std::int64_t>(members, std::llround(op.bytes / (2.0 * row_values)));
    const AllToAllSplit split = split_all_to_all(rows_total, members, op.group == graph::GroupKind::kEp,
                                                 graph_->model.num_experts, expert_tokens_);
    const bool expert_parallel = split.expert_parallel;
    const std::vector<std::int64_t>& rows = split.rows;
    const bool combine = expert_parallel && (all_to_all_seen_[op.stream]++ % 2 == 1);
    prepared.send_counts.assign(static_cast<size_t>(members), 0);
    prepared.recv_counts.assign(static_cast<size_t>(members), 0);
    prepared.send_offsets.assign(static_cast<size_t>(members), 0);
    prepared.recv_offsets.assign(static_cast<size_t>(members), 0);
    prepared.peer_send_offset_to_me.assign(static_cast<size_t>(members), 0);
    std::int64_t send_total = 0;
    std::int64_t recv_total = 0;
    for (std::int64_t peer = 0; peer < members; ++peer) {
      const auto index = static_cast<size_t>(peer);
      const std::int64_t send_rows = combine ? rows[static_cast<size_t>(me)] : rows[index];
      const std::int64_t recv_rows = combine ? rows[index] : rows[static_cast<size_t>(me)];
      prepared.send_counts[index] = send_rows * row_values;
      prepared.recv_counts[index] = recv_rows * row_values;
      prepared.send_offsets[index] = send_total;
      prepared.recv_offsets[index] = recv_total;
      send_total += prepared.send_counts[index];
      recv_total += prepared.recv_counts[index];
      std::int64_t offset_rows = 0;
      if (combine) {
        offset_rows = me * rows[index];
      } else {
        for (std::int64_t before = 0; before < me; ++before) offset_rows += rows[static_cast<size_t>(before)];
      }
      prepared.peer_send_offset_to_me[index] = offset_rows * row_values;
    }
    prepared.elements = send_total;
    const std::string send_role = fmt::format("coll.send.{}", graph::to_string(op.stream));
    const std::string recv_role = fmt::format("coll.recv.{}", graph::to_string(op.stream));
    prepared.buffers = {shared(send_role, send_total, seed), shared(recv_role, recv_total, seed + 1)};
  }

  void prepare_point_to_point(CudaOp& prepared, std::uint64_t seed) {
    const graph::Op& op = prepared.rank_op.op;
    // Pipeline messages go over the pp group's communicator, context-parallel ring steps over the cp group's.
    const int group_id = graph_->group_id(rank_, op.group);
    const auto found = comms_.find({group_id, static_cast<int>(op.stream)});
    if (group_id < 0 || found == comms_.end())
      throw RuntimeFailure(fmt::format("rank {}: send/recv op {} without a {} communicator", rank_,
                                       prepared.index, graph::to_string(op.group)));
    prepared.comm = found->second;
    const auto& ranks = graph_->groups[static_cast<size_t>(group_id)].ranks;
    const auto peer = std::find(ranks.begin(), ranks.end(), prepared.rank_op.peer_rank);
    if (peer == ranks.end()) {
      throw RuntimeFailure(fmt::format("rank {}: peer {} of op {} is not in the {} group", rank_,
                                       prepared.rank_op.peer_rank, prepared.index,
                                       graph::to_string(op.group)));
    }
    prepared.peer_in_comm = static_cast<int>(peer - ranks.begin());
    prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(op.bytes / 2.0)));
    // Ops of one batch run concurrently: each position in a batch gets its own buffer.
    int position = 0;
    for (auto before = static_cast<size_t>(prepared.index); before > 0; --before) {
      const graph::Op& earlier = ops_[before - 1].op;
      if (op.p2p_batch < 0 || earlier.p2p_batch != op.p2p_batch ||
          (earlier.kind != OpKind::kSend && earlier.kind != OpKind::kRecv))
        break;
      ++position;
    }
    prepared.buffers = {shared(fmt::format("p2p.{}.{}", op.kind == OpKind::kSend ? "send" : "recv", position),
                               prepared.elements, seed)};
    // Ops of one batch are consecutive in issue order; the last one posts the batch.
    const auto next = static_cast<size_t>(prepared.index) + 1;
    prepared.last_of_batch = true;
    if (op.p2p_batch >= 0 && next < ops_.size()) {
      const graph::Op& following = ops_[next].op;
      prepared.last_of_batch = !((following.kind == OpKind::kSend || following.kind == OpKind::kRecv) &&
                                 following.p2p_batch == op.p2p_batch && following.stream == op.stream);
    }
  }

  // ---- launch ----
  void run(CudaOp& prepared, cudaStream_t stream) {
    const graph::Op& op = prepared.rank_op.op;
    switch (op.kind) {
      case OpKind::kGemm:
        if (config_.check) snapshot_gemm_inputs(prepared);
        gemm_runner(stream).run(prepared.gemm, prepared.buffers[0], prepared.buffers[1], prepared.buffers[2],
                                stream);
        if (inject("gemm")) corrupt(prepared.buffers[2], stream);
        if (config_.check) snapshot_gemm(prepared, stream);
        break;
      case OpKind::kAttention: {
        cuda::AttentionBuffers buffers;
        buffers.q = static_cast<const bf16*>(prepared.buffers[0]);
        buffers.k = static_cast<const bf16*>(prepared.buffers[1]);
        buffers.v = static_cast<const bf16*>(prepared.buffers[2]);
        buffers.o = static_cast<bf16*>(prepared.buffers[3]);
        buffers.scores = static_cast<bf16*>(prepared.buffers[4]);
        buffers.dscores = static_cast<bf16*>(prepared.buffers[5]);
        buffers.d_out = static_cast<const bf16*>(prepared.buffers[6]);
        buffers.d_q = static_cast<bf16*>(prepared.buffers[7]);
        buffers.d_k = static_cast<bf16*>(prepared.buffers[8]);
        buffers.d_v = static_cast<bf16*>(prepared.buffers[9]);
        buffers.stats = static_cast<float*>(prepared.buffers[10]);
        if (prepared.cudnn_attention) {
          cudnn_attention_->run(op.attention, buffers,
                                attention_workspace_[static_cast<int>(op.stream)].first, stream);
        } else {
          cuda::run_attention(gemm_runner(stream), op.attention, buffers, stream);
        }
        if (!op.attention.backward) {
          if (inject("attention")) corrupt(attention_checked_row(prepared), stream);
          if (config_.check) snapshot_attention(prepared, stream);
        }
        break;
      }
      case OpKind::kElementwise:
        run_elementwise(prepared, stream);
        break;
      case OpKind::kCollective:
        run_collective(prepared, stream);
        break;
      case OpKind::kOptimizer: {
        auto* param = static_cast<float*>(prepared.buffers[0]);
        if (config_.check) snapshot_optimizer_before(prepared, stream);
        cuda::adamw_step(param, static_cast<const float*>(prepared.buffers[1]),
                         static_cast<float*>(prepared.buffers[2]), static_cast<float*>(prepared.buffers[3]),
                         prepared.elements, cuda::AdamWConfig{}, stream);
        CALO_CUDA_LAUNCH();
        if (inject("optimizer")) {
          static const float kBad = 12345.0f;
          CALO_CUDA(cudaMemcpyAsync(param, &kBad, sizeof(kBad), cudaMemcpyHostToDevice, stream));
        }
        if (config_.check) snapshot_optimizer_after(prepared, stream);
        break;
      }
      case OpKind::kSend:
      case OpKind::kRecv:
        break;  // posted by post_p2p_batch
    }
  }

  void run_elementwise(CudaOp& prepared, cudaStream_t stream) {
    const auto& buffers = prepared.buffers;
    auto bf = [&](size_t at) { return static_cast<bf16*>(buffers[at]); };
    switch (prepared.rank_op.op.elementwise) {
      case ElementwiseKind::kNorm:
        cuda::rms_norm(bf(0), bf(2), bf(1), prepared.rows, prepared.width, stream);
        break;
      case ElementwiseKind::kActivation:
        cuda::swiglu(bf(0), bf(1), prepared.rows, prepared.width, stream);
        break;
      case ElementwiseKind::kRope:
        cuda::rope(bf(0), bf(1), prepared.rows, prepared.width, std::max(1, graph_->model.seq_length),
                   stream);
        break;
      case ElementwiseKind::kResidualAdd:
        cuda::residual_add(bf(0), bf(1), bf(2), prepared.elements, stream);
        break;
      case ElementwiseKind::kEmbedding:
        cuda::embedding_gather(bf(0), static_cast<const std::int32_t*>(buffers[1]), bf(2), prepared.rows,
                               prepared.width, stream);
        break;
      case ElementwiseKind::kCrossEntropy:
        cuda::cross_entropy(bf(0), static_cast<const std::int32_t*>(buffers[1]), bf(2),
                            static_cast<float*>(buffers[3]), prepared.rows, prepared.width, stream);
        break;
      case ElementwiseKind::kSoftmax: {
        const auto& shape = prepared.rank_op.op.attention;
        cuda::ScoreBlock block;
        block.batch = prepared.rows;
        block.batch_stride = std::int64_t{shape.seq} * shape.seq;
        block.rows = block.columns = block.ld = shape.seq;
        block.causal = shape.causal;
        if (!shape.backward) {
          cuda::causal_softmax(bf(0), block, stream);
        } else {
          cuda::softmax_backward(bf(0), bf(1), bf(2), bf(3), std::int64_t{shape.seq} * shape.head_dim,
                                 shape.head_dim, 1.0f / std::sqrt(static_cast<float>(shape.head_dim)), block,
                                 stream);
        }
        break;
      }
      case ElementwiseKind::kRouting:
        cuda::route_tokens(bf(0), bf(1), bf(2), prepared.rows, prepared.width,
                           static_cast<int>(prepared.elements), std::max(1, graph_->model.moe_top_k), stream);
        break;
    }
    CALO_CUDA_LAUNCH();
    const auto kind = prepared.rank_op.op.elementwise;
    if (inject("elementwise") && kind == ElementwiseKind::kResidualAdd) corrupt(buffers[2], stream);
    if (config_.check && (kind == ElementwiseKind::kResidualAdd || kind == ElementwiseKind::kActivation ||
                          kind == ElementwiseKind::kNorm)) {
      snapshot_elementwise(prepared, stream);
    }
  }

  void run_collective(CudaOp& prepared, cudaStream_t stream) {
    const graph::Op& op = prepared.rank_op.op;
    auto* send = static_cast<bf16*>(prepared.buffers[0]);
    auto* recv = static_cast<bf16*>(prepared.buffers[1]);
    const auto members = static_cast<std::int64_t>(prepared.group_ranks.size());
    const int me_global = prepared.group_ranks[static_cast<size_t>(prepared.group_index)];
    const std::int64_t send_values = op.collective == CollectiveKind::kAllToAll ? prepared.elements
                                     : op.collective == CollectiveKind::kReduceScatter
                                         ? prepared.elements * members
                                         : prepared.elements;
    if (config_.check) {
      cuda::fill_check_bf16(send, send_values, me_global, 0, stream);
      CALO_CUDA_LAUNCH();
    }
    const auto count = static_cast<std::size_t>(prepared.elements);
    switch (op.collective) {
      case CollectiveKind::kAllReduce:
        CALO_NCCL(ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, prepared.comm, stream));
        break;
      case CollectiveKind::kAllGather:
        CALO_NCCL(ncclAllGather(send, recv, count, ncclBfloat16, prepared.comm, stream));
        break;
      case CollectiveKind::kReduceScatter:
        CALO_NCCL(ncclReduceScatter(send, recv, count, ncclBfloat16, ncclSum, prepared.comm, stream));
        break;
      case CollectiveKind::kAllToAll:
        CALO_NCCL(ncclGroupStart());
        for (std::int64_t peer = 0; peer < members; ++peer) {
          const auto index = static_cast<size_t>(peer);
          CALO_NCCL(ncclSend(send + prepared.send_offsets[index],
                             static_cast<std::size_t>(prepared.send_counts[index]), ncclBfloat16,
                             static_cast<int>(peer), prepared.comm, stream));
          CALO_NCCL(ncclRecv(recv + prepared.recv_offsets[index],
                             static_cast<std::size_t>(prepared.recv_counts[index]), ncclBfloat16,
                             static_cast<int>(peer), prepared.comm, stream));
        }
        CALO_NCCL(ncclGroupEnd());
        break;
    }
    if (inject("collective")) corrupt(recv, stream);
    if (config_.check) snapshot_collective(prepared, stream);
  }

  void post_p2p_batch(const std::vector<CudaOp*>& batch, CudaStream& stream) {
    if (config_.check) {
      for (CudaOp* op : batch) {
        if (op->rank_op.op.kind != OpKind::kSend) continue;
        cuda::fill_check_bf16(static_cast<bf16*>(op->buffers[0]), op->elements, rank_, op->rank_op.op.tag,
                              stream.handle());
        CALO_CUDA_LAUNCH();
      }
    }
    CALO_NCCL(ncclGroupStart());
    for (CudaOp* op : batch) {
      if (op->rank_op.op.kind == OpKind::kSend) {
        CALO_NCCL(ncclSend(op->buffers[0], static_cast<std::size_t>(op->elements), ncclBfloat16,
                           op->peer_in_comm, op->comm, stream.handle()));
      } else {
        CALO_NCCL(ncclRecv(op->buffers[0], static_cast<std::size_t>(op->elements), ncclBfloat16,
                           op->peer_in_comm, op->comm, stream.handle()));
      }
    }
    CALO_NCCL(ncclGroupEnd());
    for (CudaOp* op : batch) {
      if (op->rank_op.op.kind != OpKind::kRecv) continue;
      if (inject("p2p")) corrupt(op->buffers[0], stream.handle());
      if (config_.check) {
        snapshot_range(*op, op->buffers[0], {{0, std::min(op->elements, kCheckBlockValues)}},
                       stream.handle());
      }
    }
  }

  void check_nccl_async_errors() {
    for (auto& [key, comm] : comms_) {
      ncclResult_t async_error = ncclSuccess;
      CALO_NCCL(ncclCommGetAsyncError(comm, &async_error));
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        throw RuntimeFailure(fmt::format("rank {}: NCCL asynchronous error on group {}: {}", rank_, key.first,
                                         ncclGetErrorString(async_error)));
      }
    }
  }

  // ---- --check: snapshots at launch, verification at synchronize() ----
  void snapshot_range(CudaOp& op, const void* device,
                      std::vector<std::pair<std::int64_t, std::int64_t>> ranges, cudaStream_t stream,
                      std::size_t value_bytes = sizeof(bf16)) {
    std::int64_t total = 0;
    for (const auto& [offset, count] : ranges) total += count;
    op.snapshot.allocate(static_cast<std::size_t>(std::max<std::int64_t>(total, 1)) * value_bytes);
    std::int64_t at = 0;
    for (const auto& [offset, count] : ranges) {
      if (count <= 0) continue;
      CALO_CUDA(
          cudaMemcpyAsync(static_cast<char*>(op.snapshot.data) + at * static_cast<std::int64_t>(value_bytes),
                          static_cast<const char*>(device) + offset * static_cast<std::int64_t>(value_bytes),
                          static_cast<std::size_t>(count) * value_bytes, cudaMemcpyDeviceToHost, stream));
      at += count;
    }
    op.snapshot_ranges = std::move(ranges);
    if (!op.snapshot_pending) check_queue_.push_back(&op);
    op.snapshot_pending = true;
  }

  void snapshot_gemm_inputs(CudaOp& op) {
    const auto& shape = op.rank_op.op.gemm;
    std::uint64_t state = static_cast<std::uint64_t>(op.index) * 0x9E3779B97F4A7C15ull + 17;
    for (int spot = 0; spot < 8; ++spot) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      op.spots[static_cast<size_t>(2 * spot)] =
          spot == 0 ? 0 : static_cast<std::int64_t>(state % static_cast<std::uint64_t>(shape.m));
      op.spots[static_cast<size_t>(2 * spot + 1)] =
          spot == 0 ? 0 : static_cast<std::int64_t>((state >> 20) % static_cast<std::uint64_t>(shape.n));
    }
  }

  void snapshot_gemm(CudaOp& op, cudaStream_t stream) {
    const auto& shape = op.rank_op.op.gemm;
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (int spot = 0; spot < 8; ++spot)
      ranges.emplace_back(
          op.spots[static_cast<size_t>(2 * spot)] * shape.n + op.spots[static_cast<size_t>(2 * spot + 1)], 1);
    snapshot_range(op, op.buffers[2], std::move(ranges), stream);
  }

  /// Offset (values) of the last head of the last sequence in the attention output: --check verifies its
  /// rows 0 and seq-1.
  static std::int64_t attention_checked_head(const graph::AttentionShape& shape) {
    return ((std::int64_t{shape.batch} - 1) * shape.heads + shape.heads - 1) * shape.seq * shape.head_dim;
  }

  /// Row 0 of the checked head of `op`'s output (where an injected attention fault goes).
  static void* attention_checked_row(const CudaOp& op) {
    return static_cast<bf16*>(op.buffers[3]) + attention_checked_head(op.rank_op.op.attention);
  }

  void snapshot_attention(CudaOp& op, cudaStream_t stream) {
    const auto& shape = op.rank_op.op.attention;
    const std::int64_t head_base = attention_checked_head(shape);
    const std::int64_t d = shape.head_dim;
    snapshot_range(op, op.buffers[3], {{head_base, d}, {head_base + (shape.seq - 1) * d, d}}, stream);
  }

  void snapshot_elementwise(CudaOp& op, cudaStream_t stream) {
    const auto kind = op.rank_op.op.elementwise;
    if (kind == ElementwiseKind::kResidualAdd) {
      const std::int64_t count = op.elements;
      snapshot_range(op, op.buffers[2], {{0, 1}, {count / 2, 1}, {count - 1, 1}}, stream);
    } else {
      snapshot_range(op, op.buffers[1], {{0, op.width}}, stream);  // first output row
    }
  }

  void snapshot_optimizer_before(CudaOp& op, cudaStream_t stream) {
    // Values 0..3: param, grad, m, v at spots 0, n/2, n-1 (12 floats) before; 12..14 param after.
    op.snapshot.allocate(16 * sizeof(float));
    const std::int64_t spots[3] = {0, op.elements / 2, op.elements - 1};
    for (int buffer = 0; buffer < 4; ++buffer) {
      for (int spot = 0; spot < 3; ++spot) {
        CALO_CUDA(
            cudaMemcpyAsync(op.snapshot.float_values() + buffer * 3 + spot,
                            static_cast<const float*>(op.buffers[static_cast<size_t>(buffer)]) + spots[spot],
                            sizeof(float), cudaMemcpyDeviceToHost, stream));
      }
    }
  }

  void snapshot_optimizer_after(CudaOp& op, cudaStream_t stream) {
    const std::int64_t spots[3] = {0, op.elements / 2, op.elements - 1};
    for (int spot = 0; spot < 3; ++spot) {
      CALO_CUDA(cudaMemcpyAsync(op.snapshot.float_values() + 12 + spot,
                                static_cast<const float*>(op.buffers[0]) + spots[spot], sizeof(float),
                                cudaMemcpyDeviceToHost, stream));
    }
    if (!op.snapshot_pending) check_queue_.push_back(&op);
    op.snapshot_pending = true;
  }

  void snapshot_collective(CudaOp& op, cudaStream_t stream) {
    const graph::Op& graph_op = op.rank_op.op;
    const auto members = static_cast<std::int64_t>(op.group_ranks.size());
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    switch (graph_op.collective) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduceScatter:
        ranges.emplace_back(0, std::min(op.elements, kCheckBlockValues));
        break;
      case CollectiveKind::kAllGather:
        for (std::int64_t block = 0; block < members; ++block)
          ranges.emplace_back(block * op.elements, std::min(op.elements, kCheckBlockValues));
        break;
      case CollectiveKind::kAllToAll:
        for (std::int64_t peer = 0; peer < members; ++peer)
          ranges.emplace_back(op.recv_offsets[static_cast<size_t>(peer)],
                              std::min(op.recv_counts[static_cast<size_t>(peer)], kCheckBlockValues));
        break;
    }
    snapshot_range(op, op.buffers[1], std::move(ranges), stream);
  }

  /// Reads `count` bf16 values of a device buffer at `offset` with `stride` (values) between them.
  std::vector<double> read_strided(const void* device, std::int64_t offset, std::int64_t count,
                                   std::int64_t stride) {
    std::vector<std::uint16_t> bits(static_cast<size_t>(count));
    CALO_CUDA(cudaMemcpy2D(bits.data(), sizeof(std::uint16_t),
                           static_cast<const std::uint16_t*>(device) + offset,
                           static_cast<std::size_t>(stride) * sizeof(std::uint16_t), sizeof(std::uint16_t),
                           static_cast<std::size_t>(count), cudaMemcpyDeviceToHost));
    std::vector<double> values(bits.size());
    for (size_t at = 0; at < bits.size(); ++at) values[at] = bf16_to_float(bits[at]);
    return values;
  }

  void verify(CudaOp& op) {
    op.snapshot_pending = false;
    const graph::Op& graph_op = op.rank_op.op;
    switch (graph_op.kind) {
      case OpKind::kGemm:
        verify_gemm(op);
        break;
      case OpKind::kAttention:
        verify_attention(op);
        break;
      case OpKind::kElementwise:
        verify_elementwise(op);
        break;
      case OpKind::kCollective:
        verify_collective(op);
        break;
      case OpKind::kRecv:
        verify_recv(op);
        break;
      case OpKind::kOptimizer:
        verify_optimizer(op);
        break;
      case OpKind::kSend:
        break;
    }
  }

  void verify_gemm(CudaOp& op) {
    const auto& shape = op.rank_op.op.gemm;
    const auto& call = op.gemm;
    std::int64_t wrong = 0;
    std::string failure;
    for (int spot = 0; spot < 8; ++spot) {
      const std::int64_t row = op.spots[static_cast<size_t>(2 * spot)];
      const std::int64_t column = op.spots[static_cast<size_t>(2 * spot + 1)];
      // Row `row` of op(A): A stored [m,k] (contiguous) or [k,m] (stride m). Column of op(B): [k,n] stride n
      // or [n,k] contiguous.
      const auto a = call.transpose_a ? read_strided(op.buffers[0], row, shape.k, shape.m)
                                      : read_strided(op.buffers[0], row * shape.k, shape.k, 1);
      const auto b = call.transpose_b ? read_strided(op.buffers[1], column * shape.k, shape.k, 1)
                                      : read_strided(op.buffers[1], column, shape.k, shape.n);
      double want = 0;
      double magnitude = 0;
      for (std::int64_t inner = 0; inner < shape.k; ++inner) {
        want += a[static_cast<size_t>(inner)] * b[static_cast<size_t>(inner)];
        magnitude += std::abs(a[static_cast<size_t>(inner)] * b[static_cast<size_t>(inner)]);
      }
      const double got = bf16_to_float(op.snapshot.bf16_values()[spot]);
      // bf16 output rounding (2^-8 relative) plus fp32 accumulation error.
      const double tolerance = 1e-2 * std::abs(want) + 1e-5 * magnitude + 1e-3;
      if (std::abs(got - want) > tolerance) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): C[{},{}] = {} but the fp32 host reference says {}", op.index,
                                graph::describe(op.rank_op.op), row, column, got, want);
      }
    }
    checks_.add(8, wrong, failure);
  }

  void verify_attention(CudaOp& op) {
    const auto& shape = op.rank_op.op.attention;
    const std::int64_t s = shape.seq;
    const std::int64_t keys = shape.keys();
    const std::int64_t shift = keys - s;  // bottom-right causal: row r sees keys [0, shift + r]
    const std::int64_t d = shape.head_dim;
    const std::int64_t group = std::max(1, shape.heads / std::max(1, shape.kv_heads));
    const std::int64_t head = shape.heads - 1;
    const std::int64_t batch = shape.batch - 1;
    const std::int64_t kv_head = head / group;
    const std::int64_t q_base = (batch * shape.heads + head) * s * d;
    const std::int64_t kv_base = (batch * shape.kv_heads + kv_head) * keys * d;
    const auto q = read_strided(op.buffers[0], q_base, s * d, 1);
    const auto k = read_strided(op.buffers[1], kv_base, keys * d, 1);
    const auto v = read_strided(op.buffers[2], kv_base, keys * d, 1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::int64_t wrong = 0;
    std::string failure;
    int row_slot = 0;
    for (const std::int64_t row : {std::int64_t{0}, s - 1}) {
      const std::int64_t visible = shape.causal ? shift + row + 1 : keys;
      std::vector<double> p(static_cast<size_t>(visible));
      double max_score = -INFINITY;
      for (std::int64_t col = 0; col < visible; ++col) {
        double dot = 0;
        for (std::int64_t x = 0; x < d; ++x)
          dot += q[static_cast<size_t>(row * d + x)] * k[static_cast<size_t>(col * d + x)];
        p[static_cast<size_t>(col)] = dot * scale;
        max_score = std::max(max_score, p[static_cast<size_t>(col)]);
      }
      double sum = 0;
      for (double& value : p) sum += (value = std::exp(value - max_score));
      for (std::int64_t x = 0; x < d; ++x) {
        double want = 0;
        for (std::int64_t col = 0; col < visible; ++col)
          want += p[static_cast<size_t>(col)] / sum * v[static_cast<size_t>(col * d + x)];
        const double got = bf16_to_float(op.snapshot.bf16_values()[row_slot * d + x]);
        // bf16 scores and probabilities: a few bf16 ulps of the output scale (values are O(1)).
        if (std::abs(got - want) > 3e-2 * (1.0 + std::abs(want))) {
          ++wrong;
          if (failure.empty())
            failure = fmt::format("op {} ({}): O[{},{}] = {} but the host reference says {}", op.index,
                                  graph::describe(op.rank_op.op), row, x, got, want);
        }
      }
      ++row_slot;
    }
    checks_.add(2 * d, wrong, failure);
  }

  void verify_elementwise(CudaOp& op) {
    const auto kind = op.rank_op.op.elementwise;
    std::int64_t wrong = 0;
    std::int64_t values = 0;
    std::string failure;
    auto compare = [&](std::int64_t at, double got, double want) {
      ++values;
      if (std::abs(got - want) > 1e-2 * (1.0 + std::abs(want))) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): out[{}] = {} but the host reference says {}", op.index,
                                graph::describe(op.rank_op.op), at, got, want);
      }
    };
    if (kind == ElementwiseKind::kResidualAdd) {
      const std::int64_t spots[3] = {0, op.elements / 2, op.elements - 1};
      for (int spot = 0; spot < 3; ++spot) {
        const double a = read_strided(op.buffers[0], spots[spot], 1, 1)[0];
        const double b = read_strided(op.buffers[1], spots[spot], 1, 1)[0];
        compare(spots[spot], bf16_to_float(op.snapshot.bf16_values()[spot]), a + b);
      }
    } else if (kind == ElementwiseKind::kActivation) {
      const auto gate = read_strided(op.buffers[0], 0, op.width, 1);
      const auto up = read_strided(op.buffers[0], op.width, op.width, 1);
      for (std::int64_t col = 0; col < op.width; ++col) {
        const double x = gate[static_cast<size_t>(col)];
        compare(col, bf16_to_float(op.snapshot.bf16_values()[col]),
                x / (1.0 + std::exp(-x)) * up[static_cast<size_t>(col)]);
      }
    } else if (kind == ElementwiseKind::kNorm) {
      const auto in = read_strided(op.buffers[0], 0, op.width, 1);
      const auto weight = read_strided(op.buffers[2], 0, op.width, 1);
      double squares = 0;
      for (double value : in) squares += value * value;
      const double inverse = 1.0 / std::sqrt(squares / static_cast<double>(op.width) + 1e-6);
      for (std::int64_t col = 0; col < op.width; ++col)
        compare(col, bf16_to_float(op.snapshot.bf16_values()[col]),
                in[static_cast<size_t>(col)] * inverse * weight[static_cast<size_t>(col)]);
    }
    checks_.add(values, wrong, failure);
  }

  void verify_collective(CudaOp& op) {
    const graph::Op& graph_op = op.rank_op.op;
    OpCheck check;
    std::int64_t slot = 0;  // the snapshot holds the checked values in the order they are visited
    for_each_expected_collective_value(
        graph_op.collective, op.group_ranks, op.elements, op.group_index, op.recv_offsets, op.recv_counts,
        op.peer_send_offset_to_me, kCheckBlockValues, [&](std::int64_t at, double want) {
          const double got = bf16_to_float(op.snapshot.bf16_values()[slot++]);
          check.count(got == static_cast<double>(static_cast<float>(want)), [&] {
            return fmt::format("op {} ({}): out[{}] = {} but expected {}", op.index,
                               graph::describe(graph_op), at, got, want);
          });
        });
    checks_.add(check);
  }

  void verify_recv(CudaOp& op) {
    const graph::Op& graph_op = op.rank_op.op;
    std::int64_t wrong = 0;
    std::string failure;
    const std::int64_t count = std::min(op.elements, kCheckBlockValues);
    for (std::int64_t at = 0; at < count; ++at) {
      const double got = bf16_to_float(op.snapshot.bf16_values()[at]);
      const double want = static_cast<double>(check_value(op.rank_op.peer_rank, graph_op.tag + at));
      if (got != want) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} ({}): received[{}] = {} but rank {} sent {}", op.index,
                                graph::describe(graph_op), at, got, op.rank_op.peer_rank, want);
      }
    }
    checks_.add(count, wrong, failure);
  }

  void verify_optimizer(CudaOp& op) {
    const cuda::AdamWConfig c;
    const float* before = op.snapshot.float_values();
    std::int64_t wrong = 0;
    std::string failure;
    for (int spot = 0; spot < 3; ++spot) {
      const double param = before[spot];
      const double grad = before[3 + spot];
      const double next_m = c.beta1 * static_cast<double>(before[6 + spot]) + (1 - c.beta1) * grad;
      const double next_v = c.beta2 * static_cast<double>(before[9 + spot]) + (1 - c.beta2) * grad * grad;
      const double want = param - c.lr * (next_m / (std::sqrt(next_v) + c.eps) + c.weight_decay * param);
      const double got = before[12 + spot];
      if (std::abs(got - want) > 1e-6 * (1.0 + std::abs(want))) {
        ++wrong;
        if (failure.empty())
          failure = fmt::format("op {} (optimizer): param spot {} = {} but AdamW says {}", op.index, spot,
                                got, want);
      }
    }
    checks_.add(3, wrong, failure);
  }

  BackendConfig config_;
  DeviceDescription device_;
  const graph::Graph* graph_ = nullptr;
  int rank_ = 0;
  std::vector<graph::RankOp> ops_;
  std::string inject_fault_;
  double sync_timeout_s_ = 600.0;
  cudaStream_t init_stream_ = nullptr;
  ncclComm_t world_comm_ = nullptr;
  std::map<std::pair<int, int>, ncclComm_t> comms_;  // (group id, stream) -> communicator
  std::map<int, std::int64_t> expert_tokens_;
  std::map<graph::Stream, std::int64_t> all_to_all_seen_;
  std::map<std::pair<std::string, std::int64_t>, void*> scratch_;
  std::vector<void*> allocations_;
  std::int64_t allocated_bytes_ = 0;
  std::map<cudaStream_t, std::unique_ptr<cuda::GemmRunner>> gemm_runners_;
  cuda::AttentionMode attention_mode_ = cuda::AttentionMode::kAuto;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;              // created by the first attention op
  std::map<int, std::pair<void*, std::int64_t>> attention_workspace_;  // graph stream -> (pointer, bytes)
  std::int64_t attention_ops_cudnn_ = 0;
  std::int64_t attention_ops_fallback_ = 0;
  bool attention_fallback_logged_ = false;
  std::map<int, std::vector<CudaOp*>> pending_p2p_;
  std::map<int, std::vector<CudaEvent*>> pending_records_;
  std::vector<CudaOp*> check_queue_;
  std::vector<std::weak_ptr<StreamHandle>> streams_;
  OpCounts executed_{};
  OpCounts launched_{};
  CheckTally checks_;
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

void register_cuda_backend(BackendRegistry& registry) {
  BackendFactory factory;
  factory.name = "cuda";
  factory.auto_priority = 10;
  factory.context_parallel = true;  // K/V ring over the cp group's NCCL communicator, cuDNN per ring step
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
  registry.add(std::move(factory));
}

}  // namespace calo::exec
