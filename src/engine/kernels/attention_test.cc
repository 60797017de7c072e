#include "engine/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/thread_pool.h"
#include "kvferry/kv/cache_spec.h"

namespace kvferry::engine::kernels {
namespace {

// Three KV heads: a decode query's heads split 1 + 2 over two tasks, so runs of single queries
// (split 1 below) walk one head and several heads per task.
constexpr int32_t kHeads = 6, kKvHeads = 3, kDim = 32, kLen = 70;

using testing_util::RandomFloats;

struct Fixture {
  std::unique_ptr<kv::KvCache> cache;
  std::vector<kv::KernelBlockId> table;
  KvLayerView view;
  int32_t dim = kDim;
};

// A one-layer cache of the given geometry holding K/V for kLen positions, whose kernel blocks
// are scattered (reverse order, with gaps) to prove the table is honoured.
Fixture Make(int32_t block_size_kernel, kv::Layout layout, kv::DType dtype, int32_t dim = kDim) {
  Fixture f;
  f.dim = dim;
  const int32_t needed = (kLen + block_size_kernel - 1) / block_size_kernel;
  kv::CacheSpec spec;
  spec.num_layers = 1;
  spec.num_kv_heads = kKvHeads;
  spec.head_dim = dim;
  spec.dtype = dtype;
  spec.layout = layout;
  spec.block_size_kernel = block_size_kernel;
  spec.num_blocks_kernel = 2 * needed + 1;
  auto cache = kv::KvCache::Allocate(spec);
  EXPECT_TRUE(cache.ok()) << cache.status();
  f.cache = std::move(*cache);
  for (int32_t i = 0; i < needed; ++i) f.table.push_back(kv::KernelBlockId(2 * (needed - i)));
  f.view = LayerView(*f.cache, 0);
  const auto k = RandomFloats(kLen * kKvHeads * dim, 11, -2.0f, 2.0f);
  const auto v = RandomFloats(kLen * kKvHeads * dim, 12, -2.0f, 2.0f);
  for (int32_t p = 0; p < kLen; ++p) {
    StoreKv(f.view, f.table.data(), p, &k[p * kKvHeads * dim], &v[p * kKvHeads * dim]);
  }
  return f;
}

std::vector<float> RunAttention(const Fixture& f, const std::vector<float>& q, ThreadPool* pool,
                                int32_t split) {
  std::vector<float> out(q.size(), 0.0f);
  std::vector<AttentionSequence> seqs;
  if (split == 0) {
    seqs.push_back({f.table.data(), 0, kLen, 0});
  } else {
    // Same queries as several runs (as chunked prefill / batching would present them).
    for (int32_t p = 0; p < kLen; p += split) {
      seqs.push_back({f.table.data(), p, std::min(split, kLen - p), p});
    }
  }
  Attention(f.view, seqs, q.data(), kHeads, 1.0f / std::sqrt(float(f.dim)), out.data(), pool);
  return out;
}

TEST(AttentionTest, MatchesReferenceForEveryGeometryAndDtype) {
  const auto q = RandomFloats(kLen * kHeads * kDim, 5, -2.0f, 2.0f);
  for (kv::DType dtype : {kv::DType::kF32, kv::DType::kF16, kv::DType::kBF16}) {
    for (int32_t bs : {16, 32, 64, 128}) {
      for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
        Fixture f = Make(bs, layout, dtype);
        const auto out = RunAttention(f, q, nullptr, 0);
        std::vector<float> ref(q.size());
        std::vector<AttentionSequence> seqs = {{f.table.data(), 0, kLen, 0}};
        AttentionReference(f.view, seqs, q.data(), kHeads, 1.0f / std::sqrt(float(kDim)),
                           ref.data());
        for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << i;
      }
    }
  }
}

TEST(AttentionTest, BitIdenticalAcrossGeometryChunkingAndThreads) {
  const auto q = RandomFloats(kLen * kHeads * kDim, 6, -2.0f, 2.0f);
  ThreadPool pool(2);
  for (kv::DType dtype : {kv::DType::kF32, kv::DType::kF16, kv::DType::kBF16}) {
    Fixture base = Make(16, kv::Layout::kNHD, dtype);
    const auto expected = RunAttention(base, q, nullptr, 0);
    for (int32_t bs : {16, 32, 64, 128}) {
      for (kv::Layout layout : {kv::Layout::kNHD, kv::Layout::kHND}) {
        Fixture f = Make(bs, layout, dtype);
        for (int32_t split : {0, 1, 7, 16, 33}) {
          const auto out = RunAttention(f, q, &pool, split);
          ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), out.size() * 4))
              << "bs=" << bs << " layout=" << int(layout) << " split=" << split
              << " dtype=" << int(dtype);
        }
      }
    }
  }
}

// The AVX2 copy (where the CPU has it) and the baseline-ISA copy give the same bits.
TEST(AttentionTest, PortableAndAvx2CopiesAgreeBitForBit) {
  const auto q = RandomFloats(kLen * kHeads * kDim, 7, -2.0f, 2.0f);
  for (kv::DType dtype : {kv::DType::kF32, kv::DType::kF16, kv::DType::kBF16}) {
    Fixture f = Make(32, kv::Layout::kHND, dtype);
    for (int32_t split : {0, 1}) {
      const auto fast = RunAttention(f, q, nullptr, split);
      ForcePortableAttentionForTest(true);
      const auto portable = RunAttention(f, q, nullptr, split);
      ForcePortableAttentionForTest(false);
      ASSERT_EQ(0, std::memcmp(fast.data(), portable.data(), fast.size() * 4))
          << "dtype=" << int(dtype) << " split=" << split;
    }
  }
}

// The header's order written out with scalar fused multiply-adds: per chunk of kAttentionChunk
// keys, each score a dot in 8 lanes combined as ((0+1)+(2+3))+((4+5)+(6+7)) then the tail, the
// running maximum and sum, the accumulator scaled then one fused multiply-add per key.
std::vector<float> DefinitionAttention(const Fixture& f, const std::vector<float>& q) {
  const int32_t d = f.dim, group = kHeads / kKvHeads;
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> out(q.size()), k(d), v(d);
  for (int32_t p = 0; p < kLen; ++p) {
    for (int32_t h = 0; h < kHeads; ++h) {
      const float* qh = q.data() + (p * kHeads + h) * d;
      float mx = -std::numeric_limits<float>::infinity(), sum = 0;
      std::vector<float> acc(d, 0.0f);
      for (int32_t j0 = 0; j0 <= p; j0 += kAttentionChunk) {
        const int32_t n = std::min(kAttentionChunk, p + 1 - j0);
        std::vector<float> s(n);
        float chunk_max = -std::numeric_limits<float>::infinity();
        for (int32_t j = 0; j < n; ++j) {
          LoadHead(f.view, f.view.k, f.table.data(), j0 + j, h / group, k.data());
          float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (int32_t x = 0; x < d / 8 * 8; ++x) lane[x % 8] = std::fma(qh[x], k[x], lane[x % 8]);
          float dot = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                      ((lane[4] + lane[5]) + (lane[6] + lane[7]));
          for (int32_t x = d / 8 * 8; x < d; ++x) dot = std::fma(qh[x], k[x], dot);
          s[j] = dot * scale;
          chunk_max = std::max(chunk_max, s[j]);
        }
        const float m_new = std::max(mx, chunk_max);
        const float alpha = std::exp(mx - m_new);
        sum *= alpha;
        for (float& a : acc) a *= alpha;
        for (int32_t j = 0; j < n; ++j) {
          const float e = std::exp(s[j] - m_new);
          sum += e;
          LoadHead(f.view, f.view.v, f.table.data(), j0 + j, h / group, v.data());
          for (int32_t x = 0; x < d; ++x) acc[x] = std::fma(e, v[x], acc[x]);
        }
        mx = m_new;
      }
      for (int32_t x = 0; x < d; ++x) out[(p * kHeads + h) * d + x] = acc[x] / sum;
    }
  }
  return out;
}

// Every copy (AVX2 and baseline, prefill tiles and decode in place) is that definition bit for
// bit, at head sizes that take each of its column paths: 64-column register blocks, 8-column
// vectors, a scalar tail.
TEST(AttentionTest, EveryCopyIsTheDefinitionAtEveryHeadSize) {
  for (int32_t dim : {8, 36, 72, 128}) {
    Fixture f = Make(16, kv::Layout::kNHD, kv::DType::kF32, dim);
    const auto q = RandomFloats(kLen * kHeads * dim, 8, -2.0f, 2.0f);
    const auto want = DefinitionAttention(f, q);
    for (bool portable : {false, true}) {
      ForcePortableAttentionForTest(portable);
      for (int32_t split : {0, 1}) {
        const auto got = RunAttention(f, q, nullptr, split);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << "dim=" << dim << " portable=" << portable << " split=" << split;
      }
      ForcePortableAttentionForTest(false);
    }
  }
}

TEST(AttentionTest, StoredDtypeRoundsValues) {
  Fixture f = Make(16, kv::Layout::kNHD, kv::DType::kBF16);
  std::vector<float> k(kDim);
  LoadHead(f.view, f.view.k, f.table.data(), 5, 1, k.data());
  const auto orig = RandomFloats(kLen * kKvHeads * kDim, 11, -2.0f, 2.0f);
  for (int32_t i = 0; i < kDim; ++i) {
    const float o = orig[(5 * kKvHeads + 1) * kDim + i];
    EXPECT_NEAR(k[i], o, std::abs(o) / 128.0f);
    uint32_t bits;
    std::memcpy(&bits, &k[i], 4);
    EXPECT_EQ(bits & 0xffffu, 0u);  // a bf16 value widened
  }
}

}  // namespace
}  // namespace kvferry::engine::kernels
