#include "engine/kernels/quant_q5_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

// ggml's MIN(31, (int8_t)(v + 16.5f)) for v in [-16, 16], defined for every v (NaN: 16, the
// zero).
int Quint(float v) {
  const float t = v + 16.5f;
  if (!(t == t)) return 16;
  return static_cast<int>(std::clamp(t, 0.0f, 31.0f));  // truncates, as the cast does
}

}  // namespace

void QuantizeRowQ5_0(const float* x, int64_t n, BlockQ5_0* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
      if (amax < std::fabs(v[i])) {
        amax = std::fabs(v[i]);
        max = v[i];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = Quint(v[j] * id);
      const int hi = Quint(v[j + 16] * id);
      out[b].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= static_cast<uint32_t>((lo & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((hi & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(out[b].qh, &qh, 4);
  }
}

void Q5_0Ints(const BlockQ5_0& b, int8_t out[32]) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>(((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16);
    out[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* blocks, int64_t n, float* out) {
  int8_t ints[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = F16ToF32(blocks[b].d);
    Q5_0Ints(blocks[b], ints);
    for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * static_cast<float>(ints[j]);
  }
}

}  // namespace kvferry::engine::kernels
