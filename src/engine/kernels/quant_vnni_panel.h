// AVX-512 VNNI on packed panels, for the 32-value block formats on CPUs without AMX
// (internal; quant_matmul.cc calls it).
//
// The panel is the one the AMX tiles take (quant_amx.h, AmxPanel): for block b, 8 rows of 64
// bytes, row k holding each of the 16 W rows' values 4k .. 4k + 3. One vpdpbusd of such a row
// against x's four values 4k .. 4k + 3 (broadcast to the 16 lanes) adds four products to each of
// the 16 outputs' lanes, so eight of them give the 16 exact block dots of one row of x with no
// horizontal sums. vpdpbusd multiplies unsigned by signed bytes: the panel holds W + 128 (each
// byte XOR 0x80, PackPanel's `unsigned` form) and each lane starts from -128 times the sum of x's
// block, so the lane ends at exactly dot(x, W) (|lane| < 2^21). Each sum then enters its
// output's chain as quant_matmul.h defines it,
//
//   acc[m][n] = fma(dw_b[n] * dx_b[m], float(isum[m][n]), acc[m][n])   [+ fma(mw_b[n], sx_b[m],
//   ...)]
//
// for b in order: the bits of every other path.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/quant_amx.h"
#include "engine/kernels/quant_matmul.h"

namespace kvferry::engine::kernels {

// -128 times the sum of each block's 32 values of x, at m * blocks_per_row + b: the lanes' start.
std::vector<int32_t> VnniPanelStarts(const QuantizedRows& xq);

// y[m][j] for rows m in [0, xq.rows) and the panel's 16 columns j, row m at y + m * ldy; the
// panel's bytes in the unsigned form (above), `starts` from VnniPanelStarts. Call only where
// CpuHasAvx512Vnni().
void VnniPanelTiles(const QuantizedRows& xq, const int32_t* starts, const AmxPanel& panel, float* y,
                    int64_t ldy);

}  // namespace kvferry::engine::kernels
