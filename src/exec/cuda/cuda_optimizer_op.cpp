// graph::OpKind::kOptimizer on CUDA: one AdamW step (adamw.cu) over fp32 [param, grad, m, v] of the rank's
// parameter shard, in chunks of at most 1 GiB per array; --check copies the four values at three spots before
// the last chunk's launch and the parameters after, and compares them with AdamW computed on the host.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "exec/cuda/adamw.cuh"
#include "exec/cuda/cuda_internal.h"

namespace calo::exec::cuda {
namespace {

// Values of the last launch of a step (the one --check verifies): the shard's remainder after whole chunks of
// op.width values. The op's buffers hold one chunk (CudaContext::adamw_chunk_values, 1 GiB per array): a
// larger shard runs AdamW over them chunk after chunk, the same bytes through HBM (a chunk is far beyond L2)
// without a second copy of the optimizer state beside what `--memory real` holds as training does.
std::int64_t last_chunk_elements(const CudaOp& op) {
  const std::int64_t remainder = op.elements % op.width;
  return remainder == 0 ? op.width : remainder;
}

void prepare_optimizer(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(prepared.rank_op.op.parameters));
  prepared.width = std::min(prepared.elements, std::max<std::int64_t>(1, context.adamw_chunk_values));
  const std::int64_t count = prepared.width;
  prepared.buffers = {context.shared_f32("adam.param", count, seed, 1.0f, false),
                      context.shared_f32("adam.grad", count, seed + 1, 1e-3f, false),
                      context.shared_f32("adam.m", count, seed + 2, 1e-3f, false),
                      context.shared_f32("adam.v", count, seed + 3, 1e-6f, true)};
}

void snapshot_optimizer_before(CudaOp& op, cudaStream_t stream) {
  // Values 0..3: param, grad, m, v at spots 0, n/2, n-1 of the last launch (12 floats) before; 12..14 param
  // after.
  op.snapshot.allocate(16 * sizeof(float));
  const std::int64_t last = last_chunk_elements(op);
  const std::int64_t spots[3] = {0, last / 2, last - 1};
  for (int buffer = 0; buffer < 4; ++buffer) {
    for (int spot = 0; spot < 3; ++spot) {
      CALO_CUDA(
          cudaMemcpyAsync(op.snapshot.float_values() + buffer * 3 + spot,
                          static_cast<const float*>(op.buffers[static_cast<size_t>(buffer)]) + spots[spot],
                          sizeof(float), cudaMemcpyDeviceToHost, stream));
    }
  }
}

void snapshot_optimizer_after(CudaContext& context, CudaOp& op, cudaStream_t stream) {
  const std::int64_t last = last_chunk_elements(op);
  const std::int64_t spots[3] = {0, last / 2, last - 1};
  for (int spot = 0; spot < 3; ++spot) {
    CALO_CUDA(cudaMemcpyAsync(op.snapshot.float_values() + 12 + spot,
                              static_cast<const float*>(op.buffers[0]) + spots[spot], sizeof(float),
                              cudaMemcpyDeviceToHost, stream));
  }
  if (!op.snapshot_pending) context.check_queue.push_back(&op);
  op.snapshot_pending = true;
}

void run_optimizer(CudaContext& context, CudaOp& prepared, cudaStream_t stream) {
  auto* param = static_cast<float*>(prepared.buffers[0]);
  const std::int64_t last = last_chunk_elements(prepared);
  for (std::int64_t done = 0, count = 0; done < prepared.elements; done += count) {
    count = prepared.elements - done == last ? last : prepared.width;
    if (context.config.check && done + count == prepared.elements)
      snapshot_optimizer_before(prepared, stream);
    adamw_step(param, static_cast<const float*>(prepared.buffers[1]),
               static_cast<float*>(prepared.buffers[2]), static_cast<float*>(prepared.buffers[3]), count,
               AdamWConfig{}, stream);
    CALO_CUDA_LAUNCH();
  }
  if (context.inject("optimizer")) {
    static const float kBad = 12345.0f;
    CALO_CUDA(cudaMemcpyAsync(param, &kBad, sizeof(kBad), cudaMemcpyHostToDevice, stream));
  }
  if (context.config.check) snapshot_optimizer_after(context, prepared, stream);
}

void verify_optimizer(CudaContext& context, CudaOp& op) {
  const AdamWConfig c;
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
        failure =
            fmt::format("op {} (optimizer): param spot {} = {} but AdamW says {}", op.index, spot, got, want);
    }
  }
  context.checks.add(3, wrong, failure);
}

}  // namespace

const CudaOpUnit kOptimizerUnit = {prepare_optimizer, run_optimizer, verify_optimizer};

}  // namespace calo::exec::cuda
