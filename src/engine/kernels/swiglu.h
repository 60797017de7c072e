// SwiGLU activation (internal): out[m][i] = silu(gu[m][i]) * gu[m][F + i], where gu is the
// fused gate|up projection [rows][2F] and silu(g) = g / (1 + exp(-g)).
// Determinism: elementwise; each value depends only on its two inputs.
// Thread-safety: pure function.
#pragma once

#include <cstdint>

namespace kvferry::engine::kernels {

void SwiGlu(const float* gu, int64_t rows, int64_t ffn_dim, float* out);
void SwiGluReference(const float* gu, int64_t rows, int64_t ffn_dim, float* out);

}  // namespace kvferry::engine::kernels
