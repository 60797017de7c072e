// Q8_0 and Q4_0: the block codecs (ggml's reference quantizers for weights, llama.cpp's x86
// quantizer for activations), and the matmul over Q8_0 and Q4_0 weights: every SIMD path equals
// the definition written out (QuantReference) bit for bit, whatever the batch, the threads, the
// parts or the K slice.
#include "engine/kernels/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_k_matmul.h"
#include "engine/kernels/quant_q4_q5.h"
#include "engine/kernels/quant_q8_0.h"
#include "engine/kernels/quant_types.h"
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

// n x k random weights in `dtype` (a computed type) as the bytes a GGUF file holds.
std::vector<std::byte> WeightBytes(formats::DType dtype, int64_t n, int64_t k, uint64_t seed) {
  const std::vector<float> w = RandomFloats(n * k, seed);
  std::vector<std::byte> out(static_cast<size_t>(n * k / formats::DTypeBlockElements(dtype) *
                                                 formats::DTypeBlockBytes(dtype)));
  QuantizeRow(dtype, w.data(), n * k, out.data());
  return out;
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

// The activations' quantizer (vectorized where the CPU has AVX2) against its definition written
// out here, on random blocks, ties, blocks of zeros, tiny blocks whose 127 / max overflows, and
// blocks holding a NaN or an infinity.
TEST(QuantQ8_0Test, ActivationQuantizerEqualsItsDefinition) {
  std::vector<float> x = RandomFloats(32 * 64, 9);
  for (int i = 0; i < 32; ++i) x[32 + i] = -15.5f + i;  // block 1: max 15.5, ties at every step
  x[32 + 31] = 127.0f;                                  // (d = 1: q = x rounded half-even)
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);      // block 2: zeros
  for (int i = 0; i < 32; ++i) x[96 + i] = (i - 16) * 1e-39f;  // block 3: subnormal, id = inf
  x[128 + 5] = std::nanf("");                                  // block 4: a NaN
  x[160 + 7] = -std::numeric_limits<float>::infinity();        // block 5: an infinity
  std::vector<BlockQ8_0> got(64);
  std::vector<float> got_sums(64);
  QuantizeActivationsQ8_0(x.data(), 32 * 64, got.data(), got_sums.data());
  for (int b = 0; b < 64; ++b) {
    const float* v = x.data() + 32 * b;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    EXPECT_EQ(got[b].d, F32ToF16(amax / 127.0f)) << "block " << b;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float r = std::nearbyint(v[i] * id);
      const int want = r != r ? 0 : static_cast<int>(std::clamp(r, -127.0f, 127.0f));
      ASSERT_EQ(got[b].q[i], want) << "block " << b << " value " << i;
      sum += want;
    }
    const float want_sum = F16ToF32(F32ToF16(amax / 127.0f * static_cast<float>(sum)));
    EXPECT_EQ(0, std::memcmp(&got_sums[b], &want_sum, 4)) << "block " << b;  // NaN for inf
  }
}

// Half a step, plus what storing d in F16 (11 bits) moves the 127th step: 127 * 2^-11 d.
TEST(QuantQ4_0Test, TheLargestValueMapsToMinusEightAndNibblesPack) {
  // max-magnitude value -16: d = -16 / -8 = 2; x / d + 8.5 truncated, at most 15.
  std::vector<float> x(32, 0.0f);
  x[0] = -16.0f;  // -> 0 (d * (0 - 8) = -16)
  x[1] = 14.0f;   // 7 + 8.5 = 15.5 -> 15
  x[2] = 3.0f;    // 1.5 + 8.5 = 10 -> 10
  x[16] = -1.0f;  // -0.5 + 8.5 = 8 -> 8 (high nibble of byte 0)
  x[17] = 15.9f;  // 7.95 + 8.5 -> 16 -> min 15
  BlockQ4_0 b;
  QuantizeRowQ4_0(x.data(), 32, &b);
  EXPECT_EQ(F16ToF32(b.d), 2.0f);
  EXPECT_EQ(b.qs[0], 0x80);  // low 0, high 8
  EXPECT_EQ(b.qs[1], 0xff);  // low 15, high 15
  EXPECT_EQ(b.qs[2] & 0x0f, 10);
  std::vector<float> back(32);
  DequantizeRowQ4_0(&b, 32, back.data());
  EXPECT_EQ(back[0], -16.0f);
  EXPECT_EQ(back[1], 14.0f);
  EXPECT_EQ(back[2], 4.0f);
  EXPECT_EQ(back[16], 0.0f);
  EXPECT_EQ(back[17], 14.0f);
}

TEST(QuantQ5_0Test, FifthBitsGoToQhAndValuesSpanMinus16To15) {
  // max-magnitude value 32: d = 32 / -16 = -2; q = trunc(x / d + 16.5), at most 31.
  std::vector<float> x(32, 0.0f);
  x[0] = 32.0f;   // -16 + 16.5 -> 0
  x[1] = -30.0f;  // 15 + 16.5 = 31.5 -> 31 (fifth bit set)
  x[17] = -2.0f;  // 1 + 16.5 -> 17 (fifth bit of value 17)
  x[20] = 7.0f;   // -3.5 + 16.5 = 13 -> 13
  BlockQ5_0 b;
  QuantizeRowQ5_0(x.data(), 32, &b);
  EXPECT_EQ(F16ToF32(b.d), -2.0f);
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  EXPECT_TRUE(qh & (1u << 1));
  EXPECT_FALSE(qh & 1u);
  EXPECT_TRUE(qh & (1u << 17));
  int8_t ints[32];
  Q5_0Ints(b, ints);
  EXPECT_EQ(ints[0], -16);
  EXPECT_EQ(ints[1], 15);
  EXPECT_EQ(ints[17], 1);
  EXPECT_EQ(ints[20], -3);
  EXPECT_EQ(ints[5], 0);  // 0 -> 16.5 -> 16 -> 0
  std::vector<float> back(32);
  DequantizeRowQ5_0(&b, 32, back.data());
  EXPECT_EQ(back[0], 32.0f);
  EXPECT_EQ(back[1], -30.0f);
  EXPECT_EQ(back[20], 6.0f);
}

TEST(QuantQ4_1Test, MinimumAndStepSpanTheBlock) {
  // min -1, max 14: d = 15 / 15 = 1 (Q4_1), 15 / 31 (Q5_1); q = trunc((x - min) / d + 0.5).
  std::vector<float> x(32, 0.0f);
  x[0] = -1.0f;
  x[1] = 14.0f;
  x[18] = 4.4f;  // Q4_1: 5.4 + 0.5 -> 5
  BlockQ4_1 a;
  QuantizeRowQ4_1(x.data(), 32, &a);
  EXPECT_EQ(F16ToF32(a.d), 1.0f);
  EXPECT_EQ(F16ToF32(a.m), -1.0f);
  int8_t q[32];
  Q4_1Ints(a, q);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 15);
  EXPECT_EQ(q[5], 1);  // 0 - (-1) = 1
  EXPECT_EQ(q[18], 5);
  std::vector<float> back(32);
  DequantizeRowQ4_1(&a, 32, back.data());
  EXPECT_EQ(back[1], 14.0f);
  EXPECT_EQ(back[18], 4.0f);
  BlockQ5_1 b;
  QuantizeRowQ5_1(x.data(), 32, &b);
  EXPECT_EQ(F16ToF32(b.m), -1.0f);
  Q5_1Ints(b, q);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 31);   // the fifth bit: qh bit 1
  EXPECT_EQ(q[18], 11);  // 5.4 / (15 / 31) = 11.16 + 0.5 -> 11
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  EXPECT_TRUE(qh & (1u << 1));
  EXPECT_FALSE(qh & (1u << 18));
}

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
  const WeightMatrix m = Q8Matrix(blocks, 4, 64);
  EXPECT_EQ(FirstNonFiniteBlockScale(m), -1);
  blocks[5].d = 0x7e00;  // NaN
  blocks[6].d = 0x7c00;  // +inf
  EXPECT_EQ(FirstNonFiniteBlockScale(m), 5);
  blocks[5].d = 0x3c00;
  EXPECT_EQ(FirstNonFiniteBlockScale(m), 6);
  std::vector<std::byte> q4 = WeightBytes(formats::DType::kQ4_0, 4, 64, 6);
  q4[3 * 18 + 1] = std::byte{0xfc};  // block 3's scale: -inf
  EXPECT_EQ(FirstNonFiniteBlockScale({formats::DType::kQ4_0, q4.data(), 4, 64}), 3);
}

void ExpectEveryPathEqualsTheDefinition(formats::DType dtype, int64_t M, int64_t K, int64_t N,
                                        ThreadPool* pool) {
  const std::vector<float> x = RandomFloats(M * K, 1);
  const std::vector<std::byte> wb = WeightBytes(dtype, N, K, 2);
  const WeightMatrix w{dtype, wb.data(), N, K};
  QuantizedRows xq;
  QuantizeRows(x.data(), M, K, K, &xq);
  std::vector<float> ref(M * N), y(M * N);
  QuantReference(xq, w, ref.data(), N);
  for (MatMulPath path :
       {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512, MatMulPath::kAmx}) {
    ForceMatMulPathForTest(path);
    MatMul(x.data(), M, K, {&w, 1}, y.data(), pool);
    ForceMatMulPathForTest(MatMulPath::kAuto);
    ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
        << formats::DTypeName(dtype) << " M=" << M << " K=" << K << " N=" << N << " path "
        << static_cast<int>(path);
  }
  // And close to the f64 product of what the blocks hold. A block's minimum multiplies x's block
  // sum as Q8_1 stores it (F16), not the exact sum: that is the product llama.cpp computes.
  const std::vector<float> wd = ToF32(w);
  std::vector<float> xd(M * K);
  DequantizeRowQ8_0(xq.blocks.data(), M * K, xd.data());
  const bool with_min = dtype == formats::DType::kQ4_1 || dtype == formats::DType::kQ5_1;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t b = 0; b < K / 32; ++b) {
        uint16_t mb = 0;
        if (with_min) std::memcpy(&mb, w.row(n) + w.bytes_of(b * 32) + 2, 2);
        const double min = F16ToF32(mb);
        for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
          s += double(xd[m * K + k]) * (wd[n * K + k] - min);
        }
        s += min * xq.sums[m * (K / 32) + b];
      }
      ASSERT_NEAR(y[m * N + n], s, 1e-4 * (1 + std::sqrt(double(K))));
    }
  }
}

TEST(QuantMatMulTest, EveryPathEqualsTheDefinitionBitForBit) {
  ThreadPool pool(2);
  for (formats::DType dtype : ComputedQuantTypes()) {
    if (IsKQuant(dtype)) continue;  // quant_k_test.cc
    // 16, 64, 300 rows: whole AMX tiles, and 12 rows beyond them; 40 columns: 2 tiles and 8.
    for (int64_t M : {1, 2, 7, 16, 64, 300}) {
      for (int64_t K : {32, 96, 1024}) {
        for (int64_t N : {1, 8, 13, 40}) ExpectEveryPathEqualsTheDefinition(dtype, M, K, N, &pool);
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
  QuantReference(xq, Q8Matrix(dense, N, width), ref.data(), N);
  EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4));
}

}  // namespace
}  // namespace kvferry::engine::kernels
