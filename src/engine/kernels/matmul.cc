#include "engine/kernels/matmul.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "engine/kernels/quant_k_matmul.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {

namespace {

// ---- Weight loaders: 8 consecutive weights (or one) as f32, converted exactly. ----

struct F32Weights {
  using T = float;
  static V8 Load(const float* p) { return Load8(p); }
  static float At(const float* p) { return *p; }
};

typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));

struct BF16Weights {
  using T = uint16_t;
  static inline __attribute__((always_inline)) V8 Load(const uint16_t* p) {
    U16x8 h;
    std::memcpy(&h, p, sizeof(h));
    const U32x8 bits = __builtin_convertvector(h, U32x8) << 16;
    V8 f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  static float At(const uint16_t* p) { return BF16ToF32(*p); }
};

// F16 without F16C: element by element through the portable conversion.
struct F16Weights {
  using T = uint16_t;
  static inline __attribute__((always_inline)) V8 Load(const uint16_t* p) {
    return V8{F16ToF32(p[0]), F16ToF32(p[1]), F16ToF32(p[2]), F16ToF32(p[3]),
              F16ToF32(p[4]), F16ToF32(p[5]), F16ToF32(p[6]), F16ToF32(p[7])};
  }
  static float At(const uint16_t* p) { return F16ToF32(*p); }
};

// clang refuses a 256-bit vector returned from an AVX2 function (the F16C loader) into a shared
// template compiled without AVX, even when `flatten` inlines it all; a clang build (`make tsa`)
// therefore takes the portable F16 path everywhere: the same bits (the conversion is exact
// either way), only slower. The shipped build is g++'s.
#if !defined(__clang__)
#define KVF_MATMUL_F16C 1
// F16 with the F16C instruction (same values: the conversion is exact either way).
struct F16cWeights {
  using T = uint16_t;
  static inline __attribute__((target("avx2,f16c"))) V8 Load(const uint16_t* p) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    V8 f;
    std::memcpy(&f, &v, sizeof(f));
    return f;
  }
  static float At(const uint16_t* p) { return F16ToF32(*p); }
};

#endif  // !defined(__clang__)

// Asks for the cache lines of `rows` (4 rows of W, ldw apart) covering elements [k, k + 32):
// one 64-byte line per row for 16-bit weights, two for f32.
template <typename L>
inline void Prefetch4x32(const typename L::T* rows, int64_t ldw, int64_t k) {
  for (int r = 0; r < 4; ++r) {
    const typename L::T* p = rows + r * ldw + k;
    __builtin_prefetch(p, 0, 3);
    if constexpr (sizeof(typename L::T) == 4) __builtin_prefetch(p + 16, 0, 3);
  }
}

#if KVF_MATMUL_F16C
#define KVF_MATMUL_AVX512 1
// g++ 12's AVX-512 headers start some intrinsics from _mm512_undefined_* values and then warn
// that they "may be used uninitialized" where those intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVF_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma,f16c")))
// ---- AVX-512: two rows of W side by side in one 16-lane vector. Lanes 0-7 are the canonical
// 8-lane accumulator of one output and lanes 8-15 that of the next, so each output sees exactly
// the IEEE operations, in the order, the 8-wide paths give it: same bits, twice the width. ----

// Rows a and b's 8 weights from k on, as the low and high halves of one vector, converted exactly.
struct F32Pairs {
  using T = float;
  static inline KVF_AVX512 __m512 Load(const float* a, const float* b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
  }
  static float At(const float* p) { return *p; }
};
inline KVF_AVX512 __m256i LoadHalves(const uint16_t* a, const uint16_t* b) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}
struct F16Pairs {
  using T = uint16_t;
  static inline KVF_AVX512 __m512 Load(const uint16_t* a, const uint16_t* b) {
    return _mm512_cvtph_ps(LoadHalves(a, b));
  }
  static float At(const uint16_t* p) { return F16ToF32(*p); }
};
struct BF16Pairs {
  using T = uint16_t;
  static inline KVF_AVX512 __m512 Load(const uint16_t* a, const uint16_t* b) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(LoadHalves(a, b)), 16));
  }
  static float At(const uint16_t* p) { return BF16ToF32(*p); }
};

// One k-step of an Rx8 tile: acc[r][p] += x[r][k..k+8) * (rows 2p, 2p+1 of W)[k..k+8), fused.
// `pair(p, k)` gives pair p's 16 weights at k (converted, or from a packed block).
template <int R, typename Pair>
inline KVF_AVX512 void StepRx8(const float* const* xs, int64_t k, const Pair& pair,
                               __m512 (&acc)[R][4]) {
  // Unrolled, so that the accumulators stay in registers (a loop kept them on the stack).
  __m512 xb[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) xb[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(xs[r] + k));
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m512 wv = pair(p, k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][p] = _mm512_fmadd_ps(xb[r], wv, acc[r][p]);
  }
}

// Row r's 8 outputs from its 4 pair accumulators, each combined in Combine8's order, by vector
// operations: pair sums first (a lane plus its neighbour: a1 + a0 is a0 + a1, bit for bit),
// then sums of pairs of pairs, then the two halves, merging vectors as their lanes free up.
inline KVF_AVX512 __m256 CombineRow(const __m512 (&a)[4]) {
  __m512 t[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) t[p] = _mm512_add_ps(a[p], _mm512_permute_ps(a[p], 0xB1));
  // Even lanes: pairs 0 and 2's pair sums; odd lanes: pairs 1 and 3's.
  const __m512 m01 = _mm512_mask_blend_ps(0xAAAA, t[0], t[1]);
  const __m512 m23 = _mm512_mask_blend_ps(0xAAAA, t[2], t[3]);
  const __m512 u01 = _mm512_add_ps(m01, _mm512_permute_ps(m01, 0x4E));
  const __m512 u23 = _mm512_add_ps(m23, _mm512_permute_ps(m23, 0x4E));
  // Lanes 0-3 (and 8-11): pair p's (a0+a1)+(a2+a3); lanes 4-7 (12-15): its (a4+a5)+(a6+a7).
  const __m512 v = _mm512_mask_blend_ps(0xCCCC, u01, u23);
  const __m512 z = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  // Lane p: output 2p, lane 8 + p: output 2p + 1.
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, z));
}

// The end of an Rx8 tile: the lane combines, the tail k8..K from W itself, the stores.
template <typename P, int R>
inline KVF_AVX512 void FinishRx8(const float* const* xs, const typename P::T* w, int64_t ldw,
                                 int64_t K, float* const* ys, __m512 (&acc)[R][4]) {
  const int64_t k8 = K & ~int64_t{7};
  for (int r = 0; r < R; ++r) {
    const __m256 row = CombineRow(acc[r]);
    if (k8 == K) {
      _mm256_storeu_ps(ys[r], row);
      continue;
    }
    float s[8];
    _mm256_storeu_ps(s, row);
    for (int64_t t = k8; t < K; ++t) {
      for (int n = 0; n < 8; ++n) s[n] = __builtin_fmaf(xs[r][t], P::At(w + n * ldw + t), s[n]);
    }
    for (int n = 0; n < 8; ++n) ys[r][n] = s[n];
  }
}

template <int R>
inline KVF_AVX512 void ZeroRx8(__m512 (&acc)[R][4]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  }
}

// 4 rows of x by 8 rows of W (4 pairs), converting W as it goes: 16 accumulators. x rows are 4
// pointers, y rows too; `next` as for TileRx4 (8 rows).
template <typename P>
inline KVF_AVX512 void Tile4x8(const float* const* xs, const typename P::T* w, int64_t ldw,
                               int64_t K, float* const* ys, const typename P::T* next) {
  const int64_t k8 = K & ~int64_t{7};
  auto pair = [&](int p, int64_t k) KVF_AVX512 __attribute__((always_inline)) {
    return P::Load(w + (2 * p) * ldw + k, w + (2 * p + 1) * ldw + k);
  };
  __m512 acc[4][4];
  ZeroRx8<4>(acc);
  int64_t k = 0;
  if (next != nullptr) {
    for (const int64_t k32 = K & ~int64_t{31}; k < k32; k += 32) {
      Prefetch4x32<P>(next, ldw, k);
      Prefetch4x32<P>(next + 4 * ldw, ldw, k);
#pragma GCC unroll 4
      for (int u = 0; u < 32; u += 8) StepRx8<4>(xs, k + u, pair, acc);
    }
  }
  for (; k < k8; k += 8) StepRx8<4>(xs, k, pair, acc);
  FinishRx8<P, 4>(xs, w, ldw, K, ys, acc);
}

// The 8 rows of W at w converted once for several tiles: for each k-step of 8, the 4 pairs' 16
// floats (row 2p's 8, then row 2p + 1's), so a tile's pair is one aligned load and no
// conversion. Asks for the next block's rows (`next`, or null) as it reads.
template <typename P>
inline KVF_AVX512 void PackPairs(const typename P::T* w, int64_t ldw, int64_t k8, float* packed,
                                 const typename P::T* next) {
  for (int64_t k = 0; k < k8; k += 8) {
    if (next != nullptr && k % 32 == 0) {
      Prefetch4x32<P>(next, ldw, k);
      Prefetch4x32<P>(next + 4 * ldw, ldw, k);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      _mm512_store_ps(packed + k * 8 + p * 16,
                      P::Load(w + (2 * p) * ldw + k, w + (2 * p + 1) * ldw + k));
    }
  }
}

// R rows of x (4 or 6) by a packed block (PackPairs of the same 8 rows of W; the tail still
// from W). Six rows: 24 accumulators, 6 broadcasts and 4 pair loads for 24 FMAs a step.
template <typename P, int R>
inline KVF_AVX512 void TileRx8Packed(const float* const* xs, const float* packed,
                                     const typename P::T* w, int64_t ldw, int64_t K,
                                     float* const* ys) {
  const int64_t k8 = K & ~int64_t{7};
  auto pair = [&](int p, int64_t k) KVF_AVX512 __attribute__((always_inline)) {
    return _mm512_load_ps(packed + k * 8 + p * 16);
  };
  __m512 acc[R][4];
  ZeroRx8<R>(acc);
  for (int64_t k = 0; k < k8; k += 8) StepRx8<R>(xs, k, pair, acc);
  FinishRx8<P, R>(xs, w, ldw, K, ys, acc);
}

// A 64-byte-aligned scratch of n floats for this thread (grown as needed, kept).
inline float* PackScratch(int64_t n) {
  static thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n + 16) buf.resize(static_cast<size_t>(n + 16));
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}
#endif  // KVF_MATMUL_F16C

// ---- Tiles. Each output follows exactly the FusedDot order: one V8 accumulator over k in steps
// of 8, fused multiply-adds (A: SoftFma or HwFma), the fixed lane combine, then the tail. ----

// R (1 or 2) rows of x by 4 rows of W. With one row of x (M = 1) the tile is bound by memory,
// not arithmetic: while it reads its 4 rows it asks for the next tile's (`next`, 4 rows ldw
// apart, or null for none: the first tile of a row block reads W from memory, the others from
// cache) 32 elements at a time, as far ahead as the tile is long. The accumulation is the
// canonical order whatever the unrolling; the loops over r and c are unrolled so that the
// accumulators stay in registers.
template <typename L, typename A, int R>
inline void TileRx4(const float* const* xs, const typename L::T* w, int64_t ldw, int64_t K,
                    float* const* ys, const typename L::T* next) {
  const int64_t k8 = K & ~int64_t{7};
  const int64_t k32 = next != nullptr ? K & ~int64_t{31} : 0;
  V8 acc[R][4];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = Splat8(0);
  }
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    V8 vw[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) vw[c] = L::Load(w + c * ldw + k);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const V8 vx = Load8(xs[r] + k);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = A::Fma(vx, vw[c], acc[r][c]);
    }
  };
  int64_t k = 0;
  for (; k < k32; k += 32) {
    Prefetch4x32<L>(next, ldw, k);
    step(k);
    step(k + 8);
    step(k + 16);
    step(k + 24);
  }
  for (; k < k8; k += 8) step(k);
  for (int r = 0; r < R; ++r) {
    float s[4] = {Combine8(acc[r][0]), Combine8(acc[r][1]), Combine8(acc[r][2]),
                  Combine8(acc[r][3])};
    for (int64_t t = k8; t < K; ++t) {
      for (int c = 0; c < 4; ++c) s[c] = A::Fma1(xs[r][t], L::At(w + c * ldw + t), s[c]);
    }
    for (int c = 0; c < 4; ++c) ys[r][c] = s[c];
  }
}

// One row of x by one row of W: FusedDot with converted weights.
template <typename L, typename A>
inline float Dot1(const float* x, const typename L::T* w, int64_t K) {
  const int64_t k8 = K & ~int64_t{7};
  V8 acc = Splat8(0.0f);
  for (int64_t k = 0; k < k8; k += 8) acc = A::Fma(Load8(x + k), L::Load(w + k), acc);
  float s = Combine8(acc);
  for (int64_t k = k8; k < K; ++k) s = A::Fma1(x[k], L::At(w + k), s);
  return s;
}

// Rows [n0, n1) of one part W (rows ldw apart) for all M rows of x (ldx apart); output column
// of W row n is y[m * ldy + n]. Rows of x are taken in blocks so the x block stays in L2 while 4
// rows of W stay in L1.
template <typename L, typename A>
inline void PartColumns(const float* x, int64_t M, int64_t K, int64_t ldx, const typename L::T* w,
                        int64_t ldw, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int64_t kRowBlock = 32;
  for (int64_t mb = 0; mb < M; mb += kRowBlock) {
    const int64_t me = std::min(M, mb + kRowBlock);
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      const typename L::T* wn = w + n * ldw;
      // The first tile of this W block asks for the next block's rows.
      const typename L::T* next = n + 8 <= n1 ? wn + 4 * ldw : nullptr;
      int64_t m = mb;
      for (; m + 2 <= me; m += 2) {
        const float* xs[2] = {x + m * ldx, x + (m + 1) * ldx};
        float* ys[2] = {y + m * ldy + n, y + (m + 1) * ldy + n};
        TileRx4<L, A, 2>(xs, wn, ldw, K, ys, m == mb ? next : nullptr);
      }
      if (m < me) {
        const float* xs[1] = {x + m * ldx};
        float* ys[1] = {y + m * ldy + n};
        TileRx4<L, A, 1>(xs, wn, ldw, K, ys, m == mb ? next : nullptr);
      }
    }
    for (; n < n1; ++n) {
      for (int64_t m = mb; m < me; ++m) y[m * ldy + n] = Dot1<L, A>(x + m * ldx, w + n * ldw, K);
    }
  }
}

#if KVF_MATMUL_AVX512
// PartColumns with 4x8 AVX-512 tiles where they fit; the rows and columns left over take the
// 8-wide tiles (same bits either way). P: the pair loader, L: the 8-wide loader of that dtype.
template <typename P, typename L>
inline KVF_AVX512 void PartColumnsWide(const float* x, int64_t M, int64_t K, int64_t ldx,
                                       const typename L::T* w, int64_t ldw, float* y, int64_t ldy,
                                       int64_t n0, int64_t n1) {
  constexpr int64_t kRowBlock =
      126;  // rows of x per pass over W (21 six-row tiles): 128 measured 3-5 % above 32
  const int64_t n8 = n0 + (n1 - n0) / 8 * 8;
  for (int64_t mb = 0; mb < M; mb += kRowBlock) {
    const int64_t me = std::min(M, mb + kRowBlock);
    // Two tiles or more share one conversion of each W block.
    float* packed = me - mb >= 8 ? PackScratch((K & ~int64_t{7}) * 8) : nullptr;
    int64_t done = mb;  // rows [mb, done) are taken by the wide tiles
    for (int64_t n = n0; n < n8; n += 8) {
      const typename L::T* wn = w + n * ldw;
      const typename L::T* next = n + 16 <= n1 ? wn + 8 * ldw : nullptr;
      const float* xs[6];
      float* ys[6];
      auto rows = [&](int64_t m, int r) {
        for (int i = 0; i < r; ++i) {
          xs[i] = x + (m + i) * ldx;
          ys[i] = y + (m + i) * ldy + n;
        }
      };
      int64_t m = mb;
      if (packed != nullptr) {
        PackPairs<P>(wn, ldw, K & ~int64_t{7}, packed, next);
        for (; m + 6 <= me; m += 6) {
          rows(m, 6);
          TileRx8Packed<P, 6>(xs, packed, wn, ldw, K, ys);
        }
        for (; m + 4 <= me; m += 4) {
          rows(m, 4);
          TileRx8Packed<P, 4>(xs, packed, wn, ldw, K, ys);
        }
      } else {
        for (; m + 4 <= me; m += 4) {
          rows(m, 4);
          Tile4x8<P>(xs, wn, ldw, K, ys, m == mb ? next : nullptr);
        }
      }
      done = m;
    }
    // Rows done..me over the wide columns, and every row over the columns past n8.
    if (n0 < n8 && done < me)
      PartColumns<L, HwFma>(x + done * ldx, me - done, K, ldx, w, ldw, y + done * ldy, ldy, n0, n8);
    if (n8 < n1)
      PartColumns<L, HwFma>(x + mb * ldx, me - mb, K, ldx, w, ldw, y + mb * ldy, ldy, n8, n1);
  }
}
#endif  // KVF_MATMUL_AVX512

// One dtype's part kernel on one SIMD path: PartColumns with 8-wide tiles, or (AVX-512) the
// 4x8 tiles with the 8-wide ones for what is left.
template <typename L, typename A>
struct Narrow {
  static inline void Run(const float* x, int64_t M, int64_t K, int64_t ldx, const typename L::T* w,
                         int64_t ldw, float* y, int64_t ldy, int64_t n0, int64_t n1) {
    PartColumns<L, A>(x, M, K, ldx, w, ldw, y, ldy, n0, n1);
  }
};
#if KVF_MATMUL_AVX512
template <typename P, typename L>
struct Wide {
  static inline KVF_AVX512 void Run(const float* x, int64_t M, int64_t K, int64_t ldx,
                                    const typename L::T* w, int64_t ldw, float* y, int64_t ldy,
                                    int64_t n0, int64_t n1) {
    PartColumnsWide<P, L>(x, M, K, ldx, w, ldw, y, ldy, n0, n1);
  }
};
#endif

// Columns [n0, n1) of y (over all parts), with each dtype's part kernel for one SIMD path.
template <typename Bf16, typename F16, typename F32>
inline void Columns(const float* x, int64_t M, int64_t K, int64_t ldx,
                    std::span<const WeightMatrix> parts, int64_t ldy, float* y, int64_t n0,
                    int64_t n1) {
  int64_t first = 0;  // y column of the part's row 0
  for (const WeightMatrix& p : parts) {
    const int64_t b = std::max(n0, first) - first, e = std::min(n1, first + p.rows) - first;
    if (b < e) {
      float* yp = y + first;
      const auto* half = reinterpret_cast<const uint16_t*>(p.data);
      switch (p.dtype) {
        case formats::DType::kBF16:
          Bf16::Run(x, M, K, ldx, half, p.ld(), yp, ldy, b, e);
          break;
        case formats::DType::kF16:
          F16::Run(x, M, K, ldx, half, p.ld(), yp, ldy, b, e);
          break;
        default:
          F32::Run(x, M, K, ldx, reinterpret_cast<const float*>(p.data), p.ld(), yp, ldy, b, e);
          break;
      }
    }
    first += p.rows;
  }
}

#if KVF_MATMUL_F16C
// `flatten` inlines the whole template chain into each entry point, where the F16C loader's
// target matches the caller's.
__attribute__((target("avx2,fma,f16c"), flatten)) void ColumnsAvx2(
    const float* x, int64_t M, int64_t K, int64_t ldx, std::span<const WeightMatrix> parts,
    int64_t ldy, float* y, int64_t n0, int64_t n1) {
  Columns<Narrow<BF16Weights, HwFma>, Narrow<F16cWeights, HwFma>, Narrow<F32Weights, HwFma>>(
      x, M, K, ldx, parts, ldy, y, n0, n1);
}

#endif

#if KVF_MATMUL_AVX512
__attribute__((target("avx512f,avx512dq,avx2,fma,f16c"), flatten)) void ColumnsAvx512(
    const float* x, int64_t M, int64_t K, int64_t ldx, std::span<const WeightMatrix> parts,
    int64_t ldy, float* y, int64_t n0, int64_t n1) {
  Columns<Wide<BF16Pairs, BF16Weights>, Wide<F16Pairs, F16cWeights>, Wide<F32Pairs, F32Weights>>(
      x, M, K, ldx, parts, ldy, y, n0, n1);
}
#endif

__attribute__((flatten)) void ColumnsGeneric(const float* x, int64_t M, int64_t K, int64_t ldx,
                                             std::span<const WeightMatrix> parts, int64_t ldy,
                                             float* y, int64_t n0, int64_t n1) {
  Columns<Narrow<BF16Weights, SoftFma>, Narrow<F16Weights, SoftFma>, Narrow<F32Weights, SoftFma>>(
      x, M, K, ldx, parts, ldy, y, n0, n1);
}

}  // namespace

bool CpuHasAvx2() {
  // F16C is read from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
  // "f16c". AVX2 through the builtin also checks that the OS saves the YMM registers.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           (ecx & (1u << 29)) != 0;
  }();
  return has;
}

bool CpuHasAvx512Vnni() {
  static const bool has =
      CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni");
  return has;
}

namespace {

std::atomic<MatMulPath> g_forced_path{MatMulPath::kAuto};

using ColumnsFn = void (*)(const float*, int64_t, int64_t, int64_t, std::span<const WeightMatrix>,
                           int64_t, float*, int64_t, int64_t);

// The widest path the CPU runs, or the one a test forced (falling back to the next narrower).
ColumnsFn PickColumns() {
  MatMulPath path = g_forced_path.load(std::memory_order_relaxed);
  if (path == MatMulPath::kAuto || path == MatMulPath::kAmx) path = MatMulPath::kAvx512;
#if KVF_MATMUL_AVX512
  if (path == MatMulPath::kAvx512 && MatMulHasAvx512Path()) return &ColumnsAvx512;
#endif
#if KVF_MATMUL_F16C
  if (path != MatMulPath::kPortable && MatMulHasF16cPath()) return &ColumnsAvx2;
#endif
  return &ColumnsGeneric;
}

}  // namespace

bool MatMulHasF16cPath() {
#if KVF_MATMUL_F16C
  return CpuHasAvx2();
#else
  return false;
#endif
}

bool MatMulHasAvx512Path() {
#if KVF_MATMUL_AVX512
  // The builtin also checks that the OS saves the ZMM and mask registers.
  static const bool has =
      CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

void ForceMatMulPathForTest(MatMulPath path) { g_forced_path.store(path); }

void MatMul(const float* x, int64_t M, int64_t K, std::span<const WeightMatrix> parts, float* y,
            ThreadPool* pool) {
  int64_t N = 0;
  for (const WeightMatrix& p : parts) N += p.rows;
  MatMulStrided(x, M, K, K, parts, y, N, pool);
}

namespace {

// Columns [n0, n1) of y when some part is quantized: those parts from x's blocks `xq`, the
// others with `run`, part by part.
void MixedColumns(ColumnsFn run, const QuantizedRows& xq, const QuantizedRowsK& xk, const float* x,
                  int64_t M, int64_t K, int64_t ldx, std::span<const WeightMatrix> parts, float* y,
                  int64_t ldy, int64_t n0, int64_t n1) {
  const MatMulPath forced = g_forced_path.load(std::memory_order_relaxed);
  const QuantPath widest = forced == MatMulPath::kPortable ? QuantPath::kPortable
                           : forced == MatMulPath::kF16c   ? QuantPath::kAvx2
                           : forced == MatMulPath::kAvx512 ? QuantPath::kAvx512Vnni
                                                           : QuantPath::kAmx;
  int64_t first = 0;  // y column of the part's row 0
  for (const WeightMatrix& p : parts) {
    const int64_t b = std::max(n0, first) - first, e = std::min(n1, first + p.rows) - first;
    if (b < e && IsKQuant(p.dtype)) {
      KQuantColumns(xk, p, y + first, ldy, b, e, widest);
    } else if (b < e && p.quantized()) {
      QuantColumns(xq, p, y + first, ldy, b, e, widest);
    } else if (b < e) {
      run(x, M, K, ldx, {&p, 1}, ldy, y + first, b, e);
    }
    first += p.rows;
  }
}

}  // namespace

void MatMulStrided(const float* x, int64_t M, int64_t K, int64_t ldx,
                   std::span<const WeightMatrix> parts, float* y, int64_t ldy, ThreadPool* pool) {
  int64_t N = 0;
  bool blocks32 = false, super_blocks = false;  // the activation blocks some part needs
  for (const WeightMatrix& p : parts) {
    N += p.rows;
    super_blocks = super_blocks || IsKQuant(p.dtype);
    blocks32 = blocks32 || (p.quantized() && !IsKQuant(p.dtype));
  }
  const bool quantized = blocks32 || super_blocks;
  const ColumnsFn run = PickColumns();
  QuantizedRows xq;
  QuantizedRowsK xk;
  if (blocks32) QuantizeRows(x, M, K, ldx, &xq, pool);
  if (super_blocks) QuantizeRowsK(x, M, K, ldx, &xk, pool);
  auto body = [&](int64_t n0, int64_t n1) {
    if (quantized) {
      MixedColumns(run, xq, xk, x, M, K, ldx, parts, y, ldy, n0, n1);
    } else {
      run(x, M, K, ldx, parts, ldy, y, n0, n1);
    }
  };
  // Split columns in multiples of 16 (whole tiles); small problems run inline.
  if (pool == nullptr || M * N * K < (int64_t{1} << 16)) {
    body(0, N);
    return;
  }
  pool->ParallelFor(N, 16, body);
}

void MatMul(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y,
            ThreadPool* pool) {
  const WeightMatrix part = F32Matrix(w, N, K);
  MatMul(x, M, K, std::span<const WeightMatrix>(&part, 1), y, pool);
}

void MatMulReference(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      // Written out (not via FusedDot) so the reference checks the tiling's order independently.
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const int64_t k8 = K & ~int64_t{7};
      for (int64_t k = 0; k < k8; ++k)
        lanes[k % 8] = std::fma(x[m * K + k], w[n * K + k], lanes[k % 8]);
      float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (int64_t k = k8; k < K; ++k) s = std::fma(x[m * K + k], w[n * K + k], s);
      y[m * N + n] = s;
    }
  }
}

}  // namespace kvferry::engine::kernels
