// CPU GEMM unit: one OpenBLAS fp32 sgemm per product with the op's exact shapes; --check recomputes 8 spots
// of C in double.
#include <cblas.h>
#include <fmt/format.h>

#include <cmath>

#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

// Buffers: A [batch, m, k], B [batch, k, n], C [batch, m, n], shared by GEMMs of the same shapes.
void prepare_gemm(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const auto& shape = prepared.rank_op.op.gemm;
  prepared.buffers = {context.shared("gemm.a", shape.batch * shape.m * shape.k, seed),
                      context.shared("gemm.b", shape.batch * shape.k * shape.n, seed + 1),
                      context.shared("gemm.c", shape.batch * shape.m * shape.n, seed + 2)};
}

void run_gemm(CpuContext& context, CpuOp& prepared) {
  const auto& shape = prepared.rank_op.op.gemm;
  const float* a = prepared.buffers[0]->data();
  const float* b = prepared.buffers[1]->data();
  float* c = prepared.buffers[2]->data();
  const auto m = static_cast<blasint>(shape.m);
  const auto n = static_cast<blasint>(shape.n);
  const auto k = static_cast<blasint>(shape.k);
  // A batched GEMM (the unfused attention core) is `batch` independent products of packed matrices.
  const std::int64_t a_size = shape.m * shape.k, b_size = shape.k * shape.n, c_size = shape.m * shape.n;
  for (std::int64_t product = 0; product < shape.batch; ++product)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a + product * a_size, k,
                b + product * b_size, n, 0.0f, c + product * c_size, n);
  if (context.inject("gemm")) c[0] += 1.0f;
}

// C[0,0] of product 0 and 7 random spots (seeded by the op index), each against a double-precision dot
// product with a tolerance that grows with k.
void verify_gemm(CpuContext& context, CpuOp& prepared) {
  const auto& shape = prepared.rank_op.op.gemm;
  const float* a = prepared.buffers[0]->data();
  const float* b = prepared.buffers[1]->data();
  const float* c = prepared.buffers[2]->data();
  const std::int64_t a_size = shape.m * shape.k, b_size = shape.k * shape.n, c_size = shape.m * shape.n;
  Random random(static_cast<std::uint64_t>(prepared.index) + 17);
  std::int64_t wrong = 0;
  std::string failure;
  constexpr int kSpots = 8;
  for (int spot = 0; spot < kSpots; ++spot) {
    const auto pick = [&](std::int64_t size) {
      return spot == 0 ? 0 : static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(size));
    };
    const std::int64_t product = pick(shape.batch);
    const std::int64_t row = pick(shape.m);
    const std::int64_t column = pick(shape.n);
    const float* a_product = a + product * a_size;
    const float* b_product = b + product * b_size;
    double want = 0;
    double magnitude = 0;
    for (std::int64_t inner = 0; inner < shape.k; ++inner) {
      const double product_value =
          static_cast<double>(a_product[row * shape.k + inner]) * b_product[inner * shape.n + column];
      want += product_value;
      magnitude += std::abs(product_value);
    }
    const double got = c[product * c_size + row * shape.n + column];
    const double tolerance = (static_cast<double>(shape.k) * 1.2e-7 + 1e-6) * magnitude + 1e-6;
    if (std::abs(got - want) > tolerance) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): C[{},{}] = {} but the reference says {}", prepared.index,
                              graph::describe(prepared.rank_op.op), row, column, got, want);
    }
  }
  context.checks.add(kSpots, wrong, failure);
}

}  // namespace

const CpuOpUnit kGemmUnit = {prepare_gemm, run_gemm, verify_gemm};

}  // namespace calo::exec::cpu
