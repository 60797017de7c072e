// AMX-INT8 tiles for the k-quants, Q4_K, Q5_K and Q6_K (internal; quant_k_matmul.cc calls it
// where CpuHasAmxInt8(), quant_amx.h).
//
// quant_k_matmul.h defines y by each super-block's exact integers isum = sum_g s_g sum_{i in g}
// w_i q_i and msum = sum_g n_g bs_g. The tiles compute both for 16 W rows x 16 x rows at once,
// as four exact int32 matrix products (TDPBUSD: unsigned bytes by signed bytes):
//
//   the scale split in two, s = (hi << shift) + lo, so every w * hi and w * lo is a byte
//   (Q4_K: w <= 15, shift 4; Q5_K: w <= 31, shift 3):
//       isum = (sum_i (w_i hi_g) q_i << shift) + sum_i (w_i lo_g) q_i
//   x's group sums split as bs = 128 h + l (h, l signed bytes; the minimums n_g <= 63):
//       msum = (sum_g n_g h_g << 7) + sum_g n_g l_g
//
// then each super-block enters its output's chain exactly as defined: the same bits as every
// other path. W arrives packed per 16 rows (AmxKPanel, quant_k_matmul.cc packs it); x is packed
// once per matmul (PackAmxKRows).
//
// Thread-safety: pure functions; AmxKTiles uses the calling thread's tile registers only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/quant_k.h"

namespace kvferry::engine::kernels {

// Rows [0, tiles * 16) of x in the tiles' layout: per tile t and super-block b, four 64-value
// chunks as B tiles (16 rows of 64 bytes: row k4 holds, for each of the 16 x rows, its values
// 4 k4 .. 4 k4 + 3), the group sums' h and l as B tiles (4 rows of 64 bytes), and the 16 rows'
// scales d.
struct AmxKRows {
  int64_t tiles = 0;
  int64_t blocks = 0;
  std::vector<int8_t> q;        // [tiles][blocks][4][16][64]
  std::vector<int8_t> bs_high;  // [tiles][blocks][4][64]
  std::vector<int8_t> bs_low;   // [tiles][blocks][4][64]
  std::vector<float> d;         // [tiles][blocks][16]
};
// The first `rows` rows (a multiple of 16) of x's Q8_K blocks, `blocks` per row.
void PackAmxKRows(const BlockQ8_K* x, int64_t rows, int64_t blocks, AmxKRows* out);

// Sixteen W rows: per super-block b, the A tiles of w * hi and w * lo (four 64-value chunks,
// 16 rows of 64 bytes each), the minimums (16 rows of 16 bytes), and d, dmin per row.
struct AmxKPanel {
  int64_t blocks = 0;
  int shift = 4;
  const uint8_t* high = nullptr;  // [blocks][4][16][64]
  const uint8_t* low = nullptr;   // [blocks][4][16][64]
  const uint8_t* mins = nullptr;  // [blocks][16][16]
  const float* d = nullptr;       // [blocks][16]
  const float* dmin = nullptr;    // [blocks][16]
};

// y[m][j] for the packed rows m of x and the panel's 16 columns j (row m at y + m * ldy).
void AmxKTiles(const AmxKRows& x, const AmxKPanel& panel, float* y, int64_t ldy);

// Q6_K (no minimums; w = u - 32 in [-32, 31], scales signed bytes): each scale written in three
// digits of base 8, s = 64 a + 8 b + c with a, b, c in [-3, 4], so every w * digit is a signed
// byte (in [-128, 124]), and isum = (P_a << 6) + (P_b << 3) + P_c, three exact products by
// TDPBSSD (signed bytes by signed bytes). digits[k] is laid out as AmxKPanel's high.
struct AmxK6Panel {
  int64_t blocks = 0;
  const int8_t* digits[3] = {nullptr, nullptr, nullptr};  // a, b, c
  const float* d = nullptr;                               // [blocks][16]
};
void AmxK6Tiles(const AmxKRows& x, const AmxK6Panel& panel, float* y, int64_t ldy);

}  // namespace kvferry::engine::kernels
