// graph::OpKind::kGemm on CUDA: one cuBLASLt GEMM (gemm.cpp) on shared bf16 operands [a, b, c] (FP8: e4m3
// [a8, b8, c, a scales, b scales] cast from bf16 at prepare); --check compares 8 output values (C[0,0] and 7
// pseudo-random spots) with a host reference.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_internal.h"
#include "exec/cuda/fp8.cuh"

namespace calo::exec::cuda {
namespace {

void prepare_gemm(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.gemm;
  prepared.gemm = gemm_call_for(shape);
  if (prepared.gemm.fp8) {
    const Fp8Tensor a = context.shared_fp8("gemm.a8", shape.batch * shape.m * shape.k, seed);
    const Fp8Tensor b = context.shared_fp8("gemm.b8", shape.batch * shape.k * shape.n, seed + 1);
    prepared.buffers = {a.values, b.values,
                        context.shared("gemm.c", shape.batch * shape.m * shape.n, seed + 2), a.scales,
                        b.scales};
    // --check's fault: the GEMM reads a dequantisation scale of B 1.25x too large.
    if (context.inject("fp8_scale"))
      prepared.buffers.push_back(context.allocate(sizeof(float), "gemm.wrong_scale"));  // 256-byte aligned
    return;
  }
  prepared.buffers = {context.shared("gemm.a", shape.batch * shape.m * shape.k, seed),
                      context.shared("gemm.b", shape.batch * shape.k * shape.n, seed + 1),
                      context.shared("gemm.c", shape.batch * shape.m * shape.n, seed + 2)};
}

/// The (row, column) spots of C that --check verifies: (0, 0) and 7 from an xorshift of the op index.
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

void snapshot_gemm(CudaContext& context, CudaOp& op, cudaStream_t stream) {
  const auto& shape = op.rank_op.op.gemm;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (int spot = 0; spot < 8; ++spot)
    ranges.emplace_back(
        op.spots[static_cast<size_t>(2 * spot)] * shape.n + op.spots[static_cast<size_t>(2 * spot + 1)], 1);
  context.snapshot_range(op, op.buffers[2], std::move(ranges), stream);
}

void run_gemm(CudaContext& context, CudaOp& prepared, cudaStream_t stream) {
  if (context.config.check) snapshot_gemm_inputs(prepared);
  const auto& buffers = prepared.buffers;
  if (prepared.gemm.fp8) {
    const auto* a_scale = static_cast<const float*>(buffers[3]) + kFp8ScaleIndex;
    const auto* b_scale = static_cast<const float*>(buffers[4]) + kFp8ScaleIndex;
    if (buffers.size() > 5) {  // the injected fault
      fp8_scale_times(b_scale, 1.25f, static_cast<float*>(buffers[5]), stream);
      b_scale = static_cast<const float*>(buffers[5]);
    }
    context.gemm_runner(stream).run(prepared.gemm, buffers[0], buffers[1], buffers[2], stream, a_scale,
                                    b_scale);
  } else {
    context.gemm_runner(stream).run(prepared.gemm, buffers[0], buffers[1], buffers[2], stream);
  }
  if (context.inject("gemm")) context.corrupt(prepared.buffers[2], stream);
  if (context.config.check) snapshot_gemm(context, prepared, stream);
}

/// One output value's host reference: the exact product of row `row` of op(A) and column `column` of op(B) in
/// double, and the sum of the products' magnitudes (the accumulation error's scale).
std::pair<double, double> reference_value(CudaContext& context, const CudaOp& op, std::int64_t row,
                                          std::int64_t column) {
  const auto& shape = op.rank_op.op.gemm;
  const auto& call = op.gemm;
  std::vector<double> a, b;
  if (call.fp8) {  // e4m3 A [m,k] and B [n,k], each times its dequantisation scale
    a = context.read_fp8(op.buffers[0], row * shape.k, shape.k, op.buffers[3]);
    b = context.read_fp8(op.buffers[1], column * shape.k, shape.k, op.buffers[4]);
  } else {
    // Row `row` of op(A): A stored [m,k] (contiguous) or [k,m] (stride m). Column of op(B): [k,n] stride n
    // or [n,k] contiguous.
    a = call.transpose_a ? context.read_strided(op.buffers[0], row, shape.k, shape.m)
                         : context.read_strided(op.buffers[0], row * shape.k, shape.k, 1);
    b = call.transpose_b ? context.read_strided(op.buffers[1], column * shape.k, shape.k, 1)
                         : context.read_strided(op.buffers[1], column, shape.k, shape.n);
  }
  double want = 0, magnitude = 0;
  for (std::int64_t inner = 0; inner < shape.k; ++inner) {
    want += a[static_cast<size_t>(inner)] * b[static_cast<size_t>(inner)];
    magnitude += std::abs(a[static_cast<size_t>(inner)] * b[static_cast<size_t>(inner)]);
  }
  return {want, magnitude};
}

void verify_gemm(CudaContext& context, CudaOp& op) {
  const auto& shape = op.rank_op.op.gemm;
  std::int64_t wrong = 0;
  std::string failure;
  for (int spot = 0; spot < 8; ++spot) {
    const std::int64_t row = op.spots[static_cast<size_t>(2 * spot)];
    const std::int64_t column = op.spots[static_cast<size_t>(2 * spot + 1)];
    const auto [want, magnitude] = reference_value(context, op, row, column);
    const double got = bf16_to_float(op.snapshot.bf16_values()[spot]);
    // bf16 output rounding (2^-8 relative) plus fp32 accumulation error. FP8: the operands are exact e4m3
    // values, their products exact in fp32, so only the output's rounding (2^-8 of the value) and k fp32
    // additions (k 2^-24 of the magnitudes) remain; a scale off by 2^-4 (an e4m3 step) already fails it.
    const double tolerance = op.gemm.fp8
                                 ? std::ldexp(std::abs(want), -8) +
                                       static_cast<double>(shape.k) * std::ldexp(magnitude, -24) + 1e-6
                                 : 1e-2 * std::abs(want) + 1e-5 * magnitude + 1e-3;
    if (std::abs(got - want) > tolerance) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): C[{},{}] = {} but the host reference says {}", op.index,
                              graph::describe(op.rank_op.op), row, column, got, want);
    }
  }
  context.checks.add(8, wrong, failure);
}

}  // namespace

const CudaOpUnit kGemmUnit = {prepare_gemm, run_gemm, verify_gemm};

}  // namespace calo::exec::cuda
