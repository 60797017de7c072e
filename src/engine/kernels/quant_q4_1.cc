#include "engine/kernels/quant_q4_1.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

// trunc(v + 0.5) within [0, top], defined for every v (NaN: 0).
int Level(float v, float top) {
  const float t = v + 0.5f;
  if (!(t == t)) return 0;
  return static_cast<int>(std::clamp(t, 0.0f, top));
}

// The block's minimum and (max - min) / levels as ggml's reference quantizers find them.
void Range(const float* v, float levels, float* min, float* d) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int i = 0; i < 32; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  *min = lo;
  *d = (hi - lo) / levels;
}

template <typename Block>
void Decode(const Block& b, const int8_t* q, float* out) {
  const float d = F16ToF32(b.d), m = F16ToF32(b.m);
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(q[j]) + m;
}

}  // namespace

void QuantizeRowQ4_1(const float* x, int64_t n, BlockQ4_1* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float min, d;
    Range(v, 15.0f, &min, &d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    out[b].m = F32ToF16(min);
    for (int j = 0; j < 16; ++j) {
      const int lo = Level((v[j] - min) * id, 15.0f);
      const int hi = Level((v[j + 16] - min) * id, 15.0f);
      out[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void QuantizeRowQ5_1(const float* x, int64_t n, BlockQ5_1* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float min, d;
    Range(v, 31.0f, &min, &d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = F32ToF16(d);
    out[b].m = F32ToF16(min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = Level((v[j] - min) * id, 31.0f);
      const int hi = Level((v[j + 16] - min) * id, 31.0f);
      out[b].qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= static_cast<uint32_t>((lo & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((hi & 0x10) >> 4) << (j + 16);
    }
    std::memcpy(out[b].qh, &qh, 4);
  }
}

void Q4_1Ints(const BlockQ4_1& b, int8_t out[32]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>(b.qs[j] & 0x0F);
    out[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
  }
}

void Q5_1Ints(const BlockQ5_1& b, int8_t out[32]) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>((b.qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
    out[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* blocks, int64_t n, float* out) {
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    Q4_1Ints(blocks[b], q);
    Decode(blocks[b], q, out + b * 32);
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* blocks, int64_t n, float* out) {
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    Q5_1Ints(blocks[b], q);
    Decode(blocks[b], q, out + b * 32);
  }
}

}  // namespace kvferry::engine::kernels
