// AdamW kernel over the rank's parameter shard (fp32 master parameters, gradients and moments).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace calo::exec::cuda {

/// AdamW hyper-parameters (bias correction folded into lr, as in a steady-state step).
struct AdamWConfig {
  float lr = 1e-4f;           ///< learning rate
  float beta1 = 0.9f;         ///< first-moment decay
  float beta2 = 0.95f;        ///< second-moment decay
  float eps = 1e-8f;          ///< denominator epsilon
  float weight_decay = 0.1f;  ///< decoupled weight decay
};

/// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m / (sqrt(v) + eps) + wd p), over `count` values.
void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t count,
                const AdamWConfig& config, cudaStream_t stream);

}  // namespace calo::exec::cuda
