// Attention on one GPU: cuDNN SDPA (forward and backward, causal, GQA, bf16) against the cuBLASLt fallback
// and a double-precision host reference on a small shape and on every context-parallel ring step and
// all-gathered chunk shape a cp graph gives its ranks (more or fewer keys than queries, bottom-right causal),
// and against the fallback on the Llama3-8B shape.
// Skips with the reason when no GPU is visible or the binary was built without cuDNN.
#include "exec/cuda/attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/init.cuh"
#include "gpu_test.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/validate.h"

namespace calo::exec::cuda {
namespace {

#define CALO_REQUIRE_GPU_AND_CUDNN()                                                                        \
  do {                                                                                                      \
    CALO_REQUIRE_GPU();                                                                                     \
    if (!cudnn_attention_built())                                                                           \
      GTEST_SKIP() << "built without cuDNN / cudnn_frontend (scripts/install_deps.sh): cuDNN test skipped"; \
  } while (false)

using ::calo::exec::testing::from_bf16;
using ::calo::exec::testing::to_bf16;

/// A device allocation freed on scope exit.
struct DeviceBuffer {
  void* data = nullptr;
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&data, std::max<std::size_t>(bytes, 256)) != cudaSuccess) data = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data != nullptr) cudaFree(data);
  }
  bf16* bf() const { return static_cast<bf16*>(data); }
};

std::vector<float> download_bf16(const void* device, std::int64_t count) {
  std::vector<std::uint16_t> bits(static_cast<size_t>(count));
  cudaMemcpy(bits.data(), device, bits.size() * 2, cudaMemcpyDeviceToHost);
  std::vector<float> values(bits.size());
  for (size_t at = 0; at < bits.size(); ++at) values[at] = from_bf16(bits[at]);
  return values;
}

/// max |got - want| / max |want|; infinity when got holds a NaN or Inf.
double normwise_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  double scale = 0;
  for (size_t at = 0; at < want.size(); ++at) {
    if (!std::isfinite(got[at])) return INFINITY;
    worst = std::max(worst, std::abs(static_cast<double>(got[at]) - want[at]));
    scale = std::max(scale, std::abs(want[at]));
  }
  return scale > 0 ? worst / scale : worst;
}

std::vector<double> widen(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

/// Double-precision causal GQA attention: forward o, backward d_q, d_k, d_v ([b, heads, rows, d] layouts;
/// keys() key rows, the causal mask bottom-right aligned: query row r sees keys [0, keys() - seq + r]).
struct HostAttention {
  std::vector<double> o, d_q, d_k, d_v;

  HostAttention(const graph::AttentionShape& shape, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& d_out) {
    const std::int64_t s = shape.seq;
    const std::int64_t keys = shape.keys();
    const std::int64_t shift = keys - s;
    const std::int64_t d = shape.head_dim;
    const std::int64_t group = shape.heads / shape.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    o.assign(q.size(), 0.0);
    d_q.assign(q.size(), 0.0);
    d_k.assign(k.size(), 0.0);
    d_v.assign(v.size(), 0.0);
    std::vector<double> p(static_cast<size_t>(keys));
    std::vector<double> d_p(static_cast<size_t>(keys));
    for (std::int64_t batch = 0; batch < shape.batch; ++batch) {
      for (std::int64_t head = 0; head < shape.heads; ++head) {
        const std::int64_t q_base = (batch * shape.heads + head) * s * d;
        const std::int64_t kv_base = (batch * shape.kv_heads + head / group) * keys * d;
        for (std::int64_t row = 0; row < s; ++row) {
          const std::int64_t visible = shape.causal ? shift + row + 1 : keys;
          const auto at = [&](std::int64_t base, std::int64_t r, std::int64_t x) {
            return static_cast<size_t>(base + r * d + x);
          };
          double max_score = -INFINITY;
          for (std::int64_t col = 0; col < visible; ++col) {
            double dot = 0;
            for (std::int64_t x = 0; x < d; ++x)
              dot += q[at(q_base, row, x)] * static_cast<double>(k[at(kv_base, col, x)]);
            p[static_cast<size_t>(col)] = dot * scale;
            max_score = std::max(max_score, p[static_cast<size_t>(col)]);
          }
          double sum = 0;
          for (std::int64_t col = 0; col < visible; ++col)
            sum += (p[static_cast<size_t>(col)] = std::exp(p[static_cast<size_t>(col)] - max_score));
          for (std::int64_t col = 0; col < visible; ++col) p[static_cast<size_t>(col)] /= sum;
          for (std::int64_t col = 0; col < visible; ++col)
            for (std::int64_t x = 0; x < d; ++x)
              o[at(q_base, row, x)] += p[static_cast<size_t>(col)] * v[at(kv_base, col, x)];
          // Backward: dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o O)), dQ = scale dS K, dK += scale
          // dS^T Q.
          double row_dot = 0;
          for (std::int64_t x = 0; x < d; ++x) row_dot += d_out[at(q_base, row, x)] * o[at(q_base, row, x)];
          for (std::int64_t col = 0; col < visible; ++col) {
            double dot = 0;
            for (std::int64_t x = 0; x < d; ++x) {
              dot += d_out[at(q_base, row, x)] * static_cast<double>(v[at(kv_base, col, x)]);
              d_v[at(kv_base, col, x)] += p[static_cast<size_t>(col)] * d_out[at(q_base, row, x)];
            }
            d_p[static_cast<size_t>(col)] = p[static_cast<size_t>(col)] * (dot - row_dot) * scale;
          }
          for (std::int64_t col = 0; col < visible; ++col) {
            for (std::int64_t x = 0; x < d; ++x) {
              d_q[at(q_base, row, x)] += d_p[static_cast<size_t>(col)] * k[at(kv_base, col, x)];
              d_k[at(kv_base, col, x)] += d_p[static_cast<size_t>(col)] * q[at(q_base, row, x)];
            }
          }
        }
      }
    }
  }
};

/// Device operands and outputs of one attention shape, run through cuDNN or the fallback.
struct AttentionRun {
  graph::AttentionShape shape;
  std::int64_t q_values = 0;
  std::int64_t kv_values = 0;
  DeviceBuffer q, k, v, d_out, o, d_q, d_k, d_v, stats, scores, dscores;

  explicit AttentionRun(const graph::AttentionShape& attention)
      : shape(attention),
        q_values(attention_query_values(attention)),
        kv_values(attention_key_values(attention)),
        q(static_cast<size_t>(q_values) * 2),
        k(static_cast<size_t>(kv_values) * 2),
        v(static_cast<size_t>(kv_values) * 2),
        d_out(static_cast<size_t>(q_values) * 2),
        o(static_cast<size_t>(q_values) * 2),
        d_q(static_cast<size_t>(q_values) * 2),
        d_k(static_cast<size_t>(kv_values) * 2),
        d_v(static_cast<size_t>(kv_values) * 2),
        stats(static_cast<size_t>(attention_stats_values(attention)) * 4),
        scores(static_cast<size_t>(attention_score_block_values(attention)) * 2),
        dscores(static_cast<size_t>(attention_score_block_values(attention)) * 2) {}

  AttentionBuffers buffers() const {
    AttentionBuffers result;
    result.q = q.bf();
    result.k = k.bf();
    result.v = v.bf();
    result.o = o.bf();
    result.d_out = d_out.bf();
    result.d_q = d_q.bf();
    result.d_k = d_k.bf();
    result.d_v = d_v.bf();
    result.scores = scores.bf();
    result.dscores = dscores.bf();
    result.stats = static_cast<float*>(stats.data);
    return result;
  }

  /// Forward then backward with cuDNN (`cudnn` non-null) or the fallback.
  void run(CudnnAttention* cudnn, GemmRunner& gemm) {
    graph::AttentionShape forward = shape;
    forward.backward = false;
    graph::AttentionShape backward = shape;
    backward.backward = true;
    if (cudnn != nullptr) {
      ASSERT_EQ(cudnn->prepare(forward), "");
      ASSERT_EQ(cudnn->prepare(backward), "");
      DeviceBuffer workspace(
          static_cast<size_t>(std::max(cudnn->workspace_bytes(forward), cudnn->workspace_bytes(backward))));
      cudnn->run(forward, buffers(), workspace.data, nullptr);
      cudnn->run(backward, buffers(), workspace.data, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      run_attention(gemm, forward, buffers(), nullptr);
      run_attention(gemm, backward, buffers(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
};

graph::AttentionShape make_shape(int batch, int heads, int kv_heads, int seq, int head_dim) {
  graph::AttentionShape shape;
  shape.batch = batch;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.seq = seq;
  shape.head_dim = head_dim;
  shape.causal = true;
  return shape;
}

/// Runs `shape` forward and backward through cuDNN and the fallback on the same bf16 inputs (uniform in
/// [-1, 1), seeded) and expects both within bf16 tolerance of the host reference and of each other.
void expect_cudnn_and_fallback_match_host_reference(const graph::AttentionShape& shape, unsigned seed) {
  const std::string label = describe_attention_shape(shape);
  AttentionRun with_cudnn(shape);
  AttentionRun with_fallback(shape);
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto upload = [&](std::int64_t count, void* first, void* second) {
    std::vector<std::uint16_t> bits(static_cast<size_t>(count));
    std::vector<float> values(bits.size());
    for (size_t at = 0; at < bits.size(); ++at) values[at] = from_bf16(bits[at] = to_bf16(uniform(random)));
    cudaMemcpy(first, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(second, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
    return values;
  };
  const auto q = upload(with_cudnn.q_values, with_cudnn.q.data, with_fallback.q.data);
  const auto k = upload(with_cudnn.kv_values, with_cudnn.k.data, with_fallback.k.data);
  const auto v = upload(with_cudnn.kv_values, with_cudnn.v.data, with_fallback.v.data);
  const auto d_out = upload(with_cudnn.q_values, with_cudnn.d_out.data, with_fallback.d_out.data);
  GemmRunner gemm;
  CudnnAttention cudnn;
  with_cudnn.run(&cudnn, gemm);
  with_fallback.run(nullptr, gemm);
  const HostAttention reference(shape, q, k, v, d_out);
  struct Output {
    const char* name;
    const DeviceBuffer& cudnn;
    const DeviceBuffer& fallback;
    const std::vector<double>& reference;
    std::int64_t count;
  };
  const Output outputs[] = {{"o", with_cudnn.o, with_fallback.o, reference.o, with_cudnn.q_values},
                            {"d_q", with_cudnn.d_q, with_fallback.d_q, reference.d_q, with_cudnn.q_values},
                            {"d_k", with_cudnn.d_k, with_fallback.d_k, reference.d_k, with_cudnn.kv_values},
                            {"d_v", with_cudnn.d_v, with_fallback.d_v, reference.d_v, with_cudnn.kv_values}};
  for (const Output& output : outputs) {
    const auto got_cudnn = download_bf16(output.cudnn.data, output.count);
    const auto got_fallback = download_bf16(output.fallback.data, output.count);
    const double cudnn_error = normwise_error(got_cudnn, output.reference);
    const double fallback_error = normwise_error(got_fallback, output.reference);
    const double between = normwise_error(got_cudnn, widen(got_fallback));
    // bf16 outputs (2^-9 relative rounding) plus bf16 scores/probabilities in the fallback.
    EXPECT_LT(cudnn_error, 2e-2) << label << " " << output.name << ": cuDNN vs host reference";
    EXPECT_LT(fallback_error, 3e-2) << label << " " << output.name << ": fallback vs host reference";
    EXPECT_LT(between, 4e-2) << label << " " << output.name << ": cuDNN vs fallback";
    std::printf("# %s %s: max error / max |value|: cuDNN %.2e, fallback %.2e, cuDNN vs fallback %.2e\n",
                label.c_str(), output.name, cudnn_error, fallback_error, between);
  }
}

TEST(CudnnAttention, ForwardAndBackwardMatchFallbackAndHostReference) {
  CALO_REQUIRE_GPU_AND_CUDNN();
  expect_cudnn_and_fallback_match_host_reference(make_shape(1, 8, 2, 256, 128), 11);
}

/// The distinct attention shapes (forward and backward) that ranks of `layout` execute.
std::vector<graph::AttentionShape> attention_shapes_of(const model::ModelSpec& spec,
                                                       const parallel::Layout& layout) {
  const graph::Graph graph = graph::build_graph(spec, parallel::resolve_layout(spec, layout));
  std::vector<graph::AttentionShape> shapes;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    for (const graph::RankOp& rank_op : graph::materialize(graph, rank)) {
      if (rank_op.op.kind != graph::OpKind::kAttention) continue;
      graph::AttentionShape shape = rank_op.op.attention;
      shape.backward = false;  // AttentionRun runs both passes of a shape
      const auto same = [&](const graph::AttentionShape& seen) {
        return describe_attention_shape(seen) == describe_attention_shape(shape);
      };
      if (std::none_of(shapes.begin(), shapes.end(), same)) shapes.push_back(shape);
    }
  }
  return shapes;
}

TEST(CudnnAttention, ContextParallelRingStepsAndGatheredChunksMatchHostReference) {
  // Every attention op a cp = 2 graph hands its ranks (tiny-dense, sequence 256): the ring's diagonal
  // (causal, square), its off-diagonal steps (c queries x 2c keys and 2c queries x c keys, no mask), and the
  // all-gather variant's chunks (c queries against (i+1)c or (2cp-i)c keys, bottom-right causal). These are
  // the shapes `calo bench --backend cuda --cp 2` runs on each GPU; the ring's NCCL side needs two GPUs
  // (multigpu_test.cpp).
  CALO_REQUIRE_GPU_AND_CUDNN();
  model::ModelSpec spec = model::load_model("tiny-dense");
  spec.seq_length = 256;
  parallel::Layout ring;
  ring.cp = 2;
  parallel::Layout gathered = ring;
  gathered.cp_comm = parallel::CpComm::kAllGather;
  int unequal = 0;
  unsigned seed = 21;
  for (const parallel::Layout& layout : {ring, gathered}) {
    for (const graph::AttentionShape& shape : attention_shapes_of(spec, layout)) {
      unequal += shape.keys() != shape.seq ? 1 : 0;
      expect_cudnn_and_fallback_match_host_reference(shape, seed++);
    }
  }
  EXPECT_GE(unequal, 3) << "the cp graphs should hold ring steps and gathered chunks with keys != queries";
}

TEST(CudnnAttention, Llama3_8bShapeMatchesFallback) {
  CALO_REQUIRE_GPU_AND_CUDNN();
  const graph::AttentionShape shape = make_shape(1, 32, 8, 8192, 128);
  AttentionRun with_cudnn(shape);
  AttentionRun with_fallback(shape);
  for (AttentionRun* run : {&with_cudnn, &with_fallback}) {
    fill_random_bf16(run->q.bf(), run->q_values, 1, 1.0f, nullptr);
    fill_random_bf16(run->k.bf(), run->kv_values, 2, 1.0f, nullptr);
    fill_random_bf16(run->v.bf(), run->kv_values, 3, 1.0f, nullptr);
    fill_random_bf16(run->d_out.bf(), run->q_values, 4, 1.0f, nullptr);
  }
  GemmRunner gemm;
  CudnnAttention cudnn;
  with_cudnn.run(&cudnn, gemm);
  with_fallback.run(nullptr, gemm);
  const std::pair<const char*, std::pair<const DeviceBuffer*, const DeviceBuffer*>> outputs[] = {
      {"o", {&with_cudnn.o, &with_fallback.o}},
      {"d_q", {&with_cudnn.d_q, &with_fallback.d_q}},
      {"d_k", {&with_cudnn.d_k, &with_fallback.d_k}},
      {"d_v", {&with_cudnn.d_v, &with_fallback.d_v}}};
  for (const auto& [name, pair] : outputs) {
    const std::int64_t count =
        std::string(name) == "d_k" || std::string(name) == "d_v" ? with_cudnn.kv_values : with_cudnn.q_values;
    const double between = normwise_error(download_bf16(pair.first->data, count),
                                          widen(download_bf16(pair.second->data, count)));
    EXPECT_LT(between, 4e-2) << name << ": cuDNN vs fallback";
    std::printf("# llama3-8b %s: max |cuDNN - fallback| / max |fallback| = %.2e\n", name, between);
  }
}

TEST(CudnnAttention, UnsupportedShapeSaysWhy) {
  CALO_REQUIRE_GPU_AND_CUDNN();
  graph::AttentionShape shape = make_shape(1, 8, 3, 128, 64);  // 8 query heads cannot share 3 kv heads
  CudnnAttention cudnn;
  EXPECT_FALSE(cudnn.prepare(shape).empty());
  EXPECT_EQ(cudnn.workspace_bytes(shape), 0);
  EXPECT_EQ(cudnn.cached_shapes(), 1u);
}

// Needs no GPU: the CALO_ATTENTION value is checked before anything runs.
TEST(CudnnAttention, UnknownCaloAttentionNamesTheValueAndTheChoices) {
  setenv("CALO_ATTENTION", "flash", 1);
  try {
    attention_mode_from_env();
    ADD_FAILURE() << "CALO_ATTENTION=flash was accepted";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("CALO_ATTENTION=flash"), std::string::npos) << message;
    EXPECT_NE(message.find("auto"), std::string::npos) << message;
    EXPECT_NE(message.find("cudnn"), std::string::npos) << message;
    EXPECT_NE(message.find("fallback"), std::string::npos) << message;
  }
  setenv("CALO_ATTENTION", "fallback", 1);
  EXPECT_EQ(attention_mode_from_env(), AttentionMode::kFallback);
  unsetenv("CALO_ATTENTION");
  EXPECT_EQ(attention_mode_from_env(), AttentionMode::kAuto);
}

}  // namespace
}  // namespace calo::exec::cuda
