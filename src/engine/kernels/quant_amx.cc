#include "engine/kernels/quant_amx.h"

#include <cstring>

#if defined(__x86_64__) && !defined(__clang__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KVF_AMX 1
#endif

namespace kvferry::engine::kernels {

#if KVF_AMX
namespace {

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state
constexpr long kXfeatureXtiledata = 18;     // the tile data registers

// The tile configuration: palette 1; tmm0 = C (16 x 16 int32), tmm1 = A (16 rows of x, 32
// bytes: one block each), tmm2 = B (8 rows of 64 bytes: a block of 16 W rows).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 32, 64};
  uint8_t rows[16] = {16, 16, 8};
};

#define KVF_AMX_TARGET \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"), flatten))

// Rows m0 .. m0 + 15 against the panel: the 16 x 16 chains in 16 vectors.
KVF_AMX_TARGET void Tile16(const QuantizedRows& xq, int64_t m0, const AmxPanel& p, float* y,
                           int64_t ldy) {
  const int64_t nb = xq.blocks_per_row;
  const int64_t x_stride = nb * static_cast<int64_t>(sizeof(BlockQ8_0));
  alignas(64) int32_t c[kAmxTile * kAmxTile];
  __m512 acc[kAmxTile];
  for (int r = 0; r < kAmxTile; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    _tile_zero(0);
    _tile_loadd(1, xq.blocks[m0 * nb + b].q, x_stride);
    _tile_loadd(2, p.q + b * 512, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, c, 64);
    const __m512 dw = _mm512_loadu_ps(p.dw + b * kAmxTile);
    const __m512 mw = p.mw != nullptr ? _mm512_loadu_ps(p.mw + b * kAmxTile) : _mm512_setzero_ps();
    for (int r = 0; r < kAmxTile; ++r) {
      const int64_t i = (m0 + r) * nb + b;
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_load_si512(c + r * kAmxTile));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xq.scales[i])), sum, acc[r]);
      if (p.mw != nullptr) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xq.sums[i]), acc[r]);
    }
  }
  for (int r = 0; r < kAmxTile; ++r) _mm512_storeu_ps(y + (m0 + r) * ldy, acc[r]);
}

KVF_AMX_TARGET void TilesAmx(const QuantizedRows& xq, int64_t rows, const AmxPanel& p, float* y,
                             int64_t ldy) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  for (int64_t m0 = 0; m0 < rows; m0 += kAmxTile) Tile16(xq, m0, p, y, ldy);
  _tile_release();
}

bool DetectAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  if (!tile || !int8 || !__builtin_cpu_supports("avx512f")) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool CpuHasAmxInt8() {
  static const bool has = DetectAmx();
  return has;
}

void AmxTiles(const QuantizedRows& xq, int64_t rows, const AmxPanel& panel, float* y, int64_t ldy) {
  TilesAmx(xq, rows, panel, y, ldy);
}

#else

bool CpuHasAmxInt8() { return false; }
void AmxTiles(const QuantizedRows&, int64_t, const AmxPanel&, float*, int64_t) {}

#endif

}  // namespace kvferry::engine::kernels
