#include "engine/kernels/quant_k_amx.h"

#include <cstring>

#include "engine/kernels/quant_amx.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#define KVF_K_AMX 1
#endif

namespace kvferry::engine::kernels {

void PackAmxKRows(const BlockQ8_K* x, int64_t rows, int64_t blocks, AmxKRows* out) {
  out->tiles = rows / kAmxTile;
  out->blocks = blocks;
  out->q.resize(static_cast<size_t>(out->tiles * blocks * 4 * 1024));
  out->bs_high.resize(static_cast<size_t>(out->tiles * blocks * 256));
  out->bs_low.resize(out->bs_high.size());
  out->d.resize(static_cast<size_t>(out->tiles * blocks * kAmxTile));
  for (int64_t t = 0; t < out->tiles; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t tb = t * blocks + b;
      for (int64_t m = 0; m < kAmxTile; ++m) {
        const BlockQ8_K& xb = x[(t * kAmxTile + m) * blocks + b];
        out->d[tb * kAmxTile + m] = xb.d;
        for (int c = 0; c < 4; ++c) {
          for (int k4 = 0; k4 < 16; ++k4) {
            std::memcpy(&out->q[((tb * 4 + c) * 16 + k4) * 64 + m * 4], xb.q + c * 64 + 4 * k4, 4);
          }
        }
        for (int g = 0; g < 16; ++g) {
          const int bs = xb.bsums[g];
          const int high = bs >> 7;  // floor: bs = 128 high + low, low in [0, 127]
          out->bs_high[tb * 256 + (g / 4) * 64 + m * 4 + g % 4] = static_cast<int8_t>(high);
          out->bs_low[tb * 256 + (g / 4) * 64 + m * 4 + g % 4] =
              static_cast<int8_t>(bs - 128 * high);
        }
      }
    }
  }
}

#if KVF_K_AMX
namespace {

// tmm0-3: the four int32 products (C, 16 x 16); tmm4: a W chunk (16 rows of 64 bytes); tmm5: an
// x chunk (16 rows of 64); tmm6: the minimums (16 rows of 16 bytes); tmm7: x's group sums'
// high or low bytes (4 rows of 64).
struct alignas(64) KTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 16, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 4};
};

#define KVF_K_AMX_TARGET \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"), flatten))

// The four products of super-block b, x tile t, into c[4][16][16] (rows: W's 16 rows).
KVF_K_AMX_TARGET void Products(const AmxKRows& x, const AmxKPanel& p, int64_t t, int64_t b,
                               int32_t* c) {
  const int64_t tb = t * x.blocks + b;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int ch = 0; ch < 4; ++ch) {
    _tile_loadd(5, x.q.data() + (tb * 4 + ch) * 1024, 64);
    _tile_loadd(4, p.high + (b * 4 + ch) * 1024, 64);
    _tile_dpbusd(0, 4, 5);
    _tile_loadd(4, p.low + (b * 4 + ch) * 1024, 64);
    _tile_dpbusd(1, 4, 5);
  }
  _tile_loadd(6, p.mins + b * 256, 16);
  _tile_loadd(7, x.bs_high.data() + tb * 256, 64);
  _tile_dpbusd(2, 6, 7);
  _tile_loadd(7, x.bs_low.data() + tb * 256, 64);
  _tile_dpbusd(3, 6, 7);
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}

// x tile t against the panel: acc[r] lane m is output (16 t + m, r)'s chain.
KVF_K_AMX_TARGET void KTile(const AmxKRows& x, const AmxKPanel& p, int64_t t, float* y,
                            int64_t ldy) {
  alignas(64) int32_t c[4 * 256];
  alignas(64) float out[kAmxTile * kAmxTile];
  __m512 acc[kAmxTile];
  for (int r = 0; r < kAmxTile; ++r) acc[r] = _mm512_setzero_ps();
  const __m128i shift = _mm_cvtsi32_si128(p.shift), seven = _mm_cvtsi32_si128(7);
  for (int64_t b = 0; b < p.blocks; ++b) {
    Products(x, p, t, b, c);
    const __m512 dx = _mm512_loadu_ps(x.d.data() + (t * x.blocks + b) * kAmxTile);
    for (int r = 0; r < kAmxTile; ++r) {
      const __m512i isum = _mm512_add_epi32(_mm512_sll_epi32(_mm512_load_si512(c + 16 * r), shift),
                                            _mm512_load_si512(c + 256 + 16 * r));
      const __m512i msum =
          _mm512_add_epi32(_mm512_sll_epi32(_mm512_load_si512(c + 512 + 16 * r), seven),
                           _mm512_load_si512(c + 768 + 16 * r));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p.d[b * kAmxTile + r]), dx),
                               _mm512_cvtepi32_ps(isum), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p.dmin[b * kAmxTile + r]), dx),
                               _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), msum)),
                               acc[r]);
    }
  }
  for (int r = 0; r < kAmxTile; ++r) _mm512_store_ps(out + r * kAmxTile, acc[r]);
  for (int64_t m = 0; m < kAmxTile; ++m) {
    for (int r = 0; r < kAmxTile; ++r) y[(t * kAmxTile + m) * ldy + r] = out[r * kAmxTile + m];
  }
}

// Q6_K: x tile t against the panel, the three digit products per super-block.
KVF_K_AMX_TARGET void K6Tile(const AmxKRows& x, const AmxK6Panel& p, int64_t t, float* y,
                             int64_t ldy) {
  alignas(64) int32_t c[3 * 256];
  alignas(64) float out[kAmxTile * kAmxTile];
  __m512 acc[kAmxTile];
  for (int r = 0; r < kAmxTile; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < p.blocks; ++b) {
    const int64_t tb = t * x.blocks + b;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    for (int ch = 0; ch < 4; ++ch) {
      _tile_loadd(5, x.q.data() + (tb * 4 + ch) * 1024, 64);
      _tile_loadd(4, p.digits[0] + (b * 4 + ch) * 1024, 64);
      _tile_dpbssd(0, 4, 5);
      _tile_loadd(4, p.digits[1] + (b * 4 + ch) * 1024, 64);
      _tile_dpbssd(1, 4, 5);
      _tile_loadd(4, p.digits[2] + (b * 4 + ch) * 1024, 64);
      _tile_dpbssd(2, 4, 5);
    }
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    _tile_stored(2, c + 512, 64);
    const __m512 dx = _mm512_loadu_ps(x.d.data() + tb * kAmxTile);
    for (int r = 0; r < kAmxTile; ++r) {
      const __m512i isum = _mm512_add_epi32(
          _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c + 16 * r), 6),
                           _mm512_slli_epi32(_mm512_load_si512(c + 256 + 16 * r), 3)),
          _mm512_load_si512(c + 512 + 16 * r));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(p.d[b * kAmxTile + r]), dx),
                               _mm512_cvtepi32_ps(isum), acc[r]);
    }
  }
  for (int r = 0; r < kAmxTile; ++r) _mm512_store_ps(out + r * kAmxTile, acc[r]);
  for (int64_t m = 0; m < kAmxTile; ++m) {
    for (int r = 0; r < kAmxTile; ++r) y[(t * kAmxTile + m) * ldy + r] = out[r * kAmxTile + m];
  }
}

KVF_K_AMX_TARGET void K6TilesAmx(const AmxKRows& x, const AmxK6Panel& p, float* y, int64_t ldy) {
  static const KTileConfig config;
  _tile_loadconfig(&config);
  for (int64_t t = 0; t < x.tiles; ++t) K6Tile(x, p, t, y, ldy);
  _tile_release();
}

KVF_K_AMX_TARGET void KTilesAmx(const AmxKRows& x, const AmxKPanel& p, float* y, int64_t ldy) {
  static const KTileConfig config;
  _tile_loadconfig(&config);
  for (int64_t t = 0; t < x.tiles; ++t) KTile(x, p, t, y, ldy);
  _tile_release();
}

}  // namespace

void AmxKTiles(const AmxKRows& x, const AmxKPanel& panel, float* y, int64_t ldy) {
  KTilesAmx(x, panel, y, ldy);
}

void AmxK6Tiles(const AmxKRows& x, const AmxK6Panel& panel, float* y, int64_t ldy) {
  K6TilesAmx(x, panel, y, ldy);
}

#else

void AmxKTiles(const AmxKRows&, const AmxKPanel&, float*, int64_t) {}
void AmxK6Tiles(const AmxKRows&, const AmxK6Panel&, float*, int64_t) {}

#endif

}  // namespace kvferry::engine::kernels
