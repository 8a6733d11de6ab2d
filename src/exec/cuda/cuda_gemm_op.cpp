// graph::OpKind::kGemm on CUDA: one cuBLASLt GEMM (gemm.cpp) on shared bf16 operands [a, b, c]; --check
// compares 8 output values (C[0,0] and 7 pseudo-random spots) with an fp32 host reference.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_internal.h"

namespace calo::exec::cuda {
namespace {

void prepare_gemm(CudaContext& context, CudaOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.gemm;
  prepared.gemm = gemm_call_for(shape);
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
  context.gemm_runner(stream).run(prepared.gemm, prepared.buffers[0], prepared.buffers[1],
                                  prepared.buffers[2], stream);
  if (context.inject("gemm")) context.corrupt(prepared.buffers[2], stream);
  if (context.config.check) snapshot_gemm(context, prepared, stream);
}

void verify_gemm(CudaContext& context, CudaOp& op) {
  const auto& shape = op.rank_op.op.gemm;
  const auto& call = op.gemm;
  std::int64_t wrong = 0;
  std::string failure;
  for (int spot = 0; spot < 8; ++spot) {
    const std::int64_t row = op.spots[static_cast<size_t>(2 * spot)];
    const std::int64_t column = op.spots[static_cast<size_t>(2 * spot + 1)];
    // Row `row` of op(A): A stored [m,k] (contiguous) or [k,m] (stride m). Column of op(B): [k,n] stride n
    // or [n,k] contiguous.
    const auto a = call.transpose_a ? context.read_strided(op.buffers[0], row, shape.k, shape.m)
                                    : context.read_strided(op.buffers[0], row * shape.k, shape.k, 1);
    const auto b = call.transpose_b ? context.read_strided(op.buffers[1], column * shape.k, shape.k, 1)
                                    : context.read_strided(op.buffers[1], column, shape.k, shape.n);
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
  context.checks.add(8, wrong, failure);
}

}  // namespace

const CudaOpUnit kGemmUnit = {prepare_gemm, run_gemm, verify_gemm};

}  // namespace calo::exec::cuda
