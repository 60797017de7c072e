#include "engine/kernels/matmul.h"

#include <algorithm>

#include "engine/kernels/simd.h"
#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

namespace {

// A 2 (rows of x) by 4 (rows of W) tile. Each of the 8 outputs follows exactly the canonical
// Dot order: one V8 accumulator over k in steps of 8, the fixed lane combine, then the tail.
inline __attribute__((always_inline)) void Tile2x4(const float* x0, const float* x1, const float* w,
                                                   int64_t K, float* y0, float* y1) {
  const float* w0 = w;
  const float* w1 = w + K;
  const float* w2 = w + 2 * K;
  const float* w3 = w + 3 * K;
  const int64_t k8 = K & ~int64_t{7};
  V8 a00 = Splat8(0), a01 = Splat8(0), a02 = Splat8(0), a03 = Splat8(0);
  V8 a10 = Splat8(0), a11 = Splat8(0), a12 = Splat8(0), a13 = Splat8(0);
  for (int64_t k = 0; k < k8; k += 8) {
    const V8 vx0 = Load8(x0 + k), vx1 = Load8(x1 + k);
    const V8 vw0 = Load8(w0 + k), vw1 = Load8(w1 + k);
    const V8 vw2 = Load8(w2 + k), vw3 = Load8(w3 + k);
    a00 += vx0 * vw0;
    a01 += vx0 * vw1;
    a02 += vx0 * vw2;
    a03 += vx0 * vw3;
    a10 += vx1 * vw0;
    a11 += vx1 * vw1;
    a12 += vx1 * vw2;
    a13 += vx1 * vw3;
  }
  float s[8] = {Combine8(a00), Combine8(a01), Combine8(a02), Combine8(a03),
                Combine8(a10), Combine8(a11), Combine8(a12), Combine8(a13)};
  for (int64_t k = k8; k < K; ++k) {
    s[0] += x0[k] * w0[k];
    s[1] += x0[k] * w1[k];
    s[2] += x0[k] * w2[k];
    s[3] += x0[k] * w3[k];
    s[4] += x1[k] * w0[k];
    s[5] += x1[k] * w1[k];
    s[6] += x1[k] * w2[k];
    s[7] += x1[k] * w3[k];
  }
  y0[0] = s[0];
  y0[1] = s[1];
  y0[2] = s[2];
  y0[3] = s[3];
  y1[0] = s[4];
  y1[1] = s[5];
  y1[2] = s[6];
  y1[3] = s[7];
}

// One row of x by 4 rows of W (odd M).
inline __attribute__((always_inline)) void Tile1x4(const float* x0, const float* w, int64_t K,
                                                   float* y0) {
  const float* w0 = w;
  const float* w1 = w + K;
  const float* w2 = w + 2 * K;
  const float* w3 = w + 3 * K;
  const int64_t k8 = K & ~int64_t{7};
  V8 a0 = Splat8(0), a1 = Splat8(0), a2 = Splat8(0), a3 = Splat8(0);
  for (int64_t k = 0; k < k8; k += 8) {
    const V8 vx0 = Load8(x0 + k);
    a0 += vx0 * Load8(w0 + k);
    a1 += vx0 * Load8(w1 + k);
    a2 += vx0 * Load8(w2 + k);
    a3 += vx0 * Load8(w3 + k);
  }
  float s[4] = {Combine8(a0), Combine8(a1), Combine8(a2), Combine8(a3)};
  for (int64_t k = k8; k < K; ++k) {
    s[0] += x0[k] * w0[k];
    s[1] += x0[k] * w1[k];
    s[2] += x0[k] * w2[k];
    s[3] += x0[k] * w3[k];
  }
  y0[0] = s[0];
  y0[1] = s[1];
  y0[2] = s[2];
  y0[3] = s[3];
}

// Columns [n0, n1) of y for all M rows. Rows are taken in blocks so the x block stays in L2
// while 4 rows of W at a time stay in L1.
inline __attribute__((always_inline)) void MatMulColumns(const float* x, int64_t M, int64_t K,
                                                         const float* w, int64_t N, float* y,
                                                         int64_t n0, int64_t n1) {
  constexpr int64_t kRowBlock = 32;
  for (int64_t mb = 0; mb < M; mb += kRowBlock) {
    const int64_t me = std::min(M, mb + kRowBlock);
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      const float* wn = w + n * K;
      int64_t m = mb;
      for (; m + 2 <= me; m += 2) {
        Tile2x4(x + m * K, x + (m + 1) * K, wn, K, y + m * N + n, y + (m + 1) * N + n);
      }
      if (m < me) Tile1x4(x + m * K, wn, K, y + m * N + n);
    }
    for (; n < n1; ++n) {
      for (int64_t m = mb; m < me; ++m) y[m * N + n] = Dot(x + m * K, w + n * K, K);
    }
  }
}

__attribute__((target("avx2"))) void MatMulColumnsAvx2(const float* x, int64_t M, int64_t K,
                                                       const float* w, int64_t N, float* y,
                                                       int64_t n0, int64_t n1) {
  MatMulColumns(x, M, K, w, N, y, n0, n1);
}

void MatMulColumnsGeneric(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y,
                          int64_t n0, int64_t n1) {
  MatMulColumns(x, M, K, w, N, y, n0, n1);
}

}  // namespace

void MatMul(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y,
            ThreadPool* pool) {
  auto run = CpuHasAvx2() ? &MatMulColumnsAvx2 : &MatMulColumnsGeneric;
  auto body = [&](int64_t n0, int64_t n1) { run(x, M, K, w, N, y, n0, n1); };
  // Split columns in multiples of 4 (whole tiles); small problems run inline.
  if (pool == nullptr || M * N * K < (int64_t{1} << 16)) {
    body(0, N);
    return;
  }
  pool->ParallelFor(N, 16, body);
}

void MatMulReference(const float* x, int64_t M, int64_t K, const float* w, int64_t N, float* y) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      // Written out (not via Dot) so the reference checks the tiling's order independently.
      float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const int64_t k8 = K & ~int64_t{7};
      for (int64_t k = 0; k < k8; ++k) lanes[k % 8] += x[m * K + k] * w[n * K + k];
      float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (int64_t k = k8; k < K; ++k) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  }
}

}  // namespace kvferry::engine::kernels
