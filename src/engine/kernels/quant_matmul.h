// The matmul over block-quantized weights (internal; MatMul in matmul.h calls it for every part
// whose dtype is quantized: Q8_0, Q4_0, Q5_0, Q4_1 or Q5_1).
//
// As llama.cpp computes it, the weights stay in their blocks and the activations are quantized
// too: each row of x is cut into Q8_0 blocks (QuantizeActivationsQ8_0), and each block pair is an
// integer dot product. Determinism: with w's blocks (dw_b, qw_b: the block's 32 values as
// integers: Q8_0's bytes, Q4_0's nibbles minus 8, Q5_0's 5-bit values minus 16, Q4_1's and
// Q5_1's 4- and 5-bit values, whose blocks also hold a minimum mw_b) and x's (dx_b,
// qx_b), b = 0 .. K/32 - 1,
//
//   acc = 0;  for b in order:  acc = fma(dw_b * dx_b, float(sum_i qw_b[i] * qx_b[i]), acc)
//                              [with a minimum:  acc = fma(mw_b, sx_b, acc)];  y = acc
//
// where sx_b is x's block sum as llama.cpp's Q8_1 holds it (F16 of d * sum_i qx_b[i]). dw_b * dx_b
// is one f32 product, and the integer sum is exact, so how a SIMD path adds it up does not
// matter. y[m][n] depends on x's row m and W's row n alone — not on M, the tiling, the SIMD path
// or the thread count — and x's blocks cut the same way wherever K is split on a block boundary,
// so a row-parallel leaf (row_parallel.h) computes its slice alike whatever the TP size.
//
// Thread-safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/kernels/quant_q8_0.h"
#include "engine/kernels/weight_matrix.h"

namespace kvferry::engine {
class ThreadPool;
}

namespace kvferry::engine::kernels {

// x [M][K] (row m at x + m * ldx) as Q8_0 blocks, K / 32 per row, with each block's scale as f32.
struct QuantizedRows {
  int64_t rows = 0;
  int64_t blocks_per_row = 0;
  std::vector<BlockQ8_0> blocks;
  std::vector<float> scales;
  std::vector<float> sums;  // sx_b (above), for the formats with a minimum
};
// `pool` (may be null) splits the rows between its threads.
void QuantizeRows(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRows* out,
                  ThreadPool* pool = nullptr);

// fn(m0, m1) over rows [0, M) of an activation quantizer (this one's and QuantizeRowsK's), split
// between the pool's threads (null: all on this one). Each row is quantized on its own, so how
// they are split changes no bit.
void ForEachRowShare(int64_t M, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn);

// The SIMD copies, widest first; each falls back to the next narrower where the CPU or the
// build lacks it (g++ x86 builds have all; the integer sums are exact, so all give the same
// bits): AMX-INT8 tiles (quant_amx.h; 32-value blocks, 16 rows of x or more), AVX-512 with VNNI
// (vpdpbusd: on packed panels of 16 columns for 16 rows of x or more, quant_vnni_panel.h; two
// blocks per vector below that), AVX2 (vpmaddubsw), portable.
enum class QuantPath { kAmx, kAvx512Vnni, kAvx2, kPortable };

// y[m][n] for n in [n0, n1) of one Q8_0, Q4_0, Q5_0, Q4_1 or Q5_1 matrix w (K = w.cols, a multiple
// of 32), every row m of xq; y's row m at y + m * ldy; the widest path the CPU runs up to `widest`.
void QuantColumns(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy, int64_t n0,
                  int64_t n1, QuantPath widest);

// The definition above written out per element, for tests.
void QuantReference(const QuantizedRows& xq, const WeightMatrix& w, float* y, int64_t ldy);

}  // namespace kvferry::engine::kernels
