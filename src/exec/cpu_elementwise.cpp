// CPU elementwise unit: the op's bytes moved through a norm (per 1024-value row), a SiLU activation, or a
// scale-and-shift for the other kinds; the unfused attention's softmax (forward or backward) over its score
// rows. --check recomputes a few values in double.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

// Values per norm row.
constexpr std::int64_t kNormRow = 1024;

// Reads half of the op's bytes and writes the other half (fp32 elements): buffers in, out; the unfused
// attention's softmax works on its s x s scores per (sequence, head) instead (backward adds dP).
void prepare_elementwise(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  const graph::Op& op = prepared.rank_op.op;
  const auto& shape = op.attention;
  prepared.elements = op.elementwise == graph::ElementwiseKind::kSoftmax
                          ? std::int64_t{shape.batch} * shape.heads * shape.seq * shape.seq
                          : std::max<std::int64_t>(1, static_cast<std::int64_t>(op.bytes / 8.0));
  prepared.buffers = {context.shared("elementwise.in", prepared.elements, seed),
                      context.shared("elementwise.out", prepared.elements, seed + 1)};
  if (op.elementwise == graph::ElementwiseKind::kSoftmax && shape.backward)
    prepared.buffers.push_back(context.shared("elementwise.dprob", prepared.elements, seed + 2));
}

/// Row r of the unfused attention's scores (query position r % s) sees keys [0, r % s] when causal.
std::int64_t softmax_visible(const graph::AttentionShape& shape, std::int64_t row) {
  return shape.causal ? row % shape.seq + 1 : shape.seq;
}

/// Softmax of one row over its visible keys (masked keys 0); backward: out = P (dP - rowsum(P dP)) with
/// P = in. Computed in `Real` (float to execute, double for the check's reference).
template <typename Real>
void softmax_row(const float* in, const float* dprob, float* out, std::int64_t visible, std::int64_t columns,
                 std::vector<Real>& row) {
  row.assign(static_cast<size_t>(columns), Real(0));
  if (dprob == nullptr) {
    Real max_score = in[0];
    for (std::int64_t col = 1; col < visible; ++col) max_score = std::max<Real>(max_score, in[col]);
    Real sum = 0;
    for (std::int64_t col = 0; col < visible; ++col) sum += row[col] = std::exp(Real(in[col]) - max_score);
    for (std::int64_t col = 0; col < visible; ++col) row[col] /= sum;
  } else {
    Real dot = 0;
    for (std::int64_t col = 0; col < visible; ++col) dot += Real(in[col]) * Real(dprob[col]);
    for (std::int64_t col = 0; col < visible; ++col) row[col] = Real(in[col]) * (Real(dprob[col]) - dot);
  }
  if (out != nullptr)
    for (std::int64_t col = 0; col < columns; ++col) out[col] = static_cast<float>(row[col]);
}

/// The unfused attention's softmax (forward) or its backward over every score row.
void run_softmax(CpuContext& context, CpuOp& prepared) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t s = shape.seq;
  const std::int64_t rows = prepared.elements / s;
  const float* in = prepared.buffers[0]->data();
  float* out = prepared.buffers[1]->data();
  const float* dprob = shape.backward ? prepared.buffers[2]->data() : nullptr;
  std::vector<float> row;
  for (std::int64_t at = 0; at < rows; ++at)
    softmax_row(in + at * s, dprob == nullptr ? nullptr : dprob + at * s, out + at * s,
                softmax_visible(shape, at), s, row);
  if (context.inject("softmax")) out[0] += 1.0f;
}

/// --check of the softmax: the first and last row recomputed in double.
void verify_softmax(CpuContext& context, CpuOp& prepared) {
  const auto& shape = prepared.rank_op.op.attention;
  const std::int64_t s = shape.seq;
  const std::int64_t rows = prepared.elements / s;
  const float* in = prepared.buffers[0]->data();
  const float* out = prepared.buffers[1]->data();
  const float* dprob = shape.backward ? prepared.buffers[2]->data() : nullptr;
  std::int64_t wrong = 0;
  std::string failure;
  std::vector<double> reference;
  for (std::int64_t at : {std::int64_t{0}, rows - 1}) {
    softmax_row(in + at * s, dprob == nullptr ? nullptr : dprob + at * s, nullptr, softmax_visible(shape, at),
                s, reference);
    for (std::int64_t col = 0; col < s; ++col) {
      const double want = reference[static_cast<size_t>(col)], got = out[at * s + col];
      if (std::abs(got - want) <= 1e-5 * (1.0 + std::abs(want))) continue;
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): row {} key {} = {} but the reference says {}", prepared.index,
                              graph::describe(prepared.rank_op.op), at, col, got, want);
      break;
    }
  }
  context.checks.add(2, wrong, failure);
}

/// Norm, activation and the other pointwise kinds (the softmax has its own run_softmax).
void run_pointwise(CpuContext& context, CpuOp& prepared) {
  const auto kind = prepared.rank_op.op.elementwise;
  const float* in = prepared.buffers[0]->data();
  float* out = prepared.buffers[1]->data();
  const std::int64_t count = prepared.elements;
  if (kind == graph::ElementwiseKind::kNorm) {
    for (std::int64_t row_begin = 0; row_begin < count; row_begin += kNormRow) {
      const std::int64_t row_end = std::min(count, row_begin + kNormRow);
      float squares = 0;
      for (std::int64_t at = row_begin; at < row_end; ++at) squares += in[at] * in[at];
      const float inverse = 1.0f / std::sqrt(squares / static_cast<float>(row_end - row_begin) + 1e-6f);
      for (std::int64_t at = row_begin; at < row_end; ++at) out[at] = in[at] * inverse;
    }
  } else if (kind == graph::ElementwiseKind::kActivation) {
    for (std::int64_t at = 0; at < count; ++at) out[at] = in[at] / (1.0f + std::exp(-in[at]));
  } else {
    for (std::int64_t at = 0; at < count; ++at) out[at] = 0.5f * in[at] + 1.0f;
  }
  if (context.inject("elementwise")) out[0] += 1.0f;
}

/// --check: the first, middle and last value recomputed in double (the softmax: see verify_softmax).
void verify_pointwise(CpuContext& context, CpuOp& prepared) {
  const auto kind = prepared.rank_op.op.elementwise;
  const float* in = prepared.buffers[0]->data();
  const float* out = prepared.buffers[1]->data();
  const std::int64_t count = prepared.elements;
  auto expected = [&](std::int64_t index, const float* source) -> double {
    const double x = source[index];
    switch (kind) {
      case graph::ElementwiseKind::kActivation:
        return x / (1.0 + std::exp(-x));
      case graph::ElementwiseKind::kNorm: {
        const std::int64_t row_begin = index - index % kNormRow;
        const std::int64_t row_end = std::min(count, row_begin + kNormRow);
        double squares = 0;
        for (std::int64_t at = row_begin; at < row_end; ++at)
          squares += static_cast<double>(source[at]) * source[at];
        return x / std::sqrt(squares / static_cast<double>(row_end - row_begin) + 1e-6);
      }
      default:
        return 0.5 * x + 1.0;
    }
  };
  std::int64_t wrong = 0;
  std::string failure;
  for (std::int64_t index : {std::int64_t{0}, count / 2, count - 1}) {
    const double want = expected(index, in);
    if (std::abs(out[index] - want) > 1e-4 * (1.0 + std::abs(want))) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} ({}): out[{}] = {} but the reference says {}", prepared.index,
                              graph::describe(prepared.rank_op.op), index, out[index], want);
    }
  }
  context.checks.add(3, wrong, failure);
}

/// Calls `softmax` for a softmax op and `pointwise` for every other elementwise kind.
template <void (*softmax)(CpuContext&, CpuOp&), void (*pointwise)(CpuContext&, CpuOp&)>
void by_elementwise_kind(CpuContext& context, CpuOp& prepared) {
  const bool is_softmax = prepared.rank_op.op.elementwise == graph::ElementwiseKind::kSoftmax;
  (is_softmax ? softmax : pointwise)(context, prepared);
}

}  // namespace

const CpuOpUnit kElementwiseUnit = {prepare_elementwise, by_elementwise_kind<run_softmax, run_pointwise>,
                                    by_elementwise_kind<verify_softmax, verify_pointwise>};

}  // namespace calo::exec::cpu
