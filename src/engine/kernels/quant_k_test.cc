// Q4_K, Q5_K, Q6_K and Q8_K: the layouts decoded by hand, the reference quantizers' round trip,
// the activations' quantizer, and the matmul over k-quant weights: every path equals the
// definition written out (KQuantReference) bit for bit, whatever the batch, the threads, the
// parts (k-quants beside Q8_0 and F32, as a Q4_K_M file mixes them) or the K slice.
#include "engine/kernels/quant_k.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_k_matmul.h"
#include "engine/kernels/quant_types.h"
#include "engine/thread_pool.h"
#include "kvferry/common/half.h"

namespace kvferry::engine::kernels {
namespace {

using formats::DType;
using testing_util::RandomFloats;

constexpr DType kKTypes[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::vector<std::byte> KWeightBytes(DType dtype, int64_t n, int64_t k, uint64_t seed) {
  const std::vector<float> w = RandomFloats(n * k, seed);
  std::vector<std::byte> out(static_cast<size_t>(n * k / 256 * formats::DTypeBlockBytes(dtype)));
  QuantizeRow(dtype, w.data(), n * k, out.data());
  return out;
}

// ggml's quantize_row_q8_K, written out here as the definition the quantizer's every path meets.
BlockQ8_K DefinitionQ8_K(const float* v) {
  BlockQ8_K o;
  std::memset(&o, 0, sizeof(o));
  float max = 0, amax = 0;
  for (int i = 0; i < 256; ++i) {
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  }
  if (amax == 0) return o;
  const float iscale = -127.f / max;
  for (int i = 0; i < 256; ++i) {
    const float r = iscale * v[i];
    const float c = r != r ? 0.0f : std::clamp(r, -4194303.0f, 4194303.0f);
    o.q[i] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(c)), -128, 127));
    o.bsums[i / 16] = static_cast<int16_t>(o.bsums[i / 16] + o.q[i]);
  }
  o.d = 1 / iscale;
  return o;
}

TEST(QuantQ8_KTest, ActivationQuantizerEqualsItsDefinition) {
  constexpr int kBlocks = 48;
  std::vector<float> x = RandomFloats(256 * kBlocks, 12);
  for (int i = 0; i < 256; ++i) x[256 + i] = -127.5f + i;         // block 1: ties at every step
  x[256 + 255] = 127.0f;                                          // (-127 / max = 1: half-even)
  std::fill(x.begin() + 512, x.begin() + 768, 0.0f);              // block 2: zeros
  for (int i = 0; i < 256; ++i) x[768 + i] = (i - 128) * 1e-41f;  // block 3: -127 / max = inf
  x[1024 + 5] = std::nanf("");                                    // block 4: a NaN
  x[1280 + 7] = -std::numeric_limits<float>::infinity();          // block 5: an infinity
  x[1536 + 9] = 3.0f;                                             // block 6: +max first, -max after
  x[1536 + 90] = -3.0f;
  x[1792 + 4] = -3.0f;  // block 7: -max first, +max after
  x[1792 + 200] = 3.0f;
  std::vector<BlockQ8_K> got(kBlocks);
  QuantizeActivationsQ8_K(x.data(), 256 * kBlocks, got.data());
  for (int b = 0; b < kBlocks; ++b) {
    const BlockQ8_K want = DefinitionQ8_K(x.data() + 256 * b);
    EXPECT_EQ(0, std::memcmp(&got[b], &want, sizeof(want))) << "block " << b;
  }
}

TEST(QuantQ8_KTest, ScaleFromTheFirstLargestValueAndHalvesToEven) {
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;  // the first of largest magnitude: iscale = -127 / -127 = 1
  x[1] = 127.0f;
  x[2] = 2.5f;   // -> 2
  x[3] = 3.5f;   // -> 4
  x[4] = -0.5f;  // -> 0
  x[17] = 5.0f;
  BlockQ8_K b;
  QuantizeActivationsQ8_K(x.data(), 256, &b);
  EXPECT_EQ(b.d, 1.0f);
  EXPECT_EQ((std::vector<int>{b.q[0], b.q[1], b.q[2], b.q[3], b.q[4], b.q[17]}),
            (std::vector<int>{-127, 127, 2, 4, 0, 5}));
  EXPECT_EQ(b.bsums[0], -127 + 127 + 2 + 4);
  EXPECT_EQ(b.bsums[1], 5);
  // A positive maximum gives a negative d: q = -127 for it, and d * q still the value.
  x[0] = 254.0f;
  QuantizeActivationsQ8_K(x.data(), 256, &b);
  EXPECT_EQ(b.d, -2.0f);
  EXPECT_EQ(b.q[0], -127);
  std::vector<float> zeros(256, 0.0f);
  QuantizeActivationsQ8_K(zeros.data(), 256, &b);
  EXPECT_EQ(b.d, 0.0f);
  for (int16_t s : b.bsums) EXPECT_EQ(s, 0);
}

// Q4_K's 12 scale bytes written as the layout says (not through the quantizer's packing):
// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums); 4-7 in the nibbles
// of bytes 8-11, their top two bits in the top bits of bytes 0-3 and 4-7.
void PackScalesByHand(const int sc[8], const int mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

TEST(QuantQ4_KTest, DecodesTheLayoutByHand) {
  const int sc[8] = {1, 2, 3, 63, 17, 40, 5, 33}, mn[8] = {0, 4, 9, 63, 20, 1, 48, 2};
  BlockQ4_K b;
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  PackScalesByHand(sc, mn, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<float> got(256);
  DequantizeRowQ4_K(&b, 256, got.data());
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = b.qs[32 * c + l] & 0xF, hi = b.qs[32 * c + l] >> 4;
      EXPECT_EQ(got[64 * c + l], 0.5f * sc[2 * c] * lo - 0.25f * mn[2 * c]) << c << " " << l;
      EXPECT_EQ(got[64 * c + 32 + l], 0.5f * sc[2 * c + 1] * hi - 0.25f * mn[2 * c + 1]);
    }
  }
}

TEST(QuantQ5_KTest, FifthBitsComeFromQhByPairs) {
  const int sc[8] = {1, 1, 1, 1, 1, 1, 1, 1}, mn[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  BlockQ5_K b;
  b.d = F32ToF16(1.0f);
  b.dmin = 0;
  PackScalesByHand(sc, mn, b.scales);
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.qh, 0, sizeof(b.qh));
  b.qh[3] = 0x01;   // value 3 (chunk 0, low half)
  b.qh[4] = 0x08;   // value 64 + 32 + 4 (chunk 1, high half)
  b.qh[31] = 0x80;  // value 192 + 32 + 31
  b.qs[32 * 3 + 31] = 0xF0;
  std::vector<float> got(256);
  DequantizeRowQ5_K(&b, 256, got.data());
  for (int i = 0; i < 256; ++i) {
    const float want = i == 3 || i == 100 ? 16.0f : i == 255 ? 31.0f : 0.0f;
    EXPECT_EQ(got[i], want) << i;
  }
}

TEST(QuantQ6_KTest, DecodesTheLayoutByHand) {
  BlockQ6_K b;
  b.d = F32ToF16(0.5f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(g * 17 - 128);
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 29 + 3);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 53 + 7);
  std::vector<float> got(256);
  DequantizeRowQ6_K(&b, 256, got.data());
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* ql = b.ql + 64 * h;
      const int qh = b.qh[32 * h + l];
      const int q[4] = {
          (ql[l] & 0xF) | ((qh & 3) << 4), (ql[l + 32] & 0xF) | (((qh >> 2) & 3) << 4),
          (ql[l] >> 4) | (((qh >> 4) & 3) << 4), (ql[l + 32] >> 4) | (((qh >> 6) & 3) << 4)};
      for (int part = 0; part < 4; ++part) {
        const int i = 128 * h + 32 * part + l;
        EXPECT_EQ(got[i], 0.5f * b.scales[i / 16] * (q[part] - 32)) << i;
      }
    }
  }
}

// The quantizers' round trip on uniform [-1, 1) values: the RMS error of each type's bits.
TEST(QuantKTest, ReferenceQuantizersRoundTrip) {
  const std::vector<float> x = RandomFloats(8192, 5);
  const std::pair<DType, double> bounds[] = {
      {DType::kQ4_K, 0.045}, {DType::kQ5_K, 0.022}, {DType::kQ6_K, 0.011}};
  for (const auto& [dtype, rms_bound] : bounds) {
    std::vector<std::byte> blocks(8192 / 256 * formats::DTypeBlockBytes(dtype));
    QuantizeRow(dtype, x.data(), 8192, blocks.data());
    std::vector<float> back(8192);
    DequantizeRow(dtype, blocks.data(), 8192, back.data());
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (back[i] - x[i]) * (back[i] - x[i]);
    const double rms = std::sqrt(se / 8192);
    EXPECT_LT(rms, rms_bound) << formats::DTypeName(dtype);
    EXPECT_GT(rms, rms_bound / 4) << formats::DTypeName(dtype) << ": suspiciously exact";
    // All zeros (and a NaN among them) give a defined all-zero block.
    std::vector<float> zeros(256, 0.0f);
    zeros[9] = std::nanf("");
    QuantizeRow(dtype, zeros.data(), 256, blocks.data());
    DequantizeRow(dtype, blocks.data(), 256, back.data());
    for (int i = 0; i < 256; ++i) EXPECT_TRUE(std::isfinite(back[i])) << i;
  }
}

TEST(QuantKTest, FindsANonFiniteScaleOrMinimumScale) {
  std::vector<std::byte> q4 = KWeightBytes(DType::kQ4_K, 2, 512, 6);
  const WeightMatrix m4{DType::kQ4_K, q4.data(), 2, 512};
  EXPECT_EQ(FirstNonFiniteBlockScale(m4), -1);
  q4[2 * 144 + 3] = std::byte{0x7c};  // block 2's dmin: +inf
  EXPECT_EQ(FirstNonFiniteBlockScale(m4), 2);
  std::vector<std::byte> q6 = KWeightBytes(DType::kQ6_K, 2, 512, 6);
  q6[3 * 210 + 209] = std::byte{0xfe};  // block 3's d (the last two bytes): NaN
  EXPECT_EQ(FirstNonFiniteBlockScale({DType::kQ6_K, q6.data(), 2, 512}), 3);
}

void ExpectEveryKPathEqualsTheDefinition(DType dtype, int64_t M, int64_t K, int64_t N,
                                         ThreadPool* pool) {
  const std::vector<float> x = RandomFloats(M * K, 1);
  const std::vector<std::byte> wb = KWeightBytes(dtype, N, K, 2);
  const WeightMatrix w{dtype, wb.data(), N, K};
  QuantizedRowsK xq;
  QuantizeRowsK(x.data(), M, K, K, &xq);
  std::vector<float> ref(M * N), y(M * N);
  KQuantReference(xq, w, ref.data(), N);
  for (MatMulPath path :
       {MatMulPath::kPortable, MatMulPath::kF16c, MatMulPath::kAvx512, MatMulPath::kAmx}) {
    ForceMatMulPathForTest(path);
    MatMul(x.data(), M, K, {&w, 1}, y.data(), pool);
    ForceMatMulPathForTest(MatMulPath::kAuto);
    ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4))
        << formats::DTypeName(dtype) << " M=" << M << " K=" << K << " N=" << N << " path "
        << static_cast<int>(path);
  }
  // And close to the f64 product of what the blocks hold (x as its Q8_K values d * q).
  const std::vector<float> wd = ToF32(w);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const BlockQ8_K& xb = xq.blocks[m * (K / 256) + k / 256];
        s += double(xb.d) * xb.q[k % 256] * wd[n * K + k];
      }
      ASSERT_NEAR(y[m * N + n], s, 1e-4 * (1 + std::sqrt(double(K))));
    }
  }
}

TEST(QuantKMatMulTest, EveryPathEqualsTheDefinitionBitForBit) {
  ThreadPool pool(2);
  for (DType dtype : kKTypes) {
    for (int64_t M : {1, 2, 7, 16, 64, 300}) {
      for (int64_t K : {256, 768}) {
        for (int64_t N : {1, 13, 40}) ExpectEveryKPathEqualsTheDefinition(dtype, M, K, N, &pool);
      }
    }
  }
}

TEST(QuantKMatMulTest, RowDoesNotDependOnBatchThreadsOrParts) {
  const int64_t K = 512;
  const std::vector<float> x = RandomFloats(40 * K, 3);
  const std::vector<std::byte> q4 = KWeightBytes(DType::kQ4_K, 24, K, 4);
  const std::vector<std::byte> q6 = KWeightBytes(DType::kQ6_K, 16, K, 5);
  std::vector<std::byte> q8_0(8 * K / 32 * 34);
  const std::vector<float> q8f = RandomFloats(8 * K, 6);
  QuantizeRow(DType::kQ8_0, q8f.data(), 8 * K, q8_0.data());
  const std::vector<float> wf = RandomFloats(8 * K, 7);
  // As a Q4_K_M layer's q, k, v: Q4_K, Q4_K and Q6_K parts, with Q8_0 and F32 ones beside them.
  const WeightMatrix parts[] = {{DType::kQ4_K, q4.data(), 24, K},
                                {DType::kQ6_K, q6.data(), 16, K},
                                {DType::kQ8_0, q8_0.data(), 8, K},
                                F32Matrix(wf.data(), 8, K)};
  const int64_t width = 24 + 16 + 8 + 8;
  std::vector<float> alone(width);
  MatMul(x.data() + 17 * K, 1, K, parts, alone.data(), nullptr);
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

TEST(QuantKMatMulTest, ASuperBlockAlignedColumnSliceComputesItsKSlice) {
  // A row-parallel leaf: columns [256, 768) of W against the same columns of x.
  const int64_t M = 5, K = 1024, N = 16, first = 256, width = 512;
  for (DType dtype : kKTypes) {
    const std::vector<float> x = RandomFloats(M * K, 7);
    const std::vector<std::byte> wb = KWeightBytes(dtype, N, K, 8);
    const WeightMatrix full{dtype, wb.data(), N, K};
    const WeightMatrix slice = ColumnSlice(full, first, width);
    std::vector<float> y(M * N), ref(M * N);
    MatMulStrided(x.data() + first, M, width, K, {&slice, 1}, y.data(), N, nullptr);
    std::vector<std::byte> dense;
    for (int64_t n = 0; n < N; ++n) {
      const std::byte* from = full.row(n) + full.bytes_of(first);
      dense.insert(dense.end(), from, from + full.bytes_of(width));
    }
    std::vector<float> xs(M * width);
    for (int64_t m = 0; m < M; ++m) std::memcpy(&xs[m * width], &x[m * K + first], width * 4);
    QuantizedRowsK xq;
    QuantizeRowsK(xs.data(), M, width, width, &xq);
    KQuantReference(xq, {dtype, dense.data(), N, width}, ref.data(), N);
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << formats::DTypeName(dtype);
  }
}

}  // namespace
}  // namespace kvferry::engine::kernels
