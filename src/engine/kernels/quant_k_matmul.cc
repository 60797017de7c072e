#include "engine/kernels/quant_k_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/simd.h"

namespace kvferry::engine::kernels {
namespace {

using formats::DType;

// A weight format: its super-block's bytes and whether it has minimums.
template <typename Block, bool kMin, void (*kRead)(const Block&, KInts*)>
struct KFormat {
  static constexpr int64_t kBytes = sizeof(Block);
  static constexpr bool kHasMin = kMin;
  static void Ints(const std::byte* p, KInts* out) {
    Block b;
    std::memcpy(&b, p, sizeof(b));
    kRead(b, out);
  }
};
using Q4_KFormat = KFormat<BlockQ4_K, true, Q4_KInts>;
using Q5_KFormat = KFormat<BlockQ5_K, true, Q5_KInts>;
using Q6_KFormat = KFormat<BlockQ6_K, false, Q6_KInts>;

template <typename Fn>
auto WithKFormat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ4_K:
      return fn(Q4_KFormat{});
    case DType::kQ5_K:
      return fn(Q5_KFormat{});
    case DType::kQ6_K:
      return fn(Q6_KFormat{});
    default:
      std::abort();  // precondition: a k-quant (the loader refuses the others)
  }
}

// isum and msum of the header, for one weight super-block and one Q8_K block.
int32_t IntDot(const KInts& k, const BlockQ8_K& x) {
  int32_t isum = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += int32_t{k.w[16 * g + i]} * int32_t{x.q[16 * g + i]};
    isum += int32_t{k.scales[g]} * s;
  }
  return isum;
}
int32_t MinDot(const KInts& k, const BlockQ8_K& x) {
  int32_t msum = 0;
  for (int g = 0; g < 16; ++g) msum += int32_t{k.mins[g]} * int32_t{x.bsums[g]};
  return msum;
}

// One step of the chain for super-block `k` and x's block `x`.
template <bool kHasMin>
float Step(const KInts& k, const BlockQ8_K& x, float acc) {
  acc = std::fma(k.d * x.d, static_cast<float>(IntDot(k, x)), acc);
  if constexpr (kHasMin) acc = std::fma(k.dmin * x.d, static_cast<float>(-MinDot(k, x)), acc);
  return acc;
}

template <typename F>
void ColumnsPortable(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t n0, int64_t n1) {
  KInts k;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = 0; m < xq.rows; ++m) y[m * ldy + n] = 0.0f;
    for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
      F::Ints(w.row(n) + b * F::kBytes, &k);
      for (int64_t m = 0; m < xq.rows; ++m) {
        float& acc = y[m * ldy + n];
        acc = Step<F::kHasMin>(k, xq.blocks[m * xq.blocks_per_row + b], acc);
      }
    }
  }
}

#if defined(__x86_64__) && !defined(__clang__)
#define KVF_K_SIMD 1
#define KVF_K_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVF_K_AVX2_ENTRY __attribute__((target("avx2,fma,f16c"), flatten))
#define KVF_K_INLINE inline  // inlined by the entry point, in its target

// Rows of x per pass over one W row's super-blocks: their Q8_K blocks stay in L2.
constexpr int64_t kKRowsPerPass = 128;

// A weight super-block in registers' shape: 8 vectors of 32 values w (vector j = values
// 32j .. 32j + 31, groups 2j and 2j + 1), each vector's 16 pair-lane scales (lanes 0-7 group 2j,
// 8-15 group 2j + 1), the 16 group minimums, and d, dmin.
struct KVectors {
  __m256i w[8];
  __m256i scales[8];
  __m256i mins;
  float d, dmin;
};

KVF_K_AVX2 KVF_K_INLINE __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Q4_K / Q5_K: sub-block j's 6-bit scale for both groups of vector j; minimums per group.
KVF_K_AVX2 KVF_K_INLINE void ScaleMinVectors(const uint8_t sc12[12], KVectors* v) {
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 4; ++j) {
    sc[j] = sc12[j] & 63;
    mn[j] = sc12[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((sc12[j + 8] & 0xF) | ((sc12[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((sc12[j + 8] >> 4) | ((sc12[j + 4] >> 6) << 4));
  }
  for (int j = 0; j < 8; ++j) v->scales[j] = _mm256_set1_epi16(sc[j]);
  v->mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3], mn[4], mn[4],
                              mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
}

KVF_K_AVX2 KVF_K_INLINE void Decode(Q4_KFormat, const std::byte* p, KVectors* v) {
  BlockQ4_K const* b = reinterpret_cast<const BlockQ4_K*>(p);
  v->d = _cvtsh_ss(b->d);
  v->dmin = _cvtsh_ss(b->dmin);
  ScaleMinVectors(b->scales, v);
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(b->qs + 32 * c);
    v->w[2 * c] = _mm256_and_si256(q, low);
    v->w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
  }
}

KVF_K_AVX2 KVF_K_INLINE void Decode(Q5_KFormat, const std::byte* p, KVectors* v) {
  BlockQ5_K const* b = reinterpret_cast<const BlockQ5_K*>(p);
  v->d = _cvtsh_ss(b->d);
  v->dmin = _cvtsh_ss(b->dmin);
  ScaleMinVectors(b->scales, v);
  const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i qh = Load32(b->qh);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(b->qs + 32 * c);
    const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
    v->w[2 * c] = _mm256_or_si256(_mm256_and_si256(q, low), _mm256_slli_epi16(h0, 4));
    v->w[2 * c + 1] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), _mm256_slli_epi16(h1, 4));
  }
}

// Q6_K: the bit pair at `shift` of each qh byte, as the value's bits 4-5.
KVF_K_AVX2 KVF_K_INLINE __m256i HighPair(__m256i qh, int shift) {
  const __m256i pair =
      _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
  return _mm256_slli_epi16(pair, 4);
}

KVF_K_AVX2 KVF_K_INLINE void Decode(Q6_KFormat, const std::byte* p, KVectors* v) {
  BlockQ6_K const* b = reinterpret_cast<const BlockQ6_K*>(p);
  v->d = _cvtsh_ss(b->d);
  v->dmin = 0.0f;
  const __m256i low = _mm256_set1_epi8(0x0F), off = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i a = Load32(b->ql + 64 * h), c = Load32(b->ql + 64 * h + 32);
    const __m256i q = Load32(b->qh + 32 * h);
    v->w[4 * h] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(a, low), HighPair(q, 0)), off);
    v->w[4 * h + 1] =
        _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(c, low), HighPair(q, 2)), off);
    v->w[4 * h + 2] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), HighPair(q, 4)), off);
    v->w[4 * h + 3] = _mm256_sub_epi8(
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low), HighPair(q, 6)), off);
  }
  for (int j = 0; j < 8; ++j) {
    v->scales[j] =
        _mm256_set_m128i(_mm_set1_epi16(b->scales[2 * j + 1]), _mm_set1_epi16(b->scales[2 * j]));
  }
  v->mins = _mm256_setzero_si256();
}

KVF_K_AVX2 KVF_K_INLINE int32_t Sum8(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
}

// The chain's step for one decoded super-block and one Q8_K block (Step, vectorized): the
// products of |w| and x with w's sign in pairs (vpmaddubsw: |w| <= 32, so no saturation), times
// the pair lanes' group scales (vpmaddwd), summed exactly.
template <bool kHasMin>
KVF_K_AVX2 KVF_K_INLINE float StepAvx2(const KVectors& k, const BlockQ8_K& x, float acc) {
  __m256i sum = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + 32 * j));
    const __m256i pairs =
        _mm256_maddubs_epi16(_mm256_sign_epi8(k.w[j], k.w[j]), _mm256_sign_epi8(xv, k.w[j]));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, k.scales[j]));
  }
  acc = __builtin_fmaf(k.d * x.d, static_cast<float>(Sum8(sum)), acc);
  if constexpr (kHasMin) {
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
    const int32_t msum = Sum8(_mm256_madd_epi16(bs, k.mins));
    acc = __builtin_fmaf(k.dmin * x.d, static_cast<float>(-msum), acc);
  }
  return acc;
}

// Columns [n0, n1): each W super-block decoded once per pass of rows of x.
template <typename F>
KVF_K_AVX2_ENTRY void ColumnsAvx2(const QuantizedRowsK& xq, const WeightMatrix& w, float* y,
                                  int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nb = xq.blocks_per_row;
  KVectors k;
  for (int64_t m0 = 0; m0 < xq.rows; m0 += kKRowsPerPass) {
    const int64_t m1 = std::min(xq.rows, m0 + kKRowsPerPass);
    for (int64_t n = n0; n < n1; ++n) {
      float acc[kKRowsPerPass];
      std::fill(acc, acc + (m1 - m0), 0.0f);
      const std::byte* row = w.row(n);
      for (int64_t b = 0; b < nb; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(row + (b + 4) * F::kBytes), _MM_HINT_T0);
        Decode(F{}, row + b * F::kBytes, &k);
        for (int64_t m = m0; m < m1; ++m) {
          acc[m - m0] = StepAvx2<F::kHasMin>(k, xq.blocks[m * nb + b], acc[m - m0]);
        }
      }
      for (int64_t m = m0; m < m1; ++m) y[m * ldy + n] = acc[m - m0];
    }
  }
}
#endif

}  // namespace

bool IsKQuant(DType dtype) {
  return dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K;
}

void QuantizeRowsK(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRowsK* out) {
  out->rows = M;
  out->blocks_per_row = K / kSuperBlock;
  out->blocks.resize(static_cast<size_t>(M * out->blocks_per_row));
  for (int64_t m = 0; m < M; ++m) {
    QuantizeActivationsQ8_K(x + m * ldx, K, out->blocks.data() + m * out->blocks_per_row);
  }
}

void KQuantColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1, QuantPath widest) {
#if KVF_K_SIMD
  if (widest != QuantPath::kPortable && CpuHasAvx2()) {
    WithKFormat(w.dtype, [&](auto f) { ColumnsAvx2<decltype(f)>(xq, w, y, ldy, n0, n1); });
    return;
  }
#endif
  (void)widest;
  WithKFormat(w.dtype, [&](auto f) { ColumnsPortable<decltype(f)>(xq, w, y, ldy, n0, n1); });
}

void KQuantReference(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy) {
  WithKFormat(w.dtype, [&](auto f) {
    using F = decltype(f);
    KInts k;
    for (int64_t m = 0; m < xq.rows; ++m) {
      for (int64_t n = 0; n < w.rows; ++n) {
        float acc = 0.0f;
        for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
          F::Ints(w.row(n) + b * F::kBytes, &k);
          const BlockQ8_K& x = xq.blocks[m * xq.blocks_per_row + b];
          int64_t isum = 0, msum = 0;
          for (int i = 0; i < kSuperBlock; ++i) isum += int64_t{k.scales[i / 16]} * k.w[i] * x.q[i];
          for (int g = 0; g < 16; ++g) msum += int64_t{k.mins[g]} * x.bsums[g];
          acc = std::fma(k.d * x.d, static_cast<float>(isum), acc);
          if (F::kHasMin) acc = std::fma(k.dmin * x.d, static_cast<float>(-msum), acc);
        }
        y[m * ldy + n] = acc;
      }
    }
    return 0;
  });
}

}  // namespace kvferry::engine::kernels
