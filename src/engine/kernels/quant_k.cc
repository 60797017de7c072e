#include "engine/kernels/quant_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/simd.h"
#include "kvferry/common/half.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#define KVF_Q8_K_AVX2 1
#endif

namespace kvferry::engine::kernels {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group is all zero

// Round half to even, as ggml's nearest_int computes it for |v| < 2^22 (its precondition);
// outside that clamped, and NaN as 0, so every input gives a defined integer.
int NearestInt(float v) {
  if (!(v == v)) return 0;
  return static_cast<int>(std::nearbyint(std::clamp(v, -4194303.0f, 4194303.0f)));
}

// Sub-block j's 6-bit scale and minimum out of Q4_K's / Q5_K's 12 scale bytes (ggml's
// get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in byte j + 4's nibbles
// with their top 2 bits in bytes j - 4 and j.
void ScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void PackScaleMin(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    q[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

// ggml's make_qkx2_quants: levels L in [0, nmax] and (scale, -min) for n values under `weights`,
// the best weighted squared error over nstep + 1 candidate scales. Returns the scale; *the_min
// gets the (non-negative) minimum to subtract.
float FitScaleMin(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                  float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min || !(max - min == max - min)) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale, best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      aux[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
      const float w = weights[i], l = aux[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      cur_error += weights[i] * (diff * diff);
    }
    if (cur_error < best_error) {
      std::copy(aux, aux + n, L);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K / Q5_K (levels 0..nmax): 8 sub-blocks' scales and minimums fitted, quantized to 6 bits
// under d = max scale / 63 and dmin = max minimum / 63, then every value re-quantized under them.
// Writes d, dmin and scales into `head` and the 256 levels into L.
void QuantizeScaleMinBlock(const float* x, int nmax, float rmin, int nstep, uint16_t* d,
                           uint16_t* dmin, uint8_t scales[12], uint8_t L[256]) {
  float sub_scales[8], mins[8], weights[32], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    sub_scales[j] =
        FitScaleMin(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, sub_scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const auto ls = static_cast<uint8_t>(std::clamp(NearestInt(inv_scale * sub_scales[j]), 0, 63));
    const auto lm = static_cast<uint8_t>(std::clamp(NearestInt(inv_min * mins[j]), 0, 63));
    PackScaleMin(j, ls, lm, scales);
  }
  *d = F32ToF16(max_scale / 63.f);
  *dmin = F32ToF16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMin(j, scales, &sc, &m);
    const float dj = F16ToF32(*d) * sc;
    if (dj == 0) continue;
    const float dm = F16ToF32(*dmin) * m;
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] =
          static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + i] + dm) / dj), 0, nmax));
    }
  }
}

// Q4_K's / Q5_K's nibbles: each 64 values as 32 bytes, l low and 32 + l high.
void PackNibbles(const uint8_t L[256], uint8_t qs[128]) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * c + l] =
          static_cast<uint8_t>((L[64 * c + l] & 0xF) | ((L[64 * c + 32 + l] & 0xF) << 4));
    }
  }
}

// The scales and minimums of 8 sub-blocks as KInts' 16 groups.
void ScaleMinGroups(uint16_t d, uint16_t dmin, const uint8_t scales[12], KInts* out) {
  out->d = F16ToF32(d);
  out->dmin = F16ToF32(dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMin(j, scales, &sc, &m);
    out->scales[2 * j] = out->scales[2 * j + 1] = sc;
    out->mins[2 * j] = out->mins[2 * j + 1] = m;
  }
}

// ggml's make_qx_quants with rmse_type 1 (weights x^2), nmax 32: signed levels in [-32, 31] for
// n values, the scale the best of 19 candidates by weighted least squares. L gets level + 32.
float FitSignedScale(int n, const float* x, int8_t* L) {
  constexpr int nmax = 32;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax >= kGroupMaxEps)) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  auto levels = [&](float iscale, float* sumlx, float* suml2, int8_t* out) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      if (out != nullptr) out[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * static_cast<float>(l);
      *suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float sumlx, suml2;
  levels(-static_cast<float>(nmax) / max, &sumlx, &suml2, L);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    levels(iscale, &sumlx, &suml2, nullptr);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      levels(iscale, &sumlx, &suml2, L);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q6_K's low nibbles and high bit pairs of 256 levels (0..63): each 128 values as 64 bytes of
// nibbles (l and 64 + l in byte l, 32 + l and 96 + l in byte 32 + l) and 32 bytes of bit pairs.
void PackQ6(const int8_t L[256], BlockQ6_K* out) {
  for (int h = 0; h < 2; ++h) {
    const int8_t* v = L + 128 * h;
    uint8_t* ql = out->ql + 64 * h;
    uint8_t* qh = out->qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((v[l] & 0xF) | ((v[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 0xF) | ((v[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                   ((v[l + 96] >> 4) << 6));
    }
  }
}

void QuantizeQ6Block(const float* x, BlockQ6_K* out) {
  int8_t L[256];
  float scales[16], max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = FitSignedScale(16, x + 16 * g, L + 16 * g);
    if (std::fabs(scales[g]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[g]);
      max_scale = scales[g];
    }
  }
  std::memset(out, 0, sizeof(*out));
  if (!(max_abs_scale >= kGroupMaxEps)) return;  // d = 0: all zero
  const float iscale = -128.f / max_scale;
  out->d = F32ToF16(1 / iscale);
  for (int g = 0; g < 16; ++g) {
    out->scales[g] = static_cast<int8_t>(std::clamp(NearestInt(iscale * scales[g]), -128, 127));
  }
  for (int g = 0; g < 16; ++g) {
    const float d = F16ToF32(out->d) * out->scales[g];
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      L[16 * g + i] = static_cast<int8_t>(std::clamp(NearestInt(x[16 * g + i] / d), -32, 31) + 32);
    }
  }
  PackQ6(L, out);
}

}  // namespace

void Q4_KInts(const BlockQ4_K& b, KInts* out) {
  ScaleMinGroups(b.d, b.dmin, b.scales, out);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      out->w[64 * c + l] = static_cast<int8_t>(b.qs[32 * c + l] & 0xF);
      out->w[64 * c + 32 + l] = static_cast<int8_t>(b.qs[32 * c + l] >> 4);
    }
  }
}

void Q5_KInts(const BlockQ5_K& b, KInts* out) {
  ScaleMinGroups(b.d, b.dmin, b.scales, out);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = ((b.qh[l] >> (2 * c)) & 1) << 4, hi = ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
      out->w[64 * c + l] = static_cast<int8_t>((b.qs[32 * c + l] & 0xF) | lo);
      out->w[64 * c + 32 + l] = static_cast<int8_t>((b.qs[32 * c + l] >> 4) | hi);
    }
  }
}

void Q6_KInts(const BlockQ6_K& b, KInts* out) {
  out->d = F16ToF32(b.d);
  out->dmin = 0.0f;
  for (int g = 0; g < 16; ++g) {
    out->scales[g] = b.scales[g];
    out->mins[g] = 0;
  }
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* w = out->w + 128 * h;
    for (int l = 0; l < 32; ++l) {
      w[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      w[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      w[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      w[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

void QuantizeRowQ4_K(const float* x, int64_t n, BlockQ4_K* out) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    uint8_t L[256];
    QuantizeScaleMinBlock(x + b * kSuperBlock, 15, -1.0f, 20, &out[b].d, &out[b].dmin,
                          out[b].scales, L);
    PackNibbles(L, out[b].qs);
  }
}

void QuantizeRowQ5_K(const float* x, int64_t n, BlockQ5_K* out) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    uint8_t L[256];
    QuantizeScaleMinBlock(x + b * kSuperBlock, 31, -0.5f, 15, &out[b].d, &out[b].dmin,
                          out[b].scales, L);
    std::memset(out[b].qh, 0, sizeof(out[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        out[b].qh[l] |= static_cast<uint8_t>(((L[64 * c + l] >> 4) << (2 * c)) |
                                             ((L[64 * c + 32 + l] >> 4) << (2 * c + 1)));
      }
    }
    PackNibbles(L, out[b].qs);
  }
}

void QuantizeRowQ6_K(const float* x, int64_t n, BlockQ6_K* out) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) QuantizeQ6Block(x + b * kSuperBlock, &out[b]);
}

namespace {

// One Q8_K block, as ggml's quantize_row_q8_K computes it: `max` the first value of the largest
// magnitude, q = round-half-even(-127 / max * v), the sums of each 16 q.
void ActivationBlockQ8_K(const float* v, BlockQ8_K* out) {
  BlockQ8_K& o = *out;
  float max = 0, amax = 0;
  for (int64_t i = 0; i < kSuperBlock; ++i) {
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  }
  std::memset(&o, 0, sizeof(o));
  if (amax == 0 || !(amax == amax)) return;  // all zero (or a NaN): d = 0, q = 0
  const float iscale = -127.f / max;
  for (int64_t i = 0; i < kSuperBlock; ++i) {
    o.q[i] = static_cast<int8_t>(std::clamp(NearestInt(iscale * v[i]), -128, 127));
  }
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += o.q[16 * g + i];
    o.bsums[g] = static_cast<int16_t>(sum);
  }
  o.d = 1 / iscale;
}

#if KVF_Q8_K_AVX2
// The largest magnitude of v's 256 values and whether any is a NaN or an infinity.
__attribute__((target("avx2,fma"))) float AbsMaxAvx2(const float* v, bool* non_finite) {
  const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
  __m256 amax8 = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int64_t i = 0; i < kSuperBlock; i += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(v + i));
    amax8 = _mm256_max_ps(a, amax8);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // NaN or inf
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  *non_finite = _mm256_movemask_ps(bad) != 0;
  return std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_shuffle_ps(m4, m4, 1)));
}

// The same block with AVX2: the same products rounded half-even by vroundps, saturated to
// [-128, 127] by the packs as std::clamp does, so the same bytes. A block holding a NaN or an
// infinity, or whose -127 / max overflows, takes the scalar code.
__attribute__((target("avx2,fma"))) void ActivationBlockQ8_KAvx2(const float* v, BlockQ8_K* out) {
  bool non_finite = false;
  const float amax = AbsMaxAvx2(v, &non_finite);
  if (non_finite || amax == 0) return ActivationBlockQ8_K(v, out);
  int64_t first = 0;  // the first value of that magnitude, as the scalar scan finds it
  while (std::fabs(v[first]) != amax) ++first;
  const float iscale = -127.f / v[first];
  if (!std::isfinite(iscale)) return ActivationBlockQ8_K(v, out);
  const __m256 scale = _mm256_set1_ps(iscale);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7), bias = _mm256_set1_epi8(-128);
  for (int64_t i = 0; i < kSuperBlock; i += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      q[j] =
          _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i + 8 * j), scale),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // int32 -> int8 in order: the packs interleave 128-bit lanes, the permute restores them.
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->q + i), bytes);
    // Sums of 8 biased (unsigned) bytes per 64-bit lane; two lanes make a group of 16.
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(bytes, bias), _mm256_setzero_si256());
    const int64_t g = i / 16;
    out->bsums[g] = static_cast<int16_t>(_mm256_extract_epi64(sad, 0) +
                                         _mm256_extract_epi64(sad, 1) - 16 * 128);
    out->bsums[g + 1] = static_cast<int16_t>(_mm256_extract_epi64(sad, 2) +
                                             _mm256_extract_epi64(sad, 3) - 16 * 128);
  }
  out->d = 1 / iscale;
}
#endif

}  // namespace

void QuantizeActivationsQ8_K(const float* x, int64_t n, BlockQ8_K* out) {
#if KVF_Q8_K_AVX2
  if (CpuHasAvx2()) {
    for (int64_t b = 0; b < n / kSuperBlock; ++b)
      ActivationBlockQ8_KAvx2(x + b * kSuperBlock, out + b);
    return;
  }
#endif
  for (int64_t b = 0; b < n / kSuperBlock; ++b) ActivationBlockQ8_K(x + b * kSuperBlock, out + b);
}

namespace {

// value i = d * s_g * w_i - dmin * n_g, in ggml's dequantizers' order of operations.
void DequantizeKInts(const KInts& k, float* out) {
  for (int g = 0; g < 16; ++g) {
    const float dl = k.d * static_cast<float>(k.scales[g]);
    const float ml = k.dmin * static_cast<float>(k.mins[g]);
    for (int i = 0; i < 16; ++i) out[16 * g + i] = dl * static_cast<float>(k.w[16 * g + i]) - ml;
  }
}

template <typename Block>
void DequantizeWith(const Block* blocks, int64_t n, float* out,
                    void (*ints)(const Block&, KInts*)) {
  KInts k;
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    ints(blocks[b], &k);
    DequantizeKInts(k, out + b * kSuperBlock);
  }
}

}  // namespace

void DequantizeRowQ4_K(const BlockQ4_K* blocks, int64_t n, float* out) {
  DequantizeWith(blocks, n, out, Q4_KInts);
}
void DequantizeRowQ5_K(const BlockQ5_K* blocks, int64_t n, float* out) {
  DequantizeWith(blocks, n, out, Q5_KInts);
}
void DequantizeRowQ6_K(const BlockQ6_K* blocks, int64_t n, float* out) {
  DequantizeWith(blocks, n, out, Q6_KInts);
}

}  // namespace kvferry::engine::kernels
