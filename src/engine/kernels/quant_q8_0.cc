#include "engine/kernels/quant_q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/simd.h"
#include "kvferry/common/half.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#define KVF_Q8_0_AVX2 1
#endif

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

namespace {

// One block of the activations' quantizer, as the header defines it.
void ActivationBlock(const float* v, BlockQ8_0* out, float* sum_out) {
  const float amax = AbsMax(v);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const float d = amax / 127.0f;
  out->d = F32ToF16(d);
  int32_t sum = 0;
  for (int64_t i = 0; i < kQ8_0Block; ++i) {
    out->q[i] = ToInt8(std::nearbyint(v[i] * id));  // default mode: half-even
    sum += out->q[i];
  }
  if (sum_out != nullptr) *sum_out = F16ToF32(F32ToF16(d * static_cast<float>(sum)));
}

#if KVF_Q8_0_AVX2
// The same block with AVX2: the same products, rounded half-even by vroundps, so the same bytes.
// A block holding a NaN or an infinity, or so small that 127 / max overflows, takes the scalar
// code (vcvtps2dq would turn what ToInt8 clamps into -128).
__attribute__((target("avx2,fma,f16c"))) void ActivationBlockAvx2(const float* v, BlockQ8_0* out,
                                                                  float* sum_out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 x[4], amax8 = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm256_loadu_ps(v + 8 * i);
    amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, x[i]), amax8);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(x[i], x[i], _CMP_UNORD_Q));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float amax = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_shuffle_ps(m4, m4, 1)));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  if (_mm256_movemask_ps(nan) != 0 || !std::isfinite(amax) || !std::isfinite(id)) {
    ActivationBlock(v, out, sum_out);
    return;
  }
  const float d = amax / 127.0f;
  out->d = F32ToF16(d);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x[i], _mm256_set1_ps(id)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
  // int32 -> int8 in order: the packs interleave 128-bit lanes, the permute restores them.
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->q), bytes);
  if (sum_out != nullptr) {
    *sum_out = F16ToF32(F32ToF16(d * static_cast<float>(_mm_cvtsi128_si32(s4))));
  }
}
#endif

}  // namespace

void QuantizeActivationsQ8_0(const float* x, int64_t n, BlockQ8_0* out, float* sums) {
#if KVF_Q8_0_AVX2
  const bool avx2 = CpuHasAvx2();
#else
  const bool avx2 = false;
#endif
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    float* sum = sums != nullptr ? sums + b : nullptr;
#if KVF_Q8_0_AVX2
    if (avx2) {
      ActivationBlockAvx2(x + b * kQ8_0Block, out + b, sum);
      continue;
    }
#endif
    (void)avx2;
    ActivationBlock(x + b * kQ8_0Block, out + b, sum);
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
