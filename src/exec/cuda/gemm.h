// cuBLASLt GEMMs in row-major terms: C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C, bf16 operands (or
// e4m3 with a dequantisation scale each), fp32 accumulation, bf16 C, optional strided batch. The heuristic's
// best algorithm is cached per shape.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "graph/graph.h"

namespace calo::exec::cuda {

/// One (batched) row-major GEMM. Leading dimensions are of the stored matrices (row-major row length).
struct GemmCall {
  std::int64_t m = 0;         ///< rows of C
  std::int64_t n = 0;         ///< columns of C
  std::int64_t k = 0;         ///< reduction length
  bool transpose_a = false;   ///< A is stored [k, m] (op(A) = A^T)
  bool transpose_b = false;   ///< B is stored [n, k] (op(B) = B^T)
  std::int64_t lda = 0;       ///< row length of stored A (0: packed)
  std::int64_t ldb = 0;       ///< row length of stored B (0: packed)
  std::int64_t ldc = 0;       ///< row length of C (0: packed = n)
  std::int64_t batch = 1;     ///< matrices
  std::int64_t stride_a = 0;  ///< values between A matrices
  std::int64_t stride_b = 0;  ///< values between B matrices
  std::int64_t stride_c = 0;  ///< values between C matrices
  float alpha = 1.0f;         ///< scale of the product
  float beta = 0.0f;          ///< scale of C's previous value
  /// e4m3 operands with one scale each (cuBLASLt's FP8 GEMM takes only A [m,k] as stored and B stored [n,k]:
  /// the graph's cast ops make those copies).
  bool fp8 = false;
};

/// Transposes of a graph GEMM by pass (weights stored [out, in] as in PyTorch): forward Y = X W^T
/// (B transposed), dgrad dX = dY W (none), wgrad dW = dY^T X in graph terms C = X^T dY (A transposed);
/// the unfused attention's O = P V (none) and dP = dO V^T (B transposed); packed strides for batched shapes;
/// FP8 GEMMs always A as stored and B transposed (the layout cuBLASLt's FP8 kernels take).
GemmCall gemm_call_for(const graph::GemmShape& shape);

/// A cuBLASLt handle, a workspace and the algorithm cache of one device.
class GemmRunner {
 public:
  /// Creates the handle and a workspace of `workspace_bytes` on the current device.
  explicit GemmRunner(std::size_t workspace_bytes = 64ull << 20);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  /// Enqueues `call` on `stream` with a, b, c (device pointers; a and b e4m3 under call.fp8, with device
  /// floats `a_scale`, `b_scale` their dequantisation scales). Throws RuntimeFailure when no algorithm
  /// supports the shape.
  void run(const GemmCall& call, const void* a, const void* b, void* c, cudaStream_t stream,
           const float* a_scale = nullptr, const float* b_scale = nullptr);

  /// Distinct shapes whose algorithm was chosen so far.
  std::size_t cached_shapes() const { return plans_.size(); }

 private:
  struct Plan;
  using Key =
      std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, std::int64_t, std::int64_t,
                 std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;
  Plan& plan_for(const GemmCall& call);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<Key, Plan*> plans_;
};

}  // namespace calo::exec::cuda
