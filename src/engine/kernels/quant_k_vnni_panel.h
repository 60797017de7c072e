// AVX-512 VNNI on packed panels for the k-quants, Q4_K, Q5_K and Q6_K, on CPUs without AMX
// (internal; quant_k_matmul.cc packs the panels and calls it).
//
// quant_k_matmul.h defines y by each super-block's exact integers isum = sum_g s_g sum_{i in g}
// w_i q_i and msum = sum_g n_g bs_g. Here the 16 lanes of a vector are 16 W rows (outputs): the
// panel holds each super-block's values unsigned (u: Q4_K and Q5_K their q, Q6_K w + 32) in the
// order vpdpbusd takes them — for each four values 4k .. 4k + 3, the 16 rows' bytes side by side
// — so one vpdpbusd against x's four values (broadcast) adds four products to all 16 outputs,
// four of them give a group's sum, one vpmulld by the 16 rows' group scales weights it; msum is
// eight vpdpwssd of the rows' n_g pairs against x's group-sum pairs. No horizontal sums; every
// sum is an exact integer (Q6_K's offset comes back out as KVectors does it: n_g = 32 s_g), and
// each super-block enters its output's chain exactly as defined: the bits of every other path.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>

#include "engine/kernels/quant_k_matmul.h"

namespace kvferry::engine::kernels {

inline constexpr int64_t kKPanelRows = 16;  // W rows per panel: the lanes

// Sixteen W rows n .. n + 15, per super-block b:
struct KVnniPanel {
  int64_t blocks = 0;
  bool has_min = true;              // Q4_K, Q5_K; Q6_K: false (acc takes isum - msum)
  const uint8_t* u = nullptr;       // [blocks][64][16][4]: u values 4k .. 4k + 3 of each row
  const int32_t* scales = nullptr;  // [blocks][16 groups][16]: s_g
  const int16_t* mins = nullptr;    // [blocks][8 group pairs][16][2]: n_2p, n_2p+1
  const float* d = nullptr;         // [blocks][16]
  const float* dmin = nullptr;      // [blocks][16]
};
inline constexpr int64_t kKPanelValueBytes = 64 * 16 * 4;  // u per super-block
inline constexpr int64_t kKPanelScales = 16 * 16;          // scales per super-block
inline constexpr int64_t kKPanelMins = 8 * 16 * 2;         // mins per super-block

// y[m][j] for every row m of xq and the panel's 16 columns j, row m at y + m * ldy. Call only
// where CpuHasAvx512Vnni().
void KVnniPanelTiles(const QuantizedRowsK& xq, const KVnniPanel& panel, float* y, int64_t ldy);

}  // namespace kvferry::engine::kernels
