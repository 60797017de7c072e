#include "engine/kernels/quant_k_vnni_panel.h"

#include <cstring>

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
// g++ 12's AVX-512 headers start some intrinsics from _mm512_undefined_* values and then warn
// that they "may be used uninitialized" where those intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVF_K_VNNI_PANEL 1
#endif

namespace kvferry::engine::kernels {

#if KVF_K_VNNI_PANEL
namespace {

#define KVF_K_PANEL_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"), flatten))

KVF_K_PANEL_TARGET inline __m512i Four(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Rows m0 .. m0 + R - 1 of x against the panel: per super-block, each group's four value
// vectors loaded once for the R rows, R exact isums and msums, then R chain steps of 16 lanes.
template <int R>
KVF_K_PANEL_TARGET void KPanelRows(const QuantizedRowsK& xq, int64_t m0, const KVnniPanel& p,
                                   float* y, int64_t ldy) {
  const int64_t nb = xq.blocks_per_row;
  __m512 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_K* x[R];
    __m512i isum[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      x[r] = &xq.blocks[(m0 + r) * nb + b];
      isum[r] = _mm512_setzero_si512();
    }
    const uint8_t* u = p.u + b * kKPanelValueBytes;
    for (int g = 0; g < 16; ++g) {
      __m512i w[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) w[k] = _mm512_loadu_si512(u + (4 * g + k) * 64);
      const __m512i scale = _mm512_loadu_si512(p.scales + (b * 16 + g) * 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
          s = _mm512_dpbusd_epi32(s, w[k], Four(x[r]->q + 16 * g + 4 * k));
        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(s, scale));
      }
    }
    const int16_t* mins = p.mins + b * kKPanelMins;
    const __m512 dw = _mm512_loadu_ps(p.d + b * kKPanelRows);
    const __m512 dmin = p.has_min ? _mm512_loadu_ps(p.dmin + b * kKPanelRows) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int gp = 0; gp < 8; ++gp) {
        msum = _mm512_dpwssd_epi32(msum, _mm512_loadu_si512(mins + gp * 32),
                                   Four(x[r]->bsums + 2 * gp));
      }
      const __m512 dx = _mm512_set1_ps(x[r]->d);
      if (p.has_min) {
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum[r]), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, dx),
                                 _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), msum)),
                                 acc[r]);
      } else {
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx),
                                 _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[r], msum)), acc[r]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + (m0 + r) * ldy, acc[r]);
}

// Rows per pass: R int and float accumulators beside a group's four vectors fit the registers.
constexpr int kKPassRows = 8;

}  // namespace

void KVnniPanelTiles(const QuantizedRowsK& xq, const KVnniPanel& panel, float* y, int64_t ldy) {
  int64_t m = 0;
  for (; m + kKPassRows <= xq.rows; m += kKPassRows) KPanelRows<kKPassRows>(xq, m, panel, y, ldy);
  for (; m < xq.rows; ++m) KPanelRows<1>(xq, m, panel, y, ldy);
}

#else

void KVnniPanelTiles(const QuantizedRowsK&, const KVnniPanel&, float*, int64_t) {}

#endif

}  // namespace kvferry::engine::kernels
