#include "engine/kernels/swiglu.h"

#include <cmath>

namespace kvferry::engine::kernels {

void SwiGlu(const float* gu, int64_t rows, int64_t ffn_dim, float* out) {
  for (int64_t m = 0; m < rows; ++m) {
    const float* g = gu + m * 2 * ffn_dim;
    const float* u = g + ffn_dim;
    float* o = out + m * ffn_dim;
    for (int64_t i = 0; i < ffn_dim; ++i) o[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
  }
}

void SwiGluReference(const float* gu, int64_t rows, int64_t ffn_dim, float* out) {
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t i = 0; i < ffn_dim; ++i) {
      const float g = gu[m * 2 * ffn_dim + i];
      const float u = gu[m * 2 * ffn_dim + ffn_dim + i];
      const float silu = g / (1.0f + std::exp(-g));
      out[m * ffn_dim + i] = silu * u;
    }
  }
}

}  // namespace kvferry::engine::kernels
