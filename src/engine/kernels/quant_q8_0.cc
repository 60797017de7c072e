#include "engine/kernels/quant_q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {

namespace {

// r (a rounded value) as a signed byte: clamped to [-127, 127], NaN as 0, so a non-finite input
// (a model whose activations overflowed) gives a defined block, never an undefined conversion.
int8_t ToInt8(float r) {
  if (!(r == r)) return 0;
  return static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
}

float AbsMax(const float* v) {
  float amax = 0;
  for (int64_t i = 0; i < kQ8_0Block; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

}  // namespace

void QuantizeRowQ8_0(const float* x, int64_t n, BlockQ8_0* out) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    const float* v = x + b * kQ8_0Block;
    const float d = AbsMax(v) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    for (int64_t i = 0; i < kQ8_0Block; ++i) {
      out[b].q[i] = ToInt8(std::round(v[i] * id));
    }
  }
}

void QuantizeActivationsQ8_0(const float* x, int64_t n, BlockQ8_0* out, float* sums) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    const float* v = x + b * kQ8_0Block;
    const float amax = AbsMax(v);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d = amax / 127.0f;
    out[b].d = F32ToF16(d);
    int32_t sum = 0;
    for (int64_t i = 0; i < kQ8_0Block; ++i) {
      out[b].q[i] = ToInt8(std::nearbyint(v[i] * id));  // default mode: half-even
      sum += out[b].q[i];
    }
    if (sums != nullptr) sums[b] = F16ToF32(F32ToF16(d * static_cast<float>(sum)));
  }
}

void Q8_0Ints(const BlockQ8_0& b, int8_t out[32]) { std::memcpy(out, b.q, 32); }

void DequantizeRowQ8_0(const BlockQ8_0* blocks, int64_t n, float* out) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    const float d = F16ToF32(blocks[b].d);
    for (int64_t i = 0; i < kQ8_0Block; ++i) {
      out[b * kQ8_0Block + i] = d * static_cast<float>(blocks[b].q[i]);
    }
  }
}

}  // namespace kvferry::engine::kernels
