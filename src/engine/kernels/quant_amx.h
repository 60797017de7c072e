// AMX-INT8 tiles for the 32-value block formats (internal; quant_matmul.cc calls it).
//
// On CPUs with AMX (Sapphire Rapids and later), TDPBSSD multiplies a 16 x 32 tile of signed
// bytes by a 32 x 16 one into 16 x 16 int32 sums: for one block column b, the exact integer dots
// of 16 rows of x with 16 rows of W at once. Each sum then enters its output's chain exactly as
// quant_matmul.h defines it,
//
//   acc[m][n] = fma(dw_b[n] * dx_b[m], float(isum[m][n]), acc[m][n])   [+ fma(mw_b[n], sx_b[m],
//   ...)]
//
// for b in order, sixteen outputs per vector. The integer sums are exact, so the tiles give the
// bits every other path gives. W arrives packed (AmxPanel): its 16 rows' block values as bytes in
// the tile's layout, their scales and minimums as f32 — the packing (per block format) is the
// caller's.
//
// Linux grants a process the tile registers only on request (arch_prctl ARCH_REQ_XCOMP_PERM);
// CpuHasAmxInt8 asks once and says whether both the CPU and the kernel allow them.
//
// Thread-safety: CpuHasAmxInt8 is safe to call from any thread; AmxTiles uses the calling
// thread's tile registers only (it configures and releases them itself).
#pragma once

#include <cstdint>

#include "engine/kernels/quant_matmul.h"

namespace kvferry::engine::kernels {

inline constexpr int64_t kAmxTile = 16;  // rows of x and of W per tile

bool CpuHasAmxInt8();

// Sixteen rows of W, n .. n + 15, for AmxTiles: for block b, q + b * 512 holds the tile B
// (8 rows of 64 bytes: row k4 = for each n its values 4 k4 .. 4 k4 + 3), dw + b * 16 the scales
// d_b as f32, mw + b * 16 the minimums (nullptr for formats without one).
struct AmxPanel {
  int64_t blocks = 0;
  const int8_t* q = nullptr;
  const float* dw = nullptr;
  const float* mw = nullptr;
};

// y[m][j] for rows m in [0, rows) (a multiple of kAmxTile) and the panel's 16 columns j, row m
// at y + m * ldy. Call only where CpuHasAmxInt8().
void AmxTiles(const QuantizedRows& xq, int64_t rows, const AmxPanel& panel, float* y, int64_t ldy);

}  // namespace kvferry::engine::kernels
