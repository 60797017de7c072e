#include "engine/kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/thread_pool.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

using testing_util::RandomFloats;

TEST(MatMulTest, MatchesReferenceBitForBitOverShapes) {
  ThreadPool pool(2);
  for (int64_t M : {1, 2, 3, 4, 7, 33, 65}) {
    for (int64_t K : {1, 8, 13, 64, 130, 200}) {
      for (int64_t N : {1, 4, 5, 8, 17, 24, 260}) {
        const auto x = RandomFloats(M * K, 1);
        const auto w = RandomFloats(N * K, 2);
        std::vector<float> y(M * N), ref(M * N);
        MatMulReference(x.data(), M, K, w.data(), N, ref.data());
        for (MatMulPath path : {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512}) {
          ForceMatMulPathForTest(path);
          MatMul(x.data(), M, K, w.data(), N, y.data(), &pool);
          ForceMatMulPathForTest(MatMulPath::kAuto);
          ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
              << "M=" << M << " K=" << K << " N=" << N << " path " << static_cast<int>(path);
        }
        MatMul(x.data(), M, K, w.data(), N, y.data(), &pool);
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
  const auto x = RandomFloats(40 * K, 3);
  const auto w = RandomFloats(N * K, 4);
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

// F16 and BF16 weights give the bits of the F32 product on the exactly converted weights, on
// every SIMD path this machine can run (F16C and portable), stacked and strided parts included:
// P and D on different CPU generations compute alike.
TEST(MatMulTest, HalfWeightsEqualF32OnEverySimdPath) {
  ThreadPool pool(2);
  const int64_t K = 77, N0 = 40, N1 = 23;
  for (formats::DType dtype : {formats::DType::kF16, formats::DType::kBF16}) {
    // Two parts; the second is a strided view (every row K + 5 elements apart).
    const auto w0f = RandomFloats(N0 * K, 5), w1f = RandomFloats(N1 * (K + 5), 6);
    auto to_half = [dtype](const std::vector<float>& v) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        h[i] = dtype == formats::DType::kF16 ? F32ToF16(v[i]) : F32ToBF16(v[i]);
      }
      return h;
    };
    const auto w0 = to_half(w0f), w1 = to_half(w1f);
    const WeightMatrix parts[2] = {
        {dtype, reinterpret_cast<const std::byte*>(w0.data()), N0, K, 0},
        {dtype, reinterpret_cast<const std::byte*>(w1.data()), N1, K, K + 5}};
    // The reference: the converted weights as one dense F32 matrix.
    std::vector<float> wf((N0 + N1) * K);
    for (int64_t n = 0; n < N0 + N1; ++n) {
      ReadRowF32(n < N0 ? parts[0] : parts[1], n < N0 ? n : n - N0, wf.data() + n * K);
    }
    for (int64_t M : {1, 2, 4, 5, 33}) {
      const auto x = RandomFloats(M * K, 7);
      std::vector<float> ref(M * (N0 + N1));
      MatMul(x.data(), M, K, wf.data(), N0 + N1, ref.data(), &pool);
      for (MatMulPath path :
           {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512, MatMulPath::kAuto}) {
        ForceMatMulPathForTest(path);
        std::vector<float> y(ref.size());
        MatMul(x.data(), M, K, parts, y.data(), &pool);
        ForceMatMulPathForTest(MatMulPath::kAuto);
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
            << formats::DTypeName(dtype) << " M=" << M << " path " << static_cast<int>(path);
      }
    }
  }
  std::printf("F16C path %s, AVX-512 path %s\n",
              MatMulHasF16cPath() ? "run" : "unavailable here (CPU or clang build)",
              MatMulHasAvx512Path() ? "run" : "unavailable here (CPU or clang build)");
}

}  // namespace
}  // namespace kvferry::engine::kernels
