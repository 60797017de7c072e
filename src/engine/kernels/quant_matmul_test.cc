// Q8_0: the block codec (ggml's reference quantizer for weights, llama.cpp's x86 quantizer for
// activations), and the matmul over Q8_0 weights: every SIMD path equals the definition written
// out (Q8_0Reference) bit for bit, whatever the batch, the threads, the parts or the K slice.
#include "engine/kernels/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_q8_0.h"
#include "engine/thread_pool.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

using testing_util::RandomFloats;

// n x k random weights as Q8_0 blocks (the bytes a GGUF file holds).
std::vector<BlockQ8_0> QuantizedWeights(int64_t n, int64_t k, uint64_t seed) {
  const std::vector<float> w = RandomFloats(n * k, seed);
  std::vector<BlockQ8_0> out(static_cast<size_t>(n * k / kQ8_0Block));
  QuantizeRowQ8_0(w.data(), n * k, out.data());
  return out;
}

WeightMatrix Q8Matrix(const std::vector<BlockQ8_0>& blocks, int64_t rows, int64_t cols) {
  return {formats::DType::kQ8_0, reinterpret_cast<const std::byte*>(blocks.data()), rows, cols};
}

TEST(QuantQ8_0Test, WeightsRoundHalvesAwayActivationsToEven) {
  // max |x| = 127: d = 1, so q = x rounded; 2.5 and -0.5 are ties.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -0.5f;
  x[3] = 3.25f;
  BlockQ8_0 w, a;
  QuantizeRowQ8_0(x.data(), 32, &w);
  QuantizeActivationsQ8_0(x.data(), 32, &a);
  EXPECT_EQ(F16ToF32(w.d), 1.0f);
  EXPECT_EQ(F16ToF32(a.d), 1.0f);
  EXPECT_EQ((std::vector<int>{w.q[0], w.q[1], w.q[2], w.q[3]}), (std::vector<int>{127, 3, -1, 3}));
  EXPECT_EQ((std::vector<int>{a.q[0], a.q[1], a.q[2], a.q[3]}), (std::vector<int>{127, 2, 0, 3}));
  std::vector<float> back(32);
  DequantizeRowQ8_0(&w, 32, back.data());
  EXPECT_EQ(back[1], 3.0f);
  // All zeros: scale 0, values 0.
  std::vector<float> zeros(32, 0.0f);
  QuantizeRowQ8_0(zeros.data(), 32, &w);
  EXPECT_EQ(w.d, 0);
  for (int8_t q : w.q) EXPECT_EQ(q, 0);
}

// Half a step, plus what storing d in F16 (11 bits) moves the 127th step: 127 * 2^-11 d.
TEST(QuantQ8_0Test, RoundTripIsWithinHalfAStep) {
  const std::vector<float> x = RandomFloats(4096, 5);
  std::vector<BlockQ8_0> blocks(4096 / 32);
  QuantizeRowQ8_0(x.data(), 4096, blocks.data());
  std::vector<float> back(4096);
  DequantizeRowQ8_0(blocks.data(), 4096, back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = F16ToF32(blocks[i / 32].d);
    ASSERT_LE(std::fabs(back[i] - x[i]), (0.5f + 127.0f / 2048) * d) << i;
  }
}

TEST(QuantQ8_0Test, FindsTheFirstNonFiniteScale) {
  std::vector<BlockQ8_0> blocks = QuantizedWeights(4, 64, 6);
  const auto* bytes = reinterpret_cast<const std::byte*>(blocks.data());
  EXPECT_EQ(FirstNonFiniteScaleQ8_0(bytes, 8), -1);
  blocks[5].d = 0x7e00;  // NaN
  blocks[6].d = 0x7c00;  // +inf
  EXPECT_EQ(FirstNonFiniteScaleQ8_0(bytes, 8), 5);
  blocks[5].d = 0x3c00;
  EXPECT_EQ(FirstNonFiniteScaleQ8_0(bytes, 8), 6);
}

TEST(QuantMatMulTest, EveryPathEqualsTheDefinitionBitForBit) {
  ThreadPool pool(2);
  for (int64_t M : {1, 2, 7, 64, 300}) {
    for (int64_t K : {32, 96, 1024}) {
      for (int64_t N : {1, 8, 13, 40}) {
        const std::vector<float> x = RandomFloats(M * K, 1);
        const std::vector<BlockQ8_0> wb = QuantizedWeights(N, K, 2);
        const WeightMatrix w = Q8Matrix(wb, N, K);
        QuantizedRows xq;
        QuantizeRows(x.data(), M, K, K, &xq);
        std::vector<float> ref(M * N), y(M * N);
        Q8_0Reference(xq, w, ref.data(), N);
        for (MatMulPath path : {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512}) {
          ForceMatMulPathForTest(path);
          MatMul(x.data(), M, K, {&w, 1}, y.data(), &pool);
          ForceMatMulPathForTest(MatMulPath::kAuto);
          ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
              << "M=" << M << " K=" << K << " N=" << N << " path " << static_cast<int>(path);
        }
        // And close to the f64 product of what the blocks hold.
        std::vector<float> wd(N * K), xd(M * K);
        DequantizeRowQ8_0(wb.data(), N * K, wd.data());
        DequantizeRowQ8_0(xq.blocks.data(), M * K, xd.data());
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += double(xd[m * K + k]) * wd[n * K + k];
            ASSERT_NEAR(y[m * N + n], s, 1e-4 * (1 + std::sqrt(double(K))));
          }
        }
      }
    }
  }
}

TEST(QuantMatMulTest, RowDoesNotDependOnBatchThreadsOrParts) {
  const int64_t K = 256, N = 72;
  const std::vector<float> x = RandomFloats(40 * K, 3);
  const std::vector<BlockQ8_0> wb = QuantizedWeights(N, K, 4);
  const std::vector<float> wf = RandomFloats(24 * K, 5);
  // Parts: Q8_0 rows 0..39, an F32 part, Q8_0 rows 40..71 (as q, k, v or gate, up are stacked).
  const WeightMatrix q8 = Q8Matrix(wb, N, K);
  const WeightMatrix parts[] = {RowSlice(q8, 0, 40), F32Matrix(wf.data(), 24, K),
                                RowSlice(q8, 40, 32)};
  const int64_t width = N + 24;
  std::vector<float> alone(width), f32_alone(24);
  MatMul(x.data() + 17 * K, 1, K, parts, alone.data(), nullptr);
  MatMul(x.data() + 17 * K, 1, K, wf.data(), 24, f32_alone.data(), nullptr);
  EXPECT_EQ(0, std::memcmp(alone.data() + 40, f32_alone.data(), 24 * 4)) << "the F32 part";
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (int64_t M : {18, 19, 40}) {
      std::vector<float> y(M * width);
      MatMul(x.data(), M, K, parts, y.data(), &pool);
      ASSERT_EQ(0, std::memcmp(y.data() + 17 * width, alone.data(), width * 4))
          << "M=" << M << " threads " << threads;
    }
  }
}

TEST(QuantMatMulTest, ABlockAlignedColumnSliceComputesItsKSlice) {
  // A row-parallel leaf: columns [64, 160) of W against the same columns of x.
  const int64_t M = 5, K = 256, N = 16, first = 64, width = 96;
  const std::vector<float> x = RandomFloats(M * K, 7);
  const std::vector<BlockQ8_0> wb = QuantizedWeights(N, K, 8);
  const WeightMatrix slice = ColumnSlice(Q8Matrix(wb, N, K), first, width);
  std::vector<float> y(M * N), ref(M * N);
  MatMulStrided(x.data() + first, M, width, K, {&slice, 1}, y.data(), N, nullptr);
  // The same values as a dense matrix of their own.
  std::vector<BlockQ8_0> dense;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = first / 32; b < (first + width) / 32; ++b) dense.push_back(wb[n * K / 32 + b]);
  }
  std::vector<float> xs(M * width);
  for (int64_t m = 0; m < M; ++m) std::memcpy(&xs[m * width], &x[m * K + first], width * 4);
  QuantizedRows xq;
  QuantizeRows(xs.data(), M, width, width, &xq);
  Q8_0Reference(xq, Q8Matrix(dense, N, width), ref.data(), N);
  EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4));
}

}  // namespace
}  // namespace kvferry::engine::kernels
