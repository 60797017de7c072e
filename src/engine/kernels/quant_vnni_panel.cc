#include "engine/kernels/quant_vnni_panel.h"

#include <cstring>

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
// g++ 12's AVX-512 headers start some intrinsics from _mm512_undefined_* values and then warn
// that they "may be used uninitialized" where those intrinsics inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KVF_VNNI_PANEL 1
#endif

namespace kvferry::engine::kernels {

std::vector<int32_t> VnniPanelStarts(const QuantizedRows& xq) {
  std::vector<int32_t> starts(xq.blocks.size());
  for (size_t i = 0; i < xq.blocks.size(); ++i) {
    int32_t sum = 0;
    for (int8_t v : xq.blocks[i].q) sum += v;
    starts[i] = -128 * sum;
  }
  return starts;
}

#if KVF_VNNI_PANEL
namespace {

#define KVF_VNNI_PANEL_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"), flatten))

// Rows m0 .. m0 + R - 1 against the panel: R chains of 16 outputs in R vectors, the panel's block
// held in eight vectors while the R rows use it.
template <int R>
KVF_VNNI_PANEL_TARGET void PanelRows(const QuantizedRows& xq, const int32_t* starts, int64_t m0,
                                     const AmxPanel& p, float* y, int64_t ldy) {
  const int64_t nb = xq.blocks_per_row;
  __m512 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i w[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) w[k] = _mm512_loadu_si512(p.q + b * 512 + k * 64);
    const __m512 dw = _mm512_loadu_ps(p.dw + b * kAmxTile);
    const __m512 mw = p.mw != nullptr ? _mm512_loadu_ps(p.mw + b * kAmxTile) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t i = (m0 + r) * nb + b;
      const int8_t* xb = xq.blocks[i].q;
      __m512i s = _mm512_set1_epi32(starts[i]);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        int32_t four;
        std::memcpy(&four, xb + 4 * k, 4);
        s = _mm512_dpbusd_epi32(s, w[k], _mm512_set1_epi32(four));
      }
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xq.scales[i])),
                               _mm512_cvtepi32_ps(s), acc[r]);
      if (p.mw != nullptr) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xq.sums[i]), acc[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + (m0 + r) * ldy, acc[r]);
}

// Rows per pass: R accumulators, the block's 8 vectors, scales and temporaries fit the 32
// registers.
constexpr int kPanelRows = 8;

}  // namespace

void VnniPanelTiles(const QuantizedRows& xq, const int32_t* starts, const AmxPanel& panel, float* y,
                    int64_t ldy) {
  int64_t m = 0;
  for (; m + kPanelRows <= xq.rows; m += kPanelRows) {
    PanelRows<kPanelRows>(xq, starts, m, panel, y, ldy);
  }
  for (; m < xq.rows; ++m) PanelRows<1>(xq, starts, m, panel, y, ldy);
}

#else

void VnniPanelTiles(const QuantizedRows&, const int32_t*, const AmxPanel&, float*, int64_t) {}

#endif

}  // namespace kvferry::engine::kernels
