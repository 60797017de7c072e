#include "engine/kernels/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/kernels/simd.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

const BlockQ8_0* Q8Row(const WeightMatrix& w, int64_t n) {
  return reinterpret_cast<const BlockQ8_0*>(w.row(n));
}

int32_t BlockDotQ8(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int64_t i = 0; i < kQ8_0Block; ++i) s += int32_t{a[i]} * int32_t{b[i]};
  return s;
}

// One output, one row of x: the definition in the header, step by step.
float OutputQ8_0(const QuantizedRows& xq, int64_t m, const BlockQ8_0* wr) {
  const BlockQ8_0* xr = xq.blocks.data() + m * xq.blocks_per_row;
  const float* xd = xq.scales.data() + m * xq.blocks_per_row;
  float acc = 0.0f;
  for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
    const float scale = F16ToF32(wr[b].d) * xd[b];
    acc = std::fma(scale, static_cast<float>(BlockDotQ8(wr[b].q, xr[b].q)), acc);
  }
  return acc;
}

void Q8ColumnsPortable(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy,
                       int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const BlockQ8_0* wr = Q8Row(w, n);
    for (int64_t m = 0; m < xq.rows; ++m) y[m * ldy + n] = OutputQ8_0(xq, m, wr);
  }
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
#define KVF_Q8_INLINE inline  // inlined by the entry points (below), in their target

// Rows of x per pass over a tile of outputs: their blocks stay in L2 while the tile's W blocks
// are read once per pass.
constexpr int64_t kRowsPerPass = 256;
// Blocks ahead of the one in use whose lines each of the tile's 8 rows asks for: eight streams
// of 34-byte steps are more than the hardware prefetcher keeps ahead of.
constexpr int64_t kPrefetchBlocks = 16;
// Fewer rows of x than this (decode) stream W row by row instead (Stream4).
constexpr int64_t kStreamBelowRows = 4;
// How far ahead of the block in use Stream4 asks for W's lines.
constexpr int64_t kStreamAheadBytes = 1024;

KVF_Q8_AVX2 KVF_Q8_INLINE V8 ToV8(__m256 v) {
  V8 f;
  std::memcpy(&f, &v, sizeof(f));
  return f;
}

// The F16 scales of 8 blocks as f32.
KVF_Q8_AVX2 KVF_Q8_INLINE V8 F16Scales(const BlockQ8_0* const* blocks) {
  return ToV8(
      _mm256_cvtph_ps(_mm_setr_epi16(blocks[0]->d, blocks[1]->d, blocks[2]->d, blocks[3]->d,
                                     blocks[4]->d, blocks[5]->d, blocks[6]->d, blocks[7]->d)));
}

// The exact integer dots of 8 W blocks with 8 x blocks, two ways. Prepare takes the W blocks
// (once per block column in a tile, reused for every row of x); Dot8 returns lane i = the dot of
// W block i with x[i] (DotSame: with one x block), as f32 (exact: |sum| <= 32 * 128 * 127 <
// 2^24). The sums are exact, so both give the same values. Scales8 and Fma are the templates' other
// vector steps (the templates themselves hold no intrinsics, so each copy compiles for its own
// target).
//
// AVX2: |w| as unsigned times x with w's sign (vpmaddubsw never saturates: |w| <= 128,
// |x| <= 127), pairs widened by vpmaddwd, then a transposing add of the eight vectors.
struct Avx2Dots {
  // The blocks themselves: sixteen precomputed vectors would not fit the sixteen registers.
  struct W {
    const int8_t* q[8];
  };
  static KVF_Q8_AVX2 KVF_Q8_INLINE W Prepare(const BlockQ8_0* const* blocks) {
    W w;
    for (int i = 0; i < 8; ++i) w.q[i] = blocks[i]->q;
    return w;
  }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Dot8(const W& w, const int8_t* const* x) {
    __m256i v[8];
    for (int i = 0; i < 8; ++i) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q[i]));
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i]));
      const __m256i pairs =
          _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
      v[i] = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    }
    return ToV8(_mm256_cvtepi32_ps(Sum8x8(v)));
  }
  // Eight vectors of 8 int32 -> one vector of their 8 sums.
  static KVF_Q8_AVX2 KVF_Q8_INLINE __m256i Sum8x8(const __m256i v[8]) {
    const __m256i t0 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i t1 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                            _mm256_permute2x128_si256(t0, t1, 0x31));
  }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 DotSame(const W& w, const int8_t* x) {
    const int8_t* const xs[8] = {x, x, x, x, x, x, x, x};
    return Dot8(w, xs);
  }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Scales8(const BlockQ8_0* const* b) { return F16Scales(b); }
  static KVF_Q8_AVX2 KVF_Q8_INLINE V8 Fma(V8 a, V8 b, V8 c) { return HwFma::Fma(a, b, c); }
};

// AVX-512 VNNI: blocks i and i + 4 side by side in one 64-byte vector. vpdpbusd multiplies
// unsigned by signed bytes, so x goes in offset by 128 (x ^ 0x80 = x + 128, 1..255) and each
// lane starts from -128 * (its four w bytes' sum): dot(x + 128, w) - 128 * sum(w) = dot(x, w),
// exactly (|lane| < 2^17).
struct Avx512Dots {
  struct W {
    __m512i q[4], start[4];
  };
  static KVF_Q8_AVX512 KVF_Q8_INLINE __m512i Pair(const int8_t* lo, const int8_t* hi) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi));
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  }
  static KVF_Q8_AVX512 KVF_Q8_INLINE W Prepare(const BlockQ8_0* const* blocks) {
    W w;
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int p = 0; p < 4; ++p) {
      w.q[p] = Pair(blocks[p]->q, blocks[p + 4]->q);
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
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Dot8(const W& w, const int8_t* const* x) {
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i v[4] = {
        _mm512_dpbusd_epi32(w.start[0], _mm512_xor_si512(Pair(x[0], x[4]), offset), w.q[0]),
        _mm512_dpbusd_epi32(w.start[1], _mm512_xor_si512(Pair(x[1], x[5]), offset), w.q[1]),
        _mm512_dpbusd_epi32(w.start[2], _mm512_xor_si512(Pair(x[2], x[6]), offset), w.q[2]),
        _mm512_dpbusd_epi32(w.start[3], _mm512_xor_si512(Pair(x[3], x[7]), offset), w.q[3])};
    return ToV8(_mm256_cvtepi32_ps(Reduce(v)));
  }
  // Dot8 with the same x block for all eight.
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 DotSame(const W& w, const int8_t* x) {
    const __m512i xu = _mm512_xor_si512(
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
        _mm512_set1_epi8(static_cast<char>(0x80)));
    const __m512i v[4] = {
        _mm512_dpbusd_epi32(w.start[0], xu, w.q[0]), _mm512_dpbusd_epi32(w.start[1], xu, w.q[1]),
        _mm512_dpbusd_epi32(w.start[2], xu, w.q[2]), _mm512_dpbusd_epi32(w.start[3], xu, w.q[3])};
    return ToV8(_mm256_cvtepi32_ps(Reduce(v)));
  }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Scales8(const BlockQ8_0* const* b) { return F16Scales(b); }
  static KVF_Q8_AVX512 KVF_Q8_INLINE V8 Fma(V8 a, V8 b, V8 c) { return HwFma::Fma(a, b, c); }
};

// Outputs n .. n + 7 for rows [m0, m1) of x: lane j of acc is output n + j's chain, so every
// output takes exactly the steps of OutputQ8_0.
template <typename D>
KVF_Q8_INLINE void Tile8(const QuantizedRows& xq, const WeightMatrix& w, int64_t n, int64_t m0,
                         int64_t m1, float* y, int64_t ldy, float* acc) {
  const int64_t nb = xq.blocks_per_row;
  const BlockQ8_0* rows[8];
  for (int j = 0; j < 8; ++j) rows[j] = Q8Row(w, n + j);
  std::fill(acc, acc + (m1 - m0) * 8, 0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0* blocks[8];
    for (int j = 0; j < 8; ++j) {
      blocks[j] = rows[j] + b;
      _mm_prefetch(reinterpret_cast<const char*>(rows[j] + b + kPrefetchBlocks), _MM_HINT_T0);
    }
    const typename D::W wb = D::Prepare(blocks);
    const V8 dw = D::Scales8(blocks);
    for (int64_t m = m0; m < m1; ++m) {
      const V8 scale = dw * Splat8(xq.scales[m * nb + b]);
      float* a = acc + (m - m0) * 8;
      Store8(a, D::Fma(scale, D::DotSame(wb, xq.blocks[m * nb + b].q), Load8(a)));
    }
  }
  for (int64_t m = m0; m < m1; ++m) {
    for (int j = 0; j < 8; ++j) y[m * ldy + n + j] = acc[(m - m0) * 8 + j];
  }
}

// Row m of x against W's rows n .. n + 3, each read front to back (a stream the hardware
// prefetcher follows, helped ahead): every block's exact sum and scale, eight blocks at a time,
// then OutputQ8_0's chain over them, the four chains interleaved. `sums` and `scales` hold
// 4 * nb. (Written out, not through Avx2Dots: its arrays of pointers cost decode 16 %.)
KVF_Q8_AVX2_ENTRY void Stream4Avx2(const QuantizedRows& xq, int64_t m, const WeightMatrix& w,
                                   int64_t n, float* y, float* sums, float* scales) {
  const int64_t nb = xq.blocks_per_row;
  const BlockQ8_0* xr = xq.blocks.data() + m * nb;
  const float* xd = xq.scales.data() + m * nb;
  for (int r = 0; r < 4; ++r) {
    const BlockQ8_0* wr = Q8Row(w, n + r);
    float* s = sums + r * nb;
    float* sc = scales + r * nb;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr + b + i) + kStreamAheadBytes, _MM_HINT_T0);
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[b + i].q));
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[b + i].q));
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
        v[i] = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
      }
      Store8(s + b, ToV8(_mm256_cvtepi32_ps(Avx2Dots::Sum8x8(v))));
      const __m256 dw =
          _mm256_cvtph_ps(_mm_setr_epi16(wr[b].d, wr[b + 1].d, wr[b + 2].d, wr[b + 3].d,
                                         wr[b + 4].d, wr[b + 5].d, wr[b + 6].d, wr[b + 7].d));
      _mm256_storeu_ps(sc + b, _mm256_mul_ps(dw, _mm256_loadu_ps(xd + b)));
    }
    for (; b < nb; ++b) {
      s[b] = static_cast<float>(BlockDotQ8(wr[b].q, xr[b].q));
      sc[b] = F16ToF32(wr[b].d) * xd[b];
    }
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < 4; ++r) {
      acc[r] = __builtin_fmaf(scales[r * nb + b], sums[r * nb + b], acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) y[n + r] = acc[r];
}

// Columns [n0, n1) for decode's few rows of x: Stream4Avx2, the portable code for the last ones.
KVF_Q8_AVX2 void StreamColumnsAvx2(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                   int64_t ldy, int64_t n0, int64_t n1) {
  std::vector<float> scratch(static_cast<size_t>(8 * xq.blocks_per_row));
  const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
  for (int64_t m = 0; m < xq.rows; ++m) {
    for (int64_t n = n0; n < n4; n += 4) {
      Stream4Avx2(xq, m, w, n, y + m * ldy, scratch.data(), scratch.data() + 4 * xq.blocks_per_row);
    }
  }
  Q8ColumnsPortable(xq, w, y, ldy, n4, n1);
}

// Columns [n0, n1) for many rows of x: Tile8 over passes of kRowsPerPass rows, the portable code
// for the last columns.
template <typename D>
KVF_Q8_INLINE void TileColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                               int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t n8 = n0 + (n1 - n0) / 8 * 8;
  float acc[kRowsPerPass * 8];
  for (int64_t m0 = 0; m0 < xq.rows; m0 += kRowsPerPass) {
    const int64_t m1 = std::min(xq.rows, m0 + kRowsPerPass);
    for (int64_t n = n0; n < n8; n += 8) Tile8<D>(xq, w, n, m0, m1, y, ldy, acc);
  }
  Q8ColumnsPortable(xq, w, y, ldy, n8, n1);
}

KVF_Q8_AVX2_ENTRY void TileColumnsAvx2(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                       int64_t ldy, int64_t n0, int64_t n1) {
  TileColumns<Avx2Dots>(xq, w, y, ldy, n0, n1);
}

KVF_Q8_AVX512_ENTRY void TileColumnsAvx512(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                           int64_t ldy, int64_t n0, int64_t n1) {
  TileColumns<Avx512Dots>(xq, w, y, ldy, n0, n1);
}

bool CpuHasAvx512Vnni() {
  static const bool has =
      CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni");
  return has;
}
#endif

}  // namespace

void QuantizeRows(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRows* out) {
  out->rows = M;
  out->blocks_per_row = K / kQ8_0Block;
  out->blocks.resize(static_cast<size_t>(M * out->blocks_per_row));
  out->scales.resize(out->blocks.size());
  for (int64_t m = 0; m < M; ++m) {
    BlockQ8_0* row = out->blocks.data() + m * out->blocks_per_row;
    QuantizeActivationsQ8_0(x + m * ldx, K, row);
    for (int64_t b = 0; b < out->blocks_per_row; ++b) {
      out->scales[m * out->blocks_per_row + b] = F16ToF32(row[b].d);
    }
  }
}

void Q8_0Columns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                 int64_t n1, QuantPath widest) {
#if KVF_Q8_SIMD
  // Decode (a few rows of x) streams W with the AVX2 code: with one row, pairing blocks in
  // 64-byte vectors costs more than it saves (Qwen3-0.6B shape, decode after 512 tokens: 21.5
  // tok/s against 18.6).
  if (widest != QuantPath::kPortable && CpuHasAvx2() && xq.rows < kStreamBelowRows) {
    StreamColumnsAvx2(xq, w, y, ldy, n0, n1);
    return;
  }
  if (widest == QuantPath::kAvx512Vnni && CpuHasAvx512Vnni()) {
    TileColumnsAvx512(xq, w, y, ldy, n0, n1);
    return;
  }
  if (widest != QuantPath::kPortable && CpuHasAvx2()) {
    TileColumnsAvx2(xq, w, y, ldy, n0, n1);
    return;
  }
#endif
  (void)widest;
  Q8ColumnsPortable(xq, w, y, ldy, n0, n1);
}

void Q8_0Reference(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy) {
  for (int64_t m = 0; m < xq.rows; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      const BlockQ8_0* wr = Q8Row(w, n);
      const BlockQ8_0* xr = xq.blocks.data() + m * xq.blocks_per_row;
      float acc = 0.0f;
      for (int64_t b = 0; b < xq.blocks_per_row; ++b) {
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) s += wr[b].q[i] * xr[b].q[i];
        acc = std::fma(F16ToF32(wr[b].d) * F16ToF32(xr[b].d), static_cast<float>(s), acc);
      }
      y[m * ldy + n] = acc;
    }
  }
}

}  // namespace kvferry::engine::kernels
