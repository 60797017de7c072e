#include "engine/kernels/quant_k_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "engine/kernels/quant_amx.h"
#include "engine/kernels/quant_k_amx.h"
#include "engine/kernels/quant_k_vnni_panel.h"
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
void KColumnsPortable(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
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
// g++ 12's AVX-512 headers start some intrinsics from _mm512_undefined_* values and then warn
// that they "may be used uninitialized" where those intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVF_K_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVF_K_AVX2_ENTRY __attribute__((target("avx2,fma,f16c"), flatten))
#define KVF_K_AVX512_ISA "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define KVF_K_AVX512 __attribute__((target(KVF_K_AVX512_ISA)))
#define KVF_K_AVX512_ENTRY __attribute__((target(KVF_K_AVX512_ISA), flatten))
#define KVF_K_INLINE inline  // inlined by the entry points, in their target

// Rows of x per pass over one W row's super-blocks: their Q8_K blocks stay in L2.
constexpr int64_t kKRowsPerPass = 128;
// Fewer rows of x than this take the AVX2 code even where AVX-512 VNNI runs (KQuantColumns).
constexpr int64_t kKVnniFromRows = 4;
// How far ahead of the super-block in use KColumns asks for W's lines (the next rows' when the
// row ends: a thread's rows lie one after the other).
constexpr int64_t kKAheadBytes = 2048;

// A weight super-block with its values unsigned: 8 vectors of 32 values u (vector j = values
// 32j .. 32j + 31, groups 2j and 2j + 1; Q4_K and Q5_K: q; Q6_K: q = w + 32), the 16 group
// scales s_g, and per group the integer n_g that multiplies x's group sum: Q4_K, Q5_K: the
// minimum (times dmin, its own term); Q6_K: 32 * s_g, which takes u's offset back out of the dot:
// sum_g s_g * sum (u - 32) * x = sum_g s_g * sum u * x - sum_g n_g * bs_g. Every sum is an exact
// integer, so the result is KInts' isum (and msum) exactly.
// The scales and minimums are built in registers, never stored as scalars and loaded back as a
// vector (a store-forwarding stall on every super-block).
struct KVectors {
  __m256i u[8];
  __m256i scales;  // 16 x int16: s_g
  __m256i mins;    // 16 x int16: n_g
  float d, dmin;
};

KVF_K_AVX2 KVF_K_INLINE __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Q4_K / Q5_K: the 8 sub-blocks' 6-bit scales and minimums unpacked from their 12 bytes in four
// 32-bit words (bytes 0-7 of `sm`: the scales, 8-15: the minimums), then each doubled for the
// sub-block's two groups.
KVF_K_AVX2 KVF_K_INLINE void ScaleMins(const uint8_t sc12[12], KVectors* v) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t w[3];
  std::memcpy(w, sc12, 12);
  const uint32_t scales_lo = w[0] & kLow6, mins_lo = w[1] & kLow6;
  const uint32_t scales_hi = (w[2] & kLow4) | (((w[0] >> 6) & kLow2) << 4);
  const uint32_t mins_hi = ((w[2] >> 4) & kLow4) | (((w[1] >> 6) & kLow2) << 4);
  const __m128i sm = _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi),
                                    static_cast<int>(mins_lo), static_cast<int>(mins_hi));
  v->scales = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sm, sm));
  v->mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

KVF_K_AVX2 KVF_K_INLINE void Decode(Q4_KFormat, const std::byte* p, KVectors* v) {
  BlockQ4_K const* b = reinterpret_cast<const BlockQ4_K*>(p);
  v->d = _cvtsh_ss(b->d);
  v->dmin = _cvtsh_ss(b->dmin);
  ScaleMins(b->scales, v);
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(b->qs + 32 * c);
    v->u[2 * c] = _mm256_and_si256(q, low);
    v->u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low);
  }
}

KVF_K_AVX2 KVF_K_INLINE void Decode(Q5_KFormat, const std::byte* p, KVectors* v) {
  BlockQ5_K const* b = reinterpret_cast<const BlockQ5_K*>(p);
  v->d = _cvtsh_ss(b->d);
  v->dmin = _cvtsh_ss(b->dmin);
  ScaleMins(b->scales, v);
  const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i qh = Load32(b->qh);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = Load32(b->qs + 32 * c);
    const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
    v->u[2 * c] = _mm256_or_si256(_mm256_and_si256(q, low), _mm256_slli_epi16(h0, 4));
    v->u[2 * c + 1] =
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
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const __m256i a = Load32(b->ql + 64 * h), c = Load32(b->ql + 64 * h + 32);
    const __m256i q = Load32(b->qh + 32 * h);
    v->u[4 * h] = _mm256_or_si256(_mm256_and_si256(a, low), HighPair(q, 0));
    v->u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(c, low), HighPair(q, 2));
    v->u[4 * h + 2] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), low), HighPair(q, 4));
    v->u[4 * h + 3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low), HighPair(q, 6));
  }
  v->scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
  v->mins = _mm256_slli_epi16(v->scales, 5);
}

KVF_K_AVX2 KVF_K_INLINE int32_t Sum8(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
}

// The chain's step (Step) from the exact sums isum' (the unsigned values' dot, group scales
// applied) and msum (sum_g n_g * bs_g).
template <bool kHasMin>
KVF_K_AVX2 KVF_K_INLINE float Chain(const KVectors& k, const BlockQ8_K& x, int32_t isum,
                                    int32_t msum, float acc) {
  if constexpr (kHasMin) {
    acc = __builtin_fmaf(k.d * x.d, static_cast<float>(isum), acc);
    return __builtin_fmaf(k.dmin * x.d, static_cast<float>(-msum), acc);
  } else {
    return __builtin_fmaf(k.d * x.d, static_cast<float>(isum - msum), acc);
  }
}

// AVX2: u (<= 63) times x in pairs (vpmaddubsw: no saturation, 2 * 63 * 127 < 2^15), times each
// pair lane's group scale (vpmaddwd).
struct KAvx2Dots {
  struct W {
    __m256i scales[8];  // vector j: lanes 0-7 group 2j's scale, 8-15 group 2j + 1's
    __m256i mins;
  };
  static KVF_K_AVX2 KVF_K_INLINE void Prepare(const KVectors& k, W* w) {
    // The 32-bit lane j of k.scales holds (s_2j, s_2j+1): broadcast it, then spread its low
    // int16 over the low half and its high one over the high half.
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                            2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    for (int j = 0; j < 8; ++j) {
      w->scales[j] =
          _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(k.scales, _mm256_set1_epi32(j)), spread);
    }
    w->mins = k.mins;
  }
  // isum' and msum of one row of x as 8 int32 lanes each (their sums).
  static KVF_K_AVX2 KVF_K_INLINE void Sums(const KVectors& k, const W& w, const BlockQ8_K& x,
                                           __m256i* isum, __m256i* msum) {
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + 32 * j));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(k.u[j], xv), w.scales[j]));
    }
    *isum = sum;
    *msum =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)), w.mins);
  }
};

// AVX-512 VNNI: 64 values per vpdpbusd (u unsigned, x signed: exactly what it multiplies), lane
// l of vector j summing values 64j + 4l .. 64j + 4l + 3 (group 4j + l / 4), times its group's
// scale (vpmulld): |lane| <= 4 * 63 * 127 * 128 < 2^23.
struct KAvx512Dots {
  struct W {
    __m512i u[4];
    __m512i scales[4];
    __m256i mins;
  };
  static KVF_K_AVX512 KVF_K_INLINE void Prepare(const KVectors& k, W* w) {
    const __m512i s32 = _mm512_cvtepi16_epi32(k.scales);
    for (int j = 0; j < 4; ++j) {
      w->u[j] = _mm512_inserti64x4(_mm512_castsi256_si512(k.u[2 * j]), k.u[2 * j + 1], 1);
      const __m512i index = _mm512_set_epi32(4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 2,
                                             4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 1, 4 * j + 1,
                                             4 * j + 1, 4 * j + 1, 4 * j, 4 * j, 4 * j, 4 * j);
      w->scales[j] = _mm512_permutexvar_epi32(index, s32);
    }
    w->mins = k.mins;
  }
  static KVF_K_AVX512 KVF_K_INLINE void Sums(const KVectors&, const W& w, const BlockQ8_K& x,
                                             __m256i* isum, __m256i* msum) {
    __m512i sum = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i xv = _mm512_loadu_si512(x.q + 64 * j);
      const __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u[j], xv);
      sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(dots, w.scales[j]));
    }
    *isum = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
    *msum =
        _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)), w.mins);
  }
};

// Eight vectors of 8 int32 -> one vector of their 8 sums (lane r: vector r's).
KVF_K_AVX2 KVF_K_INLINE __m256i KSum8x8(const __m256i v[8]) {
  const __m256i t0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i t1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                          _mm256_permute2x128_si256(t0, t1, 0x31));
}

// Chain for eight rows at once: lane r holds row r's sums and x scale dx[r].
KVF_K_AVX2 KVF_K_INLINE void Chain8(const KVectors& k, const float dx[8], __m256i isum,
                                    __m256i msum, bool has_min, float* acc8) {
  const __m256 xd = _mm256_loadu_ps(dx);
  __m256 acc = _mm256_loadu_ps(acc8);
  if (has_min) {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(k.d), xd), _mm256_cvtepi32_ps(isum), acc);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(k.dmin), xd),
                          _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), msum)), acc);
  } else {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(k.d), xd),
                          _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, msum)), acc);
  }
  _mm256_storeu_ps(acc8, acc);
}

// The chain's step for one row of x (Step, from D's sums).
template <bool kHasMin, typename D>
KVF_K_INLINE float Step1(const KVectors& k, const typename D::W& w, const BlockQ8_K& x, float acc) {
  __m256i isum, msum;
  D::Sums(k, w, x, &isum, &msum);
  return Chain<kHasMin>(k, x, Sum8(isum), Sum8(msum), acc);
}

// The same step for eight rows of x at once, acc8[r] row r's chain: their sums reduced together
// (lane r of one vector each), then the two fused multiply-adds lane by lane: each lane rounds
// as Step1 does.
template <bool kHasMin, typename D>
KVF_K_INLINE void Step8(const KVectors& k, const typename D::W& w, const BlockQ8_K* x, int64_t nb,
                        float* acc8) {
  __m256i is[8], ms[8];
  float dx[8];
  for (int r = 0; r < 8; ++r) {
    D::Sums(k, w, x[r * nb], &is[r], &ms[r]);
    dx[r] = x[r * nb].d;
  }
  Chain8(k, dx, KSum8x8(is), KSum8x8(ms), kHasMin, acc8);
}

// Columns [n0, n1): each W super-block decoded once per pass of rows of x, its steps taken for
// every row of the pass, eight rows at a time.
template <typename F, typename D>
KVF_K_INLINE void KColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                           int64_t n0, int64_t n1) {
  const int64_t nb = xq.blocks_per_row;
  const int64_t row_bytes = w.row_bytes();
  KVectors k;
  typename D::W prepared;
  float acc[kKRowsPerPass];
  for (int64_t m0 = 0; m0 < xq.rows; m0 += kKRowsPerPass) {
    const int64_t m1 = std::min(xq.rows, m0 + kKRowsPerPass);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc, acc + (m1 - m0), 0.0f);
      const std::byte* row = w.data + n * row_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        _mm_prefetch(reinterpret_cast<const char*>(row + b * F::kBytes) + kKAheadBytes,
                     _MM_HINT_T0);
        Decode(F{}, row + b * F::kBytes, &k);
        D::Prepare(k, &prepared);
        int64_t m = m0;
        for (; m + 8 <= m1; m += 8) {
          Step8<F::kHasMin, D>(k, prepared, &xq.blocks[m * nb + b], nb, acc + (m - m0));
        }
        for (; m < m1; ++m) {
          acc[m - m0] = Step1<F::kHasMin, D>(k, prepared, xq.blocks[m * nb + b], acc[m - m0]);
        }
      }
      for (int64_t m = m0; m < m1; ++m) y[m * ldy + n] = acc[m - m0];
    }
  }
}

template <typename F>
KVF_K_AVX2_ENTRY void ColumnsAvx2(const QuantizedRowsK& xq, const WeightMatrix& w, float* y,
                                  int64_t ldy, int64_t n0, int64_t n1) {
  KColumns<F, KAvx2Dots>(xq, w, y, ldy, n0, n1);
}

template <typename F>
KVF_K_AVX512_ENTRY void ColumnsAvx512(const QuantizedRowsK& xq, const WeightMatrix& w, float* y,
                                      int64_t ldy, int64_t n0, int64_t n1) {
  KColumns<F, KAvx512Dots>(xq, w, y, ldy, n0, n1);
}

// 32 unsigned values u (groups of 16 under part scales p0, p1 <= 15) times their group's part,
// as bytes (every product <= 255): the even and odd bytes' 16-bit products (vpmaddubsw against
// the part and 0) put back side by side.
KVF_K_AVX2 KVF_K_INLINE __m256i TimesPart(__m256i u, int p0, int p1) {
  const __m256i part = _mm256_setr_m128i(_mm_set1_epi16(static_cast<short>(p0)),
                                         _mm_set1_epi16(static_cast<short>(p1)));
  const __m256i even = _mm256_maddubs_epi16(u, part);
  const __m256i odd = _mm256_maddubs_epi16(u, _mm256_slli_epi16(part, 8));
  return _mm256_or_si256(even, _mm256_slli_epi16(odd, 8));
}

// W's rows n .. n + 15 as an AmxKPanel (quant_k_amx.h) into the given buffers: each super-block
// decoded as the VNNI code decodes it (KVectors), its values times the scales' high and low
// parts, its minimums as bytes.
template <typename F>
KVF_K_AVX2_ENTRY void PackKPanel(const WeightMatrix& w, int64_t n, int shift, uint8_t* high,
                                 uint8_t* low, uint8_t* mins, float* d, float* dmin) {
  const int64_t nb = w.cols / kSuperBlock;
  const int mask = (1 << shift) - 1;
  KVectors v;
  alignas(32) int16_t s[16];
  for (int64_t r = 0; r < kAmxTile; ++r) {
    const std::byte* row = w.row(n + r);
    for (int64_t b = 0; b < nb; ++b) {
      Decode(F{}, row + b * F::kBytes, &v);
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), v.scales);
      for (int j = 0; j < 8; ++j) {
        const int64_t at = ((b * 4 + j / 2) * kAmxTile + r) * 64 + (j % 2) * 32;
        const int g = 2 * j;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(high + at),
                            TimesPart(v.u[j], s[g] >> shift, s[g + 1] >> shift));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(low + at),
                            TimesPart(v.u[j], s[g] & mask, s[g + 1] & mask));
      }
      const __m256i m8 = _mm256_packus_epi16(v.mins, v.mins);  // lanes: 0-7, 0-7, 8-15, 8-15
      const __m128i m16 =
          _mm_unpacklo_epi64(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(mins + (b * kAmxTile + r) * 16), m16);
      d[b * kAmxTile + r] = v.d;
      dmin[b * kAmxTile + r] = v.dmin;
    }
  }
}

// A Q6_K scale s in [-128, 127] as three base-8 digits in [-3, 4]: s = 64 a + 8 b + c.
void ScaleDigits(int s, int digits[3]) {
  const int c = ((s + 3) & 7) - 3;
  const int r = (s - c) / 8;
  const int b = ((r + 3) & 7) - 3;
  digits[0] = (r - b) / 8;
  digits[1] = b;
  digits[2] = c;
}

// 32 signed values w (groups of 16 under digits g0, g1) times their group's digit, as bytes.
KVF_K_AVX2 KVF_K_INLINE __m256i TimesDigit(__m256i w, int g0, int g1) {
  const __m256i lo = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
                                        _mm256_set1_epi16(static_cast<short>(g0)));
  const __m256i hi = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)),
                                        _mm256_set1_epi16(static_cast<short>(g1)));
  return _mm256_permute4x64_epi64(_mm256_packs_epi16(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
}

// Q6_K's rows n .. n + 15 as an AmxK6Panel: w = u - 32 times each digit of its group's scale.
KVF_K_AVX2_ENTRY void PackK6Panel(const WeightMatrix& w, int64_t n, int8_t* const digits[3],
                                  float* d) {
  const int64_t nb = w.cols / kSuperBlock;
  KVectors v;
  alignas(32) int16_t s[16];
  for (int64_t r = 0; r < kAmxTile; ++r) {
    const std::byte* row = w.row(n + r);
    for (int64_t b = 0; b < nb; ++b) {
      Decode(Q6_KFormat{}, row + b * Q6_KFormat::kBytes, &v);
      _mm256_store_si256(reinterpret_cast<__m256i*>(s), v.scales);
      int dg[16][3];
      for (int g = 0; g < 16; ++g) ScaleDigits(s[g], dg[g]);
      for (int j = 0; j < 8; ++j) {
        const __m256i signed_w = _mm256_sub_epi8(v.u[j], _mm256_set1_epi8(32));
        const int64_t at = ((b * 4 + j / 2) * kAmxTile + r) * 64 + (j % 2) * 32;
        for (int k = 0; k < 3; ++k) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(digits[k] + at),
                              TimesDigit(signed_w, dg[2 * j][k], dg[2 * j + 1][k]));
        }
      }
      d[b * kAmxTile + r] = v.d;
    }
  }
}

// Columns [n0, n1) of a Q6_K matrix on the AMX tiles, as AmxKColumns.
void AmxK6Columns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
  const int64_t nb = xq.blocks_per_row, rows = xq.rows / kAmxTile * kAmxTile;
  const int64_t n16 = n0 + (n1 - n0) / kAmxTile * kAmxTile;
  AmxKRows x;
  PackAmxKRows(xq.blocks.data(), rows, nb, &x);
  std::vector<int8_t> digits(static_cast<size_t>(3 * nb * 4 * 1024));
  std::vector<float> d(static_cast<size_t>(nb * kAmxTile));
  int8_t* const parts[3] = {digits.data(), digits.data() + nb * 4096,
                            digits.data() + 2 * nb * 4096};
  for (int64_t n = n0; n < n16; n += kAmxTile) {
    PackK6Panel(w, n, parts, d.data());
    AmxK6Tiles(x, AmxK6Panel{nb, {parts[0], parts[1], parts[2]}, d.data()}, y + n, ldy);
  }
  if (rows < xq.rows) {
    QuantizedRowsK tail{xq.rows - rows, nb, {xq.blocks.begin() + rows * nb, xq.blocks.end()}};
    ColumnsAvx512<Q6_KFormat>(tail, w, y + rows * ldy, ldy, n0, n16);
  }
  ColumnsAvx512<Q6_KFormat>(xq, w, y, ldy, n16, n1);
}

// W's rows n .. n + 15 as a KVnniPanel (quant_k_vnni_panel.h) into the given buffers: each
// super-block decoded as the VNNI code decodes it (KVectors), its values regrouped four by four
// across the 16 rows, its group scales, n_g, d and dmin per row.
template <typename F>
KVF_K_AVX2_ENTRY void PackKVnniPanel(const WeightMatrix& w, int64_t n, int64_t nb, uint8_t* u,
                                     int32_t* scales, int16_t* mins, float* d, float* dmin) {
  KVectors k;
  alignas(32) uint8_t values[kSuperBlock];
  alignas(32) int16_t s16[16], n16[16];
  for (int64_t j = 0; j < kKPanelRows; ++j) {
    const std::byte* row = w.row(n + j);
    for (int64_t b = 0; b < nb; ++b) {
      Decode(F{}, row + b * F::kBytes, &k);
      for (int v = 0; v < 8; ++v) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(values + 32 * v), k.u[v]);
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(s16), k.scales);
      _mm256_store_si256(reinterpret_cast<__m256i*>(n16), k.mins);
      uint8_t* ub = u + b * kKPanelValueBytes + j * 4;
      for (int k4 = 0; k4 < kSuperBlock / 4; ++k4) std::memcpy(ub + k4 * 64, values + 4 * k4, 4);
      for (int g = 0; g < 16; ++g) scales[b * kKPanelScales + g * kKPanelRows + j] = s16[g];
      for (int g = 0; g < 16; ++g) mins[b * kKPanelMins + (g / 2) * 32 + j * 2 + g % 2] = n16[g];
      d[b * kKPanelRows + j] = k.d;
      dmin[b * kKPanelRows + j] = k.dmin;
    }
  }
}

// Columns [n0, n1) on VNNI panels: every row of x against whole panels of 16 columns, the
// columns they leave on the VNNI code.
template <typename F>
void KVnniColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                  int64_t n0, int64_t n1) {
  const int64_t nb = xq.blocks_per_row;
  const int64_t n16 = n0 + (n1 - n0) / kKPanelRows * kKPanelRows;
  std::vector<uint8_t> u(static_cast<size_t>(nb * kKPanelValueBytes));
  std::vector<int32_t> scales(static_cast<size_t>(nb * kKPanelScales));
  std::vector<int16_t> mins(static_cast<size_t>(nb * kKPanelMins));
  std::vector<float> d(static_cast<size_t>(nb * kKPanelRows)), dmin(d.size());
  for (int64_t n = n0; n < n16; n += kKPanelRows) {
    PackKVnniPanel<F>(w, n, nb, u.data(), scales.data(), mins.data(), d.data(), dmin.data());
    const KVnniPanel panel{nb,          F::kHasMin, u.data(),   scales.data(),
                           mins.data(), d.data(),   dmin.data()};
    KVnniPanelTiles(xq, panel, y + n, ldy);
  }
  ColumnsAvx512<F>(xq, w, y, ldy, n16, n1);
}

// Columns [n0, n1) of a Q4_K or Q5_K matrix on the AMX tiles: whole tiles of 16 rows and 16
// columns there; the rows and columns they leave on the VNNI code.
template <typename F>
void AmxKColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                 int64_t n1) {
  const int64_t nb = xq.blocks_per_row, rows = xq.rows / kAmxTile * kAmxTile;
  const int64_t n16 = n0 + (n1 - n0) / kAmxTile * kAmxTile;
  const int shift = std::is_same_v<F, Q4_KFormat> ? 4 : 3;  // w * (s >> shift) fits a byte
  AmxKRows x;
  PackAmxKRows(xq.blocks.data(), rows, nb, &x);
  std::vector<uint8_t> high(static_cast<size_t>(nb * 4 * 1024)), low(high.size());
  std::vector<uint8_t> mins(static_cast<size_t>(nb * 256));
  std::vector<float> d(static_cast<size_t>(nb * kAmxTile)), dmin(d.size());
  for (int64_t n = n0; n < n16; n += kAmxTile) {
    PackKPanel<F>(w, n, shift, high.data(), low.data(), mins.data(), d.data(), dmin.data());
    const AmxKPanel panel{nb, shift, high.data(), low.data(), mins.data(), d.data(), dmin.data()};
    AmxKTiles(x, panel, y + n, ldy);
  }
  if (rows < xq.rows) {  // the last rows: a copy of their blocks through the VNNI code
    QuantizedRowsK tail{xq.rows - rows, nb, {xq.blocks.begin() + rows * nb, xq.blocks.end()}};
    ColumnsAvx512<F>(tail, w, y + rows * ldy, ldy, n0, n16);
  }
  ColumnsAvx512<F>(xq, w, y, ldy, n16, n1);
}

#endif

}  // namespace

bool IsKQuant(DType dtype) {
  return dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ6_K;
}

void QuantizeRowsK(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRowsK* out,
                   ThreadPool* pool) {
  out->rows = M;
  out->blocks_per_row = K / kSuperBlock;
  out->blocks.resize(static_cast<size_t>(M * out->blocks_per_row));
  ForEachRowShare(M, pool, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      QuantizeActivationsQ8_K(x + m * ldx, K, out->blocks.data() + m * out->blocks_per_row);
    }
  });
}

void KQuantColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1, QuantPath widest) {
#if KVF_K_SIMD
  // Decode (a row or few of x) takes the AVX2 code: preparing the 64-byte vectors costs more
  // than they save over so few rows (Qwen3-0.6B shape, Q4_K_M, decode after 512 tokens: 14.1
  // tok/s against 16.5).
  const bool vnni = widest <= QuantPath::kAvx512Vnni && CpuHasAvx512Vnni();
  if (widest == QuantPath::kAmx && vnni && xq.rows >= kAmxTile && CpuHasAmxInt8()) {
    WithKFormat(w.dtype, [&](auto f) {
      if constexpr (decltype(f)::kHasMin) {
        AmxKColumns<decltype(f)>(xq, w, y, ldy, n0, n1);
      } else {
        AmxK6Columns(xq, w, y, ldy, n0, n1);
      }
    });
    return;
  }
  if (vnni && xq.rows >= kKPanelRows) {
    WithKFormat(w.dtype, [&](auto f) { KVnniColumns<decltype(f)>(xq, w, y, ldy, n0, n1); });
    return;
  }
  if (vnni && xq.rows >= kKVnniFromRows) {
    WithKFormat(w.dtype, [&](auto f) { ColumnsAvx512<decltype(f)>(xq, w, y, ldy, n0, n1); });
    return;
  }
  if (widest != QuantPath::kPortable && CpuHasAvx2()) {
    WithKFormat(w.dtype, [&](auto f) { ColumnsAvx2<decltype(f)>(xq, w, y, ldy, n0, n1); });
    return;
  }
#endif
  (void)widest;
  WithKFormat(w.dtype, [&](auto f) { KColumnsPortable<decltype(f)>(xq, w, y, ldy, n0, n1); });
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
