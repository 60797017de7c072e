// MatMul: y = x * W^T, the engine's only GEMM (internal).
//
//   x [M][K] row-major, W [N][K] row-major (one row per output feature, as checkpoints store
//   it), y [M][N] row-major.
// Determinism: y[m][n] = Dot(x[m], W[n], K) — the canonical dot product of simd.h — for every
// m and n, whatever M, the tiling, or the thread count. Threads split the N columns (and tiles
// of rows); no reduction is ever split.
//
// Thread-safety: pure function of its inputs; `pool` may be null (single-threaded).
#pragma once

#include <cstdint>

namespace kvferry::engine {
class ThreadPool;
}

namespace kvferry::engine::kernels {

void MatMul(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y,
            ThreadPool* pool);

// Naive reference (same canonical Dot per element, no tiling), for tests.
void MatMulReference(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y);

}  // namespace kvferry::engine::kernels
