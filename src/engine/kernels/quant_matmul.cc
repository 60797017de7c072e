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
#define KVF_Q8_AVX2 1
#define KVF_Q8_TARGET __attribute__((target("avx2,fma,f16c")))

// Rows of x per pass over a tile of outputs: their blocks stay in L2 while the tile's W blocks
// are read once per pass.
constexpr int64_t kRowsPerPass = 256;
// Blocks ahead of the one in use whose lines each of the tile's 8 rows asks for: eight streams
// of 34-byte steps are more than the hardware prefetcher keeps ahead of.
constexpr int64_t kPrefetchBlocks = 16;
// Fewer rows of x than this (decode) stream W row by row instead (Stream4Avx2).
constexpr int64_t kStreamBelowRows = 4;
// How far ahead of the block in use Stream4Avx2 asks for W's lines.
constexpr int64_t kStreamAheadBytes = 2048;

// The exact integer dot of a block of W (q, with |q| precomputed) and a block of x, as 8 int32
// partial sums. |w| as unsigned times x with w's sign: never saturates (|w| <= 128, |x| <= 127).
KVF_Q8_TARGET inline __m256i BlockDot8(__m256i w, __m256i abs_w, __m256i x) {
  const __m256i prod16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(prod16, _mm256_set1_epi16(1));
}

// Eight vectors of 8 int32 -> one vector of their 8 sums (exact: integer adds).
KVF_Q8_TARGET inline __m256i Sum8x8(const __m256i v[8]) {
  const __m256i t0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i t1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(t0, t1, 0x20),
                          _mm256_permute2x128_si256(t0, t1, 0x31));
}

// Outputs n .. n + 7 for rows [m0, m1) of x: lane j of acc is output n + j's chain, so every
// output takes exactly the steps of OutputQ8_0.
KVF_Q8_TARGET void Tile8Avx2(const QuantizedRows& xq, const WeightMatrix& w, int64_t n, int64_t m0,
                             int64_t m1, float* y, int64_t ldy, float* acc) {
  const int64_t nb = xq.blocks_per_row;
  const BlockQ8_0* rows[8];
  for (int j = 0; j < 8; ++j) rows[j] = Q8Row(w, n + j);
  std::fill(acc, acc + (m1 - m0) * 8, 0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    alignas(16) uint16_t d16[8];
    __m256i wq[8], wa[8];
    for (int j = 0; j < 8; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[j] + b + kPrefetchBlocks), _MM_HINT_T0);
      d16[j] = rows[j][b].d;
      wq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[j][b].q));
      wa[j] = _mm256_sign_epi8(wq[j], wq[j]);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16)));
    for (int64_t m = m0; m < m1; ++m) {
      const BlockQ8_0& xb = xq.blocks[m * nb + b];
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      __m256i dots[8];
      for (int j = 0; j < 8; ++j) dots[j] = BlockDot8(wq[j], wa[j], xv);
      const __m256 sums = _mm256_cvtepi32_ps(Sum8x8(dots));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xq.scales[m * nb + b]));
      float* a = acc + (m - m0) * 8;
      _mm256_storeu_ps(a, _mm256_fmadd_ps(scale, sums, _mm256_loadu_ps(a)));
    }
  }
  for (int64_t m = m0; m < m1; ++m) {
    for (int j = 0; j < 8; ++j) y[m * ldy + n + j] = acc[(m - m0) * 8 + j];
  }
}

// Row m of x against W's rows n .. n + 3, each read front to back (four streams the hardware
// prefetcher follows): first every block's exact sum and scale, eight blocks at a time, then
// OutputQ8_0's chain over them, the four chains interleaved. `sums` and `scales` hold 4 * nb.
KVF_Q8_TARGET void Stream4Avx2(const QuantizedRows& xq, int64_t m, const WeightMatrix& w, int64_t n,
                               float* y, float* sums, float* scales) {
  const int64_t nb = xq.blocks_per_row;
  const BlockQ8_0* xr = xq.blocks.data() + m * nb;
  const float* xd = xq.scales.data() + m * nb;
  for (int r = 0; r < 4; ++r) {
    const BlockQ8_0* wr = Q8Row(w, n + r);
    float* s = sums + r * nb;
    float* sc = scales + r * nb;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      __m256i dots[8];
      for (int i = 0; i < 8; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr + b + i) + kStreamAheadBytes, _MM_HINT_T0);
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[b + i].q));
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[b + i].q));
        dots[i] = BlockDot8(wq, _mm256_sign_epi8(wq, wq), xv);
      }
      _mm256_storeu_ps(s + b, _mm256_cvtepi32_ps(Sum8x8(dots)));
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
    for (int r = 0; r < 4; ++r)
      acc[r] = __builtin_fmaf(scales[r * nb + b], sums[r * nb + b], acc[r]);
  }
  for (int r = 0; r < 4; ++r) y[n + r] = acc[r];
}

KVF_Q8_TARGET void Q8ColumnsAvx2(const QuantizedRows& xq, const WeightMatrix& w, float* y,
                                 int64_t ldy, int64_t n0, int64_t n1) {
  if (xq.rows < kStreamBelowRows) {
    std::vector<float> scratch(static_cast<size_t>(8 * xq.blocks_per_row));
    const int64_t n4 = n0 + (n1 - n0) / 4 * 4;
    for (int64_t m = 0; m < xq.rows; ++m) {
      for (int64_t n = n0; n < n4; n += 4) {
        Stream4Avx2(xq, m, w, n, y + m * ldy, scratch.data(),
                    scratch.data() + 4 * xq.blocks_per_row);
      }
    }
    Q8ColumnsPortable(xq, w, y, ldy, n4, n1);
    return;
  }
  const int64_t n8 = n0 + (n1 - n0) / 8 * 8;
  float acc[kRowsPerPass * 8];
  for (int64_t m0 = 0; m0 < xq.rows; m0 += kRowsPerPass) {
    const int64_t m1 = std::min(xq.rows, m0 + kRowsPerPass);
    for (int64_t n = n0; n < n8; n += 8) Tile8Avx2(xq, w, n, m0, m1, y, ldy, acc);
  }
  Q8ColumnsPortable(xq, w, y, ldy, n8, n1);
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
                 int64_t n1, bool portable) {
#if KVF_Q8_AVX2
  if (!portable && CpuHasAvx2()) {
    Q8ColumnsAvx2(xq, w, y, ldy, n0, n1);
    return;
  }
#endif
  (void)portable;
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
