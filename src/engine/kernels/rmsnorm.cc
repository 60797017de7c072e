#include "engine/kernels/rmsnorm.h"

#include <cmath>

#include "engine/kernels/simd.h"

namespace kvferry::engine::kernels {

void RmsNorm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* xr = x + m * dim;
    float* yr = y + m * dim;
    const float ss = Dot(xr, xr, dim);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * weight[i];
  }
}

void RmsNormReference(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                      float* y) {
  for (int64_t m = 0; m < rows; ++m) {
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t d8 = dim & ~int64_t{7};
    for (int64_t i = 0; i < d8; ++i) lanes[i % 8] += x[m * dim + i] * x[m * dim + i];
    float ss = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
               ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (int64_t i = d8; i < dim; ++i) ss += x[m * dim + i] * x[m * dim + i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[m * dim + i] = (x[m * dim + i] * inv) * weight[i];
  }
}

}  // namespace kvferry::engine::kernels
