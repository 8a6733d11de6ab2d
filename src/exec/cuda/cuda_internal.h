// CUDA backend internal header: what cuda_backend.cpp (the Backend: device, NCCL communicators, streams,
// events, launch, synchronize) shares with its op units, one file per graph::OpKind with that kind's prepare
// / run /
// --check snapshot and verify: cuda_gemm_op.cpp, cuda_attention_op.cpp, cuda_elementwise_op.cpp (softmax
// included), cuda_collective_op.cpp (collectives, all-to-all, send and recv), cuda_optimizer_op.cpp. The
// kernels and their runners live beside them (gemm.cpp, attention.cpp, cudnn_attention.cpp, *.cu). Not part
// of the exec interface.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/backend.h"
#include "exec/cuda/common.cuh"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/gemm.h"
#include "exec/verify.h"
#include "graph/graph.h"

namespace calo::exec::cuda {

/// The float a bf16 value (its 16 bits) encodes.
inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value = 0;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

/// The value of an e4m3 byte (sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0 subnormal; 0x7F
/// and 0xFF NaN, no infinities).
inline double e4m3_to_double(std::uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  const double sign = (bits & 0x80) != 0 ? -1.0 : 1.0;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(mantissa / 8.0, -6);
  return sign * std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
}

/// An e4m3 tensor and its scales on the device: the amax and the dequantisation scale amax / 448 (fp8.cuh).
struct Fp8Tensor {
  void* values = nullptr;  ///< e4m3 bytes
  void* scales = nullptr;  ///< two floats
};

/// Owns a cudaStream_t; the backend watches it through a weak_ptr (the executor owns the Stream).
struct StreamHandle {
  cudaStream_t stream = nullptr;  ///< the non-blocking CUDA stream
  /// Creates the stream.
  StreamHandle() { CALO_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  /// Destroys the stream.
  ~StreamHandle() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

/// A graph stream on its own CUDA stream.
class CudaStream final : public Stream {
 public:
  /// Creates the CUDA stream of graph stream `kind`.
  explicit CudaStream(graph::Stream kind) : kind_(kind), handle_(std::make_shared<StreamHandle>()) {}
  /// The graph stream this stream executes.
  graph::Stream kind() const override { return kind_; }
  /// The CUDA stream.
  cudaStream_t handle() const { return handle_->stream; }
  /// A weak reference the backend polls in synchronize().
  std::weak_ptr<StreamHandle> watch() const { return handle_; }

 private:
  graph::Stream kind_;
  std::shared_ptr<StreamHandle> handle_;
};

/// A cudaEvent_t (with timing only when asked for).
class CudaEvent final : public Event {
 public:
  /// Creates the event; `timing` false disables timing.
  explicit CudaEvent(bool timing) {
    CALO_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  /// Destroys the event.
  ~CudaEvent() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  /// The CUDA event.
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Pinned host memory for --check snapshots.
struct PinnedBuffer {
  void* data = nullptr;   ///< cudaMallocHost memory, nullptr before allocate()
  std::size_t bytes = 0;  ///< size of data
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  /// Frees the memory.
  ~PinnedBuffer() {
    if (data != nullptr) cudaFreeHost(data);
  }
  /// Grows the buffer to at least `size` bytes (the old contents are lost when it grows).
  void allocate(std::size_t size) {
    if (bytes >= size) return;
    if (data != nullptr) cudaFreeHost(data);
    data = nullptr;
    CALO_CUDA(cudaMallocHost(&data, size));
    bytes = size;
  }
  /// The buffer as bf16 bits.
  std::uint16_t* bf16_values() const { return static_cast<std::uint16_t*>(data); }
  /// The buffer as fp32 values.
  float* float_values() const { return static_cast<float*>(data); }
};

struct CudaOpUnit;

/// A prepared op: the graph op, its device buffers and what its launch needs.
struct CudaOp final : PreparedOp {
  graph::RankOp rank_op;                             ///< the graph op and its group / peer
  int index = 0;                                     ///< index in the rank's program
  const CudaOpUnit* unit = nullptr;                  ///< the unit of the op's kind
  std::vector<void*> buffers;                        ///< role-specific, see the unit's prepare
  GemmCall gemm;                                     ///< GEMM: the cuBLASLt call
  std::int64_t rows = 0;                             ///< elementwise: rows of width values
  std::int64_t width = 0;                            ///< elementwise: values per row; optimizer: per launch
  std::int64_t elements = 0;                         ///< main element count (see the unit's prepare)
  bool cudnn_attention = false;                      ///< attention: cuDNN SDPA (else the cuBLASLt fallback)
  ncclComm_t comm = nullptr;                         ///< collective, send/recv: the communicator
  std::vector<std::int32_t> group_ranks;             ///< collective: global ranks of the members
  std::int64_t group_index = 0;                      ///< collective: this rank's place in the group
  std::vector<std::int64_t> send_counts;             ///< all-to-all: elements sent to each peer
  std::vector<std::int64_t> recv_counts;             ///< all-to-all: elements received from each peer
  std::vector<std::int64_t> send_offsets;            ///< all-to-all: where each peer's send block starts
  std::vector<std::int64_t> recv_offsets;            ///< all-to-all: where each peer's block lands
  std::vector<std::int64_t> peer_send_offset_to_me;  ///< all-to-all check: where my block sits in each sender
  int peer_in_comm = -1;                             ///< send/recv: peer's rank in `comm`
  bool last_of_batch = true;                         ///< send/recv: posts the pending batch
  PinnedBuffer snapshot;                             ///< --check: output (and input) values copied at launch
  std::vector<std::pair<std::int64_t, std::int64_t>> snapshot_ranges;  ///< (offset, count) of output values
  std::array<std::int64_t, 16> spots{};                                ///< GEMM (row, col) pairs / optimizer
  bool snapshot_pending = false;  ///< queued for verification at synchronize()
};

/// The backend state the op units share (one per backend, filled by its constructor, connect() and
/// prepare()).
struct CudaContext {
  BackendConfig config;                 ///< rank, world, --check, seed
  DeviceDescription device;             ///< this rank's GPU (prepare() sets attention_impl)
  const graph::Graph* graph = nullptr;  ///< the graph connect() bound
  int rank = 0;                         ///< this process's rank in the graph
  std::vector<graph::RankOp> ops;       ///< this rank's materialized program
  std::string inject_fault;             ///< CALO_CUDA_INJECT_FAULT: the result to corrupt (tests)
  /// Values per fp32 array of one AdamW launch, at most (CALO_ADAMW_CHUNK_VALUES; 0: the whole shard at
  /// once).
  std::int64_t adamw_chunk_values = std::int64_t{1} << 28;
  cudaStream_t init_stream = nullptr;               ///< where prepare() fills buffers
  ncclComm_t world_comm = nullptr;                  ///< communicator of all ranks (split into comms)
  std::map<std::pair<int, int>, ncclComm_t> comms;  ///< (group id, stream) -> communicator
  std::map<int, std::int64_t> expert_tokens;        ///< tokens per expert (m of the expert fc1 forward GEMMs)
  std::map<graph::Stream, std::int64_t> all_to_all_seen;              ///< all-to-alls prepared per stream
  std::map<std::pair<std::string, std::int64_t>, void*> scratch;      ///< shared buffers by (role, values)
  std::vector<void*> allocations;                                     ///< every buffer allocate() made
  std::int64_t allocated_bytes = 0;                                   ///< bytes of those buffers
  std::map<cudaStream_t, std::unique_ptr<GemmRunner>> gemm_runners;   ///< one cuBLASLt runner per stream
  AttentionMode attention_mode = AttentionMode::kAuto;                ///< CALO_ATTENTION
  std::unique_ptr<CudnnAttention> cudnn_attention;                    ///< created by the first attention op
  std::map<int, std::pair<void*, std::int64_t>> attention_workspace;  ///< graph stream -> (pointer, bytes)
  std::int64_t attention_ops_cudnn = 0;     ///< attention ops prepared on cuDNN SDPA
  std::int64_t attention_ops_fallback = 0;  ///< attention ops prepared on the cuBLASLt fallback
  bool attention_fallback_logged = false;   ///< the fallback notice was given
  std::vector<CudaOp*> check_queue;         ///< ops with a --check snapshot to verify at synchronize()
  CheckTally checks;                        ///< --check tally of every verified op

  /// cudaMalloc of `bytes` (at least 256) for `role`, counted in allocated_bytes; throws RuntimeFailure
  /// naming the role and the memory figures when the GPU is out of memory.
  void* allocate(std::size_t bytes, const std::string& role);
  /// A bf16 buffer of `values` shared by every op with the same role and size (random, never zero).
  void* shared(const std::string& role, std::int64_t values, std::uint64_t seed, float scale = 1.0f);
  /// An fp32 buffer shared like shared() (absolute values when `positive`).
  void* shared_f32(const std::string& role, std::int64_t values, std::uint64_t seed, float scale,
                   bool positive);
  /// An e4m3 tensor of `values` cast (tensorwise, fp8.cuh) from the random bf16 buffer shared() gives for
  /// role + ".source"; shared like shared().
  Fp8Tensor shared_fp8(const std::string& role, std::int64_t values, std::uint64_t seed);
  /// Reads `count` e4m3 values of a device buffer from `offset`, each times the dequantisation scale in
  /// `device_scales` (Fp8Tensor::scales).
  std::vector<double> read_fp8(const void* device_values, std::int64_t offset, std::int64_t count,
                               const void* device_scales);
  /// An int32 index buffer in [0, modulo), shared like shared().
  void* shared_indices(const std::string& role, std::int64_t values, std::uint64_t seed, std::int32_t modulo);
  /// The cuBLASLt runner of `stream` (created on first use).
  GemmRunner& gemm_runner(cudaStream_t stream);
  /// True when CALO_CUDA_INJECT_FAULT names `kind` (the unit then corrupts its result for --check to find).
  bool inject(const char* kind) const { return inject_fault == kind; }
  /// Overwrites one bf16 output value (fault injection for --check tests).
  void corrupt(void* device_value, cudaStream_t stream);
  /// --check: copies the (offset, count) `ranges` of `device_values` into op.snapshot on `stream` and queues
  /// `op` for verification at synchronize().
  void snapshot_range(CudaOp& op, const void* device_values,
                      std::vector<std::pair<std::int64_t, std::int64_t>> ranges, cudaStream_t stream,
                      std::size_t value_bytes = sizeof(bf16));
  /// Reads `count` bf16 values of a device buffer at `offset` with `stride` (values) between them.
  std::vector<double> read_strided(const void* device_values, std::int64_t offset, std::int64_t count,
                                   std::int64_t stride);
};

/// One op kind on CUDA. The backend calls prepare once per op (then waits for init_stream), run per launch,
/// and verify at synchronize() for ops that queued a --check snapshot.
struct CudaOpUnit {
  /// Allocates and fills the op's buffers (random inputs from `seed`) and its kind's fields of CudaOp.
  void (*prepare)(CudaContext& context, CudaOp& op, std::uint64_t seed);
  /// Enqueues the op on `stream` (an injected fault and the --check snapshot follow it); nullptr for send /
  /// recv, which launch() batches for post_p2p_batch().
  void (*run)(CudaContext& context, CudaOp& op, cudaStream_t stream);
  /// --check: compares the op's snapshot with a host reference and adds it to context.checks; nullptr when
  /// the kind has nothing to verify.
  void (*verify)(CudaContext& context, CudaOp& op);
};

/// graph::OpKind::kGemm: cuBLASLt (cuda_gemm_op.cpp).
extern const CudaOpUnit kGemmUnit;
/// graph::OpKind::kAttention: cuDNN SDPA or the cuBLASLt fallback (cuda_attention_op.cpp).
extern const CudaOpUnit kAttentionUnit;
/// graph::OpKind::kElementwise: norm, activation, rope, residual, embedding, loss, softmax, routing
/// (cuda_elementwise_op.cpp).
extern const CudaOpUnit kElementwiseUnit;
/// graph::OpKind::kCollective: NCCL all-reduce, all-gather, reduce-scatter, all-to-all
/// (cuda_collective_op.cpp).
extern const CudaOpUnit kCollectiveUnit;
/// graph::OpKind::kSend and kRecv: NCCL point-to-point, posted by post_p2p_batch() (cuda_collective_op.cpp).
extern const CudaOpUnit kPointToPointUnit;
/// graph::OpKind::kOptimizer: AdamW over the rank's shard (cuda_optimizer_op.cpp).
extern const CudaOpUnit kOptimizerUnit;

/// Posts the send/recv ops of one p2p batch in one ncclGroupStart/End on `stream` (with --check: fills the
/// sends first and snapshots the receives after).
void post_p2p_batch(CudaContext& context, const std::vector<CudaOp*>& batch, cudaStream_t stream);

/// Throws RuntimeFailure when a communicator reports an asynchronous NCCL error.
void check_nccl_async_errors(const CudaContext& context);

}  // namespace calo::exec::cuda
