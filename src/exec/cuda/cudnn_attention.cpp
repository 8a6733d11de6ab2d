// cuDNN SDPA forward/backward graphs (cudnn_frontend), cached per shape; see cudnn_attention.h.
#include "exec/cuda/cudnn_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"

#if defined(CALO_EXEC_HAVE_CUDNN)
#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace calo::exec::cuda {

const char* to_string(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::kAuto:
      return "auto";
    case AttentionMode::kCudnn:
      return "cudnn";
    case AttentionMode::kFallback:
      return "fallback";
  }
  return "auto";
}

AttentionMode attention_mode_from_env() {
  const char* value = std::getenv("CALO_ATTENTION");
  const std::string text = value != nullptr ? value : "";
  if (text.empty() || text == "auto") return AttentionMode::kAuto;
  if (text == "cudnn") return AttentionMode::kCudnn;
  if (text == "fallback") return AttentionMode::kFallback;
  throw InputError(
      fmt::format("CALO_ATTENTION={}: unknown attention implementation; use auto (default: cuDNN "
                  "where supported), cudnn or fallback",
                  text));
}

bool cudnn_attention_built() {
#if defined(CALO_EXEC_HAVE_CUDNN)
  return true;
#else
  return false;
#endif
}

std::int64_t attention_stats_values(const graph::AttentionShape& shape) {
  return std::int64_t{shape.batch} * shape.heads * shape.seq;
}

std::string describe_attention_shape(const graph::AttentionShape& shape) {
  const std::string keys = shape.keys() != shape.seq ? fmt::format(" keys={}", shape.keys()) : "";
  return fmt::format("b={} h={} kv={} s={}{} d={}{} {}", shape.batch, shape.heads, shape.kv_heads, shape.seq,
                     keys, shape.head_dim, shape.causal ? " causal" : "", shape.backward ? "bwd" : "fwd");
}

namespace {

/// Cache key: batch, heads, kv heads, query rows, key rows, head_dim, causal, backward.
using ShapeKey = std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t, std::int32_t,
                            std::int32_t, bool, bool>;

ShapeKey key_of(const graph::AttentionShape& shape) {
  return {shape.batch,  shape.heads,    shape.kv_heads, shape.seq,
          shape.keys(), shape.head_dim, shape.causal,   shape.backward};
}

}  // namespace

#if defined(CALO_EXEC_HAVE_CUDNN)

namespace fe = cudnn_frontend;

namespace {

// Tensor uids of the variant pack.
constexpr std::int64_t kUidQ = 1;
constexpr std::int64_t kUidK = 2;
constexpr std::int64_t kUidV = 3;
constexpr std::int64_t kUidO = 4;
constexpr std::int64_t kUidStats = 5;
constexpr std::int64_t kUidDOut = 101;
constexpr std::int64_t kUidDQ = 102;
constexpr std::int64_t kUidDK = 103;
constexpr std::int64_t kUidDV = 104;

/// Dims and strides of a contiguous [batch, heads, rows, head_dim] tensor.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> bhsd(const graph::AttentionShape& shape,
                                                                     std::int64_t heads, std::int64_t rows) {
  const std::int64_t d = shape.head_dim;
  return {{shape.batch, heads, rows, d}, {heads * rows * d, rows * d, d, 1}};
}

/// Which rows a tensor has: the queries' (q, o and their gradients) or the keys' (k, v and theirs).
enum class Rows { kQueries, kKeys };

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> layout_of(const graph::AttentionShape& shape,
                                                                          Rows rows) {
  return rows == Rows::kQueries ? bhsd(shape, shape.heads, shape.seq)
                                : bhsd(shape, shape.kv_heads, shape.keys());
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name,
                                                    std::int64_t uid, const graph::AttentionShape& shape,
                                                    Rows rows) {
  const auto [dims, strides] = layout_of(shape, rows);
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

void make_output(const std::shared_ptr<fe::graph::Tensor_attributes>& tensor, std::int64_t uid,
                 const graph::AttentionShape& shape, Rows rows) {
  const auto [dims, strides] = layout_of(shape, rows);
  tensor->set_output(true).set_uid(uid).set_dim(dims).set_stride(strides);
}

/// The causal mask's alignment: top-left when queries and keys are the same rows, bottom-right when there are
/// more (or fewer) keys than queries: query row r sees keys up to keys - seq + r (a context-parallel ring
/// step or all-gathered chunk; graph::AttentionShape::causal).
fe::DiagonalAlignment_t causal_alignment(const graph::AttentionShape& shape) {
  return shape.keys() == shape.seq ? fe::DiagonalAlignment_t::TOP_LEFT
                                   : fe::DiagonalAlignment_t::BOTTOM_RIGHT;
}

/// Dims and strides of the stats tensor [batch, heads, seq, 1] fp32 (backward input, forward output).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> stats_layout(
    const graph::AttentionShape& shape) {
  const std::int64_t h = shape.heads;
  const std::int64_t s = shape.seq;
  return {{shape.batch, h, s, 1}, {h * s, s, 1, 1}};
}

std::shared_ptr<fe::graph::Graph> build_graph(const graph::AttentionShape& shape) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  auto q = input(*graph, "q", kUidQ, shape, Rows::kQueries);
  auto k = input(*graph, "k", kUidK, shape, Rows::kKeys);
  auto v = input(*graph, "v", kUidV, shape, Rows::kKeys);
  if (!shape.backward) {
    auto options =
        fe::graph::SDPA_attributes().set_name("calo_sdpa_fwd").set_generate_stats(true).set_attn_scale(scale);
    if (shape.causal) {
      options.set_diagonal_alignment(causal_alignment(shape)).set_diagonal_band_right_bound(0);
    }
    auto [o, stats] = graph->sdpa(q, k, v, options);
    make_output(o, kUidO, shape, Rows::kQueries);
    const auto [stats_dims, stats_strides] = stats_layout(shape);
    stats->set_output(true)
        .set_uid(kUidStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims)
        .set_stride(stats_strides);
    return graph;
  }
  auto o = input(*graph, "o", kUidO, shape, Rows::kQueries);
  auto d_out = input(*graph, "d_out", kUidDOut, shape, Rows::kQueries);
  const auto [stats_dims, stats_strides] = stats_layout(shape);
  auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(kUidStats)
                                 .set_dim(stats_dims)
                                 .set_stride(stats_strides)
                                 .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes().set_name("calo_sdpa_bwd").set_attn_scale(scale);
  if (shape.causal) {
    options.set_diagonal_alignment(causal_alignment(shape)).set_diagonal_band_right_bound(0);
  }
  auto [d_q, d_k, d_v] = graph->sdpa_backward(q, k, v, o, d_out, stats, options);
  make_output(d_q, kUidDQ, shape, Rows::kQueries);
  make_output(d_k, kUidDK, shape, Rows::kKeys);
  make_output(d_v, kUidDV, shape, Rows::kKeys);
  return graph;
}

}  // namespace

struct CudnnAttention::Impl {
  /// A built graph and its workspace, or why cuDNN cannot run the shape.
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;
    std::int64_t workspace_bytes = 0;
    std::string failure;
  };
  cudnnHandle_t handle = nullptr;
  std::string handle_failure;  // set when the handle could not be created (every shape then fails)
  std::map<ShapeKey, Entry> cache;

  ~Impl() {
    cache.clear();
    if (handle != nullptr) cudnnDestroy(handle);
  }

  bool ensure_handle() {
    if (handle != nullptr) return true;
    if (!handle_failure.empty()) return false;
    const std::size_t version = cudnnGetVersion();
    if (version < 90000) {
      handle_failure = fmt::format("cuDNN {} at run time, 9.0 or newer needed", version);
      return false;
    }
    const cudnnStatus_t status = cudnnCreate(&handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      handle = nullptr;
      handle_failure = fmt::format("cudnnCreate failed: {}", cudnnGetErrorString(status));
      return false;
    }
    return true;
  }

  Entry build(const graph::AttentionShape& shape) {
    Entry entry;
    if (!ensure_handle()) {
      entry.failure = handle_failure;
      return entry;
    }
    if (shape.batch <= 0 || shape.heads <= 0 || shape.kv_heads <= 0 || shape.seq <= 0 || shape.keys() <= 0 ||
        shape.head_dim <= 0 || shape.heads % shape.kv_heads != 0) {
      entry.failure = "heads must be a positive multiple of kv_heads and every size positive";
      return entry;
    }
    try {
      auto graph = build_graph(shape);
      auto status = graph->build(handle, {fe::HeurMode_t::A});
      if (status.is_bad()) {
        entry.failure = status.get_message();
        if (entry.failure.empty()) entry.failure = "graph build failed";
        return entry;
      }
      std::int64_t workspace = 0;
      auto workspace_status = graph->get_workspace_size(workspace);
      if (workspace_status.is_bad()) {
        entry.failure = "get_workspace_size: " + workspace_status.get_message();
        return entry;
      }
      entry.graph = std::move(graph);
      entry.workspace_bytes = workspace;
    } catch (const std::exception& error) {  // cudnn_frontend throws for some unsupported configurations
      entry.failure = error.what();
    }
    return entry;
  }
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::prepare(const graph::AttentionShape& shape) {
  const ShapeKey key = key_of(shape);
  auto found = impl_->cache.find(key);
  if (found == impl_->cache.end()) found = impl_->cache.emplace(key, impl_->build(shape)).first;
  return found->second.failure;
}

std::int64_t CudnnAttention::workspace_bytes(const graph::AttentionShape& shape) const {
  const auto found = impl_->cache.find(key_of(shape));
  return found == impl_->cache.end() || !found->second.graph ? 0 : found->second.workspace_bytes;
}

void CudnnAttention::run(const graph::AttentionShape& shape, const AttentionBuffers& buffers, void* workspace,
                         cudaStream_t stream) {
  const auto found = impl_->cache.find(key_of(shape));
  if (found == impl_->cache.end() || !found->second.graph)
    throw std::logic_error("CudnnAttention::run for a shape prepare() did not accept: " +
                           describe_attention_shape(shape));
  const cudnnStatus_t stream_status = cudnnSetStream(impl_->handle, stream);
  if (stream_status != CUDNN_STATUS_SUCCESS)
    throw RuntimeFailure(fmt::format("cudnnSetStream failed: {}", cudnnGetErrorString(stream_status)));
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kUidQ, const_cast<bf16*>(buffers.q)},
      {kUidK, const_cast<bf16*>(buffers.k)},
      {kUidV, const_cast<bf16*>(buffers.v)},
      {kUidO, buffers.o},
      {kUidStats, buffers.stats},
  };
  if (shape.backward) {
    pack.emplace(kUidDOut, const_cast<bf16*>(buffers.d_out));
    pack.emplace(kUidDQ, buffers.d_q);
    pack.emplace(kUidDK, buffers.d_k);
    pack.emplace(kUidDV, buffers.d_v);
  }
  auto status = found->second.graph->execute(impl_->handle, pack, workspace);
  if (status.is_bad())
    throw RuntimeFailure(fmt::format("cuDNN SDPA {} failed to execute: {}", describe_attention_shape(shape),
                                     status.get_message()));
}

std::size_t CudnnAttention::cached_shapes() const {
  return impl_->cache.size();
}

#else  // built without cuDNN / cudnn_frontend

struct CudnnAttention::Impl {
  std::map<ShapeKey, std::string> cache;
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::prepare(const graph::AttentionShape& shape) {
  const std::string failure =
      "built without cuDNN / cudnn_frontend.h (run scripts/install_deps.sh, then reconfigure)";
  impl_->cache.emplace(key_of(shape), failure);
  return failure;
}

std::int64_t CudnnAttention::workspace_bytes(const graph::AttentionShape& /*shape*/) const {
  return 0;
}

void CudnnAttention::run(const graph::AttentionShape& shape, const AttentionBuffers& /*buffers*/,
                         void* /*workspace*/, cudaStream_t /*stream*/) {
  throw std::logic_error("CudnnAttention::run without cuDNN: " + describe_attention_shape(shape));
}

std::size_t CudnnAttention::cached_shapes() const {
  return impl_->cache.size();
}

#endif

}  // namespace calo::exec::cuda
