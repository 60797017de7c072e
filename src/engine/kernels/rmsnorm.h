// RMSNorm (internal): y[m] = x[m] * (1 / sqrt(mean(x[m]^2) + eps)) * weight, per row.
// Determinism: the sum of squares is the canonical Dot(x[m], x[m], dim) (simd.h); each row is
// computed alone, so a row's result does not depend on the other rows.
// Thread-safety: pure function; `y` may alias `x`.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y);
void RmsNormReference(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                      float* y);

}  // namespace kvferry::engine::kernels
