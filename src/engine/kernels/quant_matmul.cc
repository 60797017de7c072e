#include "engine/kernels/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/kernels/quant_amx.h"
#include "engine/kernels/quant_q4_q5.h"
#include "engine/kernels/quant_vnni_panel.h"
#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

// Rows of x per thread's share when a quantizer splits them (prefill: hundreds of rows).
constexpr int64_t kParallelQuantizeRows = 16;

// The weight block types: their size, whether they add a minimum (at bytes 2-3, an F16 m:
// value = d * q + m), and their 32 values as the integers q the dot multiplies (Q8_0: the bytes;
// Q4_0: each nibble minus 8; Q5_0: each nibble with its fifth bit, minus 16; Q4_1, Q5_1: the
// same without the offset). Every block starts with its F16 scale d.
template <typename Block, bool kMin, void (*kInts)(const Block&, int8_t*)>
struct BlockFormat {
  static constexpr int64_t kBytes = sizeof(Block);
  static constexpr bool kHasMin = kMin;
  static void Ints(const std::byte* block, int8_t out[32]) {
    Block b;
    std::memcpy(&b, block, sizeof(b));
    kInts(b, out);
  }
};
using Q8_0Format = BlockFormat<BlockQ8_0, false, Q8_0Ints>;
using Q4_0Format = BlockFormat<BlockQ4_0, false, Q4_0Ints>;
using Q5_0Format = BlockFormat<BlockQ5_0, false, Q5_0Ints>;
using Q4_1Format = BlockFormat<BlockQ4_1, true, Q4_1Ints>;
using Q5_1Format = BlockFormat<BlockQ5_1, true, Q5_1Ints>;

// fn(Format{}) for w's block type.
template <typename Fn>
auto WithFormat(formats::DType dtype, Fn&& fn) {
  switch (dtype) {
    case formats::DType::kQ4_0:
      return fn(Q4_0Format{});
    case formats::DType::kQ5_0:
      return fn(Q5_0Format{});
    case formats::DType::kQ4_1:
      return fn(Q4_1Format{});
    case formats::DType::kQ5_1:
      return fn(Q5_1Format{});
    case formats::DType::kQ8_0:
      return fn(Q8_0Format{});
    default:
      std::abort();  // precondition: a computed type (the loader refuses the others)
  }
}

uint16_t ScaleBits(const std::byte* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return d;
}
uint16_t MinBits(const std::byte* block) {
  uint16_t m;
  std::memcpy(&m, block + 2, 2);
  return m;
}

int32_t BlockDotQ8(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int64_t i = 0; i < kQ8_0Block; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}

// One output, one row of x: the definition in the header, step by step.
template <typename F>
float OutputPortable(const QuantizedRows& xq, int64_t m, const std::byte* wr) {
  const BlockQ8_0* xr = xq.blocks.data() + m * xq.blocks_per_row;
  const float* xd = xq.scales.data() + m * xq.blocks_per_row;
  float acc = 0.0f;
  int8_t ints[32];
  for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
    F::Ints(wr + b * F::kBytes, ints);
    const float scale = F16ToF32(ScaleBits(wr + b * F::kBytes)) * xd[b];
    acc = std::fma(scale, static_cast<float>(BlockDotQ8(ints, xr[b].q)), acc);
    if constexpr (F::kHasMin) {
      acc =
          std::fma(F16ToF32(MinBits(wr + b * F::kBytes)), xq.sums[m * xq.blocks_per_row + b], acc);
    }
  }
  return acc;
}

// Columns [n0, n1) of rows [m_begin, xq.rows).
template <typename F>
void ColumnsPortable(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t n0, int64_t n1, int64_t m_begin = 0) {
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t m = m_begin; m < xq.rows; ++m) {
      y[m * ldy + n] = OutputPortable<F>(xq, m, w.row(n));
    }
  }
}

void QuantColumnsPortable(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy,
                          int64_t n0, int64_t n1) {
  WithFormat(w.dtype, [&](auto f) { ColumnsPortable<decltype(f)>(xq, w, y, ldy, n0, n1); });
}

#if defined(__x86_64__) && !defined(__clang__)
#define KVF_Q8_SIMD 1
// g++ 12's AVX-512 headers start some intrinsics from _mm512_undefined_* values and then warn
// that they "may be used uninitialized" where those intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVF_Q8_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVF_Q8_AVX512_ISA "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define KVF_Q8_AVX512 __attribute__((target(KVF_Q8_AVX512_ISA)))
// The entry points: each inlines its whole call tree (`flatten`), compiled for its target.
#define KVF_Q8_AVX2_ENTRY __attribute__((target("avx2,fma,f16c"), flatten))
#define KVF_Q8_AVX512_ENTRY __attribute__((target(KVF_Q8_AVX512_ISA), flatten))
#define KVF_Q8_INLINE inline  // inlined by the entry points (above), in their target

// Rows of x per pass over a tile of outputs: their blocks stay in L2 while the tile's W blocks
// are read once per pass.
constexpr int64_t kRowsPerPass = 256;
// Blocks ahead of the one in use whose lines each of the tile's 8 rows asks for: eight streams
// of short steps are more than the hardware prefetcher keeps ahead of.
constexpr int64_t kPrefetchBlocks = 16;
// Fewer rows of x than this (decode) stream W row by row instead (Stream4).
constexpr int64_t kStreamBelowRows = 4;
// How far ahead of the block in use Stream4 asks for W's lines.
constexpr int64_t kStreamAheadBytes = 4096;

// Sixteen bytes of nibbles as 32 bytes: value j from byte j's low nibble, j + 16 its high one.
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Nibbles256(const std::byte* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low),
                          _mm_and_si128(packed, low));
}

// Four bytes of fifth bits as 32 bytes of 0 or 16: byte i takes bit i of qh (qh broadcast, each
// byte picking its quarter of it, masked with its own bit).
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i FifthBits256(const std::byte* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i quarters = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(quarters, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// A block's 32 values q as signed bytes in one vector (F::Ints, vectorized).
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Ints256(Q8_0Format, const std::byte* block) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
}
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Ints256(Q4_0Format, const std::byte* block) {
  return _mm256_sub_epi8(Nibbles256(block + 2), _mm256_set1_epi8(8));
}
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Ints256(Q5_0Format, const std::byte* block) {
  return _mm256_sub_epi8(_mm256_or_si256(Nibbles256(block + 6), FifthBits256(block + 2)),
                         _mm256_set1_epi8(16));
}
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Ints256(Q4_1Format, const std::byte* block) {
  return Nibbles256(block + 4);
}
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Ints256(Q5_1Format, const std::byte* block) {
  return _mm256_or_si256(Nibbles256(block + 8), FifthBits256(block + 4));
}

KVF_Q8_AVX2 KVF_Q8_INLINE V8 ToV8(__m256 v) {
  V8 f;
  std::memcpy(&f, &v, sizeof(f));
  return f;
}

// The F16 scales (offset 0) or minimums (offset 2) of 8 blocks as f32. Inserted into the vector
// one by one: eight 2-byte stores and a 16-byte load of them stalled store forwarding (perf:
// 22 % of Q4_0 decode on the multiply after it).
KVF_Q8_AVX2 KVF_Q8_INLINE short HalfAt(const std::byte* p) {
  short h;
  std::memcpy(&h, p, 2);
  return h;
}
KVF_Q8_AVX2 KVF_Q8_INLINE V8 F16At(const std::byte* const* b, int offset) {
  return ToV8(_mm256_cvtph_ps(_mm_setr_epi16(
      HalfAt(b[0] + offset), HalfAt(b[1] + offset), HalfAt(b[2] + offset), HalfAt(b[3] + offset),
      HalfAt(b[4] + offset), HalfAt(b[5] + offset), HalfAt(b[6] + offset), HalfAt(b[7] + offset))));
}
KVF_Q8_AVX2 KVF_Q8_INLINE V8 F16Scales(const std::byte* const* blocks) { return F16At(blocks, 0); }

// The exact dot of a block of W (its values `wq`) and a block of x, as 8 int32 partial sums:
// |w| as unsigned times x with w's sign (vpmaddubsw never saturates: |w| <= 128, |x| <= 127),
// pairs widened by vpmaddwd.
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i BlockDot8(__m256i wq, __m256i xv) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// Eight vectors of 8 int32 -> one vector of their 8 sums.
KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Sum8x8(const __m256i v[8]) {
  const __m256i t0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i t1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                          _mm256_permute2x128_si256(t0, t1, 0x31));
}

// The exact integer dots of 8 W blocks with one x block, two ways, for Tile8. Prepare takes the
// W blocks (once per block column, reused for every row of x); DotSame returns lane i = the dot
// of W block i with x, as f32 (exact: |sum| <= 32 * 128 * 127 < 2^24). The sums are exact, so
// both give the same values. Scales8 and Fma are the tile's other vector steps (the templates
// themselves hold no intrinsics, so each copy compiles for its own target).
template <typename F>
struct Avx2Dots {
  static constexpr int64_t kBytes = F::kBytes;
  static constexpr bool kHasMin = F::kHasMin;
  // The blocks themselves: sixteen precomputed vectors would not fit the sixteen registers.
  struct W {
    const std::byte* blocks[8];
  };
  static KVF_Q8_AVX2 KVF_Q8_INLINE W Prepare(const std::byte* const* blocks) {
    W w;
    for (int i = 0; i < 8; ++i) w.blocks[i] = blocks[i];
    return w;
  }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 DotSame(const W& w, const int8_t* x) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    __m256i v[8];
    for (int i = 0; i < 8; ++i) v[i] = BlockDot8(Ints256(F{}, w.blocks[i]), xv);
    return ToV8(_mm256_cvtepi32_ps(Sum8x8(v)));
  }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Scales8(const std::byte* const* b) { return F16Scales(b); }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Mins8(const std::byte* const* b) { return F16At(b, 2); }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Fma(V8 a, V8 b, V8 c) { return HwFma::Fma(a, b, c); }
};

// AVX-512 VNNI: blocks i and i + 4 side by side in one 64-byte vector. vpdpbusd multiplies
// unsigned by signed bytes, so x goes in offset by 128 (x ^ 0x80 = x + 128, 1..255) and each
// lane starts from -128 * (its four w bytes' sum): dot(x + 128, w) - 128 * sum(w) = dot(x, w),
// exactly (|lane| < 2^17).
template <typename F>
struct Avx512Dots {
  static constexpr int64_t kBytes = F::kBytes;
  static constexpr bool kHasMin = F::kHasMin;
  struct W {
    __m512i q[4], start[4];
  };
  static KVF_Q8_AVX512 KVF_Q8_INLINE W Prepare(const std::byte* const* blocks) {
    W w;
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int p = 0; p < 4; ++p) {
      w.q[p] = _mm512_inserti64x4(_mm512_castsi256_si512(Ints256(F{}, blocks[p])),
                                  Ints256(F{}, blocks[p + 4]), 1);
      w.start[p] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, w.q[p]));
    }
    return w;
  }
  // Four vectors of two 8-lane halves -> the 8 halves' sums, each vector's low half first:
  // [v0.lo, v1.lo, v2.lo, v3.lo, v0.hi, v1.hi, v2.hi, v3.hi].
  static KVF_Q8_AVX512 KVF_Q8_INLINE __m256i Reduce(const __m512i v[4]) {
    const __m512i t0 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
    const __m512i t1 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
    // Each 128-bit chunk k: the sums of chunk k of v0, v1, v2, v3.
    const __m512i u =
        _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    const __m512i s = _mm512_add_epi32(u, _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(s, s, _MM_SHUFFLE(0, 0, 2, 0)));
  }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 DotSame(const W& w, const int8_t* x) {
    const __m512i xu = _mm512_xor_si512(
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
        _mm512_set1_epi8(static_cast<char>(0x80)));
    const __m512i v[4] = {
        _mm512_dpbusd_epi32(w.start[0], xu, w.q[0]), _mm512_dpbusd_epi32(w.start[1], xu, w.q[1]),
        _mm512_dpbusd_epi32(w.start[2], xu, w.q[2]), _mm512_dpbusd_epi32(w.start[3], xu, w.q[3])};
    return ToV8(_mm256_cvtepi32_ps(Reduce(v)));
  }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Scales8(const std::byte* const* b) { return F16Scales(b); }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Mins8(const std::byte* const* b) { return F16At(b, 2); }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Fma(V8 a, V8 b, V8 c) { return HwFma::Fma(a, b, c); }
};

// Outputs n .. n + 7 for rows [m0, m1) of x: lane j of acc is output n + j's chain, so every
// output takes exactly the steps of OutputPortable.
template <typename D>
KVF_Q8_INLINE void Tile8(const QuantizedRows& xq, const WeightMatrix& w, int64_t n, int64_t m0,
                         int64_t m1, float* y, int64_t ldy, float* acc) {
  const int64_t nb = xq.blocks_per_row;
  const std::byte* rows[8];
  for (int j = 0; j < 8; ++j) rows[j] = w.row(n + j);
  std::fill(acc, acc + (m1 - m0) * 8, 0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* blocks[8];
    for (int j = 0; j < 8; ++j) {
      blocks[j] = rows[j] + b * D::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(blocks[j] + kPrefetchBlocks * D::kBytes),
                   _MM_HINT_T0);
    }
    const typename D::W wb = D::Prepare(blocks);
    const V8 dw = D::Scales8(blocks);
    V8 mw = Splat8(0.0f);
    if constexpr (D::kHasMin) mw = D::Mins8(blocks);
    for (int64_t m = m0; m < m1; ++m) {
      const V8 scale = dw * Splat8(xq.scales[m * nb + b]);
      float* a = acc + (m - m0) * 8;
      V8 sum = D::Fma(scale, D::DotSame(wb, xq.blocks[m * nb + b].q), Load8(a));
      if constexpr (D::kHasMin) sum = D::Fma(mw, Splat8(xq.sums[m * nb + b]), sum);
      Store8(a, sum);
    }
  }
  for (int64_t m = m0; m < m1; ++m) {
    for (int j = 0; j < 8; ++j) y[m * ldy + n + j] = acc[(m - m0) * 8 + j];
  }
}

// Row m of x against W's rows n .. n + 3, each read front to back (a stream the hardware
// prefetcher follows, helped ahead): every block's exact sum and scale, eight blocks at a time,
// then OutputPortable's chain over them, the four chains interleaved. `sums` and `scales` hold
// 4 * nb. (Written out, not through the Dots structs: their arrays of pointers cost decode 16 %.)
template <typename F>
KVF_Q8_AVX2 KVF_Q8_INLINE void Stream4(const QuantizedRows& xq, int64_t m, const WeightMatrix& w,
                                       int64_t n, float* y, float* sums, float* scales,
                                       float* mins) {
  const int64_t nb = xq.blocks_per_row;
  const BlockQ8_0* xr = xq.blocks.data() + m * nb;
  const float* xd = xq.scales.data() + m * nb;
  for (int r = 0; r < 4; ++r) {
    const std::byte* wr = w.row(n + r);
    float* s = sums + r * nb;
    float* sc = scales + r * nb;
    float* mn = mins + r * nb;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      __m256i v[8];
      const std::byte* blocks[8];
      for (int i = 0; i < 8; ++i) {
        blocks[i] = wr + (b + i) * F::kBytes;
        _mm_prefetch(reinterpret_cast<const char*>(blocks[i]) + kStreamAheadBytes, _MM_HINT_T0);
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[b + i].q));
        v[i] = BlockDot8(Ints256(F{}, blocks[i]), xv);
      }
      Store8(s + b, ToV8(_mm256_cvtepi32_ps(Sum8x8(v))));
      Store8(sc + b, F16Scales(blocks) * Load8(xd + b));
      if constexpr (F::kHasMin) Store8(mn + b, F16At(blocks, 2));
    }
    int8_t ints[32];
    for (; b < nb; ++b) {
      F::Ints(wr + b * F::kBytes, ints);
      s[b] = static_cast<float>(BlockDotQ8(ints, xr[b].q));
      sc[b] = F16ToF32(ScaleBits(wr + b * F::kBytes)) * xd[b];
      if constexpr (F::kHasMin) mn[b] = F16ToF32(MinBits(wr + b * F::kBytes));
    }
  }
  const float* xs = xq.sums.data() + m * nb;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < 4; ++r) {
      acc[r] = __builtin_fmaf(scales[r * nb + b], sums[r * nb + b], acc[r]);
      if constexpr (F::kHasMin) acc[r] = __builtin_fmaf(mins[r * nb + b], xs[b], acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) y[n + r] = acc[r];
}

// Columns [n0, n1) for decode's few rows of x: Stream4, the portable code for the last ones.
template <typename F>
KVF_Q8_INLINE void StreamColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                 int64_t ldy, int64_t n0, int64_t n1) {
  std::vector<float> scratch(static_cast<size_t>(12 * xq.blocks_per_row));
  const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
  for (int64_t m = 0; m < xq.rows; ++m) {
    for (int64_t n = n0; n < n4; n += 4) {
      Stream4<F>(xq, m, w, n, y + m * ldy, scratch.data(), scratch.data() + 4 * xq.blocks_per_row,
                 scratch.data() + 8 * xq.blocks_per_row);
    }
  }
  ColumnsPortable<F>(xq, w, y, ldy, n4, n1);
}

// Columns [n0, n1) of rows [m_begin, xq.rows) for many rows of x: Tile8 over passes of
// kRowsPerPass rows, the portable code for the last columns.
template <typename F, typename D>
KVF_Q8_INLINE void TileColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                               int64_t ldy, int64_t n0, int64_t n1, int64_t m_begin) {
  const int64_t n8 = n0 + (n1 - n0) / 8 * 8;
  float acc[kRowsPerPass * 8];
  for (int64_t m0 = m_begin; m0 < xq.rows; m0 += kRowsPerPass) {
    const int64_t m1 = std::min(xq.rows, m0 + kRowsPerPass);
    for (int64_t n = n0; n < n8; n += 8) Tile8<D>(xq, w, n, m0, m1, y, ldy, acc);
  }
  ColumnsPortable<F>(xq, w, y, ldy, n8, n1, m_begin);
}

template <typename F>
KVF_Q8_AVX2_ENTRY void StreamColumnsAvx2(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                         int64_t ldy, int64_t n0, int64_t n1) {
  StreamColumns<F>(xq, w, y, ldy, n0, n1);
}

template <typename F>
KVF_Q8_AVX2_ENTRY void TileColumnsAvx2(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                       int64_t ldy, int64_t n0, int64_t n1, int64_t m_begin = 0) {
  TileColumns<F, Avx2Dots<F>>(xq, w, y, ldy, n0, n1, m_begin);
}

template <typename F>
KVF_Q8_AVX512_ENTRY void TileColumnsAvx512(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                           int64_t ldy, int64_t n0, int64_t n1,
                                           int64_t m_begin = 0) {
  TileColumns<F, Avx512Dots<F>>(xq, w, y, ldy, n0, n1, m_begin);
}

// Eight vectors of 8 int32 (v[j] lane i = a[j][i]) transposed in place: v[i] lane j = a[j][i].
KVF_Q8_AVX2 KVF_Q8_INLINE void Transpose8x8(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_epi32(v[j], v[j + 1]);
    t[j + 1] = _mm256_unpackhi_epi32(v[j], v[j + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
    u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
    u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
    u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

// W's rows n .. n + 15 as an AmxPanel (quant_amx.h): each block's 32 values as bytes in the
// tile's order (row r's 4-byte group k at k * 64 + r * 4), its scale and minimum as f32. Eight
// rows at a time: their blocks' eight groups transposed, so one store writes a group of 8 rows.
// `as_unsigned`: each byte + 128 (XOR 0x80), the form quant_vnni_panel.h takes.
template <typename F>
KVF_Q8_AVX2_ENTRY void PackPanel(const WeightMatrix& w, int64_t n, int64_t nb, int8_t* q, float* dw,
                                 float* mw, bool as_unsigned = false) {
  const __m256i flip = _mm256_set1_epi8(as_unsigned ? static_cast<char>(0x80) : 0);
  for (int64_t r0 = 0; r0 < kAmxTile; r0 += 8) {
    const std::byte* rows[8];
    for (int j = 0; j < 8; ++j) rows[j] = w.row(n + r0 + j);
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* blocks[8];
      __m256i v[8];
      for (int j = 0; j < 8; ++j) {
        blocks[j] = rows[j] + b * F::kBytes;
        v[j] = Ints256(F{}, blocks[j]);
      }
      Transpose8x8(v);
      for (int k = 0; k < 8; ++k) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 512 + k * 64 + r0 * 4),
                            _mm256_xor_si256(v[k], flip));
      }
      Store8(dw + b * kAmxTile + r0, F16Scales(blocks));
      if constexpr (F::kHasMin) Store8(mw + b * kAmxTile + r0, F16At(blocks, 2));
    }
  }
}

// Columns [n0, n1) on the AMX tiles: whole tiles of 16 rows and 16 columns there, the rows and
// columns they leave on the VNNI tiles.
template <typename F>
void AmxColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                int64_t n1) {
  const int64_t nb = xq.blocks_per_row;
  const int64_t rows = xq.rows / kAmxTile * kAmxTile;
  const int64_t n16 = n0 + (n1 - n0) / kAmxTile * kAmxTile;
  std::vector<int8_t> q(static_cast<size_t>(nb * 512));
  std::vector<float> dw(static_cast<size_t>(nb * kAmxTile)), mw(dw.size());
  for (int64_t n = n0; n < n16; n += kAmxTile) {
    PackPanel<F>(w, n, nb, q.data(), dw.data(), mw.data());
    const AmxPanel panel{nb, q.data(), dw.data(), F::kHasMin ? mw.data() : nullptr};
    AmxTiles(xq, rows, panel, y + n, ldy);
  }
  TileColumnsAvx512<F>(xq, w, y, ldy, n0, n16, rows);
  TileColumnsAvx512<F>(xq, w, y, ldy, n16, n1);
}

// Columns [n0, n1) on VNNI panels (quant_vnni_panel.h): every row of x against whole panels of
// 16 columns, the columns they leave on the VNNI tiles.
template <typename F>
void VnniPanelColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy,
                      int64_t n0, int64_t n1) {
  const int64_t nb = xq.blocks_per_row;
  const int64_t n16 = n0 + (n1 - n0) / kAmxTile * kAmxTile;
  const std::vector<int32_t> starts = VnniPanelStarts(xq);
  std::vector<int8_t> q(static_cast<size_t>(nb * 512));
  std::vector<float> dw(static_cast<size_t>(nb * kAmxTile)), mw(dw.size());
  for (int64_t n = n0; n < n16; n += kAmxTile) {
    PackPanel<F>(w, n, nb, q.data(), dw.data(), mw.data(), /*as_unsigned=*/true);
    const AmxPanel panel{nb, q.data(), dw.data(), F::kHasMin ? mw.data() : nullptr};
    VnniPanelTiles(xq, starts.data(), panel, y + n, ldy);
  }
  TileColumnsAvx512<F>(xq, w, y, ldy, n16, n1);
}

// The widest copy for one block format.
template <typename F>
bool SimdColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                 int64_t n1, QuantPath widest) {
  if (widest == QuantPath::kPortable || !CpuHasAvx2()) return false;
  // Decode (a few rows of x) streams W with the AVX2 code: with one row, pairing blocks in
  // 64-byte vectors costs more than it saves (Qwen3-0.6B shape, Q8_0, decode after 512 tokens:
  // 21.5 tok/s against 18.6).
  const bool vnni = widest <= QuantPath::kAvx512Vnni && CpuHasAvx512Vnni();
  if (xq.rows < kStreamBelowRows) {
    StreamColumnsAvx2<F>(xq, w, y, ldy, n0, n1);
  } else if (widest == QuantPath::kAmx && vnni && xq.rows >= kAmxTile && CpuHasAmxInt8()) {
    AmxColumns<F>(xq, w, y, ldy, n0, n1);
  } else if (vnni && xq.rows >= kAmxTile) {
    VnniPanelColumns<F>(xq, w, y, ldy, n0, n1);
  } else if (vnni) {
    TileColumnsAvx512<F>(xq, w, y, ldy, n0, n1);
  } else {
    TileColumnsAvx2<F>(xq, w, y, ldy, n0, n1);
  }
  return true;
}
#endif

}  // namespace

void QuantizeRows(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRows* out,
                  ThreadPool* pool) {
  const int64_t nb = K / kQ8_0Block;
  out->rows = M;
  out->blocks_per_row = nb;
  out->blocks.resize(static_cast<size_t>(M * nb));
  out->scales.resize(out->blocks.size());
  out->sums.resize(out->blocks.size());
  ForEachRowShare(M, pool, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      BlockQ8_0* row = out->blocks.data() + m * nb;
      QuantizeActivationsQ8_0(x + m * ldx, K, row, out->sums.data() + m * nb);
      for (int64_t b = 0; b < nb; ++b) out->scales[m * nb + b] = F16ToF32(row[b].d);
    }
  });
}

void ForEachRowShare(int64_t M, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, M);
  } else {
    pool->ParallelFor(M, kParallelQuantizeRows, fn);  // (inline when M is one share)
  }
}

void QuantColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                  int64_t n1, QuantPath widest) {
#if KVF_Q8_SIMD
  const bool done = WithFormat(
      w.dtype, [&](auto f) { return SimdColumns<decltype(f)>(xq, w, y, ldy, n0, n1, widest); });
  if (done) return;
#endif
  (void)widest;
  QuantColumnsPortable(xq, w, y, ldy, n0, n1);
}

void QuantReference(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy) {
  WithFormat(w.dtype, [&](auto f) {
    using F = decltype(f);
    int8_t q[32];
    for (int64_t m = 0; m < xq.rows; ++m) {
      for (int64_t n = 0; n < w.rows; ++n) {
        float acc = 0.0f;
        for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
          const std::byte* block = w.row(n) + b * F::kBytes;
          const BlockQ8_0& xb = xq.blocks[m * xq.blocks_per_row + b];
          F::Ints(block, q);
          int32_t s = 0;
          for (int i = 0; i < 32; ++i) s += q[i] * xb.q[i];
          acc = std::fma(F16ToF32(ScaleBits(block)) * F16ToF32(xb.d), static_cast<float>(s), acc);
          if (F::kHasMin) {
            acc = std::fma(F16ToF32(MinBits(block)), xq.sums[m * xq.blocks_per_row + b], acc);
          }
        }
        y[m * ldy + n] = acc;
      }
    }
    return 0;
  });
}

}  // namespace kvferry::engine::kernels
