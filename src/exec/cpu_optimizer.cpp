// CPU optimizer unit: one AdamW step over the rank's parameter shard in fp32; --check computes three updated
// parameters in double before the step and compares them after it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "exec/cpu_internal.h"

namespace calo::exec::cpu {
namespace {

constexpr float kLr = 1e-4f;
constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.95f;
constexpr float kEps = 1e-8f;
constexpr float kWeightDecay = 0.1f;

// Buffers (one value per parameter): param, grad, first moment m, second moment v (positive).
void prepare_optimizer(CpuContext& context, CpuOp& prepared, std::uint64_t seed) {
  prepared.elements = std::max<std::int64_t>(1, static_cast<std::int64_t>(prepared.rank_op.op.parameters));
  prepared.buffers = {
      context.owned(prepared.elements, seed), context.owned(prepared.elements, seed + 1, 1e-3f),
      context.owned(prepared.elements, seed + 2, 1e-3f), context.owned(prepared.elements, seed + 3, 1e-6f)};
  for (float& value : *prepared.buffers[3]) value = std::abs(value);  // second moment is positive
}

// The parameters --check compares: first, middle, last.
std::array<std::int64_t, 3> checked_spots(const CpuOp& prepared) {
  const std::int64_t count = prepared.elements;
  return {0, count / 2, count - 1};
}

void run_optimizer(CpuContext& context, CpuOp& prepared) {
  float* param = prepared.buffers[0]->data();
  const float* grad = prepared.buffers[1]->data();
  float* m = prepared.buffers[2]->data();
  float* v = prepared.buffers[3]->data();
  const std::int64_t count = prepared.elements;
  if (context.config.check) {  // the expected updates, from the values before the step
    prepared.reference.clear();
    for (const std::int64_t at : checked_spots(prepared)) {
      const double next_m =
          kBeta1 * static_cast<double>(m[at]) + (1 - kBeta1) * static_cast<double>(grad[at]);
      const double next_v =
          kBeta2 * static_cast<double>(v[at]) + (1 - kBeta2) * static_cast<double>(grad[at]) * grad[at];
      prepared.reference.push_back(param[at] -
                                   kLr * (next_m / (std::sqrt(next_v) + kEps) + kWeightDecay * param[at]));
    }
  }
  for (std::int64_t at = 0; at < count; ++at) {
    m[at] = kBeta1 * m[at] + (1 - kBeta1) * grad[at];
    v[at] = kBeta2 * v[at] + (1 - kBeta2) * grad[at] * grad[at];
    param[at] -= kLr * (m[at] / (std::sqrt(v[at]) + kEps) + kWeightDecay * param[at]);
  }
  if (context.inject("optimizer")) param[0] += 1.0f;
}

// --check: the updated parameters against the expected updates run_optimizer computed before the step.
void verify_optimizer(CpuContext& context, CpuOp& prepared) {
  const float* param = prepared.buffers[0]->data();
  const auto spots = checked_spots(prepared);
  std::int64_t wrong = 0;
  std::string failure;
  for (size_t spot = 0; spot < spots.size(); ++spot) {
    const double got = param[spots[spot]];
    const double want = prepared.reference[spot];
    if (std::abs(got - want) > 1e-6 * (1.0 + std::abs(want))) {
      ++wrong;
      if (failure.empty())
        failure = fmt::format("op {} (optimizer): param[{}] = {} but AdamW says {}", prepared.index,
                              spots[spot], got, want);
    }
  }
  context.checks.add(3, wrong, failure);
}

}  // namespace

const CpuOpUnit kOptimizerUnit = {prepare_optimizer, run_optimizer, verify_optimizer};

}  // namespace calo::exec::cpu
