#include "engine/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/thread_pool.h"

namespace kvferry::engine::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(MatMulTest, MatchesReferenceBitForBitOverShapes) {
  ThreadPool pool(2);
  for (int64_t M : {1, 2, 3, 7, 33, 65}) {
    for (int64_t K : {1, 8, 13, 64, 130}) {
      for (int64_t N : {1, 4, 5, 17, 260}) {
        const auto x = Random(M * K, 1);
        const auto w = Random(N * K, 2);
        std::vector<float> y(M * N), ref(M * N);
        MatMul(x.data(), M, K, w.data(), N, y.data(), &pool);
        MatMulReference(x.data(), M, K, w.data(), N, ref.data());
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
            << "M=" << M << " K=" << K << " N=" << N;
        // And close to a double-precision dot product.
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
            ASSERT_NEAR(y[m * N + n], s, 1e-4 * (1 + std::sqrt(double(K))));
          }
        }
      }
    }
  }
}

TEST(MatMulTest, RowDoesNotDependOnBatchOrThreads) {
  const int64_t K = 128, N = 384;
  const auto x = Random(40 * K, 3);
  const auto w = Random(N * K, 4);
  std::vector<float> alone(N);
  MatMul(x.data() + 17 * K, 1, K, w.data(), N, alone.data(), nullptr);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t M : {18, 19, 40}) {
      std::vector<float> y(M * N);
      MatMul(x.data(), M, K, w.data(), N, y.data(), &pool);
      ASSERT_EQ(0, std::memcmp(alone.data(), y.data() + 17 * N, N * 4)) << M << " " << threads;
    }
  }
}

}  // namespace
}  // namespace kvferry::engine::kernels
