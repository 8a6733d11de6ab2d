// graph::OpKind::kElementwise on CUDA: the fused kernels of each ElementwiseKind (norm.cu, activation.cu,
// pointwise.cu, loss.cu, softmax.cu, routing.cu) on shared buffers sized from the op's bytes; --check
// compares the first output row of norm and activation and three values of residual add with a host
// reference.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "exec/cuda/activation.cuh"
#include "exec/cuda/cuda_internal.h"
#include "exec/cuda/fp8.cuh"
#include "exec/cuda/loss.cuh"
#include "exec/cuda/norm.cuh"
#include "exec/cuda/pointwise.cuh"
#include "exec/cuda/routing.cuh"
#include "exec/cuda/softmax.cuh"

namespace calo::exec::cuda {
namespace {

using graph::ElementwiseKind;

/// Unfused attention's softmax: rows of s scores per (sequence, head); the backward also reads dP, dO and O.
void prepare_softmax(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t matrices = std::int64_t{shape.batch} * shape.heads;
  const std::int64_t scores = matrices * shape.seq * shape.seq;
  prepared.rows = matrices;
  prepared.width = shape.seq;
  prepared.buffers = {context.shared("softmax.scores", scores, seed)};
  context.device.attention_impl = kAttentionImplUnfused;
  if (shape.backward) {
    const std::int64_t rows = matrices * shape.seq * shape.head_dim;
    prepared.buffers.push_back(context.shared("softmax.dprob", scores, seed + 1));
    prepared.buffers.push_back(context.shared("softmax.dout", rows, seed + 2));
    prepared.buffers.push_back(context.shared("softmax.out", rows, seed + 3));
  }
}

void prepare_elementwise(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const std::int64_t hidden = std::max(1, context.graph->model.hidden_size);
  const graph::Op& op = prepared.rank_op.op;
  const auto kind = op.elementwise;
  const int tp = std::max(1, context.graph->layout.tp);
  auto rows_of = [](std::int64_t values, std::int64_t width) {
    return std::max<std::int64_t>(1, values / width);
  };
  switch (kind) {
    case ElementwiseKind::kNorm: {  // reads x, writes y: bytes = 4 per value
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
      prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
      prepared.rows = rows_of(values, prepared.width);
      const std::int64_t count = prepared.rows * prepared.width;
      prepared.buffers = {context.shared("norm.in", count, seed), context.shared("norm.out", count, seed + 1),
                          context.shared("norm.weight", prepared.width, seed + 2)};
      break;
    }
    case ElementwiseKind::kActivation: {  // reads gate+up, writes out: bytes = 6 per output value
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 6.0);
      prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
      prepared.rows = rows_of(values, prepared.width);
      prepared.buffers = {context.shared("act.in", 2 * prepared.rows * prepared.width, seed),
                          context.shared("act.out", prepared.rows * prepared.width, seed + 1)};
      break;
    }
    case ElementwiseKind::kRope: {  // reads and writes q/k rows of head_dim
      const std::int64_t head_dim =
          std::max(2, context.graph->model.head_dim > 0 ? context.graph->model.head_dim : 128);
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
      prepared.width = head_dim;
      prepared.rows = rows_of(values, head_dim);
      const std::int64_t count = prepared.rows * head_dim;
      prepared.buffers = {context.shared("rope.in", count, seed),
                          context.shared("rope.out", count, seed + 1)};
      break;
    }
    case ElementwiseKind::kResidualAdd:  // reads a and b, writes out: 6 bytes per value
    case ElementwiseKind::kCpMerge: {    // the ring's merge and accumulation run as adds of its bytes
      prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(op.bytes / 6.0));
      prepared.buffers = {context.shared("residual.a", prepared.elements, seed),
                          context.shared("residual.b", prepared.elements, seed + 1),
                          context.shared("residual.out", prepared.elements, seed + 2)};
      break;
    }
    case ElementwiseKind::kEmbedding: {  // gathers rows of the table: 4 bytes per value
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
      prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
      prepared.rows = rows_of(values, prepared.width);
      const std::int64_t table_rows =
          std::max<std::int64_t>(1, std::min<std::int64_t>(32768, context.graph->model.vocab_size / tp));
      prepared.elements = table_rows;
      prepared.buffers = {context.shared("embedding.table", table_rows * prepared.width, seed),
                          context.shared_indices("embedding.tokens", prepared.rows, seed + 1,
                                                 static_cast<std::int32_t>(table_rows)),
                          context.shared("embedding.out", prepared.rows * prepared.width, seed + 2)};
      break;
    }
    case ElementwiseKind::kCrossEntropy: {  // reads logits, writes their gradient
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
      const std::int64_t vocab_part = std::max<std::int64_t>(1, context.graph->model.vocab_size / tp);
      prepared.width = std::min(vocab_part, std::max<std::int64_t>(1, values));
      prepared.rows = rows_of(values, prepared.width);
      const std::int64_t count = prepared.rows * prepared.width;
      prepared.buffers = {
          context.shared("ce.logits", count, seed),
          context.shared_indices("ce.targets", prepared.rows, seed + 1,
                                 static_cast<std::int32_t>(std::min<std::int64_t>(prepared.width, 1 << 30))),
          context.shared("ce.grad", count, seed + 2),
          context.shared_f32("ce.loss", prepared.rows, seed + 3, 1.0f, true)};
      break;
    }
    case ElementwiseKind::kSoftmax:  // unfused attention: rows of s scores per (sequence, head)
      prepare_softmax(context, prepared, seed);
      break;
    case ElementwiseKind::kRouting: {  // top-k and permuted copy of token rows
      const std::int64_t values = static_cast<std::int64_t>(op.bytes / 4.0);
      prepared.width = std::min(hidden, std::max<std::int64_t>(1, values));
      prepared.rows = rows_of(values, prepared.width);
      const std::int64_t experts = std::max(1, context.graph->model.num_experts);
      prepared.elements = experts;
      prepared.buffers = {context.shared("routing.in", prepared.rows * prepared.width, seed),
                          context.shared("routing.logits", prepared.rows * experts, seed + 1),
                          context.shared("routing.out", prepared.rows * prepared.width, seed + 2)};
      break;
    }
    case ElementwiseKind::kCast: {  // amax pass + cast pass: 2 + 2 bytes read, 1 written per value
      // Every recipe's cast work runs as the tensorwise kernel pair over the op's bytes
      // (docs/EXECUTION_CUDA.md).
      prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(op.bytes / 5.0));
      const Fp8Tensor out = context.shared_fp8("cast.out", prepared.elements, seed);
      prepared.buffers = {context.shared("cast.out.source", prepared.elements, seed), out.values, out.scales};
      break;
    }
  }
}

void snapshot_elementwise(CudaContext& context, CudaOp& op, cudaStream_t stream) {
  const auto kind = op.rank_op.op.elementwise;
  if (kind == ElementwiseKind::kResidualAdd) {
    const std::int64_t count = op.elements;
    context.snapshot_range(op, op.buffers[2], {{0, 1}, {count / 2, 1}, {count - 1, 1}}, stream);
  } else {
    context.snapshot_range(op, op.buffers[1], {{0, op.width}}, stream);  // first output row
  }
}

void run_elementwise(CudaContext& context, CudaOp& prepared, cudaStream_t stream) {
  const auto& buffers = prepared.buffers;
  auto bf = [&](size_t at) { return static_cast<bf16*>(buffers[at]); };
  switch (prepared.rank_op.op.elementwise) {
    case ElementwiseKind::kNorm:
      rms_norm(bf(0), bf(2), bf(1), prepared.rows, prepared.width, stream);
      break;
    case ElementwiseKind::kActivation:
      swiglu(bf(0), bf(1), prepared.rows, prepared.width, stream);
      break;
    case ElementwiseKind::kRope:
      rope(bf(0), bf(1), prepared.rows, prepared.width, std::max(1, context.graph->model.seq_length), stream);
      break;
    case ElementwiseKind::kResidualAdd:
    case ElementwiseKind::kCpMerge:
      residual_add(bf(0), bf(1), bf(2), prepared.elements, stream);
      break;
    case ElementwiseKind::kEmbedding:
      embedding_gather(bf(0), static_cast<const std::int32_t*>(buffers[1]), bf(2), prepared.rows,
                       prepared.width, stream);
      break;
    case ElementwiseKind::kCrossEntropy:
      cross_entropy(bf(0), static_cast<const std::int32_t*>(buffers[1]), bf(2),
                    static_cast<float*>(buffers[3]), prepared.rows, prepared.width, stream);
      break;
    case ElementwiseKind::kSoftmax: {
      const auto& shape = prepared.rank_op.op.attention;
      ScoreBlock block;
      block.batch = prepared.rows;
      block.batch_stride = std::int64_t{shape.seq} * shape.seq;
      block.rows = block.columns = block.ld = shape.seq;
      block.causal = shape.causal;
      if (!shape.backward) {
        causal_softmax(bf(0), block, stream);
      } else {
        softmax_backward(bf(0), bf(1), bf(2), bf(3), std::int64_t{shape.seq} * shape.head_dim, shape.head_dim,
                         1.0f / std::sqrt(static_cast<float>(shape.head_dim)), block, stream);
      }
      break;
    }
    case ElementwiseKind::kRouting:
      route_tokens(bf(0), bf(1), bf(2), prepared.rows, prepared.width, static_cast<int>(prepared.elements),
                   std::max(1, context.graph->model.moe_top_k), stream);
      break;
    case ElementwiseKind::kCast:
      fp8_amax(bf(0), prepared.elements, static_cast<float*>(buffers[2]), stream);
      fp8_cast(bf(0), prepared.elements, static_cast<float*>(buffers[2]),
               static_cast<std::uint8_t*>(buffers[1]), stream);
      break;
  }
  CALO_CUDA_LAUNCH();
  const auto kind = prepared.rank_op.op.elementwise;
  if (context.inject("elementwise") && kind == ElementwiseKind::kResidualAdd)
    context.corrupt(buffers[2], stream);
  if (context.config.check && (kind == ElementwiseKind::kResidualAdd ||
                               kind == ElementwiseKind::kActivation || kind == ElementwiseKind::kNorm)) {
    snapshot_elementwise(context, prepared, stream);
  }
  if (context.config.check && kind == ElementwiseKind::kCast) {  // verified from the buffers themselves
    if (!prepared.snapshot_pending) context.check_queue.push_back(&prepared);
    prepared.snapshot_pending = true;
  }
}

/// Casts up to this many values have their amax recomputed on the host by --check (larger ones: the spots).
constexpr std::int64_t kHostAmaxValues = std::int64_t{1} << 22;

/// --check of an FP8 cast, added to context.checks: the amax the scale came from (exact: a maximum of bf16
/// values; casts of up to kHostAmaxValues values), and the first, middle and last values, each dequantised
/// within half an e4m3 step of its bf16 source: 2^-4 of the value (3 mantissa bits), or of the smallest
/// subnormal step (2^-9) below e4m3's normal range, in source units.
void verify_cast(CudaContext& context, CudaOp& op) {
  std::int64_t values = 0, wrong = 0;
  std::string failure;
  auto compare = [&](std::int64_t at, double got, double want, double dequant_scale) {
    ++values;
    const double tolerance =
        std::max(std::ldexp(std::abs(want), -4), std::ldexp(dequant_scale, -10)) * 1.0001;
    if (std::abs(got - want) <= tolerance) return;
    ++wrong;
    if (failure.empty())
      failure = fmt::format("op {} ({}): e4m3 value {} dequantises to {} but its source is {} (scale {})",
                            op.index, graph::describe(op.rank_op.op), at, got, want, dequant_scale);
  };
  float scales[kFp8ScaleFloats] = {};
  CALO_CUDA(cudaMemcpy(scales, op.buffers[2], sizeof(scales), cudaMemcpyDeviceToHost));
  if (op.elements <= kHostAmaxValues) {
    double amax = 0;
    for (double value : context.read_strided(op.buffers[0], 0, op.elements, 1))
      amax = std::max(amax, std::abs(value));
    compare(-1, scales[0], amax, 0);
  }
  for (std::int64_t at : {std::int64_t{0}, op.elements / 2, op.elements - 1})
    compare(at, context.read_fp8(op.buffers[1], at, 1, op.buffers[2])[0],
            context.read_strided(op.buffers[0], at, 1, 1)[0], scales[kFp8ScaleIndex]);
  context.checks.add(values, wrong, failure);
}

void verify_elementwise(CudaContext& context, CudaOp& op) {
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
      const double a = context.read_strided(op.buffers[0], spots[spot], 1, 1)[0];
      const double b = context.read_strided(op.buffers[1], spots[spot], 1, 1)[0];
      compare(spots[spot], bf16_to_float(op.snapshot.bf16_values()[spot]), a + b);
    }
  } else if (kind == ElementwiseKind::kActivation) {
    const auto gate = context.read_strided(op.buffers[0], 0, op.width, 1);
    const auto up = context.read_strided(op.buffers[0], op.width, op.width, 1);
    for (std::int64_t col = 0; col < op.width; ++col) {
      const double x = gate[static_cast<size_t>(col)];
      compare(col, bf16_to_float(op.snapshot.bf16_values()[col]),
              x / (1.0 + std::exp(-x)) * up[static_cast<size_t>(col)]);
    }
  } else if (kind == ElementwiseKind::kCast) {
    verify_cast(context, op);
    return;
  } else if (kind == ElementwiseKind::kNorm) {
    const auto in = context.read_strided(op.buffers[0], 0, op.width, 1);
    const auto weight = context.read_strided(op.buffers[2], 0, op.width, 1);
    double squares = 0;
    for (double value : in) squares += value * value;
    const double inverse = 1.0 / std::sqrt(squares / static_cast<double>(op.width) + 1e-6);
    for (std::int64_t col = 0; col < op.width; ++col)
      compare(col, bf16_to_float(op.snapshot.bf16_values()[col]),
              in[static_cast<size_t>(col)] * inverse * weight[static_cast<size_t>(col)]);
  }
  context.checks.add(values, wrong, failure);
}

}  // namespace

const CudaOpUnit kElementwiseUnit = {prepare_elementwise, run_elementwise, verify_elementwise};

}  // namespace calo::exec::cuda
