#include "engine/kernels/matmul.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>

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

// ---- Tiles. Each output follows exactly the canonical Dot order: one V8 accumulator over k in
// steps of 8, the fixed lane combine, then the tail. ----

// Asks for the cache lines of `rows` (4 rows of W, ldw apart) covering elements [k, k + 32):
// one 64-byte line per row for 16-bit weights, two for f32.
template <typename L>
inline __attribute__((always_inline)) void Prefetch4x32(const typename L::T* rows, int64_t ldw,
                                                        int64_t k) {
  for (int r = 0; r < 4; ++r) {
    const typename L::T* p = rows + r * ldw + k;
    __builtin_prefetch(p, 0, 3);
    if constexpr (sizeof(typename L::T) == 4) __builtin_prefetch(p + 16, 0, 3);
  }
}

// One row of x by 4 rows of W (M = 1, odd M). With one row of x the tile is bound by memory,
// not arithmetic: while it reads its 4 rows it asks for the next tile's (`next`, 4 rows ldw
// apart, or null for none) 32 elements at a time, as far ahead as the tile is long. The
// accumulation is the canonical order whatever the unrolling.
template <typename L>
inline void Tile1x4(const float* x0, const typename L::T* w, int64_t ldw, int64_t K, float* y0,
                    const typename L::T* next) {
  const typename L::T* w0 = w;
  const typename L::T* w1 = w + ldw;
  const typename L::T* w2 = w + 2 * ldw;
  const typename L::T* w3 = w + 3 * ldw;
  const int64_t k8 = K & ~int64_t{7};
  const int64_t k32 = next != nullptr ? K & ~int64_t{31} : 0;
  V8 a0 = Splat8(0), a1 = Splat8(0), a2 = Splat8(0), a3 = Splat8(0);
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    const V8 vx0 = Load8(x0 + k);
    a0 += vx0 * L::Load(w0 + k);
    a1 += vx0 * L::Load(w1 + k);
    a2 += vx0 * L::Load(w2 + k);
    a3 += vx0 * L::Load(w3 + k);
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
  float s[4] = {Combine8(a0), Combine8(a1), Combine8(a2), Combine8(a3)};
  for (k = k8; k < K; ++k) {
    s[0] += x0[k] * L::At(w0 + k);
    s[1] += x0[k] * L::At(w1 + k);
    s[2] += x0[k] * L::At(w2 + k);
    s[3] += x0[k] * L::At(w3 + k);
  }
  for (int i = 0; i < 4; ++i) y0[i] = s[i];
}

// A 2 (rows of x) by 4 (rows of W) tile; `next` as for Tile1x4 (the first pair of rows of a
// row block reads W from memory, the others from cache, and pass null).
template <typename L>
inline void Tile2x4(const float* x0, const float* x1, const typename L::T* w, int64_t ldw,
                    int64_t K, float* y0, float* y1, const typename L::T* next) {
  const typename L::T* w0 = w;
  const typename L::T* w1 = w + ldw;
  const typename L::T* w2 = w + 2 * ldw;
  const typename L::T* w3 = w + 3 * ldw;
  const int64_t k8 = K & ~int64_t{7};
  const int64_t k32 = next != nullptr ? K & ~int64_t{31} : 0;
  V8 a00 = Splat8(0), a01 = Splat8(0), a02 = Splat8(0), a03 = Splat8(0);
  V8 a10 = Splat8(0), a11 = Splat8(0), a12 = Splat8(0), a13 = Splat8(0);
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    const V8 vx0 = Load8(x0 + k), vx1 = Load8(x1 + k);
    const V8 vw0 = L::Load(w0 + k), vw1 = L::Load(w1 + k);
    const V8 vw2 = L::Load(w2 + k), vw3 = L::Load(w3 + k);
    a00 += vx0 * vw0;
    a01 += vx0 * vw1;
    a02 += vx0 * vw2;
    a03 += vx0 * vw3;
    a10 += vx1 * vw0;
    a11 += vx1 * vw1;
    a12 += vx1 * vw2;
    a13 += vx1 * vw3;
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
  float s[8] = {Combine8(a00), Combine8(a01), Combine8(a02), Combine8(a03),
                Combine8(a10), Combine8(a11), Combine8(a12), Combine8(a13)};
  for (k = k8; k < K; ++k) {
    const float v0 = L::At(w0 + k), v1 = L::At(w1 + k), v2 = L::At(w2 + k), v3 = L::At(w3 + k);
    s[0] += x0[k] * v0;
    s[1] += x0[k] * v1;
    s[2] += x0[k] * v2;
    s[3] += x0[k] * v3;
    s[4] += x1[k] * v0;
    s[5] += x1[k] * v1;
    s[6] += x1[k] * v2;
    s[7] += x1[k] * v3;
  }
  for (int i = 0; i < 4; ++i) {
    y0[i] = s[i];
    y1[i] = s[4 + i];
  }
}

// One row of x by one row of W: the canonical Dot with converted weights.
template <typename L>
inline float Dot1(const float* x, const typename L::T* w, int64_t K) {
  const int64_t k8 = K & ~int64_t{7};
  V8 acc = Splat8(0.0f);
  for (int64_t k = 0; k < k8; k += 8) acc += Load8(x + k) * L::Load(w + k);
  float s = Combine8(acc);
  for (int64_t k = k8; k < K; ++k) s += x[k] * L::At(w + k);
  return s;
}

// Rows [n0, n1) of one part W (rows ldw apart) for all M rows of x (ldx apart); output column
// of W row n is y[m * ldy + n]. Rows of x are taken in blocks so the x block stays in L2 while 4
// rows of W stay in L1.
template <typename L>
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
        Tile2x4<L>(x + m * ldx, x + (m + 1) * ldx, wn, ldw, K, y + m * ldy + n,
                   y + (m + 1) * ldy + n, m == mb ? next : nullptr);
      }
      if (m < me) Tile1x4<L>(x + m * ldx, wn, ldw, K, y + m * ldy + n, m == mb ? next : nullptr);
    }
    for (; n < n1; ++n) {
      for (int64_t m = mb; m < me; ++m) y[m * ldy + n] = Dot1<L>(x + m * ldx, w + n * ldw, K);
    }
  }
}

// Columns [n0, n1) of y (over all parts), with the loaders chosen for one SIMD path.
template <typename F16L>
inline void Columns(const float* x, int64_t M, int64_t K, int64_t ldx,
                    std::span<const WeightMatrix> parts, int64_t ldy, float* y, int64_t n0,
                    int64_t n1) {
  int64_t first = 0;  // y column of the part's row 0
  for (const WeightMatrix& p : parts) {
    const int64_t b = std::max(n0, first) - first, e = std::min(n1, first + p.rows) - first;
    if (b < e) {
      float* yp = y + first;
      switch (p.dtype) {
        case formats::DType::kBF16:
          PartColumns<BF16Weights>(x, M, K, ldx, reinterpret_cast<const uint16_t*>(p.data), p.ld(),
                                   yp, ldy, b, e);
          break;
        case formats::DType::kF16:
          PartColumns<F16L>(x, M, K, ldx, reinterpret_cast<const uint16_t*>(p.data), p.ld(), yp,
                            ldy, b, e);
          break;
        default:
          PartColumns<F32Weights>(x, M, K, ldx, reinterpret_cast<const float*>(p.data), p.ld(), yp,
                                  ldy, b, e);
          break;
      }
    }
    first += p.rows;
  }
}

#if KVF_MATMUL_F16C
// `flatten` inlines the whole template chain into each entry point, where the F16C loader's
// target matches the caller's.
__attribute__((target("avx2,f16c"), flatten)) void ColumnsAvx2(const float* x, int64_t M, int64_t K,
                                                               int64_t ldx,
                                                               std::span<const WeightMatrix> parts,
                                                               int64_t ldy, float* y, int64_t n0,
                                                               int64_t n1) {
  Columns<F16cWeights>(x, M, K, ldx, parts, ldy, y, n0, n1);
}

#endif

__attribute__((flatten)) void ColumnsGeneric(const float* x, int64_t M, int64_t K, int64_t ldx,
                                             std::span<const WeightMatrix> parts, int64_t ldy,
                                             float* y, int64_t n0, int64_t n1) {
  Columns<F16Weights>(x, M, K, ldx, parts, ldy, y, n0, n1);
}

}  // namespace

bool CpuHasAvx2() {
  // F16C is read from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
  // "f16c". AVX2 through the builtin also checks that the OS saves the YMM registers.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return __builtin_cpu_supports("avx2") && (ecx & (1u << 29)) != 0;
  }();
  return has;
}

namespace {

std::atomic<MatMulPath> g_forced_path{MatMulPath::kAuto};

bool UseF16cPath() {
  switch (g_forced_path.load(std::memory_order_relaxed)) {
    case MatMulPath::kPortable:
      return false;
    case MatMulPath::kF16c:
      return MatMulHasF16cPath();
    case MatMulPath::kAuto:
      break;
  }
  return MatMulHasF16cPath();
}

#if KVF_MATMUL_F16C
constexpr auto ColumnsF16c = &ColumnsAvx2;
#else
constexpr auto ColumnsF16c = &ColumnsGeneric;  // never taken: MatMulHasF16cPath() is false
#endif

}  // namespace

bool MatMulHasF16cPath() {
#if KVF_MATMUL_F16C
  return CpuHasAvx2();
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

void MatMulStrided(const float* x, int64_t M, int64_t K, int64_t ldx,
                   std::span<const WeightMatrix> parts, float* y, int64_t ldy, ThreadPool* pool) {
  int64_t N = 0;
  for (const WeightMatrix& p : parts) N += p.rows;
  auto run = UseF16cPath() ? ColumnsF16c : &ColumnsGeneric;
  auto body = [&](int64_t n0, int64_t n1) { run(x, M, K, ldx, parts, ldy, y, n0, n1); };
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
      // Written out (not via Dot) so the reference checks the tiling's order independently.
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const int64_t k8 = K & ~int64_t{7};
      for (int64_t k = 0; k < k8; ++k) lanes[k % 8] += x[m * K + k] * w[n * K + k];
      float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (int64_t k = k8; k < K; ++k) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  }
}

}  // namespace kvferry::engine::kernels
