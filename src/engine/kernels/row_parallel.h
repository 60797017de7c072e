// Row-parallel matmul (internal): the attention output and MLP down projections with a
// reduction order fixed by the model, not by how many tensor-parallel ranks share them
// (docs/engine.md, "Tensor parallelism"; engine/tensor_parallel.h).
//
// RowParallelMatMul computes y[m][n] = sum_k x[m][k] W[n][k] over a rank's input columns split
// at `bounds` into L leaves (L a power of two): leaf i is the canonical Dot (simd.h) over
// columns [bounds[i], bounds[i+1]) — exactly what MatMul computes for that slice — and the
// leaves are combined by TreeSum. A rank holding an aligned subtree of the model's leaves thus
// computes that subtree's value, bit for bit, whatever the other ranks hold.
//
// Thread-safety: pure functions of their inputs; `pool` may be null.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kernels/weight_matrix.h"

namespace kvferry::engine {
class ThreadPool;
}

namespace kvferry::engine::kernels {

// out[i] = the balanced pairwise tree of parts[0..L)[i], i < n: L = 1: p0; L = 2: p0 + p1;
// L = 4: (p0 + p1) + (p2 + p3); in general the trees of both halves, added. L must be a power of
// two. `out` may alias parts[0].
void TreeSum(std::span<const float* const> parts, int64_t n, float* out);

// x: [M][K] row-major, K = bounds.back(); w: [N][K] (may be a strided column slice); y: [M][N].
// bounds: L + 1 increasing column boundaries from 0. `scratch` holds the L partial products
// between calls (grown as needed).
void RowParallelMatMul(const float* x, int64_t M, std::span<const int64_t> bounds,
                       const WeightMatrix& w, float* y, std::vector<float>* scratch,
                       ThreadPool* pool);

}  // namespace kvferry::engine::kernels
