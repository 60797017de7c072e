#include "engine/kernels/quant_q4_q5.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

// trunc(t) within [0, top], as ggml's casts compute it for t in range; NaN gives `zero`.
int Level(float t, float top, int zero) {
  if (!(t == t)) return zero;
  return static_cast<int>(std::clamp(t, 0.0f, top));  // truncates, as the cast does
}

// The first of the block's values of largest magnitude, with its sign (Q4_0/Q5_0's scale source).
float LargestMagnitude(const float* v) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 32; ++i) {
    if (amax < std::fabs(v[i])) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  }
  return max;
}

// 32 levels (0..31) into nibbles and, where `qh` is given, fifth bits.
void Pack(const int* q, uint8_t qs[16], uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    bits |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
  }
  if (qh != nullptr) std::memcpy(qh, &bits, 4);
}

// The 32 levels of nibbles and, where `qh` is given, fifth bits, minus `offset`.
void Unpack(const uint8_t qs[16], const uint8_t* qh, int offset, int8_t out[32]) {
  uint32_t bits = 0;
  if (qh != nullptr) std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>(((qs[j] & 0x0F) | (((bits >> j) & 1) << 4)) - offset);
    out[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((bits >> (j + 16)) & 1) << 4)) - offset);
  }
}

// Q4_0 / Q5_0 (levels 2 * half): d = largest / -half, q = trunc(x / d + half + 0.5).
template <typename Block>
void QuantizeSymmetric(const float* x, int64_t n, int half, Block* out, uint8_t* (*qh)(Block&)) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    const float d = LargestMagnitude(v) / static_cast<float>(-half);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int i = 0; i < 32; ++i) {
      q[i] = Level(v[i] * id + (static_cast<float>(half) + 0.5f), 2.0f * half - 1, half);
    }
    out[b].d = F32ToF16(d);
    Pack(q, out[b].qs, qh(out[b]));
  }
}

// Q4_1 / Q5_1 (`levels` steps): m = the minimum, d = (max - min) / levels, q = trunc((x - m) / d
// + 0.5).
template <typename Block>
void QuantizeWithMin(const float* x, int64_t n, int levels, Block* out, uint8_t* (*qh)(Block&)) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* v = x + b * 32;
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, v[i]);
      hi = std::max(hi, v[i]);
    }
    const float d = (hi - lo) / static_cast<float>(levels);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int i = 0; i < 32; ++i) q[i] = Level((v[i] - lo) * id + 0.5f, levels, 0);
    out[b].d = F32ToF16(d);
    out[b].m = F32ToF16(lo);
    Pack(q, out[b].qs, qh(out[b]));
  }
}

// The minimum of the `_1` types.
float MinOf(const BlockQ4_1& b) { return F16ToF32(b.m); }
float MinOf(const BlockQ5_1& b) { return F16ToF32(b.m); }

// d * q for n / 32 blocks, q from `ints` (plus m for the `_1` types).
template <typename Block>
void Dequantize(const Block* blocks, int64_t n, float* out, void (*ints)(const Block&, int8_t*)) {
  constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  int8_t q[32];
  for (int64_t b = 0; b < n / 32; ++b) {
    ints(blocks[b], q);
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < 32; ++j) {
      if constexpr (kHasMin) {
        out[b * 32 + j] = d * static_cast<float>(q[j]) + MinOf(blocks[b]);
      } else {
        out[b * 32 + j] = d * static_cast<float>(q[j]);
      }
    }
  }
}

uint8_t* NoFifthBits(BlockQ4_0&) { return nullptr; }
uint8_t* NoFifthBitsMin(BlockQ4_1&) { return nullptr; }
uint8_t* FifthBits(BlockQ5_0& b) { return b.qh; }
uint8_t* FifthBitsMin(BlockQ5_1& b) { return b.qh; }

}  // namespace

void QuantizeRowQ4_0(const float* x, int64_t n, BlockQ4_0* out) {
  QuantizeSymmetric(x, n, 8, out, NoFifthBits);
}
void QuantizeRowQ5_0(const float* x, int64_t n, BlockQ5_0* out) {
  QuantizeSymmetric(x, n, 16, out, FifthBits);
}
void QuantizeRowQ4_1(const float* x, int64_t n, BlockQ4_1* out) {
  QuantizeWithMin(x, n, 15, out, NoFifthBitsMin);
}
void QuantizeRowQ5_1(const float* x, int64_t n, BlockQ5_1* out) {
  QuantizeWithMin(x, n, 31, out, FifthBitsMin);
}

void Q4_0Ints(const BlockQ4_0& b, int8_t out[32]) { Unpack(b.qs, nullptr, 8, out); }
void Q5_0Ints(const BlockQ5_0& b, int8_t out[32]) { Unpack(b.qs, b.qh, 16, out); }
void Q4_1Ints(const BlockQ4_1& b, int8_t out[32]) { Unpack(b.qs, nullptr, 0, out); }
void Q5_1Ints(const BlockQ5_1& b, int8_t out[32]) { Unpack(b.qs, b.qh, 0, out); }

void DequantizeRowQ4_0(const BlockQ4_0* blocks, int64_t n, float* out) {
  Dequantize(blocks, n, out, Q4_0Ints);
}
void DequantizeRowQ5_0(const BlockQ5_0* blocks, int64_t n, float* out) {
  Dequantize(blocks, n, out, Q5_0Ints);
}
void DequantizeRowQ4_1(const BlockQ4_1* blocks, int64_t n, float* out) {
  Dequantize(blocks, n, out, Q4_1Ints);
}
void DequantizeRowQ5_1(const BlockQ5_1* blocks, int64_t n, float* out) {
  Dequantize(blocks, n, out, Q5_1Ints);
}

}  // namespace kvferry::engine::kernels
