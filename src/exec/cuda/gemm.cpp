// cuBLASLt GEMM runner (row-major calls mapped onto column-major cuBLASLt: C^T = op(B)^T op(A)^T).
#include "exec/cuda/gemm.h"

#include <fmt/format.h>

#include <memory>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"

namespace calo::exec::cuda {

struct GemmRunner::Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt "A" = our B
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt "B" = our A
  cublasLtMatrixLayout_t layout_c = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
};

GemmCall gemm_call_for(const graph::GemmShape& shape) {
  GemmCall call;
  call.m = shape.m;
  call.n = shape.n;
  call.k = shape.k;
  call.transpose_a = shape.pass == graph::GemmPass::kWgrad;
  call.transpose_b = shape.pass == graph::GemmPass::kForward;
  // Unfused attention: O = P V and dP = dO V^T read V [s, d] as stored, so their B transposes flip.
  if (shape.weight == graph::GemmWeight::kAttnContext && shape.pass != graph::GemmPass::kWgrad)
    call.transpose_b = shape.pass == graph::GemmPass::kDgrad;
  if (shape.dtype == graph::DType::kFp8 || shape.dtype == graph::DType::kFp8Rowwise) {
    call.fp8 = true;
    call.transpose_a = false;
    call.transpose_b = true;
  }
  if (shape.batch > 1) {
    call.batch = shape.batch;
    call.stride_a = shape.m * shape.k;
    call.stride_b = shape.k * shape.n;
    call.stride_c = shape.m * shape.n;
  }
  return call;
}

GemmRunner::GemmRunner(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  CALO_CUBLAS(cublasLtCreate(&handle_));
  CALO_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmRunner::~GemmRunner() {
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan->layout_a);
    cublasLtMatrixLayoutDestroy(plan->layout_b);
    cublasLtMatrixLayoutDestroy(plan->layout_c);
    cublasLtMatmulDescDestroy(plan->operation);
    delete plan;
  }
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

GemmRunner::Plan& GemmRunner::plan_for(const GemmCall& call) {
  const Key key{call.m,        call.n,        call.k,   call.transpose_a, call.transpose_b,
                call.lda,      call.ldb,      call.ldc, call.batch,       call.stride_a,
                call.stride_b, call.stride_c, call.fp8, call.beta != 0.0f};
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  // Stored row-major A: [m,k] (or [k,m] transposed) = column-major [k,m] (or [m,k]).
  const std::int64_t a_cols = call.transpose_a ? call.k : call.m;  // column-major columns
  const std::int64_t a_rows = call.transpose_a ? call.m : call.k;
  const std::int64_t b_cols = call.transpose_b ? call.n : call.k;
  const std::int64_t b_rows = call.transpose_b ? call.k : call.n;
  const std::int64_t lda = call.lda > 0 ? call.lda : a_rows;
  const std::int64_t ldb = call.ldb > 0 ? call.ldb : b_rows;
  const std::int64_t ldc = call.ldc > 0 ? call.ldc : call.n;
  CALO_CUBLAS(cublasLtMatmulDescCreate(&plan->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t lt_transa = call.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t lt_transb = call.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CALO_CUBLAS(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &lt_transa,
                                             sizeof(lt_transa)));
  CALO_CUBLAS(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &lt_transb,
                                             sizeof(lt_transb)));
  const cudaDataType_t operand_type = call.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (call.fp8) {
    // cuBLASLt suggests scaling algorithms only to a descriptor that has scale pointers: the workspace stands
    // in (never read before run() sets each call's own).
    const void* placeholder = workspace_;
    for (const auto attribute : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER})
      CALO_CUBLAS(
          cublasLtMatmulDescSetAttribute(plan->operation, attribute, &placeholder, sizeof(placeholder)));
  }
  CALO_CUBLAS(cublasLtMatrixLayoutCreate(&plan->layout_a, operand_type, static_cast<std::uint64_t>(b_rows),
                                         static_cast<std::uint64_t>(b_cols), ldb));
  CALO_CUBLAS(cublasLtMatrixLayoutCreate(&plan->layout_b, operand_type, static_cast<std::uint64_t>(a_rows),
                                         static_cast<std::uint64_t>(a_cols), lda));
  CALO_CUBLAS(cublasLtMatrixLayoutCreate(&plan->layout_c, CUDA_R_16BF, static_cast<std::uint64_t>(call.n),
                                         static_cast<std::uint64_t>(call.m), ldc));
  if (call.batch > 1) {
    const auto batch = static_cast<std::int32_t>(call.batch);
    const std::pair<cublasLtMatrixLayout_t, std::int64_t> layouts[] = {
        {plan->layout_a, call.stride_b}, {plan->layout_b, call.stride_a}, {plan->layout_c, call.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      CALO_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                   sizeof(batch)));
      CALO_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                   &stride, sizeof(stride)));
    }
  }
  cublasLtMatmulPreference_t preference = nullptr;
  CALO_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  CALO_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->operation, plan->layout_a, plan->layout_b, plan->layout_c,
                                     plan->layout_c, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw RuntimeFailure(
        fmt::format("cuBLASLt has no algorithm for {} GEMM m={} n={} k={} ta={} tb={} batch={} "
                    "(status {})",
                    call.fp8 ? "FP8" : "bf16", call.m, call.n, call.k, call.transpose_a, call.transpose_b,
                    call.batch, static_cast<int>(status)));
  }
  plan->algorithm = result.algo;
  Plan* raw = plan.release();
  plans_.emplace(key, raw);
  return *raw;
}

void GemmRunner::run(const GemmCall& call, const void* a, const void* b, void* c, cudaStream_t stream,
                     const float* a_scale, const float* b_scale) {
  Plan& plan = plan_for(call);
  if (call.fp8) {  // cuBLASLt's "A" is our B and its "B" our A (row-major mapped onto column-major)
    CALO_CUBLAS(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                               sizeof(b_scale)));
    CALO_CUBLAS(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                               sizeof(a_scale)));
  }
  CALO_CUBLAS(cublasLtMatmul(handle_, plan.operation, &call.alpha, b, plan.layout_a, a, plan.layout_b,
                             &call.beta, c, plan.layout_c, c, plan.layout_c, &plan.algorithm, workspace_,
                             workspace_bytes_, stream));
}

}  // namespace calo::exec::cuda
