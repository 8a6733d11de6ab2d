// FP8 in the simulator: an FP8 GEMM costs its FLOPs at the FP8 peak and the fitted FP8 efficiency, draws the
// FP8 GEMM's power, and a card without FP8 tensor cores refuses the precision.
#include <gtest/gtest.h>

#include "core/error.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::sim {
namespace {

graph::Op gemm_op(graph::DType dtype, double m, double n, double k) {
  graph::Op op;
  op.kind = graph::OpKind::kGemm;
  op.gemm.m = static_cast<std::int64_t>(m);
  op.gemm.n = static_cast<std::int64_t>(n);
  op.gemm.k = static_cast<std::int64_t>(k);
  op.gemm.dtype = dtype;
  op.flops = 2 * m * n * k;
  op.bytes = m * k + k * n + 2 * m * n;
  return op;
}

TEST(Fp8Sim, AnFp8GemmRunsAtTheFp8PeakTimesItsFittedEfficiency) {
  const GpuSpec gpu = load_cluster("h100-hgx-calibrated").gpu;
  ASSERT_GT(gpu.peak_fp8_flops, 0);
  ASSERT_GT(gpu.efficiency.gemm_fp8_max, 0);
  const double m = 8192, n = 28672, k = 4096;  // the measured fc1 shape (tests/fixtures/h100-fp8-gemm)
  const ComputeCost fp8 = compute_cost(gpu, gemm_op(graph::DType::kFp8, m, n, k));
  const ComputeCost bf16 = compute_cost(gpu, gemm_op(graph::DType::kBf16, m, n, k));
  // Same dimension curve, the FP8 peak and the FP8 best fraction of it in place of bf16's.
  const double expected_ratio =
      (gpu.peak_bf16_flops * gpu.efficiency.gemm_max) / (gpu.peak_fp8_flops * gpu.efficiency.gemm_fp8_max);
  EXPECT_NEAR(fp8.compute_s / bf16.compute_s, expected_ratio, 1e-12);
  EXPECT_EQ(fp8.power_class, PowerClass::kGemmFp8);
  // Rowwise scaling runs slower kernels: its own fitted fraction.
  const ComputeCost rowwise = compute_cost(gpu, gemm_op(graph::DType::kFp8Rowwise, m, n, k));
  EXPECT_NEAR(rowwise.compute_s / fp8.compute_s,
              gpu.efficiency.gemm_fp8_max / gpu.efficiency.gemm_fp8_rowwise_max, 1e-12);
}

TEST(Fp8Sim, AnFp8GemmDrawsTheFittedFp8PowerAndFilesWithoutOneFallBackToBf16s) {
  const GpuSpec gpu = load_cluster("h100-hgx-calibrated").gpu;
  EXPECT_GT(gpu.active_power_w[static_cast<int>(PowerClass::kGemmFp8)],
            gpu.active_power_w[static_cast<int>(PowerClass::kGemm)]);
  nlohmann::json described = to_json(load_cluster("h100-hgx-calibrated"));
  described["gpu"]["active_power_w"].erase("gemm_fp8");
  const GpuSpec fallback = parse_cluster(described, "no FP8 power").gpu;
  EXPECT_EQ(fallback.active_power_w[static_cast<int>(PowerClass::kGemmFp8)],
            fallback.active_power_w[static_cast<int>(PowerClass::kGemm)]);
}

TEST(Fp8Sim, Fp8TrainsFasterThanBf16AndACardWithoutFp8RefusesIt) {
  const model::ModelSpec model = model::slice_model(model::load_model("llama3-8b"), 4);
  parallel::Layout layout;
  layout.dp = 8;
  layout.global_batch = 16;
  layout.zero_stage = 1;
  auto step_s = [&](const std::string& cluster, parallel::Precision precision) {
    layout.precision = precision;
    const graph::Graph graph = graph::build_graph(model, parallel::resolve_layout(model, layout));
    SimOptions options;
    options.steps = 1;
    options.warmup_steps = 0;
    return simulate(graph, load_cluster(cluster), options).iteration_s;
  };
  const double bf16 = step_s("h100-hgx-calibrated", parallel::Precision::kBf16);
  const double fp8 = step_s("h100-hgx-calibrated", parallel::Precision::kFp8Tensorwise);
  const double delayed = step_s("h100-hgx-calibrated", parallel::Precision::kFp8Delayed);
  EXPECT_LT(fp8, bf16);
  EXPECT_LT(delayed, fp8);  // fused casts move fewer bytes than torchao's separate ones
  // The GEMMs run 1.8x faster; the rest of the step does not, so the step gains less than that.
  EXPECT_GT(fp8, bf16 / 1.9);
  try {
    step_s("a100-dgx", parallel::Precision::kFp8Tensorwise);
    FAIL() << "the A100 has no FP8 tensor cores";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("no FP8 tensor cores"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("--precision bf16"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace calo::sim
