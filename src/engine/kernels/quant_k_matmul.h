// The matmul over k-quant weights, Q4_K, Q5_K and Q6_K (internal; MatMul in matmul.h calls it for
// every part in one of them).
//
// As llama.cpp computes it, the weights stay in their super-blocks and each row of x is
// quantized to Q8_K (QuantizeActivationsQ8_K, quant_k.h). With W's super-block b read as KInts
// (d_b, dmin_b, w_b[256], group scales s_b[16] and minimums n_b[16]) and x's (dx_b, q_b[256],
// group sums bs_b[16]), b = 0 .. K/256 - 1:
//
//   isum_b = sum_g s_b[g] * sum_{i in g} w_b[i] * q_b[i]        msum_b = sum_g n_b[g] * bs_b[g]
//   acc = 0;  for b in order:  acc = fma(d_b * dx_b, float(isum_b), acc)
//                              [Q4_K, Q5_K:  acc = fma(dmin_b * dx_b, float(-msum_b), acc)];  y =
//                              acc
//
// The integer sums are exact (|isum_b| < 2^28), so how a SIMD path adds them up does not matter,
// and y[m][n] depends on x's row m and W's row n alone: not on M, the tiling, the path or the
// thread count; a row-parallel leaf cut on super-block bounds computes its slice alike whatever
// the TP size.
//
// Thread-safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/quant_k.h"
#include "engine/kernels/quant_matmul.h"
#include "engine/kernels/weight_matrix.h"

namespace kvferry::engine::kernels {

// x [M][K] (row m at x + m * ldx, K a multiple of 256) as Q8_K blocks, K / 256 per row.
struct QuantizedRowsK {
  int64_t rows = 0;
  int64_t blocks_per_row = 0;
  std::vector<BlockQ8_K> blocks;
};
// Rows split between the pool's threads when there are enough of them (nullptr: this thread).
void QuantizeRowsK(const float* x, int64_t M, int64_t K, int64_t ldx, QuantizedRowsK* out,
                   ThreadPool* pool = nullptr);

bool IsKQuant(formats::DType dtype);

// y[m][n] for n in [n0, n1) of one Q4_K, Q5_K or Q6_K matrix w, every row m of xq; y's row m at
// y + m * ldy; the widest path the CPU runs up to `widest` (AVX-512 VNNI, AVX2, portable: all
// give the same bits).
void KQuantColumns(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy,
                   int64_t n0, int64_t n1, QuantPath widest);

// The definition above written out per element, for tests.
void KQuantReference(const QuantizedRowsK& xq, const WeightMatrix& w, float* y, int64_t ldy);

}  // namespace kvferry::engine::kernels
