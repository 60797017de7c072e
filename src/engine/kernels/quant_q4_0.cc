#include "engine/kernels/quant_q4_0.h"

#include <algorithm>
#include <cmath>

#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {

namespace {

// ggml's MIN(15, (int8_t)(v + 8.5f)) for v in [-8, 8], defined for every v (NaN: 8, the zero).
int Nibble(float v) {
  const float t = v + 8.5f;
  if (!(t == t)) return 8;
  return static_cast<int>(std::clamp(t, 0.0f, 15.0f));  // truncates, as the cast does
}

}  // namespace

void QuantizeRowQ4_0(const float* x, int64_t n, BlockQ4_0* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
      if (amax < std::fabs(v[i])) {
        amax = std::fabs(v[i]);
        max = v[i];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int lo = Nibble(v[j] * id);
      const int hi = Nibble(v[j + 16] * id);
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void Q4_0Ints(const BlockQ4_0& b, int8_t out[32]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>((b.qs[j] & 0x0F) - 8);
    out[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
}

void DequantizeRowQ4_0(const BlockQ4_0* blocks, int64_t n, float* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < 16; ++j) {
      out[b * 32 + j] = d * static_cast<float>((blocks[b].qs[j] & 0x0F) - 8);
      out[b * 32 + j + 16] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
    }
  }
}

}  // namespace kvferry::engine::kernels
