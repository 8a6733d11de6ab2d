// cuDNN fused attention (documented in docs/EXECUTION_CUDA.md): causal GQA scaled dot-product attention,
// forward and backward, as cuDNN 9 SDPA graphs built through cudnn_frontend; query and key rows may differ
// (context-parallel ring steps and gathered chunks: bottom-right causal mask). bf16 Q/K/V/O and gradients,
// fp32 softmax statistics (log-sum-exp per query row, written by the forward, read by the backward), scale
// 1/sqrt(head_dim). Graphs are built once per shape and cached. Without cuDNN in the build, or for a shape
// cuDNN does not support, prepare() says why and the caller uses the cuBLASLt fallback (attention.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "exec/cuda/attention.h"
#include "graph/graph.h"

namespace calo::exec::cuda {

/// Which attention implementation the backend may use (CALO_ATTENTION).
enum class AttentionMode {
  kAuto,      ///< cuDNN SDPA where built in and supported, else the fallback (one logged line says why)
  kCudnn,     ///< cuDNN SDPA only: an unsupported shape is an error
  kFallback,  ///< always the cuBLASLt fallback
};

/// Name of a mode as CALO_ATTENTION spells it: "auto" | "cudnn" | "fallback".
const char* to_string(AttentionMode mode);

/// The mode from CALO_ATTENTION (unset or empty: auto); throws InputError naming the valid values otherwise.
AttentionMode attention_mode_from_env();

/// Implementation name reported by `calo bench` (device.attention_impl) for the cuDNN path.
inline constexpr const char* kAttentionImplCudnn = "cudnn-sdpa";
/// Implementation name reported by `calo bench` (device.attention_impl) for the fallback path.
inline constexpr const char* kAttentionImplFallback = "cublaslt-fallback";
/// Attention implementation name when the graph runs the unfused core (`--attention unfused`).
inline constexpr const char* kAttentionImplUnfused = "unfused-cublaslt";

/// True when this binary was built with cuDNN and cudnn_frontend (CALO_EXEC_HAVE_CUDNN).
bool cudnn_attention_built();

/// Values of the softmax statistics buffer of `shape`: batch * heads * seq fp32 values.
std::int64_t attention_stats_values(const graph::AttentionShape& shape);

/// One line describing `shape` for messages, e.g. "b=1 h=32 kv=8 s=8192 d=128 causal fwd".
std::string describe_attention_shape(const graph::AttentionShape& shape);

/// cuDNN SDPA graphs of the current device, cached per (batch, heads, kv_heads, seq, keys, head_dim, causal,
/// forward/backward). Owns one cuDNN handle; used from one host thread.
class CudnnAttention {
 public:
  /// Creates nothing yet: the cuDNN handle is created by the first prepare().
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// Builds (or finds in the cache) the graph of `shape`. Returns an empty string when cuDNN runs it, else
  /// why not (built without cuDNN, or cuDNN's error for this shape); the answer is cached too.
  std::string prepare(const graph::AttentionShape& shape);

  /// Workspace bytes the graph of `shape` needs (0 when prepare() failed or was not called).
  std::int64_t workspace_bytes(const graph::AttentionShape& shape) const;

  /// Enqueues forward (shape.backward false: q, k, v -> o, stats) or backward (q, k, v, o, d_out, stats ->
  /// d_q, d_k, d_v) on `stream`. `workspace` holds workspace_bytes(shape). prepare(shape) must have returned
  /// "". Throws RuntimeFailure when cuDNN fails to execute.
  void run(const graph::AttentionShape& shape, const AttentionBuffers& buffers, void* workspace,
           cudaStream_t stream);

  /// Distinct shapes prepared so far (supported or not).
  std::size_t cached_shapes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace calo::exec::cuda
